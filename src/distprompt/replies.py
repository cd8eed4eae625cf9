"""What the recorded first reply holds that bears on speculation, measured from token ids alone:
:func:`reply_features` (one reply) and :func:`reply_features_many` (a batch, as the pass
measures its reference sample). The shares are :data:`distprompt.records.REPLY_FEATURES`, kept
on each :class:`~distprompt.records.Candidate` as uint16.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from distprompt.records import REPLY_FEATURES, REPLY_SCALE

__all__ = [
    "BATCH_TOKENS",
    "LOOKUP_ORDER",
    "REPLY_DRAFTERS",
    "REPLY_PROMPT_TOKENS",
    "SUFFIX_LIKE_K",
    "reply_features",
    "reply_features_many",
]

_REPLY_KEEP = REPLY_SCALE - 1  # the largest share kept: all REPLY_SCALE marks "not measured"
#: :func:`reply_features` searches the prompt's last this many tokens.
REPLY_PROMPT_TOKENS = 32768
#: :func:`reply_features`'s lookup predicts from at most this many tokens of context.
LOOKUP_ORDER = 3
#: The n-gram drafters :func:`reply_features` simulates, as ``(prompt_lookup_min,
#: prompt_lookup_max, num_speculative_tokens)``: the two ngram settings of
#: :data:`distprompt.evaluate.drafters.DEFAULT_DRAFTERS` (a test keeps them the same).
REPLY_DRAFTERS = ((1, 3, 4), (2, 5, 4))
#: The tokens :func:`reply_features`' suffix-decoding-like drafter proposes at most.
SUFFIX_LIKE_K = 8
_GRAM_ORDERS = np.arange(1, 6)  # the gram orders reply_features hashes (up to REPLY_DRAFTERS')
_DRAFT_K = np.array([d[2] for d in REPLY_DRAFTERS])
_SUFFIX_SLOTS = np.arange(SUFFIX_LIKE_K)
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


def _looked_up(g1: np.ndarray, g2: np.ndarray, g3: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which grams of :func:`_measure`'s blocks (orders 1 to 5, in ``lo``'s layout) need to be
    sorted: those that may equal another gram of the batch and a gram the measures look up,
    those ending at ``ends`` (each reply's tokens and the token before it). A gram equal to no
    other has no earlier occurrence and is its own first, which is what a gram left out of the
    sort gets; one that may equal a looked-up gram has its last token among theirs, from order
    2 its last bigram, from order 3 its last trigram, and those occur twice or more. Most of a
    long prompt's grams, and most of a reply's of order 3 and more, fail it. A few more pass
    (:func:`_may_be`), which changes nothing but the work."""
    tok = _may_be(g1, ends)
    big = _may_be(g2, ends - 1)  # big[e - 1]: the bigram ending at e
    tri = _may_be(g3, ends - 2)  # tri[e - 2]: the trigram ending at e
    tri &= big[1:]
    return np.concatenate((tok, big, tri, tri[1:], tri[2:]))


#: :func:`_may_be`'s tables: 2**16 buckets (cache-sized).
_FILTER_BITS = np.uint64(16)


def _may_be(grams: np.ndarray, looked_up: np.ndarray) -> np.ndarray:
    """Whether each hash of ``grams`` may occur more than once and be one of those at
    ``looked_up``: True for every one that does, and for a few others (whose bucket, the top
    bits once mixed, holds other hashes: about ``len(grams)`` in 65,536). Table lookups: a
    binary search, or a sort, costs as much as the sort this saves."""
    with np.errstate(over="ignore"):
        bucket = ((grams * _M[1]) >> (np.uint64(64) - _FILTER_BITS)).astype(np.intp)
    wanted = np.zeros(1 << int(_FILTER_BITS), dtype=bool)
    wanted[bucket[looked_up]] = True
    out = wanted[bucket]
    out &= np.bincount(bucket, minlength=wanted.shape[0])[bucket] > 1
    return out


def _occurrences_among(grams: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_occurrences` of ``grams`` where ``keep`` holds, the others left out of the sort
    (none of them equals a kept one: :func:`_looked_up`); a left-out gram has no earlier
    occurrence and is its own first."""
    at = np.flatnonzero(keep)
    prev_kept, first_kept = _occurrences(grams[at])
    prev = np.full(grams.shape[0], -1, dtype=np.intp)
    prev[at] = np.where(prev_kept >= 0, at[prev_kept], -1)
    first = np.arange(grams.shape[0], dtype=np.intp)
    first[at] = at[first_kept]
    return prev, first


def _accepted(
    x: np.ndarray,
    start: np.ndarray,
    proposed: np.ndarray,
    total: np.ndarray,
    ends: np.ndarray,
    slots: np.ndarray,
) -> np.ndarray:
    """Per drafter (rows) and position: how many of the ``proposed`` tokens from ``start`` equal
    the reply's from ``total`` (the leading ones, within the reply). Slot by slot among the
    proposals still right: most fail at their first token."""
    rows, n = proposed.shape
    room = np.minimum(proposed, ends - total)  # slots within the reply
    at = np.flatnonzero(room > 0)
    src = start.reshape(-1)[at]
    dst = np.tile(total, rows)[at]
    room = room.reshape(-1)[at]
    acc = np.zeros(rows * n, dtype=np.intp)
    # a slot past a proposal's room is compared too (then dropped): x padded for it
    x = np.concatenate((x, np.zeros(slots.shape[0], dtype=x.dtype)))
    for j in range(slots.shape[0]):
        same = x[src + j] == x[dst + j]
        if j:
            same &= room > j
        at, src, dst, room = at[same], src[same], dst[same], room[same]
        if not at.shape[0]:
            break
        acc[at] += 1
    return acc.reshape(rows, n)


def _ngram_counts(
    x: np.ndarray,
    first: np.ndarray,
    prev: np.ndarray,
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
    drafter's side by side). The last drafter is the suffix-decoding-like one of
    :func:`reply_features` (``prev``: the last earlier occurrences of the grams). Returns
    ``(replies, drafters, 2)``: steps, drafted tokens."""
    total = decoded  # the context's length before each decoded token
    n_slots = int(heads[-1])
    n_drafters = len(REPLY_DRAFTERS) + 1
    # per gram order o (rows): where the earliest occurrence of the o-gram ending at
    # total - 1 ends, plus one, when it ends earlier (-1: none; the batch's first o - 1
    # tokens end no o-gram; a first occurrence in another order's block is a hash
    # collision: none either)
    o = _GRAM_ORDERS[:, None]
    at = lo[:, None] + np.maximum(total - o, 0)  # the o-gram ending at total - 1
    f = first[at] - lo[:, None]
    f = np.where((f >= 0) & (total >= o) & (f + o < total), f + o, -1)
    # the proposal's start per drafter (rows): its longest order with a match
    start = np.full((n_drafters - 1, total.shape[0]), -1, dtype=np.intp)
    for i, (lo_n, hi_n, _) in enumerate(REPLY_DRAFTERS):
        for g in range(lo_n - 1, hi_n):
            np.copyto(start[i], f[g], where=f[g] >= 0)
    proposed = np.where(start >= 0, np.minimum(_DRAFT_K[:, None], total - start), 0)
    # the suffix-like drafter: the longest match (orders 1 to 5) at its latest occurrence, as
    # many tokens as it is long (spec factor 1), SUFFIX_LIKE_K when five or more match
    p = prev[at] - lo[:, None]
    p = np.where((p >= 0) & (total >= o), p + o, -1)
    s_start = np.full(total.shape[0], -1, dtype=np.intp)
    s_limit = np.zeros(total.shape[0], dtype=np.intp)
    for g in range(_GRAM_ORDERS.shape[0]):
        hit = p[g] >= 0
        np.copyto(s_start, p[g], where=hit)
        s_limit[hit] = SUFFIX_LIKE_K if g == _GRAM_ORDERS.shape[0] - 1 else g + 1
    s_proposed = np.where(s_start >= 0, np.minimum(s_limit, total - s_start), 0)
    start = np.concatenate((start, s_start[None]))
    proposed = np.concatenate((proposed, s_proposed[None]))
    accepted = _accepted(x, start, proposed, total, ends, _SUFFIX_SLOTS)
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
      benchmarks/RESULTS.md, issue 26's eighth round);
    * ``suffixlike_k8_steps`` / ``suffixlike_k8_drafted``: the same for a drafter shaped like
      suffix decoding (``suffix-k8`` of :data:`~distprompt.evaluate.drafters.DEFAULT_DRAFTERS`,
      whose counting of continuations costs too much for the pass): the longest match of the
      context's last 1 to 5 tokens at its **latest** earlier occurrence, proposing as many
      tokens as the match is long (suffix decoding's spec factor 1), :data:`SUFFIX_LIKE_K` for a
      match of five. Suffix decoding drafts a number of tokens that follows the match length,
      which the n-gram drafters' counts do not carry: against them alone, these cut the
      unexplained part of suffix-k8's drafted tokens per row to 0.14-0.86 of its variance on
      the TUNE corpus forge's sources (benchmarks/RESULTS.md, issue 26's tenth round).

    Together they predict a reply's saved verify steps under lookup drafters much better than
    ``seen`` alone on the chat and function-calling sources, where speculation's gains sit in
    a few replies (benchmarks/RESULTS.md). One sort of the context's 1- to 5-grams with their
    positions (n log n in the lengths), so the pass can afford it for the candidates of the
    reference sample it measures (:func:`reply_features_many` measures many rows at once).

    Example:
        >>> import numpy as np
        >>> reply_features(np.arange(20), np.array([5, 6, 7, 8, 40, 41, 40, 41])).tolist()
        [32768, 8192, 49151, 32768, 16384, 49151, 16384, 32768, 12288, 40959, 8192, 40959, 5120]
    """
    return reply_features_many([(prompt_ids, reply_ids)])[0]


#: :func:`reply_features_many` measures rows together up to this many context tokens (a row
#: over it alone): large enough that numpy's per-call cost is shared, small enough that the
#: sort stays in cache (on the 10,254 rows the 1.5 GB benchmark's pass measures, 0.13 ms a row
#: at 10k against 0.17 at 5k and 20k and 0.19 at 30k, with the two n-gram drafters; 0.14 with
#: the suffix-like one too).
BATCH_TOKENS = 10_000


def reply_features_many(
    pairs: Sequence[tuple[np.ndarray, np.ndarray]], *, batch_tokens: int = BATCH_TOKENS
) -> np.ndarray:
    """:func:`reply_features` of several ``(prompt_ids, reply_ids)`` pairs, ``(len(pairs),
    len(REPLY_FEATURES))`` uint16: batches of rows measured together (one sort and the same
    array operations for the whole batch, where a row alone pays numpy's per-call cost ~60
    times; ``batch_tokens``: the context tokens of a batch, a row over it alone). Each row's
    tokens are salted with its index in the batch, so no gram matches across rows: the result
    is the row's alone."""
    out = np.zeros((len(pairs), len(REPLY_FEATURES)), dtype=np.uint16)
    batch: list[int] = []
    size = 0
    for i, (p, r) in enumerate(pairs):
        n = np.asarray(r).shape[0]
        if n == 0:
            continue
        m = min(np.asarray(p).shape[0], REPLY_PROMPT_TOKENS) + n + _SENTINELS.shape[0]
        if batch and size + m > batch_tokens:
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
    ks, ns = [], []
    offset = 0
    for b, i in enumerate(rows):
        p = np.asarray(pairs[i][0])[-REPLY_PROMPT_TOKENS:]
        r = np.asarray(pairs[i][1])
        # three distinct tokens no vocabulary holds go first: every gram the measures look up
        # then exists, and those holding them occur nowhere else; the salt (the row's index
        # in the batch, above any token and sentinel) keeps each row's grams its own
        seg = np.concatenate([_SENTINELS, p.astype(np.uint64), r.astype(np.uint64)])
        seg += np.uint64(b) << np.uint64(_SALT_SHIFT)
        parts.append(seg)
        ks.append(offset + _SENTINELS.shape[0] + p.shape[0])  # where the row's reply starts
        ns.append(r.shape[0])
        offset += seg.shape[0]
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
    # every reply token's position, its row (in the batch), and its reply's start
    row = np.repeat(np.arange(len(rows)), n)
    pos = np.arange(row.shape[0]) - np.repeat(np.cumsum(n) - n, n) + k[row]
    grams = np.concatenate((g1, g2, g3, g4, g5))
    looked_up = np.concatenate((pos, k - 1))  # where the grams the measures look up end
    prev, first = _occurrences_among(grams, _looked_up(g1, g2, g3, looked_up))
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
    counts = _ngram_counts(x, first, prev, lo, decoded, (k + n)[row[later]], slots, heads)
    # in REPLY_FEATURES' order; drafted tokens per proposal slot: a share of the reply
    per_slot = [(1, d[2]) for d in REPLY_DRAFTERS] + [(1, SUFFIX_LIKE_K)]
    drafters = (counts / per_slot).reshape(count, -1)
    hits = np.column_stack(
        [seen[1], seen[3], n - repeats, per_row(right), runs, seen[0], seen[2], drafters]
    )
    shares = hits / n[:, None]
    return np.minimum(np.round(shares * REPLY_SCALE), _REPLY_KEEP).astype(np.uint16)
