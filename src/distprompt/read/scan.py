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
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from distprompt._heap import trim_heap
from distprompt.config import OnError
from distprompt.errors import CorruptStreamError, DataError, InputError, TokenizerError
from distprompt.read.fastrow import RowView, read_row
from distprompt.read.pools import BottomK, TopReplies, compact_ids, prompt_key
from distprompt.read.readback import load_candidates, sampled_prompts
from distprompt.read.shards import iter_rows, open_shard, split_shard
from distprompt.read.spill import WindowStore
from distprompt.read.table import is_table, split_table
from distprompt.read.tally import Tally, rebase_where
from distprompt.read.validate import DEFAULT_MAX_LINE_BYTES
from distprompt.records import (
    REPLY_PROMPT_TOKENS,
    Candidate,
    Row,
    Shard,
    SourceStats,
    feature_window,
    reply_features,
)

__all__ = [
    "BottomK",
    "Partial",
    "TopReplies",
    "load_candidates",
    "measure_reference",
    "prompt_key",
    "sampled_prompts",
    "scan",
]

logger = logging.getLogger("distprompt.read.scan")

#: Prompts per source the pass holds with their ids by default: the round-trip sample of the
#: tokenizer checks (:data:`distprompt.recover.checks.ROUND_TRIP_SAMPLE`).
SAMPLE = 64
#: Candidates whose prompt key is among a source's this many smallest (a uniform sample of its
#: unique prompts) get their first reply's content measured in the pass (:func:`reply_features`):
#: the reference that selection calibrates weights to and herds among. Measuring every candidate
#: would cost ~45 us a short row, more than half of what reading it costs. Rows enter a unit's
#: running bottom-m about ``m (1 + ln(rows / m))`` times; their replies wait until the unit
#: ends (:data:`PENDING_TOKENS`), so only those still in it are measured (on the benchmark
#: corpus: 1024 measure 12.7k replies, as many as 512 did measured as they came). The
#: reference's own sampling error bounds how close calibrated estimates come on large
#: sources: 1024 against 512 at 50 per source, 86 % of cells against 78 % on the JUDGE
#: corpora; 256 was much worse (benchmarks/RESULTS.md, issue 26).
REPLY_SAMPLE = 1024
#: Rows with the longest first replies kept per source, whatever their key (:class:`TopReplies`).
HEAVY = 128

#: A shard's first rows all out of the vocabulary, this many (or every row of a shorter shard),
#: name the tokenizer rather than a row when the run stops at a bad row (:func:`_wrong_tokenizer`).
WRONG_TOKENIZER_ROWS = 32


@dataclass(slots=True)
class Partial:
    """What a pass over some shards knows; merge partials with :meth:`merge`."""

    k: int
    stats: dict[str, SourceStats] = field(default_factory=dict)
    pools: dict[str, BottomK] = field(default_factory=dict)
    tally: Tally = field(default_factory=Tally)
    shard_rows: dict[str, int] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # shard -> why its task kept failing
    sample: int = 0  # prompts held per source for the round-trip check (BottomK's ``sample``)
    # Where the pools' windows go as partials are merged into this one (scan's ``spill``).
    spill: WindowStore | None = None
    heavy: dict[str, TopReplies] = field(default_factory=dict)
    # per source, the REPLY_SAMPLE smallest keys seen by this unit's reader (negated: a max
    # heap) and the same as a set; not merged (cleared before a unit's partial is returned)
    ref: dict[str, tuple[list[int], set[int]]] = field(default_factory=dict)
    ref_size: int = REPLY_SAMPLE  # the bottom-m kept by ``ref`` (smaller for a byte range)
    # per source, the rows of ``ref`` whose reply is measured when the unit ends (prompt tail,
    # reply), and their tokens in all; not merged (settled before a unit's partial is
    # returned): most rows that enter a unit's running bottom-m leave it again
    pending: dict[str, dict[int, tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)
    pending_tokens: int = 0
    # whether selection will need the longest replies and the reply sample (not ``inspect``)
    replies: bool = True
    # the shards of the pass, by name (the whole pass's partial only): selection reads back
    # the reference rows a byte range did not measure (:func:`measure_reference`)
    shards: dict[str, Shard] = field(default_factory=dict)
    # The rows the per-row check (scan's ``check``) failed, read into a partial of their own
    # until the tokenizer verdict says what they are: a wrong tokenizer's evidence, given back
    # (:meth:`readmit`), or bad rows (:meth:`set_aside`).
    held: Partial | None = None
    settled: Literal["", "readmitted", "set_aside"] = ""  # once settled; ``held`` stays

    def merge(self, other: Partial) -> Partial:
        for src, st in other.stats.items():
            self.stats.setdefault(src, SourceStats()).merge(st)
        for src, pool in other.pools.items():
            self.pools.setdefault(src, BottomK(self.k)).merge(pool, spill=self.spill)
        for src, top in other.heavy.items():
            self.heavy.setdefault(src, TopReplies(top.k)).merge(top)
        self.tally.merge(other.tally)
        for name, n in other.shard_rows.items():
            self.shard_rows[name] = self.shard_rows.get(name, 0) + n
        self.failed.update(other.failed)
        if other.held is not None:
            self.hold().merge(other.held)
        return self

    def hold(self) -> Partial:
        """The partial of the rows set aside by the per-row check (made on first use)."""
        if self.held is None:
            self.held = Partial(k=self.k, tally=Tally(on_error="skip"), sample=self.sample)
        return self.held

    def readmit(self) -> None:
        """The held rows are the corpus's (the tokenizer does not match it): merged in with
        their flags, as if they had never been held (``held`` stays, as a record)."""
        held = self.held
        if held is None or self.settled:
            return
        self.settled = "readmitted"
        counts = held.tally
        # their flags only: they are rows of the corpus, not skipped ones
        held.tally = Tally(anomalies=counts.anomalies, first_anomaly=counts.first_anomaly)
        try:
            self.merge(held)
        finally:
            held.tally = counts

    def set_aside(self) -> None:
        """The held rows are bad rows (the tokenizer matches the corpus): counted as skipped
        under their first failed check (``held`` stays, as a record)."""
        held = self.held
        if held is None or self.settled:
            return
        self.settled = "set_aside"
        t = held.tally
        self.tally.merge(Tally(skipped=t.skipped.copy(), first_skip=dict(t.first_skip)))

    def rebase(self, shard: str, base: int) -> None:
        """Add ``base`` to every line number of ``shard`` held here (a unit's partial, whose
        lines count from its start)."""
        for pool in self.pools.values():
            pool.rebase(shard, base)
        for top in self.heavy.values():
            top.rebase(shard, base)
        self.tally.rebase(shard, base)
        if self.held is not None:
            self.held.rebase(shard, base)


@dataclass(frozen=True, slots=True)
class Unit:
    """One piece of work of the pass: the lines of ``shard`` that start in ``[start, end)``.

    A whole shard is ``Unit(shard)``; :func:`units` splits large plain shards into byte ranges
    at line starts. Picklable: :func:`scan_unit` runs it in any process.
    """

    shard: Shard
    start: int = 0
    end: int | None = None
    #: The shard's rows when it is a Parquet file split into row ranges (``start``/``end``
    #: are then row indices, see :func:`~distprompt.read.table.split_table`).
    rows: int | None = None

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.end is None


@dataclass(slots=True)
class UnitResult:
    """What :func:`scan_unit` returns: the partial, with line numbers counted from 1 at the
    unit's start, and how many lines the unit holds (to rebase the next unit's lines)."""

    partial: Partial
    lines: int


def units(shards: Sequence[Shard], *, unit_bytes: int | None) -> list[Unit]:
    """The work units of a pass: whole shards, or (with ``unit_bytes``) plain shards split into
    byte ranges of about that size at line starts, Parquet shards into row ranges of whole row
    groups of about that size uncompressed."""
    out: list[Unit] = []
    for shard in shards:
        if unit_bytes is None:
            out.append(Unit(shard))
            continue
        if is_table(shard.name):
            ranges, rows = split_table(shard, unit_bytes)
            out.extend(Unit(shard, a, b, rows if b is not None else None) for a, b in ranges)
            continue
        for start, end in split_shard(shard, unit_bytes):
            out.append(Unit(shard, start, end))
    return out


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
    # a row the longest-reply tracker keeps carries its own features (it may be another row
    # of the same prompt than the pool's); the others are measured when the unit ends, if
    # they are still among its smallest keys
    if (
        measure
        and reply_ids is not None
        and (heavy or not _defer(part, source, key, prompt, reply_ids))
    ):
        reply = reply_features(prompt, reply_ids)
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
    about its share of the shard's smallest keys: it keeps twice that share of
    :data:`REPLY_SAMPLE` and a margin, and the few keys of the merged bottom-m it missed are
    read back and measured at selection (:func:`measure_reference`), so the result does not
    depend on the split. (One worker read the benchmark's 1.2 GB shard in 38 ranges, each
    keeping a full bottom-512 then: every one of its 5,049 rows was measured.)"""
    size = unit.shard.size if unit.rows is None else unit.rows
    if unit.whole or size <= 0:
        return REPLY_SAMPLE
    end = size if unit.end is None else min(unit.end, size)
    share = max(0, end - unit.start) / size
    return min(REPLY_SAMPLE, int(2 * REPLY_SAMPLE * share) + 32)


def measure_reference(
    cands: Sequence[Candidate], keys: set[int], shards: Mapping[str, Shard], *, seed: int = 0
) -> list[Candidate]:
    """``cands`` with every one whose key is in ``keys`` (the reference sample: the pool's
    :data:`REPLY_SAMPLE` smallest) measured (:func:`~distprompt.records.reply_features`): those
    the pass did not measure (a byte range keeps a share of the sample) are read back from
    their shards, and only the features kept.

    Raises:
        InputError: A shard cannot be read, or changed since the pass.
    """
    missing = [i for i, c in enumerate(cands) if c.reply is None and c.key in keys]
    if not missing or not shards:
        return list(cands)
    got = load_candidates([cands[i] for i in missing], list(shards.values()), seed=seed)
    out = list(cands)
    for i, c in zip(missing, got, strict=True):
        assert c.prompt_ids is not None and c.response_ids is not None
        out[i] = replace(cands[i], reply=reply_features(c.prompt_ids, c.response_ids))
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
            p, r = waiting.pop(evicted)
            part.pending_tokens -= p.shape[0] + r.shape[0]
        return True
    return False


#: At most this many tokens of prompt tails and replies wait, per unit, to be measured when the
#: unit ends (``Partial.pending``: 16 MB as int32); beyond it rows are measured as they come.
PENDING_TOKENS = 4_000_000


def _defer(part: Partial, source: str, key: int, prompt: np.ndarray, reply: np.ndarray) -> bool:
    """Keep the row's prompt tail and reply to measure when the unit ends (True), or leave it
    to be measured now (False: no room). A prompt seen before in the unit waits once."""
    waiting = part.pending.setdefault(source, {})
    if key in waiting:
        return True
    tail = prompt[-REPLY_PROMPT_TOKENS:]
    size = tail.shape[0] + reply.shape[0]
    if part.pending_tokens + size > PENDING_TOKENS:
        return False
    waiting[key] = (np.array(tail, dtype=np.int32), np.array(reply, dtype=np.int32))
    part.pending_tokens += size
    return True


def _settle_pending(part: Partial) -> None:
    """Measure the replies still waiting (``Partial.pending``) into the pool's entries."""
    for source, waiting in part.pending.items():
        pool = part.pools.get(source)
        if pool is None:
            continue
        for key, (prompt, reply) in waiting.items():
            if pool.needs_reply(key):
                pool.set_reply(key, reply_features(prompt, reply))
    part.pending = {}
    part.pending_tokens = 0


def _flag(part: Partial, row: Row | RowView, reason: str) -> None:
    part.tally.anomaly(reason, f"{row.provenance.shard}:{row.provenance.line}")
    part.stats[row.source].flags[reason] += 1


_UnitOutcome = UnitResult | DataError | TokenizerError | CorruptStreamError


def _scan_star(args: tuple[Unit, dict[str, Any]]) -> _UnitOutcome:
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


def _rebase_error(exc: Exception, shard: str, base: int) -> Exception:
    """The error of a unit with its line counted from the start of the shard."""
    if not base:
        return exc
    if isinstance(exc, DataError):
        if exc.shard == shard and exc.line:
            return DataError(exc.shard, exc.line + base, exc.reason, exc.detail)
        return exc
    msg = str(exc)
    where, sep, rest = msg.partition(": ")
    if sep and where.rpartition(":")[0] == shard:
        return type(exc)(f"{rebase_where(where, shard, base)}: {rest}")
    return exc


#: With several workers, plain shards larger than this are split into byte ranges.
UNIT_BYTES = 32 << 20


def scan(
    shards: Sequence[Shard],
    *,
    max_candidates: int,
    seed: int = 0,
    on_error: OnError = "raise",
    vocab_size: int | None = None,
    tokenizer_name: str = "",
    workers: int = 1,
    progress: bool = False,
    check: Callable[[Any], Iterable[str]] | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    unit_bytes: int | None = None,
    processes: bool | None = None,
    on_started: Callable[[], None] | None = None,
    engine: str = "local",
    ray_address: str | None = None,
    sample: int = SAMPLE,
    on_shard: Callable[[Partial], None] | None = None,
    spill: WindowStore | None = None,
    replies: bool = True,
) -> Partial:
    """One pass over all shards, in parallel processes when ``workers > 1``, or as Ray tasks
    with ``engine="ray"`` (see :mod:`distprompt.read.engine`; ``workers`` is then unused).

    The work is a list of :class:`Unit`: whole shards, and with ``workers > 1`` plain shards
    split into byte ranges of ``unit_bytes`` (default :data:`UNIT_BYTES`) at line starts, so
    one large shard keeps every worker busy. Each unit counts its lines from 1; merging in unit
    order adds the lines of the units before, so provenance and ``shard:line`` are exact.

    The first error in shard order is raised (or, skipping, every bad row is counted); the
    merged result is the same for any worker count, unit size, engine and order of completion
    (its dicts and counters are put in key order at the end). On an error or an
    interruption the worker processes (or Ray tasks) are stopped at once rather than left to
    finish. A unit whose Ray task keeps failing raises :class:`InputError` naming it, or, when
    skipping, is left out and recorded in ``failed``.

    Args:
        unit_bytes: Split plain shards into ranges of about this size (None: the default in
            worker processes or on Ray, whole shards read in this process). In ranges, what a
            worker sends back at a time stays small (a large shard's pools arrive in pieces,
            their windows written to ``spill`` as they are merged).
        processes: Read in worker processes even with one worker (None: when ``workers > 1``);
            the caller's process is then free (the pipeline loads the tokenizer meanwhile).
        on_started: Called once the work is handed out (after the worker processes started).
        engine: ``local`` or ``ray``.
        ray_address: The Ray cluster (see :func:`distprompt.read.engine.connect_ray`).
        sample: Prompts held per source for the round-trip check (see :func:`scan_unit`).
        on_shard: Called (locally, not on Ray) with the merged partial so far each time every
            unit of a shard is merged, in this thread; the partial is the one being merged
            into, so what the call keeps of it must be copied. In worker processes the units
            run smallest shard first (a source whose shards are all read can be worked on
            while the largest are read; the smallest itself is read just before the
            largest), except that with several workers a unit of more than
            ``1 / (2 * workers)`` of the bytes (a large compressed shard: it cannot be split)
            starts first, lest it run alone at the end; shards are merged as they finish.
        spill: Keep the merged pools' feature windows in this store (a temporary file,
            :mod:`distprompt.read.spill`) rather than in memory, and the pools as columns once
            the pass is over (:meth:`BottomK.compact`); the caller closes it once the pools
            are selected.
        replies: As :func:`scan_unit`'s: False when nothing will be selected (``inspect``).
    """
    from tqdm import tqdm  # plain text bar: the CLI is its only user (tqdm.auto warns in notebooks)

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
    if unit_bytes is None and engine == "ray":
        from distprompt.read.engine import ray_unit_bytes

        unit_bytes = ray_unit_bytes(sum(s.size for s in shards), UNIT_BYTES, address=ray_address)
    elif unit_bytes is None and (workers > 1 or processes):
        unit_bytes = UNIT_BYTES
    work = units(shards, unit_bytes=unit_bytes)
    use_processes = (workers > 1 or bool(processes)) and (len(work) > 1 or bool(processes))
    total = Partial(k=max_candidates, sample=sample, spill=spill)
    total.shards = {s.name: s for s in shards}
    bar = tqdm(
        total=sum(s.size for s in shards),
        unit="B",
        unit_scale=True,
        desc="reading",
        disable=not progress,
        leave=False,
    )
    base: dict[str, int] = {}

    def merge(
        unit: Unit, res: UnitResult | DataError | TokenizerError | CorruptStreamError
    ) -> None:
        name = unit.shard.name
        at = base.get(name, 0)
        if isinstance(res, Exception):
            raise _rebase_error(res, name, at)
        if at:
            res.partial.rebase(name, at)
        base[name] = at + res.lines
        total.merge(res.partial)

    shard_at = {s.name: i for i, s in enumerate(shards)}
    last_unit = {u.shard.name: i for i, u in enumerate(work)}

    try:
        if engine == "ray":
            _scan_on_ray(
                work,
                kwargs,
                merge,
                total,
                bar=bar,
                skip=on_error == "skip",
                address=ray_address,
                on_started=on_started,
            )
        elif use_processes:
            _scan_in_processes(
                work,
                kwargs,
                total,
                workers=workers,
                shard_at=shard_at,
                bar=bar,
                on_started=on_started,
                on_shard=on_shard,
            )
        else:
            if on_started is not None:
                on_started()
            for i, unit in enumerate(work):
                done = [unit.start]
                plain = unit.shard.name.endswith(".jsonl")

                def tick(offset: int, done: list[int] = done, plain: bool = plain) -> None:
                    if plain and offset - done[0] >= 1 << 22:
                        bar.update(offset - done[0])
                        done[0] = offset

                try:
                    res: UnitResult | DataError | TokenizerError = scan_unit(
                        unit, on_row=tick if progress else None, **kwargs
                    )
                except (DataError, TokenizerError) as exc:
                    res = exc
                if unit.rows is not None:
                    bar.update(_unit_bytes(unit))
                else:
                    bar.update((unit.end if unit.end is not None else unit.shard.size) - done[0])
                merge(unit, res)
                if on_shard is not None and last_unit[unit.shard.name] == i:
                    on_shard(total)  # the shard's last unit
    except DataError as exc:
        if exc.reason != "id_out_of_vocab" or vocab_size is None or exc.shard not in total.shards:
            raise
        wrong = _wrong_tokenizer(
            exc,
            total.shards[exc.shard],
            vocab_size=vocab_size,
            tokenizer_name=tokenizer_name,
            max_line_bytes=max_line_bytes,
        )
        if wrong is None:
            raise
        raise wrong from None
    finally:
        bar.close()
    _normalize(total, shard_at)
    if spill is not None:
        # The pools as columns until their selection (~600 -> ~80 bytes a candidate: on the
        # benchmark's 4x corpus, 134k of them, ~70 MB of objects given back)
        for pool in total.pools.values():
            pool.compact()
        trim_heap()
    return total


def _run_order(work: Sequence[Unit], workers: int) -> list[int]:
    """The order units are handed to worker processes (see :func:`scan`'s ``on_shard``).

    The units of a shard stay together and in order, so that a shard is merged as soon as its
    last unit is done.
    """
    total = sum(_unit_bytes(u) for u in work) or 1
    first: dict[str, int] = {}
    for i, u in enumerate(work):
        first.setdefault(u.shard.name, i)

    def alone(u: Unit) -> bool:
        return workers > 1 and _unit_bytes(u) * 2 * workers > total

    # The other shards by size, but the smallest read just before the largest: a source is
    # worked on once a shard ends that added nothing to it, so the one read before the
    # largest waits for the largest, and that is best the one of least work.
    rest = sorted({u.shard.name: u.shard.size for u in work if not alone(u)}.items(),
                  key=lambda kv: (kv[1], first[kv[0]]))  # fmt: skip
    if len(rest) >= 3:
        rest = [*rest[1:-1], rest[0], rest[-1]]
    rank = {name: r for r, (name, _) in enumerate(rest)}

    def key(i: int) -> tuple[int, int, int]:
        u = work[i]
        if alone(u):
            return (0, -_unit_bytes(u), i)
        return (1, rank[u.shard.name], i)

    return sorted(range(len(work)), key=key)


def _scan_in_processes(
    work: Sequence[Unit],
    kwargs: dict[str, Any],
    total: Partial,
    *,
    workers: int,
    shard_at: dict[str, int],
    bar: Any,
    on_started: Callable[[], None] | None,
    on_shard: Callable[[Partial], None] | None,
) -> None:
    """The units of ``work`` in ``workers`` local processes, merged into ``total``.

    A shard's units are merged in their order (each one's lines are rebased on those before
    it), and a shard into ``total`` once all its units are done. The first error in shard
    order is raised once every shard before it is done without one.
    """
    from concurrent.futures import FIRST_COMPLETED, wait

    from distprompt.read.engine import process_pool

    of_shard: dict[str, list[int]] = {}
    for i, u in enumerate(work):
        of_shard.setdefault(u.shard.name, []).append(i)
    arrived: dict[int, _UnitOutcome] = {}
    parts: dict[str, Partial] = {}  # a shard's units merged so far
    lines: dict[str, int] = {}  # the lines of those units
    waiting = {name: list(ids) for name, ids in of_shard.items()}  # units not merged yet
    errors: dict[int, Exception] = {}  # by shard index: its first error, rebased
    unread = set(shard_at)  # shards not merged into total (nor failed)

    def advance(name: str) -> None:
        left = waiting[name]
        while left and left[0] in arrived:
            res = arrived.pop(left.pop(0))
            at = lines.get(name, 0)
            if shard_at[name] in errors:
                continue  # the rest of a shard after its first error
            if isinstance(res, Exception):
                errors[shard_at[name]] = _rebase_error(res, name, at)
                continue
            if at:
                res.partial.rebase(name, at)
            lines[name] = at + res.lines
            part = parts.get(name)
            if part is None:
                # a shard's units merged here before it is merged into ``total``: with a window
                # store, their windows are written as they are merged (the units of a large
                # shard arrive one by one until the end of the pass)
                part = parts[name] = Partial(k=total.k, sample=total.sample, spill=total.spill)
            part.merge(res.partial)
            if total.spill is not None:
                trim_heap()  # the windows written and the unit's partial, given back
        if left:
            return
        unread.discard(name)
        part = parts.pop(name, None)
        if part is not None and shard_at[name] not in errors:
            total.merge(part)
            if on_shard is not None:
                on_shard(total)

    def raise_first_error() -> None:
        if errors:
            first = min(errors)
            if all(shard_at[name] >= first for name in unread):
                raise errors[first]

    with process_pool(workers) as ex:
        futures = {ex.submit(_scan_star, (work[i], kwargs)): i for i in _run_order(work, workers)}
        if on_started is not None:
            on_started()
        pending = set(futures)
        while pending:
            ready, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(ready, key=futures.__getitem__):
                # dropped: a future holds its result, the unit's partial, for as long as it is
                # referenced (all of them until the end of the pass, before: measured on the
                # benchmark's 4x corpus, two workers: the pass's peak in this process 378 -> 203 MB)
                i = futures.pop(fut)
                arrived[i] = fut.result()
                del fut
                bar.update(_unit_bytes(work[i]))
                advance(work[i].shard.name)
                raise_first_error()


def _normalize(part: Partial, shard_at: dict[str, int]) -> None:
    """Put ``part``'s dicts and counters in key order (shards in their order), so that the
    result does not depend on the order in which the shards were merged."""

    def counter(c: Counter[Any]) -> Counter[Any]:
        return Counter(dict(sorted(c.items())))

    part.stats = {s: part.stats[s] for s in sorted(part.stats)}
    part.pools = {s: part.pools[s] for s in sorted(part.pools)}
    part.heavy = {s: part.heavy[s] for s in sorted(part.heavy)}
    for st in part.stats.values():
        st.prompt_lengths = counter(st.prompt_lengths)
        st.response_lengths = counter(st.response_lengths)
        st.seq_lengths = counter(st.seq_lengths)
        st.trained_turns = counter(st.trained_turns)
        st.first_reply_lengths = counter(st.first_reply_lengths)
        st.flags = counter(st.flags)
    t = part.tally
    t.skipped, t.anomalies = counter(t.skipped), counter(t.anomalies)
    t.first_skip = dict(sorted(t.first_skip.items()))
    t.first_anomaly = dict(sorted(t.first_anomaly.items()))
    far = len(shard_at)
    part.shard_rows = dict(
        sorted(part.shard_rows.items(), key=lambda kv: (shard_at.get(kv[0], far), kv[0]))
    )
    part.failed = dict(sorted(part.failed.items()))
    if part.held is not None:
        _normalize(part.held, shard_at)


def _unit_name(unit: Unit) -> str:
    if unit.whole:
        return unit.shard.name
    if unit.rows is not None:
        return f"{unit.shard.name} (rows {unit.start + 1}-{unit.end or unit.rows})"
    end = unit.end if unit.end is not None else unit.shard.size
    return f"{unit.shard.name} (bytes {unit.start}-{end})"


def _unit_bytes(unit: Unit) -> int:
    if unit.rows is not None:  # row ranges: their share of the file
        rows = (unit.end if unit.end is not None else unit.rows) - unit.start
        return unit.shard.size * rows // max(unit.rows, 1)
    return (unit.end if unit.end is not None else unit.shard.size) - unit.start


def _count_lines(unit: Unit) -> int:
    """The lines that start in a unit's byte range, counted without parsing them."""
    if unit.whole:
        return 0  # no later unit of the shard needs its line count
    if unit.rows is not None:
        return (unit.end if unit.end is not None else unit.rows) - unit.start
    n = 0
    last = b"\n"
    with open_shard(unit.shard.url or unit.shard.path) as fh:
        fh.seek(unit.start)
        left = _unit_bytes(unit)
        while left > 0:
            chunk = fh.read(min(left, 1 << 20))
            if not chunk:
                break
            n += chunk.count(b"\n")
            last = chunk[-1:]
            left -= len(chunk)
    return n + (last != b"\n")  # a last line without a newline


def _scan_on_ray(
    work: Sequence[Unit],
    kwargs: dict[str, Any],
    merge: Callable[[Unit, _UnitOutcome], None],
    total: Partial,
    *,
    bar: Any,
    skip: bool,
    address: str | None,
    on_started: Callable[[], None] | None,
) -> None:
    from distprompt.read.engine import UnitFailure, connect_ray, ray_map

    connect_ray(address)
    if on_started is not None:  # the tasks are submitted as the loop below starts
        on_started()

    # Workers do not run in this directory (on a cluster, not even on this machine).
    sent = [
        u
        if u.shard.url is not None
        else replace(u, shard=replace(u.shard, path=u.shard.path.absolute()))
        for u in work
    ]
    results = ray_map(
        _scan_star,
        [(u, kwargs) for u in sent],
        names=[_unit_name(u) for u in work],
        address=address,
        on_done=lambda i: bar.update(_unit_bytes(work[i])),
    )
    with contextlib.closing(results):
        for unit, res in zip(work, results, strict=True):
            if isinstance(res, UnitFailure):
                found = f"its Ray task failed {res.attempts} times ({res.reason})"
                if not skip:
                    raise InputError(
                        f"{res.name}: expected the shard's Ray task to finish, found {found}; "
                        "see the worker logs (ray logs), fix the cause, or run with "
                        "--on-error skip to leave the shard out"
                    )
                total.failed[res.name] = found
                # Its rows are left out; its lines still count for the units after it.
                merge(unit, UnitResult(Partial(k=total.k), _count_lines(unit)))
                continue
            merge(unit, res)
