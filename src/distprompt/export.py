"""Write a suite in the layout each benchmark client loads, plus ``RUN.md``.

Every layout follows what the client's loader really does, as read in the loader code of
sglang 0.5.23, vllm 0.33.0, guidellm 0.8.1 and aiperf 0.13.0 (:data:`CLIENT_VERSIONS`):

========================  ====================================================================
file                      client
========================  ====================================================================
``openai.jsonl``          SGLang ``bench_serving --dataset-name openai``: exact chat history;
                          provenance in ``provenance.jsonl``, aligned line by line
``vllm_custom.jsonl``     ``vllm bench serve --dataset-name custom``: the rendered prompt
``sharegpt.json``         SGLang / vLLM ``--dataset-name sharegpt``: last user turn only
``token_ids.jsonl``       exact prompt ids, for native endpoints (no client loads it)
``guidellm.jsonl``        GuideLLM ``json_file``: messages (chat) and rendered prompt (completions)
``aiperf.jsonl``          AIPerf ``single_turn`` (every item, last user turn only) and
``aiperf_multi_turn.jsonl``  AIPerf ``multi_turn`` (every item as a session)
``by_source/<s>.jsonl``   vLLM ``spec_bench`` / SGLang ``speed-bench``: first user turn only
========================  ====================================================================

Items whose chat turns were not recovered (``messages`` is None or empty) are left out of every
file that needs raw chat text (``openai``, ``sharegpt``, ``aiperf``, ``by_source``): putting the
rendered prompt there instead would have it templated a second time. ``RUN.md`` names them.

Example:
    >>> from pathlib import Path
    >>> files = write_exports(items, Path("out"), formats=["openai"])  # doctest: +SKIP
    >>> files["openai"]  # doctest: +SKIP
    ['openai.jsonl', 'provenance.jsonl']
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from distprompt._io import atomic_write_bytes, atomic_write_lines
from distprompt.errors import ConfigError
from distprompt.records import SuiteItem

__all__ = ["CLIENT_VERSIONS", "FORMATS", "check_formats", "run_md", "write_exports"]

logger = logging.getLogger("distprompt.export")

FORMATS: tuple[str, ...] = (
    "openai",
    "vllm_custom",
    "sharegpt",
    "token_ids",
    "guidellm",
    "aiperf",
    "by_source",
)

#: Client versions whose loaders the layouts and commands were checked against.
CLIENT_VERSIONS: dict[str, str] = {
    "sglang": "0.5.23",
    "vllm": "0.33.0",
    "guidellm": "0.8.1",
    "aiperf": "0.13.0",
}

RUN_MD = "RUN.md"
PROVENANCE_NAME = "provenance.jsonl"
AIPERF_MULTI_NAME = "aiperf_multi_turn.jsonl"

# vLLM's sharegpt loader (``is_valid_sequence``) drops these silently.
VLLM_SHAREGPT_MIN_LEN = 4
VLLM_SHAREGPT_MAX_PROMPT = 1024
VLLM_SHAREGPT_MAX_TOTAL = 2048

_MAX_IDS_SHOWN = 10
_JSON_OPTS = orjson.OPT_NON_STR_KEYS
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")
_WINDOWS_RESERVED = frozenset(
    {"CON", "PRN", "AUX", "NUL"}
    | {f"COM{i}" for i in range(1, 10)}
    | {f"LPT{i}" for i in range(1, 10)}
)
# A leading special-token text: <s>, <|begin_of_text|>, <｜begin▁of▁sentence｜>, [BOS] ...
_LEADING_SPECIAL = re.compile(
    r"^(<\|[^|<>\s]{1,64}\|>|<｜[^｜<>\s]{1,64}｜>|<[^<>\s]{1,32}>|\[[A-Z_]{2,16}\])"
)
_BOS_HINTS = ("begin", "bos", "startoftext", "start_of_text")


def check_formats(formats: Sequence[str]) -> None:
    """Refuse unknown format names before anything is written.

    Raises:
        ConfigError: A name is not one of :data:`FORMATS`.

    Example:
        >>> check_formats(["openai", "sharegpt"])
    """
    if isinstance(formats, str):
        formats = [formats]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ConfigError(
            f"formats: expected names from {', '.join(FORMATS)}, "
            f"found {', '.join(map(repr, unknown))}; fix the format list"
        )


# --------------------------------------------------------------------------------------------
# Per-item views shared by the writers and RUN.md
# --------------------------------------------------------------------------------------------


def _dumps(obj: Any) -> bytes:
    return orjson.dumps(obj, option=_JSON_OPTS)


def _has_messages(item: SuiteItem) -> bool:
    return bool(item.messages)


def _out_len(item: SuiteItem) -> int:
    """Output length to ask for: at least 1 (AIPerf aborts the load on 0, others misbehave)."""
    return max(1, int(item.max_tokens))


def _text(content: Any) -> str:
    """Plain text of an OpenAI message content (a string or a list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    return str(content)


def _user_texts(item: SuiteItem) -> list[str]:
    return [_text(m.get("content")) for m in item.messages or () if m.get("role") == "user"]


def _first_user_text(item: SuiteItem) -> str:
    texts = _user_texts(item)
    return texts[0] if texts else ""


def _last_user_text(item: SuiteItem) -> str:
    texts = _user_texts(item)
    return texts[-1] if texts else ""


def _has_history(item: SuiteItem) -> bool:
    """True when the prompt carries more than one user turn: system, earlier turns, tools."""
    if item.tools:
        return True
    msgs = item.messages or ()
    return any(m.get("role") != "user" for m in msgs) or len(msgs) > 1


def _wire_message(msg: dict[str, Any]) -> dict[str, Any]:
    """A message as the OpenAI wire format wants it: tool-call ``arguments`` as a JSON string."""
    out = dict(msg)
    if msg.get("tool_calls"):
        out["tool_calls"] = [_wire_call(call) for call in msg["tool_calls"]]
    return out


def _wire_call(call: dict[str, Any]) -> dict[str, Any]:
    out = dict(call)
    fn = call.get("function")
    if isinstance(fn, dict) and fn.get("arguments") is not None:
        args = fn["arguments"]
        if not isinstance(args, str):
            # stdlib json with default separators: the same text transformers' chat-template
            # ``tojson`` renders, so a server that templates the string verbatim sees what the
            # training prompt held.
            out["function"] = {**fn, "arguments": json.dumps(args, ensure_ascii=False)}
    return out


def _wire_messages(item: SuiteItem) -> list[dict[str, Any]]:
    """The item's messages in OpenAI wire format.

    Recovered turns carry no tool-call ids when the template does not render them, but servers
    validate ``tool_calls[].id`` and ``tool_call_id``: missing ones are filled with stable ids
    (``call_<message>_<k>``), and each tool message takes the next unanswered call's id. Such
    templates do not render ids, so the prompt the server builds is unchanged.
    """
    out: list[dict[str, Any]] = []
    pending: list[str] = []
    for i, msg in enumerate(item.messages or ()):
        wire = _wire_message(msg)
        if wire.get("tool_calls"):
            calls = []
            for k, call in enumerate(wire["tool_calls"]):
                call = {"id": f"call_{i}_{k}", "type": "function", **call}
                if not call["id"]:
                    call["id"] = f"call_{i}_{k}"
                calls.append(call)
            wire["tool_calls"] = calls
            pending = [c["id"] for c in calls]
        elif wire.get("role") == "tool":
            call_id = pending.pop(0) if pending else None
            if not wire.get("tool_call_id") and call_id is not None:
                wire["tool_call_id"] = call_id
        out.append(wire)
    return out


def _safe_names(sources: Iterable[str]) -> dict[str, str]:
    """Map each source to a file stem that is safe on every file system and unique.

    A stem gets a short hash of the source name whenever it had to be changed, or collides with
    another source case-insensitively, so two sources never share a file.
    """
    uniq = sorted(set(sources))
    stems: dict[str, str] = {}
    for src in uniq:
        stem = _UNSAFE_NAME.sub("_", src).lstrip(".")[:80] or "source"
        changed = stem != src or stem.split(".")[0].upper() in _WINDOWS_RESERVED
        stems[src] = stem if not changed else f"{stem}-{_short_hash(src)}"
    lowered = Counter(s.lower() for s in stems.values())
    for src, stem in stems.items():
        if lowered[stem.lower()] > 1:
            stems[src] = f"{stem}-{_short_hash(src)}"
    return stems


def _short_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]


# --------------------------------------------------------------------------------------------
# Row builders (one per layout); each returns the JSON object of one line
# --------------------------------------------------------------------------------------------


def _openai_row(item: SuiteItem, *, ignore_eos: bool) -> dict[str, Any]:
    # Only request keys: SGLang forwards every key but messages/max_tokens/max_completion_tokens/
    # model into the request body. A per-row ignore_eos overrides SGLang's ignore_eos=True default.
    row: dict[str, Any] = {"messages": _wire_messages(item), "max_tokens": _out_len(item)}
    if item.tools:
        row["tools"] = list(item.tools)
    if item.chat_template_kwargs:
        # The switches the prompt was rendered with (e.g. enable_thinking=False): SGLang and
        # vLLM chat endpoints pass them to the template, so the server renders the same ids.
        row["chat_template_kwargs"] = dict(item.chat_template_kwargs)
    row["ignore_eos"] = ignore_eos
    return row


def _provenance_row(item: SuiteItem) -> dict[str, Any]:
    return {
        "id": item.id,
        "source": item.source,
        "cluster": item.cluster,
        "weight": item.weight,
        "provenance": item.provenance.to_dict(),
        "fidelity": item.fidelity,
    }


def _vllm_custom_row(item: SuiteItem) -> dict[str, Any]:
    # vLLM ignores extra columns, so provenance stays inline.
    return {
        "prompt": item.prompt,
        "output_tokens": _out_len(item),
        "id": item.id,
        "source": item.source,
        "cluster": item.cluster,
        "weight": item.weight,
        "provenance": item.provenance.to_dict(),
        "fidelity": item.fidelity,
    }


def _sharegpt_row(item: SuiteItem) -> dict[str, Any]:
    # P is the last user turn: the recorded response answers it. Both loaders hand P to a chat
    # template (chat backends, SGLang --apply-chat-template), so it must be raw user text.
    return {
        "id": item.id,
        "conversations": [
            {"from": "human", "value": _last_user_text(item)},
            {"from": "gpt", "value": item.response},
        ],
    }


def _token_ids_row(item: SuiteItem) -> dict[str, Any]:
    return {
        "input_tokens": list(item.prompt_ids),
        "num_output_tokens": _out_len(item),
        "id": item.id,
    }


def _guidellm_row(item: SuiteItem) -> dict[str, Any]:
    # GuideLLM matches columns by name (case-insensitive, plural -s/-es, -N/_N turn suffix): the
    # whole column name must be one of its known names, so ``dp_*`` never matches and provenance is
    # safe there. No ``prefix``/``system`` column although the issue asked for the system prompt
    # in ``prefix``: on completions GuideLLM joins prefix + " " + prompt, which would put the
    # system prompt twice in front of a rendered prompt that already holds it; on chat endpoints
    # ``messages`` already carries it. No ``tools`` column either (GuideLLM would pick it up and
    # steer tool_choice); RUN.md counts the items that lose their tool definitions here.
    return {
        "messages": _wire_messages(item) if _has_messages(item) else None,
        "prompt": item.prompt,
        "output_tokens_count": _out_len(item),
        "dp_id": item.id,
        "dp_source": item.source,
        "dp_cluster": item.cluster,
        "dp_weight": item.weight,
        "dp_shard": item.provenance.shard,
        "dp_line": item.provenance.line,
        "dp_fidelity": item.fidelity,
    }


def _aiperf_single_row(item: SuiteItem, *, ignore_eos: bool) -> dict[str, Any]:
    row: dict[str, Any] = {"text": _last_user_text(item), "output_length": _out_len(item)}
    if ignore_eos:
        row["extra"] = {"ignore_eos": True}
    # AIPerf ignores unknown top-level keys: provenance may stay inline.
    row["id"] = item.id
    row["source"] = item.source
    return row


def _aiperf_multi_row(item: SuiteItem, *, ignore_eos: bool) -> dict[str, Any]:
    """One AIPerf session: a leading system turn (hoisted by AIPerf) and every user turn.

    AIPerf generates the assistant replies between turns live, so recorded assistant and tool
    messages cannot be replayed; only the last user turn carries the output length.
    """
    msgs = item.messages or ()
    turns: list[dict[str, Any]] = []
    if msgs and msgs[0].get("role") == "system" and _text(msgs[0].get("content")):
        # No output_length/extra here: AIPerf hoists only a bare system turn.
        turns.append({"role": "system", "text": _text(msgs[0].get("content"))})
    users = [t for t in _user_texts(item) if t]
    for i, text in enumerate(users):
        turn: dict[str, Any] = {"text": text}
        if i == len(users) - 1:
            turn["output_length"] = _out_len(item)
            if ignore_eos:
                turn["extra"] = {"ignore_eos": True}
        turns.append(turn)
    return {"session_id": item.id, "turns": turns, "source": item.source}


def _by_source_row(item: SuiteItem) -> dict[str, Any]:
    # Both clients wrap turns[0] in the chat template: raw user text, never the rendered prompt.
    return {"question_id": item.id, "category": item.source, "turns": [_first_user_text(item)]}


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Plan:
    """Which items each layout holds; shared by the writers and RUN.md so counts agree."""

    items: tuple[SuiteItem, ...]
    chat: tuple[SuiteItem, ...]  # items with recovered messages (openai)
    single: tuple[SuiteItem, ...]  # + a non-empty last user turn (sharegpt, aiperf)
    first: tuple[SuiteItem, ...]  # + a non-empty first user turn (by_source)
    by_source: dict[str, tuple[SuiteItem, ...]]
    stems: dict[str, str]

    @classmethod
    def of(cls, items: Sequence[SuiteItem]) -> _Plan:
        all_items = tuple(items)
        chat = tuple(it for it in all_items if _has_messages(it))
        single = tuple(it for it in chat if _last_user_text(it))
        first = tuple(it for it in chat if _first_user_text(it))
        groups: dict[str, list[SuiteItem]] = {}
        for it in first:
            groups.setdefault(it.source, []).append(it)
        by_source = {src: tuple(groups[src]) for src in sorted(groups)}
        return cls(
            items=all_items,
            chat=chat,
            single=single,
            first=first,
            by_source=by_source,
            stems=_safe_names(by_source),
        )


def write_exports(
    items: Sequence[SuiteItem],
    out_dir: Path,
    *,
    formats: Sequence[str] = FORMATS,
    tokenizer_name: str = "",
    ignore_eos: bool = False,
) -> dict[str, list[str]]:
    """Write the chosen client files and ``RUN.md`` into ``out_dir``.

    Every file is written atomically; the same items give byte-identical files. Item order is the
    given order in every file.

    Args:
        items: Suite items, in the order the files should list them.
        out_dir: Folder to write into (created when missing).
        formats: Names from :data:`FORMATS`. ``openai`` also writes ``provenance.jsonl``;
            ``aiperf`` writes ``aiperf.jsonl`` and ``aiperf_multi_turn.jsonl``.
        tokenizer_name: Tokenizer name or path put into the commands of ``RUN.md``.
        ignore_eos: Ask the server to generate exactly the output length (throughput runs);
            leave False to measure acceptance on text the model would really produce.

    Returns:
        ``{format: [paths written, relative to out_dir, with /]}``, plus ``"run_md"``.

    Raises:
        ConfigError: A format name is unknown.
        OutputError: A file cannot be written.

    Example:
        >>> write_exports(items, Path("out"), formats=["vllm_custom"])  # doctest: +SKIP
        {'vllm_custom': ['vllm_custom.jsonl'], 'run_md': ['RUN.md']}
    """
    fmts = _dedupe(formats)
    check_formats(fmts)
    out_dir = Path(out_dir)
    plan = _Plan.of(items)
    written: dict[str, list[str]] = {}

    def put_lines(rel: str, rows: Iterable[dict[str, Any]]) -> str:
        atomic_write_lines(out_dir / rel, (_dumps(r) for r in rows))
        return rel

    for fmt in fmts:
        if fmt == "openai":
            written[fmt] = [
                put_lines(
                    "openai.jsonl", (_openai_row(it, ignore_eos=ignore_eos) for it in plan.chat)
                ),
                put_lines(PROVENANCE_NAME, (_provenance_row(it) for it in plan.chat)),
            ]
        elif fmt == "vllm_custom":
            written[fmt] = [put_lines("vllm_custom.jsonl", map(_vllm_custom_row, plan.items))]
        elif fmt == "sharegpt":
            body = b",\n".join(_dumps(_sharegpt_row(it)) for it in plan.single)
            data = b"[\n" + body + b"\n]\n" if body else b"[]\n"
            atomic_write_bytes(out_dir / "sharegpt.json", data)
            written[fmt] = ["sharegpt.json"]
        elif fmt == "token_ids":
            written[fmt] = [put_lines("token_ids.jsonl", map(_token_ids_row, plan.items))]
        elif fmt == "guidellm":
            written[fmt] = [put_lines("guidellm.jsonl", map(_guidellm_row, plan.items))]
        elif fmt == "aiperf":
            written[fmt] = [
                put_lines(
                    "aiperf.jsonl",
                    (_aiperf_single_row(it, ignore_eos=ignore_eos) for it in plan.single),
                ),
                put_lines(
                    AIPERF_MULTI_NAME,
                    (_aiperf_multi_row(it, ignore_eos=ignore_eos) for it in plan.single),
                ),
            ]
        elif fmt == "by_source":
            written[fmt] = [
                put_lines(f"by_source/{plan.stems[src]}.jsonl", map(_by_source_row, group))
                for src, group in plan.by_source.items()
            ]
    text = _run_md(plan, formats=fmts, tokenizer_name=tokenizer_name, ignore_eos=ignore_eos)
    atomic_write_bytes(out_dir / RUN_MD, text.encode("utf-8"))
    written["run_md"] = [RUN_MD]
    skipped = len(plan.items) - len(plan.chat)
    if skipped and any(f in fmts for f in ("openai", "sharegpt", "aiperf", "by_source")):
        logger.warning(
            "%d of %d items have no recovered chat turns and are left out of the chat-text "
            "formats; RUN.md lists them",
            skipped,
            len(plan.items),
        )
    logger.info("wrote %s into %s", ", ".join(f for fs in written.values() for f in fs), out_dir)
    return written


def _dedupe(formats: Sequence[str]) -> tuple[str, ...]:
    if isinstance(formats, str):
        formats = [formats]
    seen: dict[str, None] = {}
    for f in formats:
        seen.setdefault(f, None)
    return tuple(seen)


# --------------------------------------------------------------------------------------------
# RUN.md
# --------------------------------------------------------------------------------------------


def run_md(
    items: Sequence[SuiteItem],
    *,
    formats: Sequence[str],
    tokenizer_name: str,
    ignore_eos: bool = False,
) -> str:
    """``RUN.md``: the command for each client on these files, and warnings for this suite.

    Args:
        items: The suite items, as given to :func:`write_exports`.
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
    fmts = _dedupe(formats)
    check_formats(fmts)
    return _run_md(
        _Plan.of(items), formats=fmts, tokenizer_name=tokenizer_name, ignore_eos=ignore_eos
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
        p, o = it.n_prompt_tokens, _out_len(it)
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
    return int(statistics.median_low([_out_len(it) for it in items])) if items else 1


def _run_md(
    plan: _Plan,
    *,
    formats: Sequence[str],
    tokenizer_name: str,
    ignore_eos: bool,
) -> str:
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


def _warnings(plan: _Plan, *, formats: Sequence[str], ignore_eos: bool) -> list[str]:
    items = plan.items
    n = len(items)
    out: list[str] = []
    no_msgs = [it for it in items if not _has_messages(it)]
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
    no_user = [it for it in plan.chat if not _last_user_text(it)]
    if no_user and chat_fmts:
        out.append(
            f"{_count(len(no_user), 'item')} with messages but no user text: {_ids(no_user)}; left "
            "out of `sharegpt.json` and the AIPerf files."
        )
    history = [it for it in plan.single if _has_history(it)]
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
    inexact = [it for it in items if it.fidelity != "tokens"]
    if inexact:
        kinds = Counter(it.fidelity or "not checked" for it in inexact)
        out.append(
            f"**{len(inexact)} of {n} items are not token-exact** "
            f"({', '.join(f'{k}: {v}' for k, v in sorted(kinds.items()))}): their `messages` are "
            "missing or do not re-render to the recorded prompt ids, so chat files send a "
            f"different prompt: {_ids(inexact)}. `token_ids.jsonl` is exact for every item."
        )
    dup = sorted(k for k, v in Counter(it.id for it in items).items() if v > 1)
    if dup:
        out.append(
            f"**Duplicate ids** ({len(dup)}): {', '.join(f'`{d}`' for d in dup[:_MAX_IDS_SHOWN])}. "
            "Results cannot be joined back unambiguously, and AIPerf merges sessions that share "
            "an id."
        )
    return out


def _block(cmd: list[str]) -> list[str]:
    return ["```bash", " \\\n  ".join(cmd), "```"]


def _commands(fmt: str, plan: _Plan, *, tok: str, ignore_eos: bool) -> list[str]:
    eos = [] if ignore_eos else ["--disable-ignore-eos"]
    if fmt == "openai":
        k = len(plan.chat)
        return [
            f"### `openai.jsonl` — SGLang, exact chat history ({k} rows)",
            "",
            "Request keys only; `provenance.jsonl` gives id, source, cluster and provenance for "
            "the same line number. SGLang keeps file order and sends the first `--num-prompts` "
            "lines; do not pass `--sharegpt-output-len` (it would replace `max_tokens`).",
            "",
            *_block(
                [
                    "python -m sglang.bench_serving --backend sglang-oai-chat",
                    "--base-url <URL> --model <MODEL>",
                    f"--tokenizer {tok}",
                    "--dataset-name openai --dataset-path openai.jsonl",
                    f"--num-prompts {k}",
                    *eos,
                ]
            ),
        ]
    if fmt == "vllm_custom":
        k = len(plan.items)
        return [
            f"### `vllm_custom.jsonl` — vLLM, rendered prompt on completions ({k} rows)",
            "",
            *_block(
                [
                    "vllm bench serve --backend openai --endpoint /v1/completions",
                    "--base-url <URL> --model <MODEL>",
                    f"--tokenizer {tok}",
                    "--dataset-name custom --dataset-path vllm_custom.jsonl",
                    "--skip-chat-template --custom-output-len -1 --no-oversample",
                    "--disable-shuffle",
                    f"--num-prompts {k}",
                    *(["--ignore-eos"] if ignore_eos else []),
                ]
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
            *_block(
                [
                    "python -m sglang.bench_serving --backend sglang-oai-chat",
                    "--base-url <URL> --model <MODEL>",
                    f"--tokenizer {tok}",
                    "--dataset-name sharegpt --dataset-path sharegpt.json",
                    f"--num-prompts {k}",
                    *eos,
                ]
            ),
            "",
            *_block(
                [
                    "vllm bench serve --backend openai-chat --endpoint /v1/chat/completions",
                    "--base-url <URL> --model <MODEL>",
                    f"--tokenizer {tok}",
                    "--dataset-name sharegpt --dataset-path sharegpt.json",
                    "--no-oversample",
                    f"--num-prompts {k}",
                    *(["--ignore-eos"] if ignore_eos else []),
                ]
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
                *_block(
                    [
                        "vllm bench serve --backend openai --endpoint /v1/completions",
                        "--base-url <URL> --model <MODEL>",
                        f"--tokenizer {tok}",
                        f"--dataset-name spec_bench --dataset-path {rel}",
                        f"--spec-bench-output-len {med} --no-oversample --num-prompts {k}",
                        *(["--ignore-eos"] if ignore_eos else []),
                    ]
                ),
                "",
                *_block(
                    [
                        "python -m sglang.bench_serving --backend sglang",
                        "--base-url <URL> --model <MODEL>",
                        f"--tokenizer {tok}",
                        f"--dataset-name speed-bench --dataset-path {rel}",
                        f"--speed-bench-output-len {med} --num-prompts {k}",
                        *eos,
                    ]
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
