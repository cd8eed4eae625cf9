"""``RUN.md``: the command for each benchmark client on a suite's files, and its warnings.

The commands follow the loaders of the client versions in
:data:`~distprompt.export.CLIENT_VERSIONS`; the warnings name what each client would silently do
to this suite: items left out of the chat-text files, history lost in single-turn files, the
pairs vLLM's ``sharegpt`` loader drops (:func:`vllm_sharegpt_drops`), SGLang's and GuideLLM's
``ignore_eos`` defaults, a BOS that a completions endpoint would add a second time, items that
are not token-exact, and duplicate ids. :func:`distprompt.export.write_exports` writes it next to
the client files.

Example:
    >>> text = run_md(items, formats=["openai"], tokenizer_name="Qwen/Qwen3-8B")  # doctest: +SKIP
    >>> text.splitlines()[0]  # doctest: +SKIP
    '# Running this suite'
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from distprompt._plan import (
    AIPERF_MULTI_NAME,
    CLIENT_VERSIONS,
    FORMATS,
    Plan,
    checked_formats,
    has_history,
    has_messages,
    last_user_text,
    out_len,
)
from distprompt.errors import ConfigError
from distprompt.records import SuiteItem

__all__ = [
    "VLLM_SHAREGPT_MAX_PROMPT",
    "VLLM_SHAREGPT_MAX_TOTAL",
    "VLLM_SHAREGPT_MIN_LEN",
    "VllmShareGptDrops",
    "run_md",
    "vllm_sharegpt_drops",
]

# vLLM's sharegpt loader (``is_valid_sequence``) drops these silently.
VLLM_SHAREGPT_MIN_LEN = 4
VLLM_SHAREGPT_MAX_PROMPT = 1024
VLLM_SHAREGPT_MAX_TOTAL = 2048

_MAX_IDS_SHOWN = 10
# A leading special-token text: <s>, <|begin_of_text|>, <｜begin▁of▁sentence｜>, [BOS] ...
_LEADING_SPECIAL = re.compile(
    r"^(<\|[^|<>\s]{1,64}\|>|<｜[^｜<>\s]{1,64}｜>|<[^<>\s]{1,32}>|\[[A-Z_]{2,16}\])"
)
_BOS_HINTS = ("begin", "bos", "startoftext", "start_of_text")


def run_md(
    items: Sequence[SuiteItem],
    *,
    formats: Sequence[str],
    tokenizer_name: str,
    ignore_eos: bool = False,
) -> str:
    """``RUN.md``: the command for each client on these files, and warnings for this suite.

    Args:
        items: The suite items, as given to :func:`~distprompt.export.write_exports`.
        formats: The formats written.
        tokenizer_name: Tokenizer name or path for ``--tokenizer``; a placeholder when empty.
        ignore_eos: Whether the files ask for ``ignore_eos``.

    Returns:
        Markdown text; the same items give the same text.

    Raises:
        ConfigError: A format name is unknown.

    Example:
        >>> "## Warnings" in run_md(items, formats=FORMATS, tokenizer_name="tok")  # doctest: +SKIP
        True
    """
    return render_run_md(
        Plan.of(items),
        formats=checked_formats(formats),
        tokenizer_name=tokenizer_name,
        ignore_eos=ignore_eos,
    )


@dataclass(frozen=True, slots=True)
class VllmShareGptDrops:
    """Items vLLM's ``sharegpt`` loader would drop, by reason (an item may have several)."""

    total: int
    prompt_short: int
    prompt_long: int
    total_long: int
    output_short: int


def vllm_sharegpt_drops(items: Sequence[SuiteItem]) -> VllmShareGptDrops:
    """Count the items vLLM's ``sharegpt`` loader drops silently.

    vLLM keeps a pair only when 4 <= prompt <= 1024 tokens, prompt + output <= 2048 and, unless
    ``--sharegpt-output-len`` fixes the output, output >= 4. Lengths here are the recorded prompt
    length (``n_prompt_tokens``) and the output length asked for (``max_tokens``).

    Example:
        >>> vllm_sharegpt_drops([]).total
        0
    """
    short = long_ = total_long = out_short = dropped = 0
    for it in items:
        p, o = it.n_prompt_tokens, out_len(it)
        flags = (
            p < VLLM_SHAREGPT_MIN_LEN,
            p > VLLM_SHAREGPT_MAX_PROMPT,
            p + o > VLLM_SHAREGPT_MAX_TOTAL,
            o < VLLM_SHAREGPT_MIN_LEN,
        )
        short += flags[0]
        long_ += flags[1]
        total_long += flags[2]
        out_short += flags[3]
        dropped += any(flags)
    return VllmShareGptDrops(dropped, short, long_, total_long, out_short)


def _ids(items: Iterable[SuiteItem]) -> str:
    ids = [it.id for it in items]
    shown = ", ".join(f"`{i}`" for i in ids[:_MAX_IDS_SHOWN])
    more = len(ids) - _MAX_IDS_SHOWN
    return shown + (f" … and {more} more" if more > 0 else "")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _leading_special(prompt: str) -> str | None:
    m = _LEADING_SPECIAL.match(prompt)
    return m.group(1) if m else None


def _bos_warning(items: Sequence[SuiteItem]) -> str | None:
    """Warn when rendered prompts begin with what looks like the tokenizer's BOS text."""
    leads = Counter(_leading_special(it.prompt) for it in items)
    leads.pop(None, None)
    if not leads:
        return None
    n, text = max((count, lead) for lead, count in leads.items() if lead is not None)
    name = text.lower().replace("▁", "_")
    if not (text == "<s>" or any(h in name for h in _BOS_HINTS)):
        return None
    return (
        f"**BOS twice.** {n} of {len(items)} rendered prompts start with `{text}`, which looks "
        "like the tokenizer's BOS. A completions endpoint tokenizes the prompt with special tokens "
        "added, so these requests may get a second BOS (`vllm_custom.jsonl`, GuideLLM on "
        "completions). Compare the server's `prompt_tokens` with `n_prompt_tokens`; if it is one "
        "higher, send `add_special_tokens: false` in the request, or replay `token_ids.jsonl` "
        "against a native endpoint. Chat files (`openai.jsonl`, GuideLLM on chat) are not "
        "affected: the server renders the template itself."
    )


def _median_out(items: Sequence[SuiteItem]) -> int:
    return int(statistics.median_low([out_len(it) for it in items])) if items else 1


def render_run_md(
    plan: Plan,
    *,
    formats: Sequence[str],
    tokenizer_name: str,
    ignore_eos: bool,
) -> str:
    """:func:`run_md` of a :class:`~distprompt._plan.Plan` whose formats are already checked."""
    items = plan.items
    tok = tokenizer_name or "<TOKENIZER>"
    versions = ", ".join(f"{k} {v}" for k, v in CLIENT_VERSIONS.items())
    src_counts = Counter(it.source for it in items)
    lines: list[str] = [
        "# Running this suite",
        "",
        f"{len(items)} items from {len(src_counts)} sources "
        f"({', '.join(f'{s}: {n}' for s, n in sorted(src_counts.items()))}).",
        f"Tokenizer: `{tokenizer_name or 'unknown'}`. "
        f"Output lengths: the recorded first response (`max_tokens`), at least 1. "
        f"`ignore_eos` in the files: {'true' if ignore_eos else 'false'}.",
        "",
        f"Layouts and commands checked against the loaders of {versions}. Loaders change between "
        "versions: with another version, check the flags below against `--help`.",
        "Replace `<URL>` and `<MODEL>` with the server address and served model name.",
        "",
        "## Warnings",
        "",
    ]
    warnings = _warnings(plan, formats=formats, ignore_eos=ignore_eos)
    if warnings:
        lines.extend(f"- {w}" for w in warnings)
    else:
        lines.append("- none")
    lines += ["", "## Commands", ""]
    for fmt in formats:
        lines.extend(_commands(fmt, plan, tok=tok, ignore_eos=ignore_eos))
        lines.append("")
    lines += _join_section(formats)
    return "\n".join(lines).rstrip("\n") + "\n"


def _warnings(plan: Plan, *, formats: Sequence[str], ignore_eos: bool) -> list[str]:
    items = plan.items
    n = len(items)
    out: list[str] = []
    no_msgs = [it for it in items if not has_messages(it)]
    chat_fmts = [f for f in formats if f in ("openai", "sharegpt", "aiperf", "by_source")]
    if no_msgs and (chat_fmts or "guidellm" in formats):
        out.append(
            f"**No chat turns for {len(no_msgs)} of {n} items** (turn recovery failed or did not "
            f"run): {_ids(no_msgs)}. They are left out of "
            f"{', '.join(f'`{f}`' for f in chat_fmts) or 'no file'} (their rendered prompt there "
            "would be templated twice, and SGLang drops empty `messages` silently anyway); in "
            "`guidellm.jsonl` their `messages` is null, so run GuideLLM on completions to keep "
            "them. `vllm_custom.jsonl` and `token_ids.jsonl` hold every item."
        )
    no_user = [it for it in plan.chat if not last_user_text(it)]
    if no_user and chat_fmts:
        out.append(
            f"{_count(len(no_user), 'item')} with messages but no user text: {_ids(no_user)}; left "
            "out of `sharegpt.json` and the AIPerf files."
        )
    history = [it for it in plan.single if has_history(it)]
    lossy = [f for f in formats if f in ("sharegpt", "aiperf", "by_source")]
    if history and lossy:
        out.append(
            f"**History lost in single-turn files.** {len(history)} of {len(plan.single)} items "
            "carry a system prompt, earlier turns or tools that `sharegpt.json` (last user turn), "
            "`aiperf.jsonl` (last user turn) and `by_source/` (first user turn) cannot hold; "
            "their prompts there are shorter and differ from the training prompt. Use "
            "`openai.jsonl`, `vllm_custom.jsonl` or GuideLLM for exact prompts."
        )
    if "aiperf" in formats:
        live = [
            it
            for it in plan.single
            if any(m.get("role") in ("assistant", "tool") for m in it.messages or ())
        ]
        if live:
            out.append(
                f"`aiperf_multi_turn.jsonl`: {_count(len(live), 'item')} with assistant or tool "
                "turns in their history. AIPerf generates the replies between user turns live "
                "and cannot replay tool results, so these sessions only approximate the recorded "
                "history; earlier turns use AIPerf's default output length (set "
                "`--output-tokens-mean`)."
            )
    if "sharegpt" in formats and plan.single:
        d = vllm_sharegpt_drops(plan.single)
        if d.total:
            out.append(
                f"**vLLM `sharegpt` drops {d.total} of {len(plan.single)} items silently** "
                f"(prompt < {VLLM_SHAREGPT_MIN_LEN} tokens: {d.prompt_short}, prompt > "
                f"{VLLM_SHAREGPT_MAX_PROMPT}: {d.prompt_long}, prompt + output > "
                f"{VLLM_SHAREGPT_MAX_TOTAL}: {d.total_long}, output < {VLLM_SHAREGPT_MIN_LEN}: "
                f"{d.output_short}; estimated from `n_prompt_tokens` and `max_tokens`: vLLM "
                "tokenizes the human turn alone, shorter than the whole prompt for items with a "
                "system prompt or history, and the response text). No flag lifts the "
                "length filter: `--sharegpt-output-len` only skips the output minimum. To keep "
                "every item with vLLM use `vllm_custom.jsonl`; SGLang's sharegpt loader filters "
                "only with `--sharegpt-context-len`."
            )
        out.append(
            "vLLM `sharegpt` oversamples to `--num-prompts` (default 1000) unless "
            "`--no-oversample`; SGLang always shuffles sharegpt data."
        )
    if "openai" in formats or "sharegpt" in formats or "by_source" in formats:
        out.append(
            "**SGLang sends `ignore_eos=True` by default.** "
            + (
                "`openai.jsonl` sets `ignore_eos: false` on every row, so SGLang stops at EOS for "
                "it; for `sharegpt.json` and `by_source/` pass `--disable-ignore-eos` (in the "
                "commands below). Text generated past EOS distorts acceptance; keep "
                "`ignore_eos` only for forced-length throughput runs."
                if not ignore_eos
                else "These files ask for `ignore_eos: true` (forced-length throughput run): "
                "acceptance measured on text generated past EOS is not representative."
            )
        )
    if "guidellm" in formats:
        tools = [it for it in items if it.tools]
        text = (
            "GuideLLM forces `ignore_eos=True` whenever an output count is given "
            "(`output_tokens_count` is on every row); GuideLLM skips rows that fail with only a "
            "log line: compare its request count with the row count."
        )
        if tools:
            text += (
                f" {_count(len(tools), 'item')} with tool definitions left out of "
                "`guidellm.jsonl` (a `tools` column would make GuideLLM force `tool_choice`); "
                "their tool calls stay in `messages`."
            )
        out.append(text)
    if "vllm_custom" in formats:
        out.append(
            "`vllm_custom.jsonl` holds rendered prompts: without `--skip-chat-template` vLLM "
            "templates them a second time; without `--no-oversample` it repeats rows up to "
            "`--num-prompts`; without `--custom-output-len -1` it ignores `output_tokens`."
        )
    if "by_source" in formats:
        out.append(
            "`by_source/` files hold raw user text that vLLM `spec_bench` and SGLang `speed-bench` "
            "wrap in the chat template; vLLM `spec_bench` shuffles with seed 0 whatever `--seed` "
            "says and pads with duplicates unless `--no-oversample`."
        )
    if any(f in formats for f in ("vllm_custom", "guidellm", "token_ids")):
        bos = _bos_warning(items)
        if bos:
            out.append(bos)
    clamped = [it for it in items if it.max_tokens < 1]
    if clamped:
        out.append(
            f"{_count(len(clamped), 'item')} recorded an empty response; they ask for 1 output "
            "token: "
            f"{_ids(clamped)}."
        )
    out += _recovery_warnings(plan, formats=formats)
    dup = sorted(k for k, v in Counter(it.id for it in items).items() if v > 1)
    if dup:
        out.append(
            f"**Duplicate ids** ({len(dup)}): {', '.join(f'`{d}`' for d in dup[:_MAX_IDS_SHOWN])}. "
            "Results cannot be joined back unambiguously, and AIPerf merges sessions that share "
            "an id."
        )
    return out


_CHAT_FILES = {
    "openai": "`openai.jsonl`",
    "guidellm": "`guidellm.jsonl` (`messages` null)",
    "aiperf": "`aiperf.jsonl`, `aiperf_multi_turn.jsonl`",
    "sharegpt": "`sharegpt.json`",
    "by_source": "`by_source/`",
}


def _recovery_warnings(plan: Plan, *, formats: Sequence[str]) -> list[str]:
    """Items not token-exact (left out of the chat files) or flat (kept, with fewer turns)."""
    items, n = plan.items, len(plan.items)
    out: list[str] = []
    inexact = [it for it in items if it.fidelity != "tokens"]
    if inexact:
        kinds = Counter(it.fidelity or "not checked" for it in inexact)
        text = (
            f"**{len(inexact)} of {n} items are not token-exact** "
            f"({', '.join(f'{k}: {v}' for k, v in sorted(kinds.items()))}): their `messages` are "
            f"missing or do not re-render to the recorded prompt ids: {_ids(inexact)}."
        )
        with_msgs = [it for it in inexact if has_messages(it)]
        files = [_CHAT_FILES[f] for f in formats if f in _CHAT_FILES]
        if with_msgs and files:
            text += (
                f" {_count(len(with_msgs), 'item')} with messages left out of the chat-based "
                f"files ({'; '.join(files)}), so no chat endpoint is sent another prompt."
            )
        text += (
            " `token_ids.jsonl` (native endpoints) and `vllm_custom.jsonl` with "
            "`--skip-chat-template` replay every item exactly."
        )
        out.append(text)
    flat = [it for it in plan.chat if it.structure == "flat"]
    files = [_CHAT_FILES[f] for f in formats if f in _CHAT_FILES]
    if flat and files:
        out.append(
            f"**{len(flat)} of {len(plan.chat)} chat items are flat** (`structure: flat`): not "
            "every turn was recognised, so the prompt text, template markers included, sits in "
            "fewer messages. They re-render to the exact prompt ids, but multi-turn files "
            "(`openai.jsonl`, `guidellm.jsonl`, `aiperf_multi_turn.jsonl`) see fewer turns than "
            "the training conversation, and single-turn files (`sharegpt.json`, `aiperf.jsonl`, "
            f"`by_source/`) carry template text as the user turn: {_ids(flat)}."
        )
    return out


def _block(cmd: list[str]) -> list[str]:
    return ["```bash", " \\\n  ".join(cmd), "```"]


def _sglang(backend: str, *args: str, tok: str, ignore_eos: bool) -> list[str]:
    """A ``sglang.bench_serving`` command; SGLang ignores EOS unless told not to."""
    return _block(
        [
            f"python -m sglang.bench_serving --backend {backend}",
            "--base-url <URL> --model <MODEL>",
            f"--tokenizer {tok}",
            *args,
            *([] if ignore_eos else ["--disable-ignore-eos"]),
        ]
    )


def _vllm(backend: str, endpoint: str, *args: str, tok: str, ignore_eos: bool) -> list[str]:
    """A ``vllm bench serve`` command; vLLM stops at EOS unless told not to."""
    return _block(
        [
            f"vllm bench serve --backend {backend} --endpoint {endpoint}",
            "--base-url <URL> --model <MODEL>",
            f"--tokenizer {tok}",
            *args,
            *(["--ignore-eos"] if ignore_eos else []),
        ]
    )


def _commands(fmt: str, plan: Plan, *, tok: str, ignore_eos: bool) -> list[str]:
    if fmt == "openai":
        k = len(plan.chat)
        return [
            f"### `openai.jsonl` — SGLang, exact chat history ({k} rows)",
            "",
            "Request keys only; `provenance.jsonl` gives id, source, cluster and provenance for "
            "the same line number. SGLang keeps file order and sends the first `--num-prompts` "
            "lines; do not pass `--sharegpt-output-len` (it would replace `max_tokens`).",
            "",
            *_sglang(
                "sglang-oai-chat",
                "--dataset-name openai --dataset-path openai.jsonl",
                f"--num-prompts {k}",
                tok=tok,
                ignore_eos=ignore_eos,
            ),
        ]
    if fmt == "vllm_custom":
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
                tok=tok,
                ignore_eos=ignore_eos,
            ),
        ]
    if fmt == "sharegpt":
        k = len(plan.single)
        return [
            f"### `sharegpt.json` — SGLang or vLLM, last user turn only ({k} rows)",
            "",
            "The human turn is raw text: use a chat backend so the server applies the template "
            "once. vLLM drops pairs outside its length limits (see warnings).",
            "",
            *_sglang(
                "sglang-oai-chat",
                "--dataset-name sharegpt --dataset-path sharegpt.json",
                f"--num-prompts {k}",
                tok=tok,
                ignore_eos=ignore_eos,
            ),
            "",
            *_vllm(
                "openai-chat",
                "/v1/chat/completions",
                "--dataset-name sharegpt --dataset-path sharegpt.json",
                "--no-oversample",
                f"--num-prompts {k}",
                tok=tok,
                ignore_eos=ignore_eos,
            ),
        ]
    if fmt == "token_ids":
        k = len(plan.items)
        return [
            f"### `token_ids.jsonl` — exact prompt ids ({k} rows)",
            "",
            "No client in the checked versions loads token ids (SGLang has no token-trace "
            "dataset; vLLM's `timed_trace` builds random tokens from hashes). Replay it yourself "
            "against a native endpoint: SGLang `POST /generate` with `input_ids` and "
            '`sampling_params: {"max_new_tokens": num_output_tokens}`, or vLLM `/v1/completions` '
            "with the ids as `prompt` (token-id prompts) and `max_tokens`.",
        ]
    if fmt == "guidellm":
        k = len(plan.items)
        data = '\'{"kind":"json_file","path":"guidellm.jsonl"}\''
        return [
            f"### `guidellm.jsonl` — GuideLLM ({k} rows)",
            "",
            "On chat endpoints GuideLLM sends `messages` verbatim (exact history); on "
            "completions it sends the rendered `prompt`. Rows are not shuffled.",
            "",
            *_block(
                [
                    "guidellm run --target <URL> --model <MODEL>",
                    f"--processor {tok}",
                    f"--data {data}",
                    "--request-type chat_completions",
                    f"--profile synchronous --max-requests {k}",
                ]
            ),
            "",
            "For completions use `--request-type text_completions`.",
        ]
    if fmt == "aiperf":
        k = len(plan.single)
        extra = (
            'Rows carry `extra: {"ignore_eos": true}`, so `output_length` is the exact length.'
            if ignore_eos
            else "`output_length` is only a cap (no `ignore_eos` in `extra`)."
        )
        return [
            f"### `aiperf.jsonl` / `{AIPERF_MULTI_NAME}` — AIPerf ({k} items each)",
            "",
            "`--custom-dataset-type` applies to a whole file, so the suite comes twice: "
            "`aiperf.jsonl` (single_turn, last user turn only, file order kept) and "
            f"`{AIPERF_MULTI_NAME}` (multi_turn, one session per item with its system prompt and "
            f"user turns, `session_id` = item id). {extra}",
            "",
            *_block(
                [
                    "aiperf profile --url <URL> --model <MODEL> --endpoint-type chat --streaming",
                    f"--tokenizer {tok}",
                    "--input-file aiperf.jsonl --custom-dataset-type single_turn",
                    f"--request-count {k}",
                ]
            ),
            "",
            *_block(
                [
                    "aiperf profile --url <URL> --model <MODEL> --endpoint-type chat --streaming",
                    f"--tokenizer {tok}",
                    f"--input-file {AIPERF_MULTI_NAME} --custom-dataset-type multi_turn",
                    f"--conversation-num {k}",
                ]
            ),
        ]
    if fmt == "by_source":
        out = [
            "### `by_source/` — vLLM `spec_bench`, SGLang `speed-bench`, first user turn only",
            "",
            "One file per source; output length is a fixed flag, set here to the source's median "
            "`max_tokens`. Both loaders render the chat template themselves, so the rendered "
            "text goes to a completions or native endpoint (a chat endpoint would template it "
            "twice); SGLang renders with `enable_thinking=False`. SGLang's "
            "`--speed-bench-category` accepts only its own entropy names: pass no category.",
            "",
        ]
        if not plan.by_source:
            return [*out, "No items with recovered user turns: nothing written."]
        for src, group in plan.by_source.items():
            rel = f"by_source/{plan.stems[src]}.jsonl"
            k, med = len(group), _median_out(group)
            out += [
                f"`{rel}` — source `{src}`, {_count(k, 'row')}:",
                "",
                *_vllm(
                    "openai",
                    "/v1/completions",
                    f"--dataset-name spec_bench --dataset-path {rel}",
                    f"--spec-bench-output-len {med} --no-oversample --num-prompts {k}",
                    tok=tok,
                    ignore_eos=ignore_eos,
                ),
                "",
                *_sglang(
                    "sglang",
                    f"--dataset-name speed-bench --dataset-path {rel}",
                    f"--speed-bench-output-len {med} --num-prompts {k}",
                    tok=tok,
                    ignore_eos=ignore_eos,
                ),
                "",
            ]
        return out
    raise ConfigError(f"formats: expected names from {', '.join(FORMATS)}, found {fmt!r}")


def _join_section(formats: Sequence[str]) -> list[str]:
    lines = [
        "## Joining acceptance back to items",
        "",
        "Every file carries the item id (`openai.jsonl` through the same line of "
        "`provenance.jsonl`; GuideLLM as `dp_id`; AIPerf multi-turn as `session_id`), which "
        "`suite.jsonl` maps to source, cluster, weight and provenance.",
        "",
        "- SGLang: start the server with speculative decoding and ask for "
        "`return_spec_tokens_details` to get `spec_accept_length` and `spec_verify_ct` per "
        "request. "
        + (
            "`openai.jsonl` rows are sent in file order, so request *i* is line *i* of "
            "`provenance.jsonl`. "
            if "openai" in formats
            else ""
        )
        + "Weight per-source means by `weight` to estimate the source's acceptance.",
        "- vLLM: spec-decode counters (drafted and accepted tokens) come from the server's "
        "`/metrics` endpoint, a server setting rather than a `vllm bench serve` flag; they are "
        "aggregates, so run one file per source (`by_source/`, or a filtered "
        "`vllm_custom.jsonl`) and scrape `/metrics` before and after each run. With "
        "`--disable-shuffle --no-oversample`, request *i* of a saved detailed result is row *i*.",
    ]
    return lines
