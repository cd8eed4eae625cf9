"""Multi-node for real: a Ray cluster started with the ``ray`` CLI — a head and a second node
joined by its address, one CPU each — and the export CLI run against it with ``--ray-address``
writes the local engine's files byte for byte, with tasks run on both nodes.

Both nodes run on this machine (two raylets, two object stores, one GCS): what crosses between
them is what crosses between machines — task arguments, partials fetched from the other node's
object store, the shared tokenizer object — only the network is the loopback.

The nodes are stopped through their ``ray start --block`` processes (SIGTERM: they stop the Ray
processes they started), not with ``ray stop``, which stops every Ray of this user on the machine
(a developer's own cluster, another test run's); what is left after that, found by the temporary
directory in its command line, is killed by process id.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import distprompt

from conftest import SAMPLES_DIR

pytest.importorskip(
    "ray", reason="Ray is not installed: pip install -e '.[test]' (it brings distprompt[ray])"
)

#: Seconds for a node to start, and for the cluster to show both nodes (a busy 2-core CI box).
START_TIMEOUT = 180
#: Seconds for one export of data_samples (~10 s on an idle 2-core machine).
EXPORT_TIMEOUT = 900

# Waits until the cluster at argv[1] has argv[2] live nodes; prints their ids (the head's first)
# and CPUs as JSON.
_PROBE = """
import json, logging, sys, time
import ray
ray.init(address=sys.argv[1], logging_level=logging.ERROR, log_to_driver=False)
deadline = time.monotonic() + float(sys.argv[3])
while True:
    alive = [n for n in ray.nodes() if n["Alive"]]
    if len(alive) >= int(sys.argv[2]) or time.monotonic() > deadline:
        break
    time.sleep(0.5)
alive.sort(key=lambda n: "node:__internal_head__" not in n["Resources"])
print(json.dumps({n["NodeID"]: n["Resources"].get("CPU", 0) for n in alive}))
"""

# Holds the CPU of node argv[2] with a task until the file argv[4] exists (argv[3]: written once
# the task runs).
_HOLD = """
import logging, os, sys, time
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(address=sys.argv[1], logging_level=logging.ERROR, log_to_driver=False)

@ray.remote(num_cpus=1)
def hold(held, release):
    open(held, "w").close()
    while not os.path.exists(release):
        time.sleep(0.2)

where = NodeAffinitySchedulingStrategy(sys.argv[2], soft=False)
ray.get(hold.options(scheduling_strategy=where).remote(sys.argv[3], sys.argv[4]))
"""


@dataclass(frozen=True)
class RayNodes:
    """A running cluster: its address, node ids (head first), session files and the environment
    its drivers need."""

    address: str
    nodes: tuple[str, ...]
    temp_dir: Path
    env: dict[str, str]

    @property
    def logs(self) -> Path:
        return self.temp_dir / "session_latest" / "logs"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _ray_cli() -> list[str]:
    exe = Path(sys.executable).with_name("ray")
    if exe.is_file():
        return [str(exe)]
    found = shutil.which("ray")
    if found is None:
        pytest.fail("Ray is installed but not its `ray` command (next to python or on PATH)")
    return [found]


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} not written)"


def _cluster_env(temp_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    # test_engine sets this to "0" in this process (a private Ray on 127.0.0.1): "0" forbids a
    # second node. A RAY_ADDRESS would point the drivers elsewhere.
    for name in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_ADDRESS"):
        env.pop(name, None)
    # With a token in ~/.ray and no RAY_AUTH_MODE, `ray start` turns token authentication on and
    # a driver without RAY_AUTH_MODE=token is refused: each cluster here sets the mode.
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env["HF_HUB_OFFLINE"] = "1"
    # The workers (started by the raylets with this environment) import this distprompt.
    src = str(Path(distprompt.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    env["RAY_TMPDIR"] = str(temp_dir)
    return env


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a ``ray start --block`` process and the Ray processes it started."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: the group is this node's
            proc.wait(timeout=30)


def _kill_leftovers(temp_dir: Path) -> None:
    """Kill, by process id, the processes whose command line names this cluster's directory."""
    import psutil  # a dependency of Ray

    mark = str(temp_dir)
    for p in psutil.process_iter(["pid", "cmdline"]):
        if p.info["pid"] != os.getpid() and any(mark in a for a in p.info["cmdline"] or ()):
            with contextlib.suppress(psutil.Error):
                p.kill()


@contextlib.contextmanager
def _ray_cluster(nodes: int, auth: dict[str, str]) -> Iterator[RayNodes]:
    """A head and ``nodes - 1`` nodes joined by its address, one CPU each, with ``auth`` (the
    RAY_AUTH_* variables) in their environment and in the drivers'."""
    # Short: Ray's socket paths live under it and a Unix socket path holds at most 107 bytes.
    temp_dir = Path(tempfile.mkdtemp(prefix="dp-ray-", dir="/tmp"))
    env = {**_cluster_env(temp_dir), **auth}
    port = _free_port()
    address = f"127.0.0.1:{port}"
    common = [
        "--block",
        "--num-cpus=1",
        "--disable-usage-stats",
        f"--temp-dir={temp_dir}",
        "--node-ip-address=127.0.0.1",
        "--object-store-memory=100000000",
    ]
    head_cmd = [
        *_ray_cli(),
        "start",
        "--head",
        f"--port={port}",
        "--include-dashboard=false",
        f"--dashboard-port={_free_port()}",
        f"--dashboard-agent-listen-port={_free_port()}",
        *common,
    ]
    procs: list[subprocess.Popen[bytes]] = []

    def start(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        procs.append(proc)
        return proc

    try:
        head = start(head_cmd, temp_dir / "head.log")
        # `ray start` writes the cluster's address to this file once the head is up.
        deadline = time.monotonic() + START_TIMEOUT
        while not (temp_dir / "ray_current_cluster").is_file():
            if head.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"ray start --head: expected the head up within {START_TIMEOUT} s, found "
                    f"{'it exited' if head.poll() is not None else 'no address file'}; its "
                    f"log:\n{_tail(temp_dir / 'head.log')}"
                )
            time.sleep(0.5)
        for i in range(1, nodes):
            node_cmd = [
                *_ray_cli(),
                "start",
                f"--address={address}",
                f"--dashboard-agent-listen-port={_free_port()}",
                *common,
            ]
            start(node_cmd, temp_dir / f"node{i}.log")
        probe = subprocess.run(
            [sys.executable, "-c", _PROBE, address, str(nodes), str(START_TIMEOUT)],
            capture_output=True,
            text=True,
            env=env,
            timeout=START_TIMEOUT + 60,
        )
        found = json.loads(probe.stdout.strip().splitlines()[-1]) if probe.returncode == 0 else {}
        if len(found) != nodes or any(p.poll() is not None for p in procs):
            pytest.fail(
                f"ray start: expected a cluster of {nodes} nodes at {address}, found "
                f"{found or probe.stderr[-2000:]}; the last node's log:\n"
                f"{_tail(temp_dir / (f'node{nodes - 1}.log' if nodes > 1 else 'head.log'))}"
            )
        assert list(found.values()) == [1] * nodes
        yield RayNodes(address, tuple(found), temp_dir, env)
    finally:
        for proc in reversed(procs):
            _stop(proc)
        _kill_leftovers(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def ray_nodes() -> Iterator[RayNodes]:
    """Two nodes; token authentication off, whatever ~/.ray holds (see _cluster_env)."""
    with _ray_cluster(2, {"RAY_AUTH_MODE": "disabled"}) as cluster:
        yield cluster


def _export(args: list[str], env: dict[str, str], out: Path) -> None:
    cmd = [sys.executable, "-m", "distprompt", "export", *args, "--out", str(out)]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=EXPORT_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(cmd[3:])}: expected to finish within {EXPORT_TIMEOUT} s: {exc}")
    assert run.returncode == 0, f"{' '.join(cmd[3:])} exited {run.returncode}:\n{run.stderr}"


def _files(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}


def _minus(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: n - before.get(k, 0) for k, n in after.items() if n > before.get(k, 0)}


def _tasks_per_node(logs: Path, task: str) -> dict[str, int]:
    """How many ``task`` tasks each node's workers ran, from Ray's session logs: a worker's
    ``worker-ID-JOB-PID.out`` names each task it runs (``:task_name:NAME``), and its
    ``python-core-worker-ID_PID.log`` the node it belongs to (``node_id=…``)."""
    per_node: dict[str, int] = {}
    for out in logs.glob("worker-*.out"):
        worker = out.name.split("-")[1]
        ran = out.read_text(errors="replace").count(f":task_name:{task}\n")
        core = next(logs.glob(f"python-core-worker-{worker}_*.log"), None)
        m = re.search(r"node_id=([0-9a-f]+)", core.read_text(errors="replace")) if core else None
        if ran and m:
            per_node[m[1]] = per_node.get(m[1], 0) + ran
    return per_node


@pytest.mark.slow  # a two-node cluster (~10 s to start) and two exports of data_samples
def test_export_on_a_two_node_cluster_writes_the_local_files(
    ray_nodes: RayNodes, tmp_path: Path, qwen_dir: Path
) -> None:
    data = SAMPLES_DIR / "prepared"
    common = [str(data), "--tokenizer", str(qwen_dir), "--per-source", "3", "--no-progress"]
    _export(common, ray_nodes.env, tmp_path / "local")
    before = _tasks_per_node(ray_nodes.logs, "_scan_star")
    _export(
        [*common, "--engine", "ray", "--ray-address", ray_nodes.address],
        ray_nodes.env,
        tmp_path / "ray",
    )
    local, on_ray = _files(tmp_path / "local"), _files(tmp_path / "ray")
    assert "suite.jsonl" in local
    assert sorted(on_ray) == sorted(local)
    for name in local:
        assert on_ray[name] == local[name], name
    # The pass ran as tasks of this cluster, one per shard (which node took which is Ray's
    # choice: a worker that is up takes the queued tasks while another node starts one).
    ran = _minus(_tasks_per_node(ray_nodes.logs, "_scan_star"), before)
    assert set(ran) <= set(ray_nodes.nodes), ran
    assert sum(ran.values()) >= len(list(data.glob("*/tokenized_data.jsonl"))), ran


@pytest.mark.slow  # a two-node cluster and two passes over data_samples
def test_the_second_node_runs_the_pass_when_the_head_is_busy(
    ray_nodes: RayNodes, tmp_path: Path
) -> None:
    """With the head's one CPU held by another job, every task of the pass runs on the node that
    joined by address, and its partials travel from that node's object store to the driver."""
    data = str(SAMPLES_DIR / "prepared")
    env = ray_nodes.env
    cmd = [sys.executable, "-m", "distprompt", "inspect", data, "--json"]
    local = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=EXPORT_TIMEOUT)
    assert local.returncode == 0, local.stderr
    held, release = tmp_path / "held", tmp_path / "release"
    head, second = ray_nodes.nodes
    hold = subprocess.Popen(
        [sys.executable, "-c", _HOLD, ray_nodes.address, head, str(held), str(release)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not held.exists():
            if hold.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"expected a task holding the head's CPU, found none:\n{hold.stderr}")
            time.sleep(0.2)
        before = _tasks_per_node(ray_nodes.logs, "_scan_star")
        on_ray = subprocess.run(
            [*cmd, "--engine", "ray", "--ray-address", ray_nodes.address],
            capture_output=True,
            text=True,
            env=env,
            timeout=EXPORT_TIMEOUT,
        )
        ran = _minus(_tasks_per_node(ray_nodes.logs, "_scan_star"), before)
    finally:
        release.touch()
        try:
            hold.wait(timeout=60)
        except subprocess.TimeoutExpired:
            hold.kill()
            hold.wait()
    assert on_ray.returncode == 0, on_ray.stderr
    assert on_ray.stdout == local.stdout
    assert list(ran) == [second], ran
    assert ran[second] >= 10, ran


@pytest.mark.slow  # a one-node cluster, a driver refused (~3 s of retries) and one pass
def test_a_cluster_that_asks_for_a_token_says_so_and_takes_it() -> None:
    """Recent Ray turns token authentication on in ``ray start`` (when ~/.ray holds a token): a
    driver without it is told what to set, not that the cluster is unreachable; with it, the
    pass runs (what docs/scale.md tells users to do)."""
    import secrets

    token = secrets.token_hex(32)
    data = str(SAMPLES_DIR / "prepared")
    with _ray_cluster(1, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}) as cluster:
        cmd = [sys.executable, "-m", "distprompt", "inspect", data, "--json"]
        ray_args = ["--engine", "ray", "--ray-address", cluster.address]
        local = subprocess.run(
            cmd, capture_output=True, text=True, env=cluster.env, timeout=EXPORT_TIMEOUT
        )
        assert local.returncode == 0, local.stderr
        # Ray retries a refused connection for ~20 s; 3 here.
        env = {**cluster.env, "RAY_gcs_server_port_wait_time_s": "3"}
        env["RAY_AUTH_MODE"] = "disabled"  # what a driver without the setting uses
        del env["RAY_AUTH_TOKEN"]
        refused = subprocess.run(
            [*cmd, *ray_args], capture_output=True, text=True, env=env, timeout=EXPORT_TIMEOUT
        )
        assert refused.returncode != 0
        last = refused.stderr.strip().splitlines()[-1]
        assert last.startswith(f"error: {cluster.address}: expected the Ray cluster to accept"), (
            refused.stderr
        )
        assert "RAY_AUTH_MODE=token" in last
        taken = subprocess.run(
            [*cmd, *ray_args],
            capture_output=True,
            text=True,
            env=cluster.env,
            timeout=EXPORT_TIMEOUT,
        )
        assert taken.returncode == 0, taken.stderr
        assert taken.stdout == local.stdout
