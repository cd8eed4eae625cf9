"""bench: what is sent to each API, and that the reported figures are the server's.

Every run goes against :class:`bench_server.FakeServer` (127.0.0.1, in-process), which checks
the requests and logs the figures it produced; tests compare distprompt's records and summary
with that log and with computations done here by hand.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distprompt import (
    BenchResults,
    Suite,
    SuiteItem,
    bench,
    bench_compare,
    import_aiperf,
    render_bench_summary,
)
from distprompt.benchmark.stats import RatioParts, corpus_estimate, request_parts
from distprompt.cli import main
from distprompt.errors import ConfigError, OutputError, ServerError
from distprompt.records import Provenance

from bench_server import NUM_DRAFT, Behaviour, FakeServer
from conftest import REPO_ROOT

ROWS = {"glaive": 900, "sweagent": 300}
# recorded replies of each kind, item i gets REPLIES[i % 4]
REPLIES = (
    "<think>The user wants a sum.</think>It is 4.",
    '<tool_call>{"name": "f", "arguments": {}}</tool_call>',
    "```python\nprint(1)\n```",
    "Paris is the capital of France.",
)
ACCEPT = {"glaive": 3.0, "sweagent": 1.5}


def make_suite(root: Path, sizes: dict[str, int] | None = None, *, seed: int = 0) -> Path:
    """A suite folder with known sources, weights, clusters and fidelities (no tokenizer)."""
    sizes = sizes or {"glaive": 6, "sweagent": 4}
    rng = random.Random(seed)
    items = []
    for src, n in sorted(sizes.items()):
        raw = [rng.uniform(0.5, 2.0) for _ in range(n)]
        for i in range(n):
            ids = tuple(rng.randrange(10, 150000) for _ in range(rng.randint(5, 40)))
            fidelity = "tokens"
            if src == "glaive" and i == 1:
                fidelity = "text"
            if src == "glaive" and i == 2:
                fidelity = "lossy"
            items.append(
                SuiteItem(
                    id=f"{src}-{i:03d}",
                    source=src,
                    prompt=f"prompt {src} {i}",
                    n_prompt_tokens=len(ids),
                    n_response_tokens=20,
                    max_tokens=rng.randint(8, 40),
                    cluster=i % 2,
                    cluster_size=3,
                    weight=raw[i] / sum(raw),
                    provenance=Provenance(f"{src}/tokenized_data.jsonl", i + 1, 100 * i),
                    prompt_ids=ids,
                    messages=(
                        {"role": "system", "content": "You are helpful."},
                        {"role": "user", "content": f"question {i} about {src}"},
                    ),
                    tools=({"type": "function", "function": {"name": "f"}},) if i == 0 else None,
                    fidelity=fidelity,
                    chat_template_kwargs={"enable_thinking": False} if i == 3 else None,
                    response=REPLIES[i % len(REPLIES)],
                )
            )
    manifest = {"sources": {s: {"rows": ROWS.get(s, 100)} for s in sizes}}
    out = root / "suite"
    Suite(items, manifest).save(out, formats=())
    return out


@pytest.fixture
def suite_dir(tmp_path: Path) -> Path:
    return make_suite(tmp_path)


def _by_key(log: list[Any]) -> dict[str, Any]:
    return {p.item_id: p for p in log}


def _hand_estimate(
    parts: dict[str, list[tuple[float, float, float]]], shares: dict[str, float]
) -> tuple[float, float, float]:
    """The corpus estimate and its interval, computed here from the documented procedure:
    ``source -> [(num, den, weight)]``, weights scaled to the source's share, ratio of sums."""
    tot = sum(shares[s] for s in parts)
    num = den = 0.0
    for s, rows in parts.items():
        w = np.array([x[2] for x in rows])
        num += shares[s] / tot * sum(x[0] * x[2] for x in rows) / w.sum()
        den += shares[s] / tot * sum(x[1] * x[2] for x in rows) / w.sum()
    rng = np.random.default_rng(0)
    bn, bd = np.zeros(2000), np.zeros(2000)
    for s in sorted(parts):
        a = np.array(parts[s])
        idx = rng.integers(0, len(a), size=(2000, len(a)))
        wb = a[idx, 2] / a[idx, 2].sum(axis=1, keepdims=True)
        bn += shares[s] / tot * (wb * a[idx, 0]).sum(axis=1)
        bd += shares[s] / tot * (wb * a[idx, 1]).sum(axis=1)
    lo, hi = np.percentile(bn / bd, [2.5, 97.5])
    return num / den, float(lo), float(hi)


def _server_parts(
    records: list[dict[str, Any]], produced: dict[str, Any], fig: str, c: int
) -> dict[str, list[tuple[float, float, float]]]:
    """Per source, the server's own (num, den) of each successful request at level ``c`` and
    its item weight: SGLang's tokens / verify steps, accepted / proposed drafts."""
    out: dict[str, list[tuple[float, float, float]]] = {}
    for r in records:
        if r["concurrency"] == c and r["error_kind"] is None:
            p = produced[r["id"]]
            nd = (p.n, p.steps) if fig == "accept_length" else (p.accepted, p.drafted)
            out.setdefault(r["source"], []).append((*nd, r["weight"]))
    return out


def test_sglang_sends_exact_ids_and_reports_the_servers_figures(
    suite_dir: Path, tmp_path: Path
) -> None:
    items = Suite.load(suite_dir).items
    with FakeServer(items, Behaviour(accept=ACCEPT)) as srv:
        res = bench(suite_dir, url=srv.url, api="sglang", out=tmp_path / "r", concurrency=[1, 3])
    assert srv.problems == []
    assert res.complete and len(res) == 2 * len(items) == len(srv.log)
    for p in srv.log:
        sp = p.body["sampling_params"]
        assert sp["ignore_eos"] is False and sp["temperature"] == 0.0
    produced = {}
    for p in srv.log:
        produced.setdefault(p.item_id, p)
    for r in res.requests:
        p = produced[r["id"]]
        assert r["error_kind"] is None
        assert r["output_tokens"] == p.n and r["output_tokens_counted"]
        assert r["spec_steps"] == p.steps
        assert r["spec_accepted"] == p.accepted and r["spec_drafted"] == p.drafted
        assert r["accept_length"] == pytest.approx(p.n / p.steps)
        assert r["accept_rate"] == pytest.approx(p.accepted / p.drafted)
        assert r["spec_histogram"] == p.histogram
        assert r["spec_origin"] == "sglang.meta_info"
        assert len(r["itl"]) == p.chunks - 1 and r["ttft"] is not None
        assert r["finish_reason"] == "stop"
    s = res.summary
    shares = {k: v / sum(ROWS.values()) for k, v in ROWS.items()}
    assert res.meta["shares"] == pytest.approx(shares)
    for c in (1, 3):
        row = {r["source"]: r for r in s["by_source"] if r["concurrency"] == c}
        for src in ROWS:
            rs = [r for r in res.requests if r["source"] == src and r["concurrency"] == c]
            ps = [(r["weight"], produced[r["id"]]) for r in rs]
            w = sum(r["weight"] for r in rs)
            # what the server would report: Σ w·tokens / Σ w·steps, not a mean of ratios
            want = sum(x * p.n for x, p in ps) / sum(x * p.steps for x, p in ps)
            assert row[src]["accept_length"] == pytest.approx(want)
            rate = sum(x * p.accepted for x, p in ps) / sum(x * p.drafted for x, p in ps)
            assert row[src]["accept_rate"] == pytest.approx(rate)
            mean = sum(x * p.n / p.steps for x, p in ps) / w
            assert row[src]["accept_length_mean_per_request"] == pytest.approx(mean)
            assert row[src]["accept_length"] != pytest.approx(mean)  # the test can tell them apart
            assert row[src]["accept_length_steps_estimated"] == 0
            for fig in ("accept_length", "accept_rate"):  # the corpus procedure, one source
                parts = _server_parts(rs, produced, fig, c)
                _, lo, hi = _hand_estimate(parts, {src: 1.0})
                assert row[src][f"{fig}_ci_low"] == pytest.approx(lo)
                assert row[src][f"{fig}_ci_high"] == pytest.approx(hi)
                assert lo <= row[src][fig] <= hi
            assert row[src]["output_tokens"] == sum(produced[r["id"]].n for r in rs)
        corpus = next(e for e in s["corpus"] if e["concurrency"] == c)
        for fig in ("accept_length", "accept_rate"):
            point, lo, hi = _hand_estimate(_server_parts(res.requests, produced, fig, c), shares)
            assert corpus[fig]["estimate"] == pytest.approx(point)
            assert corpus[fig]["ci_low"] == pytest.approx(lo)
            assert corpus[fig]["ci_high"] == pytest.approx(hi)
            assert lo <= point <= hi
    # files: complete, and a reload gives the same records and summary
    out = tmp_path / "r"
    assert {p.name for p in out.iterdir()} == {
        "requests.jsonl",
        "summary.json",
        "summary.md",
        "summary.png",
        "acceptance_by_position.png",
        "acceptance_by_length.png",
        "acceptance_by_kind.png",
    }
    lines = (out / "requests.jsonl").read_text().splitlines()
    assert len(lines) == len(res)
    back = BenchResults.load(out)
    assert back.requests == res.requests and back.complete
    assert back.summary["corpus"] == json.loads((out / "summary.json").read_text())["corpus"]
    md = (out / "summary.md").read_text()
    assert "Corpus-weighted estimate" in md and "glaive" in md
    df = res.to_polars()
    assert df.height == len(res) and "accept_length" in df.columns


def test_corpus_interval_collapses_when_every_request_agrees() -> None:
    # every request of a source has the same ratio: resampling cannot move the estimate
    a = RatioParts((4.0, 20.0, 2.0), (2.0, 10.0, 1.0), (0.2, 0.3, 0.5))
    b = RatioParts((40.0, 8.0), (10.0, 2.0), (0.5, 0.5))
    est = corpus_estimate({"a": a, "b": b}, {"a": 3.0, "b": 1.0})
    assert est is not None
    # w' = share_s · w / Σ_s w; ratio of the sums of w'·num and w'·den
    num = 0.75 * (0.2 * 4 + 0.3 * 20 + 0.5 * 2) + 0.25 * (0.5 * 40 + 0.5 * 8)
    den = 0.75 * (0.2 * 2 + 0.3 * 10 + 0.5 * 1) + 0.25 * (0.5 * 10 + 0.5 * 2)
    assert est["estimate"] == pytest.approx(num / den)
    assert est["ci_low"] <= est["estimate"] <= est["ci_high"]
    same = corpus_estimate({"a": a}, {"a": 1.0})
    assert same is not None
    assert same["ci_low"] == pytest.approx(2.0) and same["ci_high"] == pytest.approx(2.0)


def test_vllm_per_request_metrics_and_ignore_eos(suite_dir: Path, tmp_path: Path) -> None:
    items = Suite.load(suite_dir).items
    with FakeServer(items, Behaviour(accept=ACCEPT)) as srv:
        res = bench(
            suite_dir,
            url=srv.url,
            api="vllm",
            out=tmp_path / "r",
            concurrency=[2],
            ignore_eos=True,
            max_items=3,
        )
    assert srv.problems == []
    assert len(res) == 6 and res.meta["model"] == "fake-model"
    produced = _by_key(srv.log)
    by_id = {it.id: it for it in items}
    for r in res.requests:
        p = produced[r["id"]]
        assert p.body["prompt"] == list(by_id[r["id"]].prompt_ids)
        assert p.body["ignore_eos"] is True and p.body["model"] == "fake-model"
        assert r["output_tokens"] == by_id[r["id"]].max_tokens == p.n
        assert r["accept_length"] == pytest.approx(1 + p.accepted / p.steps)
        assert r["accept_rate"] == pytest.approx(p.accepted / p.drafted)
        assert r["spec_origin"] == "vllm.metrics" and r["finish_reason"] == "length"
    assert res.meta["spec_counters"] is False and res.windows == []
    for row in res.summary["by_source"]:
        ps = [
            (r["weight"], produced[r["id"]]) for r in res.requests if r["source"] == row["source"]
        ]
        # vLLM's own aggregate: 1 + Σ accepted / Σ steps, here item-weighted
        want = 1 + sum(w * p.accepted for w, p in ps) / sum(w * p.steps for w, p in ps)
        assert row["accept_length"] == pytest.approx(want)


def test_vllm_counters_are_read_per_source_window(suite_dir: Path, tmp_path: Path) -> None:
    items = Suite.load(suite_dir).items
    with FakeServer(items, Behaviour(accept=ACCEPT, per_request_metrics=False)) as srv:
        res = bench(suite_dir, url=srv.url, api="vllm", concurrency=[1, 4])
    assert srv.problems == [] and res.meta["spec_counters"] is True
    assert all(r["accept_length"] is None for r in res.requests)
    assert len(res.windows) == 4
    for w in res.windows:
        ps = [p for p in srv.log if p.item_id.startswith(w["source"])]
        ps = ps[: len(ps) // 2] if w["concurrency"] == 1 else ps[len(ps) // 2 :]
        assert w["drafts"] == sum(p.steps for p in ps)
        assert w["accepted_tokens"] == sum(p.accepted for p in ps)
        assert sum(w["per_pos"]) == w["accepted_tokens"]
    s = res.summary
    shares = {k: v / sum(ROWS.values()) for k, v in ROWS.items()}
    for c in (1, 4):
        rows = {r["source"]: r for r in s["by_source"] if r["concurrency"] == c}
        for src, row in rows.items():
            w = next(x for x in res.windows if x["source"] == src and x["concurrency"] == c)
            assert row["spec_from"] == "counters"
            assert row["accept_length"] == pytest.approx(1 + w["accepted_tokens"] / w["drafts"])
            assert row["accept_rate"] == pytest.approx(
                w["accepted_tokens"] / (NUM_DRAFT * w["drafts"])
            )
        corpus = next(e for e in s["corpus"] if e["concurrency"] == c)
        # counter sums per request of each source, scaled to its share, then the ratio of sums
        ws = {x["source"]: x for x in res.windows if x["concurrency"] == c}
        n = {src: rows[src]["ok"] for src in rows}
        num = sum(shares[k] * (ws[k]["drafts"] + ws[k]["accepted_tokens"]) / n[k] for k in rows)
        den = sum(shares[k] * ws[k]["drafts"] / n[k] for k in rows)
        assert corpus["accept_length"]["estimate"] == pytest.approx(num / den)
        assert corpus["accept_length"]["ci_low"] is None


def test_openai_chat_sends_messages_only_for_exact_items(suite_dir: Path) -> None:
    items = Suite.load(suite_dir).items
    with FakeServer(items, Behaviour(accept=ACCEPT)) as srv:
        res = bench(suite_dir, url=srv.url, api="openai-chat", concurrency=[2], model="m")
        inexact = bench(
            suite_dir,
            url=srv.url,
            api="openai-chat",
            concurrency=[1],
            allow_inexact=True,
            sources=["glaive"],
        )
    assert srv.problems == []
    assert res.meta["skipped"] == {"fidelity lossy": 1, "fidelity text": 1}
    assert len(res) == len(items) - 2
    assert {r["id"] for r in inexact.requests} == {
        it.id for it in items if it.source == "glaive" and it.fidelity != "lossy"
    }
    assert all("ignore_eos" not in p.body for p in srv.log)  # off: not sent at all
    sent = [p.body for p in srv.log if p.item_id == "glaive-000"]
    assert sent[0]["tools"] == [{"type": "function", "function": {"name": "f"}}]
    assert sent[0]["model"] == "m"
    assert any(p.body.get("chat_template_kwargs") == {"enable_thinking": False} for p in srv.log)
    for r in res.requests:
        assert r["error_kind"] is None and r["spec_origin"] == "vllm.metrics"


def test_faults_are_counted_by_kind_and_never_retried(suite_dir: Path, tmp_path: Path) -> None:
    items = Suite.load(suite_dir).items
    faults = {
        "glaive-000": "http500",
        "glaive-001": "disconnect",
        "glaive-002": "malformed",
        "glaive-003": "error_event",
        "glaive-004": "slow",
    }
    with FakeServer(items, Behaviour(accept=ACCEPT, faults=faults)) as srv:
        res = bench(
            suite_dir,
            url=srv.url,
            api="sglang",
            out=tmp_path / "r",
            concurrency=[4],
            timeout=5,
        )
    kinds = {r["id"]: r["error_kind"] for r in res.requests}
    assert kinds["glaive-000"] == "http" and kinds["glaive-001"] == "disconnect"
    assert kinds["glaive-002"] == "malformed" and kinds["glaive-003"] == "server_error"
    assert kinds["glaive-004"] == "timeout"
    assert sum(k is None for k in kinds.values()) == len(items) - 5
    assert len(srv.log) == len(items)  # one request an item: nothing was retried
    assert res.meta["errors"] == {
        "disconnect": 1,
        "http": 1,
        "malformed": 1,
        "server_error": 1,
        "timeout": 1,
    }
    assert "engine crashed" in res.meta["first_error"]["http"]
    assert "out of memory" in res.meta["first_error"]["server_error"]
    assert res.complete  # failures are figures, not a stop
    md = (tmp_path / "r" / "summary.md").read_text()
    assert "Errors by kind: disconnect 1, http 1, malformed 1, server_error 1, timeout 1" in md
    glaive = next(r for r in res.summary["by_source"] if r["source"] == "glaive")
    assert glaive["ok"] == 1 and glaive["accept_length_n"] == 1


def test_server_down_is_a_clear_error_and_leaves_nothing(suite_dir: Path, tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ServerError, match=r"expected a sglang server, found .*start the server"):
        bench(suite_dir, url=f"http://127.0.0.1:{port}", api="sglang", out=tmp_path / "r")
    assert not (tmp_path / "r").exists()


def _cli_bench(suite_dir: Path, url: str, out: Path, *extra: str) -> int:
    return main(["bench", str(suite_dir), "--url", url, "--api", "sglang", "--out", str(out),
                 *extra])  # fmt: skip


def test_server_going_away_stops_the_run_and_keeps_what_finished(
    suite_dir: Path, tmp_path: Path
) -> None:
    items = Suite.load(suite_dir).items
    with FakeServer(items, Behaviour(accept=ACCEPT, close_after=6)) as srv:
        rc = _cli_bench(suite_dir, srv.url, tmp_path / "r", "--concurrency", "1,4")
    assert rc == 2
    res = BenchResults.load(tmp_path / "r")
    assert not res.complete
    assert res.meta["stopped"] == "server unreachable during concurrency 1, source sweagent"
    assert [r["error_kind"] for r in res.requests] == [None] * 6 + ["connect"] * 4
    assert res.meta["errors"] == {"connect": 4}


def test_bad_options_and_occupied_out(suite_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="`api`"):
        bench(suite_dir, url="http://127.0.0.1:1", api="tgi")
    with pytest.raises(ConfigError, match="`sources`: expected sources of the suite"):
        bench(suite_dir, url="http://127.0.0.1:1", api="sglang", sources=["nope"])
    with pytest.raises(ConfigError, match="`concurrency`"):
        bench(suite_dir, url="http://127.0.0.1:1", api="sglang", concurrency=[0])
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="other files"):
        bench(suite_dir, url="http://127.0.0.1:1", api="sglang", out=other)
    assert (other / "notes.txt").read_text() == "mine"


def test_ctrl_c_keeps_finished_requests_marked_incomplete(tmp_path: Path) -> None:
    suite_dir = make_suite(tmp_path, {"glaive": 30, "sweagent": 30})
    items = Suite.load(suite_dir).items
    out = tmp_path / "r"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "src"))
    with FakeServer(items, Behaviour(accept=ACCEPT, step_delay=0.02)) as srv:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distprompt",
                "bench",
                str(suite_dir),
                "--url",
                srv.url,
                "--api",
                "sglang",
                "--out",
                str(out),
                "--concurrency",
                "1",
            ],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        partial = out / ".requests.jsonl.partial"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if partial.is_file() and len(partial.read_text().splitlines()) >= 3:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted: stopped; kept the" in err and "marked incomplete" in err
    assert not partial.exists()
    res = BenchResults.load(out)
    assert not res.complete and res.meta["stopped"] == "interrupted"
    assert 3 <= len(res) < len(items)
    assert json.loads((out / "summary.json").read_text())["meta"]["complete"] is False
    assert "INCOMPLETE (interrupted)" in (out / "summary.md").read_text()


def _synthetic(label: str, tok_s: dict[tuple[str, int], float]) -> BenchResults:
    """Windows of 4 requests, 1 s each, back to back: tok/s known exactly."""
    reqs = []
    for (src, c), rate in sorted(tok_s.items()):
        for i in range(4):
            reqs.append(
                {
                    "id": f"{src}-{i}",
                    "source": src,
                    "cluster": 0,
                    "weight": 0.25,
                    "concurrency": c,
                    "start": float(i),
                    "end": float(i + 1),
                    "ttft": 0.1,
                    "itl": [],
                    "output_tokens": int(rate),
                    "error_kind": None,
                    "accept_length": None,
                    "accept_rate": None,
                }
            )
    return BenchResults(reqs, {"label": label, "shares": {"glaive": 0.75, "sweagent": 0.25}})


def test_compare_speedup_and_where_it_stops_paying() -> None:
    a = _synthetic(
        "eagle3",
        {("glaive", 1): 300, ("sweagent", 1): 150, ("glaive", 16): 90, ("sweagent", 16): 80},
    )
    b = _synthetic(
        "base",
        {("glaive", 1): 100, ("sweagent", 1): 100, ("glaive", 16): 100, ("sweagent", 16): 100},
    )
    cmp = bench_compare(a, b)
    rows = {(r["source"], r["concurrency"]): r for r in cmp["rows"]}
    assert rows[("glaive", 1)]["speedup"] == pytest.approx(3.0)
    assert rows[("sweagent", 16)]["speedup"] == pytest.approx(0.8)
    # every request of a window is alike: the intervals collapse onto the point
    assert rows[("glaive", 1)]["ci_low"] == pytest.approx(3.0)
    corpus = {c["concurrency"]: c for c in cmp["corpus"]}
    assert corpus[1]["speedup"] == pytest.approx(0.75 * 3.0 + 0.25 * 1.5)
    assert corpus[16]["speedup"] == pytest.approx(0.75 * 0.9 + 0.25 * 0.8)
    assert cmp["stops_paying"]["corpus"] == {"concurrency": 16, "certain": True}
    assert cmp["stops_paying"]["glaive"]["concurrency"] == 16


def test_cli_bench_compare_and_import(suite_dir: Path, tmp_path: Path, capsys: Any) -> None:
    items = Suite.load(suite_dir).items
    a, b = tmp_path / "a", tmp_path / "b"
    with FakeServer(items, Behaviour(accept=ACCEPT)) as srv:
        assert _cli_bench(suite_dir, srv.url, a, "--concurrency", "1,2", "--label", "eagle3") == 0
        # occupied without --overwrite
        assert _cli_bench(suite_dir, srv.url, a, "--concurrency", "1") == 2
    with FakeServer(items, Behaviour(accept=ACCEPT, spec=False)) as srv:
        assert _cli_bench(suite_dir, srv.url, b, "--concurrency", "1,2", "--label", "base") == 0
    err = capsys.readouterr().err
    assert "wrote 20 requests" in err and "Corpus-weighted estimate" in err
    assert main(["bench-compare", str(tmp_path / "a"), "--baseline", str(tmp_path / "b")]) == 0
    text = capsys.readouterr().out
    assert "# eagle3 vs base" in text and "stops paying" in text
    assert main(["bench-compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    assert {r["concurrency"] for r in cmp["rows"]} == {1, 2}
    run = _aiperf_run(tmp_path / "aiperf", items)
    assert (
        main(
            [
                "bench-import",
                str(run),
                "--suite",
                str(suite_dir),
                "--out",
                str(tmp_path / "imp"),
                "--concurrency",
                "8",
            ]
        )
        == 0
    )
    assert "records not joined" in capsys.readouterr().err
    assert BenchResults.load(tmp_path / "imp").meta["concurrency"] == [8]


def _aiperf_run(root: Path, items: Any) -> Path:
    """An AIPerf artifact folder in the documented shapes: a multi-turn session named by the
    item id, a single-turn request found through inputs.json, an unknown one and a failure."""
    root.mkdir(parents=True)
    it0, it1, it2 = items[0], items[4], items[6]

    def rec(
        cid: str, turn: int, start: int, metrics: dict[str, Any] | None, error: Any = None
    ) -> dict[str, Any]:
        return {
            "metadata": {
                "session_num": 0,
                "x_request_id": "r",
                "x_correlation_id": "c",
                "conversation_id": cid,
                "turn_index": turn,
                "request_start_ns": start,
                "request_ack_ns": start + 1,
                "request_end_ns": start + 2_000_000_000,
                "worker_id": "w",
                "record_processor_id": "p",
                "benchmark_phase": "profiling",
                "was_cancelled": False,
                "cancellation_time_ns": None,
            },
            "metrics": metrics,
            "error": error,
        }

    def m(ttft: float, n: int, acc: float | None) -> dict[str, Any]:
        out = {
            "time_to_first_token": {"value": ttft, "unit": "ms"},
            "inter_chunk_latency": {"value": [5.0, 6.0], "unit": "ms"},
            "output_token_count": {"value": n, "unit": "tokens"},
        }
        if acc is not None:
            out.update(
                {
                    "spec_decode_acceptance_length": {"value": acc, "unit": "ratio"},
                    "spec_decode_draft_acceptance_rate": {"value": 40.0, "unit": "%"},
                    "spec_decode_steps": {"value": 10, "unit": "count"},
                    "spec_decode_accepted_draft_tokens": {"value": 16, "unit": "tokens"},
                    "spec_decode_draft_tokens": {"value": 40, "unit": "tokens"},
                }
            )
        return out

    t = 1_759_813_207_000_000_000
    lines = [
        rec(it0.id, 0, t, m(50.0, 7, None)),  # earlier turn of the session
        rec(it0.id, 1, t + 10, m(40.0, 12, 2.6)),
        rec("uuid-1", 0, t + 20, m(30.0, 9, 1.4)),
        rec("uuid-2", 0, t + 30, m(30.0, 9, 1.4)),
        rec(
            "uuid-3",
            0,
            t + 40,
            {"error_isl": {"value": 5, "unit": "tokens"}},
            {"code": 500, "type": "HTTPError", "message": "boom"},
        ),
    ]
    (root / "profile_export.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))

    def msg(text: str) -> dict[str, Any]:
        return {"messages": [{"role": "user", "content": text}], "max_tokens": 9}

    inputs = {
        "data": [
            {"session_id": "uuid-1", "payloads": [msg(it1.messages[-1]["content"])]},
            {"session_id": "uuid-2", "payloads": [msg("a prompt of another suite")]},
            {"session_id": "uuid-3", "payloads": [msg(it2.messages[-1]["content"])]},
        ]
    }
    (root / "inputs.json").write_text(json.dumps(inputs))
    return root


def test_aiperf_import_joins_records_to_items(suite_dir: Path, tmp_path: Path) -> None:
    items = Suite.load(suite_dir).items
    run = _aiperf_run(tmp_path / "aiperf", items)
    res = import_aiperf(run, suite=suite_dir, out=tmp_path / "imp")
    assert res.meta["unmatched"] == {"text matches no item": 1}
    # the session's earlier turn is a request of the same item: speed, no acceptance
    earlier = [r for r in res.requests if r["turn"] < r["turns"] - 1]
    assert [(r["id"], r["turn"], r["turns"]) for r in earlier] == [(items[0].id, 0, 2)]
    assert earlier[0]["output_tokens"] == 7 and earlier[0]["accept_length"] is None
    assert res.meta["earlier_turns"] == 1
    by_id = {r["id"]: r for r in res.requests if r["turn"] == r["turns"] - 1}
    assert set(by_id) == {items[0].id, items[4].id, items[6].id}
    r0 = by_id[items[0].id]
    assert r0["source"] == items[0].source and r0["cluster"] == items[0].cluster
    assert r0["accept_length"] == 2.6 and r0["accept_rate"] == pytest.approx(0.4)
    assert r0["ttft"] == pytest.approx(0.040) and r0["itl"] == pytest.approx([0.005, 0.006])
    assert r0["output_tokens"] == 12 and r0["spec_steps"] == 10
    assert by_id[items[6].id]["error_kind"] == "aiperf:HTTPError"
    assert res.summary["errors"] == {"aiperf:HTTPError": 1}
    assert (tmp_path / "imp" / "summary.md").is_file()


def test_sglang_reader_takes_older_field_names() -> None:
    from distprompt.benchmark.protocol import StreamReader

    r = StreamReader("sglang")
    r.feed('{"text": "a", "meta_info": {"completion_tokens": 1, "finish_reason": null}}', 0.1)
    r.feed(
        '{"text": "abc", "meta_info": {"completion_tokens": 9, "spec_verify_ct": 3,'
        ' "spec_accepted_drafts": 5, "spec_proposed_drafts": 9, "spec_accept_histogram": [1, 1, 1],'
        ' "finish_reason": {"type": "length", "length": 9}}}',
        0.3,
    )
    r.done()
    assert r.spec is not None and r.output_tokens == 9 and r.itl == pytest.approx([0.2])
    assert r.spec.accept_length == 3.0 and r.spec.accept_rate == pytest.approx(5 / 9)
    assert (r.spec.accepted, r.spec.drafted, r.spec.histogram) == (5, 9, (1, 1, 1))
    plain = StreamReader("sglang")
    plain.feed('{"meta_info": {"completion_tokens": 4, "finish_reason": {"type": "stop"}}}', 0.1)
    assert plain.spec is None and plain.finish_reason == "stop"


_parts = st.lists(
    st.tuples(
        st.floats(0.0, 500.0), st.floats(0.5, 200.0), st.floats(0.01, 10.0)
    ),  # (num, den, weight)
    min_size=1,
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(a=_parts, b=_parts, scale_a=st.floats(0.001, 1e4), scale_b=st.floats(0.001, 1e4))
def test_corpus_estimate_does_not_depend_on_the_weights_unit(
    a: list[tuple[float, float, float]],
    b: list[tuple[float, float, float]],
    scale_a: float,
    scale_b: float,
) -> None:
    """Weights as shares of a source (sum 1) or as corpus rows (sum = the source's rows) give
    the same figures; and a ratio of sums lies within the per-request ratios."""

    def parts(rows: list[tuple[float, float, float]], k: float) -> RatioParts:
        return RatioParts(
            tuple(x[0] for x in rows), tuple(x[1] for x in rows), tuple(x[2] * k for x in rows)
        )

    shares = {"a": 0.3, "b": 0.7}
    one = corpus_estimate({"a": parts(a, 1.0), "b": parts(b, 1.0)}, shares, n_boot=50)
    scaled = corpus_estimate({"a": parts(a, scale_a), "b": parts(b, scale_b)}, shares, n_boot=50)
    assert one is not None and scaled is not None
    for key in ("estimate", "ci_low", "ci_high"):
        assert scaled[key] == pytest.approx(one[key], rel=1e-9, abs=1e-12)
    ratios = [x[0] / x[1] for x in a + b]
    assert min(ratios) - 1e-9 <= one["estimate"] <= max(ratios) + 1e-9
    for rows in (a, b):
        p = parts(rows, scale_a)
        got = p.ratio()
        assert got is not None
        want = sum(x[0] * x[2] for x in rows) / sum(x[1] * x[2] for x in rows)
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_request_parts_estimate_a_missing_denominator_and_say_so() -> None:
    full = {"accept_length": 2.5, "spec_steps": 4, "spec_accepted": 6, "spec_drafted": 12}
    assert request_parts(full, "accept_length") == (10.0, 4.0, False)
    assert request_parts(full, "accept_rate") == (6.0, 12.0, False)
    # no step count: steps = output tokens / accepted length (SGLang's definition)
    bare = {"accept_length": 2.5, "accept_rate": 0.5, "output_tokens": 20}
    assert request_parts(bare, "accept_length") == (20.0, 8.0, True)
    assert request_parts(bare, "accept_rate") == (0.5, 1.0, True)
    assert request_parts({"accept_rate": 0.5, "spec_steps": 3}, "accept_rate") == (1.5, 3.0, True)
    assert request_parts({}, "accept_length") is None
    reqs = [
        {**full, "weight": 1.0, "error_kind": None},
        {**bare, "weight": 1.0, "error_kind": None},
        {**full, "weight": 5.0, "error_kind": "timeout"},  # failed: not counted
    ]
    p = RatioParts.of(reqs, "accept_length")
    assert len(p) == 2 and p.estimated == 1
    assert p.ratio() == pytest.approx(30.0 / 12.0)
    assert p.mean_per_request() == pytest.approx(2.5)


def test_corpus_speedup_is_the_ratio_of_corpus_throughputs() -> None:
    # the baseline is slower on glaive than on sweagent: a mean of per-source speedups would
    # give 0.75 * 2 + 0.25 * 1 = 1.75; serving the corpus's mix takes
    # 0.75 * (100 / 200) + 0.25 * (100 / 100) = 0.625 s a request on A and
    # 0.75 * (100 / 100) + 0.25 * (100 / 100) = 1.0 s on B (each request 100 tokens)
    a = _synthetic("a", {("glaive", 1): 200, ("sweagent", 1): 100})
    b = _synthetic("b", {("glaive", 1): 100, ("sweagent", 1): 100})
    for res in (a, b):
        for r in res.requests:  # 100 tokens a request; time = tokens / rate
            rate = r["output_tokens"]
            r["output_tokens"] = 100
            r["start"], r["end"] = r["start"] * 100 / rate, (r["start"] + 1) * 100 / rate
    cmp = bench_compare(a, b)
    rows = {r["source"]: r for r in cmp["rows"]}
    assert rows["glaive"]["speedup"] == pytest.approx(2.0)
    assert rows["sweagent"]["speedup"] == pytest.approx(1.0)
    corpus = cmp["corpus"][0]
    assert corpus["speedup"] == pytest.approx(1.0 / 0.625)
    assert corpus["tok_s_a"] == pytest.approx(100 / 0.625) and corpus["tok_s_b"] == 100.0
    assert corpus["ci_low"] == pytest.approx(1.6) and corpus["ci_high"] == pytest.approx(1.6)


def test_aiperf_multi_turn_rates_count_every_turn_over_the_run_time(
    suite_dir: Path, tmp_path: Path
) -> None:
    """Issue 28: a multi-turn AIPerf run kept only each session's last turn and divided by the
    sum of the sources' windows (all the run's time each): 2.79 req/s for a source that sent
    154 requests, 6.2 for the corpus against a real 21.2; the header said `aiperf at None`."""
    items = Suite.load(suite_dir).items
    picked = {}
    for it in items:
        picked.setdefault(it.source, it)
    sessions = list(picked.values())  # one session a source
    n = len(sessions)
    assert n >= 2
    t = 1_759_813_207_000_000_000
    lines = []
    for k in range(4):  # 4 turns a session, the sessions side by side, 1 s a turn
        for j, it in enumerate(sessions):
            start = t + k * 1_000_000_000 + j * 1_000_000
            lines.append(
                {
                    "metadata": {
                        "conversation_id": it.id,
                        "turn_index": k,
                        "request_start_ns": start,
                        "request_end_ns": start + 900_000_000,
                    },
                    "metrics": {
                        "output_token_count": {"value": 10, "unit": "tokens"},
                        "spec_decode_acceptance_length": {"value": 2.0 + k, "unit": "ratio"},
                        "spec_decode_steps": {"value": 5, "unit": "count"},
                    },
                    "error": None,
                }
            )
    run = tmp_path / "artifacts" / "aiperf_multi_turn"
    run.mkdir(parents=True)
    (run / "profile_export.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    config = {
        "input_config": {
            "endpoint": {"urls": ["http://10.0.0.7:8000"], "model_names": ["Qwen/Qwen3-8B"]},
            "loadgen": {"concurrency": 3},
        }
    }
    (run / "profile_export_aiperf.json").write_text(json.dumps(config))
    body = {"model": "Qwen/Qwen3-8B", "temperature": 0.0, "messages": []}
    inputs = {"data": [{"session_id": it.id, "payloads": [body] * 4} for it in sessions]}
    (run / "inputs.json").write_text(json.dumps(inputs))

    res = import_aiperf(run, suite=suite_dir)
    assert len(res.requests) == 4 * n and res.meta["unmatched"] == {}
    span = 3.0 + (n - 1) * 0.001 + 0.9  # first send to last end
    corpus = res.summary["corpus"][0]
    assert corpus["req_s"] == pytest.approx(4 * n / span)
    for row in res.summary["by_source"]:
        assert row["requests"] == 4  # every turn of the source's session
    # acceptance is the item's request's (the last turn: 2.0 + 3)
    assert corpus["accept_length"]["estimate"] == pytest.approx(5.0)
    text = render_bench_summary(res.summary)
    assert "aiperf at http://10.0.0.7:8000, model Qwen/Qwen3-8B" in text
    assert "temperature=0.0" in text and "at None" not in text
