"""``distprompt bench``: replay a suite against a running server and record every request.

The run goes concurrency level by level. With ``traffic="per-source"`` (the default), within a
level, source by source: each (concurrency, source) *window* keeps up to ``c`` of that source's
items in flight and ends when they are all answered. So a source's throughput at ``c`` is
measured with only its own prompts in flight (as AIPerf's per-category runs do), and servers that
keep only counters (vLLM without ``--per-request-spec-decode-metrics``) are read before and after
each window, which attributes their acceptance to the source. With ``traffic="mixed"`` a level is
one window of requests drawn from the whole suite with probability ∝ the corpus weight
(:func:`mixed_draws`): the interleaved traffic a server of the training mix sees; each request
keeps its source and cluster. ``"both"`` runs the per-source windows, then the mixed one.

Before the first request the server's limits are read where exposed (:func:`server_limits`) and
the traps are warned about (:func:`preflight_warnings`); ``flush_cache`` empties the server's
prefix cache before every window. Warnings go to the log and to ``meta["warnings"]``.

Every finished request is appended to ``RESULTS_DIR/.requests.jsonl.partial`` as it completes;
at the end (or on Ctrl-C, marked incomplete) the file is renamed to ``requests.jsonl`` and
``summary.json``, ``summary.md`` and ``summary.png`` are written. Nothing is retried: a retry
would hide the failure and bias the latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import hashlib
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from distprompt._version import __version__
from distprompt.benchmark.protocol import (
    APIS,
    PATHS,
    MalformedReply,
    StreamReader,
    build_body,
    chat_eligible,
)
from distprompt.benchmark.results import (
    PARTIAL_NAME,
    REQUESTS_NAME,
    BenchResults,
    check_results_dir,
)
from distprompt.benchmark.server import (
    FLUSH_PATHS,
    check_server,
    counter_delta,
    flush_prefix_cache,
    preflight_warnings,
    read_counters,
    read_limits,
    server_limits,
)
from distprompt.benchmark.traffic import (
    TRAFFIC,
    Job,
    levels_of,
    mixed_draws,
    reply_kind,
    source_shares,
    windows_plan,
)
from distprompt.errors import ConfigError, api_spelling
from distprompt.records import SuiteItem

__all__ = [
    "FLUSH_PATHS",
    "REQUESTS_NAME",
    "TRAFFIC",
    "BenchInterrupted",
    "BenchResults",
    "bench",
    "check_results_dir",
    "mixed_draws",
    "preflight_warnings",
    "reply_kind",
    "server_limits",
    "source_shares",
]

log = logging.getLogger("distprompt.bench")


def _select(
    items: Sequence[SuiteItem],
    *,
    api: str,
    sources: Sequence[str] | None,
    max_items: int | None,
    allow_inexact: bool,
) -> tuple[list[SuiteItem], dict[str, int]]:
    known = sorted({it.source for it in items})
    if sources:
        unknown = sorted(set(sources) - set(known))
        if unknown:
            raise ConfigError(
                f"--sources: expected sources of the suite ({', '.join(known)}), found "
                f"{', '.join(unknown)}; check the spelling"
            )
    chosen: list[SuiteItem] = []
    skipped: Counter[str] = Counter()
    per_source: Counter[str] = Counter()
    for it in items:
        if sources and it.source not in sources:
            continue
        if api == "openai-chat":
            why = chat_eligible(it, allow_inexact=allow_inexact)
            if why is not None:
                skipped[why] += 1
                continue
        if max_items is not None and per_source[it.source] >= max_items:
            continue
        per_source[it.source] += 1
        chosen.append(it)
    return chosen, dict(sorted(skipped.items()))


@dataclass
class _Run:
    """State of one run: the client, the clock, the partial file and the counters."""

    client: Any
    api: str
    model: str | None
    ignore_eos: bool
    temperature: float
    timeout: float
    fh: IO[bytes] | None
    t0: float
    records: list[dict[str, Any]] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    first_error: dict[str, str] = field(default_factory=dict)
    tick: Callable[[dict[str, Any]], None] | None = None

    def add(self, rec: dict[str, Any]) -> None:
        self.records.append(rec)
        if rec["error_kind"]:
            self.errors[rec["error_kind"]] += 1
            self.first_error.setdefault(rec["error_kind"], rec["error"])
        if self.fh is not None:
            self.fh.write(orjson.dumps(rec) + b"\n")
            self.fh.flush()
        if self.tick is not None:
            self.tick(rec)


async def _request(run: _Run, job: Job) -> dict[str, Any]:
    import httpx
    from httpx_sse import SSEError, aconnect_sse

    it = job.item
    body = build_body(
        it, run.api, model=run.model, ignore_eos=run.ignore_eos, temperature=run.temperature
    )
    reader = StreamReader(run.api)
    kind: str | None = None
    msg: str | None = None
    start = time.perf_counter()

    async def go() -> None:
        nonlocal kind, msg
        async with aconnect_sse(run.client, "POST", PATHS[run.api], json=body) as es:
            r = es.response
            if r.status_code != 200:
                text = (await r.aread()).decode("utf-8", "replace")[:300]
                kind, msg = "http", f"HTTP {r.status_code}: {text}"
                return
            async for sse in es.aiter_sse():
                t = time.perf_counter() - start
                if sse.data.strip() == "[DONE]":
                    reader.done()
                    break
                if sse.data.strip():
                    reader.feed(sse.data, t)
                    if reader.server_error is not None:
                        break

    try:
        await asyncio.wait_for(go(), timeout=run.timeout)
    except asyncio.TimeoutError:
        kind, msg = "timeout", f"no complete reply within {run.timeout:g} s"
    except httpx.TimeoutException as exc:
        kind, msg = "timeout", f"{type(exc).__name__} after {run.timeout:g} s"
    except httpx.ConnectError as exc:
        kind, msg = "connect", f"cannot connect ({exc})"
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
        kind, msg = "disconnect", f"connection closed mid-reply ({type(exc).__name__}: {exc})"
    except SSEError as exc:
        kind, msg = "malformed", f"not an event stream ({exc})"
    except MalformedReply as exc:
        kind, msg = "malformed", str(exc)
    end = time.perf_counter()
    if kind is None and reader.server_error is not None:
        kind, msg = "server_error", reader.server_error
    if kind is None and not reader.finished:
        kind, msg = "disconnect", "the stream ended before [DONE]"
    spec = reader.spec.to_dict() if reader.spec is not None and kind is None else {}
    return {
        "id": it.id,
        "source": it.source,
        "cluster": it.cluster,
        "weight": it.weight if job.weight is None else job.weight,
        "item_weight": it.weight,
        "traffic": job.traffic,
        "reply_kind": reply_kind(it),
        "concurrency": job.concurrency,
        "api": run.api,
        "n_prompt_tokens": it.n_prompt_tokens,
        "cached_tokens": reader.cached_tokens if kind is None else None,
        "max_tokens": it.max_tokens,
        "start": start - run.t0,
        "end": end - run.t0,
        "ttft": reader.ttft if kind is None else None,
        "itl": reader.itl if kind is None else [],
        "output_tokens": reader.output_tokens if kind is None else 0,
        "output_tokens_counted": reader.completion_tokens is not None,
        "finish_reason": reader.finish_reason,
        "error_kind": kind,
        "error": msg,
        "spec_steps": spec.get("spec_steps"),
        "spec_accepted": spec.get("spec_accepted"),
        "spec_drafted": spec.get("spec_drafted"),
        "accept_length": spec.get("accept_length"),
        "accept_rate": spec.get("accept_rate"),
        "spec_histogram": spec.get("spec_histogram"),
        "spec_origin": spec.get("spec_origin"),
    }


async def _window(run: _Run, jobs: Sequence[Job], concurrency: int) -> None:
    sem = asyncio.Semaphore(concurrency)

    async def one(job: Job) -> None:
        async with sem:
            run.add(await _request(run, job))

    await asyncio.gather(*(one(j) for j in jobs))


def _suite_fingerprint(items: Sequence[SuiteItem]) -> str:
    h = hashlib.sha256()
    for it in sorted(items, key=lambda x: x.id):
        h.update(f"{it.id}\t{it.max_tokens}\n".encode())
    return h.hexdigest()[:16]


async def _run_all(
    run: _Run,
    url: str,
    windows_plan: Sequence[tuple[int, str, str, list[Job]]],
    windows: list[dict[str, Any]],
    meta: dict[str, Any],
    *,
    flush_cache: bool,
    checks: Callable[[dict[str, Any]], list[str]],
) -> None:
    run.model = await check_server(run.client, url, run.api, run.model)
    meta["model"] = run.model
    limits = await read_limits(run.client)
    meta["server_limits"] = limits
    for w in checks(limits):
        log.warning("%s", w)
        meta["warnings"].append(w)
    use_counters = await read_counters(run.client) is not None
    meta["spec_counters"] = use_counters
    flushes: Counter[str] = Counter()
    for c, traffic, src, jobs in windows_plan:
        if flush_cache:
            path, status = await flush_prefix_cache(run.client, run.api)
            flushes[f"{path} -> {status}"] += 1
            if status != 200 and flushes[f"{path} -> {status}"] == 1:
                w = (
                    f"--flush-cache: POST {path} answered {status or 'nothing'}; the prefix "
                    "cache was not emptied (vLLM serves it only with VLLM_SERVER_DEV_MODE=1)"
                )
                log.warning("%s", w)
                meta["warnings"].append(w)
        before = await read_counters(run.client) if use_counters else None
        n0 = len(run.records)
        await _window(run, jobs, c)
        new = run.records[n0:]
        if before is not None:
            after = await read_counters(run.client)
            if after is not None:
                windows.append(
                    {
                        "source": src,
                        "concurrency": c,
                        "traffic": traffic,
                        **counter_delta(before, after),
                    }
                )
        if n0 == 0 and not flush_cache:
            cached = sum(r.get("cached_tokens") or 0 for r in new)
            if cached > 0:
                w = (
                    f"the first window already found {cached} prompt tokens in the server's "
                    "prefix cache: it has served these prompts before (an earlier replay of the "
                    "suite?); its figures are not those of fresh traffic; pass --flush-cache"
                )
                log.warning("%s", w)
                meta["warnings"].append(w)
        if new and all(r["error_kind"] == "connect" for r in new):
            where = f"source {src}" if traffic == "per-source" else "mixed traffic"
            meta["stopped"] = f"server unreachable during concurrency {c}, {where}"
            return
    if flush_cache:
        meta["flushes"] = dict(sorted(flushes.items()))


@api_spelling
def bench(
    suite: str | os.PathLike[str],
    *,
    url: str,
    api: str,
    out: str | os.PathLike[str] | None = None,
    concurrency: Sequence[int] = (1, 4, 16, 64),
    label: str | None = None,
    sources: Sequence[str] | None = None,
    max_items: int | None = None,
    timeout: float = 600.0,
    ignore_eos: bool = False,
    temperature: float = 0.0,
    model: str | None = None,
    allow_inexact: bool = False,
    overwrite: bool = False,
    progress: bool = False,
    traffic: str = "per-source",
    flush_cache: bool = False,
    mixed_requests: int | None = None,
    seed: int = 0,
) -> BenchResults:
    """Replay a suite against a server and measure speed and speculative acceptance.

    Args:
        suite: Suite folder written by ``distprompt export`` (read with :meth:`Suite.load`).
        url: Server base URL, e.g. ``http://127.0.0.1:30000``.
        api: ``sglang`` (native ``/generate`` with the prompt ids), ``vllm`` (``/v1/completions``
            with the prompt ids) or ``openai-chat`` (``/v1/chat/completions`` with the messages,
            only items whose chat turns re-render to the exact ids).
        out: Results folder; requests are appended to it as they finish. None keeps them in
            memory only.
        concurrency: Levels to run, each for every source.
        label: Name of the run in summaries and comparisons (default: ``api``).
        sources: Only these sources.
        max_items: At most this many items per source (suite order).
        timeout: Seconds a request may take from send to its last event.
        ignore_eos: Generate exactly ``max_tokens`` (past EOS); off by default (see docs).
        temperature: Sampling temperature sent with every request.
        model: Model name for the OpenAI APIs (default: the first of ``/v1/models``).
        allow_inexact: ``openai-chat`` also sends items of fidelity ``text``.
        overwrite: Replace a previous result in ``out``.
        progress: Progress bar on stderr with the live output throughput.
        traffic: ``per-source`` (a window per source and level), ``mixed`` (a window per level
            of draws that follow the corpus mix, :func:`mixed_draws`) or ``both``.
        flush_cache: Empty the server's prefix cache before every window (SGLang
            ``/flush_cache``, vLLM ``/reset_prefix_cache``).
        mixed_requests: Requests of a mixed window (default: the number of items sent).
        seed: Seed of the mixed draws.

    Returns:
        The results; ``.complete`` is False when interrupted or stopped early.

    Raises:
        ConfigError: Bad options. ServerError: nothing answers at ``url``.
        InputError: No suite at ``suite``. OutputError: ``out`` cannot be used.

    Example:
        >>> res = bench("suite/", url="http://127.0.0.1:8000", api="vllm",
        ...             out="results/", concurrency=[1, 8])  # doctest: +SKIP
        >>> res.summary["corpus"][0]["accept_length"]  # doctest: +SKIP
    """
    from distprompt.write.suite import Suite

    levels = _check_options(api, timeout, concurrency, traffic, mixed_requests, url)
    out_path = Path(out) if out is not None else None
    if out_path is not None:
        check_results_dir(out_path, overwrite=overwrite)
    s = Suite.load(suite)
    items, skipped = _items_to_send(
        s.items, suite, api=api, sources=sources, max_items=max_items, allow_inexact=allow_inexact
    )
    shares = source_shares(s.manifest, sorted({it.source for it in items}))
    n_mixed = mixed_requests or len(items)
    plan = windows_plan(items, traffic, levels, shares, n_mixed, seed)
    passes = len(levels) * (2 if traffic == "both" else 1)
    mixed = next((p[3] for p in plan if p[1] == "mixed"), [])
    repeats = len(mixed) - len({j.item.id for j in mixed})
    # the traps of this run, said once the server's limits are read
    checks = functools.partial(
        preflight_warnings, items, levels, flush_cache=flush_cache, passes=passes, repeats=repeats
    )
    run = _Settings(
        api=api,
        url=url,
        label=label or api,
        model=model,
        ignore_eos=ignore_eos,
        temperature=temperature,
        timeout=timeout,
        levels=levels,
        traffic=traffic,
        n_mixed=n_mixed,
        seed=seed,
        flush_cache=flush_cache,
        progress=progress,
    )
    meta = _run_meta(s, items, str(suite), run, shares=shares, repeats=repeats, skipped=skipped)
    return _execute(plan, meta, out_path, run, checks)


@dataclass(frozen=True, slots=True)
class _Settings:
    """The options of one bench run, checked."""

    api: str
    url: str
    label: str
    model: str | None
    ignore_eos: bool
    temperature: float
    timeout: float
    levels: list[int]
    traffic: str
    n_mixed: int
    seed: int
    flush_cache: bool
    progress: bool


def _items_to_send(
    all_items: Sequence[SuiteItem],
    suite: str | os.PathLike[str],
    *,
    api: str,
    sources: Sequence[str] | None,
    max_items: int | None,
    allow_inexact: bool,
) -> tuple[list[SuiteItem], dict[str, int]]:
    """The items the run sends (:func:`_select`) and what was skipped, said in the log.

    Raises:
        ConfigError: Nothing is left to send.
    """
    items, skipped = _select(
        all_items, api=api, sources=sources, max_items=max_items, allow_inexact=allow_inexact
    )
    if not items:
        raise ConfigError(
            f"{suite}: expected items to send with --api {api}, found none"
            + (f" (skipped: {skipped})" if skipped else "")
            + "; check --sources, or use --api sglang/vllm which send the prompt ids"
        )
    if skipped:
        log.warning(
            "openai-chat sends only items whose chat turns re-render to the exact prompt ids: "
            "skipped %s (use --api sglang or vllm to send every item as token ids)",
            ", ".join(f"{v} ({k})" for k, v in skipped.items()),
        )
    return items, skipped


def _check_options(
    api: str,
    timeout: float,
    concurrency: Sequence[int],
    traffic: str,
    mixed_requests: int | None,
    url: str,
) -> list[int]:
    """The concurrency levels of a run, once its options are checked (before anything is read).

    Raises:
        ConfigError: An option is out of range.
    """
    if api not in APIS:
        raise ConfigError(f"--api: expected one of {', '.join(APIS)}, found {api!r}")
    if timeout <= 0:
        raise ConfigError(f"--timeout: expected a positive number of seconds, found {timeout}")
    levels = levels_of(concurrency)
    if traffic not in TRAFFIC:
        raise ConfigError(f"--traffic: expected one of {', '.join(TRAFFIC)}, found {traffic!r}")
    if mixed_requests is not None and mixed_requests < 1:
        raise ConfigError(f"--mixed-requests: expected a positive count, found {mixed_requests}")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"--url: expected http://HOST:PORT, found {url!r}")
    return levels


def _run_meta(
    s: Any,
    items: Sequence[SuiteItem],
    suite: str,
    run: _Settings,
    *,
    shares: dict[str, float],
    repeats: int,
    skipped: dict[str, int],
) -> dict[str, Any]:
    """The run's metadata as ``summary.json`` starts it (completed by :func:`_execute`)."""
    srcs = sorted({it.source for it in items})
    return {
        "label": run.label,
        "api": run.api,
        "url": run.url,
        "suite": str(suite),
        "suite_items": len(s.items),
        "items": len(items),
        "sources": srcs,
        "suite_fingerprint": _suite_fingerprint(items),
        "shares": shares,
        "shares_from": "manifest rows"
        if any((e := s.manifest.sources.get(x)) and e.rows for x in srcs)
        else "equal (manifest has no row counts)",
        "concurrency": run.levels,
        "traffic": run.traffic,
        "mixed_requests": run.n_mixed if run.traffic != "per-source" else None,
        "mixed_repeats": repeats if run.traffic != "per-source" else None,
        "seed": run.seed,
        "flush_cache": run.flush_cache,
        "warnings": [],
        "ignore_eos": run.ignore_eos,
        "temperature": run.temperature,
        "timeout": run.timeout,
        "skipped": skipped,
        "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "distprompt": __version__,
        "complete": False,
    }


def _execute(
    plan: list[tuple[int, str, str, list[Job]]],
    meta: dict[str, Any],
    out_path: Path | None,
    settings: _Settings,
    checks: Callable[[dict[str, Any]], list[str]],
) -> BenchResults:
    """Send the windows of ``plan``, append every request to ``out_path`` as it finishes, and
    save the results (marked incomplete on Ctrl-C, which raises :class:`BenchInterrupted`)."""
    windows: list[dict[str, Any]] = []
    fh: IO[bytes] | None = None
    created = False
    if out_path is not None:
        created = not out_path.exists()
        out_path.mkdir(parents=True, exist_ok=True)
        fh = open(out_path / PARTIAL_NAME, "wb")  # noqa: SIM115 - closed in the finally below
    bar = None
    if settings.progress:
        from tqdm import tqdm

        bar = tqdm(total=sum(len(p[3]) for p in plan), unit="req", desc="bench", leave=True)
    run = _Run(
        client=None,
        api=settings.api,
        model=settings.model,
        ignore_eos=settings.ignore_eos,
        temperature=settings.temperature,
        timeout=settings.timeout,
        fh=fh,
        t0=time.perf_counter(),
    )
    if bar is not None:
        run.tick = _ticker(bar, run)

    async def main() -> None:
        import httpx

        limits = httpx.Limits(
            max_connections=max(settings.levels) + 4, max_keepalive_connections=max(settings.levels)
        )
        async with httpx.AsyncClient(
            base_url=settings.url,
            timeout=httpx.Timeout(settings.timeout, connect=min(settings.timeout, 30.0)),
            limits=limits,
        ) as client:
            run.client = client
            await _run_all(
                run,
                settings.url,
                plan,
                windows,
                meta,
                flush_cache=settings.flush_cache,
                checks=checks,
            )

    interrupted: BaseException | None = None
    try:
        asyncio.run(main())
        meta["complete"] = "stopped" not in meta
    except KeyboardInterrupt as exc:
        interrupted = exc
        meta["stopped"] = "interrupted"
    except BaseException:
        # Nothing measured worth keeping (the server is down, a bad option): leave no partial.
        if fh is not None:
            fh.close()
            with contextlib.suppress(OSError):
                os.unlink(out_path / PARTIAL_NAME)  # type: ignore[operator]
            if created:
                with contextlib.suppress(OSError):
                    out_path.rmdir()  # type: ignore[union-attr]
        raise
    finally:
        if bar is not None:
            bar.close()
        if fh is not None:
            fh.close()
        meta["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        meta["errors"] = dict(sorted(run.errors.items()))
        meta["first_error"] = dict(sorted(run.first_error.items()))
    res = BenchResults(run.records, meta, windows)
    if out_path is not None:
        res.save(out_path, overwrite=True)
    if interrupted is not None:
        raise BenchInterrupted(res) from interrupted
    return res


class BenchInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`bench`: ``.results`` holds what finished (saved, marked incomplete)."""

    def __init__(self, results: BenchResults) -> None:
        super().__init__("interrupted")
        self.results = results


def _ticker(bar: Any, run: _Run) -> Callable[[dict[str, Any]], None]:
    recent: list[tuple[float, int]] = []

    def tick(rec: dict[str, Any]) -> None:
        recent.append((rec["end"], rec["output_tokens"]))
        del recent[:-64]
        span = recent[-1][0] - recent[0][0] if len(recent) > 1 else 0.0
        tok_s = sum(n for _, n in recent[1:]) / span if span > 0 else 0.0
        errs = sum(run.errors.values())
        bar.set_postfix_str(f"c={rec['concurrency']} {rec['source']} {tok_s:,.0f} tok/s err={errs}")
        bar.update(1)

    return tick
