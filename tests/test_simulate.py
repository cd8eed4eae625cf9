"""``distprompt simulate``: suite estimates, exact corpus figures, random comparison, errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distprompt import ConfigError, InputError, Simulation, simulate_suite
from distprompt.cli import main
from distprompt.evaluate import DEFAULT_DRAFTERS, Drafter, simulate_many
from distprompt.evaluate.simulation import FIGURES, MIX

from factories import make_corpus, suite_item


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, qwen_tokenizer: Any, qwen_dir: Path) -> Any:
    """A two-source corpus (exact duplicates included) and a suite of 6 items per source."""
    from distprompt import build_suite

    root = tmp_path_factory.mktemp("sim")
    data = make_corpus(root, qwen_tokenizer, {"chat": 30, "code": 18}, dup_every=5)
    out = root / "suite"
    build_suite(data, tokenizer=str(qwen_dir), per_source=6, seed=0).save(out)
    return data, out


def _rows_of(data: Path) -> list[dict[str, Any]]:
    rows = []
    for shard in sorted(data.rglob("tokenized_data.jsonl")):
        rows += [json.loads(line) for line in shard.read_text().splitlines() if line.strip()]
    return rows


def _first_reply(row: dict[str, Any]) -> tuple[list[int], list[int]]:
    """The prompt and the first run of 1s in loss_mask after it, computed here independently."""
    n, ids, mask = row["n_prompt_tokens"], row["input_ids"], row["loss_mask"]
    start = next((i for i in range(n, len(ids)) if mask[i]), None)
    if start is None:
        return ids[:n], ids[n:]
    end = next((i for i in range(start, len(ids)) if not mask[i]), len(ids))
    return ids[:n], ids[start:end]


def _by(sim: Simulation, scope: str, drafter: str, figure: str) -> Any:
    (row,) = [r for r in sim.rows if (r.scope, r.drafter, r.figure) == (scope, drafter, figure)]
    return row


def test_corpus_figures_are_exact_sums_over_every_row(exported: Any) -> None:
    data, suite = exported
    sim = simulate_suite(suite, data=data, random_samples=5)
    rows = _rows_of(data)
    totals: dict[str, np.ndarray] = {}
    for r in rows:
        prompt, reply = _first_reply(r)
        got = simulate_many(prompt, reply, DEFAULT_DRAFTERS)
        c = np.array([[x.tokens, x.steps, x.drafted, x.accepted] for x in got.values()])
        totals[r["source"]] = totals.get(r["source"], 0) + c
    assert sim.corpus_rows == {"chat": 36, "code": 22}
    assert sim.shares == {"chat": 36 / 58, "code": 22 / 58}
    every = sum(totals.values())
    for j, d in enumerate(DEFAULT_DRAFTERS):
        for scope, t in [*totals.items(), (MIX, every)]:
            row = _by(sim, scope, d.name, "tokens_per_step")
            assert row.corpus == pytest.approx(t[j, 0] / t[j, 1])
            row = _by(sim, scope, d.name, "acceptance_rate")
            assert row.corpus == pytest.approx(t[j, 3] / t[j, 2])
            assert row.suite_error == pytest.approx(abs(row.suite - row.corpus))
            assert 0 <= row.random_better <= 1
            assert row.random_median_error >= 0


def test_suite_estimate_is_the_weighted_ratio_of_sums(exported: Any) -> None:
    from distprompt import Suite

    _, suite_dir = exported
    suite = Suite.load(suite_dir)
    sim = simulate_suite(suite)
    assert sim.corpus_rows == {} and sim.random_samples == 0
    d = DEFAULT_DRAFTERS[0]
    manifest_rows = {s: v.rows for s, v in suite.manifest.sources.items()}
    total_rows = sum(manifest_rows.values())
    num = den = 0.0
    for source in ("chat", "code"):
        items = [it for it in suite if it.source == source]
        assert all(it.response_ids for it in items)
        w = np.array([it.weight for it in items])
        c = [simulate_many(it.prompt_ids, it.response_ids, [d])[d.name] for it in items]
        tok = np.array([x.tokens for x in c])
        steps = np.array([x.steps for x in c])
        row = _by(sim, source, d.name, "tokens_per_step")
        assert row.suite == pytest.approx((w @ tok) / (w @ steps))
        assert row.low <= row.suite <= row.high
        assert row.corpus is None and row.items == len(items)
        share = manifest_rows[source] / total_rows
        num += share * (w @ tok) / w.sum()
        den += share * (w @ steps) / w.sum()
    assert _by(sim, MIX, d.name, "tokens_per_step").suite == pytest.approx(num / den)


def test_old_suites_need_the_corpus_and_read_the_replies_from_it(
    exported: Any, tmp_path: Path
) -> None:
    from distprompt import Suite

    data, suite_dir = exported
    suite = Suite.load(suite_dir)
    old = Suite([dataclasses.replace(it, response_ids=None) for it in suite], suite.manifest)
    with pytest.raises(ConfigError, match="`data`"):
        simulate_suite(old)
    from_data = simulate_suite(old, data=data, random_samples=3)
    from_ids = simulate_suite(suite, data=data, random_samples=3)
    assert from_data == from_ids
    # the items' own response_ids give the suite's figures the corpus pass gives
    alone = simulate_suite(suite)
    assert [(r.suite, r.low, r.high) for r in alone.rows] == [
        (r.suite, r.low, r.high) for r in from_ids.rows
    ]


def test_another_corpus_is_refused(exported: Any, tmp_path: Path, qwen_tokenizer: Any) -> None:
    _, suite_dir = exported
    other = make_corpus(tmp_path, qwen_tokenizer, {"chat": 30, "code": 18}, seed=7)
    with pytest.raises(InputError, match="pass the DATA the suite was exported from"):
        simulate_suite(suite_dir, data=other)


def test_files_are_written_and_deterministic(exported: Any, tmp_path: Path) -> None:
    data, suite = exported
    a = simulate_suite(suite, data=data, random_samples=4, seed=3, out=tmp_path / "a")
    simulate_suite(suite, data=data, random_samples=4, seed=3, out=tmp_path / "b")
    raw = (tmp_path / "a" / "simulate.json").read_bytes()
    assert raw == (tmp_path / "b" / "simulate.json").read_bytes()
    doc = json.loads(raw)
    assert doc["drafters"] == [d.name for d in DEFAULT_DRAFTERS]
    assert len(doc["rows"]) == 3 * len(DEFAULT_DRAFTERS) * len(FIGURES)
    md = (tmp_path / "a" / "simulate.md").read_text()
    assert a.table() in md and "random better" in md
    other = simulate_suite(suite, data=data, random_samples=4, seed=4)
    assert [r.random_better for r in other.rows] != [r.random_better for r in a.rows] or [
        r.low for r in other.rows
    ] != [r.low for r in a.rows]


def _synthetic_suite(weights: list[float], scale: dict[str, float]) -> Any:
    from distprompt import Suite

    rng = np.random.default_rng(len(weights))
    items = []
    for n, w in enumerate(weights):
        source = "ab"[n % 2]
        prompt = tuple(int(x) for x in rng.integers(0, 6, 30))
        reply = tuple(int(x) for x in rng.integers(0, 6, 20))
        items.append(
            suite_item(
                n, source=source, weight=w * scale[source], prompt_ids=prompt, response_ids=reply
            )
        )
    manifest = {"sources": {"a": {"rows": 300}, "b": {"rows": 100}}}
    return Suite(items, manifest)


@settings(max_examples=25, deadline=None)
@given(
    weights=st.lists(st.floats(0.1, 10), min_size=2, max_size=8),
    a=st.floats(0.01, 1000),
    b=st.floats(0.01, 1000),
)
def test_weight_units_do_not_matter(weights: list[float], a: float, b: float) -> None:
    """Weights summing to 1 per source or counting corpus rows give the same estimates."""
    one = simulate_suite(_synthetic_suite(weights, {"a": 1.0, "b": 1.0}))
    scaled = simulate_suite(_synthetic_suite(weights, {"a": a, "b": b}))
    for x, y in zip(one.rows, scaled.rows, strict=True):
        assert x.suite == pytest.approx(y.suite, rel=1e-9, nan_ok=True)


def test_bad_options() -> None:
    suite = _synthetic_suite([1.0, 1.0], {"a": 1.0, "b": 1.0})
    with pytest.raises(ConfigError, match="more than once"):
        simulate_suite(suite, drafters=["suffix-k8", "suffix-k8"])
    with pytest.raises(ConfigError, match="drafter"):
        simulate_suite(suite, drafters=["eagle"])
    with pytest.raises(InputError, match="suite folder"):
        simulate_suite("/nonexistent/suite")
    named = simulate_suite(suite, drafters=["ngram[1-1]k2", Drafter("suffix", 3)])
    assert named.drafters == ("ngram[1-1]k2", "suffix-k3")


def test_cli_simulate(exported: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, suite = exported
    out = tmp_path / "o"
    argv = ["simulate", str(suite), "--data", str(data), "--drafter", "ngram[1-3]k4"]
    assert main([*argv, "--random-samples", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| all | ngram[1-3]k4 | tokens_per_step |" in printed
    assert json.loads((out / "simulate.json").read_text())["random_samples"] == 3
    assert main(["simulate", str(suite), "--drafter", "bogus", "--out", str(out)]) == 2
    assert "expected a name like" in capsys.readouterr().err
    assert main(["simulate", str(tmp_path / "none")]) == 2


def test_simulate_into_the_suite_puts_its_verdict_into_the_report(
    exported: Any, tmp_path: Path
) -> None:
    import shutil

    from distprompt.write.report import Report

    data, suite = exported
    folder = tmp_path / "suite"
    shutil.copytree(suite, folder)
    assert Report.load(folder).speculation == {}
    sim = simulate_suite(folder, data=data, random_samples=4, drafters=["ngram[1-3]k4"], out=folder)
    report = Report.load(folder)
    rows = report.speculation["rows"]
    assert [(r["drafter"], r["figure"]) for r in rows] == [("ngram[1-3]k4", f) for f in FIGURES]
    assert all(r["scope"] == MIX for r in rows)
    assert "4 uniform random samples" in report.speculation["verdict"]
    md = (folder / "report.md").read_text()
    assert "## Speculation, simulated from the recorded replies" in md
    assert report.speculation["verdict"] in md
    assert "Speculation, simulated" in (folder / "report.html").read_text()
    # without the corpus the verdict says what to run; a folder without a report is left alone
    simulate_suite(folder, drafters=["ngram[1-3]k4"], out=folder)
    assert "--data DATA" in Report.load(folder).speculation["verdict"]
    other = tmp_path / "elsewhere"
    simulate_suite(folder, data=data, random_samples=2, drafters=["ngram[1-3]k4"], out=other)
    assert not (other / "report.json").exists()
    assert sim.random_samples == 4
