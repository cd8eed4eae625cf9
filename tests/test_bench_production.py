"""bench under production conditions (issue 29): mixed traffic, the cache and limit traps,
settings checks in bench-compare, acceptance by draft position / prompt length / reply kind, and
the draft-length advice. Every run goes against :class:`bench_server.FakeServer`, whose log is
the ground truth the figures are recomputed from here."""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distprompt import BenchResults, Suite, bench, bench_compare, render_bench_compare
from distprompt.benchmark.profile import advice, length_bucket
from distprompt.benchmark.run import mixed_draws, preflight_warnings, server_limits
from distprompt.cli import main
from distprompt.errors import ConfigError
from test_bench import ACCEPT, ROWS, make_suite

from bench_server import Behaviour, FakeServer

SHARES = {s: r / sum(ROWS.values()) for s, r in ROWS.items()}


@pytest.fixture
def suite_dir(tmp_path: Path) -> Path:
    return make_suite(tmp_path)


def _hand_ratio(records: list[dict[str, Any]], log: dict[str, Any]) -> float:
    """Mixed traffic's corpus accepted length from the server's own figures: per source
    Σ tokens / Σ steps over its draws (each draw counts once), scaled to the source shares."""
    num: dict[str, float] = defaultdict(float)
    den: dict[str, float] = defaultdict(float)
    n: Counter[str] = Counter()
    for r in records:
        p = log[r["id"]]
        num[r["source"]] += p.n
        den[r["source"]] += p.steps
        n[r["source"]] += 1
    tot = sum(SHARES[s] for s in n)
    return sum(SHARES[s] / tot * num[s] / n[s] for s in n) / sum(
        SHARES[s] / tot * den[s] / n[s] for s in n
    )


def test_mixed_draws_follow_the_corpus_mix_and_the_seed(suite_dir: Path) -> None:
    items = Suite.load(suite_dir).items
    draws = mixed_draws(items, SHARES, 20000, seed=3)
    assert draws == mixed_draws(items, SHARES, 20000, seed=3)
    assert draws[:50] != mixed_draws(items, SHARES, 20000, seed=4)[:50]
    per_item = Counter(it.id for it in draws)
    wsum = defaultdict(float)
    for it in items:
        wsum[it.source] += it.weight
    for it in items:  # P(item) = share_s · w_i / Σ_{j∈s} w_j
        want = SHARES[it.source] * it.weight / wsum[it.source]
        assert per_item[it.id] / 20000 == pytest.approx(want, abs=0.015)
    # interleaved: the sources alternate, not one block after the other
    first = [it.source for it in draws[:40]]
    assert len(set(first)) == 2 and first != sorted(first)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0.01, 50.0), min_size=1, max_size=12),
    st.integers(1, 200),
    st.integers(0, 2**31),
)
def test_each_item_is_drawn_the_floor_or_ceiling_of_its_expected_count(
    weights: list[float], n: int, seed: int
) -> None:
    from distprompt.records import Provenance, SuiteItem

    items = [
        SuiteItem(f"i{k}", f"s{k % 3}", "p", 1, 1, 1, 0, 1, w, Provenance("f", k + 1, 0), (1,))
        for k, w in enumerate(weights)
    ]
    shares = {"s0": 0.5, "s1": 0.3, "s2": 0.2}
    draws = mixed_draws(items, shares, n, seed=seed)
    assert len(draws) == n
    got = Counter(it.id for it in draws)
    present = {it.source for it in items}
    tot = sum(shares[s] for s in present)
    wsum: dict[str, float] = defaultdict(float)
    for it in items:
        wsum[it.source] += it.weight
    for it in items:
        want = n * shares[it.source] / tot * it.weight / wsum[it.source]
        assert want - 1 - 1e-9 < got[it.id] < want + 1 + 1e-9


def test_mixed_traffic_keeps_attribution_and_leads_the_summary(
    suite_dir: Path, tmp_path: Path
) -> None:
    items = Suite.load(suite_dir).items
    out = tmp_path / "r"
    with FakeServer(items, Behaviour(accept=ACCEPT)) as srv:
        res = bench(
            suite_dir,
            url=srv.url,
            api="sglang",
            out=out,
            concurrency=[1, 4],
            traffic="both",
            mixed_requests=30,
            seed=1,
            flush_cache=True,
        )
        log = {p.item_id: p for p in srv.log}
    mixed = [r for r in res.requests if r["traffic"] == "mixed"]
    per_source = [r for r in res.requests if r["traffic"] == "per-source"]
    assert len(per_source) == 2 * len(items) and len(mixed) == 2 * 30
    want = [it.id for it in mixed_draws(items, res.meta["shares"], 30, seed=1)]
    assert res.meta["mixed_repeats"] == 30 - len(set(want)) > 0
    for c in (1, 4):  # the same draws at every level, each request with its item's attribution
        got = sorted(r["id"] for r in mixed if r["concurrency"] == c)
        assert got == sorted(want)
    by_id = {it.id: it for it in items}
    for r in mixed:
        assert (r["source"], r["cluster"]) == (by_id[r["id"]].source, by_id[r["id"]].cluster)
        assert r["weight"] == 1.0 and r["item_weight"] == by_id[r["id"]].weight
    summ = res.summary
    assert summ["headline"] == "mixed" and summ["traffics"] == ["mixed", "per-source"]
    assert [c["traffic"] for c in summ["corpus"]] == ["mixed", "mixed", "per-source", "per-source"]
    for c in summ["corpus"]:
        if c["traffic"] == "mixed":
            recs = [r for r in mixed if r["concurrency"] == c["concurrency"]]
            assert c["accept_length"]["estimate"] == pytest.approx(_hand_ratio(recs, log))
            # the mixed window's throughput is its own: tokens over its span
            span = max(r["end"] for r in recs) - min(r["start"] for r in recs)
            assert c["output_tok_s"] == pytest.approx(sum(r["output_tokens"] for r in recs) / span)
    assert {(r["traffic"], r["source"]) for r in summ["by_source"]} == {
        (t, s) for t in ("mixed", "per-source") for s in ROWS
    }
    md = (out / "summary.md").read_text()
    assert "Headline: the **mixed** traffic" in md and "| mixed | 1 |" in md
    assert "| per-source | glaive | 1 |" in md and "| mixed | sweagent | 4 |" in md
    saved = json.loads((out / "summary.json").read_text())
    assert saved["headline"] == "mixed" and saved["meta"]["traffic"] == "both"
    for name in (
        "summary.png",
        "acceptance_by_position.png",
        "acceptance_by_length.png",
        "acceptance_by_kind.png",
    ):
        assert (out / name).stat().st_size > 1000


def test_traps_are_warned_before_the_run_and_recorded(suite_dir: Path, tmp_path: Path) -> None:
    items = Suite.load(suite_dir).items
    longest = max(it.n_prompt_tokens + it.max_tokens for it in items)
    beh = Behaviour(
        accept=ACCEPT, server_info=True, max_running_requests=2, context_length=longest - 1
    )
    with FakeServer(items, beh) as srv:
        res = bench(suite_dir, url=srv.url, api="sglang", out=tmp_path / "a", concurrency=[1, 4])
        # a second run against the same warm server: its first window finds the prompts cached
        again = bench(suite_dir, url=srv.url, api="sglang", concurrency=[1])
        assert srv.flushes == 0
    lim = res.meta["server_limits"]
    assert lim["max_running_requests"] == 2 and lim["context_length"] == longest - 1
    assert lim["speculative"]["num_steps"] == 4
    w = res.meta["warnings"]
    assert any("concurrency 4 above the server's max_running_requests 2" in x for x in w)
    too_long = [it for it in items if it.n_prompt_tokens + it.max_tokens > longest - 1]
    assert any(f"{len(too_long)} items need more than the server's context length" in x for x in w)
    assert any("sent 2 times to the same server without --flush-cache" in x for x in w)
    assert not any("prefix cache: it has served" in x for x in w)  # the first run was cold
    assert any("already found" in x and "prefix cache" in x for x in again.meta["warnings"])
    md = (tmp_path / "a" / "summary.md").read_text()
    assert "## Warnings" in md and "max_running_requests 2" in md
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["warnings"] == w
    # per-source windows at c=4 found cached prompts: recorded per window
    rows = {(r["source"], r["concurrency"]): r for r in res.summary["by_source"]}
    assert rows[("glaive", 1)]["prompt_cached_fraction"] == 0.0
    assert rows[("glaive", 4)]["prompt_cached_fraction"] > 0.9


def test_flush_cache_empties_the_cache_before_every_window(suite_dir: Path, tmp_path: Path) -> None:
    items = Suite.load(suite_dir).items
    with FakeServer(items, Behaviour(accept=ACCEPT, max_model_len=100000)) as srv:
        res = bench(
            suite_dir,
            url=srv.url,
            api="vllm",
            concurrency=[1, 2],
            flush_cache=True,
            traffic="both",
            mixed_requests=8,
        )
        assert srv.flushes == 2 * (2 + 1)  # 2 levels × (2 source windows + 1 mixed)
        assert all(p.cached == 0 for p in srv.log[: len(items)])
    assert res.meta["flushes"] == {"/reset_prefix_cache -> 200": 6}
    assert res.meta["server_limits"] == {
        "context_length": 100000,
        "from": ["/v1/models max_model_len"],
    }
    assert not any("without --flush-cache" in x for x in res.meta["warnings"])
    # draws with replacement repeat items within a mixed window: said, with how many
    rep = res.meta["mixed_repeats"]
    drawn = mixed_draws(items, res.meta["shares"], 8, seed=0)
    assert rep == 8 - len({it.id for it in drawn})
    assert any(
        f"{rep} requests of each mixed window repeat" in x for x in res.meta["warnings"]
    ) == (rep > 0)
    # a vLLM without VLLM_SERVER_DEV_MODE: the flush is refused, and said once
    with FakeServer(items, Behaviour(accept=ACCEPT, flush=False)) as srv:
        res = bench(suite_dir, url=srv.url, api="vllm", concurrency=[1], flush_cache=True)
    w = [x for x in res.meta["warnings"] if "POST /reset_prefix_cache answered 404" in x]
    assert len(w) == 1 and "VLLM_SERVER_DEV_MODE" in w[0]
    assert any("exposes no limits" in x for x in res.meta["warnings"])


def test_preflight_and_limits_parsing() -> None:
    info = {
        "max_running_requests": 48,
        "dp_size": 2,
        "context_length": 8192,
        "internal_states": [
            {"effective_max_running_requests_per_dp": 20},
            {"effective_max_running_requests_per_dp": 24},
        ],
    }
    lim = server_limits(info, {"data": [{"id": "m", "max_model_len": 4096}]})
    assert lim["max_running_requests"] == 40 and lim["context_length"] == 8192
    assert server_limits({"max_running_requests": 48}, None)["max_running_requests"] == 48
    assert server_limits(None, {"data": []}) == {}
    assert (
        preflight_warnings([], [1, 2], {"max_running_requests": 2}, flush_cache=True, passes=2)
        == []
    )


def test_compare_refuses_different_settings_unless_forced(
    suite_dir: Path, tmp_path: Path, capsys: Any
) -> None:
    items = Suite.load(suite_dir).items
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    with FakeServer(items, Behaviour(accept=ACCEPT)) as srv:
        bench(suite_dir, url=srv.url, api="sglang", out=a, concurrency=[1], label="eagle3")
        bench(
            suite_dir,
            url=srv.url,
            api="sglang",
            out=c,
            concurrency=[1],
            label="hot",
            temperature=0.5,
            traffic="mixed",
            max_items=3,
        )
    with FakeServer(items, Behaviour(accept=ACCEPT, spec=False)) as srv:
        bench(suite_dir, url=srv.url, api="sglang", out=b, concurrency=[1], label="base")
    ra, rb, rc = (BenchResults.load(x) for x in (a, b, c))
    assert bench_compare(ra, rb)["differences"] == []
    with pytest.raises(ConfigError) as exc:
        bench_compare(ra, rc)
    msg = str(exc.value)
    for what in ("suite (", "temperature (0.0 vs 0.5)", "traffic (per-source vs mixed)", "--force"):
        assert what in msg
    forced = bench_compare(ra, rc, force=True)
    assert len(forced["differences"]) == 3
    assert "Compared with --force although the runs differ" in render_bench_compare(forced)
    assert main(["bench-compare", str(a), str(c)]) == 2
    assert "temperature (0.0 vs 0.5)" in capsys.readouterr().err
    assert main(["bench-compare", str(a), str(c), "--force"]) == 0
    assert "compared runs that differ in" in capsys.readouterr().err


def _hand_positions(
    records: list[dict[str, Any]], log: dict[str, Any], steps_of: Any
) -> dict[str, list[float]]:
    """Per source and corpus, Σ w·(steps accepting ≥ k drafts) / Σ w·steps."""
    wsum: dict[str, float] = defaultdict(float)
    for r in records:
        wsum[r["source"]] += r["weight"]
    num: dict[str, list[float]] = defaultdict(lambda: [0.0] * 4)
    den: dict[str, float] = defaultdict(float)
    for r in records:
        p = log[(r["id"])]
        for who, w in (
            (r["source"], r["weight"]),
            ("corpus", SHARES[r["source"]] * r["weight"] / wsum[r["source"]]),
        ):
            for k in range(4):
                num[who][k] += w * sum(p.histogram[k + 1 :])
            den[who] += w * steps_of(p)
    return {s: [x / den[s] for x in v] for s, v in num.items()}


def test_acceptance_by_position_from_histograms_and_from_counters(
    suite_dir: Path, tmp_path: Path
) -> None:
    items = Suite.load(suite_dir).items
    with FakeServer(items, Behaviour(accept=ACCEPT)) as srv:
        res = bench(suite_dir, url=srv.url, api="sglang", concurrency=[1])
        log = {p.item_id: p for p in srv.log}
    prof = res.summary["profiles"]["by_position"]
    assert prof["from"] == "per-request histogram"
    want = _hand_positions(res.requests, log, lambda p: sum(p.histogram))
    got = {r["source"]: r for r in prof["rows"]}
    assert set(got) == {"glaive", "sweagent", "corpus"}
    for s, v in want.items():
        assert got[s]["accepted"] == pytest.approx(v)
        assert got[s]["conditional"][1] == pytest.approx(v[1] / v[0])
        assert all(a >= b - 1e-12 for a, b in itertools.pairwise(v))  # non-increasing
    # vLLM without per-request metrics: from the per-position counters, window by window
    with FakeServer(items, Behaviour(accept=ACCEPT, per_request_metrics=False)) as srv:
        res = bench(suite_dir, url=srv.url, api="vllm", concurrency=[1, 2])
        log = {p.item_id: p for p in srv.log}
    prof = res.summary["profiles"]["by_position"]
    assert prof["from"] == "counters"
    got = {r["source"]: r for r in prof["rows"]}
    for s in ROWS:
        ps = [p for p in srv.log if p.item_id.startswith(s)]
        steps = sum(p.steps for p in ps)
        for k in range(4):
            acc = sum(sum(p.histogram[k + 1 :]) for p in ps)
            assert got[s]["accepted"][k] == pytest.approx(acc / steps)
    assert got["corpus"]["accepted"][0] > 0
    # mixed traffic on counters only: the mixed window's counters are the mix's own figure
    with FakeServer(items, Behaviour(accept=ACCEPT, per_request_metrics=False)) as srv:
        res = bench(
            suite_dir, url=srv.url, api="vllm", concurrency=[2], traffic="mixed", mixed_requests=15
        )
        steps = sum(p.steps for p in srv.log)
        acc = sum(p.accepted for p in srv.log)
    est = res.summary["corpus"][0]["accept_length"]
    assert est["estimate"] == pytest.approx(1 + acc / steps) and est["ci_low"] is None
    assert res.windows[0]["source"] == "*" and res.windows[0]["traffic"] == "mixed"
    md = render_summary_text(res)
    assert "## Acceptance by draft position (from counters)" in md


def render_summary_text(res: BenchResults) -> str:
    from distprompt import render_bench_summary

    return render_bench_summary(res.summary)


def test_acceptance_by_reply_kind_and_prompt_length(suite_dir: Path) -> None:
    items = Suite.load(suite_dir).items
    kinds = {it.id: it for it in items}
    with FakeServer(items, Behaviour(accept=ACCEPT)) as srv:
        res = bench(suite_dir, url=srv.url, api="sglang", concurrency=[1])
        log = {p.item_id: p for p in srv.log}
    assert {r["reply_kind"] for r in res.requests} == {"reasoning", "tool call", "code", "prose"}
    prof = res.summary["profiles"]
    for key, col, of in (
        ("by_kind", "reply_kind", lambda r: r["reply_kind"]),
        ("by_length", "length_bucket", lambda r: length_bucket(r["n_prompt_tokens"])),
    ):
        rows = prof[key]
        for row in rows:
            if row["source"] == "corpus":
                continue
            reqs = [r for r in res.requests if r["source"] == row["source"] and of(r) == row[col]]
            num = sum(r["weight"] * log[r["id"]].n for r in reqs)
            den = sum(r["weight"] * log[r["id"]].steps for r in reqs)
            assert row["accept_length"] == pytest.approx(num / den)
            assert row["requests"] == len(reqs)
    # the corpus row of a group: each request weighted by share_s · w_i / Σ_{j∈s} w_j
    wsum = defaultdict(float)
    for it in items:
        wsum[it.source] += it.weight
    row = next(r for r in prof["by_kind"] if r["source"] == "corpus" and r["reply_kind"] == "code")
    reqs = [r for r in res.requests if r["reply_kind"] == "code"]
    w = [SHARES[r["source"]] * kinds[r["id"]].weight / wsum[r["source"]] for r in reqs]
    num = sum(x * log[r["id"]].n for x, r in zip(w, reqs, strict=True))
    den = sum(x * log[r["id"]].steps for x, r in zip(w, reqs, strict=True))
    assert row["accept_length"] == pytest.approx(num / den)
    md = render_summary_text(res)
    assert "## Acceptance by reply kind" in md and "## Acceptance by prompt length" in md


@settings(max_examples=60, deadline=None)
@given(
    p=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6).map(
        lambda xs: sorted(xs, reverse=True)
    ),
    s=st.floats(0.05, 8.0),
)
def test_advice_never_predicts_worse_than_the_measured_length(p: list[float], s: float) -> None:
    """The advised length's predicted speedup is at least the measured one (d = D reproduces
    the measurement when κ ≥ 0), never a length that was not measured."""
    adv = advice(p, [(1, s)])
    assert adv is not None
    row = adv["by_concurrency"][0]
    d = row["draft_length"]
    assert 0 <= d <= len(p)
    if row["overhead_per_draft_token"] > 0:
        assert row["predicted_speedup"][len(p)] == pytest.approx(s)
    assert row["predicted_speedup"][d] >= max(s, 1.0) - 1e-9 or d == 0
    assert row["predicted_speedup"][d] == pytest.approx(max(row["predicted_speedup"]))


def test_advice_from_a_comparison(suite_dir: Path, tmp_path: Path) -> None:
    items = Suite.load(suite_dir).items
    runs = {}
    for label, spec in (("eagle3", True), ("base", False)):
        with FakeServer(items, Behaviour(accept=ACCEPT, spec=spec)) as srv:
            runs[label] = bench(
                suite_dir,
                url=srv.url,
                api="sglang",
                concurrency=[1, 2],
                label=label,
                traffic="mixed",
                mixed_requests=12,
            )
    a, b = runs["eagle3"], runs["base"]
    cmp = bench_compare(a, b)
    assert cmp["headline"] == "mixed" and {c["traffic"] for c in cmp["corpus"]} == {"mixed"}
    adv = cmp["advice"]
    pos = next(r for r in a.summary["profiles"]["by_position"]["rows"] if r["source"] == "corpus")
    assert adv["position_acceptance"] == pytest.approx(pos["accepted"])
    assert adv["derived_from"] == "eagle3" and adv["draft_length_measured"] == 4
    assert [r["concurrency"] for r in adv["by_concurrency"]] == [1, 2]
    for r in adv["by_concurrency"]:
        want = next(c["speedup"] for c in cmp["corpus"] if c["concurrency"] == r["concurrency"])
        assert r["speedup"] == want
    text = render_bench_compare(cmp)
    assert "## Advice (derived from this run, eagle3, and this baseline)" in text
    assert "num_speculative_tokens" in text or "no --speculative-config" in text


def test_bench_import_reads_a_real_aiperf_multi_turn_run(tmp_path: Path) -> None:
    """tests/data/aiperf_multi_turn was written by the aiperf 0.13.0 CLI against the test
    server (scripts/make_aiperf_artifact.py): six sessions of one to three turns, concurrency
    2. Every turn is a request of its item; the acceptance is the last turn's; URL, model,
    temperature and concurrency come from the artifact."""
    from distprompt import import_aiperf

    from bench_server import multi_turn_items

    run = Path(__file__).parent / "data" / "aiperf_multi_turn"
    items = multi_turn_items()
    suite = tmp_path / "suite"
    Suite(items, {"sources": {s: {"rows": r} for s, r in ROWS.items()}}).save(suite, formats=())
    raw = [json.loads(x) for x in (run / "profile_export.jsonl").read_text().splitlines()]
    res = import_aiperf(run, suite=suite, out=tmp_path / "imp")
    assert res.meta["unmatched"] == {} and len(res.requests) == len(raw) == 12
    config = json.loads((run / "profile_export_aiperf.json").read_text())["input_config"]
    assert res.meta["url"] == config["endpoint"]["urls"][0]
    assert res.meta["model"] == "fake-model" and res.meta["temperature"] == 0.0
    assert res.meta["concurrency"] == [2] and res.meta["traffic"] == "aiperf"
    by_item = {it.id: it for it in items}
    turns = Counter(r["id"] for r in res.requests)
    for it_id, n in turns.items():  # item i of a source has i + 1 user turns
        assert n == int(it_id[-1]) + 1
    for rec, r in zip(raw, res.requests, strict=True):
        md, m = rec["metadata"], rec["metrics"]
        assert (r["id"], r["turn"]) == (md["conversation_id"], md["turn_index"])
        assert r["turns"] == turns[r["id"]] and r["source"] == by_item[r["id"]].source
        assert r["output_tokens"] == m["output_token_count"]["value"]
        if r["turn"] == r["turns"] - 1:
            assert r["accept_length"] == m["spec_decode_acceptance_length"]["value"]
            assert r["spec_steps"] == m["spec_decode_steps"]["value"]
        else:
            assert r["accept_length"] is None
    assert res.meta["earlier_turns"] == 6
    span = (
        max(x["metadata"]["request_end_ns"] for x in raw)
        - min(x["metadata"]["request_start_ns"] for x in raw)
    ) * 1e-9
    corpus = res.summary["corpus"][0]
    assert corpus["req_s"] == pytest.approx(12 / span)
    md_text = (tmp_path / "imp" / "summary.md").read_text()
    assert f"aiperf at {res.meta['url']}, model fake-model" in md_text
    assert "Traffic: aiperf" in md_text
