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


def test_a_take_all_row_stands_for_the_rows_like_it_not_its_prompts_others(
    qwen_tokenizer: Any, qwen_dir: Path, tmp_path: Path
) -> None:
    """A prompt answered more than once: its long reply is taken alone and stands for the rows
    that repeat it (the same row written again), not for the prompt's rows with short
    replies, which the other items stand for."""
    root = tmp_path / "prepared"
    longs = _long_rows(qwen_tokenizer, "agent", 2, 400)
    short = row_from_messages(
        qwen_tokenizer,
        [
            {"role": "user", "content": "Fix issue #0: the parser drops the last line."},
            {"role": "assistant", "content": "Done."},
        ],
        "agent",
    )
    assert (
        short["input_ids"][: short["n_prompt_tokens"]]
        == longs[0]["input_ids"][: longs[0]["n_prompt_tokens"]]
    )
    rows = chat_rows(qwen_tokenizer, "agent", 150, seed=3)
    # issue #0: one long reply and two short ones; issue #1: its long row written twice
    rows[10:10] = [short, longs[0], short]
    rows[80:80] = [longs[1], longs[1]]
    write_shard(root / "A1_agent" / "tokenized_data.jsonl", rows)
    for workers in (1, 2):
        suite = build_suite(root, tokenizer=str(qwen_dir), per_source=10, workers=workers)
        taken = sorted((it.weight, it.max_tokens) for it in suite if it.stratum == "take-all")
        assert [w for w, _ in taken] == [1.0, 2.0]
        assert all(n > 1500 for _, n in taken)
        assert sum(it.weight for it in suite) == pytest.approx(len(rows), rel=1e-6)
        first = sum(_first_reply(r) for r in rows)
        assert sum(it.weight * it.max_tokens for it in suite) == pytest.approx(first, rel=1e-6)


def test_the_longest_reply_tracker_counts_the_rows_of_its_length() -> None:
    from distprompt.read.pools import TopReplies

    from factories import candidate

    rows = [(7, 500, 1), (7, 100, 2), (7, 500, 3), (8, 300, 4), (7, 500, 5), (9, 50, 6)]

    def cand(key: int, n: int, line: int) -> Any:
        return candidate(key, n_resp=n, line=line, offset=10 * line)

    whole = TopReplies(2)
    for r in rows:
        if whole.offer(r[1], r[0]):
            whole.add(cand(*r))
    a, b = TopReplies(2), TopReplies(2)
    for part, rs in ((a, rows[:3]), (b, rows[3:])):
        for r in rs:
            if part.offer(r[1], r[0]):
                part.add(cand(*r))
    for top in (whole, b.merge(a)):
        got = [
            (c.key, c.first_response_length, c.count, c.provenance.line) for c in top.candidates()
        ]
        assert got == [(7, 500, 3, 1), (8, 300, 1, 4)]


def test_the_reference_estimate_takes_every_row_of_a_repeated_prompt() -> None:
    """The reply content a source's weights are calibrated to: a prompt whose rows were all
    measured counts as the mean of its rows' replies, each with its own length; a prompt with
    rows left unmeasured (a byte range missed it), or with one row, as its own row."""
    import dataclasses

    import numpy as np

    from distprompt.pipeline.sources import _per_row
    from distprompt.records import REPLY_FEATURES, REPLY_SCALE

    from factories import candidate

    width = len(REPLY_FEATURES)
    own = np.full(width, REPLY_SCALE // 2, dtype=np.uint16)

    def with_rows(key: int, count: int, replies: list[tuple[int, float]]) -> Any:
        total = np.zeros(width + 2, dtype=np.int64)
        for n, share in replies:
            total[:width] += n * round(share * REPLY_SCALE)
            total[width] += n
            total[-1] += 1
        return dataclasses.replace(
            candidate(key, n_resp=10), count=count, reply=own, reply_sum=total
        )

    cands = [
        with_rows(1, 3, [(10, 0.5), (30, 1.0), (20, 0.0)]),  # all three rows measured
        with_rows(2, 2, [(10, 0.5)]),  # one of its two rows measured: its own
        with_rows(3, 1, [(10, 0.5)]),
    ]
    shares = np.array([c.reply_shares() for c in cands])
    tokens, content = _per_row(cands, shares)
    assert tokens.tolist() == [20.0, 10.0, 10.0]
    assert content[0] == pytest.approx(np.full(width, (10 * 0.5 + 30 * 1.0) / 3), rel=1e-4)
    assert content[1] == pytest.approx(10 * shares[1])
    assert content[2] == pytest.approx(10 * shares[2])
