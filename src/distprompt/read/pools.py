"""The pass's candidate pools, mergeable across units, shards and workers: :class:`BottomK`
(the ``k`` prompts of smallest key per source, with their reply-feature sample), the frozen,
columnar form they travel in between processes, and :class:`TopReplies` (the rows with the
longest first replies, the take-all stratum's candidates); :func:`prompt_key` is the key.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import numpy as np

from distprompt.read.spill import SpilledWindow, WindowStore
from distprompt.records import REPLY_FEATURES, Candidate, Provenance

__all__ = ["BottomK", "TopReplies", "compact_ids", "prompt_key"]

_TWO64 = float(2**64)
_LE_I8 = np.dtype("<i8")


@functools.lru_cache(maxsize=8)
def _hash_key(seed: int) -> bytes:
    return seed.to_bytes(8, "little", signed=False)


def prompt_key(prompt_ids: np.ndarray, *, seed: int = 0) -> int:
    """64-bit keyed hash of prompt ids; the seed selects a different uniform sample."""
    if prompt_ids.dtype == _LE_I8 and prompt_ids.flags.c_contiguous:
        data: Any = prompt_ids  # hashed in place: the same bytes as a little-endian copy
    else:
        data = np.ascontiguousarray(prompt_ids, dtype=_LE_I8).tobytes()
    h = hashlib.blake2b(data, digest_size=8, key=_hash_key(seed))
    return int.from_bytes(h.digest(), "little")


def compact_ids(ids: np.ndarray) -> np.ndarray:
    # the ufunc's reduce: ndarray.max goes through a Python wrapper (a pool entry per row)
    return ids.astype(np.int32) if ids.size == 0 or int(_MAX(ids)) < 2**31 else ids.copy()


_MAX = np.maximum.reduce


class BottomK:
    """The ``k`` entries with the smallest keys, with multiplicities; mergeable.

    ``saturated`` records whether some unique key was ever left out, which makes the distinct
    count an estimate (k-minimum-values) rather than exact.

    With ``sample``, :attr:`sample` is a second, smaller bottom-k (of ``min(sample, k)``
    entries) whose entries hold their prompt ids: the first entries of :meth:`candidates`, with
    the same keys, provenance and counts (a key among the smallest of the union was among the
    smallest of every part, so it was never left out of one), kept by the pass for the
    round-trip check (:func:`sampled_prompts`) so that no row is read back for it. It merges and
    rebases with the pool.
    """

    __slots__ = ("_entries", "_frozen", "_heap", "k", "sample", "saturated")

    def __init__(self, k: int, *, sample: int = 0) -> None:
        self.k = k
        self._entries: dict[int, Candidate] = {}
        self._heap: list[int] = []  # negated keys: the root is the largest kept key
        self._frozen: _Frozen | None = None  # the entries as columns (:meth:`compact`)
        self.saturated = False
        self.sample: BottomK | None = BottomK(min(sample, k)) if sample > 0 else None

    def __len__(self) -> int:
        if self._frozen is not None:
            return len(self._frozen.keys)
        return len(self._entries)

    def compact(self) -> bool:
        """Hold the entries as a few columns instead of objects (~600 bytes an entry: ~80),
        when every entry's window is in the same window store and nothing else is held (a
        pool of the pass on a large corpus, once the pass is over); whether it did. The
        entries are made again as they are asked for (:meth:`candidates`), or all of them by
        anything that changes the pool. The sample stays as it is."""
        if self._frozen is not None:
            return True
        frozen = _Frozen.of(self.candidates())
        if frozen is None:
            return False
        self._frozen, self._entries, self._heap = frozen, {}, []
        return True

    def _thaw(self) -> None:
        frozen = self._frozen
        if frozen is None:
            return
        self._entries = {c.key: c for c in frozen.candidates()}
        self._heap = [-key for key in self._entries]
        heapq.heapify(self._heap)
        self._frozen = None

    def feature_tokens(self) -> int:
        """The tokens the entries' features are computed from, in all (``n_feature_ids``)."""
        if self._frozen is not None:
            return int(self._frozen.window_lens.sum())
        return sum(c.n_feature_ids for c in self._entries.values())

    def offer_key(self, key: int) -> bool:
        """Whether an entry with ``key`` would be kept (cheap pre-check before building it)."""
        if self._frozen is not None:  # inline: once a row of the pass
            self._thaw()
        if key in self._entries or len(self._entries) < self.k:
            return True
        return key < -self._heap[0]

    def add(self, cand: Candidate) -> None:
        if self._frozen is not None:
            self._thaw()
        old = self._entries.get(cand.key)
        if old is not None:
            keep = cand if _row_order(cand) < _row_order(old) else old
            kept = _rebuilt(keep, keep.provenance, old.count + cand.count, keep.window)
            if old.reply_sum is not None or cand.reply_sum is not None:
                kept = _with_reply(kept, kept.reply, _summed(old.reply_sum, cand.reply_sum))
            self._entries[cand.key] = kept
            return
        if len(self._entries) < self.k:
            self._entries[cand.key] = cand
            heapq.heappush(self._heap, -cand.key)
            return
        self.saturated = True
        if cand.key < -self._heap[0]:
            evicted = -heapq.heapreplace(self._heap, -cand.key)
            del self._entries[evicted]
            self._entries[cand.key] = cand

    def reject(self) -> None:
        """Record that a unique key was left out without building its entry."""
        self.saturated = True

    def __contains__(self, key: object) -> bool:
        """Whether an entry of ``key`` is kept."""
        if self._frozen is not None:
            self._thaw()
        return key in self._entries

    def unmeasured(self, key: int) -> Provenance | None:
        """The row of the entry of ``key`` when it is kept and has no reply features yet."""
        if self._frozen is not None:
            self._thaw()
        cand = self._entries.get(key)
        return cand.provenance if cand is not None and cand.reply is None else None

    def set_reply(self, key: int, reply: np.ndarray) -> None:
        """Give the entry of ``key`` its reply features (:func:`reply_features`)."""
        c = self._entries[key]
        self._entries[key] = _with_reply(c, reply, c.reply_sum)

    def add_reply_sum(self, key: int, total: np.ndarray) -> None:
        """Add ``total`` (:attr:`Candidate.reply_sum`'s layout: measured rows of the prompt)
        to the entry of ``key``, when it is kept."""
        if self._frozen is not None:
            self._thaw()
        c = self._entries.get(key)
        if c is not None:
            self._entries[key] = _with_reply(c, c.reply, _summed(c.reply_sum, total))

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled by column (a pass worker sends its pools to the main process): one object per
        # entry costs ~20 us each way, ~0.8 s for an 18k-candidate pool on the benchmark.
        cands = self.candidates() if self._frozen is not None else list(self._entries.values())
        return (_unpickle_bottomk, (self.k, self.saturated, self.sample, *_columns(cands)))

    def merge(self, other: BottomK, *, spill: WindowStore | None = None) -> BottomK:
        """Add ``other``'s entries; with ``spill``, the windows of those kept are written to
        it (:mod:`distprompt.read.spill`) and the entries hold where they are."""
        other._thaw()
        for cand in other._entries.values():
            self.add(cand)
        self.saturated = self.saturated or other.saturated
        if spill is not None:
            self._spill(other._entries, spill)
        if other.sample is not None:
            if self.sample is None:
                self.sample = BottomK(other.sample.k)
            self.sample.merge(other.sample)
        return self

    def _spill(self, keys: Iterable[int], spill: WindowStore) -> None:
        self._thaw()
        entries = self._entries
        fresh = [
            c
            for key in keys
            if (c := entries.get(key)) is not None and isinstance(c.window, np.ndarray)
        ]
        refs = spill.put([c.window for c in fresh])  # type: ignore[misc]
        if refs is None:
            return  # the file cannot be written: kept in memory (counted and warned of)
        for c, ref in zip(fresh, refs, strict=True):
            entries[c.key] = _rebuilt(c, c.provenance, c.count, ref)

    def rebase(self, shard: str, base: int) -> None:
        """Shift the line numbers of the entries read from ``shard`` by ``base``."""
        self._thaw()
        entries = self._entries
        for key, c in entries.items():
            p = c.provenance
            if p.shard == shard:
                entries[key] = _rebuilt(
                    c, Provenance(p.shard, p.line + base, p.offset), c.count, c.window
                )
        if self.sample is not None:
            self.sample.rebase(shard, base)

    def candidates(self, n: int | None = None) -> list[Candidate]:
        """Kept entries sorted by key (a deterministic, order-free order); the first ``n``."""
        if self._frozen is not None:
            return self._frozen.candidates(n)
        return [self._entries[k] for k in sorted(self._entries)[:n]]

    def distinct(self) -> tuple[int, bool]:
        """``(number of distinct keys seen, exact?)``; a KMV estimate once saturated."""
        n = len(self)
        if not self.saturated or n < 2:
            return n, True
        kth = int(self._frozen.keys[-1]) if self._frozen is not None else -self._heap[0]
        return round((n - 1) * _TWO64 / (kth + 1)), False


def _row_order(c: Candidate) -> tuple[int, Provenance]:
    """Which row of a prompt the pool keeps (the smallest): a hash of what the row holds after
    the prompt (its first reply's and its whole response's lengths) keyed by the prompt's key,
    then the earlier place. The rows of a duplicated prompt may differ after the prompt (a
    prompt answered several times, a chat opening several conversations); the kept row is the
    candidate's provenance and its reply stands for all of them, so it is drawn among them
    (for a given seed, which the key carries), not the first in file order. A row's place
    would tell apart rows written twice too, but it is not the same in another container of
    the same rows (a Parquet copy), which gives the same suite; rows alike in both lengths
    are taken in file order."""
    h = hashlib.blake2b(
        c.first_response_length.to_bytes(8, "little", signed=True)
        + c.n_response_tokens.to_bytes(8, "little", signed=True),
        digest_size=8,
        key=c.key.to_bytes(8, "little"),
    )
    return int.from_bytes(h.digest(), "little"), c.provenance


def _rebuilt(
    c: Candidate, provenance: Provenance, count: int, window: np.ndarray | SpilledWindow | None
) -> Candidate:
    """``c`` with these three fields: the fields a pool changes, by the constructor (about 3x
    faster than ``dataclasses.replace``; once a candidate merged, rebased or written)."""
    return Candidate(
        c.key, c.source, c.prompt_ids, c.prompt_mask, c.response_ids, c.n_response_tokens,
        provenance, count, window, c.n_prompt, c.n_first_response, c.reply, c.reply_sum,
    )  # fmt: skip


def _with_reply(c: Candidate, reply: np.ndarray | None, total: np.ndarray | None) -> Candidate:
    """``c`` with its reply features and their sum over the prompt's measured rows, by the
    constructor (as :func:`_rebuilt`: once a measured row of the pass)."""
    return Candidate(
        c.key, c.source, c.prompt_ids, c.prompt_mask, c.response_ids, c.n_response_tokens,
        c.provenance, c.count, c.window, c.n_prompt, c.n_first_response, reply, total,
    )  # fmt: skip


def _summed(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    """Two :attr:`Candidate.reply_sum` added (integers: the same in any order)."""
    if a is None or b is None:
        return b if a is None else a
    return a + b


@dataclass(frozen=True, slots=True, eq=False)
class _Frozen:
    """A pool's entries as columns, in key order (:meth:`BottomK.compact`): the numbers in
    arrays, the strings as codes into their few values, each window where it is in ``store``."""

    keys: np.ndarray  # uint64
    nums: np.ndarray  # int64 (n, 6): n_response_tokens, count, n_prompt, n_first_response,
    #                   line, offset
    sources: tuple[list[str], np.ndarray]  # the values, a code per entry
    shards: tuple[list[str], np.ndarray]
    window_at: np.ndarray  # int64 offset in the store
    window_lens: np.ndarray  # int64
    dtypes: tuple[list[np.dtype[Any]], np.ndarray]
    store: WindowStore
    replies: np.ndarray  # uint16 (n, len(REPLY_FEATURES)); rows of entries without: all 65535
    replied: np.ndarray  # bool: the entry has reply features
    sums: np.ndarray  # int64 (n, len(REPLY_FEATURES) + 2): reply_sum; entries without: zeros
    summed: np.ndarray  # bool: the entry has a reply_sum

    @staticmethod
    def of(cands: list[Candidate]) -> _Frozen | None:
        """``cands`` (in key order) as columns, or None when one holds more than a window in
        a store (or none), or their windows are in different stores."""
        if not cands:
            return None
        wins = [c.window for c in cands]
        first = wins[0]
        if not isinstance(first, SpilledWindow):
            return None
        store = first.store
        for c, w in zip(cands, wins, strict=True):
            if (
                not isinstance(w, SpilledWindow)
                or w.store is not store
                or c.prompt_ids is not None
                or c.prompt_mask is not None
                or c.response_ids is not None
            ):
                return None
        keys, nums, (srcs, shards), _, _ = _columns(cands, windows=False)
        refs: list[SpilledWindow] = wins  # type: ignore[assignment]
        return _Frozen(
            keys=keys,
            nums=nums,
            sources=_codes(srcs),
            shards=_codes(shards),
            window_at=np.fromiter((w.offset for w in refs), np.int64, len(refs)),
            window_lens=np.fromiter((w.n for w in refs), np.int64, len(refs)),
            dtypes=_codes([w.dtype for w in refs]),
            store=store,
            replies=np.array(
                [_NO_REPLY if c.reply is None else c.reply for c in cands], dtype=np.uint16
            ).reshape(len(cands), len(REPLY_FEATURES)),
            replied=np.fromiter((c.reply is not None for c in cands), bool, len(cands)),
            sums=np.array(
                [_NO_SUM if c.reply_sum is None else c.reply_sum for c in cands], dtype=np.int64
            ).reshape(len(cands), _SUM_WIDTH),
            summed=np.fromiter((c.reply_sum is not None for c in cands), bool, len(cands)),
        )

    def candidates(self, n: int | None = None) -> list[Candidate]:
        store = self.store
        srcs, src_at = self.sources
        shards, shard_at = self.shards
        dtypes, dtype_at = self.dtypes
        cut = slice(None, n)
        keys = self.keys[cut].tolist()
        windows = [
            SpilledWindow(store, at, n_win, dtypes[di])
            for at, n_win, di in zip(
                self.window_at[cut].tolist(),
                self.window_lens[cut].tolist(),
                dtype_at[cut].tolist(),
                strict=True,
            )
        ]
        held = [None] * len(keys)  # ids, mask, first response: read back when selected
        replies = [
            r if has else None
            for r, has in zip(self.replies[cut], self.replied[cut].tolist(), strict=True)
        ]
        sums = [
            t if has else None
            for t, has in zip(self.sums[cut], self.summed[cut].tolist(), strict=True)
        ]
        return list(
            _candidates_of(
                keys,
                self.nums[cut].tolist(),
                [srcs[i] for i in src_at[cut].tolist()],
                [shards[i] for i in shard_at[cut].tolist()],
                held,
                held,
                held,
                windows,
                replies,
                sums,
            )
        )


def _candidates_of(
    keys: list[int],
    nums: list[list[int]],
    sources: list[str],
    shards: list[str],
    ids: list[Any],
    masks: list[Any],
    responses: list[Any],
    windows: list[Any],
    replies: list[Any],
    sums: list[Any],
) -> Iterator[Candidate]:
    """Candidates from their fields, one sequence a field (``nums`` as :func:`_columns`)."""
    for key, (n_resp, count, n_prompt, n_first, line, off), src, shard, p, m, r, w, f, t in zip(
        keys, nums, sources, shards, ids, masks, responses, windows, replies, sums, strict=True
    ):
        prov = Provenance(shard, line, off)
        yield Candidate(key, src, p, m, r, n_resp, prov, count, w, n_prompt, n_first, f, t)


def _codes(values: list[Any]) -> tuple[list[Any], np.ndarray]:
    """The distinct ``values`` (in order of first appearance) and each value's index in them."""
    index: dict[Any, int] = {}
    codes = np.fromiter((index.setdefault(v, len(index)) for v in values), np.int32, len(values))
    return list(index), codes


_ARRAYS = ("prompt_ids", "prompt_mask", "response_ids", "window", "reply", "reply_sum")


_NO_REPLY = np.full(len(REPLY_FEATURES), 65535, dtype=np.uint16)
_SUM_WIDTH = len(REPLY_FEATURES) + 2
_NO_SUM = np.zeros(_SUM_WIDTH, dtype=np.int64)


def _columns(cands: list[Candidate], *, windows: bool = True) -> tuple[Any, ...]:
    """``cands`` as columns: the numbers in one array, the strings in lists, and each array
    field as one concatenated array with the lengths (-1 for None); without ``windows``, the
    numbers and the strings only."""
    n = len(cands)
    keys = np.fromiter(map(attrgetter("key"), cands), np.uint64, n)
    provs = list(map(attrgetter("provenance"), cands))
    nums = np.array(
        [
            (c.n_response_tokens, c.count, c.n_prompt, c.n_first_response, p.line, p.offset)
            for c, p in zip(cands, provs, strict=True)
        ],
        dtype=np.int64,
    ).reshape(n, 6)
    strs = (list(map(attrgetter("source"), cands)), list(map(attrgetter("shard"), provs)))
    if not windows:
        return keys, nums, strs, None, None
    arrays: list[Any] = []
    for f in _ARRAYS:
        got = list(map(attrgetter(f), cands))
        if f == "window":  # those in a window store travel as the ids
            got = [w.read() if isinstance(w, SpilledWindow) else w for w in got]
        held = [a for a in got if a is not None]
        dtypes = {(a.dtype, a.ndim) for a in held}
        if len(dtypes) > 1 or (held and held[0].ndim != 1):
            arrays.append(got)  # not one 1-d dtype: as they are
            continue
        lens = [-1 if a is None else a.shape[0] for a in got]
        data = np.concatenate(held) if held else np.empty(0, np.int32)
        arrays.append((np.array(lens, dtype=np.int64), data))
    same = [c.window is not None and c.window is c.prompt_ids for c in cands]
    return keys, nums, strs, arrays, same


def _uncolumn(col: Any) -> list[Any]:
    if isinstance(col, list):
        return col
    lens, data = col
    ends = np.cumsum(np.maximum(lens, 0)).tolist()
    # copies: a view would keep the whole column alive once its entry is evicted
    return [
        None if ln < 0 else data[e - ln : e].copy()
        for ln, e in zip(lens.tolist(), ends, strict=True)
    ]


def _unpickle_bottomk(
    k: int,
    saturated: bool,
    sample: BottomK | None,
    keys: np.ndarray,
    nums: np.ndarray,
    strs: tuple[list[str], list[str]],
    arrays: list[Any],
    same: list[bool],
) -> BottomK:
    ids, mask, resp, win, replies, sums = (_uncolumn(c) for c in arrays)
    windows = [p if sm else w for p, w, sm in zip(ids, win, same, strict=True)]
    out = BottomK(k)
    out.saturated = saturated
    out.sample = sample
    cands = _candidates_of(
        keys.tolist(), nums.tolist(), *strs, ids, mask, resp, windows, replies, sums
    )
    entries = out._entries = {c.key: c for c in cands}
    out._heap = [-key for key in entries]
    heapq.heapify(out._heap)
    return out


class TopReplies:
    """The rows of a source with the longest first replies (at most ``k``; ties by prompt key),
    whatever their prompt key: the rows that may alone hold a large share of the source's reply
    tokens, which a uniform pool can miss (selection's take-all stratum). One per prompt key
    (the longest reply), whose ``count`` is the rows of that prompt with a first reply that
    long (the same row written again: a take-all row stands for them, not for the prompt's
    rows with shorter replies). Merges like the pool: the top ``k`` of a union is in the union
    of each part's top ``k``."""

    __slots__ = ("_entries", "_lengths", "k")

    def __init__(self, k: int) -> None:
        self.k = k
        self._entries: list[tuple[int, int, Candidate]] = []  # heap: (length, -key, cand)
        self._lengths: dict[int, int] = {}  # the kept prompt keys, their first-reply length

    def __len__(self) -> int:
        return len(self._entries)

    def offer(self, length: int, key: int) -> bool:
        """Whether a row with this first-reply length would be kept (or counted: a row of a
        kept prompt, which :meth:`add` keeps, counts or leaves by its length)."""
        kept = self._lengths.get(key)
        if kept is not None:
            return length >= kept
        e = self._entries
        return len(e) < self.k or (length, -key) > e[0][:2]

    def add(self, cand: Candidate) -> None:
        item = (cand.first_response_length, -cand.key, cand)
        e = self._entries
        if cand.key in self._lengths:  # the same prompt again: the longer reply (then the first)
            i = next(i for i, t in enumerate(e) if t[2].key == cand.key)
            n, c = e[i][0], e[i][2]
            if item[0] > n:
                e[i] = item
                heapq.heapify(e)
                self._lengths[cand.key] = item[0]
            elif item[0] == n:  # counted with it: the rows a take-all row stands for
                keep = cand if cand.provenance < c.provenance else c
                count = c.count + cand.count
                e[i] = (n, item[1], _rebuilt(keep, keep.provenance, count, keep.window))
            return
        if len(e) < self.k:
            heapq.heappush(e, item)
        elif item[:2] > e[0][:2]:
            del self._lengths[heapq.heapreplace(e, item)[2].key]
        else:
            return
        self._lengths[cand.key] = item[0]

    def unmeasured(self, key: int) -> Provenance | None:
        """The kept row of ``key`` when it has no reply features yet."""
        if key not in self._lengths:
            return None
        c = next(c for _, _, c in self._entries if c.key == key)
        return c.provenance if c.reply is None else None

    def set_reply(self, key: int, reply: np.ndarray) -> None:
        """Give the kept row of ``key`` its reply features (:func:`reply_features`)."""
        e = self._entries
        i = next(i for i, t in enumerate(e) if t[2].key == key)
        e[i] = (e[i][0], e[i][1], _with_reply(e[i][2], reply, e[i][2].reply_sum))

    def merge(self, other: TopReplies) -> TopReplies:
        for _, _, c in other._entries:
            self.add(c)
        return self

    def rebase(self, shard: str, base: int) -> None:
        e = self._entries
        for i, (n, nk, c) in enumerate(e):
            p = c.provenance
            if p.shard == shard:
                moved = _rebuilt(c, Provenance(p.shard, p.line + base, p.offset), c.count, c.window)
                e[i] = (n, nk, moved)

    def candidates(self) -> list[Candidate]:
        """Longest first reply first (ties: smaller key first)."""
        return [c for _, _, c in sorted(self._entries, key=lambda t: (-t[0], -t[1]))]
