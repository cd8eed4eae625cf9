"""What bench asks the server besides the requests: that it answers (and its model name), its
limits (:func:`server_limits`) and the traps they set (:func:`preflight_warnings`), its
speculative counters before and after a window, and a flush of its prefix cache.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from distprompt.benchmark.protocol import parse_counters
from distprompt.errors import ServerError
from distprompt.records import SuiteItem

__all__ = [
    "FLUSH_PATHS",
    "check_server",
    "counter_delta",
    "flush_prefix_cache",
    "http_get",
    "preflight_warnings",
    "read_counters",
    "read_limits",
    "server_limits",
]

log = logging.getLogger("distprompt.bench")


#: Where each API empties its prefix cache: SGLang ``POST /flush_cache``; vLLM
#: ``POST /reset_prefix_cache`` (served only with ``VLLM_SERVER_DEV_MODE=1``).
FLUSH_PATHS = {
    "sglang": ("/flush_cache",),
    "vllm": ("/reset_prefix_cache",),
    "openai-chat": ("/reset_prefix_cache", "/flush_cache"),
}


async def http_get(client: Any, path: str) -> tuple[int, str] | None:
    import httpx

    try:
        r = await client.get(path)
    except httpx.HTTPError:
        return None
    return r.status_code, r.text


async def check_server(client: Any, url: str, api: str, model: str | None) -> str | None:
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
    got = await http_get(client, "/v1/models")
    if got is not None and got[0] == 200:
        with contextlib.suppress(orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            return str(orjson.loads(got[1])["data"][0]["id"])
    log.warning("GET /v1/models gave no model name; requests go without 'model' (pass --model)")
    return None


async def read_counters(client: Any) -> dict[str, Any] | None:
    got = await http_get(client, "/metrics")
    if got is None or got[0] != 200:
        return None
    try:
        c = parse_counters(got[1])
    except ValueError:
        return None
    return c if "drafts" in c else None


def counter_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
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


async def get_json(client: Any, path: str) -> Any:
    got = await http_get(client, path)
    if got is None or got[0] != 200:
        return None
    try:
        return orjson.loads(got[1])
    except orjson.JSONDecodeError:
        return None


async def read_limits(client: Any) -> dict[str, Any]:
    info = None
    for path in ("/server_info", "/get_server_info"):  # SGLang renamed it; both still answer
        info = await get_json(client, path)
        if isinstance(info, dict):
            break
    return server_limits(info, await get_json(client, "/v1/models"))


async def flush_prefix_cache(client: Any, api: str) -> tuple[str, int | None]:
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
