"""One streaming pass: per-source statistics and a bottom-k pool of unique prompts.

A shard's pass yields a :class:`Partial`; partials merge associatively and commutatively, so the
result depends neither on shard order nor on how many workers read the shards. The candidate pool
of a source is the ``k`` unique prompts with the smallest 64-bit keyed hash of their prompt ids —
a uniform sample of the source's unique prompts in which exact duplicates collapse onto one
candidate. Memory is bounded by ``k`` candidates per source and by the number of distinct lengths.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from distprompt._heap import trim_heap
from distprompt.config import OnError
from distprompt.engine import DEFAULT_SCHEDULE, Schedule, run
from distprompt.errors import CorruptStreamError, DataError, TokenizerError
from distprompt.read.fastrow import RowView, read_row
from distprompt.read.partial import REPLY_SAMPLE, Partial, normalize
from distprompt.read.pools import BottomK, TopReplies, compact_ids, prompt_key
from distprompt.read.readback import load_candidates
from distprompt.read.shards import iter_rows
from distprompt.read.spill import WindowStore
from distprompt.read.tally import Tally
from distprompt.read.units import Unit, UnitOutcome, UnitResult, merge_units, units
from distprompt.read.validate import DEFAULT_MAX_LINE_BYTES
from distprompt.records import Candidate, Provenance, Row, Shard, SourceStats, feature_window
from distprompt.replies import REPLY_PROMPT_TOKENS, reply_features, reply_features_many

__all__ = [
    "REPLY_SAMPLE",
    "BottomK",
    "Partial",
    "TopReplies",
    "measure_reference",
    "prompt_key",
    "scan",
]

logger = logging.getLogger("distprompt.read.scan")

#: Prompts per source the pass holds with their ids by default: the round-trip sample of the
#: tokenizer checks (:data:`distprompt.recover.checks.ROUND_TRIP_SAMPLE`).
SAMPLE = 64
#: Rows with the longest first replies kept per source, whatever their key (:class:`TopReplies`).
HEAVY = 128

#: A shard's first rows all out of the vocabulary, this many (or every row of a shorter shard),
#: name the tokenizer rather than a row when the run stops at a bad row (:func:`_wrong_tokenizer`).
WRONG_TOKENIZER_ROWS = 32


def scan_unit(
    unit: Unit,
    *,
    max_candidates: int,
    seed: int = 0,
    on_error: OnError = "raise",
    vocab_size: int | None = None,
    tokenizer_name: str = "",
    on_row: Callable[[int], None] | None = None,
    check: Callable[[Any], Iterable[str]] | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    sample: int = SAMPLE,
    replies: bool = True,
) -> UnitResult:
    """Read one :class:`Unit`: a whole shard, or a byte range of a large one.

    Line numbers in the result (provenance, first ``shard:line`` of each reason, errors) count
    from 1 at the unit's start; :func:`scan` rebases them with the lines of the units before.

    Args:
        unit: The shard, or a byte range of it.
        max_candidates: Pool size ``k`` per source.
        seed: Selects the hash, hence which uniform sample the pool is.
        on_error: ``"raise"`` at the first bad row, or ``"skip"``: count bad rows by reason
            and skip them.
        vocab_size: When given, ids ``>= vocab_size`` make the row a bad row
            (``id_out_of_vocab``), raised or skipped like any other.
        tokenizer_name: Named in the out-of-vocabulary message.
        on_row: Called with the row's line offset after each row (progress).
        check: Called with each valid row; a row for which it returns reasons is held apart
            (``Partial.held``: its figures and pools, each reason counted in its
            ``anomalies`` and per source in ``flags``, the first reason as a skip) until the
            caller settles it with :meth:`Partial.readmit` or :meth:`Partial.set_aside`.
            Must be picklable when ``workers > 1``.
        max_line_bytes: Longer lines are bad rows (``line_too_long``), never held in memory.
        sample: Prompts held per source (the pool's first ``sample`` candidates, with their
            prompt ids; see :class:`BottomK`), for the tokenizer checks' round trip.
        replies: Keep each source's longest first replies (:class:`TopReplies`) and measure
            the reply sample (:data:`REPLY_SAMPLE`), which selection needs (``inspect`` does not).

    Blank lines are counted in ``anomalies`` (``blank_line``); when skipping, a truncated or
    corrupt compressed stream ends the shard and is counted as ``corrupt_stream``.

    Raises:
        DataError: A bad row (an id outside the vocabulary included), unless ``on_error`` is
            ``"skip"``.
        InputError: The shard cannot be read, or (unless ``on_error`` is ``"skip"``) its
            compressed stream is truncated or corrupt.
    """
    shard = unit.shard
    part = Partial(k=max_candidates, tally=Tally(on_error=on_error), sample=sample, replies=replies)
    part.ref_size = ref_size(unit)
    n = 0
    limit = vocab_size if vocab_size is not None else getattr(check, "vocab_size", None)
    # Candidates are read back when selected: by offset from a plain shard, in one pass over
    # a compressed stream (which cannot be seeked); the pool holds windows and lengths only,
    # and the prompt ids of its first ``sample`` candidates.
    hold = False
    lines = [0]
    for row in iter_rows(
        shard,
        tally=part.tally,
        max_line_bytes=max_line_bytes,
        parse=functools.partial(read_row, id_limit=limit),
        start=unit.start,
        end=unit.end,
        lines=lines,
    ):
        if vocab_size is not None:
            top = row.top_id(vocab_size)
            if top is not None:
                # A bad row like any other: whether the tokenizer is wrong is for the tokenizer
                # checks to say, on the valid rows (and, stopping at it, for scan's second look
                # at the shard's first rows: _wrong_tokenizer).
                part.tally.bad(_oov_error(row, top, vocab_size, tokenizer_name))
                continue
        reasons = list(check(row)) if check is not None else None
        if reasons:
            # Whether this row is bad or the tokenizer wrong is for the verdict on the whole
            # pass to say (Partial.readmit / set_aside): held apart until then.
            held = part.hold()
            _add_row(held, row, seed=seed, hold=hold)
            for reason in reasons:
                _flag(held, row, reason)
            where = f"{row.provenance.shard}:{row.provenance.line}"
            held.tally.skip(reasons[0], where)
            held.shard_rows[shard.name] = held.shard_rows.get(shard.name, 0) + 1
        else:
            _add_row(part, row, seed=seed, hold=hold)
            n += 1
        if on_row is not None:
            on_row(row.provenance.offset)
    part.shard_rows[shard.name] = n
    for p in (part, part.held):
        if p is not None:
            _settle_pending(p)
            p.ref = {}
    return UnitResult(part, lines[0])


def _oov_error(row: RowView, top: int, vocab_size: int, tokenizer_name: str) -> DataError:
    return DataError(
        row.provenance.shard,
        row.provenance.line,
        "id_out_of_vocab",
        f"expected token ids below {vocab_size} (the vocabulary of tokenizer "
        f"{tokenizer_name!r}), found id {top}; a corrupt row, or data made with "
        "another tokenizer — check with `distprompt inspect DATA --tokenizer "
        "TOK`, pass the matching --tokenizer, or --on-error skip to skip such rows",
    )


def _wrong_tokenizer(
    exc: DataError, shard: Shard, *, vocab_size: int, tokenizer_name: str, max_line_bytes: int
) -> DataError | None:
    """The error naming the tokenizer, when the first bad row ``exc`` of ``shard`` (out of the
    vocabulary) is one of the shard's first rows that all are: :data:`WRONG_TOKENIZER_ROWS` of
    them, or every row of a shorter shard (two or more). None when a row fits before.

    The shard is read again from its start, so the verdict does not depend on the byte ranges
    or workers the pass used; only when the run stops, so it costs at most those rows.
    """
    n = 0
    first: tuple[int, int] | None = None
    rows = iter_rows(
        shard,
        tally=Tally(on_error="skip"),  # other bad rows are neither verdict's
        max_line_bytes=max_line_bytes,
        parse=functools.partial(read_row, id_limit=vocab_size),
    )
    for row in rows:
        top = row.top_id(vocab_size)
        if top is None:
            return None  # a row fits before the limit: the bad row is the row's problem
        first = first or (row.provenance.line, top)
        n += 1
        if n >= WRONG_TOKENIZER_ROWS:
            break
    if n < 2 or first is None:
        return None
    which = f"each of the first {n} rows" if n >= WRONG_TOKENIZER_ROWS else f"every row ({n})"
    return DataError(
        exc.shard,
        first[0],
        "id_out_of_vocab",
        f"expected token ids below {vocab_size} (the vocabulary of tokenizer "
        f"{tokenizer_name!r}), found ids at or above it in {which} of the shard (the first: "
        f"{first[1]}); the vocabulary check says this is not the tokenizer the data was made "
        "with — pass that tokenizer with --tokenizer (`distprompt inspect DATA --tokenizer TOK` "
        "runs every check on the data)",
    )


def _add_row(part: Partial, row: RowView, *, seed: int, hold: bool = True) -> None:
    source = row.source
    n_prompt = row.n_prompt_tokens
    n_resp = row.n_response_tokens
    st = part.stats.get(source)
    if st is None:
        st = part.stats[source] = SourceStats()
        part.pools[source] = BottomK(part.k, sample=part.sample)
        part.heavy[source] = TopReplies(HEAVY)
    st.rows += 1
    st.prompt_tokens += n_prompt
    st.response_tokens += n_resp
    st.prompt_lengths[n_prompt] += 1
    st.response_lengths[n_resp] += 1
    st.seq_lengths[row.seq_len] += 1
    st.trained_turns[row.trained_turns] += 1
    start, end = row.first_response_span()
    n_first = end - start
    st.first_reply_tokens += n_first
    st.first_reply_lengths[n_first] += 1
    prompt = row.prompt_ids
    key = prompt_key(prompt, seed=seed)
    pool = part.pools[source]
    top = part.heavy[source]
    pooled = pool.offer_key(key)
    heavy = part.replies and n_first > 0 and top.offer(n_first, key)
    if not pooled:
        pool.reject()
        if not heavy:
            return
    window = compact_ids(feature_window(prompt))
    whole = window.shape[0] == prompt.shape[0]
    # the reply's features for the reference sample only (the take-all rows need none)
    measure = pooled and part.replies and _in_reference(part, source, key)
    reply_ids = row.ids(start, end) if hold or measure else None
    reply = None
    # measured when the unit ends, if still among its smallest keys (most rows that enter the
    # unit's running bottom-m leave it again) and still the row the pool or the longest-reply
    # tracker keeps for its prompt
    if (
        measure
        and reply_ids is not None
        and not _defer(part, source, key, prompt, reply_ids, row.provenance)
    ):
        reply = reply_features(prompt, reply_ids)
        _add_to_sum(part, source, key, reply, n_first)
    cand = Candidate(
        key=key,
        source=row.source,
        prompt_ids=(window if whole else compact_ids(prompt)) if hold else None,
        prompt_mask=row.prompt_mask() if hold else None,
        response_ids=compact_ids(reply_ids) if hold and reply_ids is not None else None,
        n_response_tokens=row.n_response_tokens,
        provenance=row.provenance,
        window=window,
        n_prompt=row.n_prompt_tokens,
        n_first_response=n_first,
        reply=reply,
    )
    if heavy:
        top.add(cand)
    if not pooled:
        return
    pool.add(cand)
    sample = pool.sample
    if sample is not None and sample.offer_key(key):
        # the prompt ids are copied only for the few rows that enter the sample
        if cand.prompt_ids is None:
            cand = replace(cand, prompt_ids=window if whole else compact_ids(prompt))
        sample.add(cand)


def ref_size(unit: Unit) -> int:
    """The bottom-m a unit keeps for the reply-feature sample. A byte range of a shard holds
    about its share of the shard's smallest keys (a binomial count: ``REPLY_SAMPLE * share``
    on average): it keeps that mean and four standard deviations and a margin, and the few keys
    of the merged bottom-m it missed are read back and measured at selection
    (:func:`measure_reference`), so the result does not depend on the split. Every row a unit
    keeps is measured (:func:`~distprompt.replies.reply_features`), and the merge keeps only
    :data:`REPLY_SAMPLE` of them: on the benchmark's 1.2 GB shard, 38 ranges of ~133 rows,
    twice the share and 32 more (86 a range) measured 3,268 rows for 1,024 kept; this bound
    (55 a range) measures 2,090."""
    size = unit.shard.size if unit.rows is None else unit.rows
    if unit.whole or size <= 0:
        return REPLY_SAMPLE
    end = size if unit.end is None else min(unit.end, size)
    mean = REPLY_SAMPLE * max(0, end - unit.start) / size
    return min(REPLY_SAMPLE, int(mean + 4 * math.sqrt(mean)) + 8)


def measure_reference(
    cands: Sequence[Candidate], keys: set[int], shards: Mapping[str, Shard], *, seed: int = 0
) -> list[Candidate]:
    """``cands`` with every one whose key is in ``keys`` (the reference sample: the pool's
    :data:`REPLY_SAMPLE` smallest) measured (:func:`~distprompt.replies.reply_features`): those
    the pass did not measure (a byte range keeps a share of the sample) are read back from
    their shards, and only the features kept.

    Raises:
        InputError: A shard cannot be read, or changed since the pass.
    """
    missing = [i for i, c in enumerate(cands) if c.reply is None and c.key in keys]
    if not missing or not shards:
        return list(cands)
    got = load_candidates([cands[i] for i in missing], list(shards.values()), seed=seed)
    pairs = []
    for c in got:
        assert c.prompt_ids is not None and c.response_ids is not None
        pairs.append((c.prompt_ids, c.response_ids))
    out = list(cands)
    for i, features in zip(missing, reply_features_many(pairs), strict=True):
        out[i] = replace(cands[i], reply=features)
    return out


def _in_reference(part: Partial, source: str, key: int) -> bool:
    """Whether ``key`` is among the :data:`REPLY_SAMPLE` smallest this reader has seen of
    ``source`` (recording it): then every key of the merged pool's smallest
    :data:`REPLY_SAMPLE` was, where it was read, and has its reply features."""
    got = part.ref.get(source)
    if got is None:
        got = part.ref[source] = ([], set())
    heap, keys = got
    if key in keys:
        return True
    if len(heap) < part.ref_size:
        heapq.heappush(heap, -key)
        keys.add(key)
        return True
    if key < -heap[0]:
        evicted = -heapq.heapreplace(heap, -key)
        keys.discard(evicted)
        keys.add(key)
        waiting = part.pending.get(source)
        if waiting is not None and evicted in waiting:
            tail, replies = waiting.pop(evicted)
            part.pending_tokens -= tail.shape[0] + sum(r.shape[0] for r in replies.values())
        return True
    return False


#: At most this many tokens of prompt tails and replies wait, per unit, to be measured when the
#: unit ends (``Partial.pending``: 16 MB as int32); beyond it rows are measured as they come.
PENDING_TOKENS = 4_000_000


def _defer(
    part: Partial,
    source: str,
    key: int,
    prompt: np.ndarray,
    reply: np.ndarray,
    row: Provenance,
) -> bool:
    """Keep the row's reply (and its prompt's tail, once a prompt) to measure when the unit
    ends (True), or leave it to be measured now (False: no room). The rows of one prompt wait
    side by side: the one the pool keeps and the one the longest-reply tracker keeps are
    measured (:func:`_settle_pending`), whichever they are by then."""
    waiting = part.pending.setdefault(source, {})
    got = waiting.get(key)
    tail = prompt[-REPLY_PROMPT_TOKENS:] if got is None else got[0]
    size = reply.shape[0] + (tail.shape[0] if got is None else 0)
    if part.pending_tokens + size > PENDING_TOKENS:
        return False
    if got is None:
        got = waiting[key] = (np.array(tail, dtype=np.int32), {})
    got[1][row] = np.array(reply, dtype=np.int32)
    part.pending_tokens += size
    return True


def _add_to_sum(part: Partial, source: str, key: int, reply: np.ndarray, n_first: int) -> None:
    """Count a measured row of a reference prompt into the unit's sums
    (:attr:`~distprompt.records.Candidate.reply_sum`'s layout)."""
    sums = part.reply_sums.setdefault(source, {})
    row = np.empty(len(reply) + 2, dtype=np.int64)
    np.multiply(reply, n_first, out=row[:-2], dtype=np.int64)
    row[-2], row[-1] = n_first, 1
    got = sums.get(key)
    sums[key] = row if got is None else got + row


def _settle_pending(part: Partial) -> None:
    """Measure the replies still waiting (``Partial.pending``): every row of a prompt still in
    the unit's reference sample, each once, into the unit's sums of its prompt's replies, and
    those of the rows the pool and the longest-reply tracker keep into their entries too. Then
    the sums of the prompts still in the sample go to their pool entries."""
    for source, waiting in part.pending.items():
        pool = part.pools.get(source)
        if pool is None:
            continue
        top = part.heavy.get(source)
        todo: list[tuple[int, Provenance, bool, bool]] = []
        for key, (_, replies) in waiting.items():
            in_pool = pool.unmeasured(key)
            in_top = top.unmeasured(key) if top is not None else None
            if in_top is None and key not in pool:
                continue  # left the pool since (a pool smaller than the sample)
            for row in replies:
                todo.append((key, row, row == in_pool, row == in_top))
        measured = reply_features_many([(waiting[k][0], waiting[k][1][r]) for k, r, _, _ in todo])
        for (key, row, for_pool, for_top), features in zip(todo, measured, strict=True):
            _add_to_sum(part, source, key, features, waiting[key][1][row].shape[0])
            if for_pool:
                pool.set_reply(key, features)
            if for_top:
                assert top is not None
                top.set_reply(key, features)
    for source, sums in part.reply_sums.items():
        pool = part.pools.get(source)
        ref = part.ref.get(source)
        if pool is None or ref is None:
            continue
        for key, total in sums.items():
            if key in ref[1]:  # measured as it came, then left the sample: not counted
                pool.add_reply_sum(key, total)
    part.pending = {}
    part.pending_tokens = 0
    part.reply_sums = {}


def _flag(part: Partial, row: Row | RowView, reason: str) -> None:
    part.tally.anomaly(reason, f"{row.provenance.shard}:{row.provenance.line}")
    part.stats[row.source].flags[reason] += 1


def _scan_star(args: tuple[Unit, dict[str, Any]]) -> UnitOutcome:
    unit, kwargs = args
    # What the units before left in the C heap (their pools, pickled and sent), given back:
    # in a worker that reads several shards it stays resident otherwise (measured on the
    # benchmark corpus: ~115 MB in the one worker process, beside the pipeline's selection).
    trim_heap()
    try:
        return scan_unit(unit, **kwargs)
    # Returned, not raised: these do not change on a retry (an engine retries what is raised).
    except (DataError, TokenizerError, CorruptStreamError) as exc:
        return exc


def scan(
    shards: Sequence[Shard],
    *,
    max_candidates: int,
    seed: int = 0,
    on_error: OnError = "raise",
    vocab_size: int | None = None,
    tokenizer_name: str = "",
    schedule: Schedule = DEFAULT_SCHEDULE,
    progress: bool = False,
    check: Callable[[Any], Iterable[str]] | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    on_started: Callable[[], None] | None = None,
    sample: int = SAMPLE,
    on_shard: Callable[[Partial], None] | None = None,
    spill: WindowStore | None = None,
    replies: bool = True,
) -> Partial:
    """One pass over all shards, where ``schedule`` says (:mod:`distprompt.engine`): in this
    process, in worker processes, or as Ray tasks.

    The work is a list of :class:`~distprompt.read.units.Unit`: whole shards, or (in worker
    processes or on Ray: :meth:`~distprompt.engine.Schedule.split_bytes`) plain shards split
    into byte ranges at line starts, so one large shard keeps every worker busy and what a
    worker sends back at a time stays small. Each unit counts its lines from 1; merging in unit
    order adds the lines of the units before, so provenance and ``shard:line`` are exact.

    The first error in shard order is raised (or, skipping, every bad row is counted); the
    merged result is the same for any schedule and order of completion (its dicts and counters
    are put in key order at the end). On an error or an interruption the worker processes (or
    Ray tasks) are stopped at once. A unit whose Ray task keeps failing raises
    :class:`InputError` naming it, or, when skipping, is left out and recorded in ``failed``.

    Args:
        schedule: Where the units run (workers, engine, Ray address, worker processes).
        on_started: Called once the work is handed out (after the worker processes started).
        on_shard: Called (locally, not on Ray) with the merged partial so far each time every
            unit of a shard is merged, in this thread; the partial is the one being merged
            into, so what the call keeps of it must be copied. In worker processes shards are
            merged as they finish, smallest first (:func:`~distprompt.engine.run_order`).
        spill: Keep the merged pools' feature windows in this store (a temporary file,
            :mod:`distprompt.read.spill`) rather than in memory, and the pools as columns once
            the pass is over (:meth:`BottomK.compact`); the caller closes it once the pools
            are selected.
        sample, replies, and the others: As :func:`scan_unit`'s.
    """
    kwargs: dict[str, Any] = {
        "max_candidates": max_candidates,
        "seed": seed,
        "on_error": on_error,
        "vocab_size": vocab_size,
        "tokenizer_name": tokenizer_name,
        "check": check,
        "max_line_bytes": max_line_bytes,
        "sample": sample,
        "replies": replies,
    }
    work = units(shards, unit_bytes=schedule.split_bytes(sum(s.size for s in shards)))
    total = Partial(k=max_candidates, sample=sample, spill=spill)
    total.shards = {s.name: s for s in shards}
    bar = _Bar(shards, progress)

    def here(i: int) -> UnitOutcome:  # a unit in this process: its progress as it is read
        try:
            return scan_unit(work[i], on_row=bar.on_row(i, work[i]), **kwargs)
        except (DataError, TokenizerError) as exc:
            return exc

    results = run(
        _scan_star,
        [(u, kwargs) for u in (_absolute(work) if schedule.remote else work)],
        [u.task for u in work],
        schedule,
        here=here,
        on_started=on_started,
        on_done=lambda i: bar.done(i, work[i].size),
    )
    try:
        with contextlib.closing(results):
            merge_units(
                results,
                work,
                total,
                ordered=schedule.ordered(len(work)),
                skip=on_error == "skip",
                on_shard=None if schedule.remote else on_shard,
            )
    except DataError as exc:
        wrong = _named_tokenizer(exc, total, vocab_size, tokenizer_name, max_line_bytes)
        if wrong is None:
            raise
        raise wrong from None
    finally:
        bar.bar.close()
    normalize(total, {name: i for i, name in enumerate(total.shards)})
    if spill is not None:
        _as_columns(total)
    return total


def _as_columns(total: Partial) -> None:
    """The pools as columns until their selection (~600 -> ~80 bytes a candidate: on the
    benchmark's 4x corpus, 134k of them, ~70 MB of objects given back)."""
    for pool in total.pools.values():
        pool.compact()
    trim_heap()


class _Bar:
    """The pass's progress in bytes: a unit's as it finishes, and (with ``progress``) a plain
    shard's every 4 MiB as it is read in this process."""

    def __init__(self, shards: Sequence[Shard], progress: bool) -> None:
        from tqdm import tqdm  # plain text bar: the CLI is its only user (tqdm.auto warns)

        self.progress = progress
        self.bar = tqdm(
            total=sum(s.size for s in shards),
            unit="B",
            unit_scale=True,
            desc="reading",
            disable=not progress,
            leave=False,
        )
        self.ticked: dict[int, int] = {}  # per unit read here, its bytes the bar shows

    def on_row(self, i: int, unit: Unit) -> Callable[[int], None] | None:
        """``scan_unit``'s ``on_row`` for unit ``i``, read in this process."""
        if not self.progress or not unit.shard.name.endswith(".jsonl"):
            return None

        def tick(offset: int) -> None:
            shown = self.ticked.get(i, 0)
            if offset - unit.start - shown >= 1 << 22:
                self.bar.update(offset - unit.start - shown)
                self.ticked[i] = offset - unit.start

        return tick

    def done(self, i: int, size: int) -> None:
        """Unit ``i``, of ``size`` bytes, is read."""
        self.bar.update(size - self.ticked.pop(i, 0))


def _absolute(work: Sequence[Unit]) -> list[Unit]:
    """The units with absolute paths: Ray workers do not run in this directory (on a cluster,
    not even on this machine)."""
    return [
        u
        if u.shard.url is not None
        else replace(u, shard=replace(u.shard, path=u.shard.path.absolute()))
        for u in work
    ]


def _named_tokenizer(
    exc: DataError,
    total: Partial,
    vocab_size: int | None,
    tokenizer_name: str,
    max_line_bytes: int,
) -> DataError | None:
    """The error naming the tokenizer when the pass stopped at ``exc``, a row out of its
    vocabulary, among the shard's first rows that all are (:func:`_wrong_tokenizer`)."""
    if exc.reason != "id_out_of_vocab" or vocab_size is None or exc.shard not in total.shards:
        return None
    return _wrong_tokenizer(
        exc,
        total.shards[exc.shard],
        vocab_size=vocab_size,
        tokenizer_name=tokenizer_name,
        max_line_bytes=max_line_bytes,
    )
