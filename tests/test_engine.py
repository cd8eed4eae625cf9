"""The Ray engine: a real local Ray (2 CPUs) gives the local engine's files byte for byte."""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from distprompt import build_suite, inspect_corpus
from distprompt.cli import main
from distprompt.engine import Schedule
from distprompt.errors import ConfigError, DataError, InputError
from distprompt.read.readback import sampled_prompts
from distprompt.read.scan import SAMPLE, Partial, scan
from distprompt.read.shards import discover_shards, iter_lines

from conftest import SAMPLES_DIR
from factories import chat_rows, write_shard

# The Ray started here listens on 127.0.0.1 only (set before Ray is imported).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
ray = pytest.importorskip(
    "ray", reason="Ray is not installed: pip install -e '.[test]' (it brings distprompt[ray])"
)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """One real local Ray for the module: starting one takes seconds."""
    import logging

    if not ray.is_initialized():
        ray.init(
            address="local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING
        )
    # Ray workers unpickle the checks below by value: they cannot import this test module.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    ray.shutdown()


@pytest.fixture(scope="module")
def multi_shard(tmp_path_factory: pytest.TempPathFactory, qwen_tokenizer: Any) -> Path:
    """Three sources spread over nine shards (plain, gzip, zstd), duplicates across shards, one
    bad row and one blank line."""
    root = tmp_path_factory.mktemp("multi") / "prepared"
    rows = {src: chat_rows(qwen_tokenizer, src, n) for src, n in (("chat", 70), ("code", 45))}
    rows["tool"] = chat_rows(qwen_tokenizer, "tool", 20)
    suffixes = (".jsonl", ".jsonl.gz", ".jsonl.zst")
    for src, rs in rows.items():
        for i in range(3):
            part = rs[i::3] + rs[: 2 * (i + 1)]  # every shard repeats the source's first rows
            write_shard(root / src / f"part{i}{suffixes[i]}", part)
    bad = root / "chat" / "part0.jsonl"
    text = bad.read_text(encoding="utf-8").splitlines(keepends=True)
    text[4] = '{"input_ids": [1, 2], "source": "chat"}\n'  # missing keys: a bad row
    text.insert(7, "\n")
    bad.write_text("".join(text), encoding="utf-8")
    return root


def _files(out: Path) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()
    }


@pytest.mark.slow  # two full exports of data_samples (~40 s on 2 busy cores)
def test_export_on_ray_writes_the_local_files_on_data_samples(
    ray_cluster: None, tmp_path: Path, qwen_dir: Path
) -> None:
    data = str(SAMPLES_DIR / "prepared")
    common = ["--tokenizer", str(qwen_dir), "--per-source", "3", "--no-progress"]
    assert main(["export", data, *common, "--out", str(tmp_path / "local")]) == 0
    assert main(["export", data, *common, "--out", str(tmp_path / "ray"), "--engine", "ray"]) == 0
    local, on_ray = _files(tmp_path / "local"), _files(tmp_path / "ray")
    assert sorted(local) == sorted(on_ray)
    assert "suite.jsonl" in local
    for name in local:
        assert local[name] == on_ray[name], name


def test_build_suite_and_inspect_on_ray_match_local_on_many_shards(
    ray_cluster: None, tmp_path: Path, multi_shard: Path, qwen_dir: Path
) -> None:
    kw: dict[str, Any] = {
        "tokenizer": qwen_dir,
        "per_source": 4,
        "max_candidates": 12,  # smaller than every source: the pools saturate and merge
        "on_error": "skip",
    }
    local = build_suite(multi_shard, **kw)
    on_ray = build_suite(multi_shard, engine="ray", **kw)
    local.save(tmp_path / "local")
    on_ray.save(tmp_path / "ray")
    assert _files(tmp_path / "local") == _files(tmp_path / "ray")
    counts = on_ray.manifest.counts
    assert counts.skipped == {"missing_loss_mask": 1}
    assert counts.anomalies["blank_line"] == 1
    assert "engine" not in on_ray.manifest.config  # how the pass ran, not what it computed
    assert len(on_ray.manifest.corpus.shards) == 9
    ins_local = inspect_corpus(multi_shard, tokenizer=qwen_dir).to_dict(histograms=True)
    ins_ray = inspect_corpus(multi_shard, tokenizer=qwen_dir, engine="ray")
    assert ins_ray.to_dict(histograms=True) == ins_local


def test_first_bad_row_in_shard_order_is_the_error_on_ray(
    ray_cluster: None, tmp_path: Path, qwen_tokenizer: Any
) -> None:
    rows = chat_rows(qwen_tokenizer, "chat", 12)
    for i in range(4):
        path = write_shard(tmp_path / f"s{i}.jsonl", rows[i::4])
        if i in (1, 3):  # two broken shards: the first one in order is reported
            with path.open("a", encoding="utf-8") as fh:
                fh.write('{"input_ids": "x"}\n')
    shards = discover_shards(tmp_path)
    with pytest.raises(DataError) as local:
        scan(shards, max_candidates=5)
    with pytest.raises(DataError) as on_ray:
        scan(shards, max_candidates=5, schedule=Schedule(engine="ray"))
    assert str(on_ray.value) == str(local.value)
    assert on_ray.value.shard == "s1.jsonl"


@dataclass(frozen=True)
class KillWorker:
    """A row check that kills its own Ray worker process (SIGKILL) at a row of one shard (by
    line, or by byte offset inside a split shard) — once, when ``marker`` is given (the file
    records that it happened), else on every attempt."""

    shard: str
    line: int = 0
    marker: str | None = None
    offset: int | None = None

    def __call__(self, row: Any) -> tuple[str, ...]:
        p = row.provenance
        at = p.offset == self.offset if self.offset is not None else p.line == self.line
        if p.shard == self.shard and at:
            if self.marker is not None:
                try:
                    os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:
                    return ()
            os.kill(os.getpid(), signal.SIGKILL)
        return ()


def _same(a: Partial, b: Partial) -> None:
    assert sorted(a.stats) == sorted(b.stats)
    for src in a.stats:
        assert a.stats[src] == b.stats[src]
        ka, kb = a.pools[src].candidates(), b.pools[src].candidates()
        assert [(c.key, c.provenance, c.count) for c in ka] == [
            (c.key, c.provenance, c.count) for c in kb
        ]
    assert (a.tally, a.shard_rows) == (b.tally, b.shard_rows)


def test_a_killed_worker_is_retried_and_the_result_is_the_same(
    ray_cluster: None, tmp_path: Path, multi_shard: Path
) -> None:
    shards = discover_shards(multi_shard)
    marker = tmp_path / "killed"
    local = scan(shards, max_candidates=12, on_error="skip")
    killer = KillWorker(shard="code/part1.jsonl.gz", line=5, marker=str(marker))
    on_ray = scan(
        shards, max_candidates=12, on_error="skip", schedule=Schedule(engine="ray"), check=killer
    )
    assert marker.exists()  # the worker reading code/part1 was killed mid-shard
    _same(local, on_ray)
    assert on_ray.failed == {}


def test_a_shard_that_keeps_failing_follows_on_error(
    ray_cluster: None, tmp_path: Path, multi_shard: Path
) -> None:
    shards = discover_shards(multi_shard)
    killer = KillWorker(shard="tool/part2.jsonl.zst", line=2)
    good = [s for s in shards if s.name != "chat/part0.jsonl"]  # the shard with a bad row
    with pytest.raises(InputError) as ei:
        scan(
            good, max_candidates=12, schedule=Schedule(engine="ray"), check=killer, on_error="raise"
        )
    msg = str(ei.value)
    assert msg.startswith("tool/part2.jsonl.zst: expected the shard's Ray task to finish")
    assert "failed 4 times" in msg and "--on-error skip" in msg
    part = scan(
        shards, max_candidates=12, schedule=Schedule(engine="ray"), check=killer, on_error="skip"
    )
    assert list(part.failed) == ["tool/part2.jsonl.zst"]
    assert "failed 4 times" in part.failed["tool/part2.jsonl.zst"]
    # Every other shard is in the result, as a local pass over them gives it.
    rest = [s for s in shards if s.name != "tool/part2.jsonl.zst"]
    _same(scan(rest, max_candidates=12, on_error="skip"), part)


def test_inspect_cli_takes_the_engine(
    ray_cluster: None, multi_shard: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(multi_shard), "--json"]) == 0
    local = capsys.readouterr().out
    assert main(["inspect", str(multi_shard), "--json", "--engine", "ray"]) == 0
    assert capsys.readouterr().out == local


def test_engine_ray_without_ray_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, qwen_dir: Path, capsys: Any
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # what an environment without Ray sees
    with pytest.raises(ConfigError, match=r"pip install 'distprompt\[ray\]'"):
        build_suite(tmp_path, tokenizer=qwen_dir, engine="ray")
    code = main(["inspect", str(tmp_path), "--engine", "ray"])
    assert code == 2
    assert "pip install 'distprompt[ray]'" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="one of local, ray"):
        build_suite(tmp_path, tokenizer=qwen_dir, engine="spark")


def test_url_shards_are_read_by_the_workers(ray_cluster: None, multi_shard: Path) -> None:
    local = scan(discover_shards(multi_shard), max_candidates=12, on_error="skip")
    urls = discover_shards(multi_shard.as_uri())
    assert all(s.url for s in urls)
    _same(local, scan(urls, max_candidates=12, on_error="skip", schedule=Schedule(engine="ray")))


def test_byte_ranges_of_a_shard_on_ray_match_local(ray_cluster: None, multi_shard: Path) -> None:
    shards = discover_shards(multi_shard)
    local = scan(shards, max_candidates=12, on_error="skip")
    # Ranges of 4 KiB: the plain shards (one with a bad row and a blank line) become many units.
    on_ray = scan(
        shards, max_candidates=12, on_error="skip", schedule=Schedule(engine="ray", unit_bytes=4096)
    )
    _same(local, on_ray)
    assert on_ray.tally.first_skip == {"missing_loss_mask": "chat/part0.jsonl:5"}


def test_the_prompts_held_for_the_round_trip_travel_from_ray(
    ray_cluster: None, multi_shard: Path
) -> None:
    """The partials' held prompts come back from the Ray tasks (byte ranges too): the round
    trip's sample is the local one and no row is read back for it."""
    shards = discover_shards(multi_shard)
    local = scan(shards, max_candidates=100, on_error="skip")
    on_ray = scan(
        shards,
        max_candidates=100,
        on_error="skip",
        schedule=Schedule(engine="ray", unit_bytes=4096),
    )
    assert len(local.pools["chat"]) > SAMPLE
    for src, pool in local.pools.items():
        want, read_back = sampled_prompts(pool, SAMPLE, shards)
        got, read_back_ray = sampled_prompts(on_ray.pools[src], SAMPLE, shards)
        assert read_back == read_back_ray == 0
        assert [(c.key, c.count, c.provenance, c.prompt_ids.tolist()) for c in got] == [
            (c.key, c.count, c.provenance, c.prompt_ids.tolist()) for c in want
        ]


def test_a_failing_byte_range_leaves_out_its_rows_only(
    ray_cluster: None, multi_shard: Path
) -> None:
    shard = next(s for s in discover_shards(multi_shard) if s.name == "code/part0.jsonl")
    lines = {offset: n for n, offset, _ in iter_lines(shard)}
    offsets = sorted(lines)
    victim = offsets[len(offsets) // 2]
    killer = KillWorker(shard=shard.name, offset=victim)
    part = scan(
        [shard],
        max_candidates=1000,
        on_error="skip",
        schedule=Schedule(engine="ray", unit_bytes=4096),
        check=killer,
    )
    [(name, why)] = part.failed.items()
    m = re.fullmatch(r"code/part0\.jsonl \(bytes (\d+)-(\d+)\)", name)
    assert m and "failed 4 times" in why
    start, end = int(m[1]), int(m[2])
    assert start <= victim < end
    lost = sum(1 for o in offsets if start <= o < end)
    assert part.stats["code"].rows == len(offsets) - lost
    # The units after the failed one still stamp exact line numbers.
    cands = part.pools["code"].candidates()
    assert any(c.provenance.offset >= end for c in cands)
    for c in cands:
        assert lines[c.provenance.offset] == c.provenance.line
        assert not start <= c.provenance.offset < end


def test_the_row_contract_and_held_rows_on_ray_match_local(
    ray_cluster: None, tmp_path: Path, qwen_tokenizer: Any
) -> None:
    """Quiet breaks of the row contract and rows that fail the marker check, read in Ray tasks
    (byte ranges too): the partial, its held rows and their settling are the local ones."""
    from distprompt.recover.checks import settle_rows
    from test_rowcontract import contract_corpus, partial_view, scan_options

    data, expected = contract_corpus(tmp_path, qwen_tokenizer)
    shards = discover_shards(data)
    kw = scan_options(qwen_tokenizer)
    local = scan(shards, **kw)
    on_ray = scan(shards, schedule=Schedule(engine="ray", unit_bytes=2048), **kw)
    assert partial_view(on_ray) == partial_view(local)
    for part in (local, on_ray):
        settle_rows(part)
        assert dict(part.tally.skipped) == expected
    assert (local.tally, local.stats) == (on_ray.tally, on_ray.stats)


def test_ray_map_keeps_the_order_and_reports_each_task(ray_cluster: None) -> None:
    from distprompt.engine import ray_map

    def negate(x: int) -> int:
        return -x

    done: list[int] = []
    out = list(ray_map(negate, list(range(9)), names=list("abcdefghi"), on_done=done.append))
    assert out == [-x for x in range(9)]
    assert sorted(done) == list(range(9))  # progress: each task once, as it finished


def test_ray_map_runs_a_window_ahead_of_the_consumer(ray_cluster: None, tmp_path: Path) -> None:
    """The driver streams: tasks are submitted at most ``window`` ahead of the result it yields
    next, so finished partials wait in Ray's object store and the driver holds one at a time,
    however many tasks the pass has."""
    import time

    from distprompt.engine import ray_map

    started = tmp_path / "started"
    started.mkdir()

    def mark(i: int, where: str = str(started)) -> int:
        Path(where, str(i)).touch()
        return i

    results = ray_map(mark, list(range(12)), names=[str(i) for i in range(12)], window=3)
    assert next(results) == 0
    time.sleep(2)  # an eager map would run the other tasks meanwhile
    assert len(list(started.iterdir())) <= 3  # 0, 1, 2: nothing past the window
    assert list(results) == list(range(1, 12))
    assert len(list(started.iterdir())) == 12
