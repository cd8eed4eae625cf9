"""Every layout a chat template renders is trusted (issue 27): the tokenizer checks learn how each
layout opens and asks for a reply from probe renders, accept every one of them, and still refuse
a tokenizer of another family.

The templates are ours, written from public chat formats (``tests/layouts.py``); nothing in
distprompt knows them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from distprompt import inspect_corpus
from distprompt.cli import main
from distprompt.recover.checks import RowCheck, learn_layouts, prepare_checks
from distprompt.recover.decode import load_tokenizer
from distprompt.recover.light import light_checks
from layouts import (
    LAYOUTS,
    corpus_rows,
    family,
    layout_tokenizer,
    render_prompt,
    same_turns,
    write_corpus,
)

from factories import make_corpus

TURNS = ("first", "last")


class _Prompt:
    def __init__(self, ids: Any) -> None:
        self.prompt_ids = np.asarray(ids, dtype=np.int64)


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def layout(request: pytest.FixtureRequest, qwen_tokenizer: Any) -> tuple[str, Any]:
    return request.param, layout_tokenizer(qwen_tokenizer, request.param)


@pytest.fixture(scope="module")
def saved(layout: tuple[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The layout's tokenizer saved as transformers saves it (read without transformers too)."""
    name, tok = layout
    folder = tmp_path_factory.mktemp(name) / "tok"
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def corpora(layout: tuple[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    name, tok = layout
    out = {}
    for turn in TURNS:
        rows = corpus_rows(tok, name, 40, turn=turn, seed=1)
        out[turn] = write_corpus(tmp_path_factory.mktemp(f"{name}_{turn}"), rows)
    return out


def test_every_layout_opens_as_a_learned_one(layout: tuple[str, Any]) -> None:
    name, tok = layout
    markers = learn_layouts(tok)
    assert "tools_user" in markers.layouts and "tool_call_result" in markers.layouts
    check = RowCheck.of(markers)
    openings = set()
    for turn in TURNS:
        for row, msgs, tools in corpus_rows(tok, name, 60, turn=turn, seed=2):
            prompt = row["input_ids"][: row["n_prompt_tokens"]]
            assert check(_Prompt(prompt)) == [], (turn, tok.decode(prompt[:20]))
            openings.add((bool(tools), msgs[0]["role"]))
    assert len(openings) >= 3  # tools or not, system or not: the corpora hold several layouts


def test_mistral_layouts_open_with_tools_or_an_instruction(qwen_tokenizer: Any) -> None:
    tok = layout_tokenizer(qwen_tokenizer, "mistral_v3")
    markers = learn_layouts(tok)
    assert {tok.decode(list(s)) for s in markers.starts} == {
        "<s>[INST]",
        "<s>[AVAILABLE_TOOLS]",
    }
    assert tok.decode(list(markers.start)) == "<s>"
    # add_generation_prompt appends nothing in this format: no generation prompt to check
    assert markers.gen == () and markers.gens == ()
    # a prompt opening with neither layout's marker fails, even after the BOS
    bos_only = list(markers.start) + tok.encode("[TOOL_RESULTS] x", add_special_tokens=False)
    assert RowCheck.of(markers)(_Prompt(bos_only)) == ["template_start_missing"]


def test_light_checks_equal_the_loaded_tokenizers(saved: Path) -> None:
    got = light_checks(saved)
    assert got is not None
    tok, info = load_tokenizer(saved)
    assert got[1] == prepare_checks(tok, info.vocab_size)
    assert got[1].start or got[1].starts


def _code(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("turn", TURNS)
def test_right_tokenizer_passes_and_another_family_is_refused(
    turn: str,
    corpora: dict[str, Path],
    saved: Path,
    qwen_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = corpora[turn]
    info = inspect_corpus(data, tokenizer=saved)
    assert info.mismatch is None, info.mismatch
    out = tmp_path / "out"
    args = ["--per-source", "3", "--no-progress", "--out"]
    code, err = _code(["export", str(data), "--tokenizer", str(saved), *args, str(out)], capsys)
    assert code == 0, err
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    check = manifest["tokenizer_check"]
    assert check["passed"] is True and check["enforced"] is True and check["mismatch"] is None
    # Qwen3 itself: the layout's marker ids are past its vocabulary, every row is out of it
    wrong = tmp_path / "wrong"
    argv = ["export", str(data), "--tokenizer", str(qwen_dir), "--on-error", "skip", *args]
    code, err = _code([*argv, str(wrong)], capsys)
    assert code == 2 and not wrong.exists()
    assert "vocabulary check failed" in err, err


def test_another_familys_data_is_refused_by_the_layout_tokenizer(
    saved: Path, tmp_path: Path, qwen_tokenizer: Any
) -> None:
    data = make_corpus(tmp_path / "qwen", qwen_tokenizer, {"chat": 12})
    info = inspect_corpus(data, tokenizer=saved)
    assert info.mismatch is not None and "template_markers check failed" in info.mismatch
    assert " or " in info.mismatch  # every opening the layouts have is named


# --------------------------------------------------------------------------------------------
# ambiguity: a system prompt written into a user turn is read out only with evidence
# --------------------------------------------------------------------------------------------


def _recover(tok: Any, msgs: list[dict[str, Any]], tools: Any = None) -> Any:
    from distprompt.recover.template import learn_template
    from distprompt.recover.turns import recover_turns

    ids = render_prompt(tok, msgs, tools or [])
    return recover_turns(ids, tokenizer=tok, profile=learn_template(tok))


def test_blank_lines_in_user_text_invent_no_system_turn(qwen_tokenizer: Any) -> None:
    tok = layout_tokenizer(qwen_tokenizer, "mistral_v3")
    msgs = [{"role": "user", "content": "Summarise this:\n\nThe cat sat on the mat."}]
    rec = _recover(tok, msgs)
    assert rec.fidelity == "tokens" and list(rec.messages) == msgs
    assert [a.to_dict() for a in rec.ambiguities] == [
        {
            "kind": "system_in_user",
            "message": 0,
            "separator": "\n\n",
            "reading": "user",
            "evidence": 0,
        }
    ]
    # A system prompt: the same tokens, so the same (user) reading, and the same record.
    with_system = [{"role": "system", "content": "Summarise this:"}, {**msgs[0]}]
    with_system[1]["content"] = "The cat sat on the mat."
    again = _recover(tok, with_system)
    assert list(again.messages) == msgs and again.ambiguities == rec.ambiguities
    # No blank line, no ambiguity; a template marker between the two tells them apart.
    assert _recover(tok, [{"role": "user", "content": "One line."}]).ambiguities == ()
    qwen = _recover(qwen_tokenizer, with_system)
    assert list(qwen.messages) == with_system and qwen.ambiguities == ()


def test_a_system_prompt_is_read_out_on_the_sources_evidence(
    qwen_tokenizer: Any, tmp_path: Path
) -> None:
    from distprompt import build_suite

    tok = layout_tokenizer(qwen_tokenizer, "mistral_v3")
    rows = corpus_rows(tok, "mistral_v3", 80, turn="first", seed=5)
    write_corpus(tmp_path, rows)
    suite = build_suite(tmp_path, tokenizer=tok, per_source=1000)
    by_ids = {tuple(r["input_ids"][: r["n_prompt_tokens"]]): m for r, m, _ in rows}
    items = list(suite)
    kept = sum(list(it.messages or ()) == by_ids[it.prompt_ids] for it in items)
    assert kept >= 0.95 * len(items), (kept, len(items))
    readings = {a.reading for it in items for a in it.ambiguities}
    assert readings == {"user", "system"}
    for it in items:
        for a in it.ambiguities:
            if a.reading == "system":
                assert a.evidence >= 3 and it.messages is not None
                assert it.messages[0]["role"] == "system"
        assert it.fidelity == "tokens"
    # counted in the manifest, the report and the summary line
    counted = sum(sum(s.ambiguities.values()) for s in suite.manifest.sources.values())
    assert counted == sum(len(it.ambiguities) for it in items)
    assert suite.report is not None
    assert suite.report.overall["recovery"]["ambiguous"] == sum(
        bool(it.ambiguities) for it in items
    )
    line = suite.summary(tmp_path / "out").splitlines()[-1]
    assert f"{counted} ambiguous system/user turns" in line and "by evidence" in line
    saved = suite.save(tmp_path / "out")
    again = [
        json.loads(x) for x in (saved / "suite.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert sum(len(d["ambiguities"]) for d in again) == counted
    assert "| ambiguous |" in (saved / "report.md").read_text(encoding="utf-8")


# --------------------------------------------------------------------------------------------
# corpora of three templates: every turn back, tool calls with their ids, wrong family refused
# --------------------------------------------------------------------------------------------

MIN_SHARE = 0.95


@pytest.mark.parametrize("turn", TURNS)
def test_corpus_comes_back_turn_for_turn(
    layout: tuple[str, Any], turn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Done-when of issue 27: >= 95 % token-exact, >= 95 % with every original turn and none
    invented or merged, every tool call with its name, arguments and (printed) id."""
    from distprompt import build_suite

    name, tok = layout
    rows = corpus_rows(tok, name, 80, turn=turn, seed=7)
    write_corpus(tmp_path, rows)
    suite = build_suite(tmp_path, tokenizer=tok, per_source=1000)
    by_ids = {tuple(r["input_ids"][: r["n_prompt_tokens"]]): m for r, m, _ in rows}
    items = list(suite)
    assert len(items) == len(by_ids)
    exact = sum(it.fidelity == "tokens" for it in items)
    kept = sum(same_turns(it.messages, by_ids[it.prompt_ids]) for it in items)
    calls = 0
    for it in items:
        want = by_ids[it.prompt_ids]
        if it.messages is None or len(it.messages) != len(want):
            continue  # an ambiguity kept as user text (counted above, not a call's loss)
        for got_m, want_m in zip(it.messages, want, strict=True):
            got_calls = [
                (c["function"]["name"], c["function"]["arguments"], c.get("id"))
                for c in got_m.get("tool_calls") or ()
            ]
            want_calls = [
                (c["function"]["name"], c["function"]["arguments"], c.get("id"))
                for c in want_m.get("tool_calls") or ()
            ]
            assert got_calls == want_calls, (name, turn)
            calls += len(want_calls)
            assert got_m.get("tool_call_id") == want_m.get("tool_call_id")
    assert calls >= 30 or turn == "first"  # first-turn prompts hold no earlier call
    with capsys.disabled():
        print(
            f"\n[layouts] {name} {turn}-turn: {len(items)} items, tokens {exact}, every turn "
            f"{kept}, tool calls {calls}, ambiguous {sum(bool(it.ambiguities) for it in items)}"
        )
    assert exact >= MIN_SHARE * len(items) and kept >= MIN_SHARE * len(items), (exact, kept)
    counted = sum(sum(s.ambiguities.values()) for s in suite.manifest.sources.values())
    assert counted == sum(len(it.ambiguities) for it in items)


def test_another_layouts_tokenizer_is_refused(
    layout: tuple[str, Any],
    corpora: dict[str, Path],
    qwen_tokenizer: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The other templates share the vocabulary (their marker tokens take the same new ids):
    where the ids fit, only the markers tell the families apart, and they do, on first- and
    last-turn data."""
    name, _tok = layout
    by_markers = 0
    for other in sorted(o for o in LAYOUTS if family(o) != family(name)):
        folder = tmp_path / other
        layout_tokenizer(qwen_tokenizer, other).save_pretrained(folder)
        for turn in TURNS:
            out = tmp_path / f"out_{other}_{turn}"
            argv = ["export", str(corpora[turn]), "--tokenizer", str(folder), "--out", str(out)]
            code, err = _code([*argv, "--per-source", "3", "--no-progress"], capsys)
            assert code == 2 and not out.exists(), (name, other, turn, err)
            if "expected token ids below" in err:
                continue  # the other template adds fewer tokens: the first row is out of it
            assert "template_markers check failed" in err, err
            by_markers += 1
    assert by_markers >= 2  # each layout's data meets a tokenizer whose vocabulary covers it
