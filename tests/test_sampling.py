"""The sampling design end to end: rows with very long first replies stand for themselves, even
outside the uniform pool; weights are corpus rows, calibrated to the source's exact totals."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from distprompt import build_suite

from factories import chat_rows, row_from_messages, write_shard


def _long_rows(tokenizer: Any, source: str, n: int, words: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        reply = " ".join(f"step{j} of the long agent reply {i}" for j in range(words))
        msgs = [
            {"role": "user", "content": f"Fix issue #{i}: the parser drops the last line."},
            {"role": "assistant", "content": reply},
        ]
        out.append(row_from_messages(tokenizer, msgs, source))
    return out


@pytest.fixture(scope="module")
def heavy_corpus(tmp_path_factory: pytest.TempPathFactory, qwen_tokenizer: Any) -> Path:
    root = tmp_path_factory.mktemp("heavy") / "prepared"
    agent = chat_rows(qwen_tokenizer, "agent", 150, seed=3) + _long_rows(
        qwen_tokenizer, "agent", 3, 400
    )
    write_shard(root / "A1_agent" / "tokenized_data.jsonl", agent)
    write_shard(root / "B1_chat" / "tokenized_data.jsonl", chat_rows(qwen_tokenizer, "chat", 80))
    return root


def _first_reply(row: dict[str, Any]) -> int:
    mask = row["loss_mask"][row["n_prompt_tokens"] :]
    start = mask.index(1)
    end = mask.index(0, start) if 0 in mask[start:] else len(mask)
    return end - start


def _rows(root: Path) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in sorted(root.rglob("*.jsonl")):
        for line in p.read_text().splitlines():
            r = json.loads(line)
            out[r["source"]].append(r)
    return out


@pytest.mark.parametrize("max_candidates", [1000, 40])
def test_long_replies_stand_for_themselves_and_weights_meet_totals(
    heavy_corpus: Path, qwen_dir: Path, tmp_path: Path, max_candidates: int
) -> None:
    # with 40 candidates the pool (a uniform sample of 153 prompts) can miss the long rows:
    # the pass keeps them anyway
    suite = build_suite(
        heavy_corpus, tokenizer=str(qwen_dir), per_source=10, max_candidates=max_candidates
    )
    rows = _rows(heavy_corpus)
    items = defaultdict(list)
    for it in suite:
        items[it.source].append(it)
    agent = items["agent"]
    taken = [it for it in agent if it.stratum == "take-all"]
    assert len(taken) == 3
    assert all(it.weight == 1.0 and it.max_tokens > 1500 for it in taken)
    others = {it.stratum for it in agent} - {"take-all"}
    assert others and all(s.startswith("len") for s in others)
    for source, its in items.items():
        rs = rows[source]
        assert sum(it.weight for it in its) == pytest.approx(len(rs), rel=1e-6)
        first = sum(_first_reply(r) for r in rs)
        assert sum(it.weight * it.max_tokens for it in its) == pytest.approx(first, rel=1e-6)
        prompt = sum(r["n_prompt_tokens"] for r in rs)
        assert sum(it.weight * it.n_prompt_tokens for it in its) == pytest.approx(prompt, rel=1e-6)


def test_a_flat_source_has_no_take_all(heavy_corpus: Path, qwen_dir: Path) -> None:
    suite = build_suite(heavy_corpus, tokenizer=str(qwen_dir), per_source=10)
    assert not [it for it in suite if it.source == "chat" and it.stratum == "take-all"]
