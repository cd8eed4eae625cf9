"""Worked example of docs/bench.md: a suite replayed against the tests' fake server.

    python scripts/bench_demo.py SUITE_DIR OUT_DIR

Runs ``distprompt bench`` against ``tests/bench_server.py`` (no accelerator needed): SGLang with
speculation, vLLM reporting only Prometheus counters, and SGLang without speculation as the
baseline, then ``bench-compare``. Then the production run: mixed traffic and per-source windows
at concurrency 1-64 with ``--flush-cache`` against a server that exposes ``/server_info``
(``max_running_requests`` 48) and whose verify steps cost more the more requests share them
(``batch_cost``), with and without speculation, ``bench-compare`` with its advice, a warm rerun
without flushing (the cache warnings) and a comparison refused for its different traffic. The
server's acceptance per source is made up (see ACCEPT); latencies are those of a Python test
server and mean nothing about real ones.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from distprompt import Suite
from distprompt.cli import main

from bench_server import Behaviour, FakeServer

ACCEPT = {
    "deepswekimi": 1.8,
    "glaive": 3.2,
    "kimik25": 2.0,
    "magicoder": 2.6,
    "mixturethoughts": 2.2,
    "opencodeinstruct": 2.8,
    "openthoughts": 2.3,
    "sharegpt": 1.9,
    "sweagent": 1.6,
    "ultrachat": 2.0,
}


def run() -> int:
    suite, out = Path(sys.argv[1]), Path(sys.argv[2])
    items = Suite.load(suite).items
    common = ["--concurrency", "1,4", "--max-items", "5", "--no-progress", "--overwrite"]
    beh = {"first_delay": 0.002, "step_delay": 0.0005}
    runs = [  # label, API, server behaviour
        ("eagle3", "sglang", {}),
        ("vllm-counters", "vllm", {"per_request_metrics": False}),
        ("base", "sglang", {"spec": False}),
    ]
    rc = 0
    for label, api, extra in runs:
        with FakeServer(items, Behaviour(accept=ACCEPT, **beh, **extra)) as srv:
            args = ["--url", srv.url, "--api", api, "--label", label, "--out", str(out / label)]
            rc |= main(["bench", str(suite), *args, *common])
    rc |= main(["bench-compare", str(out / "eagle3"), "--baseline", str(out / "base")])
    return rc | production(suite, items, out)


def production(suite: Path, items: list, out: Path) -> int:
    """Mixed traffic at 1-64 against a capped server whose batches cost, and the traps."""
    beh = {
        "first_delay": 0.002,
        "step_delay": 0.005,
        "batch_cost": 0.04,
        "server_info": True,
        "max_running_requests": 48,
        "lifetime": 1800.0,
        "max_requests": 100000,
    }
    common = ["--max-items", "3", "--no-progress", "--overwrite", "--api", "sglang"]
    prod = ["--concurrency", "1,4,16,64", "--traffic", "both", "--mixed-requests", "96"]
    rc = 0
    for label, spec in (("prod-eagle3", True), ("prod-base", False)):
        with FakeServer(items, Behaviour(accept=ACCEPT, spec=spec, **beh)) as srv:
            args = ["--url", srv.url, "--label", label, "--out", str(out / label)]
            rc |= main(["bench", str(suite), *args, *common, *prod, "--flush-cache"])
            if spec:  # the same server again, warm, without flushing: the cache warnings
                args = ["--url", srv.url, "--label", "warm", "--out", str(out / "warm")]
                rc |= main(["bench", str(suite), *args, *common, "--concurrency", "1,4"])
    rc |= main(["bench-compare", str(out / "prod-eagle3"), "--baseline", str(out / "prod-base")])
    # refused: the warm run replayed per-source windows only (exit 2, the difference named)
    main(["bench-compare", str(out / "prod-eagle3"), "--baseline", str(out / "warm")])
    return rc


if __name__ == "__main__":
    sys.exit(run())
