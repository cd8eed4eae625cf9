"""The pools' feature windows in a temporary file (distprompt.read.spill)."""

from __future__ import annotations

import logging
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from distprompt.choose.vectorize import budget_width, head_tail, vectorize
from distprompt.engine import Schedule
from distprompt.read.scan import BottomK, Partial, scan
from distprompt.read.shards import discover_shards
from distprompt.read.spill import SpilledWindow, WindowStore

from factories import as_row, chat_rows, write_shard


def test_windows_read_back_as_written() -> None:
    rng = np.random.default_rng(0)
    windows = [rng.integers(0, 150_000, int(n), dtype=np.int32) for n in rng.integers(0, 600, 50)]
    windows.append(np.array([2**40, 7], dtype=np.int64))  # a wide id keeps its dtype
    windows.append(np.zeros(0, dtype=np.int32))
    with WindowStore() as store:
        refs = store.put(windows[:20])
        assert refs is not None
        more = store.put(windows[20:])  # appended after the first ones
        assert more is not None
        refs += more
        assert store.spilled == len(windows) and store.kept == 0
        assert store.size == sum(w.nbytes for w in windows)
        for w, ref in zip(windows, refs, strict=True):
            got = ref.read()
            assert len(ref) == w.shape[0]
            assert got.dtype == w.dtype and np.array_equal(got, w)
            # another process cannot read this one's file: a window pickles as its ids
            again = pickle.loads(pickle.dumps(ref))
            assert isinstance(again, np.ndarray) and np.array_equal(again, w)
        assert store.put([]) == []
    with pytest.raises(RuntimeError, match="closed"):
        refs[0].read()


@pytest.mark.parametrize("how", ["pwritev", "short writes", "no pwritev"])
def test_many_windows_are_written_in_batches_whatever_the_writes_take(
    monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    # More windows than one pwritev call takes, of two widths; a call that writes less than
    # asked (allowed for any write) or a platform without pwritev: the same bytes either way.
    import os

    from distprompt.read import spill

    if how == "short writes":
        real = os.pwritev
        monkeypatch.setattr(os, "pwritev", lambda fd, bufs, at: real(fd, bufs[:1], at))
    elif how == "no pwritev":
        monkeypatch.delattr(os, "pwritev")
    rng = np.random.default_rng(1)
    n = spill._IOV_MAX * 2 + 5
    windows = [
        rng.integers(0, 2**40 if i % 7 == 0 else 150_000, int(rng.integers(0, 40))).astype(
            np.int64 if i % 7 == 0 else np.int32
        )
        for i in range(n)
    ]
    with WindowStore() as store:
        first = store.put(windows[:3])
        refs = store.put(windows[3:])
        assert first is not None and refs is not None
        assert store.size == sum(w.nbytes for w in windows)
        for w, ref in zip(windows, first + refs, strict=True):
            assert ref.read().dtype == w.dtype and np.array_equal(ref.read(), w)


def test_a_store_that_cannot_be_written_keeps_the_windows_in_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = WindowStore(tmp_path / "missing")  # no such directory: the file cannot be made
    with caplog.at_level(logging.WARNING, logger="distprompt.read.spill"):
        assert store.put([np.arange(3, dtype=np.int32)]) is None
        assert store.put([np.arange(2, dtype=np.int32)] * 2) is None
    assert store.kept == 3 and store.spilled == 0 and store.failed is not None
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "kept in memory" in warning.getMessage() and "TMPDIR" in warning.getMessage()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, qwen_tokenizer: Any) -> Path:
    """Two sources over plain and compressed shards, with duplicates inside and across shards,
    prompts longer than a feature window, and more unique prompts than the pools hold."""
    root = tmp_path_factory.mktemp("spill")
    chat = chat_rows(qwen_tokenizer, "chat", 120)
    rng = np.random.default_rng(5)
    long = [
        as_row(rng.integers(0, 150000, int(n)).tolist(), [0] * int(n - 9) + [1] * 9, int(n - 9),
               "long")
        for n in rng.integers(520, 1400, 40)
    ]  # fmt: skip
    write_shard(root / "a.jsonl", chat[:90] + long[:25] + chat[:7])
    write_shard(root / "b.jsonl.gz", chat[80:] + long[20:] + chat[3:9])
    write_shard(root / "c.jsonl", long[::3] + chat[::11])
    return root


def _one(c: Any) -> tuple[Any, ...]:
    ids = c.feature_ids.tolist()
    return (c.key, c.count, c.provenance, c.n_prompt_tokens, c.n_feature_ids, ids)


def _held(part: Partial) -> dict[str, list[tuple[Any, ...]]]:
    return {s: [_one(c) for c in pool.candidates()] for s, pool in part.pools.items()}


@pytest.mark.parametrize(
    "how",
    [
        Schedule(processes=True),
        Schedule(processes=True, unit_bytes=4096),
        Schedule(workers=2),
        Schedule(workers=2, unit_bytes=4096),
        Schedule(processes=False),
    ],
    ids=["one process", "one process, ranges", "two workers", "two workers, ranges", "here"],
)
def test_a_pass_with_its_windows_in_a_file_holds_the_same_pools(
    corpus: Path, how: Schedule
) -> None:
    shards = discover_shards(corpus)
    for k in (15, 500):  # pools that evict (windows left in the file) and pools that keep all
        plain = scan(shards, max_candidates=k, schedule=how)
        with WindowStore() as store:
            spilled = scan(shards, max_candidates=k, spill=store, schedule=how)
            assert _held(spilled) == _held(plain)
            cands = [c for pool in spilled.pools.values() for c in pool.candidates()]
            assert all(isinstance(c.window, SpilledWindow) for c in cands)
            assert all(c.window.store is store for c in cands)  # type: ignore[union-attr]
            assert store.spilled >= len(cands) and store.kept == 0
            if k == 15:
                assert store.spilled > len(cands)  # some were evicted after they were written
            # the pools' first prompts, held for the round trip, stay in memory
            for pool in spilled.pools.values():
                assert pool.sample is not None
                held = pool.sample._entries.values()
                assert all(isinstance(c.prompt_ids, np.ndarray) for c in held)
            # a pool sent elsewhere carries its windows' ids
            for src, pool in spilled.pools.items():
                again = pickle.loads(pickle.dumps(pool))
                assert _held(Partial(k=k, pools={src: again})) == _held(
                    Partial(k=k, pools={src: plain.pools[src]})
                )


def test_a_pass_whose_windows_cannot_be_written_keeps_them_and_holds_the_same_pools(
    corpus: Path, tmp_path: Path
) -> None:
    shards = discover_shards(corpus)
    plain = scan(shards, max_candidates=15, schedule=Schedule(workers=2, unit_bytes=4096))
    store = WindowStore(tmp_path / "missing")
    got = scan(
        shards, max_candidates=15, schedule=Schedule(workers=2, unit_bytes=4096), spill=store
    )
    assert _held(got) == _held(plain)
    assert store.kept > 0 and store.spilled == 0
    assert all(isinstance(c.window, np.ndarray) for p in got.pools.values() for c in p.candidates())


def test_windows_cut_to_the_budget_as_read_give_the_same_features() -> None:
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, 5000, int(n)) for n in rng.integers(1, 900, 300)]
    budget = 20_000
    w = budget_width(sum(len(p) for p in prompts), len(prompts), budget)
    assert w is not None  # over the budget: cut
    cut = [head_tail(p, w) for p in prompts]
    assert budget_width(sum(len(p) for p in cut), len(cut), budget) in (None, w)  # idempotent
    lengths = [len(p) for p in prompts]  # the prompts' own (the pipeline passes them)
    a = vectorize(prompts, lengths=lengths, token_budget=budget)
    b = vectorize(cut, lengths=lengths, token_budget=budget)
    assert np.array_equal(a.joint, b.joint) and np.array_equal(a.content, b.content)
    assert (a.tfidf != b.tfidf).nnz == 0
    assert budget_width(100, 10, 100) is None


def _fields(c: Any) -> tuple[Any, ...]:
    w = c.window
    where = (w.store, w.offset, w.n, w.dtype) if isinstance(w, SpilledWindow) else None
    return (c.key, c.source, c.prompt_ids, c.prompt_mask, c.response_ids, c.n_response_tokens,
            c.provenance, c.count, where, c.n_prompt, c.n_first_response)  # fmt: skip


def test_a_compacted_pool_gives_the_same_entries_and_changes_as_before(corpus: Path) -> None:
    shards = discover_shards(corpus)
    with WindowStore() as store:
        for k in (15, 500):
            part = scan(
                shards, max_candidates=k, schedule=Schedule(workers=2, unit_bytes=4096), spill=store
            )
            for pool in part.pools.values():
                assert pool._frozen is not None  # compacted at the end of the pass
                before = pool.candidates()
                assert len(pool) == len(before) and not pool._entries
                thawed = pickle.loads(pickle.dumps(pool))  # by column, windows as their ids
                assert [c.key for c in thawed.candidates()] == [c.key for c in before]
                pool._thaw()
                assert [_fields(c) for c in pool.candidates()] == [_fields(c) for c in before]
                distinct, tokens = pool.distinct(), pool.feature_tokens()
                assert pool.compact()
                assert (pool.distinct(), pool.feature_tokens()) == (distinct, tokens)
                assert tokens == sum(c.n_feature_ids for c in before)
                assert [_fields(c) for c in pool.candidates(3)] == [_fields(c) for c in before[:3]]
                # a change thaws it: the same pool as one never compacted
                other = pickle.loads(pickle.dumps(pool))
                other._thaw()
                newcomer = replace_key(before[0], 1)
                pool.add(newcomer)
                other.add(newcomer)
                assert pool._frozen is None
                assert [c.key for c in pool.candidates()] == [c.key for c in other.candidates()]
                assert pool.distinct() == other.distinct()


def replace_key(c: Any, key: int) -> Any:
    import dataclasses

    return dataclasses.replace(c, key=key)


def test_only_pools_whose_windows_are_all_in_one_store_are_compacted() -> None:
    from factories import candidate

    pool = BottomK(5)
    pool.add(candidate(1, n_prompt=3))  # holds its ids
    assert not pool.compact() and pool._frozen is None and len(pool) == 1
    assert not BottomK(5).compact()  # empty: nothing to gain
    with WindowStore() as a, WindowStore() as b:
        import dataclasses

        mixed = BottomK(5)
        for key, store in ((1, a), (2, b)):
            c = candidate(key, n_prompt=3)
            [ref] = store.put([c.prompt_ids]) or []
            mixed.add(dataclasses.replace(c, prompt_ids=None, prompt_mask=None,
                                          response_ids=None, window=ref))  # fmt: skip
        assert not mixed.compact()
