"""The one-pass sample: bottom-k pools, duplicate collapse, mergeability."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from distprompt.read.scan import BottomK, Partial, prompt_key, scan
from distprompt.read.shards import discover_shards

from factories import candidate, chat_rows, write_shard


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(st.integers(0, 50), max_size=80),
    k=st.integers(1, 20),
    cut=st.integers(0, 80),
)
def test_bottom_k_merge_equals_single_pass(keys: list[int], k: int, cut: int) -> None:
    whole = BottomK(k)
    for i, key in enumerate(keys):
        whole.add(candidate(key, shard="s", line=i + 1))
    a, b = BottomK(k), BottomK(k)
    for i, key in enumerate(keys[:cut]):
        a.add(candidate(key, shard="s", line=i + 1))
    for i, key in enumerate(keys[cut:], start=cut):
        b.add(candidate(key, shard="s", line=i + 1))
    merged = b.merge(a)  # order of merging must not matter
    want = sorted(set(keys))[:k]
    for pool in (whole, merged):
        cands = pool.candidates()
        assert [c.key for c in cands] == want
        # Multiplicities are exact and provenance is the first occurrence.
        for c in cands:
            assert c.count == keys.count(c.key)
            assert c.provenance.line == keys.index(c.key) + 1
    assert whole.distinct() == merged.distinct()
    if len(set(keys)) <= k:
        assert whole.distinct() == (len(set(keys)), True)


def test_distinct_estimate_is_close() -> None:
    rng = np.random.default_rng(0)
    pool = BottomK(500)
    for key in rng.integers(0, 2**63, size=20000, dtype=np.int64):
        pool.add(candidate(int(key) * 2, shard="s"))
    est, exact = pool.distinct()
    assert not exact
    assert abs(est - 20000) / 20000 < 0.15


def test_prompt_key_depends_on_ids_and_seed() -> None:
    a = np.array([1, 2, 3])
    assert prompt_key(a) == prompt_key(a.astype(np.int32))
    assert prompt_key(a) != prompt_key(np.array([1, 2, 4]))
    assert prompt_key(a, seed=1) != prompt_key(a, seed=0)


def _pools(part: Partial) -> dict[str, list[tuple[int, int, str, int]]]:
    return {
        s: [(c.key, c.count, c.provenance.shard, c.provenance.line) for c in p.candidates()]
        for s, p in part.pools.items()
    }


def test_scan_independent_of_shard_order_and_workers(tmp_path: Path, qwen_tokenizer) -> None:  # type: ignore[no-untyped-def]
    rows = chat_rows(qwen_tokenizer, "chat", 40)
    write_shard(tmp_path / "a.jsonl", rows[:25] + rows[:5])  # duplicates inside a shard
    write_shard(tmp_path / "b.jsonl.gz", rows[20:] + rows[:3])  # and across shards
    shards = discover_shards(tmp_path)
    one = scan(shards, max_candidates=15)
    rev = scan(list(reversed(shards)), max_candidates=15)
    par = scan(shards, max_candidates=15, workers=2)
    assert _pools(one) == _pools(rev) == _pools(par)
    st_ = one.stats["chat"]
    assert st_.rows == 25 + 5 + 20 + 3
    assert one.pools["chat"].distinct() == (40, False) or one.pools["chat"].distinct()[1] is False
    small = scan(shards, max_candidates=100)
    assert small.pools["chat"].distinct() == (40, True)
    assert sum(c.count for c in small.pools["chat"].candidates()) == st_.rows
    # A duplicate's provenance is its first occurrence in (shard, line) order.
    first = {c.key: c.provenance for c in small.pools["chat"].candidates()}
    k0 = prompt_key(np.array(rows[0]["input_ids"][: rows[0]["n_prompt_tokens"]]))
    assert (first[k0].shard, first[k0].line) == ("a.jsonl", 1)
