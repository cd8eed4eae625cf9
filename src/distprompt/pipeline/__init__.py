"""The only package that wires the stages together, for both commands (this module tells the
story and schedules; :mod:`~distprompt.pipeline.sources` selects a source,
:mod:`~distprompt.pipeline.items` makes the items, :mod:`~distprompt.pipeline.manifest` the
manifest).

``inspect``: shards → pass + tokenizer checks → :class:`~distprompt.corpus.CorpusInfo`.
``export``: the same pass and checks → quotas → features → selection → items → report →
:class:`~distprompt.write.suite.Suite` (saved by :func:`export_suite`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from distprompt._heap import trim_heap
from distprompt.choose.stratify import Quota, allocate
from distprompt.choose.vectorize import FEATURE_BUDGET
from distprompt.config import Config, OnError, resolve
from distprompt.corpus import CorpusInfo, corpus_info
from distprompt.errors import ConfigError, InputError, TokenizerError, api_spelling
from distprompt.pipeline.items import Pick, item_id, make_batch, make_items, picks_of
from distprompt.pipeline.manifest import build_manifest, template_summary
from distprompt.pipeline.sources import Chosen, heavy_candidates, select_source
from distprompt.read.scan import (
    BottomK,
    Partial,
    scan,
)
from distprompt.read.shards import ShardSet, find_shards
from distprompt.read.spill import WindowStore
from distprompt.records import (
    Candidate,
    Shard,
    SourceStats,
    SuiteItem,
)
from distprompt.recover.ambiguity import settle_system_prompts
from distprompt.recover.checks import (
    ROUND_TRIP_SAMPLE,
    Checks,
    TokenizerFigures,
    prepare_checks,
    row_problem,
    run_checks,
    settle_rows,
    show_ids,
)
from distprompt.recover.decode import TokenizerInfo, load_tokenizer
from distprompt.recover.light import BackgroundLoad, light_checks
from distprompt.write.metrics import SourceEvidence
from distprompt.write.out_dir import check_out_dir
from distprompt.write.report import Report, build_report, with_items
from distprompt.write.suite import Suite

if TYPE_CHECKING:
    from concurrent.futures import Executor, Future, ProcessPoolExecutor

__all__ = ["build_suite", "export_suite", "inspect_corpus", "item_id"]

logger = logging.getLogger("distprompt.pipeline")
#: Not distprompt.pipeline: the CLI prints these (build_suite's warnings reach it by ``warn``).
plot_logger = logging.getLogger("distprompt.pipeline.plots")


@api_spelling
def build_suite(
    data: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    tokenizer: Any,
    config: Config | None = None,
    warn: Callable[[str], None] | None = None,
    **overrides: Any,
) -> Suite:
    """Build a representative, provenance-stamped prompt suite from tokenized shards.

    Args:
        data: A directory (searched recursively), a glob, a shard file, or a list of those.
        tokenizer: Local tokenizer folder, ``tokenizer.json``, hub id, or a loaded tokenizer.
        config: The options (a :class:`~distprompt.config.Config`; default: its defaults).
        warn: Called with each warning as it arises (the CLI prints them).
        **overrides: Options replacing those of ``config`` (any field of
            :class:`~distprompt.config.Config`: ``per_source``, ``total``, ``allocation``,
            ``method``, ``seed``, ``on_error``, ``lsa_dims``, ``progress`` …); a ``total``
            without ``per_source`` replaces the ``per_source`` default.

    Returns:
        The :class:`Suite`.

    Raises:
        ConfigError: Invalid options (before any shard is read).
        InputError: DATA has no readable shard.
        DataError: A bad row (an id outside the vocabulary included), when
            ``on_error="raise"``.
        TokenizerError: The tokenizer cannot be loaded, or fails a check (unless
            ``check_tokenizer=False``); the message is the one ``inspect`` gives.

    Example:
        >>> from distprompt import build_suite
        >>> suite = build_suite("prepared/", tokenizer="tok/", per_source=5)  # doctest: +SKIP
        >>> suite.save("out")  # doctest: +SKIP
    """
    config = resolve(config, **overrides)
    warnings: list[str] = []

    def _warn(msg: str) -> None:
        warnings.append(msg)
        logger.warning("%s", msg)
        if warn is not None:
            warn(msg)

    started = time.perf_counter()
    stack = contextlib.ExitStack()
    with stack:
        # With one worker, sources whose shards are all read are selected in a thread while
        # the pass's worker process reads the others (_EarlySelection). Not with more: the
        # workers keep both cores busy, and a third consumer made the export slower (measured
        # on the benchmark corpus, two workers: 20.7 / 19.7 s without, 22.0 / 23.8 s with).
        # The pools' windows, on a large corpus, in a temporary file (read back at selection):
        # closed last, once every selection thread is done.
        spill = stack.enter_context(WindowStore())
        early_sel = (
            _EarlySelection(config, stack)
            if config.workers == 1 and config.engine == "local"
            else None
        )
        run = _run_pass(
            data,
            tokenizer,
            config,
            on_error=config.on_error,
            progress=config.progress,
            warn=_warn,
            left_out="left out (--on-error skip)",
            overlap=True,
            need_tokenizer=True,
            judge=False,
            early=early_sel,
            spill=spill,
        )
        tok, tinfo, found, part = run.tok, run.tinfo, run.found, run.part
        assert tinfo is not None  # need_tokenizer
        shards = found.shards
        # On a large corpus the sources are selected beside this thread, which runs the
        # tokenizer checks meanwhile and decodes each source once selected: in two threads
        # with one or two workers, in forked worker processes with more (_selection_pool).
        # Either way the plots are drawn in two fresh processes while the last items are
        # decoded and the other files written.
        big = _is_large(shards)
        early = _early_quotas(part, config) if big else None
        parallel = early is not None
        pool: Executor | None = None
        kept: dict[Future[Any], str] = {}
        if early_sel is not None:
            if parallel and early_sel.pool is not None:
                kept = early_sel.take(part, early or {})
                pool = early_sel.pool  # what is left, in the same thread
            else:
                early_sel.reset(wait=parallel)
        if pool is None:
            pool = stack.enter_context(_selection_pool(config.workers if parallel else 0))
        submitted = None
        if early is not None and pool is not None:
            submitted = kept | _submit_selection(part, early, config, pool, list(kept.values()))
            if early_sel is not None:
                logger.info(
                    "submitted during the pass and still right: %d of %d sources (%d of them "
                    "not started by its end, run with the rest); %d submitted then, not used",
                    len(kept) + early_sel.queued,
                    len(part.stats),
                    early_sel.queued,
                    early_sel.redone,
                )
        run = _judged(run, config)
        verdict = run.verdict
        assert verdict is not None  # need_tokenizer
        if verdict.mismatch is not None:
            if config.check_tokenizer:
                raise TokenizerError(
                    f"{verdict.mismatch} (or --no-tokenizer-check to write the suite anyway, "
                    "with this verdict recorded)"
                )
            _warn(
                "tokenizer check failed, the suite is written anyway (--no-tokenizer-check): "
                + "; ".join(verdict.mismatch.splitlines())
            )
        problem = row_problem(verdict, part) if config.on_error == "raise" else None
        if problem is not None:
            raise problem  # a row failed a per-row template check: the row's problem
        if part.tally.skipped:
            total_skipped = sum(part.tally.skipped.values())
            detail = ", ".join(
                f"{r}: {n} (first at {part.tally.first_skip.get(r, '?')})"
                for r, n in sorted(part.tally.skipped.items())
            )
            _warn(f"skipped {total_skipped} bad rows — {detail}")
        if not part.stats:
            # An empty suite would look like a finished export; refuse before anything is
            # written.
            skipped = part.tally.skipped
            why = f"{sum(skipped.values())} bad rows skipped" if skipped else "no rows"
            raise InputError(
                f"{data}: expected at least one valid row in {len(shards)} shard(s), found none "
                f"({why}); check DATA and the bad-row counts"
            )

        passed = time.perf_counter()
        logger.info("tokenizer, pass and tokenizer checks: %.1f s", passed - started)
        if spill.spilled or spill.kept:
            logger.info(
                "the pools' feature windows: %d written to a temporary file (%.1f MB), %d kept "
                "in memory",
                spill.spilled,
                spill.size / 1e6,
                spill.kept,
            )
        quotas = early if early is not None else _quotas(part, config)
        for q in quotas.values():
            if q.shortfall > 0:
                _warn(
                    f"source {q.source!r}: quota {q.target} but only {q.granted} unique "
                    f"prompts; it gives all it has ({q.shortfall} short)"
                )

        profile = None
        learned = early_sel.profile if early_sel is not None else None
        if learned is not None and learned[0] is tok:  # learned in the selection thread
            profile = learned[1]
            for msg in learned[2]:
                _warn(msg)
        elif config.recover_turns:
            profile = _learn_profile(tok, tinfo, _warn)
        meta = {"method": config.method, "seed": config.seed}
        plots: _PlotProcess | None = None
        try:

            def start_plots() -> None:
                # Every source is selected (not before: started beside the last selections,
                # the plot processes' ~100 MB came on top of the largest pools' matrices;
                # measured on the benchmark's 4x corpus, the process tree's peak 611-643 ->
                # 579-595 MB, no slower within this machine's spread).
                nonlocal plots
                if big and plots is None:
                    trim_heap()  # what selection freed, before other processes start
                    # Two, each drawing about half: the plots are the last work of the export
                    # (measured with one worker: the process tree's PSS peaks at 503 MB then,
                    # below selection's peak with the plots in one process, 481 MB).
                    plots = _PlotProcess(2)

            prebuilt: list[Report] = []

            def draw(counts: dict[str, int], evidence: dict[str, SourceEvidence | None]) -> None:
                # Every source is selected: the report is built now, once, without the items
                # (completed with them after decoding, with_items); the plots, which are those
                # of the final report, are drawn elsewhere from it while the items are decoded.
                rep = build_report(
                    evidence, stats=part.stats, quotas=quotas, items=(), selected=counts,
                    meta=meta, max_output_tokens=config.max_output_tokens,
                )  # fmt: skip
                prebuilt.append(rep)
                if big:
                    start_plots()
                    assert plots is not None
                    plots.send(rep)

            ready = early_sel.decoded(kept) if early_sel is not None else None
            selected_counts, items, evidence = _select_and_decode(
                part,
                quotas,
                config,
                shards,
                tok=tok,
                profile=profile,
                warn=_warn,
                submitted=submitted,
                on_selected=draw,
                decoded=ready,
            )
            # A system prompt the template wrote into a user turn is read out of it only
            # with evidence from the source's items (recover/ambiguity.py).
            items = settle_system_prompts(items, tok, profile)
            if ready is not None and kept:
                logger.info(
                    "decoded during the pass: %d of the %d sources selected then",
                    sum(ready(s) is not None for s in kept.values()),
                    len(kept),
                )
        except BaseException:
            if plots is not None:
                plots.stop()
            raise
    report = _with_items(prebuilt, items)
    if report is None:  # not built before decoding, or for other items: built from them
        report = build_report(
            evidence, stats=part.stats, quotas=quotas, items=items, meta=meta,
            max_output_tokens=config.max_output_tokens,
        )  # fmt: skip
    if verdict.mismatch is not None:
        # On top of every rendering of the report (report.md, report.html, the CLI line).
        report = dataclasses.replace(report, summary=f"{_failed_banner(verdict)} {report.summary}")
    logger.info(
        "selection, decoding and report (%s): %.1f s",
        "selection in threads"
        if parallel and config.workers <= _SELECT_THREADS
        else f"selection in {config.workers} worker processes"
        if parallel
        else "in this process",
        time.perf_counter() - passed,
    )
    manifest = build_manifest(
        config,
        tinfo,
        shards,
        part,
        quotas,
        selected_counts,
        items,
        warnings,
        data=data,
        ignored=found.ignored,
        verdict=verdict,
    )
    manifest["template"] = template_summary(profile)
    manifest["fidelity_issues"] = [
        {"id": it.id, "source": it.source, "fidelity": it.fidelity, "reason": it.fidelity_reason}
        for it in items
        if it.fidelity not in (None, "tokens")
    ]
    return Suite(items, manifest, report=report, tokenizer=tok, plots=plots)


@api_spelling
def export_suite(
    data: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    tokenizer: Any,
    config: Config | None = None,
    warn: Callable[[str], None] | None = None,
    **overrides: Any,
) -> Suite:
    """:func:`build_suite` and :meth:`Suite.save` in one call, what ``distprompt export`` runs.

    Every option, the output files' included, is checked before any shard is read, and so is
    the output folder: a typo or an occupied ``out`` fails in a second, not after the pass.

    Args:
        data: As for :func:`build_suite`.
        out: Output folder.
        tokenizer: As for :func:`build_suite`.
        config: As for :func:`build_suite`; its ``formats``, ``temperature``, ``ignore_eos``
            and ``overwrite`` say how the files are written.
        warn: Called with each warning as it arises.
        **overrides: As for :func:`build_suite` (``formats=["openai"]``, ``overwrite=True``,
            ``temperature=0.7`` … are options of :class:`~distprompt.config.Config` too).

    Returns:
        The saved :class:`Suite` (:meth:`Suite.summary` says what was written).

    Raises:
        ConfigError: Invalid options or formats (before any shard is read).
        OutputError: ``out`` is occupied or cannot be written (checked before the pass).
        InputError, DataError, TokenizerError: As for :func:`build_suite`.

    Example:
        >>> from distprompt import export_suite
        >>> export_suite("prepared/", "out/", tokenizer="tok/", per_source=5)  # doctest: +SKIP
    """
    config = resolve(config, **overrides)
    check_out_dir(Path(out), overwrite=config.overwrite)
    suite = build_suite(data, tokenizer=tokenizer, config=config, warn=warn)
    suite.save(
        out,
        formats=config.formats,
        overwrite=config.overwrite,
        temperature=config.temperature,
        ignore_eos=config.ignore_eos,
    )
    return suite


#: What ``inspect`` keeps per source by default: enough for exact distinct counts on most
#: sources and a round-trip sample, less memory than a build's pool.
INSPECT_MAX_CANDIDATES = 4096


@api_spelling
def inspect_corpus(
    data: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    tokenizer: Any = None,
    config: Config | None = None,
    round_trip_sample: int = ROUND_TRIP_SAMPLE,
    **overrides: Any,
) -> CorpusInfo:
    """Figures of a corpus from one streaming pass, and (with a tokenizer) whether it matches.

    Bad rows never stop the pass: they are counted by kind with their first ``shard:line``.
    Memory is bounded by ``max_candidates`` prompts per source (the pool that counts distinct
    prompts and provides the round-trip sample) and by the number of distinct lengths.

    Args:
        data: A directory (searched recursively), a glob, a shard file, or a list of those.
        tokenizer: Local tokenizer folder, ``tokenizer.json``, hub id or loaded tokenizer; None
            skips the tokenizer checks.
        config: The options (a :class:`~distprompt.config.Config`); what the pass uses of it:
            ``workers``, ``engine``, ``ray_address``, ``glob``, ``seed`` (which uniform sample of
            prompts is kept) and ``max_candidates`` (unique prompts kept per source; distinct
            counts are exact up to it), ``progress`` (a progress bar on stderr). Default:
            ``Config(max_candidates=4096)``.
        round_trip_sample: Prompts per source decoded and re-encoded for the round-trip rate.
        **overrides: Options replacing those of ``config``.

    Returns:
        The :class:`~distprompt.corpus.CorpusInfo`; a failed tokenizer check is in
        ``info.mismatch`` (call :meth:`~distprompt.corpus.CorpusInfo.raise_for_mismatch` to
        turn it into an error).

    Raises:
        InputError: DATA has no readable shard.
        TokenizerError: The tokenizer cannot be loaded.

    Example:
        >>> from distprompt import inspect_corpus
        >>> info = inspect_corpus("data_samples/prepared")  # doctest: +SKIP
        >>> info.sources["glaive"].prompt_tokens.p50  # doctest: +SKIP
        256
    """
    config = resolve(
        config if config is not None else Config(max_candidates=INSPECT_MAX_CANDIDATES),
        **overrides,
    )
    run = _run_pass(
        data,
        tokenizer,
        config,
        on_error="skip",
        progress=config.progress,
        warn=None,
        left_out="left out",
        overlap=False,
        round_trip_sample=round_trip_sample,
        replies=False,  # no selection: neither the longest replies nor the reply sample
    )
    return corpus_info(
        run.part,
        run.found.shards,
        ignored=run.found.ignored,
        tokenizer=run.verdict,
        round_trips=run.round_trips,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class _Pass:
    """The pass over DATA and the tokenizer checks on it, shared by both commands."""

    tok: Any
    tinfo: TokenizerInfo | None
    found: ShardSet
    part: Partial
    verdict: TokenizerFigures | None  # None until judged (_judged)
    round_trips: dict[str, tuple[int, int, str | None]]
    checks: Checks | None


def _run_pass(
    data: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    tokenizer: Any,
    config: Config,
    *,
    on_error: OnError,
    progress: bool,
    warn: Callable[[str], None] | None,
    left_out: str,
    overlap: bool,
    need_tokenizer: bool = False,
    round_trip_sample: int = ROUND_TRIP_SAMPLE,
    judge: bool = True,
    early: _EarlySelection | None = None,
    spill: WindowStore | None = None,
    replies: bool = True,
) -> _Pass:
    """Find the shards, run the one pass with the row checks, then the tokenizer checks.

    The row checks need the vocabulary size and the template's markers. When they can be read
    without ``transformers`` (:func:`~distprompt.recover.light.light_checks`: a local
    ``tokenizer.json``), the pass starts with those and the real tokenizer loads in a thread
    meanwhile (started once the pass's worker processes exist); after the pass the markers are
    learned again from it, and if anything differs the pass runs again with those, with a
    warning. Otherwise the tokenizer is loaded first. With ``overlap``, on a large corpus the
    pass runs in a worker process while this one imports what selection and the report need,
    and ``early`` (one worker) selects and decodes the sources whose shards are read meanwhile;
    there, or on Ray, the merged pools keep their windows in ``spill`` when given.
    """
    tok = tinfo = checks = loading = None
    name = ""
    if tokenizer is not None or need_tokenizer:
        light = light_checks(tokenizer)
        if light is None:
            logger.debug("tokenizer %r loaded before the pass", tokenizer)
            tok, tinfo = load_tokenizer(tokenizer)
            name = tinfo.name
        else:
            # Only the checks are kept: the light tokenizer's memory is free for the real one.
            name, checks = light[0].name, light[1]
            loading = BackgroundLoad(tokenizer)
        del light
        trim_heap()  # the light tokenizer's memory, before the pass's workers fork
    found = find_shards(data, warn=warn, glob=config.glob)
    shards = found.shards
    if tok is not None and tinfo is not None:
        checks = prepare_checks(tok, tinfo.vocab_size)
    big = overlap and _is_large(shards)
    if early is not None:
        early.shards = shards
        if tok is not None and tinfo is not None:
            first = (tok, tinfo)
            early.tokenizer = lambda: first
        elif loading is not None:
            early.tokenizer = loading.loaded

    def started() -> None:
        if big:
            _start_warm_imports()
        if loading is not None:
            loading.start()

    def one_pass(checks: Checks | None, on_started: Callable[[], None] | None) -> Partial:
        if early is not None:
            early.reset()  # what the pass before submitted (and no thread at work during a fork)
        try:
            return _scan(checks, on_started)
        finally:
            if early is not None:
                early.close()  # this thread uses the tokenizer from here on

    def _scan(checks: Checks | None, on_started: Callable[[], None] | None) -> Partial:
        return scan(
            shards,
            max_candidates=config.max_candidates,
            seed=config.seed,
            on_error=on_error,
            vocab_size=checks.vocab_size if checks else None,
            tokenizer_name=name,
            workers=config.workers,
            progress=progress,
            check=checks.row_check if checks else None,
            processes=big or None,
            on_started=on_started,
            engine=config.engine,
            ray_address=config.ray_address,
            # The round trip's prompts, held only when there is a tokenizer to check: each unit
            # of a split shard carries its own sample to the merge.
            sample=round_trip_sample if checks is not None else 0,
            on_shard=early.on_shard if early is not None and big else None,
            spill=spill if big or config.engine == "ray" else None,
            replies=replies,
        )

    say = warn if warn is not None else (lambda msg: logger.warning("%s", msg))
    failure: Exception | None = None
    try:
        part = one_pass(checks, started if big or loading is not None else None)
    except Exception as exc:  # e.g. an id out of a vocabulary size that was not the real one
        if loading is None:
            raise
        failure = exc
    if loading is not None:
        tok, tinfo = loading.result()
        real = prepare_checks(tok, tinfo.vocab_size)
        assert checks is not None
        differ = _checks_differ(checks, real, tok)
        if failure is not None and not differ:
            raise failure
        if differ:
            say(
                f"tokenizer {tinfo.name!r}: what was read without transformers differs from "
                f"the loaded tokenizer ({differ}); DATA is read again with the loaded one's"
            )
            _join_warm_imports()  # no import in flight while worker processes fork
            checks = real
            part = one_pass(checks, None)
    for shard_name, why in sorted(part.failed.items()):
        say(f"{shard_name}: {left_out}: {why}")
    # The rows the marker check held apart: the corpus's when the tokenizer is evidently not
    # its own, else bad rows (before any quota is made from the figures).
    settle_rows(part)
    run = _Pass(tok, tinfo, found, part, None, {}, checks)
    return _judged(run, config, round_trip_sample) if judge else run


def _judged(run: _Pass, config: Config, round_trip_sample: int = ROUND_TRIP_SAMPLE) -> _Pass:
    """``run`` with the tokenizer checks' verdict (the round trip samples the pools)."""
    if run.checks is None or run.tinfo is None:
        return run
    verdict, round_trips = run_checks(
        run.checks,
        run.part,
        run.tok,
        run.tinfo.name,
        has_chat_template=run.tinfo.has_chat_template,
        shards=run.found.shards,
        seed=config.seed,
        round_trip_sample=round_trip_sample,
    )
    return dataclasses.replace(run, verdict=verdict, round_trips=round_trips)


def _quotas(part: Partial, config: Config) -> dict[str, Quota]:
    return allocate(
        {s: st.rows for s, st in part.stats.items()},
        {s: len(part.pools[s]) for s in part.stats},
        per_source=config.per_source,
        total=config.total,
        allocation=config.allocation,
        min_per_source=config.min_per_source,
    )


def _early_quotas(part: Partial, config: Config) -> dict[str, Quota] | None:
    """The quotas, to start selection before the tokenizer checks; None when there are none
    to start or they cannot be made (the error is raised after the checks, as without)."""
    if not part.stats:
        return None
    try:
        return _quotas(part, config)
    except ConfigError:
        return None


def _one_thread() -> Any:
    """BLAS on one thread for selection, for the whole process: its matrices are small, and on
    a machine whose cores are busy (other work, the pass's workers) extra BLAS threads spin
    against each other. The numbers do not change (the pinned-output test holds). OpenMP's
    limit holds for one thread only: each thread that selects sets it (:func:`_one_openmp_thread`).

    threadpoolctl limits the libraries loaded when it is called, and only from the thread that
    set the first limit (OpenBLAS's thread pool is the process's). So scipy's BLAS, the one
    scikit-learn's SVD and k-means call, is imported first (0.2 s): the early selection's pool is
    entered while the warm imports still run in another thread, which left scipy's OpenBLAS on
    two threads beside the pass, spinning — measured on the benchmark corpus, three interleaved
    runs: the one-worker export's main process used 13.6-13.9 s of CPU, 9.5-10.1 s with one
    thread, and the export took 11.1 s, 9.0-9.6 s.
    """
    import scipy.linalg  # noqa: F401
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


@contextlib.contextmanager
def _one_openmp_thread() -> Iterator[None]:
    """OpenMP on one thread in this thread (its limit is per thread), once what loads it is
    imported (in another thread, the warm imports may still run)."""
    from threadpoolctl import threadpool_limits

    _warm_imports()
    with threadpool_limits(limits=1, user_api="openmp"):
        yield


def _with_items(prebuilt: Sequence[Report], items: Sequence[SuiteItem]) -> Report | None:
    """The report built before decoding, completed with the items (None when there is none,
    or when decoding left a source with another number of items than were selected)."""
    if not prebuilt:
        return None
    try:
        return with_items(prebuilt[-1], items)
    except ValueError:
        logger.debug("the items differ from the selection's counts: report built from them")
        return None


def _failed_banner(verdict: TokenizerFigures) -> str:
    failed = ", ".join(c.name for c in verdict.checks if c.passed is False)
    return (
        f"TOKENIZER CHECK FAILED ({failed}; written with --no-tokenizer-check): the prompts may "
        "not be the data's, see manifest.json tokenizer_check."
    )


#: Corpora at least this large are read in a worker process while this one warms imports.
_OVERLAP_BYTES = 64 << 20


#: A compressed shard counts as this many times its size on disk in :func:`_is_large`: rows of
#: token ids compress much more than this (the benchmark corpus: 11x with gzip, 38x with zstd,
#: whose 40 MB on disk otherwise took the small-corpus path for 1.5 GB of rows; 27x as Parquet
#: with zstd). Parquet files count as compressed too.
_COMPRESSED_FACTOR = 4


def _is_large(shards: Sequence[Shard]) -> bool:
    """Whether the work is worth other processes (the pass's, selection's, the plots')."""
    held = (
        s.size * (_COMPRESSED_FACTOR if s.name.endswith((".gz", ".zst", ".parquet")) else 1)
        for s in shards
    )
    return sum(held) >= _OVERLAP_BYTES


def _warm_imports() -> None:
    """Import what selection uses (seconds): while the pass still runs, and before selection
    limits OpenMP to one thread (:func:`_one_openmp_thread`). Not matplotlib: on a
    corpus this large the plots are drawn in a process of their own (importing it here cost
    0.9 s of CPU beside the pass and ~30 MB that forked workers share, for nothing)."""
    try:
        import scipy.sparse  # noqa: F401
        import sklearn.cluster
        import sklearn.decomposition
        import sklearn.feature_extraction.text  # noqa: F401
    except Exception:  # imported again (and reported) where they are used
        pass


#: The warm-imports threads started, joined before this process forks again.
_WARMING: list[threading.Thread] = []


def _start_warm_imports() -> None:
    thread = threading.Thread(target=_warm_imports, name="distprompt-imports", daemon=True)
    thread.start()
    _WARMING.append(thread)


def _join_warm_imports() -> None:
    while _WARMING:
        _WARMING.pop().join()


def _checks_differ(used: Checks, real: Checks, tok: Any) -> str:
    """What differs between the checks a pass used and the loaded tokenizer's ("" if none)."""
    out = []
    if used.vocab_size != real.vocab_size:
        out.append(f"vocabulary size {used.vocab_size} vs {real.vocab_size}")
    for what, a, b in (
        ("start markers", used.start, real.start),
        ("generation prompt", used.gen, real.gen),
    ):
        if a != b:
            out.append(f"{what} {list(a)} {show_ids(tok, a)!r} vs {list(b)} {show_ids(tok, b)!r}")
    for what, alts, real_alts in (
        ("layout openings", used.starts, real.starts),
        ("layout generation prompts", used.gens, real.gens),
    ):
        if alts != real_alts:
            out.append(f"{what} {[list(a) for a in alts]} vs {[list(b) for b in real_alts]}")
    if used.template_note != real.template_note:
        out.append(f"template note {used.template_note!r} vs {real.template_note!r}")
    return "; ".join(out)


def _learn_profile(tok: Any, tinfo: TokenizerInfo, warn: Callable[[str], None]) -> Any:
    if not tinfo.has_chat_template:
        warn(f"tokenizer {tinfo.name!r} has no chat template: messages are not recovered")
        return None
    from distprompt.errors import TemplateError
    from distprompt.recover.template import learn_template

    try:
        return learn_template(tok)
    except TemplateError as exc:
        warn(f"chat template not usable for turn recovery: {exc}")
        return None


#: The pools being selected from, for worker processes forked from this one (see _select_job).
_SELECTING: dict[str, BottomK] = {}


def _select_job(
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
    the pass holds columns: :meth:`~distprompt.read.scan.BottomK.compact`)."""
    in_process = threading.current_thread() is threading.main_thread()
    with _one_thread() if in_process else contextlib.nullcontext(), _one_openmp_thread():
        try:
            got = _SELECTING[source] if cands is None else cands
            return select_source(
                got.candidates() if isinstance(got, BottomK) else got,
                quota,
                config,
                stats,
                heavy,
                shards,
            )
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


class _EarlySelection:
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
            quotas = _quotas(part, self._config)
        except ConfigError:
            return  # raised after the pass, as without
        if self.pool is None:
            self.pool = self._stack.enter_context(_selection_pool(1))
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
        items: read back and decoded as :func:`_select_and_decode` would (one job at a time
        while the pass runs: the gate)."""
        with self._gate:
            result = _select_job(source, quota, self._config, stats, cands, heavy, shards)
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
                        _learn_profile(tok, tinfo, said.append)
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


#: Selection threads with one or two workers (with one, only one of them at work during the pass:
#: :class:`_EarlySelection`).
_SELECT_THREADS = 2


@contextlib.contextmanager
def _selection_pool(workers: int) -> Iterator[Executor | None]:
    """Where the sources are selected while this thread runs the tokenizer checks and decodes
    the sources already selected: :data:`_SELECT_THREADS` threads for 1 or 2 workers, ``workers``
    forked processes for more, None for 0 (all of it here, one after another).

    Threads copy no pages, and selection's numpy and scipy work and the tokenizer's Rust code
    leave the interpreter lock often enough for two of them to overlap: measured on the
    benchmark corpus with two workers, the export took as long as with two forked processes
    (17.6 / 19.0 s against 18.9 / 19.1 s) and its peak memory was 600 MB PSS against 663-672
    (559-575 MB once two large pools were no longer selected at once: :class:`_Fitting`).
    With more cores, processes (the lock would hold more threads back; not measured here).
    """
    if workers < 1:
        yield None
        return
    if workers > _SELECT_THREADS:
        with _forked_pool(workers) as procs:
            yield procs
        return
    from concurrent.futures import ThreadPoolExecutor

    # BLAS on one thread for the whole time the selection threads run: threadpoolctl's BLAS
    # limits are the process's, so they are set (and restored) here, not by each thread.
    with _one_thread():
        pool = ThreadPoolExecutor(_SELECT_THREADS, thread_name_prefix="distprompt-select")
        try:
            yield pool
        except BaseException:
            # An error or Ctrl-C: the sources not started are dropped (a thread cannot be
            # stopped, so the one under way ends first, a few seconds at most).
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)


@contextlib.contextmanager
def _forked_pool(workers: int) -> Iterator[ProcessPoolExecutor | None]:
    """``workers`` processes forked from this one (None for 0), for the work after the pass.

    Objects that exist when the pool starts are left out of the garbage collector's walks
    until it is done with: a walk in a forked worker writes to every object it visits, which
    copies the pages it shares with this process (the tokenizer, the imports, the pools).
    """
    if workers < 1:
        yield None
        return
    _join_warm_imports()  # a fork while another thread imports can deadlock the child
    import gc

    from distprompt.read.engine import process_pool

    trim_heap()
    gc.freeze()  # the workers are forked as the first tasks are submitted, in the body
    try:
        with process_pool(workers) as pool:
            yield pool
    finally:
        gc.unfreeze()


#: Feature tokens (:data:`~distprompt.choose.vectorize.FEATURE_BUDGET` bounds a pool's) the pools
#: selected at once in threads may hold between them: one pool at its bound and a smaller one, not
#: two large ones (measured on the benchmark corpus: the 18k-candidate pool's selection peaks at
#: 126 MB, the SWE pool's at 84 MB, the eight others' at 27-44 MB).
_SELECT_TOKENS = FEATURE_BUDGET * 3 // 2


class _Fitting:
    """Jobs on a thread pool, each started by the first free thread once its weight fits: the
    weights of the jobs under way and its own at most ``limit`` between them (a job alone
    always starts). Among the jobs that fit, the first submitted starts first. The futures are
    this class's own; one still waiting can be cancelled."""

    def __init__(self, pool: Executor, limit: int) -> None:
        self._pool = pool
        self._limit = limit
        self._cond = threading.Condition()
        self._waiting: list[tuple[Future[Any], int, Callable[..., Any], tuple[Any, ...]]] = []
        self._used = 0
        self._running = 0

    def submit(self, weight: int, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        from concurrent.futures import Future

        fut: Future[Any] = Future()
        with self._cond:
            self._waiting.append((fut, weight, fn, args))
            self._cond.notify_all()  # a thread waiting for a job that fits may take this one
        self._pool.submit(self._run_next)  # one task a job: each runs whichever fits first
        return fut

    def _take(self) -> tuple[Future[Any], int, Callable[..., Any], tuple[Any, ...]] | None:
        """The first waiting job that fits (the lock held), or None."""
        for i, job in enumerate(self._waiting):
            if job[0].cancelled():
                continue
            if self._running == 0 or self._used + job[1] <= self._limit:
                del self._waiting[i]
                return job
        self._waiting = [j for j in self._waiting if not j[0].cancelled()]
        return None

    def _run_next(self) -> None:
        with self._cond:
            while (job := self._take()) is None and self._waiting:
                self._cond.wait()
            if job is None:
                return  # the others took every job
            fut, weight, fn, args = job
            if not fut.set_running_or_notify_cancel():
                return
            self._used += weight
            self._running += 1
        try:
            fut.set_result(fn(*args))
        except BaseException as exc:  # the caller gets it from the future
            fut.set_exception(exc)
        finally:
            with self._cond:
                self._used -= weight
                self._running -= 1
                self._cond.notify_all()


def _submit_selection(
    part: Partial,
    quotas: dict[str, Quota],
    config: Config,
    pool: Executor,
    done: Sequence[str] = (),
) -> dict[Future[Any], str]:
    """Every source's selection but those ``done`` (submitted during the pass), submitted to
    ``pool`` (:func:`_selection_pool`), the largest pools first.

    Forked workers find the pools in :data:`_SELECTING` (the workers of a fork pool are all
    forked at the first submit); :func:`_select_and_decode` empties it once they are done.
    Threads are handed them, and start a source once it fits beside those under way
    (:class:`_Fitting`, :data:`_SELECT_TOKENS`).
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    left = [s for s in part.stats if s not in done]
    largest_first = sorted(left, key=lambda s: (-len(part.pools[s]), s))
    if not isinstance(pool, ProcessPoolExecutor):  # threads: the pools' matrices in this process
        fitting = _Fitting(pool, _SELECT_TOKENS)
        out = {}
        for s in largest_first:
            weight = min(part.pools[s].feature_tokens(), FEATURE_BUDGET)
            heavy = heavy_candidates(part, s)
            args = (s, quotas[s], config, part.stats[s], part.pools[s], heavy, part.shards)
            out[fitting.submit(weight, _select_job, *args)] = s
        return out
    forked = multiprocessing.get_start_method() == "fork"
    if forked:
        _SELECTING.update({s: part.pools[s] for s in largest_first})
    return {
        pool.submit(
            _select_job,
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


def _select_and_decode(
    part: Partial,
    quotas: dict[str, Quota],
    config: Config,
    shards: Sequence[Shard],
    *,
    tok: Any,
    profile: Any,
    warn: Callable[[str], None],
    submitted: dict[Future[Any], str] | None,
    on_selected: Callable[[dict[str, int], dict[str, SourceEvidence | None]], None],
    decoded: Callable[[str], tuple[list[Pick], list[SuiteItem]] | None] | None = None,
) -> tuple[dict[str, int], list[SuiteItem], dict[str, SourceEvidence | None]]:
    """Select each source's representatives, read them back and decode them.

    With ``submitted`` (:func:`_submit_selection`), the sources are selected in worker
    processes or a thread, and each is read back and decoded here as soon as it is done;
    without, one after another here. The selection of a source does not depend on where it
    runs, and the results are put in source order: the same items, counts and evidence either
    way. ``on_selected`` is called with the counts and the evidence once every source is
    selected, before the last items are decoded (all of them, in this thread). ``decoded``
    gives a source's picks and items when they were made already (the same ones).

    Returns:
        Items selected per source, the items (by source, then cluster), the report's evidence.
    """
    sources = sorted(part.stats)
    picks: dict[str, list[Pick]] = {}
    evidence: dict[str, SourceEvidence | None] = {}
    items: dict[str, list[SuiteItem]] = {}
    # With Ray, all picks are decoded at the end as tasks spread over the cluster.
    decode_here = config.engine != "ray"

    def take(source: str, result: tuple[list[Chosen], Any]) -> None:
        ready = decoded(source) if decoded is not None else None
        if ready is not None and decode_here:  # decoded during the pass (_EarlySelection)
            picks[source], items[source] = ready
            return
        picks[source] = picks_of(result[0], shards, config)
        if decode_here:
            items[source] = make_batch(picks[source], (tok, profile, config))

    def all_selected(results: dict[str, Any]) -> None:
        evidence.update({s: results[s][1] for s in sources})
        on_selected({s: len(results[s][0]) for s in sources}, evidence)

    results: dict[str, tuple[list[Chosen], Any]] = {}
    # BLAS on one thread where this thread selects; a pool's thread or processes set it there.
    with _one_thread() if submitted is None else contextlib.nullcontext():
        if submitted is None:
            with _one_openmp_thread():
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
                warn=warn,
            )
    counts = {s: len(picks[s]) for s in sources}
    return counts, every, {s: evidence[s] for s in sources}


class _PlotProcess:
    """The plots of a report drawn in fresh Python processes while this one goes on.

    Subprocesses rather than forked workers, which would copy ~100 MB of the pages they share
    with this one (measured on the benchmark corpus), and rather than a multiprocessing spawn,
    which imports the caller's main script again. They are started before the report exists,
    to import matplotlib meanwhile (~1 s), and wait for it on stdin: :meth:`send` hands it
    over; each draws a share of the plots (:func:`~distprompt.write.render.plot_groups`).
    Calling waits for the PNGs; those of a process that failed are drawn here, with a warning.
    """

    def __init__(self, processes: int = 1) -> None:
        import subprocess

        from distprompt.write.render import plot_groups

        self._report: Any = None
        code = (
            "import sys; from distprompt.write.render import serve_plots; serve_plots(sys.argv[1:])"
        )
        self._procs = [
            (
                names,
                subprocess.Popen(
                    [sys.executable, "-c", code, *names],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    # It imports distprompt from where this process did.
                    env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
                ),
            )
            for names in plot_groups(processes)
        ]
        self._out: list[tuple[bytes, bytes]] = [(b"", b"")] * len(self._procs)
        self._readers: list[threading.Thread] = []

    def send(self, report: Any) -> None:
        """Hand ``report`` over (pickled, on each process's stdin)."""
        import pickle

        self._report = report
        data = pickle.dumps(report, protocol=pickle.HIGHEST_PROTOCOL)
        for i in range(len(self._procs)):
            # Written and read as it goes (communicate), so that no process blocks on a pipe.
            reader = threading.Thread(target=self._communicate, args=(i, data), daemon=True)
            reader.start()
            self._readers.append(reader)

    def _communicate(self, i: int, data: bytes) -> None:
        proc = self._procs[i][1]
        with contextlib.suppress(OSError, ValueError):  # it died before it read the report
            self._out[i] = proc.communicate(data)
        proc.wait()

    def __call__(self) -> dict[str, bytes]:
        import pickle

        assert self._readers, "send() first"
        pngs: dict[str, bytes] = {}
        for reader in self._readers:
            reader.join()
        for (names, proc), (out, err) in zip(self._procs, self._out, strict=True):
            got = None
            if proc.returncode == 0:
                with contextlib.suppress(Exception):
                    got = pickle.loads(out)
            if isinstance(got, dict):
                pngs.update(got)
                continue
            lines = err.decode("utf-8", "replace").strip().splitlines()
            why = lines[-1] if lines else f"exit code {proc.returncode}"
            plot_logger.warning(
                "the plot process failed (%s); the plots are drawn here instead", why
            )
            from distprompt.write.render import plots

            pngs.update(plots(self._report, names))
        from distprompt.write.render import PLOT_NAMES

        return {n: pngs[n] for n in PLOT_NAMES if n in pngs}

    def stop(self) -> None:
        """Stop the processes (the plots are not wanted)."""
        for _, proc in self._procs:
            proc.kill()
        for reader in self._readers:
            reader.join()
        for _, proc in self._procs:
            with contextlib.suppress(OSError, ValueError):
                proc.communicate()
