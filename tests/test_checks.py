"""One tokenizer check for ``inspect`` and ``export`` (issue 8).

Data of one real tokenizer is exported with the other, in both directions: DeepSeek-V3 data with
Qwen3 (a larger vocabulary: every id fits, the markers and the round trip give it away) and Qwen3
data with DeepSeek-V3 (a smaller vocabulary: the ids do not fit). ``export`` refuses before
anything is written, with the message ``inspect`` gives; ``--no-tokenizer-check`` writes anyway
and records the verdict. Out-of-vocabulary rows are bad rows like any other.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from distprompt import Suite, build_suite, inspect_corpus
from distprompt.cli import main
from distprompt.engine import SIDE_THREADS
from distprompt.errors import DataError, InputError, TokenizerError
from distprompt.manifest import Manifest

from factories import chat_rows, make_corpus, write_shard

SHARD = "A1_chat/tokenized_data.jsonl"


@pytest.fixture(scope="module")
def qwen_data(tmp_path_factory: pytest.TempPathFactory, qwen_tokenizer: Any) -> Path:
    return make_corpus(tmp_path_factory.mktemp("qwen"), qwen_tokenizer, {"chat": 12})


@pytest.fixture(scope="module")
def deepseek_data(tmp_path_factory: pytest.TempPathFactory, deepseek_tokenizer: Any) -> Path:
    return make_corpus(tmp_path_factory.mktemp("ds"), deepseek_tokenizer, {"chat": 12})


def _export(
    data: Path, tok: Path, out: Path, *args: str, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    capsys.readouterr()
    code = main(
        [
            "export",
            str(data),
            "--tokenizer",
            str(tok),
            "--out",
            str(out),
            "--per-source",
            "4",
            "--no-progress",
            *args,
        ]
    )
    return code, capsys.readouterr().err


def _inspect_error(data: Path, tok: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["inspect", str(data), "--tokenizer", str(tok)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: "), err
    return err[len("error: ") :].rstrip("\n")


# --------------------------------------------------------------------------------------------
# refused: both directions, library and CLI, nothing written
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_larger_vocabulary_is_refused_with_inspects_message(
    deepseek_data: Path, qwen_dir: Path, on_error: str
) -> None:
    # DeepSeek-V3 ids all fit in Qwen3's vocabulary: only the markers and round trip tell.
    info = inspect_corpus(deepseek_data, tokenizer=qwen_dir)
    assert info.mismatch is not None
    with pytest.raises(TokenizerError) as ei:
        build_suite(
            deepseek_data, tokenizer=qwen_dir, per_source=4, recover_turns=False, on_error=on_error
        )
    msg = str(ei.value)
    assert msg.startswith(info.mismatch), (msg, info.mismatch)
    assert "template_markers check failed" in msg and "round_trip check failed" in msg
    assert f"first at {SHARD}:1" in msg and "in 12 of 12 rows" in msg
    assert "pass the tokenizer the data was made with" in msg and "`check_tokenizer=False`" in msg


def test_smaller_vocabulary_is_refused(qwen_data: Path, deepseek_dir: Path) -> None:
    # Qwen3 special tokens (151643+) do not fit DeepSeek-V3's 128815 ids. Strict: the first row
    # is a bad row, as any other; skipping: no row is left in the vocabulary, the check fails.
    with pytest.raises(DataError) as ei:
        build_suite(qwen_data, tokenizer=deepseek_dir, per_source=4, recover_turns=False)
    assert (ei.value.shard, ei.value.line, ei.value.reason) == (SHARD, 1, "id_out_of_vocab")
    assert "expected token ids below 128815" in str(ei.value)
    # every row fails so: the tokenizer is named, with the check, and skipping is not offered
    assert "every row (12) of the shard" in str(ei.value)
    assert "vocabulary check says this is not the tokenizer the data was made with" in str(ei.value)
    assert "skip" not in str(ei.value)
    info = inspect_corpus(qwen_data, tokenizer=deepseek_dir)
    assert info.mismatch is not None and "vocabulary check failed" in info.mismatch
    assert info.rows == 0 and info.anomalies["id_out_of_vocab"].count == 12
    with pytest.raises(TokenizerError) as ti:
        build_suite(
            qwen_data, tokenizer=deepseek_dir, per_source=4, recover_turns=False, on_error="skip"
        )
    msg = str(ti.value)
    assert msg.startswith(info.mismatch)
    assert "vocabulary size 128815 in every row (12 of 12); first at " + SHARD + ":1" in msg


def test_cli_refuses_both_directions_and_writes_nothing(
    qwen_data: Path,
    deepseek_data: Path,
    qwen_dir: Path,
    deepseek_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    # larger vocabulary: the same lines as inspect, plus what to do in export
    code, err = _export(deepseek_data, qwen_dir, out, capsys=capsys)
    assert code == 2 and not out.exists() and list(tmp_path.iterdir()) == []
    said = _inspect_error(deepseek_data, qwen_dir, capsys)
    assert err.startswith("error: " + said), (err, said)
    assert "--no-tokenizer-check" in err and "Traceback" not in err
    # smaller vocabulary, skipping
    code, err = _export(qwen_data, deepseek_dir, out, "--on-error", "skip", capsys=capsys)
    assert code == 2 and not out.exists()
    said = _inspect_error(qwen_data, deepseek_dir, capsys)
    assert "vocabulary check failed" in said and err.startswith("error: " + said)
    # smaller vocabulary, strict: the first bad row with shard:line
    code, err = _export(qwen_data, deepseek_dir, out, capsys=capsys)
    assert code == 2 and not out.exists()
    assert err.startswith(f"error: {SHARD}:1: expected token ids below 128815"), err


# --------------------------------------------------------------------------------------------
# --no-tokenizer-check: written, the verdict recorded
# --------------------------------------------------------------------------------------------


def test_no_tokenizer_check_writes_with_the_verdict_recorded(
    deepseek_data: Path, qwen_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code, err = _export(deepseek_data, qwen_dir, out, "--no-tokenizer-check", capsys=capsys)
    assert code == 0, err
    info = inspect_corpus(deepseek_data, tokenizer=qwen_dir)
    m = Manifest.from_dict(orjson.loads((out / "manifest.json").read_bytes()))
    check = m.tokenizer_check
    assert check is not None and check.passed is False and check.enforced is False
    assert check.mismatch == info.mismatch
    assert check.checks["template_markers"].failed == 12
    assert m.config["check_tokenizer"] is False
    assert any(w.startswith("tokenizer check failed") for w in m.warnings)
    # on top of RUN.md (right below its title) and of the report
    run_md = (out / "RUN.md").read_text(encoding="utf-8").splitlines()
    assert run_md[0] == "# Running this suite"
    assert run_md[2].startswith("> **Tokenizer check FAILED.**")
    assert "template_markers check failed" in "\n".join(run_md[:8])
    report_md = (out / "report.md").read_text(encoding="utf-8").splitlines()
    assert report_md[2].startswith("TOKENIZER CHECK FAILED (template_markers, round_trip;")
    assert "TOKENIZER CHECK FAILED" in (out / "report.html").read_text(encoding="utf-8")
    assert json.loads((out / "report.json").read_bytes())["summary"].startswith("TOKENIZER")
    # the last line says it, and that the suite is not token-exact (not only in a column)
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"wrote 4 items to {out} — TOKENIZER CHECK FAILED"), last
    assert "only 0 of 4 items (0%) are token-exact" in last
    assert Suite.load(out).manifest.tokenizer_check.passed is False


def test_no_tokenizer_check_in_the_library(qwen_data: Path, deepseek_dir: Path) -> None:
    # Every row outside the vocabulary: nothing to build, even without the check.
    with pytest.raises(InputError, match="expected at least one valid row"):
        build_suite(
            qwen_data,
            tokenizer=deepseek_dir,
            per_source=4,
            recover_turns=False,
            on_error="skip",
            check_tokenizer=False,
        )


def test_matching_tokenizer_records_a_passed_verdict(
    qwen_data: Path, deepseek_data: Path, qwen_dir: Path, deepseek_dir: Path
) -> None:
    for data, tok in ((qwen_data, qwen_dir), (deepseek_data, deepseek_dir)):
        suite = build_suite(data, tokenizer=tok, per_source=4, recover_turns=False)
        check = suite.manifest.tokenizer_check
        assert check.passed is True and check.enforced is True and check.mismatch is None
        assert {c: v.passed for c, v in check.checks.items()} == {
            "vocabulary": True,
            "template_markers": True,
            "round_trip": True,
        }
        info = inspect_corpus(data, tokenizer=tok)
        assert info.tokenizer is not None
        assert {k: v.to_dict() for k, v in check.checks.items()} == info.tokenizer.to_dict()[
            "checks"
        ]
        assert suite.report is not None and not suite.report.summary.startswith("TOKENIZER")


# --------------------------------------------------------------------------------------------
# skip means skip: one out-of-vocabulary row in 35
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["qwen3", "deepseek-v3"])
def test_one_out_of_vocabulary_row_in_35_is_skipped(
    which: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = "qwen" if which == "qwen3" else "deepseek"
    tok = request.getfixturevalue(f"{name}_tokenizer")
    tok_dir = request.getfixturevalue(f"{name}_dir")
    rows = chat_rows(tok, "chat", 35)
    bad = rows[20]
    bad["input_ids"] = [*bad["input_ids"][:-1], len(tok) + 7]  # one id past the vocabulary
    write_shard(tmp_path / "data" / SHARD, rows)
    data = tmp_path / "data"
    # strict: stops at that row
    with pytest.raises(DataError) as ei:
        build_suite(data, tokenizer=tok_dir, per_source=5, recover_turns=False)
    assert (ei.value.line, ei.value.reason) == (21, "id_out_of_vocab")
    # skip: the 34 others are kept, the check passes on them
    suite = build_suite(data, tokenizer=tok_dir, per_source=5, recover_turns=False, on_error="skip")
    m = suite.manifest
    assert m.counts.rows == 34
    assert m.counts.skipped == {"id_out_of_vocab": 1}
    assert m.counts.first_skipped == {"id_out_of_vocab": f"{SHARD}:21"}
    vocab = m.tokenizer_check.checks["vocabulary"]
    assert vocab.passed is True and vocab.failed == 1 and vocab.checked == 35
    assert m.tokenizer_check.passed is True
    # the CLI: exit 2 with shard:line by default, 34 rows with --on-error skip
    out = tmp_path / "out"
    code, err = _export(data, tok_dir, out, "--no-turns", capsys=capsys)
    assert code == 2 and not out.exists()
    assert err.startswith(f"error: {SHARD}:21: expected token ids below {len(tok)}"), err
    code, err = _export(data, tok_dir, out, "--no-turns", "--on-error", "skip", capsys=capsys)
    assert code == 0, err
    assert orjson.loads((out / "manifest.json").read_bytes())["counts"]["rows"] == 34
    assert "skipped rows: id_out_of_vocab=1" in err
    # inspect agrees: a bad row, not a wrong tokenizer
    info = inspect_corpus(data, tokenizer=tok_dir)
    assert info.mismatch is None and info.rows == 34
    assert info.anomalies["id_out_of_vocab"].first == f"{SHARD}:21"


@pytest.mark.parametrize("workers", [1, 2])
def test_checks_beside_selection_say_the_same(
    deepseek_data: Path,
    qwen_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    workers: int,
) -> None:
    # On a large corpus, selection starts (in worker processes, or a thread with one worker)
    # before the tokenizer checks run here: the refusal, the warnings and the files are as on a
    # small corpus, where everything runs here one after another.
    from distprompt.pipeline import schedule

    kw: dict = {"per_source": 4, "recover_turns": False}
    with pytest.raises(TokenizerError) as one:
        build_suite(deepseek_data, tokenizer=qwen_dir, **kw)
    written = build_suite(deepseek_data, tokenizer=qwen_dir, check_tokenizer=False, **kw)
    monkeypatch.setattr(schedule, "OVERLAP_BYTES", 0)
    with pytest.raises(TokenizerError) as two:
        build_suite(deepseek_data, tokenizer=qwen_dir, workers=workers, **kw)
    assert str(two.value) == str(one.value)
    parallel = build_suite(
        deepseek_data, tokenizer=qwen_dir, check_tokenizer=False, workers=workers, **kw
    )
    assert parallel._plots is not None  # the large-corpus path was taken
    assert parallel.manifest_bytes() == written.manifest_bytes()
    assert parallel.manifest.warnings[0].startswith("tokenizer check failed")
    a, b = written.save(tmp_path / "a"), parallel.save(tmp_path / "b")
    for name in ("suite.jsonl", "report.json", "RUN.md", "manifest.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_a_refusal_beside_selection_in_a_thread_drops_the_sources_not_started(
    tmp_path: Path, deepseek_tokenizer: Any, qwen_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One worker on a large corpus selects in threads while the checks run here (one during
    # the pass, two after it); when they refuse the tokenizer, the sources not yet started are
    # dropped, not selected first: of the three, at most the two the threads hold start.
    import threading

    from distprompt.pipeline import schedule

    data = make_corpus(tmp_path / "d", deepseek_tokenizer, {"a": 8, "b": 8, "c": 8})
    monkeypatch.setattr(schedule, "OVERLAP_BYTES", 0)
    started: list[str] = []
    gate = threading.Event()
    real = schedule.select_source

    def held(cands, quota, config, stats, heavy=(), shards=None):  # type: ignore[no-untyped-def]
        started.append(quota.source)
        gate.wait(30)  # until the refusal is raised
        return real(cands, quota, config, stats, heavy, shards)

    monkeypatch.setattr(schedule, "select_source", held)
    try:
        with pytest.raises(TokenizerError):
            build_suite(data, tokenizer=qwen_dir, per_source=3, recover_turns=False, workers=1)
    finally:
        gate.set()
    assert 1 <= len(started) <= SIDE_THREADS < 3


# --------------------------------------------------------------------------------------------
# a row that fails a per-row template check is the row's problem; the verdict is the corpus's
# --------------------------------------------------------------------------------------------


def _with_bad_rows(folder: Path, rows: list[dict[str, Any]], bad: list[dict[str, Any]]) -> Path:
    write_shard(folder / "d" / "s.jsonl", [*rows[:5], *bad, *rows[5:]])
    return folder / "d"


@pytest.fixture(scope="module")
def chat12(qwen_tokenizer: Any) -> list[dict[str, Any]]:
    return chat_rows(qwen_tokenizer, "chat", 12)


def test_a_row_without_the_markers_is_a_bad_row_not_a_wrong_tokenizer(
    tmp_path: Path, chat12: list[dict[str, Any]], qwen_dir: Path, capsys: Any
) -> None:
    r = chat12[0]
    cut = dict(r, n_prompt_tokens=2, n_response_tokens=r["seq_len"] - 2)  # no generation prompt
    one = dict(r, input_ids=[9], loss_mask=[0], seq_len=1, n_prompt_tokens=1, n_response_tokens=0)
    data = _with_bad_rows(tmp_path, chat12, [cut, one])
    # skipping: the two rows are skipped and counted, the tokenizer passes
    suite = build_suite(data, tokenizer=qwen_dir, per_source=4, on_error="skip")
    counts = suite.manifest.counts
    assert counts.rows == 12 and suite.manifest.corpus.shards[0].rows == 12
    assert counts.skipped == {"generation_prompt_missing": 1, "template_start_missing": 1}
    assert counts.first_skipped == {
        "generation_prompt_missing": "s.jsonl:6",
        "template_start_missing": "s.jsonl:7",
    }
    check = suite.manifest.tokenizer_check
    assert check.passed is True and check.mismatch is None
    markers = check.checks["template_markers"]
    assert (markers.passed, markers.failed, markers.checked) == (True, 2, 14)
    assert "too few to blame the tokenizer" in markers.detail
    assert all(it.provenance.line not in (6, 7) for it in suite)
    # raising: refused, as the row's problem, with its shard:line
    with pytest.raises(DataError) as ei:
        build_suite(data, tokenizer=qwen_dir, per_source=4)
    assert (ei.value.shard, ei.value.line, ei.value.reason) == (
        "s.jsonl",
        6,
        "generation_prompt_missing",
    )
    msg = str(ei.value)
    assert "a problem of this row, not of the tokenizer (2 of 14 rows" in msg
    assert "does not match" not in msg and '`on_error="skip"`' in msg
    code, err = _export(data, qwen_dir, tmp_path / "out", capsys=capsys)
    assert code == 2 and err.startswith("error: s.jsonl:6: expected the prompt")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("n_other", [2, 4])
def test_the_tokenizer_verdict_is_by_source(
    tmp_path: Path,
    chat12: list[dict[str, Any]],
    deepseek_tokenizer: Any,
    qwen_dir: Path,
    n_other: int,
) -> None:
    # A source of DeepSeek-V3 rows among Qwen3 ones: from three rows on, more than half of a
    # source failing blames the tokenizer; two are bad rows.
    other = chat_rows(deepseek_tokenizer, "other", n_other)
    data = _with_bad_rows(tmp_path, chat12, other)
    info = inspect_corpus(data, tokenizer=qwen_dir)
    assert info.tokenizer is not None
    markers = {c.name: c for c in info.tokenizer.checks}["template_markers"]
    assert markers.failed == n_other and markers.by_source == {"other": n_other}
    assert f"other: {n_other} of {n_other}, 100%" in markers.detail
    if n_other == 2:
        assert markers.passed is True and info.mismatch is None
        assert info.anomalies["template_start_missing"].skipped
        suite = build_suite(data, tokenizer=qwen_dir, per_source=4, on_error="skip")
        assert suite.manifest.counts.skipped == {"template_start_missing": 2}
        assert set(suite.manifest.sources) == {"chat"}
        return
    assert markers.passed is False and info.mismatch is not None
    assert "template_markers check failed" in info.mismatch and "other: 4 of 4" in info.mismatch
    assert "template_start_missing" not in info.anomalies or not (
        info.anomalies["template_start_missing"].skipped
    )
    assert info.sources["other"].rows == n_other  # the corpus's rows: counted as such
    with pytest.raises(TokenizerError):
        build_suite(data, tokenizer=qwen_dir, per_source=4, on_error="skip")
    suite = build_suite(
        data, tokenizer=qwen_dir, per_source=4, on_error="skip", check_tokenizer=False
    )
    assert suite.manifest.counts.rows == 12 + n_other
    assert suite.manifest.counts.skipped == {}


@pytest.mark.parametrize("first_bad", [True, False])
def test_a_wrong_family_tokenizer_is_named_and_one_bad_row_is_the_rows(
    first_bad: bool, tmp_path: Path, qwen_tokenizer: Any, deepseek_dir: Path
) -> None:
    """Issue 28: DeepSeek-V3 on Qwen3 rows stopped at row 1 as "out of vocabulary" and offered
    `--on-error skip`. Rows that all fail so name the tokenizer; one such row before rows in
    the vocabulary is still that row's problem."""
    from distprompt.read.scan import WRONG_TOKENIZER_ROWS
    from distprompt.recover.decode import load_tokenizer

    ds, _ = load_tokenizer(deepseek_dir)
    rows = chat_rows(qwen_tokenizer, "chat", WRONG_TOKENIZER_ROWS + 8)
    if first_bad:  # one corrupt row, then rows DeepSeek-V3's vocabulary holds
        rows = rows[:1] + chat_rows(ds, "chat", 5)
    write_shard(tmp_path / "data" / SHARD, rows)
    with pytest.raises(DataError) as ei:
        build_suite(tmp_path / "data", tokenizer=deepseek_dir, per_source=4, recover_turns=False)
    msg = str(ei.value)
    assert (ei.value.line, ei.value.reason) == (1, "id_out_of_vocab")
    if first_bad:
        assert "a corrupt row, or data made with another tokenizer" in msg
        assert '`on_error="skip"`' in msg
    else:
        assert f"each of the first {WRONG_TOKENIZER_ROWS} rows of the shard" in msg
        assert "vocabulary check says this is not the tokenizer" in msg and "skip" not in msg
