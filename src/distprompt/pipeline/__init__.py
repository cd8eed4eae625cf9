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
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from distprompt._heap import trim_heap
from distprompt.choose.stratify import Quota
from distprompt.config import Config, OnError, resolve
from distprompt.corpus import CorpusInfo, corpus_info
from distprompt.engine import Schedule
from distprompt.engine.background import join_warm_imports, start_warm_imports
from distprompt.errors import InputError, TokenizerError, api_spelling
from distprompt.pipeline import plots as plots_mod
from distprompt.pipeline import schedule
from distprompt.pipeline.items import item_id, learn_profile
from distprompt.pipeline.manifest import build_manifest
from distprompt.pipeline.sources import quotas_of
from distprompt.read.scan import (
    Partial,
    scan,
)
from distprompt.read.shards import ShardSet, find_shards
from distprompt.read.spill import WindowStore
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
from distprompt.write.out_dir import check_out_dir
from distprompt.write.suite import Suite

__all__ = ["build_suite", "export_suite", "inspect_corpus", "item_id"]

logger = logging.getLogger("distprompt.pipeline")


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
        # the pass's worker process reads the others (schedule.EarlySelection). Not with more: the
        # workers keep both cores busy, and a third consumer made the export slower (measured
        # on the benchmark corpus, two workers: 20.7 / 19.7 s without, 22.0 / 23.8 s with).
        # The pools' windows, on a large corpus, in a temporary file (read back at selection):
        # closed last, once every selection thread is done.
        spill = stack.enter_context(WindowStore())
        early_sel = (
            schedule.EarlySelection(config, stack)
            if config.workers == 1 and config.engine == "local"
            else None
        )
        run = _run_pass(
            data, tokenizer, config, on_error=config.on_error, progress=config.progress,
            warn=_warn, left_out="left out (--on-error skip)", overlap=True,
            need_tokenizer=True, judge=False, early=early_sel, spill=spill,
        )  # fmt: skip
        tok, tinfo, found, part = run.tok, run.tinfo, run.found, run.part
        assert tinfo is not None  # need_tokenizer
        shards = found.shards
        # On a large corpus the sources are selected beside this thread, which runs the
        # tokenizer checks meanwhile and decodes each source once selected: in two threads
        # with one or two workers, in forked worker processes with more (Schedule.side_pool).
        # Either way the plots are drawn in a fresh process while the last items are
        # decoded and the other files written.
        sel = schedule.start_selection(part, config, stack, early_sel, shards)
        early = sel.quotas
        parallel = early is not None
        run = _judged(run, config)
        verdict = _accepted_verdict(run, config, _warn, data)

        passed = time.perf_counter()
        logger.info("tokenizer, pass and tokenizer checks: %.1f s", passed - started)
        quotas = early if early is not None else quotas_of(part, config)
        _said_after_pass(spill, quotas, _warn)

        profile = _turn_profile(early_sel, tok, tinfo, config, _warn)
        job = schedule.Selecting(part, quotas, config, shards, tok, profile, _warn)
        drawing, (selected_counts, items, evidence) = _selected_items(job, sel, early_sel)
    report = drawing.report(evidence, items)
    if verdict.mismatch is not None:
        # On top of every rendering of the report (report.md, report.html, the CLI line).
        report = dataclasses.replace(report, summary=f"{_failed_banner(verdict)} {report.summary}")
    where, took = _where_selected(config, parallel), time.perf_counter() - passed
    logger.info("selection, decoding and report (%s): %.1f s", where, took)
    manifest = build_manifest(
        config, tinfo, shards, part, quotas, selected_counts, items, warnings,
        data=data, ignored=found.ignored, verdict=verdict, profile=profile,
    )  # fmt: skip
    return Suite(items, manifest, report=report, tokenizer=tok, plots=drawing.plots)


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
    early: schedule.EarlySelection | None = None,
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
    tok, tinfo, checks, loading, name = _tokenizer_first(tokenizer, need_tokenizer)
    found = find_shards(data, warn=warn, glob=config.glob)
    shards = found.shards
    big = overlap and schedule.is_large(shards)
    if early is not None:
        early.shards = shards
        if tok is not None and tinfo is not None:
            first = (tok, tinfo)
            early.tokenizer = lambda: first
        elif loading is not None:
            early.tokenizer = loading.loaded

    def started() -> None:
        if big:
            start_warm_imports(schedule.SELECTION_IMPORTS)
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
            schedule=Schedule.of(config, processes=big or None),
            progress=progress,
            check=checks.row_check if checks else None,
            on_started=on_started,
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
        assert checks is not None
        tok, tinfo, checks, again = _loaded_checks(loading, checks, failure, say)
        if again:
            part = one_pass(checks, None)
    for shard_name, why in sorted(part.failed.items()):
        say(f"{shard_name}: {left_out}: {why}")
    # The rows the marker check held apart: the corpus's when the tokenizer is evidently not
    # its own, else bad rows (before any quota is made from the figures).
    settle_rows(part)
    run = _Pass(tok, tinfo, found, part, None, {}, checks)
    return _judged(run, config, round_trip_sample) if judge else run


def _selected_items(
    job: schedule.Selecting,
    started: schedule.Started,
    early_sel: schedule.EarlySelection | None,
) -> tuple[plots_mod.ReportDrawing, schedule.Selected]:
    """Every source selected, read back and decoded (:func:`schedule.select_and_decode`), with
    the system prompts a template wrote into user turns settled; the plots are drawn as soon
    as every source is selected (stopped on an error).

    Returns:
        The report's drawing and what was selected.
    """
    config = job.config
    drawing = plots_mod.ReportDrawing(
        stats=job.part.stats,
        quotas=job.quotas,
        meta={"method": config.method, "seed": config.seed},
        max_output_tokens=config.max_output_tokens,
        big=started.big,
    )
    try:
        ready = early_sel.decoded(started.kept) if early_sel is not None else None
        selected = schedule.select_and_decode(
            job, submitted=started.submitted, on_selected=drawing.draw, decoded=ready
        )
        # A system prompt the template wrote into a user turn is read out of it only
        # with evidence from the source's items (recover/ambiguity.py).
        items = settle_system_prompts(selected.items, job.tok, job.profile)
        if ready is not None and started.kept:
            logger.info(
                "decoded during the pass: %d of the %d sources selected then",
                sum(ready(s) is not None for s in started.kept.values()),
                len(started.kept),
            )
    except BaseException:
        drawing.stop()
        raise
    return drawing, selected._replace(items=items)


def _where_selected(config: Config, parallel: bool) -> str:
    """Where the sources were selected, for the log."""
    if not parallel:
        return "in this process"
    if Schedule.of(config).side_pool.kind == "threads":
        return "selection in threads"
    return f"selection in {config.workers} worker processes"


def _loaded_checks(
    loading: BackgroundLoad,
    checks: Checks,
    failure: Exception | None,
    say: Callable[[str], None],
) -> tuple[Any, TokenizerInfo, Checks, bool]:
    """The tokenizer loaded beside the pass, its checks, and whether the pass must run again
    because they differ from what was read without ``transformers`` (said through ``say``).

    Raises:
        Exception: ``failure`` (the pass's), when the checks do not differ.
    """
    tok, tinfo = loading.result()
    real = prepare_checks(tok, tinfo.vocab_size)
    differ = _checks_differ(checks, real, tok)
    if failure is not None and not differ:
        raise failure
    if differ:
        say(
            f"tokenizer {tinfo.name!r}: what was read without transformers differs from "
            f"the loaded tokenizer ({differ}); DATA is read again with the loaded one's"
        )
        join_warm_imports()  # no import in flight while worker processes fork
        return tok, tinfo, real, True
    return tok, tinfo, checks, False


def _said_after_pass(
    spill: WindowStore, quotas: Mapping[str, Quota], warn: Callable[[str], None]
) -> None:
    """What the pass leaves to say: where the pools' feature windows are (logged), and the
    sources with fewer unique prompts than their quota (warned)."""
    if spill.spilled or spill.kept:
        logger.info(
            "the pools' feature windows: %d written to a temporary file (%.1f MB), %d kept "
            "in memory",
            spill.spilled,
            spill.size / 1e6,
            spill.kept,
        )
    for q in quotas.values():
        if q.shortfall > 0:
            warn(
                f"source {q.source!r}: quota {q.target} but only {q.granted} unique "
                f"prompts; it gives all it has ({q.shortfall} short)"
            )


def _accepted_verdict(
    run: _Pass,
    config: Config,
    warn: Callable[[str], None],
    data: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
) -> TokenizerFigures:
    """The tokenizer checks' verdict, once it is clear that the export goes on: a failed check
    raises (or is warned about with ``check_tokenizer=False``), so does a row's template
    problem with ``on_error="raise"``; skipped rows are warned about.

    Raises:
        TokenizerError: The tokenizer fails a check. InputError: No valid row at all.
        DataError: A row failed a per-row template check (``on_error="raise"``).
    """
    verdict = run.verdict
    part, shards = run.part, run.found.shards
    assert verdict is not None  # need_tokenizer
    if verdict.mismatch is not None:
        if config.check_tokenizer:
            raise TokenizerError(
                f"{verdict.mismatch} (or --no-tokenizer-check to write the suite anyway, "
                "with this verdict recorded)"
            )
        warn(
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
        warn(f"skipped {total_skipped} bad rows — {detail}")
    if not part.stats:
        # An empty suite would look like a finished export; refuse before anything is
        # written.
        skipped = part.tally.skipped
        why = f"{sum(skipped.values())} bad rows skipped" if skipped else "no rows"
        raise InputError(
            f"{data}: expected at least one valid row in {len(shards)} shard(s), found none "
            f"({why}); check DATA and the bad-row counts"
        )
    return verdict


def _turn_profile(
    early_sel: schedule.EarlySelection | None,
    tok: Any,
    tinfo: TokenizerInfo,
    config: Config,
    warn: Callable[[str], None],
) -> Any:
    """The chat-template profile for turn recovery: the one the early selection learned with
    this tokenizer (its warnings said now), else learned here; None without turn recovery."""
    learned = early_sel.profile if early_sel is not None else None
    if learned is not None and learned[0] is tok:  # learned in the selection thread
        for msg in learned[2]:
            warn(msg)
        return learned[1]
    return learn_profile(tok, tinfo, warn) if config.recover_turns else None


def _tokenizer_first(
    tokenizer: Any, need_tokenizer: bool
) -> tuple[Any, TokenizerInfo | None, Checks | None, BackgroundLoad | None, str]:
    """What the pass starts with: the row checks read without ``transformers`` when they can
    be (the real tokenizer then loads in the background: ``loading``), else the tokenizer
    loaded now. Returns ``(tok, tinfo, checks, loading, name)``; all None (name "") without a
    tokenizer."""
    tok = tinfo = checks = loading = None
    name = ""
    if tokenizer is None and not need_tokenizer:
        return tok, tinfo, checks, loading, name
    light = light_checks(tokenizer)
    if light is None:
        logger.debug("tokenizer %r loaded before the pass", tokenizer)
        tok, tinfo = load_tokenizer(tokenizer)
        name, checks = tinfo.name, prepare_checks(tok, tinfo.vocab_size)
    else:
        # Only the checks are kept: the light tokenizer's memory is free for the real one.
        name, checks = light[0].name, light[1]
        loading = BackgroundLoad(tokenizer)
    del light
    trim_heap()  # the light tokenizer's memory, before the pass's workers fork
    return tok, tinfo, checks, loading, name


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


def _failed_banner(verdict: TokenizerFigures) -> str:
    failed = ", ".join(c.name for c in verdict.checks if c.passed is False)
    return (
        f"TOKENIZER CHECK FAILED ({failed}; written with --no-tokenizer-check): the prompts may "
        "not be the data's, see manifest.json tokenizer_check."
    )


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
