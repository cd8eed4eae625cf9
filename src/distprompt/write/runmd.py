"""``RUN.md``: the command for each benchmark client on a suite's files, and its warnings.

The commands follow the loaders of the client versions in
:data:`~distprompt.write.formats.CLIENT_VERSIONS`; the warnings name what each client would silently
do to this suite: items left out of the chat-text files, history lost in single-turn files, the
pairs vLLM's and SGLang's ``sharegpt`` loaders drop
(:func:`distprompt.write.clients.sharegpt_drops`), SGLang's and GuideLLM's ``ignore_eos`` defaults,
a BOS that a completions endpoint would add a second time, items that are not token-exact, and
duplicate ids. :func:`distprompt.write.export.write_exports` writes it next to the client files.

Example:
    >>> text = run_md(items, formats=["openai"], tokenizer_name="Qwen/Qwen3-8B")  # doctest: +SKIP
    >>> text.splitlines()[0]  # doctest: +SKIP
    '# Running this suite'
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from distprompt.errors import ConfigError
from distprompt.records import SuiteItem
from distprompt.write.clients import (
    SGLANG_SHAREGPT_MIN_LEN,
    VLLM_SHAREGPT_MAX_PROMPT,
    VLLM_SHAREGPT_MAX_TOTAL,
    VLLM_SHAREGPT_MIN_LEN,
    ShareGptDrops,
    sharegpt_drops,
)
from distprompt.write.commands import (
    RunContext,
    commands,
    count_of,
    temp_text,
)
from distprompt.write.formats import (
    CLIENT_VERSIONS,
    Plan,
    checked_formats,
    has_history,
    has_messages,
    last_user_text,
    out_len,
)

__all__ = ["render_run_md", "run_md"]

#: The checker that runs every command below against the pinned clients.
CHECK_SCRIPT = "scripts/check_clients.py"

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
    tokenizer: Any = None,
    temperature: float = 0.0,
) -> str:
    """``RUN.md``: the command for each client on these files, and warnings for this suite.

    Args:
        items: The suite items, as given to :func:`~distprompt.write.export.write_exports`.
        formats: The formats written.
        tokenizer_name: Tokenizer name or path for ``--tokenizer``; a placeholder when empty.
        ignore_eos: Whether the files ask for ``ignore_eos``.
        tokenizer: The loaded tokenizer, to count what SGLang and vLLM drop from
            ``sharegpt.json`` by their own rule; without it RUN.md says the counts are unknown.
        temperature: Sampling temperature every command sets (0: greedy).

    Returns:
        Markdown text; the same items give the same text.

    Raises:
        ConfigError: A format name is unknown, or ``temperature`` is negative.

    Example:
        >>> "## Warnings" in run_md(items, formats=FORMATS, tokenizer_name="tok")  # doctest: +SKIP
        True
    """
    return render_run_md(
        Plan.of(items),
        formats=checked_formats(formats),
        tokenizer_name=tokenizer_name,
        ignore_eos=ignore_eos,
        tokenizer=tokenizer,
        temperature=temperature,
    )


def _ids(items: Iterable[SuiteItem]) -> str:
    ids = [it.id for it in items]
    shown = ", ".join(f"`{i}`" for i in ids[:_MAX_IDS_SHOWN])
    more = len(ids) - _MAX_IDS_SHOWN
    return shown + (f" … and {more} more" if more > 0 else "")


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


def _tokenizer_class_warning(tokenizer_name: str) -> str | None:
    """Warn when the folder names a Llama tokenizer class over a byte-level ``tokenizer.json``.

    transformers 5.19 (pinned by sglang 0.5.23; vllm 0.33.0 wants < 5.21) then builds a
    ``LlamaTokenizer`` that tokenizes differently (seen on DeepSeek-V3: every text), so the
    clients' own counts differ from the ones here; newer transformers load the file as it is.
    """
    import json
    from pathlib import Path

    folder = Path(tokenizer_name).expanduser() if tokenizer_name else None
    if folder is None or not folder.is_dir():
        return None
    try:
        cfg = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    cls = str(cfg.get("tokenizer_class") or "") if isinstance(cfg, dict) else ""
    if not cls.startswith("Llama"):
        return None  # before reading tokenizer.json: tens of MB, ~0.5 s
    try:
        tj = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(tj, dict) or "ByteLevel" not in json.dumps(tj.get("pre_tokenizer")):
        return None
    return (
        f"**Client tokenizer class.** `tokenizer_config.json` names `{cls}` over a byte-level "
        "`tokenizer.json`: transformers 5.19 (what SGLang 0.5.23 pins; vLLM 0.33.0 wants < 5.21) "
        "loads it as `LlamaTokenizer`, which tokenizes differently: the clients' prompt "
        "lengths, output lengths and `sharegpt.json` drops differ from the counts here, and "
        "SGLang `speed-bench` (which decodes the ids it templated) sends text with the spaces "
        "lost. Set `tokenizer_class` to "
        "`TokenizersBackend` (or `PreTrainedTokenizerFast`) in a copy of the folder for the "
        "clients; the server tokenizes on its own."
    )


def _is_path(name: str) -> bool:
    """Whether a tokenizer name is a filesystem path (not a hub id such as ``org/name``)."""
    import os

    return bool(name) and (os.path.isabs(name) or name.startswith((".", "~")))


def render_run_md(
    plan: Plan,
    *,
    formats: Sequence[str],
    tokenizer_name: str,
    ignore_eos: bool,
    tokenizer: Any = None,
    temperature: float = 0.0,
    notices: Sequence[Sequence[str]] = (),
) -> str:
    """:func:`run_md` of a :class:`~distprompt.write.formats.Plan` whose formats are already
    checked; ``notices`` (Markdown blocks) come first, below the heading, in their order."""
    if not temperature >= 0:
        raise ConfigError(f"temperature: expected a number >= 0, found {temperature!r}")
    items = plan.items
    tok = tokenizer_name or "<TOKENIZER>"
    versions = ", ".join(f"{k} {v}" for k, v in CLIENT_VERSIONS.items())
    src_counts = Counter(it.source for it in items)
    drops = sharegpt_drops(plan.single, tokenizer) if "sharegpt" in formats else {}
    ctx = RunContext(tok=tok, ignore_eos=ignore_eos, temperature=float(temperature), drops=drops)
    lines: list[str] = [
        "# Running this suite",
        *(line for block in notices for line in ("", *block)),
        "",
        f"{len(items)} items from {len(src_counts)} sources "
        f"({', '.join(f'{s}: {n}' for s, n in sorted(src_counts.items()))}).",
        f"Tokenizer: `{tokenizer_name or 'unknown'}`"
        + (
            " (the path where this suite was built; on another machine put the same "
            "tokenizer's folder or hub id after `--tokenizer`). "
            if _is_path(tokenizer_name)
            else ". "
        )
        + "Output lengths: the recorded first response (`max_tokens`), at least 1. "
        f"`ignore_eos` in the files: {'true' if ignore_eos else 'false'}.",
        f"Temperature: every command below sets `temperature` {temp_text(ctx.temperature)} "
        f"explicitly{' (greedy)' if ctx.temperature == 0 else ''}; `export --temperature` "
        "changes it.",
        "",
        f"Commands checked against {versions}: run as written against a local server recording "
        f"each request body ({CHECK_SCRIPT}), with the request counts and output lengths below. "
        "Loaders change between versions: with another version, check the flags against "
        "`--help`.",
        "Replace `<URL>` and `<MODEL>` with the server address and served model name, and "
        "run every command from this folder (`cd` into it first): the file paths in them are "
        "relative to it.",
        "",
        "## Warnings",
        "",
    ]
    warnings = _warnings(plan, formats=formats, ctx=ctx)
    cls_warning = _tokenizer_class_warning(tokenizer_name)
    if cls_warning:
        warnings.insert(0, cls_warning)
    if warnings:
        lines.extend(f"- {w}" for w in warnings)
    else:
        lines.append("- none")
    lines += ["", "## Commands", ""]
    for fmt in formats:
        lines.extend(commands(fmt, plan, ctx=ctx))
        lines.append("")
    lines += _join_section(formats)
    return "\n".join(lines).rstrip("\n") + "\n"


def _warnings(plan: Plan, *, formats: Sequence[str], ctx: RunContext) -> list[str]:
    """RUN.md's warnings, in the order they are listed: turns and history first, then what each
    client does, then the items' own (BOS, empty replies, recovery, duplicate ids)."""
    items = plan.items
    out = _turn_warnings(plan, formats) + _client_warnings(plan, formats, ctx)
    if any(f in formats for f in ("vllm_custom", "guidellm", "token_ids")):
        bos = _bos_warning(items)
        if bos:
            out.append(bos)
    clamped = [it for it in items if it.max_tokens < 1]
    if clamped:
        out.append(
            f"{count_of(len(clamped), 'item')} recorded an empty response; they ask for 1 output "
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


def _turn_warnings(plan: Plan, formats: Sequence[str]) -> list[str]:
    """Items without chat turns or user text, history the single-turn files lose, and AIPerf's
    live replies between turns."""
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
            f"{count_of(len(no_user), 'item')} with messages but no user text: "
            f"{_ids(no_user)}; left out of `sharegpt.json` and the AIPerf files."
        )
    history = [it for it in plan.single if has_history(it)]
    lossy = [f for f in formats if f in ("sharegpt", "aiperf", "by_source")]
    if history and lossy:
        out.append(
            f"**History lost in single-turn files.** {len(history)} of {len(plan.single)} items "
            "carry a system prompt, earlier turns or tools that `sharegpt.json` (last user turn), "
            "`aiperf.jsonl` (last user turn) and `by_source/` (first user turn) cannot hold; "
            "their prompts there are shorter and differ from the training prompt. Use "
            "`openai.jsonl` or `vllm_custom.jsonl` for exact prompts"
            + (
                f"; GuideLLM too, except for the {count_of(n_tools, 'item')} with tool definitions "
                "(its chat requests carry no `tools`, see below)."
                if (n_tools := sum(1 for it in items if it.tools))
                else ", or GuideLLM."
            )
        )
    if "aiperf" in formats:
        live = [
            it
            for it in plan.single
            if any(m.get("role") in ("assistant", "tool") for m in it.messages or ())
        ]
        if live:
            out.append(
                f"`aiperf_multi_turn.jsonl`: {count_of(len(live), 'item')} with assistant or tool "
                "turns in their history. AIPerf generates the replies between user turns live "
                "and cannot replay tool results, so these sessions only approximate the recorded "
                "history. Every turn carries its own `output_length` (earlier turns: the length "
                "of the recorded reply that followed them), because AIPerf sends a turn without "
                "one with no `max_completion_tokens` at all."
            )
        out.append(
            "AIPerf: do not set `HF_HUB_OFFLINE=1` with a local tokenizer folder: AIPerf "
            f"{CLIENT_VERSIONS['aiperf']} then fails to load it (it loads without)."
        )
    return out


def _client_warnings(plan: Plan, formats: Sequence[str], ctx: RunContext) -> list[str]:
    """What each client does to this suite's files: sharegpt drops, ``ignore_eos`` defaults,
    tools GuideLLM cannot send, and the loaders' own flags."""
    items = plan.items
    ignore_eos = ctx.ignore_eos
    out: list[str] = []
    if "sharegpt" in formats and plan.single:
        out.extend(_sharegpt_warnings(plan, ctx))
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
                f" {count_of(len(tools), 'item')} with tool definitions left out of "
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
            "wrap in the chat template; vLLM `spec_bench` shuffles unless `--disable-shuffle` and "
            "pads with duplicates unless `--no-oversample`; SGLang `speed-bench` always shuffles."
        )
        kw = [it for it in plan.first if it.chat_template_kwargs]
        if kw:
            names = sorted({k for it in kw for k in it.chat_template_kwargs or {}})
            out.append(
                f"**SGLang `speed-bench` renders with the template's defaults.** Its loader calls "
                "`apply_chat_template` with no keyword arguments, so the "
                f"{', '.join(f'`{k}`' for k in names)} that {len(kw)} of {len(plan.first)} "
                "`by_source/` items were rendered with is not applied and their SGLang prompt "
                "differs from the training prompt; vLLM `spec_bench` applies them through "
                "`--chat-template-kwargs` (in the commands below)."
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
                f" {count_of(len(with_msgs), 'item')} with messages left out of the chat-based "
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


def _drop_text(client: str, d: ShareGptDrops, n: int) -> str:
    reasons = ", ".join(f"{k}: {v}" for k, v in d.reasons.items() if v)
    if sum(d.reasons.values()) > d.total:
        reasons += "; an item can break more than one rule, so these counts overlap"
    head = f"**{client} `sharegpt` drops {d.total} of {n} items silently**"
    return head + (f" ({reasons}: {_ids_of(d.ids)})" if d.total else "")


def _ids_of(ids: Sequence[str]) -> str:
    shown = ", ".join(f"`{i}`" for i in ids[:_MAX_IDS_SHOWN])
    more = len(ids) - _MAX_IDS_SHOWN
    return shown + (f" … and {more} more" if more > 0 else "")


def _sharegpt_warnings(plan: Plan, ctx: RunContext) -> list[str]:
    """Per client: what SGLang's and vLLM's sharegpt loaders drop and which lengths they ask."""
    n = len(plan.single)
    v, sg = ctx.drops["vllm"], ctx.drops["sglang"]
    out: list[str] = []
    if not v.computed:
        out.append(
            "**`sharegpt.json` drop counts unknown** (no tokenizer was loaded at export): SGLang "
            f"drops pairs whose prompt or response re-tokenizes to < {SGLANG_SHAREGPT_MIN_LEN} "
            f"tokens, vLLM those outside {VLLM_SHAREGPT_MIN_LEN} <= prompt <= "
            f"{VLLM_SHAREGPT_MAX_PROMPT}, prompt + output <= {VLLM_SHAREGPT_MAX_TOTAL}, output "
            f">= {VLLM_SHAREGPT_MIN_LEN}; compare the request counts with {n}."
        )
    else:
        out.append(
            f"{_drop_text('vLLM', v, n)}; vLLM re-tokenizes both "
            "turns with special tokens and applies `is_valid_sequence`. No flag lifts the "
            "length filter: `--sharegpt-output-len` only skips the output minimum. To keep every "
            "item with vLLM use `vllm_custom.jsonl`."
        )
        if sg.total:
            out.append(
                f"{_drop_text('SGLang', sg, n)}; it always drops pairs whose prompt or "
                f"response re-tokenizes to < {SGLANG_SHAREGPT_MIN_LEN} tokens. Use "
                "`openai.jsonl` to keep them with SGLang."
            )
        off = sum(1 for it in plan.single if sg.kept_out_lens.get(it.id, 0) != out_len(it))
        if off:
            diffs = Counter(
                sg.kept_out_lens[it.id] - out_len(it)
                for it in plan.single
                if it.id in sg.kept_out_lens
            )
            out.append(
                f"`sharegpt.json` output lengths: both clients ask for the response re-tokenized, "
                f"not `max_tokens`; that differs for {off} of {n} items "
                f"({_length_gaps(diffs)}). The format has no length field; use "
                "`openai.jsonl` or `vllm_custom.jsonl` for exact lengths."
            )
    out.append(
        "vLLM `sharegpt` oversamples to `--num-prompts` (default 1000) unless `--no-oversample` "
        "and shuffles unless `--disable-shuffle` (both in the command below); SGLang always "
        "shuffles sharegpt data."
    )
    return out


def _length_gaps(diffs: Counter[int]) -> str:
    """How far the re-tokenized reply lengths are from ``max_tokens``, and why, in words."""
    gaps = {d: c for d, c in diffs.items() if d}
    if not gaps:
        return "dropped items only"
    parts = [
        f"{c} {'item' if c == 1 else 'items'} {abs(d)} {'token' if abs(d) == 1 else 'tokens'} "
        f"{'shorter' if d < 0 else 'longer'}"
        for d, c in sorted(gaps.items())
    ]
    shown = ", ".join(parts)  # all of them: scripts/check_clients.py compares them with a run
    if set(gaps) == {-1}:
        why = "the response text has no end-of-turn token, so it is one short"
    else:
        why = (
            "the response is detokenized without its special tokens — the end-of-turn token "
            "and any thinking or tool-call tags the template writes as special tokens — so "
            "it re-tokenizes shorter, by as many tokens as it had"
        )
    return f"{shown}: {why}"


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
