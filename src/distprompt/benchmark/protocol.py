"""What ``distprompt bench`` sends to each server API and how it reads the streamed replies.

Three APIs, each carrying a suite item exactly (field names as read in the servers' sources;
the versions and files are recorded in ``docs/bench.md``):

``sglang``       native ``POST /generate`` with ``input_ids`` = the item's ``prompt_ids`` and
                 ``sampling_params.max_new_tokens`` = its ``max_tokens``. Streamed as
                 ``data: {"text", "output_ids", "meta_info"}`` events (cumulative unless the
                 server runs with incremental streaming) and ``data: [DONE]``; on the last event
                 ``meta_info`` carries ``completion_tokens`` and, with speculation on,
                 ``spec_verify_ct``, ``spec_accept_length``, ``spec_accept_rate``,
                 ``spec_num_correct_drafts``, ``spec_num_proposed_drafts`` and
                 ``spec_correct_drafts_histogram``.
``vllm``         ``POST /v1/completions`` with ``prompt`` = the token-id list, ``max_tokens``,
                 ``stream_options.include_usage``; the trailing usage event (empty ``choices``)
                 carries ``usage.completion_tokens`` (and ``usage.prompt_tokens_details.
                 cached_tokens`` with ``--enable-prompt-tokens-details``) and, with
                 ``--per-request-spec-decode-metrics``, ``metrics.speculative_decoding``.
``openai-chat``  ``POST /v1/chat/completions`` with the item's ``messages`` (+ ``tools``,
                 ``chat_template_kwargs``), for items whose chat turns re-render to the exact
                 prompt ids (``fidelity == "tokens"``) unless asked otherwise.

Nothing here does I/O: :class:`StreamReader` is fed decoded events and their arrival times.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from distprompt.records import SuiteItem

__all__ = [
    "APIS",
    "PATHS",
    "SPEC_COUNTERS",
    "MalformedReply",
    "SpecFigures",
    "StreamReader",
    "build_body",
    "chat_eligible",
    "parse_counters",
]

APIS = ("sglang", "vllm", "openai-chat")
PATHS = {"sglang": "/generate", "vllm": "/v1/completions", "openai-chat": "/v1/chat/completions"}

# vLLM's Prometheus counters (vllm/v1/spec_decode/metrics.py), as `vllm bench serve` reads them
# before and after a run (vllm/benchmarks/serve.py: fetch_spec_decode_metrics).
SPEC_COUNTERS = {
    "drafts": "vllm:spec_decode_num_drafts_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
}
SPEC_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


class MalformedReply(ValueError):
    """A reply event that is not the JSON shape the API documents."""


def chat_eligible(item: SuiteItem, *, allow_inexact: bool = False) -> str | None:
    """Why ``item`` cannot go to a chat endpoint, or None when it can.

    Only items whose recovered ``messages`` re-render through the chat template to the exact
    prompt ids (``fidelity == "tokens"``) carry the prompt exactly; ``text`` items are sent only
    with ``allow_inexact``; ``lossy`` items and items without messages never.
    """
    if not item.messages:
        return "no recovered messages"
    if item.fidelity == "tokens" or (allow_inexact and item.fidelity == "text"):
        return None
    return f"fidelity {item.fidelity or 'unknown'}"


def build_body(
    item: SuiteItem,
    api: str,
    *,
    model: str | None,
    ignore_eos: bool,
    temperature: float,
) -> dict[str, Any]:
    """The JSON body of the streamed request that replays ``item`` on ``api``."""
    if api == "sglang":
        return {
            "input_ids": list(item.prompt_ids),
            "sampling_params": {
                "max_new_tokens": item.max_tokens,
                "temperature": temperature,
                "ignore_eos": ignore_eos,
            },
            "stream": True,
        }
    body: dict[str, Any] = {}
    if model:
        body["model"] = model
    if api == "vllm":
        body["prompt"] = list(item.prompt_ids)
    elif api == "openai-chat":
        body["messages"] = list(item.messages or ())
        if item.tools:
            body["tools"] = list(item.tools)
        if item.chat_template_kwargs:
            body["chat_template_kwargs"] = dict(item.chat_template_kwargs)
    else:
        raise ValueError(f"unknown api {api!r}")
    body.update(
        {
            "max_tokens": item.max_tokens,
            "temperature": temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    if ignore_eos:  # a vLLM/SGLang extension: strict OpenAI servers refuse unknown keys
        body["ignore_eos"] = True
    return body


@dataclass(frozen=True, slots=True)
class SpecFigures:
    """Speculative-decoding figures of one request, in one vocabulary for both servers.

    Attributes:
        steps: Verify steps (SGLang ``spec_verify_ct``, vLLM ``num_spec_steps``).
        accepted: Accepted draft tokens (``spec_num_correct_drafts`` /
            ``num_accepted_draft_tokens``).
        drafted: Proposed draft tokens (``spec_num_proposed_drafts`` / ``num_draft_tokens``).
        accept_length: Tokens emitted per verify step, bonus token included, as the server
            reported it (``spec_accept_length`` = completion_tokens / verify_ct;
            ``mean_acceptance_length`` = 1 + accepted / steps).
        accept_rate: Accepted / proposed draft tokens (``spec_accept_rate`` /
            ``draft_acceptance_rate``).
        histogram: Steps that accepted exactly j drafts, j = 0, 1, … (when reported).
        origin: ``sglang.meta_info`` or ``vllm.metrics``.
    """

    steps: int | None
    accepted: int | None
    drafted: int | None
    accept_length: float | None
    accept_rate: float | None
    histogram: tuple[int, ...] | None
    origin: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec_steps": self.steps,
            "spec_accepted": self.accepted,
            "spec_drafted": self.drafted,
            "accept_length": self.accept_length,
            "accept_rate": self.accept_rate,
            "spec_histogram": list(self.histogram) if self.histogram is not None else None,
            "spec_origin": self.origin,
        }


def _num(d: dict[str, Any], key: str) -> float | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise MalformedReply(f"expected a number in {key!r}, found {v!r}")
    return float(v)


def _int(d: dict[str, Any], key: str) -> int | None:
    v = _num(d, key)
    return None if v is None else int(v)


def _hist(v: Any) -> tuple[int, ...] | None:
    if v is None:
        return None
    if not isinstance(v, list) or not all(isinstance(x, int) for x in v):
        raise MalformedReply(f"expected a list of integers as histogram, found {v!r}")
    return tuple(v)


def _sglang_spec(meta: dict[str, Any]) -> SpecFigures | None:
    steps = _int(meta, "spec_verify_ct")
    if not steps:  # SGLang adds the figures only when speculation ran a verify step
        return None
    # The names before SGLang's rename are still sent as aliases; older servers send only them
    # (and the oldest only spec_verify_ct, from which bench_serving derives the length).
    accepted = _int(meta, "spec_num_correct_drafts")
    if accepted is None:
        accepted = _int(meta, "spec_accepted_drafts")
    drafted = _int(meta, "spec_num_proposed_drafts")
    if drafted is None:
        drafted = _int(meta, "spec_proposed_drafts")
    length = _num(meta, "spec_accept_length")
    if length is None and _int(meta, "completion_tokens") is not None:
        length = float(meta["completion_tokens"]) / steps
    rate = _num(meta, "spec_accept_rate")
    if rate is None and accepted is not None and drafted:
        rate = accepted / drafted
    hist = meta.get("spec_correct_drafts_histogram", meta.get("spec_accept_histogram"))
    return SpecFigures(
        steps=steps,
        accepted=accepted,
        drafted=drafted,
        accept_length=length,
        accept_rate=rate,
        histogram=_hist(hist),
        origin="sglang.meta_info",
    )


def _vllm_spec(metrics: Any) -> SpecFigures | None:
    if not isinstance(metrics, dict):
        return None
    sd = metrics.get("speculative_decoding")
    if sd is None:
        return None
    if not isinstance(sd, dict):
        raise MalformedReply(f"expected an object in metrics.speculative_decoding, found {sd!r}")
    return SpecFigures(
        steps=_int(sd, "num_spec_steps"),
        accepted=_int(sd, "num_accepted_draft_tokens"),
        drafted=_int(sd, "num_draft_tokens"),
        accept_length=_num(sd, "mean_acceptance_length"),
        accept_rate=_num(sd, "draft_acceptance_rate"),
        histogram=_hist(sd.get("acceptance_histogram")),
        origin="vllm.metrics",
    )


@dataclass
class StreamReader:
    """Folds the streamed events of one request into its figures.

    Feed every decoded ``data:`` payload with its arrival time (seconds from the request's
    start) to :meth:`feed`; ``[DONE]`` to :meth:`done`. A token-carrying event is one that
    raises the output token count (SGLang ``meta_info.completion_tokens``) or carries text
    (OpenAI ``choices[].text`` / ``delta.content`` / ``delta.reasoning_content`` /
    ``delta.tool_calls``): the first one gives TTFT, the gaps between them the ITL list.
    """

    api: str
    ttft: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    completion_tokens: int | None = None
    chunks_with_output: int = 0
    spec: SpecFigures | None = None
    finish_reason: str | None = None
    finished: bool = False
    server_error: str | None = None
    cached_tokens: int | None = None

    def feed(self, data: str, t: float) -> None:
        import orjson

        try:
            ev = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise MalformedReply(f"expected a JSON event, found {data[:80]!r} ({exc})") from exc
        if not isinstance(ev, dict):
            raise MalformedReply(f"expected a JSON object event, found {data[:80]!r}")
        if ev.get("error"):
            err = ev["error"]
            self.server_error = str(err.get("message", err) if isinstance(err, dict) else err)
            return
        if self.api == "sglang":
            self._feed_sglang(ev, t)
        else:
            self._feed_openai(ev, t)

    def done(self) -> None:
        self.finished = True

    def _output_event(self, t: float) -> None:
        if self.ttft is None:
            self.ttft = t
        self.chunk_times.append(t)
        self.chunks_with_output += 1

    def _feed_sglang(self, ev: dict[str, Any], t: float) -> None:
        meta = ev.get("meta_info")
        if not isinstance(meta, dict):
            raise MalformedReply(f"expected meta_info in a /generate event, found keys {list(ev)}")
        n = _int(meta, "completion_tokens")
        if n is not None and n > (self.completion_tokens or 0):
            self._output_event(t)
        if n is not None:
            self.completion_tokens = n
        cached = _int(meta, "cached_tokens")
        if cached is not None:
            self.cached_tokens = cached
        fr = meta.get("finish_reason")
        if fr is not None:
            self.finish_reason = str(fr.get("type") if isinstance(fr, dict) else fr)
            self.spec = _sglang_spec(meta) or self.spec

    def _feed_openai(self, ev: dict[str, Any], t: float) -> None:
        choices = ev.get("choices")
        if choices is None and "usage" not in ev:
            raise MalformedReply(f"expected choices or usage in an event, found keys {list(ev)}")
        for ch in choices or ():
            if not isinstance(ch, dict):
                raise MalformedReply(f"expected choice objects, found {ch!r}")
            delta = ch.get("delta") if self.api == "openai-chat" else None
            has_out = (
                bool(ch.get("text"))
                if self.api == "vllm"
                else isinstance(delta, dict)
                and (
                    bool(delta.get("content"))
                    or bool(delta.get("reasoning_content"))
                    or bool(delta.get("reasoning"))
                    or bool(delta.get("tool_calls"))
                )
            )
            if has_out:
                self._output_event(t)
            if ch.get("finish_reason") is not None:
                self.finish_reason = str(ch["finish_reason"])
        usage = ev.get("usage")
        if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
            self.completion_tokens = _int(usage, "completion_tokens")
        details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
        if isinstance(details, dict) and details.get("cached_tokens") is not None:
            self.cached_tokens = _int(details, "cached_tokens")
        self.spec = _vllm_spec(ev.get("metrics")) or self.spec

    @property
    def itl(self) -> list[float]:
        ts = self.chunk_times
        return [b - a for a, b in itertools.pairwise(ts)]

    @property
    def output_tokens(self) -> int:
        """Tokens generated: the server's count, else the token-carrying events seen."""
        return (
            self.completion_tokens
            if self.completion_tokens is not None
            else (self.chunks_with_output)
        )


def parse_counters(text: str) -> dict[str, Any]:
    """vLLM's speculative-decoding counters from a ``/metrics`` page, summed over engines.

    Returns ``{"drafts", "draft_tokens", "accepted_tokens", "per_pos": [..]}``; keys whose
    counter is absent are missing (a server without speculation has none of them).
    """
    from prometheus_client.parser import text_string_to_metric_families

    names = {v: k for k, v in SPEC_COUNTERS.items()}
    out: dict[str, Any] = {}
    per_pos: dict[int, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in names:
                out[names[s.name]] = out.get(names[s.name], 0.0) + s.value
            elif s.name == SPEC_PER_POS and "position" in s.labels:
                pos = int(s.labels["position"])
                per_pos[pos] = per_pos.get(pos, 0.0) + s.value
    if per_pos:
        out["per_pos"] = [per_pos.get(i, 0.0) for i in range(max(per_pos) + 1)]
    return out
