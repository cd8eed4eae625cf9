"""Tests for :mod:`distprompt.write.report`: the report model and its rendering, then end to end."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from distprompt import Report, Suite, build_suite, render_report
from distprompt.cli import main
from distprompt.write.metrics import ks_statistic
from distprompt.write.render import PLOT_NAMES
from distprompt.write.report import REPORT_HTML, REPORT_JSON, REPORT_MD

from factories import make_corpus, two_source_report

# --- the report model on known answers -------------------------------------------------------


def test_build_report_shares_and_overall() -> None:
    rep = two_source_report()
    a, b = rep.sources["a"], rep.sources["b"]
    assert a["share"] == {
        "corpus": pytest.approx(40 / 60),
        "target": 0.5,
        "achieved": pytest.approx(4 / 6),
    }
    assert b["share"]["achieved"] == pytest.approx(2 / 6)
    assert rep.overall["share_gap_max"] == pytest.approx(4 / 6 - 0.5, abs=1e-6)
    # b took the two shortest groups: KS 0.5 on prompt lengths (half the mass is beyond)
    assert b["suite"]["ks_prompt"] == 0.5
    o = rep.overall["suite"]
    # within-source mean weighted by rows: a is perfect (0), b is 0.5, rows 40 : 20
    assert o["ks_prompt_within"] == pytest.approx(0.5 * 20 / 60, abs=1e-6)
    # pooled distance = candidate-weighted mean of the sources' distances
    db = b["suite"]["mean_distance"]
    assert o["mean_distance"] == pytest.approx((0 * 40 + db * 20) / 60, abs=1e-6)
    assert rep.overall["selected"] == 6 and rep.overall["candidates"] == 60
    assert rep.verdict["coverage"] in ("better", "not better")
    assert rep.summary.startswith("Suite ")
    assert "coverage" in rep.summary and "length" in rep.summary
    assert [e["cluster"] for e in rep.examples["a"]] == [0, 1, 2, 3]
    assert rep.curves["overall"]["prompt"]["corpus"][0] == 10
    assert rep.curves["overall"]["prompt"]["corpus"][-1] == 80
    assert rep.meta["method"] == "test" and rep.meta["random_seeds"] == 5


@pytest.mark.parametrize("fidelity", [False, True])
def test_report_built_before_the_items_and_completed_equals_one_built_with_them(
    fidelity: bool,
) -> None:
    """The pipeline builds the report once, before decoding (its plots are drawn from it),
    and completes it with the items: the same report as built from the items."""
    whole = two_source_report(fidelity=fidelity)
    later = two_source_report(items_later=True, fidelity=fidelity)
    assert later == whole
    if fidelity:
        assert whole.overall["recovery"]["tokens"] == pytest.approx(2 / 6)


def test_with_items_refuses_other_items() -> None:
    from distprompt.write.report import with_items

    rep = two_source_report()
    with pytest.raises(ValueError, match="expected the items the report was built for"):
        with_items(rep, [])


def test_report_files_roundtrip_and_rerender(tmp_path: Path) -> None:
    rep = two_source_report()
    written = rep.write(tmp_path)
    assert set(written) == {REPORT_JSON, REPORT_MD, REPORT_HTML, *PLOT_NAMES}
    for name in PLOT_NAMES:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (tmp_path / REPORT_HTML).read_text()
    assert page.count("data:image/png;base64,") == len(PLOT_NAMES)
    assert 'src="report_' not in page  # self-contained
    assert "prompt 20" in page and "a.jsonl:21" in page  # example prompt and provenance
    md = (tmp_path / REPORT_MD).read_text()
    assert rep.summary in md and "report_prompt_length.png" in md
    again = Report.load(tmp_path)
    assert again.to_dict() == orjson.loads(rep.to_json())
    before = {n: (tmp_path / n).read_bytes() for n in written}
    for name in (REPORT_MD, REPORT_HTML, *PLOT_NAMES):
        (tmp_path / name).unlink()
    assert render_report(tmp_path).summary == rep.summary
    assert {n: (tmp_path / n).read_bytes() for n in written} == before


# --- end to end ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, qwen_tokenizer: Any) -> Path:
    return make_corpus(
        tmp_path_factory.mktemp("rep"), qwen_tokenizer, {"chat": 60, "code": 30}, dup_every=9
    )


@pytest.mark.slow  # a build and a save with plots (~9 s)
def test_build_suite_attaches_report_and_save_writes_it(
    corpus: Path, qwen_dir: Path, tmp_path: Path
) -> None:
    suite = build_suite(corpus, tokenizer=qwen_dir, per_source=10, recover_turns=False)
    rep = suite.report
    assert isinstance(rep, Report)
    assert set(rep.sources) == {"chat", "code"}
    chat = rep.sources["chat"]
    assert chat["rows"] == 60 + len(range(0, 60, 9)) and chat["candidates"] == 60
    assert chat["selected"] == 10 and chat["share"]["achieved"] == 0.5
    for side in ("suite", "random"):
        for key in (
            "ks_prompt",
            "ks_prompt_weighted",
            "ks_response",
            "ks_response_weighted",
            "mean_distance",
            "represented_share",
        ):
            v = chat[side][key]
            assert v is not None and 0.0 <= v <= (1.0 if "ks" in key or "share" in key else 10)
    # the corpus side of KS is exact: recompute it from the rows
    rows = [
        orjson.loads(line)
        for p in sorted(corpus.rglob("*.jsonl"))
        for line in p.read_bytes().splitlines()
    ]
    counts = Counter(r["n_prompt_tokens"] for r in rows if r["source"] == "chat")
    lens = [it.n_prompt_tokens for it in suite if it.source == "chat"]
    assert chat["suite"]["ks_prompt"] == pytest.approx(ks_statistic(lens, counts), abs=1e-6)
    # output lengths: the items' max_tokens against every row's first reply, written out here
    # from the loss mask (the first trained span after the prompt, else the rest of the row)

    def first_reply(r: dict[str, Any]) -> int:
        tail = r["loss_mask"][r["n_prompt_tokens"] :]
        if 1 not in tail:
            return len(tail)
        start = tail.index(1)
        return [*tail[start:], 0].index(0)

    replies = Counter(max(1, first_reply(r)) for r in rows if r["source"] == "chat")
    outs = [it.max_tokens for it in suite if it.source == "chat"]
    assert chat["suite"]["ks_response"] == pytest.approx(ks_statistic(outs, replies), abs=1e-6)
    assert rep.curves["chat"]["response"]["suite"] == sorted(outs)

    out = tmp_path / "out"
    suite.save(out, formats=["token_ids"])
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert sorted(manifest["files"]["report"]) == sorted(
        [REPORT_JSON, REPORT_MD, REPORT_HTML, *PLOT_NAMES]
    )
    assert (out / REPORT_HTML).stat().st_size > 10_000
    loaded = Suite.load(out)
    assert loaded.report is not None and loaded.report.summary == rep.summary

    # same input and seed: byte-identical report
    twin = build_suite(corpus, tokenizer=qwen_dir, per_source=10, recover_turns=False)
    assert twin.report is not None and twin.report.to_json() == rep.to_json()


@pytest.mark.slow  # an export and a re-render with plots (~10 s)
def test_cli_report_rerenders(corpus: Path, qwen_dir: Path, tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "out"
    assert (
        main(
            [
                "export",
                str(corpus),
                "--tokenizer",
                str(qwen_dir),
                "--per-source",
                "8",
                "--out",
                str(out),
                "--no-turns",
                "--formats",
                "token_ids",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    summary = orjson.loads((out / REPORT_JSON).read_bytes())["summary"]
    assert summary in err  # export prints the one-line verdict
    (out / REPORT_HTML).unlink()
    assert main(["report", str(out)]) == 0
    assert capsys.readouterr().out.strip() == summary
    assert (out / REPORT_HTML).is_file()
    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert "report.json" in capsys.readouterr().err


def test_report_labels_first_reply_and_rest_of_row(tmp_path: Path) -> None:
    """The output-length comparison is named for max_tokens; n_response_tokens appears only
    under its own name."""
    rep = two_source_report()
    rep.write(tmp_path)
    md = (tmp_path / REPORT_MD).read_text()
    assert "first reply (max_tokens) KS suite (weighted) / random" in md
    assert "response KS" not in md
    assert "not n_response_tokens" in md  # the definition says what is compared
    html = (tmp_path / REPORT_HTML).read_text()
    assert "first reply (max_tokens)" in html and "n_response_tokens (rest of row)" in html
    data = orjson.loads((tmp_path / REPORT_JSON).read_bytes())
    ex = data["examples"]["a"][0]
    assert ex["max_tokens"] == 1 and "n_response_tokens" in ex


def test_length_verdict_judges_the_suite_with_its_weights() -> None:
    """A sampling design takes more items where the replies are long and weights each less:
    with its weights the suite's lengths match the corpus, unweighted they do not. The verdict
    judges the suite as its estimates use it (weighted) against random samples as theirs do
    (equal weights)."""
    import numpy as np

    from distprompt.choose.stratify import Quota
    from distprompt.write.metrics import measure_source
    from distprompt.write.report import build_report

    from factories import _report_items, grouped_candidates

    a, ca, sa = grouped_candidates("a", per=10)
    idx = [0, 10, 20, 21, 22, 30, 31, 32]  # the two long groups oversampled
    w = [0.25, 0.25, 0.25 / 3, 0.25 / 3, 0.25 / 3, 0.25 / 3, 0.25 / 3, 0.25 / 3]
    ev = measure_source(
        a, idx, w, stats=sa, content=ca, log_length=np.log([c.n_prompt_tokens for c in a]), seed=0
    )
    assert ev.suite.ks_prompt_weighted == pytest.approx(0, abs=1e-9)
    assert ev.suite.ks_response_weighted == pytest.approx(0, abs=1e-9)
    assert ev.suite.ks_prompt == pytest.approx(0.25)  # unweighted: 6 of 8 items long
    assert ev.random.ks_prompt is not None and ev.random.ks_prompt > 0
    rep = build_report(
        {"a": ev},
        stats={"a": sa},
        quotas={"a": Quota("a", 8, 8)},
        items=_report_items(a, idx, w),
        meta={"method": "test"},
    )
    assert rep.sources["a"]["length"] == "better"
    assert rep.verdict["length"] == "better"
    assert rep.overall["suite"]["ks_prompt_weighted_within"] == pytest.approx(0, abs=1e-6)
