"""When an export's selection runs, through the engine's pools (:mod:`distprompt.engine.pools`,
:mod:`distprompt.engine.threads`): the early selection that starts while the pass still reads,
every source's selection submitted once the pass is over (the largest pools first, large pools
not at once in threads), and the order its results are read back and decoded in. The stage work
itself comes in as plain functions (:func:`~distprompt.pipeline.sources.select_source`,
:func:`~distprompt.pipeline.items.make_items`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from distprompt._heap import trim_heap
from distprompt.choose.stratify import Quota
from distprompt.choose.vectorize import FEATURE_BUDGET
from distprompt.config import Config
from distprompt.engine import Schedule, SidePool, pools
from distprompt.engine.threads import Fitting, one_openmp_thread, one_thread
from distprompt.errors import ConfigError
from distprompt.pipeline.items import (
    Pick,
    learn_profile,
    make_batch,
    make_items,
    picks_of,
    read_back,
)
from distprompt.pipeline.sources import (
    Chosen,
    early_quotas,
    heavy_candidates,
    quotas_of,
    select_source,
)
from distprompt.read.scan import BottomK, Partial
from distprompt.records import Candidate, Shard, SourceStats, SuiteItem
from distprompt.recover.decode import TokenizerInfo
from distprompt.write.metrics import SourceEvidence

if TYPE_CHECKING:
    from concurrent.futures import Executor, Future

logger = logging.getLogger("distprompt.pipeline")


#: Corpora at least this large are read in a worker process while this one warms imports.
OVERLAP_BYTES = 64 << 20


#: A compressed shard counts as this many times its size on disk in :func:`is_large`: rows of
#: token ids compress much more than this (the benchmark corpus: 11x with gzip, 38x with zstd,
#: whose 40 MB on disk otherwise took the small-corpus path for 1.5 GB of rows; 27x as Parquet
#: with zstd). Parquet files count as compressed too.
COMPRESSED_FACTOR = 4


def is_large(shards: Sequence[Shard]) -> bool:
    """Whether the work is worth other processes (the pass's, selection's, the plots')."""
    held = (
        s.size * (COMPRESSED_FACTOR if s.name.endswith((".gz", ".zst", ".parquet")) else 1)
        for s in shards
    )
    return sum(held) >= OVERLAP_BYTES


#: What selection imports (seconds): warmed in a thread while the pass still runs
#: (:func:`~distprompt.engine.background.start_warm_imports`), and imported before selection
#: limits OpenMP to one thread (:func:`~distprompt.engine.threads.one_openmp_thread`). Not
#: matplotlib: on a corpus this large the plots are drawn in a process of their own (importing
#: it here cost 0.9 s of CPU beside the pass and ~30 MB that forked workers share, for nothing).
SELECTION_IMPORTS = (
    "scipy.sparse",
    "sklearn.cluster",
    "sklearn.decomposition",
    "sklearn.feature_extraction.text",
)


#: The pools being selected from, for worker processes forked from this one (see select_job).
_SELECTING: dict[str, BottomK] = {}


def select_job(
    source: str,
    quota: Quota,
    config: Config,
    stats: SourceStats,
    cands: list[Candidate] | BottomK | None = None,
    heavy: Sequence[Candidate] = (),
    shards: Mapping[str, Shard] | None = None,
) -> tuple[list[Chosen], SourceEvidence | None]:
    """:func:`select_source` in a worker process (on one BLAS thread, as here) or the selection
    thread (whose pool set that for the process: the limits are not set from two threads); a
    forked worker finds the pool in :data:`_SELECTING` (copying it costs a second and tens of
    MB). A pool's candidates are made here, when its selection starts (a pool compacted after
    the pass holds columns: :meth:`~distprompt.read.scan.BottomK.compact`). With ``shards``, the
    picks are read back from them here too (:func:`~distprompt.pipeline.items.read_back`).

    Raises:
        InputError: A shard of a pick cannot be read, or changed since the pass.
    """
    in_process = threading.current_thread() is threading.main_thread()
    with (
        one_thread() if in_process else contextlib.nullcontext(),
        one_openmp_thread(SELECTION_IMPORTS),
    ):
        try:
            got = _SELECTING[source] if cands is None else cands
            chosen, evidence = select_source(
                got.candidates() if isinstance(got, BottomK) else got,
                quota,
                config,
                stats,
                heavy,
                shards,
            )
            if shards:
                # the picks read back here, beside the main thread (which decodes), not after it
                chosen = read_back(chosen, list(shards.values()), config)
            return chosen, evidence
        finally:
            # What its matrices took, given back before the next source (during the pass,
            # beside the pass's worker process: measured on the benchmark corpus, the peak of
            # the process tree's PSS then).
            trim_heap()


@dataclasses.dataclass(frozen=True, slots=True)
class _EarlyJob:
    future: Future[Any]
    stats: SourceStats  # the source's, when it was submitted (a copy)
    quota: Quota
    decoded: dict[str, Any]  # "items": the picks and items, once decoded in the thread


class EarlySelection:
    """Sources selected, read back and decoded during a one-worker pass, in the selection
    thread (the other core is idle while the pass's worker process reads the largest shards,
    which it reads last).

    At the end of each shard (:func:`~distprompt.read.scan.scan`'s ``on_shard``), each source
    the shard added no row to is submitted, with what the pass knows of it so far: its pool,
    its figures and the quota they give (in the users' layout a source's rows are in a folder
    of their own, so it is likely all read). After the pass, :meth:`take` keeps the results
    whose source's figures and quota are the final ones: equal figures mean no row of the
    source came later, so its pool is the final one too, and the selection is the same as it
    would be after the pass. The others are selected again then (counted in :attr:`redone`).
    Decoding needs the tokenizer, which the main thread uses once the pass is over: only the
    sources selected before that are decoded here (:meth:`close`).
    """

    def __init__(self, config: Config, stack: contextlib.ExitStack) -> None:
        self._config = config
        self._stack = stack
        self.pool: Executor | None = None
        self._rows: dict[str, int] = {}
        self._jobs: dict[str, _EarlyJob] = {}
        self.redone = 0
        self.queued = 0
        #: Set by the pass: the shards, and how the thread gets the tokenizer (it waits for
        #: it; None: not loaded) to decode each source it selected while the pass runs.
        self.shards: Sequence[Shard] = ()
        self.tokenizer: Callable[[], tuple[Any, TokenizerInfo] | None] | None = None
        self._lock = threading.Lock()
        self._closed = False
        # Two selection threads, one of them at work while the pass runs (the pass's worker
        # process has the other core; with two workers a third CPU consumer slowed the export),
        # both once it is over (its worker's core is free then): :meth:`close` opens the gate.
        self._gate = threading.Semaphore(1)
        self._gate_open = False
        #: The template profile learned in the thread, with its tokenizer and the warnings
        #: its learning gave (said by the caller where it says them without this).
        self.profile: tuple[Any, Any, list[str]] | None = None
        self._jobs_kept: dict[str, _EarlyJob] = {}

    def on_shard(self, part: Partial) -> None:
        """Submit the sources the shard just merged into ``part`` left unchanged."""
        import copy

        rows = {s: st.rows for s, st in part.stats.items()}
        ready = [
            s
            for s, n in rows.items()
            if self._rows.get(s) == n and (s not in self._jobs or self._jobs[s].stats.rows != n)
        ]
        self._rows = rows
        if not ready:
            return
        try:
            quotas = quotas_of(part, self._config)
        except ConfigError:
            return  # raised after the pass, as without
        if self.pool is None:
            # the schedule's side pool (one worker: threads, one at work during the pass)
            side = Schedule.of(self._config).side_pool
            self.pool = self._stack.enter_context(pools.open_pool(side))
        pool = self.pool
        assert pool is not None
        for s in sorted(ready, key=lambda s: (-len(part.pools[s]), s)):
            if s in self._jobs:
                self._jobs[s].future.cancel()  # more rows since: its result would not be used
            stats = copy.deepcopy(part.stats[s])
            decoded: dict[str, Any] = {}
            fut = pool.submit(
                self._job,
                s,
                quotas[s],
                stats,
                part.pools[s].candidates(),
                decoded,
                heavy_candidates(part, s),
                part.shards,
            )
            self._jobs[s] = _EarlyJob(fut, stats, quotas[s], decoded)

    def _job(
        self,
        source: str,
        quota: Quota,
        stats: SourceStats,
        cands: list[Candidate],
        decoded: dict[str, Any],
        heavy: list[Candidate],
        shards: Mapping[str, Shard],
    ) -> tuple[list[Chosen], SourceEvidence | None]:
        """The source's selection, then (while the pass runs and the tokenizer is loaded) its
        items: read back and decoded as :func:`select_and_decode` would (one job at a time
        while the pass runs: the gate)."""
        with self._gate:
            result = select_job(source, quota, self._config, stats, cands, heavy, shards)
            got = self.tokenizer() if self.tokenizer is not None and not self._closed else None
            if got is None:
                return result
            with self._lock:  # the tokenizer is used by one thread at a time
                if self._closed:
                    return result
                tok, tinfo = got
                if self.profile is None or self.profile[0] is not tok:
                    said: list[str] = []
                    learned = (
                        learn_profile(tok, tinfo, said.append)
                        if self._config.recover_turns
                        else None
                    )
                    self.profile = (tok, learned, said)
                picks = picks_of(result[0], self.shards, self._config)
                decoded["items"] = (picks, make_batch(picks, (tok, self.profile[1], self._config)))
            return result

    def close(self) -> None:
        """No more decoding in the thread (waits for the one under way): the pass is over, and
        this thread uses the tokenizer from now on."""
        with self._lock:
            self._closed = True
        self._open_gate()

    def _open_gate(self) -> None:
        if not self._gate_open:
            self._gate_open = True
            self._gate.release()

    def decoded(self, kept: dict[Future[Any], str]) -> Callable[[str], Any]:
        """For each source of ``kept``, once its future is done: its picks and items if the
        thread decoded them, else None."""
        boxes = {s: self._jobs_kept[s].decoded for s in kept.values() if s in self._jobs_kept}
        return lambda s: boxes[s].get("items") if s in boxes else None

    def reset(self, *, wait: bool = True) -> None:
        """Forget every submission; with ``wait``, wait for the one under way (before a
        fork)."""
        for job in self._jobs.values():
            job.future.cancel()
        self._open_gate()  # no job left waiting at it (one under way runs to its end)
        for job in self._jobs.values() if wait else ():
            if not job.future.cancelled():
                with contextlib.suppress(Exception):
                    job.future.result()
        self._jobs.clear()
        self._rows.clear()
        self._closed = False
        self._gate, self._gate_open = threading.Semaphore(1), False

    def take(self, part: Partial, quotas: dict[str, Quota]) -> dict[Future[Any], str]:
        """The submissions still right for the finished pass ``part``; the others are dropped
        (:attr:`redone` counts them)."""
        kept: dict[Future[Any], str] = {}
        self._jobs_kept = {}
        for s, job in sorted(self._jobs.items()):
            if s in quotas and job.quota == quotas[s] and job.stats == part.stats.get(s):
                if job.future.cancel():
                    self.queued += 1  # not started: submitted again with the rest, largest first
                    continue
                kept[job.future] = s
                self._jobs_kept[s] = job
            else:
                job.future.cancel()  # one under way ends first (a thread cannot be stopped)
                self.redone += 1
        self._jobs.clear()
        return kept


#: Feature tokens (:data:`~distprompt.choose.vectorize.FEATURE_BUDGET` bounds a pool's) the pools
#: selected at once in threads may hold between them: one pool at its bound and a smaller one, not
#: two large ones (measured on the benchmark corpus: the 18k-candidate pool's selection peaks at
#: 126 MB, the SWE pool's at 84 MB, the eight others' at 27-44 MB).
_SELECT_TOKENS = FEATURE_BUDGET * 3 // 2


def submit_selection(
    part: Partial,
    quotas: dict[str, Quota],
    config: Config,
    pool: Executor,
    side: SidePool,
    done: Sequence[str] = (),
) -> dict[Future[Any], str]:
    """Every source's selection but those ``done`` (submitted during the pass), submitted to
    ``pool``, the one ``side`` names (the schedule's
    :attr:`~distprompt.engine.Schedule.side_pool`), the largest pools first.

    Forked workers find the pools in :data:`_SELECTING` (the workers of a fork pool are all
    forked at the first submit); :func:`select_and_decode` empties it once they are done.
    Threads are handed them, and start a source once it fits beside those under way
    (:class:`~distprompt.engine.threads.Fitting`, :data:`_SELECT_TOKENS`).
    """
    left = [s for s in part.stats if s not in done]
    largest_first = sorted(left, key=lambda s: (-len(part.pools[s]), s))
    if side.kind == "threads":  # the pools' matrices in this process
        fitting = Fitting(pool, _SELECT_TOKENS)
        out = {}
        for s in largest_first:
            weight = min(part.pools[s].feature_tokens(), FEATURE_BUDGET)
            heavy = heavy_candidates(part, s)
            args = (s, quotas[s], config, part.stats[s], part.pools[s], heavy, part.shards)
            out[fitting.submit(weight, select_job, *args)] = s
        return out
    forked = side.shares_memory
    if forked:
        _SELECTING.update({s: part.pools[s] for s in largest_first})
    return {
        pool.submit(
            select_job,
            s,
            quotas[s],
            config,
            part.stats[s],
            None if forked else part.pools[s].candidates(),
            heavy_candidates(part, s),
            part.shards,
        ): s
        for s in largest_first
    }


@dataclass(frozen=True, slots=True)
class Selecting:
    """What selecting the sources, reading their picks back and decoding them needs: the
    pass's result, the quotas, the options, the shards, the tokenizer with its learned template
    (``profile``) and where warnings go."""

    part: Partial
    quotas: dict[str, Quota]
    config: Config
    shards: Sequence[Shard]
    tok: Any
    profile: Any
    warn: Callable[[str], None]


class Selected(NamedTuple):
    """Items selected per source, the items (by source, then cluster), the report's
    evidence per source."""

    counts: dict[str, int]
    items: list[SuiteItem]
    evidence: dict[str, SourceEvidence | None]


def select_and_decode(
    job: Selecting,
    *,
    submitted: dict[Future[Any], str] | None,
    on_selected: Callable[[dict[str, int], dict[str, SourceEvidence | None]], None],
    decoded: Callable[[str], tuple[list[Pick], list[SuiteItem]] | None] | None = None,
) -> Selected:
    """Select each source's representatives, read them back and decode them.

    With ``submitted`` (:func:`submit_selection`), the sources are selected in worker
    processes or a thread, and each is read back and decoded here as soon as it is done;
    without, one after another here. The selection of a source does not depend on where it
    runs, and the results are put in source order: the same items, counts and evidence either
    way. ``on_selected`` is called with the counts and the evidence once every source is
    selected, before the last items are decoded (all of them, in this thread). ``decoded``
    gives a source's picks and items when they were made already (the same ones).

    """
    part, quotas, config, shards = job.part, job.quotas, job.config, job.shards
    tok, profile = job.tok, job.profile
    sources = sorted(part.stats)
    picks: dict[str, list[Pick]] = {}
    evidence: dict[str, SourceEvidence | None] = {}
    items: dict[str, list[SuiteItem]] = {}
    # With Ray, all picks are decoded at the end as tasks spread over the cluster.
    decode_here = config.engine != "ray"

    def take(source: str, result: tuple[list[Chosen], Any]) -> None:
        ready = decoded(source) if decoded is not None else None
        if ready is not None and decode_here:  # decoded during the pass (EarlySelection)
            picks[source], items[source] = ready
            return
        picks[source] = picks_of(result[0], shards, config)
        if decode_here:
            items[source] = make_batch(picks[source], (tok, profile, config))

    def all_selected(results: dict[str, Any]) -> None:
        part.release_pools()  # what is left needs only the chosen candidates
        evidence.update({s: results[s][1] for s in sources})
        on_selected({s: len(results[s][0]) for s in sources}, evidence)

    results: dict[str, tuple[list[Chosen], Any]] = {}
    # BLAS on one thread where this thread selects; a pool's thread or processes set it there.
    with one_thread() if submitted is None else contextlib.nullcontext():
        if submitted is None:
            with one_openmp_thread(SELECTION_IMPORTS):
                for s in sources:
                    results[s] = select_source(
                        part.pools[s].candidates(),
                        quotas[s],
                        config,
                        part.stats[s],
                        heavy_candidates(part, s),
                        part.shards,
                    )
            all_selected(results)
            for s in sources:
                take(s, results[s])
        else:
            from concurrent.futures import FIRST_COMPLETED, wait

            try:
                running, done = set(submitted), list[str]()
                while running or done:
                    # What has finished is collected before each source is decoded, so that
                    # the plots start as soon as the last selection ends, not a decoding later.
                    ready, running = wait(
                        running, timeout=0 if done else None, return_when=FIRST_COMPLETED
                    )
                    for fut in sorted(ready, key=lambda f: submitted[f]):
                        results[submitted[fut]] = fut.result()
                        done.append(submitted[fut])
                    if ready and len(results) == len(sources):
                        all_selected(results)
                    if done:
                        s = done.pop(0)
                        take(s, results[s])
            finally:
                _SELECTING.clear()
        if decode_here:
            every = [it for s in sources for it in items[s]]
        else:
            every = make_items(
                [p for s in sources for p in picks[s]],
                tokenizer=tok,
                profile=profile,
                config=config,
                warn=job.warn,
            )
    counts = {s: len(picks[s]) for s in sources}
    return Selected(counts, every, {s: evidence[s] for s in sources})


@dataclass(frozen=True, slots=True)
class Started:
    """Selection as the pass leaves it: whether the corpus is large (selection beside the main
    thread), the quotas it was started with (None: it runs after the checks, in this thread),
    the sources the early selection kept, and every source submitted."""

    big: bool
    quotas: dict[str, Quota] | None
    kept: dict[Future[Any], str]
    submitted: dict[Future[Any], str] | None


def start_selection(
    part: Partial,
    config: Config,
    stack: contextlib.ExitStack,
    early_sel: EarlySelection | None,
    shards: Sequence[Shard],
) -> Started:
    """Start selecting once the pass is done, while the main thread runs the tokenizer checks:
    on a large corpus, in the schedule's side pool (two threads with one or two workers, forked
    worker processes with more: :attr:`~distprompt.engine.Schedule.side_pool`), keeping what the
    early selection did and is still right."""
    big = is_large(shards)
    early = early_quotas(part, config) if big else None
    parallel = early is not None
    side = Schedule.of(config).side_pool if parallel else pools.HERE
    pool: Executor | None = None
    kept: dict[Future[Any], str] = {}
    if early_sel is not None:
        if parallel and early_sel.pool is not None:
            kept = early_sel.take(part, early or {})
            pool = early_sel.pool  # what is left, in the same threads (the same side pool)
        else:
            early_sel.reset(wait=parallel)
    if pool is None:
        pool = stack.enter_context(pools.open_pool(side))
    submitted = None
    if early is not None and pool is not None:
        submitted = kept | submit_selection(part, early, config, pool, side, list(kept.values()))
        if early_sel is not None:
            logger.info(
                "submitted during the pass and still right: %d of %d sources (%d of them "
                "not started by its end, run with the rest); %d submitted then, not used",
                len(kept) + early_sel.queued,
                len(part.stats),
                early_sel.queued,
                early_sel.redone,
            )
    return Started(big, early, kept, submitted)
