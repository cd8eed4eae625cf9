"""A small speculative-decoding server for the bench tests: SGLang ``/generate``, vLLM
``/v1/completions`` and OpenAI ``/v1/chat/completions``, streamed, in the shapes recorded in
``docs/bench.md`` from the servers' sources.

It listens on 127.0.0.1 only, serves at most ``max_requests`` generations, and shuts itself
down after ``lifetime`` seconds even if a test forgets to. It knows the suite, so it checks what
the client sends (the exact prompt ids or messages, the output length, the flags) and logs, per
request, the figures it produced, for the tests to compare with what distprompt reports.

Generation is a pure function of the item: ``n`` output tokens (``max_tokens`` with
``ignore_eos``, else ``eos_fraction`` of it, at least 1), emitted in verify steps of
``accept[source] + offset(item)`` tokens, where ``offset`` is 0, 0.25, 0.5 or 0.75 by item —
so acceptance differs per source and per item within a source.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from distprompt.records import SuiteItem

NUM_DRAFT = 4  # draft tokens proposed per verify step (SGLang: speculative_num_draft_tokens - 1)


def item_offset(item_id: str) -> float:
    return 0.25 * (int(hashlib.sha256(item_id.encode()).hexdigest(), 16) % 4)


@dataclass
class Produced:
    """What the server generated for one request (the ground truth of the tests)."""

    item_id: str
    api: str
    body: dict[str, Any]
    n: int
    steps: int
    accepted: int
    drafted: int
    chunks: int
    histogram: list[int]
    outcome: str = "ok"
    cached: int = 0

    @property
    def sglang_accept_length(self) -> float:
        return self.n / self.steps

    @property
    def vllm_accept_length(self) -> float:
        return 1 + self.accepted / self.steps

    @property
    def accept_rate(self) -> float:
        return self.accepted / self.drafted


@dataclass
class Behaviour:
    accept: dict[str, float]  # mean tokens per verify step, per source
    eos_fraction: float = 0.5
    step_delay: float = 0.0  # seconds between verify steps
    first_delay: float = 0.0  # seconds before the first token
    per_request_metrics: bool = True  # vLLM --per-request-spec-decode-metrics summary
    spec: bool = True  # speculation on
    faults: dict[str, str] = field(default_factory=dict)  # item id -> fault
    close_after: int | None = None  # stop listening once this many generations were asked
    max_requests: int = 2000
    lifetime: float = 120.0
    # SGLang /server_info (and /get_server_info) in the shape of its http_server.py
    server_info: bool = False
    max_running_requests: int = 48
    context_length: int = 32768
    max_model_len: int | None = None  # vLLM: in /v1/models
    flush: bool = True  # POST /flush_cache and /reset_prefix_cache answer 200 (vLLM: dev mode)
    # chat requests are matched by their last user turn (a client such as AIPerf sending the
    # sessions turn by turn, with its own history): any user turn of an item answers
    chat_any: bool = False
    # a batch's cost: each verify step sleeps step_delay · (1 + batch_cost · in flight · tokens
    # verified a step (1 + NUM_DRAFT with speculation, else 1)), so speculation that wins alone
    # loses when many requests share the (emulated) accelerator
    batch_cost: float = 0.0


class FakeServer:
    """``with FakeServer(items, Behaviour(...)) as srv: srv.url``."""

    def __init__(self, items: Sequence[SuiteItem], behaviour: Behaviour) -> None:
        self.items = {tuple(it.prompt_ids): it for it in items}
        self.by_messages = {
            json.dumps(list(it.messages), sort_keys=True): it for it in items if it.messages
        }
        self.by_user_text = {
            m["content"]: it
            for it in items
            for m in it.messages or ()
            if m.get("role") == "user" and isinstance(m.get("content"), str)
        }
        self.b = behaviour
        self.log: list[Produced] = []
        self.problems: list[str] = []
        self.counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": [0] * NUM_DRAFT}
        self.lock = threading.Lock()
        self.served = 0
        self.cache: set[tuple[int, ...]] = set()  # prompts in the prefix cache
        self.flushes = 0
        self.active = 0  # generations in flight
        # with /server_info on, at most max_running_requests generate at once; the rest wait
        self.running = threading.BoundedSemaphore(behaviour.max_running_requests)
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/health":
                    self._send(200, b"", "text/plain")
                elif self.path == "/v1/models":
                    card: dict[str, Any] = {"id": "fake-model", "object": "model"}
                    if srv.b.max_model_len is not None:
                        card["max_model_len"] = srv.b.max_model_len
                    self._send(200, json.dumps({"object": "list", "data": [card]}).encode())
                elif self.path in ("/server_info", "/get_server_info") and srv.b.server_info:
                    self._send(200, json.dumps(srv.server_info()).encode())
                elif self.path == "/metrics" and srv.b.spec and not srv.b.per_request_metrics:
                    self._send(200, srv.metrics_text().encode(), "text/plain")
                else:
                    self._send(404, b'{"detail":"Not Found"}')

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(n)
                if self.path in ("/flush_cache", "/reset_prefix_cache"):
                    if not srv.b.flush:
                        self._send(404, b'{"detail":"Not Found"}')
                        return
                    with srv.lock:
                        srv.cache.clear()
                        srv.flushes += 1
                    self._send(200, b"", "text/plain")
                    return
                body = json.loads(raw)
                with srv.lock:
                    srv.served += 1
                    if srv.served > srv.b.max_requests:
                        self._send(503, b'{"error": {"message": "request budget exhausted"}}')
                        return
                    if srv.served == srv.b.close_after:
                        # before replying, so the next request finds nothing listening
                        srv.httpd.shutdown()
                        srv.httpd.server_close()
                srv.generate(self, self.path, body)

            def _send(self, code: int, data: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._timer = threading.Timer(behaviour.lifetime, self.httpd.shutdown)
        self._timer.daemon = True

    def __enter__(self) -> FakeServer:
        self._thread.start()
        self._timer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._timer.cancel()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=10)

    # --------------------------------------------------------------------------------------
    def server_info(self) -> dict[str, Any]:
        """SGLang's ``/server_info``: the server arguments flattened, ``internal_states`` per
        DP rank, ``version`` (python/sglang/srt/entrypoints/http_server.py)."""
        return {
            "model_path": "fake-model",
            "context_length": self.b.context_length,
            "max_running_requests": self.b.max_running_requests,
            "dp_size": 1,
            "speculative_algorithm": "EAGLE3" if self.b.spec else None,
            "speculative_num_steps": NUM_DRAFT if self.b.spec else None,
            "speculative_eagle_topk": 1 if self.b.spec else None,
            "speculative_num_draft_tokens": NUM_DRAFT + 1 if self.b.spec else None,
            "max_total_num_tokens": 20480,
            "internal_states": [
                {
                    "last_gen_throughput": 0.0,
                    "memory_usage": {"weight": 1.0, "kvcache": 0.2, "token_capacity": 20480},
                    "effective_max_running_requests_per_dp": self.b.max_running_requests,
                    "avg_spec_accept_length": 2.0,
                }
            ],
            "version": "0.5.23",
        }

    def metrics_text(self) -> str:
        c = self.counters
        lines = [
            "# TYPE vllm:spec_decode_num_drafts_total counter",
            f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="fake-model"}} '
            f"{c['drafts']}",
            "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
            f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="fake-model"}} '
            f"{c['draft_tokens']}",
            "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
            f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="fake-model"}} '
            f"{c['accepted']}",
            "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
        ]
        lines += [
            f"vllm:spec_decode_num_accepted_tokens_per_pos_total"
            f'{{engine="0",model_name="fake-model",position="{i}"}} {v}'
            for i, v in enumerate(c["per_pos"])
        ]
        return "\n".join(lines) + "\n"

    def _item(self, path: str, body: dict[str, Any]) -> SuiteItem | None:
        if path == "/generate":
            return self.items.get(tuple(body.get("input_ids") or ()))
        if path == "/v1/completions":
            return self.items.get(tuple(body.get("prompt") or ()))
        it = self.by_messages.get(json.dumps(body.get("messages"), sort_keys=True))
        if it is None and self.b.chat_any:
            users = [m for m in body.get("messages") or () if m.get("role") == "user"]
            it = self.by_user_text.get(users[-1].get("content")) if users else None
        return it

    def _check(self, path: str, body: dict[str, Any], it: SuiteItem) -> None:
        if path == "/generate":
            sp = body.get("sampling_params") or {}
            if sp.get("max_new_tokens") != it.max_tokens:
                self.problems.append(f"{it.id}: max_new_tokens {sp.get('max_new_tokens')}")
            if body.get("stream") is not True:
                self.problems.append(f"{it.id}: not streamed")
            return
        if body.get("max_tokens") != it.max_tokens:
            self.problems.append(f"{it.id}: max_tokens {body.get('max_tokens')}")
        if body.get("stream") is not True or not (body.get("stream_options") or {}).get(
            "include_usage"
        ):
            self.problems.append(f"{it.id}: not streamed with include_usage")
        if path == "/v1/chat/completions":
            if (body.get("tools") or None) != (list(it.tools) if it.tools else None):
                self.problems.append(f"{it.id}: tools differ")
            if body.get("chat_template_kwargs") != it.chat_template_kwargs:
                self.problems.append(f"{it.id}: chat_template_kwargs differ")

    def generate(self, h: BaseHTTPRequestHandler, path: str, body: dict[str, Any]) -> None:
        it = self._item(path, body)
        api = {"/generate": "sglang", "/v1/completions": "vllm"}.get(path, "openai-chat")
        if it is None:
            self.problems.append(f"{path}: a prompt that is no suite item")
            _reply(h, 400, b'{"object": "error", "message": "unknown prompt"}')
            return
        if not self.b.chat_any:
            self._check(path, body, it)
        with self.lock:
            prompt = tuple(it.prompt_ids)
            cached = len(prompt) - 1 if prompt in self.cache else 0
            self.cache.add(prompt)
        ignore_eos = (body.get("sampling_params") or body).get("ignore_eos", False)
        n = it.max_tokens if ignore_eos else max(1, int(it.max_tokens * self.b.eos_fraction))
        a = self.b.accept[it.source] + item_offset(it.id) if self.b.spec else 1.0
        sizes = _steps(n, a)
        hist = [0] * (NUM_DRAFT + 1)
        for k in sizes[1:]:  # the first token comes from prefill, not a verify step
            hist[min(k - 1, NUM_DRAFT)] += 1
        steps = max(1, len(sizes) - 1)
        accepted = sum(k - 1 for k in sizes[1:])
        prod = Produced(it.id, api, body, n, steps, accepted, steps * NUM_DRAFT, len(sizes), hist)
        prod.cached = cached
        fault = self.b.faults.get(it.id)
        prod.outcome = fault or "ok"
        with self.lock:
            self.log.append(prod)
        if fault == "http500":
            _reply(h, 500, b'{"object": "error", "message": "engine crashed", "code": 500}')
            return
        if self.b.server_info:
            with self.running:
                self._stream(h, api, it, prod, sizes, fault)
        else:
            self._stream(h, api, it, prod, sizes, fault)

    def _stream(
        self,
        h: BaseHTTPRequestHandler,
        api: str,
        it: SuiteItem,
        prod: Produced,
        sizes: list[int],
        fault: str | None,
    ) -> None:
        steps, accepted = prod.steps, prod.accepted
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Connection", "close")
        h.end_headers()
        with self.lock:
            self.active += 1
        try:
            self._send_events(h, api, it, prod, sizes, fault)
        finally:
            with self.lock:
                self.active -= 1
        if self.b.spec and not self.b.per_request_metrics and prod.outcome == "ok":
            with self.lock:
                c = self.counters
                c["drafts"] += steps
                c["draft_tokens"] += steps * NUM_DRAFT
                c["accepted"] += accepted
                for k in sizes[1:]:
                    for pos in range(min(k - 1, NUM_DRAFT)):
                        c["per_pos"][pos] += 1

    def _send_events(
        self,
        h: BaseHTTPRequestHandler,
        api: str,
        it: SuiteItem,
        prod: Produced,
        sizes: list[int],
        fault: str | None,
    ) -> None:
        time.sleep(self.b.first_delay + (30.0 if fault == "slow" else 0.0))
        verified = 1 + NUM_DRAFT if self.b.spec else 1
        try:
            for i, ev in enumerate(self._events(api, it, prod, sizes)):
                if i and self.b.step_delay:
                    load = 1.0 + self.b.batch_cost * self.active * verified
                    time.sleep(self.b.step_delay * load)
                if fault == "disconnect" and i == 2:
                    h.wfile.flush()
                    h.connection.shutdown(2)
                    return
                if fault == "malformed" and i == 1:
                    h.wfile.write(b"data: {not json\n\n")
                    h.wfile.flush()
                    return
                if fault == "error_event" and i == 1:
                    h.wfile.write(b'data: {"error": {"message": "out of memory"}}\n\n')
                    h.wfile.write(b"data: [DONE]\n\n")
                    h.wfile.flush()
                    return
                h.wfile.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
                h.wfile.flush()
            h.wfile.write(b"data: [DONE]\n\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            prod.outcome = "client gone"

    def _events(
        self, api: str, it: SuiteItem, p: Produced, sizes: list[int]
    ) -> Iterator[dict[str, Any]]:
        done = 0
        fin = (
            "length"
            if p.body.get("ignore_eos") or (p.body.get("sampling_params") or {}).get("ignore_eos")
            else "stop"
        )
        if api == "openai-chat":
            yield _chat_chunk({"role": "assistant", "content": ""}, None)
        for j, k in enumerate(sizes):
            done += k
            last = j == len(sizes) - 1
            if api == "sglang":
                meta: dict[str, Any] = {
                    "id": "req-" + it.id,
                    "finish_reason": None,
                    "prompt_tokens": len(it.prompt_ids),
                    "completion_tokens": done,
                    "cached_tokens": p.cached,
                }
                if last:
                    meta["finish_reason"] = (
                        {"type": "length", "length": done}
                        if fin == "length"
                        else {"type": "stop", "matched": 151645}
                    )
                    meta["e2e_latency"] = 0.01
                    if self.b.spec:
                        meta.update(
                            {
                                "spec_accept_rate": p.accepted / p.drafted,
                                "spec_accept_length": p.n / p.steps,
                                "spec_num_correct_drafts": p.accepted,
                                "spec_num_proposed_drafts": p.drafted,
                                "spec_verify_ct": p.steps,
                                "spec_correct_drafts_histogram": p.histogram,
                            }
                        )
                # default (non-incremental) streaming: text and output_ids are cumulative
                yield {"text": "x" * done, "output_ids": list(range(done)), "meta_info": meta}
            elif api == "vllm":
                yield {
                    "id": "cmpl-" + it.id,
                    "object": "text_completion",
                    "created": 0,
                    "model": "fake-model",
                    "choices": [
                        {
                            "index": 0,
                            "text": " t" * k,
                            "logprobs": None,
                            "finish_reason": fin if last else None,
                            "stop_reason": None,
                        }
                    ],
                }
            else:
                yield _chat_chunk({"content": " t" * k}, fin if last else None)
        if api != "sglang":
            usage: dict[str, Any] = {
                "id": "cmpl-" + it.id,
                "object": "text_completion" if api == "vllm" else "chat.completion.chunk",
                "created": 0,
                "model": "fake-model",
                "choices": [],
                "usage": {
                    "prompt_tokens": len(it.prompt_ids),
                    "completion_tokens": p.n,
                    "total_tokens": len(it.prompt_ids) + p.n,
                    "prompt_tokens_details": {"cached_tokens": p.cached},
                },
            }
            if self.b.spec and self.b.per_request_metrics:
                usage["metrics"] = {
                    "speculative_decoding": {
                        "mean_acceptance_length": 1 + p.accepted / p.steps,
                        "draft_acceptance_rate": p.accepted / p.drafted,
                        "acceptance_histogram": p.histogram,
                        "num_spec_steps": p.steps,
                        "num_accepted_draft_tokens": p.accepted,
                        "num_draft_tokens": p.drafted,
                        "num_spec_tokens": NUM_DRAFT,
                    }
                }
            yield usage


def _chat_chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


def _reply(h: BaseHTTPRequestHandler, code: int, data: bytes) -> None:
    h.send_response(code)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def _steps(n: int, a: float) -> list[int]:
    """Tokens per event: 1 from prefill, then verify steps averaging ``a`` tokens (≤ 1 + draft)."""
    sizes = [1]
    left = n - 1
    acc = 0.0
    while left > 0:
        acc += a
        k = max(1, min(math.floor(acc), NUM_DRAFT + 1, left))
        acc -= k
        sizes.append(k)
        left -= k
    return sizes


def multi_turn_items() -> list[SuiteItem]:
    """Six items of two sources whose prompts are chats of one to three user turns (the suite
    behind ``tests/data/aiperf_multi_turn``, made by ``scripts/make_aiperf_artifact.py``)."""
    from distprompt.records import Provenance

    items = []
    for s, src in enumerate(("glaive", "sweagent")):
        for i in range(3):
            msgs: list[dict[str, Any]] = [{"role": "system", "content": f"You help with {src}."}]
            for t in range(i + 1):
                msgs.append({"role": "user", "content": f"{src} item {i} question {t}"})
                if t < i:
                    msgs.append({"role": "assistant", "content": f"answer {t} of item {i}"})
            ids = tuple(1000 + 100 * s + 10 * i + k for k in range(12 + 5 * i))
            items.append(
                SuiteItem(
                    id=f"{src}-mt{i}",
                    source=src,
                    prompt=" ".join(m["content"] for m in msgs),
                    n_prompt_tokens=len(ids),
                    n_response_tokens=24,
                    max_tokens=16 + 4 * i,
                    cluster=i,
                    cluster_size=1,
                    weight=float(1 + i),
                    provenance=Provenance(f"{src}/tokenized_data.jsonl", i + 1, 100 * i),
                    prompt_ids=ids,
                    messages=tuple(msgs),
                    fidelity="tokens",
                    response="Plain prose." if i != 1 else "```python\nprint(1)\n```",
                )
            )
    return items
