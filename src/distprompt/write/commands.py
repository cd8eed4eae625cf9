"""The client commands of ``RUN.md``: for each format written, what its files hold and the
command of every client that loads them, as checked against the client versions in
:data:`~distprompt.write.formats.CLIENT_VERSIONS` (``scripts/check_clients.py`` runs them), with
the number of requests each sends. :mod:`distprompt.write.runmd` puts them together with the
warnings.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from distprompt.errors import ConfigError
from distprompt.records import SuiteItem
from distprompt.write.clients import ShareGptDrops
from distprompt.write.formats import (
    AIPERF_MULTI_NAME,
    FORMATS,
    Plan,
    out_len,
    user_texts,
)


@dataclass(frozen=True, slots=True)
class RunContext:
    """What every command and warning of one RUN.md shares."""

    tok: str
    ignore_eos: bool
    temperature: float
    drops: dict[str, ShareGptDrops]


def temp_text(t: float) -> str:
    """The temperature as written on a command line: ``0`` for greedy, else as given."""
    return "0" if t == 0 else repr(float(t))


def sends(n: int, what: str = "") -> str:
    """The request count line that ``scripts/check_clients.py`` checks against the client."""
    return f"Requests sent: **{n}**{what}."


def median_out(items: Sequence[SuiteItem]) -> int:
    """The median (low) output length of ``items``; 1 for none."""
    return int(statistics.median_low([out_len(it) for it in items])) if items else 1


def count_of(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _block(cmd: list[str]) -> list[str]:
    return ["```bash", " \\\n  ".join(cmd), "```"]


def _json_arg(obj: dict[str, Any]) -> str:
    import json

    return "'" + json.dumps(obj, separators=(",", ":")) + "'"


_SGLANG_WARMUP = ", after one warm-up (a first row, at most 32 output tokens)"
_VLLM_WARMUP = ""  # vLLM skips its ready-check request unless --ready-check-timeout-sec


def _sglang(backend: str, *args: str, ctx: RunContext) -> list[str]:
    """A ``sglang.bench_serving`` command; SGLang ignores EOS unless told not to.

    The native backend takes ``--temperature``; the OpenAI backends ignore that flag and take
    ``temperature`` from ``--extra-request-body`` (or from the row, in ``openai.jsonl``).
    """
    if backend == "sglang":
        temp = [f"--temperature {temp_text(ctx.temperature)}"]
    else:
        temp = [f"--extra-request-body {_json_arg({'temperature': ctx.temperature})}"]
    return _block(
        [
            f"python -m sglang.bench_serving --backend {backend}",
            "--base-url <URL> --model <MODEL>",
            f"--tokenizer {ctx.tok}",
            *args,
            *temp,
            *([] if ctx.ignore_eos else ["--disable-ignore-eos"]),
        ]
    )


def _vllm(backend: str, endpoint: str, *args: str, ctx: RunContext) -> list[str]:
    """A ``vllm bench serve`` command; vLLM stops at EOS unless told not to."""
    return _block(
        [
            f"vllm bench serve --backend {backend} --endpoint {endpoint}",
            "--base-url <URL> --model <MODEL>",
            f"--tokenizer {ctx.tok}",
            *args,
            f"--temperature {temp_text(ctx.temperature)}",
            *(["--ignore-eos"] if ctx.ignore_eos else []),
        ]
    )


def _guidellm(request_format: str, k: int, ctx: RunContext) -> list[str]:
    backend = {
        "kind": "openai_http",
        "target": "<URL>",
        "model": "<MODEL>",
        "request_format": request_format,
        "extras": {"body": {"temperature": ctx.temperature}},
    }
    return _block(
        [
            f"guidellm run --backend {_json_arg(backend)}",
            f"--tokenizer kind=huggingface_auto,model={ctx.tok}",
            f"--data {_json_arg({'kind': 'json_file', 'path': 'guidellm.jsonl'})}",
            f"--profile kind=synchronous --constraint kind=max_requests,count={k}",
        ]
    )


def _aiperf(*args: str, ctx: RunContext) -> list[str]:
    return _block(
        [
            "aiperf profile --url <URL> --model <MODEL> --endpoint-type chat --streaming",
            f"--tokenizer {ctx.tok}",
            *args,
            f"--extra-inputs temperature:{temp_text(ctx.temperature)}",
        ]
    )


def _openai_section(plan: Plan, ctx: RunContext) -> list[str]:
    k = len(plan.chat)
    return [
        f"### `openai.jsonl` — SGLang, exact chat history ({k} rows)",
        "",
        "Request keys only; `provenance.jsonl` gives id, source, cluster and provenance for "
        "the same line number. SGLang keeps file order and sends the first `--num-prompts` "
        "lines; do not pass `--sharegpt-output-len` (it would replace `max_tokens`). Every "
        "row carries `temperature`.",
        "",
        *_sglang(
            "sglang-oai-chat",
            "--dataset-name openai --dataset-path openai.jsonl",
            f"--num-prompts {k}",
            ctx=ctx,
        ),
        "",
        sends(k, ", one a row, `max_completion_tokens` = `max_tokens`" + _SGLANG_WARMUP),
    ]


def _vllm_custom_section(plan: Plan, ctx: RunContext) -> list[str]:
    k = len(plan.items)
    return [
        f"### `vllm_custom.jsonl` — vLLM, rendered prompt on completions ({k} rows)",
        "",
        *_vllm(
            "openai",
            "/v1/completions",
            "--dataset-name custom --dataset-path vllm_custom.jsonl",
            "--skip-chat-template --custom-output-len -1 --no-oversample",
            "--disable-shuffle",
            f"--num-prompts {k}",
            ctx=ctx,
        ),
        "",
        sends(k, ", one a row in file order, `max_tokens` = `output_tokens`" + _VLLM_WARMUP),
    ]


def _sharegpt_section(plan: Plan, ctx: RunContext) -> list[str]:
    k = len(plan.single)
    v, sg = ctx.drops["vllm"], ctx.drops["sglang"]
    known = v.computed
    return [
        f"### `sharegpt.json` — SGLang or vLLM, last user turn only ({k} rows)",
        "",
        "The human turn is raw text: use a chat backend so the server applies the template "
        "once. Both clients drop pairs by their own length rules and ask for the "
        "re-tokenized response length (see warnings).",
        "",
        *_sglang(
            "sglang-oai-chat",
            "--dataset-name sharegpt --dataset-path sharegpt.json",
            f"--num-prompts {k}",
            ctx=ctx,
        ),
        "",
        sends(k - sg.total, f" of {k}, shuffled" + _SGLANG_WARMUP)
        if known
        else f"Requests sent: up to {k} (drops not counted: no tokenizer at export).",
        "",
        *_vllm(
            "openai-chat",
            "/v1/chat/completions",
            "--dataset-name sharegpt --dataset-path sharegpt.json",
            "--no-oversample --disable-shuffle",
            f"--num-prompts {k}",
            ctx=ctx,
        ),
        "",
        sends(k - v.total, f" of {k}, in file order" + _VLLM_WARMUP)
        if known
        else f"Requests sent: up to {k} (drops not counted: no tokenizer at export).",
    ]


def _token_ids_section(plan: Plan, ctx: RunContext) -> list[str]:
    k = len(plan.items)
    return [
        f"### `token_ids.jsonl` — exact prompt ids ({k} rows)",
        "",
        "No client in the checked versions loads token ids (SGLang has no token-trace "
        "dataset; vLLM's `timed_trace` builds random tokens from hashes). Replay it yourself "
        "against a native endpoint: SGLang `POST /generate` with `input_ids` and "
        '`sampling_params: {"max_new_tokens": num_output_tokens}`, or vLLM `/v1/completions` '
        "with the ids as `prompt` (token-id prompts) and `max_tokens`; set `temperature` "
        f"{temp_text(ctx.temperature)} yourself.",
    ]


def _guidellm_section(plan: Plan, ctx: RunContext) -> list[str]:
    k = len(plan.items)
    n_chat = len(plan.chat)
    out = [
        f"### `guidellm.jsonl` — GuideLLM ({k} rows)",
        "",
        "On chat endpoints GuideLLM sends `messages` verbatim (exact history); on "
        "completions it sends the rendered `prompt`. Rows are not shuffled; `temperature` "
        "goes in through the backend's `extras`.",
        "",
        *_guidellm("/v1/chat/completions", k, ctx),
        "",
        sends(n_chat, f" of {k} on chat (rows without `messages` fail and are skipped)")
        if n_chat != k
        else sends(k, ", in file order"),
        "",
        "For completions (every row, rendered prompt):",
        "",
        *_guidellm("/v1/completions", k, ctx),
        "",
        sends(k, ", in file order"),
    ]
    return out


def _aiperf_section(plan: Plan, ctx: RunContext) -> list[str]:
    k = len(plan.single)
    n_turns = sum(len([t for t in user_texts(it) if t]) for it in plan.single)
    extra = (
        'Rows carry `extra: {"ignore_eos": true}`, so `output_length` is the exact length.'
        if ctx.ignore_eos
        else "`output_length` is only a cap (no `ignore_eos` in `extra`)."
    )
    return [
        f"### `aiperf.jsonl` / `{AIPERF_MULTI_NAME}` — AIPerf ({k} items each)",
        "",
        "`--custom-dataset-type` applies to a whole file, so the suite comes twice: "
        "`aiperf.jsonl` (single_turn, last user turn only, file order kept) and "
        f"`{AIPERF_MULTI_NAME}` (multi_turn, one session per item with its system prompt and "
        f"user turns, `session_id` = item id, every turn with its `output_length`). {extra} "
        "Run without `HF_HUB_OFFLINE=1` (see warnings).",
        "",
        *_aiperf(
            "--input-file aiperf.jsonl --custom-dataset-type single_turn",
            f"--request-count {k} --artifact-dir artifacts/aiperf",
            ctx=ctx,
        ),
        "",
        sends(k, ", one a row in file order, `max_completion_tokens` = `output_length`"),
        "",
        *_aiperf(
            f"--input-file {AIPERF_MULTI_NAME} --custom-dataset-type multi_turn",
            f"--conversation-num {k} --artifact-dir artifacts/aiperf_multi_turn",
            ctx=ctx,
        ),
        "",
        sends(n_turns, f", one a user turn of the {k} sessions"),
        "",
        "Each run writes its own artifact folder (the same one would be overwritten); "
        "`distprompt bench-import artifacts/aiperf_multi_turn --suite . --out <RESULTS>` "
        "joins a run's requests back to the items (every turn counts for speed, the last "
        "turn of a session for acceptance).",
    ]


def _by_source_section(plan: Plan, ctx: RunContext) -> list[str]:
    out = [
        "### `by_source/` — vLLM `spec_bench`, SGLang `speed-bench`, first user turn only",
        "",
        "One file per source; output length is a fixed flag, set here to the source's median "
        "`max_tokens`. Both loaders render the chat template themselves, so the rendered "
        "text goes to a completions or native endpoint (a chat endpoint would template it "
        "twice). SGLang renders with the template's defaults (`apply_chat_template` with no "
        "keyword arguments); vLLM applies `--chat-template-kwargs`. SGLang's "
        "`--speed-bench-category` accepts only its own entropy names: pass no category.",
        "",
    ]
    if not plan.by_source:
        return [*out, "No items with recovered user turns: nothing written."]
    for src, group in plan.by_source.items():
        rel = f"by_source/{plan.stems[src]}.jsonl"
        k, med = len(group), median_out(group)
        kwargs = _common_kwargs(group)
        out += [
            f"`{rel}` — source `{src}`, {count_of(k, 'row')}:",
            "",
            *_vllm(
                "openai",
                "/v1/completions",
                f"--dataset-name spec_bench --dataset-path {rel}",
                f"--spec-bench-output-len {med} --no-oversample --disable-shuffle",
                f"--num-prompts {k}",
                *([f"--chat-template-kwargs {_json_arg(kwargs)}"] if kwargs else []),
                ctx=ctx,
            ),
            "",
            sends(k, f", in file order, `max_tokens` {med}" + _VLLM_WARMUP),
            "",
            *_sglang(
                "sglang",
                f"--dataset-name speed-bench --dataset-path {rel}",
                f"--speed-bench-output-len {med} --num-prompts {k}",
                ctx=ctx,
            ),
            "",
            sends(k, f", shuffled, `max_new_tokens` {med}" + _SGLANG_WARMUP),
            "",
        ]
    return out


_SECTIONS: dict[str, Callable[[Plan, RunContext], list[str]]] = {
    "openai": _openai_section,
    "vllm_custom": _vllm_custom_section,
    "sharegpt": _sharegpt_section,
    "token_ids": _token_ids_section,
    "guidellm": _guidellm_section,
    "aiperf": _aiperf_section,
    "by_source": _by_source_section,
}


def commands(fmt: str, plan: Plan, *, ctx: RunContext) -> list[str]:
    """RUN.md's section for the files of format ``fmt``: what they hold, and the command of
    each client that loads them with the count of requests it sends.

    Raises:
        ConfigError: ``fmt`` is not a format name.
    """
    section = _SECTIONS.get(fmt)
    if section is None:
        raise ConfigError(f"formats: expected names from {', '.join(FORMATS)}, found {fmt!r}")
    return section(plan, ctx)


def _common_kwargs(group: Sequence[SuiteItem]) -> dict[str, Any]:
    """The ``chat_template_kwargs`` shared by the most items of a source (vLLM takes one set)."""
    seen = Counter(tuple(sorted((it.chat_template_kwargs or {}).items())) for it in group)
    if not seen:
        return {}
    best = max(seen.items(), key=lambda kv: (kv[1], repr(kv[0])))[0]
    return dict(best)
