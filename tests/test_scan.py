"""The one-pass sample: bottom-k pools, duplicate collapse, mergeability."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distprompt.engine import Schedule
from distprompt.read.readback import load_candidates, sampled_prompts
from distprompt.read.scan import (
    SAMPLE,
    BottomK,
    Partial,
    prompt_key,
    scan,
)
from distprompt.read.shards import discover_shards

from factories import as_row, candidate, chat_rows, write_shard


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(st.integers(0, 50), max_size=80),
    k=st.integers(1, 20),
    cut=st.integers(0, 80),
)
def test_bottom_k_merge_equals_single_pass(keys: list[int], k: int, cut: int) -> None:
    whole = BottomK(k)
    for i, key in enumerate(keys):
        whole.add(candidate(key, shard="s", line=i + 1, offset=10 * i))
    a, b = BottomK(k), BottomK(k)
    for i, key in enumerate(keys[:cut]):
        a.add(candidate(key, shard="s", line=i + 1, offset=10 * i))
    for i, key in enumerate(keys[cut:], start=cut):
        b.add(candidate(key, shard="s", line=i + 1, offset=10 * i))
    merged = b.merge(a)  # order of merging must not matter
    want = sorted(set(keys))[:k]
    for pool in (whole, merged):
        cands = pool.candidates()
        assert [c.key for c in cands] == want
        # Multiplicities are exact and the provenance is one of the key's rows, the same one
        # however the rows were split.
        for c in cands:
            assert c.count == keys.count(c.key)
            assert keys[c.provenance.line - 1] == c.key
    assert [c.provenance for c in whole.candidates()] == [c.provenance for c in merged.candidates()]
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
    par = scan(shards, max_candidates=15, schedule=Schedule(workers=2))
    assert _pools(one) == _pools(rev) == _pools(par)
    st_ = one.stats["chat"]
    assert st_.rows == 25 + 5 + 20 + 3
    assert one.pools["chat"].distinct() == (40, False) or one.pools["chat"].distinct()[1] is False
    small = scan(shards, max_candidates=100)
    assert small.pools["chat"].distinct() == (40, True)
    assert sum(c.count for c in small.pools["chat"].candidates()) == st_.rows
    # A duplicate's provenance is one of its rows (the same for any order and split: above).
    kept = {c.key: c.provenance for c in small.pools["chat"].candidates()}
    k0 = prompt_key(np.array(rows[0]["input_ids"][: rows[0]["n_prompt_tokens"]]))
    assert (kept[k0].shard, kept[k0].line) in {("a.jsonl", 1), ("a.jsonl", 26), ("b.jsonl.gz", 21)}


def test_a_duplicated_prompt_keeps_a_uniform_draw_of_its_rows() -> None:
    """The rows of one prompt may differ after it (several replies to one prompt); the row
    kept stands for all of them, so it must not be the first in file order but any of them
    alike, whatever order they come in."""
    firsts = [0, 0, 0]
    for key in range(600):
        fwd, rev = BottomK(1000), BottomK(1000)
        rows = [
            candidate(key, shard="s", line=j + 1, offset=100 * j, n_resp=10 * (j + 1))
            for j in range(3)
        ]
        for c in rows:
            fwd.add(c)
        for c in reversed(rows):
            rev.add(c)
        (got,) = fwd.candidates()
        assert got.count == 3 and got.provenance == rev.candidates()[0].provenance
        firsts[got.provenance.line - 1] += 1
    assert min(firsts) > 150, firsts  # 200 each on average
    # rows alike after the prompt (the same row written again) are taken in file order
    same = BottomK(10)
    for j in (2, 0, 1):
        same.add(candidate(5, shard="s", line=j + 1, offset=100 * j, n_resp=7))
    assert same.candidates()[0].provenance.line == 1


def _view(cands: list[Any]) -> list[tuple[int, int, Any, list[int] | None]]:
    return [
        (c.key, c.count, c.provenance, None if c.prompt_ids is None else c.prompt_ids.tolist())
        for c in cands
    ]


@pytest.fixture(scope="module")
def sampled_corpus(tmp_path_factory: pytest.TempPathFactory, qwen_tokenizer: Any) -> Path:
    """Two sources of more than 64 unique prompts over plain, gzip and zstd shards, with
    duplicates inside and across shards (their first occurrence not in the first shard read)."""
    root = tmp_path_factory.mktemp("sampled")
    chat = chat_rows(qwen_tokenizer, "chat", 150)
    rng = np.random.default_rng(3)
    # prompts of random ids: many do not survive a decode and re-encode
    noise = [
        as_row(rng.integers(0, 150000, 30).tolist(), [0] * 20 + [1] * 10, 20, "noise")
        for _ in range(90)
    ]
    write_shard(root / "b.jsonl", chat[:100] + chat[:10] + noise[:50] + chat[140:])
    write_shard(root / "a.jsonl.gz", chat[60:] + chat[5:20] + noise[40:])
    write_shard(root / "c.jsonl.zst", chat[::7] + noise[::9])
    return root


def _variants(shards: list[Any], **kw: Any) -> dict[str, Partial]:
    return {
        "one worker": scan(shards, max_candidates=100, **kw),
        "reversed": scan(list(reversed(shards)), max_candidates=100, **kw),
        "two workers": scan(shards, max_candidates=100, schedule=Schedule(workers=2), **kw),
        "byte ranges": scan(
            shards, max_candidates=100, schedule=Schedule(workers=2, unit_bytes=4096), **kw
        ),
        "byte ranges, one process": scan(
            shards, max_candidates=100, schedule=Schedule(unit_bytes=4096, processes=False), **kw
        ),
    }


def test_the_pass_holds_the_pools_first_prompts(sampled_corpus: Path) -> None:
    """The sample the pass holds is the pool's first 64 candidates (same keys, counts and
    provenance) with the prompt ids read back from their rows, for any worker count, shard
    order and unit size; no row is read back for it."""
    shards = discover_shards(sampled_corpus)
    reference = None
    for how, part in _variants(shards).items():
        for src in ("chat", "noise"):
            pool = part.pools[src]
            assert len(pool) > SAMPLE, how
            assert pool.sample is not None and pool.sample.k == SAMPLE
            first = pool.candidates()[:SAMPLE]
            assert [c[:3] for c in _view(pool.sample.candidates())] == [
                c[:3] for c in _view(first)
            ], how
            got, read_back = sampled_prompts(pool, SAMPLE, shards)
            assert read_back == 0, how
            assert _view(got) == _view(load_candidates(first, shards)), how
            assert all(c.prompt_ids is not None for c in got)
        views = {s: _view(sampled_prompts(p, SAMPLE, shards)[0]) for s, p in part.pools.items()}
        reference = reference or views
        assert views == reference, how


def test_a_pool_smaller_than_the_sample_is_held_whole(sampled_corpus: Path) -> None:
    shards = discover_shards(sampled_corpus)
    for workers in (1, 2):
        part = scan(shards, max_candidates=30, schedule=Schedule(workers=workers, unit_bytes=4096))
        pool = part.pools["chat"]
        assert pool.sample is not None and pool.sample.k == 30
        got, read_back = sampled_prompts(pool, SAMPLE, shards)
        assert read_back == 0 and len(got) == 30
        assert _view(got) == _view(load_candidates(pool.candidates(), shards))


def test_prompts_not_held_are_read_back(sampled_corpus: Path) -> None:
    """A larger sample than the pass held, no sample, or a pool merged with a partial read
    without one: the missing prompts are read back, the result is the same."""
    shards = discover_shards(sampled_corpus)
    part = scan(shards, max_candidates=100)
    pool = part.pools["chat"]
    want = _view(load_candidates(pool.candidates()[:90], shards))
    got, read_back = sampled_prompts(pool, 90, shards)
    assert read_back == 90 - SAMPLE and _view(got) == want
    bare = scan(shards, max_candidates=100, sample=0)
    assert bare.pools["chat"].sample is None
    got, read_back = sampled_prompts(bare.pools["chat"], 90, shards)
    assert read_back == 90 and _view(got) == want
    # one shard's partial without a sample (made by other code), merged with ones with it
    mixed = Partial(k=100, sample=SAMPLE)
    for shard in shards:
        mixed.merge(scan([shard], max_candidates=100, sample=0 if shard.name == "b.jsonl" else 64))
    got, read_back = sampled_prompts(mixed.pools["chat"], 90, shards)
    assert 0 < read_back < 90 and _view(got) == want


def test_a_changed_shard_is_refused_where_rows_are_read_back(
    sampled_corpus: Path, tmp_path: Path
) -> None:
    """The held prompts are those the pass read; a prompt read back from a shard rewritten
    since is refused."""
    from distprompt.errors import InputError

    data = tmp_path / "data"
    data.mkdir()
    src = sampled_corpus / "b.jsonl"
    (data / "b.jsonl").write_bytes(src.read_bytes())
    shards = discover_shards(data)
    part = scan(shards, max_candidates=100)
    held, _ = sampled_prompts(part.pools["chat"], SAMPLE, shards)
    lines = src.read_bytes().splitlines(keepends=True)
    (data / "b.jsonl").write_bytes(b"".join(reversed(lines)))
    again, read_back = sampled_prompts(part.pools["chat"], SAMPLE, shards)
    assert read_back == 0 and _view(again) == _view(held)
    with pytest.raises(InputError, match="changed"):
        sampled_prompts(part.pools["chat"], SAMPLE + 1, shards)


def test_round_trip_from_held_prompts_is_the_read_back_one(
    sampled_corpus: Path, qwen_tokenizer: Any
) -> None:
    """run_checks gives the same figures (rates, first failing shard:line) from the prompts
    the pass held as from reading them all back, for any worker count and unit size."""
    from distprompt.recover.checks import ROUND_TRIP_SAMPLE, prepare_checks, run_checks

    assert ROUND_TRIP_SAMPLE == SAMPLE
    shards = discover_shards(sampled_corpus)
    vocab = len(qwen_tokenizer)
    checks = prepare_checks(qwen_tokenizer, vocab)
    kw: dict[str, Any] = {"vocab_size": vocab, "check": checks.row_check}
    results = []
    for how, part in _variants(shards, **kw).items():
        held = run_checks(
            checks, part, qwen_tokenizer, "qwen", has_chat_template=True, shards=shards
        )
        for pool in part.pools.values():
            pool.sample = None  # as a partial made without the held prompts
        back = run_checks(
            checks, part, qwen_tokenizer, "qwen", has_chat_template=True, shards=shards
        )
        assert held == back, how
        results.append(held)
    assert all(r == results[0] for r in results)
    _, round_trips = results[0]
    ok, n, first = round_trips["noise"]
    assert n == SAMPLE and ok < n and first is not None  # failures, with their shard:line


def test_a_held_prompt_of_another_row_is_not_used() -> None:
    """The held ids stand for the pool's candidate only when they were read from its row (the
    same provenance): another row of the same key (a 64-bit collision) is read back instead."""
    from dataclasses import replace

    pool = BottomK(10, sample=10)
    pool.add(candidate(5, shard="s.jsonl", line=3))  # held as it is: read back as it is
    assert pool.sample is not None
    pool.sample.add(replace(candidate(5, shard="s.jsonl", line=9), prompt_ids=np.array([42])))
    [got], read_back = sampled_prompts(pool, 10, [])
    assert read_back == 1 and got.prompt_ids.tolist() == [5] and got.provenance.line == 3


def _everything(part: Partial) -> tuple[Any, ...]:
    """All a partial holds, dict and counter orders included."""

    def order(d: Any) -> list[tuple[Any, Any]]:
        return list(d.items())

    stats = [
        (
            s,
            st.rows,
            st.prompt_tokens,
            st.response_tokens,
            *(
                order(c)
                for c in (
                    st.prompt_lengths,
                    st.response_lengths,
                    st.seq_lengths,
                    st.trained_turns,
                    st.flags,
                )
            ),
        )
        for s, st in part.stats.items()
    ]
    t = part.tally
    tally = tuple(order(d) for d in (t.skipped, t.first_skip, t.anomalies, t.first_anomaly))
    return (
        stats,
        list(_pools(part).items()),
        {s: p.saturated for s, p in part.pools.items()},
        tally,
        order(part.shard_rows),
        order(part.failed),
    )


def _unit(name: str, size: int, start: int = 0, end: int | None = None) -> Any:
    """The engine's view of a unit: a shard's units are one group."""
    from distprompt.read.units import Unit
    from distprompt.records import Shard

    return Unit(Shard(Path(name), name, size), start, end).task


def test_units_run_smallest_shard_first_and_an_unsplit_large_unit_first_with_workers() -> None:
    from distprompt.engine import run_order

    work = [
        _unit("a.jsonl", 300, 0, 100),
        _unit("a.jsonl", 300, 100, 200),
        _unit("a.jsonl", 300, 200, None),
        _unit("b.jsonl.gz", 900),  # compressed: one unit
        _unit("c.jsonl", 40),
        _unit("d.jsonl", 60),
    ]
    # One worker: by shard size, the units of a shard together and in their order, but the
    # smallest (c) just before the largest (b).
    assert run_order(work, 1) == [5, 0, 1, 2, 4, 3]
    # Several: a unit of more than 1/(2 * workers) of the bytes first, lest it end the pass
    # alone; then the same order.
    assert run_order(work, 2) == [3, 5, 4, 0, 1, 2]
    assert run_order(work[:3] + work[4:], 2) == [4, 3, 0, 1, 2]  # no such unit
    assert run_order(work[4:], 1) == [0, 1]  # two shards: by size


def test_shards_merged_as_they_finish_give_the_same_partial(
    tmp_path: Path, qwen_tokenizer: Any
) -> None:
    # The shards are read smallest first in worker processes and merged as they finish: the
    # partial (its dict and counter orders included) is the one of the pass in shard order.
    rows = chat_rows(qwen_tokenizer, "chat", 60)
    code = chat_rows(qwen_tokenizer, "code", 30)
    write_shard(tmp_path / "a.jsonl", rows[:50] + code[:20] + rows[:4])  # largest, first
    write_shard(tmp_path / "b.jsonl", rows[45:] + code[18:])
    write_shard(tmp_path / "c.jsonl.gz", code[:3] + rows[50:52])  # smallest, last
    shards = discover_shards(tmp_path)
    assert [s.name for s in shards] == ["a.jsonl", "b.jsonl", "c.jsonl.gz"]
    assert shards[0].size > shards[1].size > shards[2].size
    seen: list[int] = []

    def on_shard(part: Partial) -> None:
        seen.append(sum(st.rows for st in part.stats.values()))

    plain = scan(shards, max_candidates=20, schedule=Schedule(processes=False))
    variants = {
        "one worker process": scan(
            shards, max_candidates=20, schedule=Schedule(processes=True), on_shard=on_shard
        ),
        "two workers": scan(shards, max_candidates=20, schedule=Schedule(workers=2)),
        "byte ranges": scan(
            shards, max_candidates=20, schedule=Schedule(workers=2, unit_bytes=2048)
        ),
        "byte ranges, one process": scan(
            shards,
            max_candidates=20,
            schedule=Schedule(processes=True, unit_bytes=2048),
        ),
    }
    for name, part in variants.items():
        assert _everything(part) == _everything(plain), name
    # Once per shard as it is merged (the smallest are read first: a, the largest, is last).
    assert [b - a for a, b in zip([0, *seen], seen, strict=False)][-1] == 74
    assert sorted(b - a for a, b in zip([0, *seen], seen, strict=False)) == [5, 27, 74]
    seen.clear()
    scan(
        shards, max_candidates=20, schedule=Schedule(processes=False), on_shard=on_shard
    )  # in shard order
    assert seen == [74, 74 + 27, 74 + 27 + 5]


@pytest.mark.parametrize("workers", [1, 2])
def test_the_first_error_in_shard_order_is_raised_though_a_later_shard_fails_first(
    tmp_path: Path, qwen_tokenizer: Any, workers: int
) -> None:
    from distprompt.errors import DataError

    rows = chat_rows(qwen_tokenizer, "chat", 80)
    bad = {"input_ids": [1, 2], "source": "chat"}  # missing keys
    write_shard(tmp_path / "a.jsonl", [*rows[:70], bad])  # large: read last
    write_shard(tmp_path / "b.jsonl", [*rows[70:72], bad])  # small: read (and fails) first
    shards = discover_shards(tmp_path)
    with pytest.raises(DataError) as raised:
        scan(shards, max_candidates=20, schedule=Schedule(workers=workers, processes=True))
    assert (raised.value.shard, raised.value.line) == ("a.jsonl", 71)
    with pytest.raises(DataError) as ranges:
        scan(
            shards,
            max_candidates=20,
            schedule=Schedule(workers=workers, processes=True, unit_bytes=4096),
        )
    assert (ranges.value.shard, ranges.value.line) == ("a.jsonl", 71)
    skipped = scan(
        shards,
        max_candidates=20,
        schedule=Schedule(workers=workers, processes=True),
        on_error="skip",
    )
    assert skipped.tally.first_skip == {"missing_loss_mask": "a.jsonl:71"}
    assert sum(skipped.tally.skipped.values()) == 2


def _same_candidate(a: Any, b: Any) -> None:
    import dataclasses

    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            assert isinstance(x, np.ndarray) and isinstance(y, np.ndarray), f.name
            assert x.dtype == y.dtype and np.array_equal(x, y), f.name
        else:
            assert type(x) is type(y) and x == y, f.name


@pytest.mark.parametrize("n", [0, 1, 7, 40])
def test_pool_pickles_by_column_to_the_same_pool(n: int) -> None:
    """A pool sent between processes comes back with every field of every entry, in the same
    order, and keeps and evicts the same entries afterwards."""
    import dataclasses
    import pickle

    from distprompt.records import Provenance

    rng = np.random.default_rng(n)
    pool = BottomK(30, sample=5)
    for i in range(n):
        c = candidate(
            int(rng.integers(0, 2**64, dtype=np.uint64)),
            source=("a", "bé")[i % 2],
            n_prompt=int(rng.integers(0, 9)),
            n_resp=i % 4,
            shard=f"s{i % 3}.jsonl",
            line=i + 1,
        )
        held = i % 3 == 0  # some entries hold their ids, others only a window
        c = dataclasses.replace(
            c,
            prompt_ids=c.prompt_ids if held else None,
            prompt_mask=c.prompt_mask if held else None,
            response_ids=c.response_ids if i % 2 else None,
            window=c.prompt_ids if i % 5 == 0 else np.arange(i % 6, dtype=np.int32),
            n_prompt=-1 if held else len(c.prompt_ids),
            n_first_response=i % 4 if i % 2 == 0 else -1,
            count=1 + i % 3,
            provenance=Provenance(c.provenance.shard, c.provenance.line, 10 * i),
        )
        pool.add(c)
        if pool.sample is not None and held:
            pool.sample.add(c)
    again = pickle.loads(pickle.dumps(pool))
    assert list(again._entries) == list(pool._entries)
    assert (again.k, again.saturated, sorted(again._heap)) == (
        pool.k,
        pool.saturated,
        sorted(pool._heap),
    )
    for a, b in zip(pool.candidates(), again.candidates(), strict=True):
        _same_candidate(a, b)
        assert (a.window is a.prompt_ids) == (b.window is b.prompt_ids)
    assert pool.sample is not None and again.sample is not None
    for a, b in zip(pool.sample.candidates(), again.sample.candidates(), strict=True):
        _same_candidate(a, b)
    for key in rng.integers(0, 2**64, size=50, dtype=np.uint64).tolist():
        pool.add(candidate(key))
        again.add(candidate(key))
    assert list(again._entries) == list(pool._entries)
    assert again.distinct() == pool.distinct()


def test_pool_pickles_arrays_of_mixed_dtypes_as_they_are() -> None:
    import dataclasses
    import pickle

    pool = BottomK(5)
    pool.add(candidate(1, n_prompt=3))
    wide = candidate(2, n_prompt=3)
    pool.add(dataclasses.replace(wide, prompt_ids=wide.prompt_ids.astype(np.int64)))
    again = pickle.loads(pickle.dumps(pool))
    for a, b in zip(pool.candidates(), again.candidates(), strict=True):
        _same_candidate(a, b)


def test_the_reference_sample_does_not_depend_on_the_split(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A byte range keeps only its share of the reply-feature sample; the smallest keys it
    missed are read back and measured at selection (measure_reference): the same features as
    when the shard is read whole. (Each range here keeps far less than its share, so that
    many are missed; the real share has a margin that makes misses rare.)"""
    from distprompt.read import scan as scan_module
    from distprompt.read.scan import REPLY_SAMPLE, measure_reference, scan

    from factories import synthetic_corpus

    root = synthetic_corpus(tmp_path / "d", {"s": 3 * REPLY_SAMPLE})
    shards = discover_shards(root)
    # every row measured as it comes (no waiting until the unit ends), so that the counts
    # below compare what the split leaves out
    monkeypatch.setattr(scan_module, "PENDING_TOKENS", 0)
    whole = scan(shards, max_candidates=4 * REPLY_SAMPLE, schedule=Schedule(workers=1))
    assert scan_module.ref_size(scan_module.Unit(shards[0], 0, 4096)) < REPLY_SAMPLE
    monkeypatch.setattr(scan_module, "ref_size", lambda unit: 4)
    split = scan(
        shards, max_candidates=4 * REPLY_SAMPLE, schedule=Schedule(workers=1, unit_bytes=4096)
    )
    a, b = whole.pools["s"].candidates(), split.pools["s"].candidates()
    assert [c.key for c in a] == [c.key for c in b]
    ref = slice(0, REPLY_SAMPLE)  # candidates() are in key order
    assert all(c.reply is not None for c in a[ref])
    missed = sum(c.reply is None for c in b[ref])
    assert missed > 0  # the ranges kept a share each: some of the smallest keys are not measured
    measured = sum(c.reply is not None for c in b)
    assert measured < sum(c.reply is not None for c in a)  # and fewer rows were measured
    filled = measure_reference(b, {c.key for c in b[ref]}, split.shards)
    for x, y in zip(a[ref], filled[ref], strict=True):
        assert np.array_equal(x.reply, y.reply)
        assert y.prompt_ids is None and y.response_ids is None  # only the features are kept


@pytest.mark.parametrize("budget", [0, 200, 10**9])
def test_replies_measured_when_the_unit_ends_are_the_ones_measured_as_rows_come(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: int
) -> None:
    """Most rows that enter a unit's running bottom-m of keys leave it again: their replies
    wait (Partial.pending) and only those still in it when the unit ends are measured. The
    reference sample gets the same features as when every row is measured as it comes
    (budget 0), also when the waiting room fills up mid-unit (budget 200 tokens)."""
    from distprompt.read import scan as scan_module
    from distprompt.read.scan import REPLY_SAMPLE, scan

    from factories import synthetic_corpus

    root = synthetic_corpus(tmp_path / "d", {"s": 3 * REPLY_SAMPLE})
    shards = discover_shards(root)
    calls = _count_measures(monkeypatch)
    monkeypatch.setattr(scan_module, "PENDING_TOKENS", 0)
    eager = (
        scan(shards, max_candidates=4 * REPLY_SAMPLE, schedule=Schedule(workers=1))
        .pools["s"]
        .candidates()
    )
    n_eager = len(calls)
    calls.clear()
    monkeypatch.setattr(scan_module, "PENDING_TOKENS", budget)
    late = (
        scan(shards, max_candidates=4 * REPLY_SAMPLE, schedule=Schedule(workers=1))
        .pools["s"]
        .candidates()
    )
    assert [c.key for c in eager] == [c.key for c in late]
    for a, b in zip(eager[:REPLY_SAMPLE], late[:REPLY_SAMPLE], strict=True):
        assert a.reply is not None and b.reply is not None
        assert np.array_equal(a.reply, b.reply)
    if budget == 0:
        assert len(calls) == n_eager
    else:
        assert len(calls) < n_eager  # the rows that left the bottom-m were not measured
    if budget == 10**9:
        # outside the reference only rows the longest-reply tracker took while they were in
        # the bottom-m carry features (measured as they came): the others waited and left
        outside = [sum(c.reply is not None for c in x[REPLY_SAMPLE:]) for x in (eager, late)]
        assert outside[1] < outside[0] / 2


def test_rows_of_the_longest_reply_tracker_wait_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A unit of fewer rows than the longest-reply tracker holds (a 32 MB range of an agent
    shard: ~130 rows of 200 KB) puts every row in the tracker. Those in the unit's running
    bottom-m wait like the others and are measured once, when the unit ends, if still there:
    the same features as measuring each as it comes, on the pool and on the tracker, for far
    fewer rows (on the benchmark corpus: 12,055 rows measured instead of 18,420)."""
    from distprompt.read import scan as scan_module
    from distprompt.read.scan import HEAVY, scan

    from factories import synthetic_corpus

    root = synthetic_corpus(tmp_path / "d", {"s": HEAVY - 8})
    shards = discover_shards(root)
    calls = _count_measures(monkeypatch)
    monkeypatch.setattr(scan_module, "ref_size", lambda unit: 10)
    runs = []
    for budget in (0, 10**9):  # every row measured as it comes; every row waits
        calls.clear()
        monkeypatch.setattr(scan_module, "PENDING_TOKENS", budget)
        part = scan(shards, max_candidates=4 * HEAVY, schedule=Schedule(workers=1))
        runs.append((len(calls), part.pools["s"].candidates(), part.heavy["s"].candidates()))
    (n_eager, pool_eager, top_eager), (n_late, pool_late, top_late) = runs
    assert len(top_late) > 100  # (almost) every row is in the tracker
    assert n_late < n_eager / 2  # about the final bottom-10 measured (a repeated prompt: now)
    ref = {c.key for c in pool_late[:10]}
    for eager, late in ((pool_eager, pool_late), (top_eager, top_late)):
        got = {c.key: c.reply for c in late if c.reply is not None}
        assert set(got) == ref
        for c in eager:
            if c.key in ref:
                assert np.array_equal(c.reply, got[c.key])


def test_released_pools_keep_their_counts(tmp_path: Path) -> None:
    """Once every source is selected the pools' candidates are dropped (the export's memory
    peak is in the stretch after it); the manifest's counts of each pool stay as they were."""
    from distprompt.read.scan import scan

    from factories import synthetic_corpus

    root = synthetic_corpus(tmp_path / "d", {"a": 300, "b": 40})
    part = scan(discover_shards(root), max_candidates=64, schedule=Schedule(workers=1))
    before = {s: part.pool_counts(s) for s in ("a", "b")}
    assert not before["a"].exact and before["b"].exact  # a KMV estimate beyond the pool
    assert before["a"].candidates == 64 and before["b"].candidates == before["b"].unique
    part.release_pools()
    assert part.pools == {} and part.heavy == {}
    assert {s: part.pool_counts(s) for s in ("a", "b")} == before


def _count_measures(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one each time the pass measures a reply (reply_features, alone
    or in a batch: reply_features_many)."""
    from distprompt.read import scan as scan_module

    calls: list[int] = []
    measure = scan_module.reply_features
    measure_many = scan_module.reply_features_many

    def counted(prompt: np.ndarray, reply: np.ndarray) -> np.ndarray:
        calls.append(1)
        return measure(prompt, reply)

    def counted_many(pairs: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        calls.extend([1] * len(pairs))
        return measure_many(pairs)

    monkeypatch.setattr(scan_module, "reply_features", counted)
    monkeypatch.setattr(scan_module, "reply_features_many", counted_many)
    return calls


def test_the_rows_of_a_duplicated_prompt_wait_side_by_side(
    tmp_path: Path, qwen_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several rows of one prompt in a unit, with different replies: whichever the pool keeps
    (not always the first) gets its own reply's features, measured when the unit ends as when
    each row is measured as it comes."""
    from distprompt.read import scan as scan_module
    from distprompt.read.scan import scan
    from distprompt.replies import reply_features

    from factories import row_from_messages

    rows = []
    for i in range(40):
        ask = {"role": "user", "content": f"Question {i}: name a colour."}
        for j in range(3):
            reply = " ".join(["red", "green", "blue"][: j + 1] * (i % 5 + j + 1))
            rows.append(
                row_from_messages(
                    qwen_tokenizer, [ask, {"role": "assistant", "content": reply}], "s"
                )
            )
    write_shard(tmp_path / "d" / "a.jsonl", rows)
    shards = discover_shards(tmp_path / "d")
    got = {}
    for budget in (0, 10**9):  # every row measured as it comes; every row waits
        monkeypatch.setattr(scan_module, "PENDING_TOKENS", budget)
        part = scan(shards, max_candidates=100, schedule=Schedule(workers=1))
        got[budget] = {c.key: (c.provenance, c.reply) for c in part.pools["s"].candidates()}
    assert got[0].keys() == got[10**9].keys() and len(got[0]) == 40
    lines = [c[0].line for c in got[0].values()]
    assert {(ln - 1) % 3 for ln in lines} == {0, 1, 2}  # not always a prompt's first row
    for key, (prov, reply) in got[10**9].items():
        r = rows[prov.line - 1]
        n = r["n_prompt_tokens"]
        ids = np.array(r["input_ids"])
        assert prov == got[0][key][0]
        assert np.array_equal(reply, got[0][key][1])
        assert np.array_equal(reply, reply_features(ids[:n], ids[n:]))


def test_a_reference_prompt_sums_the_replies_of_all_its_rows(
    tmp_path: Path, qwen_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prompt of the reference sample answered several times: the pool entry carries, beside
    its own row's features, the sums over every row of the prompt (first-reply length x each
    feature, the lengths, the rows), whichever row it keeps, measured as they come or when
    the unit ends, in one unit or in byte ranges in two workers (integers: the same sums)."""
    from distprompt.read import scan as scan_module
    from distprompt.read.scan import scan
    from distprompt.replies import reply_features

    from factories import row_from_messages

    rows = []
    for i in range(30):
        ask = {"role": "user", "content": f"Question {i}: name some colours."}
        for j in range(1 + i % 3):
            reply = " ".join(["red", "green", "blue"][: j + 1] * (i % 4 + 2 * j + 1))
            rows.append(
                row_from_messages(
                    qwen_tokenizer, [ask, {"role": "assistant", "content": reply}], "s"
                )
            )
    write_shard(tmp_path / "d" / "a.jsonl", rows)
    shards = discover_shards(tmp_path / "d")
    want: dict[int, np.ndarray] = {}
    for r in rows:
        n = r["n_prompt_tokens"]
        ids = np.array(r["input_ids"])
        f = reply_features(ids[:n], ids[n:]).astype(np.int64)
        key = prompt_key(ids[:n])
        row = np.concatenate([f * (len(ids) - n), [len(ids) - n, 1]])
        want[key] = want[key] + row if key in want else row
    got = {}
    for name, budget, schedule in (
        ("as they come", 0, Schedule(workers=1)),
        ("when the unit ends", 10**9, Schedule(workers=1)),
        ("byte ranges", 10**9, Schedule(workers=2, unit_bytes=4096)),
    ):
        monkeypatch.setattr(scan_module, "PENDING_TOKENS", budget)
        part = scan(shards, max_candidates=100, schedule=schedule)
        got[name] = {c.key: c for c in part.pools["s"].candidates()}
    for name, cands in got.items():
        assert cands.keys() == want.keys(), name
        for key, c in cands.items():
            assert c.reply_sum is not None, name
            assert np.array_equal(c.reply_sum, want[key]), name
            assert int(c.reply_sum[-1]) == c.count == want[key][-1]
    assert max(c.count for c in got["byte ranges"].values()) == 3


def test_a_reference_prompt_that_leaves_the_sample_keeps_no_sums(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows measured as they come and then pushed out of the unit's reference sample by
    smaller keys are not summed: the pool's entries outside the sample carry no sums."""
    from distprompt.read import scan as scan_module
    from distprompt.read.scan import scan

    from factories import synthetic_corpus

    root = synthetic_corpus(tmp_path / "d", {"s": 200})
    monkeypatch.setattr(scan_module, "PENDING_TOKENS", 0)
    monkeypatch.setattr(scan_module, "ref_size", lambda unit: 10)
    part = scan(discover_shards(root), max_candidates=100, schedule=Schedule(workers=1))
    cands = part.pools["s"].candidates()
    assert all(c.reply_sum is not None for c in cands[:10])
    assert all(c.reply_sum is None for c in cands[10:])


def test_a_pool_smaller_than_the_sample_measures_only_what_it_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With fewer candidates than the reference sample holds, the rows that entered the pool and
    left it again are not measured when the unit ends: only the pool's and the longest-reply
    tracker's rows are (here 20 and 1)."""
    from distprompt.read import scan as scan_module
    from distprompt.read.scan import scan

    from factories import synthetic_corpus

    root = synthetic_corpus(tmp_path / "d", {"s": 600})
    monkeypatch.setattr(scan_module, "HEAVY", 1)
    calls = _count_measures(monkeypatch)
    part = scan(discover_shards(root), max_candidates=20, schedule=Schedule(workers=1))
    assert len(part.pools["s"]) == 20
    assert all(c.reply is not None for c in part.pools["s"].candidates())
    assert len(calls) <= 21
