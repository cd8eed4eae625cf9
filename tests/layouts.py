"""Template layouts for the layout tests (issue 27): our own templates written from public chat
formats, on the Qwen3 test vocabulary, and corpora of agent traces and plain chats rendered by them.

Each template under ``tests/templates/`` named here was written for these tests from the format
its family publishes (none is copied from a model repository); :func:`layout_tokenizer` puts one
on a copy of the Qwen3 test tokenizer with the special tokens it needs. :func:`conversations`
draws seeded conversations in the layouts these templates render differently: with and without a
system prompt and tools, agent traces with tool calls (ids in the family's form) and tool
results, and plain chats whose user text holds blank lines. :func:`corpus_rows` cuts them into
first-turn or last-turn training rows.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

from styles import MISTRAL_TOKENS, SECTION_TOKENS, template_tokenizer, tool_defs

Msg = dict[str, Any]


def _mistral_id(rng: random.Random, _name: str, _index: int) -> str:
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(9))


def _kimi_id(_rng: random.Random, name: str, index: int) -> str:
    return f"functions.{name}:{index}"


_LLAMA_TOKENS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]

#: layout -> (template file, added special tokens, special-token roles, call id maker or None,
#: most tool calls a turn)
LAYOUTS: dict[str, tuple[str, list[str], dict[str, str], Any, int]] = {
    "mistral_v3": (
        "mistral_v3.jinja",
        MISTRAL_TOKENS,
        {"bos_token": "<s>", "eos_token": "</s>"},
        _mistral_id,
        2,
    ),
    # The newer form: the system prompt has tokens of its own, so it is never ambiguous.
    "mistral_v7": (
        "mistral_v7.jinja",
        [*MISTRAL_TOKENS, "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"],
        {"bos_token": "<s>", "eos_token": "</s>"},
        _mistral_id,
        2,
    ),
    "kimi_k2": ("kimi_k2.jinja", SECTION_TOKENS, {}, _kimi_id, 2),
    # Llama 3.1 prints no call id and takes one call a turn.
    "llama31": ("llama31.jinja", _LLAMA_TOKENS, {"bos_token": "<|begin_of_text|>"}, None, 1),
}


def family(layout: str) -> str:
    """The model family a layout's template is written for (``mistral_v3`` -> ``mistral``)."""
    return layout.split("_")[0]


def layout_tokenizer(qwen_tokenizer: Any, layout: str) -> Any:
    """A copy of the Qwen3 test tokenizer carrying the layout's template and special tokens."""
    name, specials, roles, _ids, _most = LAYOUTS[layout]
    return template_tokenizer(qwen_tokenizer, name, specials, roles)


TOOLS = tool_defs(
    (
        ("bash", "Run a shell command.", {"command": {"type": "string"}}),
        ("str_replace", "Edit a file.", {"path": {"type": "string"}, "old": {"type": "string"}}),
        ("open_file", "Show a file.", {"path": {"type": "string"}}),
        ("submit", "Submit the patch.", {}),
        ("get_weather", "Current weather.", {"city": {"type": "string"}}),
    ),
    required=True,
)
_SYSTEMS = [
    "You are a helpful assistant.",
    "You are an autonomous programmer working in a repository.\n\nUse the tools.",
    "Antworte kurz und präzise.",
]
_TASKS = [
    "Fix the failing test in tests/test_io.py.",
    "The parser crashes on empty input:\n\n    parse('')\n\nPlease fix it.",
    "Why is `make` slow? Investigate.",
    "Wetter in Zürich und 東京?",
]
_CHAT = [
    "Summarise this:\n\nThe cat sat on the mat. It was warm.",
    "Two questions.\n\nFirst: what is a monad?\n\nSecond: why care?",
    "Translate to French: good morning",
    "Write a haiku about rain.",
    "Context:\n\n- item one\n- item two\n\nWhich item is first?",
    "¿Qué hora es en Tokio?",
]
_REPLIES = [
    "Done — the tests pass now.",
    "Here is a short answer.\n\nIt has two paragraphs.",
    "Voilà.",
    "The file looks fine; next I will run the tests.",
]


def _args(rng: random.Random, fn: dict[str, Any]) -> dict[str, Any]:
    values = ["ls -la", "src/app.py", "return None", "Zürich", 'echo "hi"\nexit 1', "a\\b"]
    return {k: rng.choice(values) for k in fn["parameters"]["properties"]}


def _agent(
    rng: random.Random, make_id: Callable[..., str] | None, most: int
) -> tuple[list[Msg], list[Any]]:
    tools = TOOLS[:4] if rng.random() < 0.7 else TOOLS[4:]
    msgs: list[Msg] = []
    if rng.random() < 0.6:
        msgs.append({"role": "system", "content": rng.choice(_SYSTEMS)})
    # Users write their own text: one task never opens many rows, a system prompt does.
    msgs.append({"role": "user", "content": f"Ticket {rng.randrange(10**6)}. {rng.choice(_TASKS)}"})
    counter = 0
    for _step in range(rng.randrange(1, 5)):
        calls = []
        for _ in range(min(most, rng.choice([1, 1, 1, 2]))):
            fn = rng.choice(tools)["function"]
            call: dict[str, Any] = {
                "type": "function",
                "function": {"name": fn["name"], "arguments": _args(rng, fn)},
            }
            if make_id is not None:
                call["id"] = make_id(rng, fn["name"], counter)
            counter += 1
            calls.append(call)
        msgs.append({"role": "assistant", "content": "", "tool_calls": calls})
        for c in calls:
            out = json.dumps(
                {"output": rng.choice(["ok", "1 failed, 3 passed", "Datei: ü\n", '{"a": 1}'])},
                ensure_ascii=False,
            )
            result: Msg = {"role": "tool", "content": out}
            if make_id is not None:
                result["tool_call_id"] = c["id"]
            msgs.append(result)
    msgs.append({"role": "assistant", "content": rng.choice(_REPLIES)})
    return msgs, tools


def _chat(rng: random.Random) -> tuple[list[Msg], list[Any]]:
    msgs: list[Msg] = []
    if rng.random() < 0.3:
        msgs.append({"role": "system", "content": rng.choice(_SYSTEMS)})
    for _turn in range(rng.randrange(1, 4)):
        msgs.append({"role": "user", "content": f"Q{rng.randrange(10**6)}: {rng.choice(_CHAT)}"})
        msgs.append({"role": "assistant", "content": rng.choice(_REPLIES)})
    return msgs, []


def conversations(layout: str, n: int, *, seed: int = 0) -> list[tuple[str, list[Msg], list[Any]]]:
    """``(source, messages, tools)``: agent traces and plain chats, each ending with an answer."""
    rng = random.Random(seed)
    make_id, most = LAYOUTS[layout][3], LAYOUTS[layout][4]
    out = []
    for i in range(n):
        if i % 2 == 0:
            msgs, tools = _agent(rng, make_id, most)
            out.append(("agent", msgs, tools))
        else:
            msgs, tools = _chat(rng)
            out.append(("chat", msgs, tools))
    return out


def render_prompt(tok: Any, msgs: list[Msg], tools: list[Any]) -> list[int]:
    """The prompt ids as training data holds them: the template's text, encoded."""
    text = tok.apply_chat_template(
        msgs, tools=tools or None, add_generation_prompt=True, tokenize=False
    )
    return list(tok.encode(text, add_special_tokens=False))


def corpus_rows(
    tok: Any, layout: str, n: int, *, turn: str, seed: int = 0
) -> list[tuple[dict[str, Any], list[Msg], list[Any]]]:
    """Training rows cut from :func:`conversations`: ``turn="first"`` ends the prompt before the
    first assistant turn, ``"last"`` before the final answer (the earlier turns in the prompt).
    Each row comes with the messages and tools its prompt was rendered from."""
    rows = []
    for source, msgs, tools in conversations(layout, n, seed=seed):
        asst = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
        k = asst[0] if turn == "first" else asst[-1]
        prompt = render_prompt(tok, msgs[:k], tools)
        reply = msgs[k]
        text = reply.get("content") or json.dumps(reply.get("tool_calls"), ensure_ascii=False)
        r_ids = list(tok.encode(text, add_special_tokens=False))
        ids = prompt + r_ids
        row = {
            "input_ids": ids,
            "loss_mask": [0] * len(prompt) + [1] * len(r_ids),
            "seq_len": len(ids),
            "n_prompt_tokens": len(prompt),
            "n_response_tokens": len(r_ids),
            "source": source,
        }
        rows.append((row, msgs[:k], tools))
    return rows


def write_corpus(root: Path, rows: list[tuple[dict[str, Any], list[Msg], list[Any]]]) -> Path:
    """One shard a source, ``prepared/<ID>_<source>/tokenized_data.jsonl``."""
    by_source: dict[str, list[str]] = {}
    for row, _msgs, _tools in rows:
        by_source.setdefault(row["source"], []).append(json.dumps(row))
    for i, (source, lines) in enumerate(sorted(by_source.items())):
        shard = root / "prepared" / f"A{i + 1}_{source}" / "tokenized_data.jsonl"
        shard.parent.mkdir(parents=True, exist_ok=True)
        shard.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def _turn_view(m: Msg) -> tuple[Any, ...]:
    calls = [
        (c["function"]["name"], c["function"]["arguments"], c.get("id"))
        for c in m.get("tool_calls") or ()
    ]
    return m["role"], m.get("content") or "", m.get("tool_call_id"), calls


def same_turns(got: Any, want: list[Msg]) -> bool:
    """Every original turn back, none invented or merged: roles, contents, tool calls (name,
    arguments, id) and the results' ``tool_call_id`` (what the templates print)."""
    return got is not None and [_turn_view(m) for m in got] == [_turn_view(m) for m in want]
