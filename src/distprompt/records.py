"""Typed records passed between pipeline stages. Dicts appear only at the JSON edges.

The pass hands on per-source :class:`SourceStats` (exact, mergeable histograms, read with
:func:`histogram_quantiles`) and :class:`Candidate` pools; the output side reads them from here,
not from the reader.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from distprompt.read.spill import SpilledWindow

__all__ = [
    "FEATURE_HEAD",
    "FEATURE_TAIL",
    "REPLY_FEATURES",
    "REPLY_PROMPT_TOKENS",
    "SHARD_PATTERNS",
    "SHARD_SUFFIXES",
    "TABLE_SUFFIXES",
    "UNSUPPORTED_SUFFIXES",
    "Ambiguity",
    "Candidate",
    "Provenance",
    "Row",
    "Shard",
    "SourceStats",
    "SuiteItem",
    "feature_window",
    "histogram_quantiles",
    "is_shard_file",
    "max_tokens_for",
    "max_tokens_histogram",
    "reply_features",
]


SHARD_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst")
#: Columnar shards (:mod:`distprompt.read.table`): Parquet files, and the Arrow files of a
#: ``datasets.save_to_disk`` folder.
TABLE_SUFFIXES = (".parquet", ".arrow")
#: The shard names discovery looks for, as messages spell them.
SHARD_PATTERNS = "*.jsonl, *.jsonl.gz, *.jsonl.zst, *.parquet or *.arrow"
#: Suffixes of compressions distprompt does not read: named explicitly, they are refused clearly
#: instead of being parsed as garbage.
UNSUPPORTED_SUFFIXES = (".bz2", ".xz", ".lz4", ".zip", ".7z", ".br", ".snappy", ".lzma", ".tar")


@dataclass(frozen=True, slots=True)
class Shard:
    """A shard file and the name provenance uses for it."""

    path: Path
    name: str  # relative to DATA, with "/"
    size: int
    url: str | None = None  # an fsspec URL (s3://…) that is read instead of path (see remote.py)


def is_shard_file(p: Path) -> bool:
    """Whether ``p`` is named like a shard (``*.jsonl``, ``*.jsonl.gz``, ``*.jsonl.zst``, or a
    table: ``*.parquet``, ``*.arrow``)."""
    return p.name.endswith(SHARD_SUFFIXES) or p.name.lower().endswith(TABLE_SUFFIXES)


@dataclass(frozen=True, slots=True, order=True)
class Provenance:
    """Where a row lives: enough to seek straight back to it.

    Attributes:
        shard: Path of the shard relative to DATA, with ``/`` separators.
        line: 1-based line number (of a Parquet or Arrow shard: 1-based row number).
        offset: Byte offset of the line start in the (uncompressed) stream (of a Parquet or
            Arrow shard: the 0-based row index, ``line - 1``).
    """

    shard: str
    line: int
    offset: int

    def to_dict(self) -> dict[str, Any]:
        return {"shard": self.shard, "line": self.line, "offset": self.offset}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Provenance:
        return cls(shard=str(d["shard"]), line=int(d["line"]), offset=int(d["offset"]))


@dataclass(frozen=True, slots=True, eq=False)
class Row:
    """One validated training row, stamped with its provenance by the reader."""

    source: str
    input_ids: np.ndarray  # int64, 1-D
    loss_mask: np.ndarray  # int8, 1-D, values 0/1
    seq_len: int
    n_prompt_tokens: int
    n_response_tokens: int
    provenance: Provenance

    @property
    def prompt_ids(self) -> np.ndarray:
        return self.input_ids[: self.n_prompt_tokens]


#: Features are computed from at most this many tokens at the start and at the end of a prompt.
FEATURE_HEAD = 256
FEATURE_TAIL = 256


def feature_window(prompt_ids: np.ndarray) -> np.ndarray:
    """The tokens selection features are computed from: the whole prompt when it is short,
    else its first :data:`FEATURE_HEAD` and last :data:`FEATURE_TAIL` tokens (the system prompt
    and tools at the start, the task and the latest turns at the end). Bounds the memory of a
    pool and the cost of its features whatever the prompt lengths."""
    n = prompt_ids.shape[0]
    if n <= FEATURE_HEAD + FEATURE_TAIL:
        return prompt_ids
    return np.concatenate([prompt_ids[:FEATURE_HEAD], prompt_ids[n - FEATURE_TAIL :]])


#: What :func:`reply_features` measures of a first reply, in its order (shares in ``[0, 1]``).
REPLY_FEATURES = (
    "seen2",
    "seen4",
    "distinct",
    "lookup",
    "lookup_run",
    "seen1",
    "seen3",
    "ngram[1-3]k4_steps",
    "ngram[1-3]k4_drafted",
    "ngram[2-5]k4_steps",
    "ngram[2-5]k4_drafted",
)
_REPLY_SCALE = 65535  # shares are kept as uint16 (2 bytes a feature and candidate)
_REPLY_KEEP = 65534  # the largest share kept: all 65535 marks a candidate not measured
#: :func:`reply_features` searches the prompt's last this many tokens.
REPLY_PROMPT_TOKENS = 32768
#: :func:`reply_features`'s lookup predicts from at most this many tokens of context.
LOOKUP_ORDER = 3
#: The n-gram drafters :func:`reply_features` simulates, as ``(prompt_lookup_min,
#: prompt_lookup_max, num_speculative_tokens)``: the two ngram settings of
#: :data:`distprompt.evaluate.drafters.DEFAULT_DRAFTERS` (a test keeps them the same).
REPLY_DRAFTERS = ((1, 3, 4), (2, 5, 4))
_GRAM_ORDERS = np.arange(1, 6)  # the gram orders reply_features hashes (up to REPLY_DRAFTERS')
_DRAFT_K = np.array([d[2] for d in REPLY_DRAFTERS])
_DRAFT_SLOTS = np.arange(int(_DRAFT_K.max()))
_M = tuple(np.uint64(m) for m in (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9))
_M_UNIGRAM = np.uint64(0xD6E8FEB86659FD93)
_BIGRAM_OFFSET = np.uint64(0x14057B7EF767814F)  # keeps bigram hashes off the others
_TRIGRAM_OFFSET = np.uint64(0x61C8864680B583EB)  # keeps trigram hashes off the others
_FIVEGRAM_OFFSET = np.uint64(0x27D4EB2F165667C5)  # keeps 5-gram hashes off the others
#: Token values no vocabulary holds, put before the context (:func:`reply_features`).
_SENTINELS = np.array([1 << 40, (1 << 40) + 1, (1 << 40) + 2], dtype=np.uint64)
_SALT_SHIFT = 42  # a batch's row index goes above every token and sentinel (tokens < 2**40)
_POS_BITS = 21  # positions packed under the hashes when the grams are sorted
_HASH_MASK = np.uint64(~((1 << _POS_BITS) - 1) & 0xFFFF_FFFF_FFFF_FFFF)


def _occurrences(grams: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each hash of ``grams``, the index of the last equal hash before it (-1: none) and of
    the first equal hash (itself when none is earlier): one sort of the hashes' high bits with
    the positions packed under them (numpy's sort is much faster than a stable argsort; a
    stable argsort when the positions do not fit)."""
    m = grams.shape[0]
    prev = np.full(m, -1, dtype=np.intp)
    if m < 2:
        return prev, np.arange(m, dtype=np.intp)
    if m < (1 << _POS_BITS):
        with np.errstate(over="ignore"):
            key = grams * _M[2]  # odd: a bijection whose high bits depend on every bit
        key &= _HASH_MASK
        key |= np.arange(m, dtype=np.uint64)
        key.sort()
        dup = (key[1:] & _HASH_MASK) == (key[:-1] & _HASH_MASK)
        order = (key & ~_HASH_MASK).astype(np.intp)
    else:
        order = np.argsort(grams, kind="stable")
        ordered = grams[order]
        dup = ordered[1:] == ordered[:-1]
    prev[order[1:][dup]] = order[:-1][dup]
    # runs of equal hashes hold ascending positions: each run's first is its first occurrence
    run = np.arange(m)
    run[1:][dup] = 0
    first = np.empty(m, dtype=np.intp)
    first[order] = order[np.maximum.accumulate(run)]
    return prev, first


def _ngram_counts(
    x: np.ndarray,
    first: np.ndarray,
    lo: np.ndarray,
    decoded: np.ndarray,
    ends: np.ndarray,
    slots: np.ndarray,
    heads: np.ndarray,
) -> np.ndarray:
    """Verify steps and drafted tokens of vLLM's n-gram proposer at each of
    :data:`REPLY_DRAFTERS` on the replies of :func:`reply_features_many`'s batch ``x``, as
    :func:`distprompt.evaluate.drafters.simulate` counts them (a reply's first token is the
    prefill's): at each step, the longest suffix of the context of ``n`` tokens
    (``min <= n <= max``) that occurred earlier, its earliest occurrence, and the up to ``k``
    tokens after it that the context holds; the leading ones equal to the reply are accepted
    and the step emits them and one more.

    ``first`` and ``lo``: the first occurrences of the batch's grams and where each order's
    block starts; ``decoded``: the positions of the reply tokens after each reply's first (the
    context before one is ``x`` up to it); ``ends``: the end of each one's reply; ``slots``:
    each one's slot in the walk, where a reply's decoded tokens are followed by one slot for
    its end, and ``heads`` each reply's first slot.

    The proposal at a position depends on the position alone (the context is the recorded
    reply), so every position's is found at once; the steps are the walk of jumps ``t -> t +
    accepted(t) + 1``, summed by pointer doubling (log n passes, every reply's walk and each
    drafter's side by side). Returns ``(replies, drafters, 2)``: steps, drafted tokens."""
    total = decoded  # the context's length before each decoded token
    n_slots = int(heads[-1])
    n_drafters = len(REPLY_DRAFTERS)
    # per gram order o (rows): where the earliest occurrence of the o-gram ending at
    # total - 1 ends, plus one, when it ends earlier (-1: none; the batch's first o - 1
    # tokens end no o-gram; a first occurrence in another order's block is a hash
    # collision: none either)
    o = _GRAM_ORDERS[:, None]
    f = first[lo[:, None] + np.maximum(total - o, 0)] - lo[:, None]
    f = np.where((f >= 0) & (total >= o) & (f + o < total), f + o, -1)
    # the proposal's start per drafter (rows): its longest order with a match
    start = np.full((n_drafters, total.shape[0]), -1, dtype=np.intp)
    for i, (lo_n, hi_n, _) in enumerate(REPLY_DRAFTERS):
        for g in range(lo_n - 1, hi_n):
            np.copyto(start[i], f[g], where=f[g] >= 0)
    proposed = np.where(start >= 0, np.minimum(_DRAFT_K[:, None], total - start), 0)
    j = _DRAFT_SLOTS
    dst = total[:, None] + j
    ok = (j < proposed[:, :, None]) & (dst < ends[:, None])
    # right[..., -1] is False: the first wrong slot is the count of leading right ones
    right = np.zeros((*ok.shape[:2], j.shape[0] + 1), dtype=bool)
    np.equal(
        x[np.where(ok, start[:, :, None] + j, 0)], x[np.where(ok, dst, 0)], out=right[..., :-1]
    )
    right[..., :-1] &= ok
    accepted = np.argmin(right, axis=2)
    # the walk: a decoded token's slot jumps to the slot of the token after the step (the
    # reply's end slot at most, which stays put and counts nothing); the drafters' walks in
    # blocks of n_slots, side by side. Steps above bit 32, drafted tokens below (at most k a
    # step: no carry), summed as one
    end_slot = slots + (ends - total)  # the reply's end slot: one per token left
    base = np.arange(n_drafters)[:, None] * n_slots
    jump = np.arange(n_drafters * n_slots).reshape(n_drafters, n_slots)  # all stay put
    jump[:, slots] = np.minimum(slots + accepted + 1, end_slot) + base
    sums = np.zeros((n_drafters, n_slots), dtype=np.int64)
    sums[:, slots] = proposed + (1 << 32)
    walk, total_sums = jump.reshape(-1), sums.reshape(-1)
    longest = int(np.diff(heads).max()) - 1  # the most decoded tokens of a reply
    for _ in range(longest.bit_length()):  # 2**rounds >= that many jumps reach every end
        total_sums += total_sums[walk]
        walk = walk[walk]
    head = total_sums[heads[:-1, None] + base.T]
    return np.stack([head >> 32, head & 0xFFFF_FFFF], axis=2)


def reply_features(prompt_ids: np.ndarray, reply_ids: np.ndarray) -> np.ndarray:
    """Cheap content signals of a first reply that bear on speculation, as uint16 shares
    (:data:`REPLY_FEATURES`, scaled to 65535). The context is the prompt's last 32k tokens
    followed by the reply:

    * ``seen2`` / ``seen4``: the share of the reply's tokens whose bigram / 4-gram ending at
      them already occurred earlier in the context: the tokens a lookup of the 1 / 3 tokens
      before them could have drafted. Copied spans (file contents, tool output, quoted code),
      repeated lines and degenerate loops are what prompt-lookup, suffix and learned drafters
      alike get right;
    * ``distinct``: distinct tokens over tokens (low for repetitive replies);
    * ``lookup``: the share of the reply's tokens that a copy predictor gets right: the token
      that followed the most recent earlier occurrence of the longest context (up to
      :data:`LOOKUP_ORDER` tokens) before it that occurred earlier at all. ``seen`` says a
      continuation existed; ``lookup`` whether the one a drafter would copy is right;
    * ``lookup_run``: the share of tokens that ``lookup`` gets right together with the token
      before them: runs of right guesses, which is what lets a drafter's several tokens be
      accepted in one step;
    * ``seen1`` / ``seen3``: as ``seen2`` / ``seen4`` for the token itself and the trigram
      ending at it (a lookup of 0 / 2 tokens before): with ``seen2`` and ``seen4`` they trace how
      often a drafter has a match to propose from at all, the denominator of its acceptance
      rate (added for it: benchmarks/RESULTS.md, issue 26's sixth round);
    * ``ngram[1-3]k4_steps`` / ``ngram[1-3]k4_drafted`` and the same for ``ngram[2-5]k4``: the
      verify steps and the drafted tokens (over ``k``) of vLLM's n-gram proposer at the two
      n-gram settings of :data:`REPLY_DRAFTERS`, over the reply's tokens: exactly what
      :func:`distprompt.evaluate.drafters.simulate` counts on this context (the numerator and
      denominator of those drafters' acceptance, which the shares above only approximate:
      benchmarks/RESULTS.md, issue 26's eighth round).

    Together they predict a reply's saved verify steps under lookup drafters much better than
    ``seen`` alone on the chat and function-calling sources, where speculation's gains sit in
    a few replies (benchmarks/RESULTS.md). One sort of the context's 1- to 5-grams with their
    positions (n log n in the lengths), so the pass can afford it for the candidates of the
    reference sample it measures (:func:`reply_features_many` measures many rows at once).

    Example:
        >>> import numpy as np
        >>> reply_features(np.arange(20), np.array([5, 6, 7, 8, 40, 41, 40, 41])).tolist()
        [32768, 8192, 49151, 32768, 16384, 49151, 16384, 32768, 12288, 40959, 8192]
    """
    return reply_features_many([(prompt_ids, reply_ids)])[0]


#: :func:`reply_features_many` measures rows together up to this many context tokens (a row
#: over it alone): large enough that numpy's per-call cost is shared, small enough that the
#: sort stays in cache (on the 1.5 GB benchmark's measured rows, 0.25 ms a row at 10k against
#: 0.27 at 4k and 20k, 0.32 at 300k and 0.37 one row at a time).
_BATCH_TOKENS = 10_000


def reply_features_many(pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """:func:`reply_features` of several ``(prompt_ids, reply_ids)`` pairs, ``(len(pairs),
    len(REPLY_FEATURES))`` uint16: batches of rows measured together (one sort and the same
    array operations for the whole batch, where a row alone pays numpy's per-call cost ~60
    times). Each row's tokens are salted with its index in the batch, so no gram matches
    across rows: the result is the row's alone."""
    out = np.zeros((len(pairs), len(REPLY_FEATURES)), dtype=np.uint16)
    batch: list[int] = []
    size = 0
    for i, (p, r) in enumerate(pairs):
        n = np.asarray(r).shape[0]
        if n == 0:
            continue
        m = min(np.asarray(p).shape[0], REPLY_PROMPT_TOKENS) + n + _SENTINELS.shape[0]
        if batch and size + m > _BATCH_TOKENS:
            out[batch] = _measure(pairs, batch)
            batch, size = [], 0
        batch.append(i)
        size += m
    if batch:
        out[batch] = _measure(pairs, batch)
    return out


def _measure(pairs: Sequence[tuple[np.ndarray, np.ndarray]], rows: list[int]) -> np.ndarray:
    """:func:`reply_features_many` of one batch (replies not empty)."""
    parts: list[np.ndarray] = []
    starts, ks, ns = [], [], []
    at_ = 0
    for b, i in enumerate(rows):
        p = np.asarray(pairs[i][0])[-REPLY_PROMPT_TOKENS:]
        r = np.asarray(pairs[i][1])
        # three distinct tokens no vocabulary holds go first: every gram the measures look up
        # then exists, and those holding them occur nowhere else; the salt (the row's index
        # in the batch, above any token and sentinel) keeps each row's grams its own
        seg = np.concatenate([_SENTINELS, p.astype(np.uint64), r.astype(np.uint64)])
        seg += np.uint64(b) << np.uint64(_SALT_SHIFT)
        parts.append(seg)
        starts.append(at_)
        ks.append(at_ + _SENTINELS.shape[0] + p.shape[0])
        ns.append(r.shape[0])
        at_ += seg.shape[0]
    x = np.concatenate(parts)
    size = x.shape[0]
    k = np.asarray(ks, dtype=np.intp)
    n = np.asarray(ns, dtype=np.intp)
    with np.errstate(over="ignore"):
        g1 = x * _M_UNIGRAM  # g1[e]: the token at e
        g2 = x[:-1] * _M[0]
        g2 += x[1:]
        g2 += _BIGRAM_OFFSET  # g2[e - 1]: the bigram ending at e
        g3 = g2[:-1] * _M[1]
        g3 += x[2:]
        g3 += _TRIGRAM_OFFSET  # g3[e - 2]: the trigram ending at e
        g4 = g2[:-2] * _M[1]
        g4 += g2[2:]  # g4[e - 3]: the 4-gram ending at e
        g5 = g4[:-1] * _M[2]
        g5 += x[4:]
        g5 += _FIVEGRAM_OFFSET  # g5[e - 4]: the 5-gram ending at e
    # prev[lo[o] + e - o]: where in the same array the last earlier occurrence of the
    # (o + 1)-gram ending at e is (-1: none; one in another order's block: a collision);
    # first[...]: its first occurrence
    lo = np.array([0, size, 2 * size - 1, 3 * size - 3, 4 * size - 6], dtype=np.intp)
    prev, first = _occurrences(np.concatenate((g1, g2, g3, g4, g5)))
    # every reply token's position, its row (in the batch), and its reply's start
    row = np.repeat(np.arange(len(rows)), n)
    pos = np.arange(row.shape[0]) - np.repeat(np.cumsum(n) - n, n) + k[row]
    count = len(rows)

    def per_row(hit: np.ndarray, where: np.ndarray = row) -> np.ndarray:
        return np.bincount(where[hit], minlength=count)

    # seen[o]: reply tokens whose (o + 1)-gram ending at them occurred earlier
    seen = [per_row(prev[lo[o] + pos - o] >= lo[o]) for o in range(4)]
    repeats = per_row(prev[pos] >= k[row])  # the last earlier occurrence is in the reply
    # the copy predictor: for each reply token, the longest context before it (up to
    # LOOKUP_ORDER tokens, ending at e = t - 1) that occurred earlier, and the token that
    # followed its last occurrence there (at: the index of that next token in x; -1: none)
    at = np.full(pos.shape[0], -1, dtype=np.intp)
    for o in range(LOOKUP_ORDER):
        last = prev[lo[o] + pos - 1 - o]
        at = np.where(last >= lo[o], last - (lo[o] - o - 1), at)
    right = x[at] == x[pos]
    right &= at >= 0
    runs = per_row(right[1:] & right[:-1] & (row[1:] == row[:-1]), row[1:])
    # the drafters, over the tokens after each reply's first
    later = pos > k[row]
    decoded = pos[later]
    heads = np.concatenate([[0], np.cumsum(n)])  # each reply's n - 1 tokens and its end slot
    slots = decoded - k[row[later]] - 1 + heads[row[later]]
    counts = _ngram_counts(x, first, lo, decoded, (k + n)[row[later]], slots, heads)
    # in REPLY_FEATURES' order; drafted tokens per proposal slot: a share of the reply
    drafters = (counts / [(1, d[2]) for d in REPLY_DRAFTERS]).reshape(count, -1)
    hits = np.column_stack(
        [seen[1], seen[3], n - repeats, per_row(right), runs, seen[0], seen[2], drafters]
    )
    shares = hits / n[:, None]
    return np.minimum(np.round(shares * _REPLY_SCALE), _REPLY_KEEP).astype(np.uint16)


@dataclass(frozen=True, slots=True, eq=False)
class Candidate:
    """A unique prompt kept in a source's candidate pool.

    ``key`` is a 64-bit hash of the prompt ids: the pool is a bottom-k sample on it, so the pool
    does not depend on shard order and exact duplicates collapse onto one candidate.

    A pool read from plain shards holds only what selection needs (``window``, the lengths and
    the provenance): ``prompt_ids``, ``prompt_mask`` and ``response_ids`` are None and are read
    back from the shard for the candidates selected
    (:func:`distprompt.read.readback.load_candidates`).
    """

    key: int
    source: str
    prompt_ids: np.ndarray | None  # int32; None: not held, read back when needed
    prompt_mask: np.ndarray | None  # int8: loss_mask over the prompt span (earlier trained turns)
    response_ids: np.ndarray | None  # int32: the first assistant span after the prompt
    n_response_tokens: int
    provenance: Provenance  # of the first occurrence in (shard, line) order
    count: int = 1  # rows carrying this exact prompt
    # feature_window(prompt ids), or where it is in the pass's window store (read back when
    # the source is selected: distprompt.read.spill); None: from prompt_ids
    window: np.ndarray | SpilledWindow | None = None
    n_prompt: int = -1  # prompt length when prompt_ids is not held
    n_first_response: int = -1  # length of the first assistant span when response_ids is not
    # reply_features(prompt, first response): uint16 shares, REPLY_FEATURES in order
    reply: np.ndarray | None = None

    @property
    def n_prompt_tokens(self) -> int:
        if self.n_prompt >= 0:
            return self.n_prompt
        assert self.prompt_ids is not None
        return int(self.prompt_ids.shape[0])

    @property
    def first_response_length(self) -> int:
        """Tokens in the first assistant span after the prompt (the recorded output length)."""
        if self.n_first_response >= 0:
            return self.n_first_response
        assert self.response_ids is not None
        return int(self.response_ids.shape[0])

    def reply_shares(self) -> np.ndarray:
        """:data:`REPLY_FEATURES` of the first reply as float shares (zeros when unknown)."""
        if self.reply is None:
            return np.zeros(len(REPLY_FEATURES))
        return self.reply.astype(np.float64) / _REPLY_SCALE

    @property
    def feature_ids(self) -> np.ndarray:
        """The tokens selection features are computed from (:func:`feature_window`)."""
        w = self.window
        if w is None:
            assert self.prompt_ids is not None
            return feature_window(self.prompt_ids)
        return w if isinstance(w, np.ndarray) else w.read()

    @property
    def n_feature_ids(self) -> int:
        """``len(feature_ids)``, without reading a window kept in the window store."""
        w = self.window
        if w is None:
            return min(self.n_prompt_tokens, FEATURE_HEAD + FEATURE_TAIL)
        return len(w)

    @property
    def loaded(self) -> bool:
        """Whether the prompt, its mask and the first response are held."""
        return (
            self.prompt_ids is not None
            and self.prompt_mask is not None
            and self.response_ids is not None
        )


@dataclass(frozen=True, slots=True)
class Ambiguity:
    """Two readings of a prompt re-render to the same ids; which one an item keeps, and why.

    Attributes:
        kind: ``system_in_user``: the template writes the system prompt into a user turn, so
            that turn's text can be read as a system prompt and a user message, or as one user
            message.
        message: Index (in the item's messages) of the user message the text is in, or the
            user message after the system prompt read out of it.
        separator: What the template writes between a system prompt and that user text.
        reading: ``user`` (kept as user text: no evidence for a system prompt) or ``system``
            (read as a system prompt: evidence).
        evidence: Items of the source whose text opens with that system prompt (0 when kept
            as user text).
    """

    kind: str
    message: int
    separator: str
    reading: str
    evidence: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "message": self.message,
            "separator": self.separator,
            "reading": self.reading,
            "evidence": self.evidence,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Ambiguity:
        return cls(
            kind=str(d["kind"]),
            message=int(d["message"]),
            separator=str(d["separator"]),
            reading=str(d["reading"]),
            evidence=int(d.get("evidence", 0)),
        )


@dataclass(frozen=True, slots=True)
class SuiteItem:
    """One benchmark prompt of a suite; one line of ``suite.jsonl``.

    Attributes:
        id: Stable id derived from the source and the prompt ids.
        source: Source name of the training rows.
        prompt: Decoded prompt span, special tokens kept.
        n_prompt_tokens: Prompt length in tokens, as recorded.
        n_response_tokens: Response length in tokens, as recorded (``seq_len - n_prompt``).
        max_tokens: Output length to ask for: the first assistant span after the prompt,
            capped by ``max_output_tokens`` when set.
        cluster: Index of the item's cluster within its source.
        cluster_size: Number of the source's candidates nearest to this item (in its stratum).
        weight: Corpus rows the item stands for (a source's weights sum to its rows; calibrated:
            see :mod:`distprompt.choose.design`).
        stratum: ``take-all`` (a row whose first reply alone holds a pick's share of the
            source's reply tokens: it stands for itself) or ``len<i>`` (first-reply length
            stratum ``i``, 1 = shortest); None in suites made before strata.
        provenance: Where the row lives in the corpus.
        prompt_ids: The exact prompt token ids.
        response_ids: The recorded first response's token ids (what model-free drafters are
            simulated on, :mod:`distprompt.evaluate`); None in suites written before they were
            kept.
        response: Decoded recorded first response (special tokens skipped).
        duplicates: How many rows of the corpus carry exactly this prompt.
        messages: Recovered chat turns (OpenAI style), when turn recovery ran.
        tools: Tool definitions the prompt carries, if any.
        fidelity: ``tokens`` | ``text`` | ``lossy`` (see :mod:`distprompt.recover.turns`).
        fidelity_reason: Why fidelity is not ``tokens``.
        structure: ``turns`` (every turn recognised: no template marker inside a message) or
            ``flat`` (the declared fallback: the prompt text in fewer messages, markers
            included); None when turn recovery did not run.
        chat_template_kwargs: Template switches the prompt was rendered with (e.g.
            ``{"enable_thinking": false}``), for clients that pass them to the server.
        ambiguities: Where the prompt has two readings that re-render alike, which one the
            messages hold and why (:class:`Ambiguity`).
    """

    id: str
    source: str
    prompt: str
    n_prompt_tokens: int
    n_response_tokens: int
    max_tokens: int
    cluster: int
    cluster_size: int
    weight: float
    provenance: Provenance
    prompt_ids: tuple[int, ...] = field(repr=False)
    stratum: str | None = None
    response: str = field(default="", repr=False)
    response_ids: tuple[int, ...] | None = field(default=None, repr=False)
    duplicates: int = 1
    messages: tuple[dict[str, Any], ...] | None = field(default=None, repr=False)
    tools: tuple[dict[str, Any], ...] | None = field(default=None, repr=False)
    fidelity: str | None = None
    fidelity_reason: str | None = None
    chat_template_kwargs: dict[str, Any] | None = field(default=None, repr=False)
    structure: str | None = None
    ambiguities: tuple[Ambiguity, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The ``suite.jsonl`` object (key order fixed, so output is byte-stable)."""
        d: dict[str, Any] = {
            "id": self.id,
            "source": self.source,
            "prompt": self.prompt,
            "n_prompt_tokens": self.n_prompt_tokens,
            "n_response_tokens": self.n_response_tokens,
            "max_tokens": self.max_tokens,
            "cluster": self.cluster,
            "cluster_size": self.cluster_size,
            "weight": self.weight,
            "stratum": self.stratum,
            "duplicates": self.duplicates,
            "provenance": self.provenance.to_dict(),
            "fidelity": self.fidelity,
            "fidelity_reason": self.fidelity_reason,
            "structure": self.structure,
            "ambiguities": [a.to_dict() for a in self.ambiguities],
            "messages": list(self.messages) if self.messages is not None else None,
            "tools": list(self.tools) if self.tools is not None else None,
            "chat_template_kwargs": self.chat_template_kwargs,
            "response": self.response,
            "prompt_ids": list(self.prompt_ids),
            "response_ids": list(self.response_ids) if self.response_ids is not None else None,
        }
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SuiteItem:
        messages = d.get("messages")
        tools = d.get("tools")
        response_ids = d.get("response_ids")
        return cls(
            id=str(d["id"]),
            source=str(d["source"]),
            prompt=str(d["prompt"]),
            n_prompt_tokens=int(d["n_prompt_tokens"]),
            n_response_tokens=int(d["n_response_tokens"]),
            max_tokens=int(d["max_tokens"]),
            cluster=int(d["cluster"]),
            cluster_size=int(d["cluster_size"]),
            weight=float(d["weight"]),
            stratum=d.get("stratum"),
            provenance=Provenance.from_dict(d["provenance"]),
            prompt_ids=tuple(int(i) for i in d["prompt_ids"]),
            response=str(d.get("response", "")),
            response_ids=tuple(int(i) for i in response_ids) if response_ids is not None else None,
            duplicates=int(d.get("duplicates", 1)),
            messages=tuple(messages) if messages is not None else None,
            tools=tuple(tools) if tools is not None else None,
            fidelity=d.get("fidelity"),
            fidelity_reason=d.get("fidelity_reason"),
            chat_template_kwargs=d.get("chat_template_kwargs"),
            structure=d.get("structure"),
            ambiguities=tuple(Ambiguity.from_dict(a) for a in d.get("ambiguities") or ()),
        )


@dataclass(slots=True)
class SourceStats:
    """Per-source counters and length histograms (exact, mergeable).

    ``response_*`` count ``n_response_tokens`` (the whole rest of the row, every later turn
    included); ``first_reply_*`` count the first assistant span after the prompt, which is what a
    benchmark client asks for (``max_tokens``) and what a server would generate.
    """

    rows: int = 0
    prompt_tokens: int = 0
    response_tokens: int = 0
    prompt_lengths: Counter[int] = field(default_factory=Counter)
    response_lengths: Counter[int] = field(default_factory=Counter)
    seq_lengths: Counter[int] = field(default_factory=Counter)
    trained_turns: Counter[int] = field(default_factory=Counter)
    flags: Counter[str] = field(default_factory=Counter)  # valid rows flagged, by reason
    # the first assistant span after the prompt: what a client asks for (max_tokens)
    first_reply_tokens: int = 0
    first_reply_lengths: Counter[int] = field(default_factory=Counter)

    def merge(self, other: SourceStats) -> SourceStats:
        self.rows += other.rows
        self.prompt_tokens += other.prompt_tokens
        self.response_tokens += other.response_tokens
        self.prompt_lengths.update(other.prompt_lengths)
        self.response_lengths.update(other.response_lengths)
        self.seq_lengths.update(other.seq_lengths)
        self.trained_turns.update(other.trained_turns)
        self.flags.update(other.flags)
        self.first_reply_tokens += other.first_reply_tokens
        self.first_reply_lengths.update(other.first_reply_lengths)
        return self


def max_tokens_for(first_reply: int, cap: int | None = None) -> int:
    """The output length a suite item asks for (``max_tokens``) given the length of its row's
    first reply: at least 1, at most ``cap`` (``max_output_tokens``).

    Example:
        >>> max_tokens_for(0), max_tokens_for(700), max_tokens_for(700, 512)
        (1, 700, 512)
    """
    n = max(1, int(first_reply))
    return n if cap is None else min(n, int(cap))


def max_tokens_histogram(first_reply: Mapping[int, int], cap: int | None = None) -> Counter[int]:
    """A first-reply histogram (:attr:`SourceStats.first_reply_lengths`) as the corpus's
    ``max_tokens`` histogram: each length through :func:`max_tokens_for`, so a capped suite is
    compared with the capped corpus.

    Example:
        >>> sorted(max_tokens_histogram({0: 2, 300: 1, 900: 4}, 512).items())
        [(1, 2), (300, 1), (512, 4)]
    """
    out: Counter[int] = Counter()
    for n, count in first_reply.items():
        out[max_tokens_for(n, cap)] += count
    return out


def histogram_quantiles(counts: Mapping[int, int], ps: Sequence[float]) -> list[int]:
    """Exact quantiles of a length histogram: for each ``p``, the smallest value ``v`` with at
    least ``p`` of the mass at or below ``v`` (``p = 0`` gives the minimum). Empty: ``[]``.

    Example:
        >>> histogram_quantiles({n: 1 for n in range(1, 101)}, [0, 0.5, 0.9, 1])
        [1, 50, 90, 100]
    """
    items = sorted((int(k), int(v)) for k, v in counts.items() if v > 0)
    if not items:
        return []
    vals = np.array([k for k, _ in items], dtype=np.int64)
    cum = np.cumsum([v for _, v in items])
    n = int(cum[-1])
    # round() first: 0.9 * 100 is 90.00000000000001 in floats, whose ceil would skip a rank.
    ranks = [max(1, int(np.ceil(round(p * n, 9)))) for p in ps]
    return [int(vals[i]) for i in np.searchsorted(cum, ranks)]
