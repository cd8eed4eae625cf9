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
import hashlib
import logging
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
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
    parse_counters,
)
from distprompt.benchmark.report import SUMMARY_JSON
from distprompt.errors import ConfigError, InputError, OutputError, ServerError, api_spelling
from distprompt.records import SuiteItem
from distprompt.write.out_dir import atomic_write_lines

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

REQUESTS_NAME = "requests.jsonl"
PARTIAL_NAME = ".requests.jsonl.partial"
TRAFFIC = ("per-source", "mixed", "both")
#: Where each API empties its prefix cache: SGLang ``POST /flush_cache``; vLLM
#: ``POST /reset_prefix_cache`` (served only with ``VLLM_SERVER_DEV_MODE=1``).
FLUSH_PATHS = {
    "sglang": ("/flush_cache",),
    "vllm": ("/reset_prefix_cache",),
    "openai-chat": ("/reset_prefix_cache", "/flush_cache"),
}


@dataclass(frozen=True, slots=True)
class _Job:
    item: SuiteItem
    concurrency: int
    traffic: str = "per-source"
    weight: float | None = None  # None: the item's weight


_TOOL_MARKERS = ("<tool_call>", "<|tool_call", "[TOOL_CALLS]", "<｜tool▁call", "<function=")
_CODE_LINE = re.compile(
    r"^\s*(def |class |import |from \S+ import |#include|function |fn |public |package )", re.M
)


def reply_kind(item: SuiteItem) -> str:
    """What the item's recorded reply is: ``tool call``, ``reasoning``, ``code``, ``prose``, or
    ``unknown`` (no recorded reply), judged on its decoded text in that order of precedence: a
    tool-call marker (``<tool_call>``, ``<|tool_call``, ``[TOOL_CALLS]``, …); a non-empty
    ``<think>…</think>`` block; a code fence or a line opening like code; else prose.

    Example:
        >>> from distprompt.records import Provenance
        >>> it = SuiteItem("a", "s", "p", 1, 1, 1, 0, 1, 1.0, Provenance("f", 1, 0), (1,),
        ...                response="<think>hm</think>ok")
        >>> reply_kind(it)
        'reasoning'
    """
    text = item.response or ""
    if not text.strip():
        return "unknown"
    if any(m in text for m in _TOOL_MARKERS):
        return "tool call"
    head, sep, rest = text.partition("</think>")
    if sep:  # an empty thinking block (thinking switched off) is no reasoning
        if head.replace("<think>", "").strip():
            return "reasoning"
        text = rest
    if "```" in text or _CODE_LINE.search(text):
        return "code"
    return "prose"


def mixed_draws(
    items: Sequence[SuiteItem], shares: Mapping[str, float], n: int, *, seed: int = 0
) -> list[SuiteItem]:
    """``n`` draws of the items, each drawn in proportion to ``p_i = share_s · w_i /
    Σ_{j∈s} w_j`` (traffic that follows the corpus mix), in a seeded interleaved order.

    Systematic sampling with probability proportional to ``p_i`` (items in a seeded random
    order, one random start, ``n`` equal steps along their cumulated ``n·p_i``): each item is
    drawn ``⌊n·p_i⌋`` or ``⌈n·p_i⌉`` times: a window's composition is the mix up to rounding,
    not the mix plus the chance of independent draws, and it repeats items only as the mix
    needs. Each draw then counts once (weight 1) in the ratios of sums, which estimate the same
    ``Σ w'·num / Σ w'·den`` as the per-source windows' item weights do.

    Example:
        >>> from distprompt.records import Provenance
        >>> mk = lambda i, s: SuiteItem(i, s, "p", 1, 1, 1, 0, 1, 1.0, Provenance("f", 1, 0), (1,))
        >>> d = mixed_draws([mk("a", "x"), mk("b", "y")], {"x": 0.9, "y": 0.1}, 1000)
        >>> 850 < sum(it.source == "x" for it in d) < 950
        True
    """
    import numpy as np

    if not items or n <= 0:
        return []
    tot: dict[str, float] = {}
    for it in items:
        tot[it.source] = tot.get(it.source, 0.0) + max(it.weight, 0.0)
    count = Counter(it.source for it in items)
    p = np.asarray(
        [
            shares.get(it.source, 0.0)
            * (max(it.weight, 0.0) / tot[it.source] if tot[it.source] > 0 else 1 / count[it.source])
            for it in items
        ],
        dtype=float,
    )
    if not p.sum() > 0:
        p = np.ones(len(items))
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(items))
    edges = np.concatenate([[0.0], np.cumsum(p[order] / p.sum() * n)])
    edges[-1] = n  # the last edge exactly n, whatever the rounding of the sum
    # the points u, u + 1, …, u + n - 1 and the item whose interval holds each
    hits = np.searchsorted(edges, rng.uniform() + np.arange(n), side="right") - 1
    idx = order[np.minimum(hits, len(items) - 1)]
    rng.shuffle(idx)
    return [items[int(i)] for i in idx]


class BenchResults:
    """The requests of a bench run (one dict per request, as in ``requests.jsonl``) and its
    metadata; the summary is computed from them on demand.

    Example:
        >>> res = bench("suite/", url="http://127.0.0.1:30000", api="sglang")  # doctest: +SKIP
        >>> res.summary["by_source"][0]["accept_length"]  # Σ w·tokens / Σ w·steps  # doctest: +SKIP
        >>> df = res.to_polars()  # one row per request  # doctest: +SKIP
        >>> res.save("results/")  # doctest: +SKIP
    """

    def __init__(
        self,
        requests: Sequence[dict[str, Any]],
        meta: dict[str, Any],
        windows: Sequence[dict[str, Any]] = (),
    ) -> None:
        self.requests: list[dict[str, Any]] = list(requests)
        self.meta = meta
        self.windows: list[dict[str, Any]] = list(windows)
        self._summary: dict[str, Any] | None = None

    def __len__(self) -> int:
        return len(self.requests)

    def __repr__(self) -> str:
        state = "complete" if self.complete else "incomplete"
        return f"BenchResults({len(self.requests)} requests, {self.meta.get('api')}, {state})"

    @property
    def complete(self) -> bool:
        """False when the run was interrupted or stopped early (what finished is kept)."""
        return bool(self.meta.get("complete", False))

    @property
    def summary(self) -> dict[str, Any]:
        """The figures of ``summary.json`` (see :func:`distprompt.benchmark.stats.summarize`)."""
        if self._summary is None:
            from distprompt.benchmark.stats import summarize

            self._summary = summarize(self.requests, self.windows, self.meta)
        return self._summary

    def to_polars(self) -> Any:
        """One row per request (ITL and the spec histogram as list columns)."""
        import polars as pl

        return pl.DataFrame(self.requests, infer_schema_length=None)

    @api_spelling
    def save(self, out: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Write ``requests.jsonl`` (atomically), ``summary.json``, ``summary.md`` and the plot.

        Raises:
            OutputError: ``out`` holds files that are not a previous bench result, or holds a
                result and ``overwrite`` is not set.
        """
        p = Path(out)
        if not (p / PARTIAL_NAME).is_file():  # a run writing here has already checked
            check_results_dir(p, overwrite=overwrite)
        atomic_write_lines(p / REQUESTS_NAME, (orjson.dumps(r) for r in self.requests))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p / PARTIAL_NAME)
        self.write_summary(p)
        return p

    def write_summary(self, out: Path) -> None:
        from distprompt.benchmark.report import write_summary_files

        write_summary_files(out, self.summary, self.meta)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> BenchResults:
        """Read a results folder written by :meth:`save` (or by an interrupted run).

        Raises:
            InputError: No bench result at ``path``.
        """
        p = Path(path)
        req_path = p / REQUESTS_NAME
        if not req_path.is_file() and (p / PARTIAL_NAME).is_file():
            req_path = p / PARTIAL_NAME  # a run killed without clean-up (SIGKILL)
        if not req_path.is_file() or not (p / SUMMARY_JSON).is_file():
            raise InputError(
                f"{p}: expected a bench results folder with {REQUESTS_NAME} and {SUMMARY_JSON}, "
                "found none; pass the --out folder of a finished `distprompt bench`"
            )
        summary = orjson.loads((p / SUMMARY_JSON).read_bytes())
        requests = []
        with open(req_path, "rb") as fh:
            for n, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        requests.append(orjson.loads(line))
                    except orjson.JSONDecodeError as exc:
                        raise InputError(
                            f"{req_path}:{n}: expected a JSON request record, found {exc}; "
                            "the file was cut short — run the benchmark again"
                        ) from exc
        return cls(requests, summary.get("meta", {}), summary.get("windows", []))


def check_results_dir(out: Path, *, overwrite: bool) -> None:
    """Refuse a results folder that holds something else, before any request is sent.

    Raises:
        OutputError: ``out`` is a file; holds files but no previous result; holds a previous
            result and ``overwrite`` is not set.
    """
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: expected a results folder, found a file; choose another --out")
    if out.is_dir() and any(out.iterdir()):
        ours = (out / SUMMARY_JSON).is_file() or (out / REQUESTS_NAME).is_file()
        if not ours:
            raise OutputError(
                f"{out}: expected an empty or new results folder, found other files in it; "
                "choose another --out"
            )
        if not overwrite:
            raise OutputError(
                f"{out}: expected an empty or new results folder, found a previous bench result; "
                "pass --overwrite to replace it, or choose another --out"
            )


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


def source_shares(manifest: dict[str, Any], sources: Sequence[str]) -> dict[str, float]:
    """Each benchmarked source's share of the corpus rows (renormalised over them)."""
    rows = {s: float((manifest.get("sources", {}).get(s) or {}).get("rows", 0)) for s in sources}
    total = sum(rows.values())
    if total <= 0:  # a suite without row counts: equal shares, said in the summary
        return {s: 1.0 / len(sources) for s in sources} if sources else {}
    return {s: rows[s] / total for s in sorted(sources)}


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


async def _request(run: _Run, job: _Job) -> dict[str, Any]:
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


async def _window(run: _Run, jobs: Sequence[_Job], concurrency: int) -> None:
    sem = asyncio.Semaphore(concurrency)

    async def one(job: _Job) -> None:
        async with sem:
            run.add(await _request(run, job))

    await asyncio.gather(*(one(j) for j in jobs))


async def _get(client: Any, path: str) -> tuple[int, str] | None:
    import httpx

    try:
        r = await client.get(path)
    except httpx.HTTPError:
        return None
    return r.status_code, r.text


async def _preflight(client: Any, url: str, api: str, model: str | None) -> str | None:
    """Check something answers at ``url`` and find the model name for OpenAI APIs."""
    import httpx

    try:
        r = await client.get("/health")
    except httpx.HTTPError as exc:
        raise ServerError(
            f"{url}: expected a {api} server, found {type(exc).__name__} ({exc}); start the "
            "server, wait until it is ready, or fix --url"
        ) from exc
    log.info("GET /health -> %s", r.status_code)
    if api == "sglang" or model:
        return model
    got = await _get(client, "/v1/models")
    if got is not None and got[0] == 200:
        with contextlib.suppress(orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            return str(orjson.loads(got[1])["data"][0]["id"])
    log.warning("GET /v1/models gave no model name; requests go without 'model' (pass --model)")
    return None


async def _counters(client: Any) -> dict[str, Any] | None:
    got = await _get(client, "/metrics")
    if got is None or got[0] != 200:
        return None
    try:
        c = parse_counters(got[1])
    except ValueError:
        return None
    return c if "drafts" in c else None


def _delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        k: after.get(k, 0.0) - before.get(k, 0.0)
        for k in ("drafts", "draft_tokens", "accepted_tokens")
    }
    pa, pb = after.get("per_pos", []), before.get("per_pos", [])
    out["per_pos"] = [a - (pb[i] if i < len(pb) else 0.0) for i, a in enumerate(pa)]
    return out


def server_limits(
    server_info: Mapping[str, Any] | None, models: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The limits a server exposes, from SGLang's ``/server_info`` (``/get_server_info``) and the
    OpenAI ``/v1/models`` (vLLM's ``max_model_len``); keys absent where nothing says.

    Returns:
        ``max_running_requests`` (SGLang's effective cap: ``internal_states[].
        effective_max_running_requests_per_dp`` × ``dp_size``, else the ``max_running_requests``
        argument), ``context_length`` (SGLang ``context_length``, vLLM ``max_model_len``),
        ``speculative`` (SGLang ``speculative_algorithm``, ``speculative_num_steps``,
        ``speculative_num_draft_tokens``, ``speculative_eagle_topk``) and ``from`` (the fields
        read).

    Example:
        >>> server_limits(None, {"data": [{"id": "m", "max_model_len": 4096}]})
        {'context_length': 4096, 'from': ['/v1/models max_model_len']}
    """
    out: dict[str, Any] = {}
    read: list[str] = []
    info = server_info if isinstance(server_info, Mapping) else {}
    states = info.get("internal_states")
    caps: list[int] = []
    for st in states if isinstance(states, list) else []:
        v = st.get("effective_max_running_requests_per_dp") if isinstance(st, Mapping) else None
        if isinstance(v, int | float) and not isinstance(v, bool):
            caps.append(int(v))
    if caps:
        dp = info.get("dp_size")
        out["max_running_requests"] = min(caps) * (int(dp) if isinstance(dp, int) and dp else 1)
        read.append("server_info internal_states.effective_max_running_requests_per_dp")
    elif isinstance(info.get("max_running_requests"), int):
        out["max_running_requests"] = int(info["max_running_requests"])
        read.append("server_info max_running_requests")
    if isinstance(info.get("context_length"), int):
        out["context_length"] = int(info["context_length"])
        read.append("server_info context_length")
    spec = {
        k.removeprefix("speculative_"): info[k]
        for k in (
            "speculative_algorithm",
            "speculative_num_steps",
            "speculative_num_draft_tokens",
            "speculative_eagle_topk",
        )
        if info.get(k) is not None
    }
    if spec:
        out["speculative"] = spec
    data = models.get("data") if isinstance(models, Mapping) else None
    if "context_length" not in out and isinstance(data, list) and data:
        first = data[0]
        if isinstance(first, Mapping) and isinstance(first.get("max_model_len"), int):
            out["context_length"] = int(first["max_model_len"])
            read.append("/v1/models max_model_len")
    if read:
        out["from"] = read
    return out


def preflight_warnings(
    items: Sequence[SuiteItem],
    levels: Sequence[int],
    limits: Mapping[str, Any],
    *,
    flush_cache: bool,
    passes: int,
    repeats: int = 0,
) -> list[str]:
    """The traps of a run, said before its first request: a concurrency level above the
    server's running-request cap, items that do not fit its context, a replay without flushing.

    Args:
        items: The items to send.
        levels: Concurrency levels.
        limits: :func:`server_limits` of the server.
        flush_cache: Whether the prefix cache is flushed before every window.
        passes: How many times the run sends the suite (levels × traffic modes).
        repeats: Draws of a mixed window that repeat an item drawn earlier in it.
    """
    out = []
    cap = limits.get("max_running_requests")
    if cap is not None:
        over = [c for c in levels if c > cap]
        if over:
            out.append(
                f"concurrency {', '.join(map(str, over))} above the server's "
                f"max_running_requests {cap}: at most {cap} requests run at once and the rest "
                "queue, so these levels measure queueing, not that many concurrent requests "
                "(SGLang lowers max_running_requests on speculative servers unless "
                "--max-running-requests is given)"
            )
    ctx = limits.get("context_length")
    if ctx is not None:
        long = [it for it in items if it.n_prompt_tokens + it.max_tokens > ctx]
        if long:
            out.append(
                f"{len(long)} items need more than the server's context length {ctx} "
                f"(prompt + max_tokens), e.g. {', '.join(it.id for it in long[:3])}: the server "
                "refuses or cuts them; serve a longer context or leave their sources out"
            )
    if cap is None and ctx is None:
        out.append(
            "the server exposes no limits (no /server_info, no max_model_len in /v1/models): "
            "concurrency and context length were not checked against it"
        )
    if repeats:
        out.append(
            f"{repeats} requests of each mixed window repeat an item drawn earlier in it (the "
            "mix draws some items more than once): their prompts may come from the prefix "
            "cache even with --flush-cache (see prompt_cached_fraction); fewer "
            "--mixed-requests repeat less"
        )
    if not flush_cache and passes > 1:
        out.append(
            f"the suite is sent {passes} times to the same server without --flush-cache: from "
            "the second pass on its prompts may come from the prefix cache (shorter TTFT, more "
            "throughput than fresh traffic); pass --flush-cache"
        )
    return out


async def _json(client: Any, path: str) -> Any:
    got = await _get(client, path)
    if got is None or got[0] != 200:
        return None
    try:
        return orjson.loads(got[1])
    except orjson.JSONDecodeError:
        return None


async def _read_limits(client: Any) -> dict[str, Any]:
    info = None
    for path in ("/server_info", "/get_server_info"):  # SGLang renamed it; both still answer
        info = await _json(client, path)
        if isinstance(info, dict):
            break
    return server_limits(info, await _json(client, "/v1/models"))


async def _flush(client: Any, api: str) -> tuple[str, int | None]:
    """POST the API's prefix-cache flush; the path tried last and its status (None: no answer)."""
    import httpx

    path, status = FLUSH_PATHS[api][0], None
    for path in FLUSH_PATHS[api]:
        try:
            r = await client.post(path)
        except httpx.HTTPError:
            status = None
            continue
        status = r.status_code
        if status == 200:
            break
    return path, status


def _suite_fingerprint(items: Sequence[SuiteItem]) -> str:
    h = hashlib.sha256()
    for it in sorted(items, key=lambda x: x.id):
        h.update(f"{it.id}\t{it.max_tokens}\n".encode())
    return h.hexdigest()[:16]


def _passes(
    items: Sequence[SuiteItem],
    traffic: str,
    levels: Sequence[int],
    shares: Mapping[str, float],
    n_mixed: int,
    seed: int,
) -> list[tuple[int, str, str, list[_Job]]]:
    """The windows of the run in order: ``(concurrency, traffic, source or "*", jobs)``."""
    out = []
    sources = sorted({it.source for it in items})
    for c in levels:
        if traffic in ("per-source", "both"):
            for src in sources:
                out.append(
                    (c, "per-source", src, [_Job(it, c) for it in items if it.source == src])
                )
        if traffic in ("mixed", "both"):
            # the same draws at every level (and in every run of the suite with this seed), so
            # levels and runs compare like with like
            draws = mixed_draws(items, shares, n_mixed, seed=seed)
            out.append((c, "mixed", "*", [_Job(it, c, "mixed", 1.0) for it in draws]))
    return out


async def _run_all(
    run: _Run,
    url: str,
    windows_plan: Sequence[tuple[int, str, str, list[_Job]]],
    windows: list[dict[str, Any]],
    meta: dict[str, Any],
    *,
    flush_cache: bool,
    checks: Callable[[dict[str, Any]], list[str]],
) -> None:
    run.model = await _preflight(run.client, url, run.api, run.model)
    meta["model"] = run.model
    limits = await _read_limits(run.client)
    meta["server_limits"] = limits
    for w in checks(limits):
        log.warning("%s", w)
        meta["warnings"].append(w)
    use_counters = await _counters(run.client) is not None
    meta["spec_counters"] = use_counters
    flushes: Counter[str] = Counter()
    for c, traffic, src, jobs in windows_plan:
        if flush_cache:
            path, status = await _flush(run.client, run.api)
            flushes[f"{path} -> {status}"] += 1
            if status != 200 and flushes[f"{path} -> {status}"] == 1:
                w = (
                    f"--flush-cache: POST {path} answered {status or 'nothing'}; the prefix "
                    "cache was not emptied (vLLM serves it only with VLLM_SERVER_DEV_MODE=1)"
                )
                log.warning("%s", w)
                meta["warnings"].append(w)
        before = await _counters(run.client) if use_counters else None
        n0 = len(run.records)
        await _window(run, jobs, c)
        new = run.records[n0:]
        if before is not None:
            after = await _counters(run.client)
            if after is not None:
                windows.append(
                    {"source": src, "concurrency": c, "traffic": traffic, **_delta(before, after)}
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


def _levels(concurrency: Sequence[int]) -> list[int]:
    levels = list(dict.fromkeys(int(c) for c in concurrency))
    if not levels or any(c < 1 for c in levels):
        raise ConfigError(
            f"--concurrency: expected positive integers such as 1,4,16,64, found {concurrency}"
        )
    return levels


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

    if api not in APIS:
        raise ConfigError(f"--api: expected one of {', '.join(APIS)}, found {api!r}")
    if timeout <= 0:
        raise ConfigError(f"--timeout: expected a positive number of seconds, found {timeout}")
    levels = _levels(concurrency)
    if traffic not in TRAFFIC:
        raise ConfigError(f"--traffic: expected one of {', '.join(TRAFFIC)}, found {traffic!r}")
    if mixed_requests is not None and mixed_requests < 1:
        raise ConfigError(f"--mixed-requests: expected a positive count, found {mixed_requests}")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"--url: expected http://HOST:PORT, found {url!r}")
    out_path = Path(out) if out is not None else None
    if out_path is not None:
        check_results_dir(out_path, overwrite=overwrite)
    s = Suite.load(suite)
    items, skipped = _select(
        s.items, api=api, sources=sources, max_items=max_items, allow_inexact=allow_inexact
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
    srcs = sorted({it.source for it in items})
    shares = source_shares(s.manifest, srcs)
    n_mixed = mixed_requests or len(items)
    plan = _passes(items, traffic, levels, shares, n_mixed, seed)
    passes = len(levels) * (2 if traffic == "both" else 1)
    mixed = next((p[3] for p in plan if p[1] == "mixed"), [])
    repeats = len(mixed) - len({j.item.id for j in mixed})

    def checks(limits: dict[str, Any]) -> list[str]:
        return preflight_warnings(
            items, levels, limits, flush_cache=flush_cache, passes=passes, repeats=repeats
        )

    meta: dict[str, Any] = {
        "label": label or api,
        "api": api,
        "url": url,
        "suite": str(suite),
        "suite_items": len(s.items),
        "items": len(items),
        "sources": srcs,
        "suite_fingerprint": _suite_fingerprint(items),
        "shares": shares,
        "shares_from": "manifest rows"
        if any((s.manifest.get("sources", {}).get(x) or {}).get("rows") for x in srcs)
        else "equal (manifest has no row counts)",
        "concurrency": levels,
        "traffic": traffic,
        "mixed_requests": n_mixed if traffic != "per-source" else None,
        "mixed_repeats": repeats if traffic != "per-source" else None,
        "seed": seed,
        "flush_cache": flush_cache,
        "warnings": [],
        "ignore_eos": ignore_eos,
        "temperature": temperature,
        "timeout": timeout,
        "skipped": skipped,
        "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "distprompt": __version__,
        "complete": False,
    }
    windows: list[dict[str, Any]] = []
    fh: IO[bytes] | None = None
    created = False
    if out_path is not None:
        created = not out_path.exists()
        out_path.mkdir(parents=True, exist_ok=True)
        fh = open(out_path / PARTIAL_NAME, "wb")  # noqa: SIM115 - closed in the finally below
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=sum(len(p[3]) for p in plan), unit="req", desc="bench", leave=True)
    run = _Run(
        client=None,
        api=api,
        model=model,
        ignore_eos=ignore_eos,
        temperature=temperature,
        timeout=timeout,
        fh=fh,
        t0=time.perf_counter(),
    )
    if bar is not None:
        run.tick = _ticker(bar, run)

    async def main() -> None:
        import httpx

        limits = httpx.Limits(
            max_connections=max(levels) + 4, max_keepalive_connections=max(levels)
        )
        async with httpx.AsyncClient(
            base_url=url, timeout=httpx.Timeout(timeout, connect=min(timeout, 30.0)), limits=limits
        ) as client:
            run.client = client
            await _run_all(run, url, plan, windows, meta, flush_cache=flush_cache, checks=checks)

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
