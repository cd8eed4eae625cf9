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

Items whose chat turns were not recovered (``messages`` is None or empty), or whose messages do
not re-render to the prompt ids (``fidelity`` other than ``tokens``), are left out of every file
that needs raw chat text (``openai``, ``sharegpt``, ``aiperf``, ``by_source``; ``messages`` is
null in ``guidellm``): putting the rendered prompt there instead would have it templated a
second time, and inexact messages would send another prompt. ``RUN.md``
(:mod:`distprompt.write.runmd`) names them.

Example:
    >>> from pathlib import Path
    >>> files = write_exports(items, Path("out"), formats=["openai"])  # doctest: +SKIP
    >>> files["openai"]  # doctest: +SKIP
    ['openai.jsonl', 'provenance.jsonl']
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson

from distprompt.errors import ConfigError
from distprompt.records import SuiteItem
from distprompt.write.formats import (
    AIPERF_MULTI_NAME,
    FORMATS,
    PROVENANCE_NAME,
    RUN_MD,
    Plan,
    checked_formats,
    exact_chat,
    first_user_text,
    last_user_text,
    out_len,
    text_of,
)
from distprompt.write.out_dir import atomic_write_bytes, atomic_write_lines
from distprompt.write.runmd import render_run_md

__all__ = ["write_exports"]

logger = logging.getLogger("distprompt.write.export")

_JSON_OPTS = orjson.OPT_NON_STR_KEYS


def _dumps(obj: Any) -> bytes:
    return orjson.dumps(obj, option=_JSON_OPTS)


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


# --------------------------------------------------------------------------------------------
# Row builders (one per layout); each returns the JSON object of one line
# --------------------------------------------------------------------------------------------


def _openai_row(item: SuiteItem, *, ignore_eos: bool, temperature: float) -> dict[str, Any]:
    # Only request keys: SGLang forwards every key but messages/max_tokens/max_completion_tokens/
    # model into the request body. A per-row ignore_eos overrides SGLang's ignore_eos=True default.
    row: dict[str, Any] = {"messages": _wire_messages(item), "max_tokens": out_len(item)}
    if item.tools:
        row["tools"] = list(item.tools)
    if item.chat_template_kwargs:
        # The switches the prompt was rendered with (e.g. enable_thinking=False): SGLang and
        # vLLM chat endpoints pass them to the template, so the server renders the same ids.
        row["chat_template_kwargs"] = dict(item.chat_template_kwargs)
    row["ignore_eos"] = ignore_eos
    # SGLang sends temperature 0 unless the row says otherwise: say it explicitly.
    row["temperature"] = temperature
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
    return {"prompt": item.prompt, "output_tokens": out_len(item), **_provenance_row(item)}


def _sharegpt_row(item: SuiteItem) -> dict[str, Any]:
    # P is the last user turn: the recorded response answers it. Both loaders hand P to a chat
    # template (chat backends, SGLang --apply-chat-template), so it must be raw user text.
    return {
        "id": item.id,
        "conversations": [
            {"from": "human", "value": last_user_text(item)},
            {"from": "gpt", "value": item.response},
        ],
    }


def _token_ids_row(item: SuiteItem) -> dict[str, Any]:
    return {
        "input_tokens": list(item.prompt_ids),
        "num_output_tokens": out_len(item),
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
        "messages": _wire_messages(item) if exact_chat(item) else None,
        "prompt": item.prompt,
        "output_tokens_count": out_len(item),
        "dp_id": item.id,
        "dp_source": item.source,
        "dp_cluster": item.cluster,
        "dp_weight": item.weight,
        "dp_shard": item.provenance.shard,
        "dp_line": item.provenance.line,
        "dp_fidelity": item.fidelity,
    }


def _aiperf_length(item: SuiteItem, *, ignore_eos: bool) -> dict[str, Any]:
    """AIPerf's output length for a turn; ``ignore_eos`` goes through ``extra`` when asked."""
    out: dict[str, Any] = {"output_length": out_len(item)}
    if ignore_eos:
        out["extra"] = {"ignore_eos": True}
    return out


def _aiperf_single_row(item: SuiteItem, *, ignore_eos: bool) -> dict[str, Any]:
    # AIPerf ignores unknown top-level keys: provenance may stay inline.
    return {
        "text": last_user_text(item),
        **_aiperf_length(item, ignore_eos=ignore_eos),
        "id": item.id,
        "source": item.source,
    }


def _aiperf_multi_row(item: SuiteItem, *, ignore_eos: bool, tokenizer: Any) -> dict[str, Any]:
    """One AIPerf session: a leading system turn (hoisted by AIPerf) and every user turn.

    AIPerf generates the assistant replies between turns live, so recorded assistant and tool
    messages cannot be replayed. AIPerf 0.13.0 sends a turn without ``output_length`` with no
    ``max_completion_tokens`` at all, so every turn carries one: the last the item's output
    length, an earlier one the length of the recorded assistant reply that followed it (its text
    tokenized without special tokens, + 1 for the end of turn; the item's output length when no
    tokenizer is given or no reply was recorded).
    """
    msgs = item.messages or ()
    turns: list[dict[str, Any]] = []
    if msgs and msgs[0].get("role") == "system" and text_of(msgs[0].get("content")):
        # No output_length/extra here: AIPerf hoists only a bare system turn.
        turns.append({"role": "system", "text": text_of(msgs[0].get("content"))})
    users: list[tuple[str, int]] = []
    for i, m in enumerate(msgs):
        if m.get("role") != "user" or not text_of(m.get("content")):
            continue
        reply = next((n for n in msgs[i + 1 :] if n.get("role") in ("assistant", "user")), None)
        length = out_len(item)
        if tokenizer is not None and reply is not None and reply.get("role") == "assistant":
            text = text_of(reply.get("content"))
            if text:
                length = len(tokenizer.encode(text, add_special_tokens=False)) + 1
        users.append((text_of(m.get("content")), length))
    for i, (text, length) in enumerate(users):
        last = i == len(users) - 1
        turn: dict[str, Any] = {"text": text}
        if last:
            turn.update(_aiperf_length(item, ignore_eos=ignore_eos))
        else:
            turn["output_length"] = length
        turns.append(turn)
    return {"session_id": item.id, "turns": turns, "source": item.source}


def _by_source_row(item: SuiteItem) -> dict[str, Any]:
    # Both clients wrap turns[0] in the chat template: raw user text, never the rendered prompt.
    return {"question_id": item.id, "category": item.source, "turns": [first_user_text(item)]}


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


def _put_lines(out_dir: Path, rel: str, rows: Iterable[dict[str, Any]]) -> str:
    atomic_write_lines(out_dir / rel, (_dumps(r) for r in rows))
    return rel


def _write_openai(plan: Plan, out: Path, ignore_eos: bool, temp: float, tok: Any) -> list[str]:
    rows = (_openai_row(it, ignore_eos=ignore_eos, temperature=temp) for it in plan.chat)
    return [
        _put_lines(out, "openai.jsonl", rows),
        _put_lines(out, PROVENANCE_NAME, (_provenance_row(it) for it in plan.chat)),
    ]


def _write_vllm_custom(plan: Plan, out: Path, *_: Any) -> list[str]:
    return [_put_lines(out, "vllm_custom.jsonl", map(_vllm_custom_row, plan.items))]


def _write_sharegpt(plan: Plan, out: Path, *_: Any) -> list[str]:
    body = b",\n".join(_dumps(_sharegpt_row(it)) for it in plan.single)
    atomic_write_bytes(out / "sharegpt.json", b"[\n" + body + b"\n]\n" if body else b"[]\n")
    return ["sharegpt.json"]


def _write_token_ids(plan: Plan, out: Path, *_: Any) -> list[str]:
    return [_put_lines(out, "token_ids.jsonl", map(_token_ids_row, plan.items))]


def _write_guidellm(plan: Plan, out: Path, *_: Any) -> list[str]:
    return [_put_lines(out, "guidellm.jsonl", map(_guidellm_row, plan.items))]


def _write_aiperf(plan: Plan, out: Path, ignore_eos: bool, temp: float, tok: Any) -> list[str]:
    single = (_aiperf_single_row(it, ignore_eos=ignore_eos) for it in plan.single)
    multi = (_aiperf_multi_row(it, ignore_eos=ignore_eos, tokenizer=tok) for it in plan.single)
    return [_put_lines(out, "aiperf.jsonl", single), _put_lines(out, AIPERF_MULTI_NAME, multi)]


def _write_by_source(plan: Plan, out: Path, *_: Any) -> list[str]:
    return [
        _put_lines(out, f"by_source/{plan.stems[src]}.jsonl", map(_by_source_row, group))
        for src, group in plan.by_source.items()
    ]


#: The writer of each format: ``(plan, out_dir, ignore_eos, temperature, tokenizer) -> paths``.
_WRITERS: dict[str, Callable[[Plan, Path, bool, float, Any], list[str]]] = {
    "openai": _write_openai,
    "vllm_custom": _write_vllm_custom,
    "sharegpt": _write_sharegpt,
    "token_ids": _write_token_ids,
    "guidellm": _write_guidellm,
    "aiperf": _write_aiperf,
    "by_source": _write_by_source,
}


def write_exports(
    items: Sequence[SuiteItem],
    out_dir: Path,
    *,
    formats: Sequence[str] = FORMATS,
    tokenizer_name: str = "",
    ignore_eos: bool = False,
    tokenizer: Any = None,
    temperature: float = 0.0,
    notices: Sequence[Sequence[str]] = (),
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
        tokenizer: The loaded tokenizer: RUN.md counts what SGLang and vLLM drop from
            ``sharegpt.json`` with it, and AIPerf's earlier turns get the recorded reply length.
        temperature: Sampling temperature written into ``openai.jsonl`` and every RUN.md
            command (0: greedy).
        notices: Markdown blocks RUN.md opens with, below its heading, in this order.

    Returns:
        ``{format: [paths written, relative to out_dir, with /]}``, plus ``"run_md"``.

    Raises:
        ConfigError: A format name is unknown.
        OutputError: A file cannot be written.

    Example:
        >>> write_exports(items, Path("out"), formats=["vllm_custom"])  # doctest: +SKIP
        {'vllm_custom': ['vllm_custom.jsonl'], 'run_md': ['RUN.md']}
    """
    fmts = checked_formats(formats)
    if not temperature >= 0:
        raise ConfigError(f"temperature: expected a number >= 0, found {temperature!r}")
    temperature = float(temperature)
    out_dir = Path(out_dir)
    plan = Plan.of(items)
    written: dict[str, list[str]] = {}

    for fmt in fmts:
        written[fmt] = _WRITERS[fmt](plan, out_dir, ignore_eos, temperature, tokenizer)
    text = render_run_md(
        plan,
        formats=fmts,
        tokenizer_name=tokenizer_name,
        ignore_eos=ignore_eos,
        tokenizer=tokenizer,
        temperature=temperature,
        notices=notices,
    )
    atomic_write_bytes(out_dir / RUN_MD, text.encode("utf-8"))
    written["run_md"] = [RUN_MD]
    skipped = len(plan.items) - len(plan.chat)
    if skipped and any(f in fmts for f in ("openai", "sharegpt", "aiperf", "by_source")):
        logger.warning(
            "%d of %d items have no token-exact chat turns and are left out of the chat-text "
            "formats; RUN.md lists them",
            skipped,
            len(plan.items),
        )
    logger.info("wrote %s into %s", ", ".join(f for fs in written.values() for f in fs), out_dir)
    return written
