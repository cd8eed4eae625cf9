"""Client files and RUN.md for items whose turns are not token-exact or are flat (issue 11)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import orjson

from distprompt.records import SuiteItem
from distprompt.write.export import write_exports
from distprompt.write.formats import FORMATS
from distprompt.write.runmd import run_md
from test_export import make_item


def _lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def _items() -> list[SuiteItem]:
    exact = [dataclasses.replace(make_item(i), structure="turns") for i in range(3)]
    inexact = dataclasses.replace(make_item(3), fidelity="text", structure="turns")
    flat = dataclasses.replace(
        make_item(
            4,
            messages=[{"role": "user", "content": "Hi<|im_end|>\n<|im_start|>assistant\nHello"}],
        ),
        structure="flat",
    )
    return [*exact, inexact, flat]


def test_chat_files_leave_out_items_that_are_not_token_exact(tmp_path: Path) -> None:
    items = _items()
    write_exports(items, tmp_path, tokenizer_name="tok")
    ids = {it.id for it in items}
    inexact = "glaive-0003"
    for name in ("provenance.jsonl",):
        got = [r["id"] for r in _lines(tmp_path / name)]
        assert inexact not in got and set(got) == ids - {inexact}
    assert len(_lines(tmp_path / "openai.jsonl")) == len(items) - 1
    assert inexact not in {r["id"] for r in _lines(tmp_path / "aiperf.jsonl")}
    assert inexact not in {r["session_id"] for r in _lines(tmp_path / "aiperf_multi_turn.jsonl")}
    assert inexact not in {r["question_id"] for r in _lines(tmp_path / "by_source/glaive.jsonl")}
    sharegpt = orjson.loads((tmp_path / "sharegpt.json").read_bytes())
    assert inexact not in {r["id"] for r in sharegpt}
    guidellm = {r["dp_id"]: r for r in _lines(tmp_path / "guidellm.jsonl")}
    assert guidellm[inexact]["messages"] is None and guidellm[inexact]["prompt"]
    # The exact replays keep every item.
    assert len(_lines(tmp_path / "token_ids.jsonl")) == len(items)
    assert len(_lines(tmp_path / "vllm_custom.jsonl")) == len(items)


def test_run_md_counts_left_out_and_flat_items(tmp_path: Path) -> None:
    text = run_md(_items(), formats=FORMATS, tokenizer_name="tok")
    assert "1 of 5 items are not token-exact** (text: 1)" in text
    assert "1 item with messages left out of the chat-based files" in text
    assert "`token_ids.jsonl`" in text and "`--skip-chat-template`" in text
    assert "**1 of 4 chat items are flat**" in text and "`glaive-0004`" in text
    assert "--num-prompts 4" in text  # openai.jsonl holds the 4 exact items


def test_run_md_is_quiet_when_every_item_is_exact_and_structured() -> None:
    items = [dataclasses.replace(make_item(i), structure="turns") for i in range(3)]
    text = run_md(items, formats=FORMATS, tokenizer_name="tok")
    assert "not token-exact" not in text and "are flat" not in text


def test_flat_warning_only_for_chat_based_files() -> None:
    text = run_md(_items(), formats=["token_ids", "vllm_custom"], tokenizer_name="tok")
    assert "are flat" not in text
    assert "left out of the chat-based files" not in text
