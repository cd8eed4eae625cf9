"""Tool-call template styles for turn-recovery tests: our own small templates, Qwen3 vocabulary.

Each template under ``tests/templates/`` was written for these tests in the style of a model family
(none is copied from a model repository). :func:`style_tokenizer` puts one on a copy of the Qwen3
test tokenizer with the special tokens it needs; :func:`sample_conversations` draws seeded
multi-turn tool-call conversations (several calls per turn, nested and typed argument values,
non-ASCII, tool results in a row, earlier reasoning) to cut into prompts.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

TEMPLATES = Path(__file__).resolve().parent / "templates"

#: The special tokens of the GLM-style key/value templates (both spellings).
_GLM_TOKENS = [
    "[gMASK]",
    "<sop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
]

#: The special tokens of the section-token (Kimi-K2 style) templates.
SECTION_TOKENS = [
    "<|im_system|>",
    "<|im_user|>",
    "<|im_assistant|>",
    "<|im_middle|>",
    "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>",
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
]
#: The special tokens of the Mistral-style templates.
MISTRAL_TOKENS = [
    "[INST]",
    "[/INST]",
    "[TOOL_CALLS]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
]

#: style -> (template file, added special tokens, extra special-token roles)
STYLES: dict[str, tuple[str, list[str], dict[str, str]]] = {
    "xml_params": ("xml_params.jinja", [], {}),
    "kv_tags": (
        "kv_tags.jinja",
        _GLM_TOKENS,
        {},
    ),
    "kv_tags_compact": (
        "kv_tags_compact.jinja",
        _GLM_TOKENS,
        {},
    ),
    "section_tokens": (
        "section_tokens.jinja",
        SECTION_TOKENS,
        {},
    ),
    "mistral_last": (
        "mistral_last.jinja",
        MISTRAL_TOKENS,
        {"bos_token": "<s>", "eos_token": "</s>"},
    ),
}

Msg = dict[str, Any]


def style_tokenizer(qwen_tokenizer: Any, style: str) -> Any:
    """A copy of the Qwen3 test tokenizer carrying the style's template and special tokens."""
    return template_tokenizer(qwen_tokenizer, *STYLES[style])


def template_tokenizer(
    qwen_tokenizer: Any, name: str, specials: list[str], roles: dict[str, str]
) -> Any:
    """A copy of the Qwen3 test tokenizer with template ``tests/templates/<name>``, the added
    special tokens it writes and the special-token roles it reads (``bos_token`` ...)."""
    tok = copy.deepcopy(qwen_tokenizer)
    tok.add_tokens(specials, special_tokens=True)
    if roles:
        tok.add_special_tokens(roles)
    tok.chat_template = (TEMPLATES / name).read_text(encoding="utf-8")
    return tok


def tool_defs(specs: Any, *, required: bool = False) -> list[dict[str, Any]]:
    """OpenAI tool definitions from ``(name, description, properties)`` triples."""
    out = []
    for name, desc, props in specs:
        params: dict[str, Any] = {"type": "object", "properties": props}
        if required:
            params["required"] = list(props)
        fn = {"name": name, "description": desc, "parameters": params}
        out.append({"type": "function", "function": fn})
    return out


TOOLS = tool_defs(
    (
        ("get_weather", "Current weather.", {"city": {"type": "string"}}),
        ("search_code", "Grep the repo.", {"pattern": {"type": "string"}}),
        ("create_note", "Save a note.", {"title": {"type": "string"}, "tags": {"type": "array"}}),
        ("run_sql", "Run a query.", {"query": {"type": "string"}, "limit": {"type": "integer"}}),
    )
)
_WORDS = [
    "Paris",
    "Zürich",
    "東京",
    "naïve café",
    "TODO|FIXME",
    "SELECT * FROM t",
    "réunion",
    "Ωmega",
    "emoji 🎉",
    "multi\nline",
    "a, b",
    "42 apples",
    "über",
    "данные",
]
_TEXT = [
    "Let me check that.",
    "Here is what I found.",
    "Done — see above.",
    "Voilà, c'est fait.",
    "好的，我来查一下。",
    "Two results came back.",
    "Checking both cities.",
]


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(7 if depth < 2 else 4)
    if kind == 0:
        return rng.randrange(-5, 500)
    if kind == 1:
        return round(rng.uniform(-10, 10), 2)
    if kind == 2:
        return rng.choice([True, False, None])
    if kind == 3 or kind == 6:
        return rng.choice(_WORDS)
    if kind == 4:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(1, 4))]
    return {f"k{i}": _value(rng, depth + 1) for i in range(rng.randrange(1, 3))}


def _call(rng: random.Random) -> dict[str, Any]:
    fn = rng.choice(TOOLS)["function"]
    args = {"q" if i == 0 else f"arg_{i}": _value(rng) for i in range(rng.randrange(1, 4))}
    return {"type": "function", "function": {"name": fn["name"], "arguments": args}}


def sample_conversations(n: int, seed: int = 0) -> list[tuple[list[Msg], list[Any]]]:
    """Seeded multi-turn tool-call conversations, each ending with an assistant answer."""
    rng = random.Random(seed)
    out: list[tuple[list[Msg], list[Any]]] = []
    for _ in range(n):
        msgs: list[Msg] = []
        if rng.random() < 0.7:
            msgs.append(
                {
                    "role": "system",
                    "content": rng.choice(["You are helpful.", "Sei kurz. Antworte präzise."]),
                }
            )
        for _turn in range(rng.randrange(1, 4)):
            msgs.append({"role": "user", "content": rng.choice(_WORDS) + " — " + rng.choice(_TEXT)})
            for _step in range(rng.randrange(0, 3)):
                calls = [_call(rng) for _ in range(rng.randrange(1, 4))]
                step: Msg = {
                    "role": "assistant",
                    "content": rng.choice(["", "", rng.choice(_TEXT)]),
                    "tool_calls": calls,
                }
                if rng.random() < 0.5:
                    step["reasoning_content"] = (
                        "I should call " + calls[0]["function"]["name"] + "."
                    )
                msgs.append(step)
                for c in calls:
                    result = json.dumps(
                        {"ok": True, "for": c["function"]["name"], "v": _value(rng)},
                        ensure_ascii=False,
                    )
                    msgs.append({"role": "tool", "content": result})
            final: Msg = {"role": "assistant", "content": rng.choice(_TEXT)}
            if rng.random() < 0.5:
                final["reasoning_content"] = "Summarise the results."
            msgs.append(final)
        out.append((msgs, rng.sample(TOOLS, rng.randrange(1, len(TOOLS) + 1))))
    return out


def prompt_cuts(msgs: list[Msg]) -> list[int]:
    """Every k such that msgs[:k] is a prompt: the next message is an assistant turn."""
    return [k for k in range(1, len(msgs)) if msgs[k]["role"] == "assistant"]


def shape(msgs: Any) -> list[tuple[str, list[str]]]:
    """Role and called tool names of each message: what every template renders."""
    return [(m["role"], [c["function"]["name"] for c in m.get("tool_calls") or ()]) for m in msgs]


def as_read(msgs: list[Msg], rec: Any) -> list[Msg]:
    """``msgs`` as a recovery that kept the user reading of an ambiguous system prompt holds
    them: the system prompt at the head of the user message the ambiguity names."""
    out = [dict(m) for m in msgs]
    for a in rec.ambiguities:
        if a.reading == "user" and out and out[0]["role"] == "system":
            head = out.pop(0)["content"]
            out[a.message]["content"] = head + a.separator + out[a.message]["content"]
    return out
