"""The markers every prompt of a chat template holds, learned from the layouts it renders.

:func:`learn_layouts` renders probe conversations in every layout a template has (user only;
with a system prompt; several turns; with tools, with and without a system prompt, in one and
several turns; a tool call with its id and its result; reasoning) through the tokenizer's own
template, each in three content variants, and reads off how each layout opens and what
``add_generation_prompt`` appends. :mod:`distprompt.recover.checks` checks every row against
them (:class:`~distprompt.recover.checks.RowCheck`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from distprompt.errors import TemplateError

__all__ = ["Markers", "learn_layouts", "learn_markers"]

logger = logging.getLogger("distprompt.recover.markers")

# Contents of the layout probes, one set a variant: each layout is rendered three times with
# contents that differ from their first character (a space, a newline), so the ids all three
# renders open with are the template's own, not a token the content merged into.
_TEXTS = (
    ("Be brief.", "Hello there, how are you?", "Hello! What can I do?", "Name a colour."),
    (" Answer in French.", " 42 apples, please.", " Sure: which ones?", " Two of them."),
    ("\n\nYou are a careful agent.", "\n\nZürich — Wetter?", "\n\nIch sehe nach.", "\n\nDanke."),
)
_TOOL_NAMES = (("get_weather", "search_code"), ("run_sql", "open_file"), ("list_dir", "fetch_url"))
# Nine letters and digits: templates that print call ids may insist on a length (Mistral's 9).
_CALL_IDS = ("a1b2c3d4e", "Zx9Yw8Vu7", "k3M5n7P9q")


def _layout_probes(
    v: int, *, as_string: bool = False
) -> list[tuple[str, list[dict[str, Any]], Any]]:
    """``(name, messages, tools)`` of every layout probe, in content variant ``v``."""
    sys_text, u1, a1, u2 = _TEXTS[v]
    sys = {"role": "system", "content": sys_text}
    user, asst, user2 = (
        {"role": "user", "content": u1},
        {"role": "assistant", "content": a1},
        {"role": "user", "content": u2},
    )
    tools = [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"{u1.strip()} {name}",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
        }
        for name in _TOOL_NAMES[v]
    ]
    name = _TOOL_NAMES[v][0]
    args: Any = {"q": u2.strip()}
    call = {
        "id": _CALL_IDS[v],
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args) if as_string else args},
    }
    result = {
        "role": "tool",
        "tool_call_id": _CALL_IDS[v],
        "name": name,
        "content": json.dumps({"ok": True, "text": a1.strip()}),
    }
    calls = {"role": "assistant", "content": "", "tool_calls": [call]}
    reasoned = {"role": "assistant", "content": a1, "reasoning_content": u2.strip()}
    reasoned_call = {**calls, "reasoning_content": a1.strip()}
    return [
        ("user", [user], None),
        ("system_user", [sys, user], None),
        ("multi_turn", [user, asst, user2], None),
        ("system_multi_turn", [sys, user, asst, user2], None),
        ("tools_user", [user], tools),
        ("tools_system_user", [sys, user], tools),
        ("tools_multi_turn", [user, asst, user2], tools),
        ("tools_system_multi_turn", [sys, user, asst, user2], tools),
        ("tool_call_result", [user, calls, result], tools),
        ("system_tool_call_result", [sys, user, calls, result], tools),
        ("tool_call_then_user", [user, calls, result, asst, user2], tools),
        ("reasoning_multi_turn", [user, reasoned, user2], None),
        ("reasoning_tool_call", [user, reasoned_call, result], tools),
    ]


#: The plain conversations every chat template must render (the rest of the layouts may be
#: refused: a template without tools or a system role simply has no such layout).
_BASE_LAYOUTS = ("user", "system_user", "multi_turn")
_PROBES: tuple[tuple[dict[str, str], ...], ...] = tuple(
    tuple(msgs) for name, msgs, _ in _layout_probes(0) if name in _BASE_LAYOUTS
)


def _render(
    tok: Any, messages: Sequence[Mapping[str, Any]], *, gen: bool, tools: Any = None
) -> list[int]:
    kw = {"tools": tools} if tools else {}
    out = tok.apply_chat_template(list(messages), tokenize=True, add_generation_prompt=gen, **kw)
    if hasattr(out, "keys"):  # transformers 5 returns a BatchEncoding
        out = out["input_ids"]
    return [int(i) for i in out]


def _common_prefix(seqs: Sequence[Sequence[int]]) -> list[int]:
    if not seqs:
        return []
    n = min(len(s) for s in seqs)
    out: list[int] = []
    for i in range(n):
        v = seqs[0][i]
        if any(s[i] != v for s in seqs[1:]):
            break
        out.append(v)
    return out


@dataclass(frozen=True, slots=True)
class Markers:
    """The markers learned from the layouts a chat template renders (:func:`learn_layouts`).

    Attributes:
        start: Ids every layout's prompt starts with (the common start of ``starts``).
        gen: The generation prompt, when every layout appends the same one (else empty).
        starts: How each layout opens, up to its last template marker before any content;
            a prompt opens with one of them (only those no other one is a start of are kept).
        gens: The generation prompts of the layouts, when they differ: a prompt holds one.
        layouts: The probe layouts the template rendered, by name.
    """

    start: tuple[int, ...]
    gen: tuple[int, ...]
    starts: tuple[tuple[int, ...], ...]
    gens: tuple[tuple[int, ...], ...]
    layouts: tuple[str, ...]


def _added_ids(tok: Any) -> set[int]:
    decoder = getattr(tok, "added_tokens_decoder", None) or {}
    return {int(i) for i in decoder}


def _opening(renders: Sequence[Sequence[int]], added: set[int]) -> tuple[int, ...]:
    """The ids a layout opens with whatever its contents: the common start of its renders,
    cut after the last added token (a template marker) when there is one, so text the
    template writes after its marker (a tool list, a role name) is not asked of every row."""
    common = _common_prefix(renders)
    for i in range(len(common) - 1, -1, -1):
        if common[i] in added:
            return tuple(common[: i + 1])
    return tuple(common)


def _holds(ids: Sequence[int], part: Sequence[int]) -> bool:
    m = len(part)
    return any(list(ids[i : i + m]) == list(part) for i in range(len(ids) - m + 1))


def _minimal(alts: set[tuple[int, ...]]) -> tuple[tuple[int, ...], ...]:
    """The alternatives no other one is a start of (a row opening with a longer one opens with
    the shorter one too)."""
    out = [a for a in alts if not any(b != a and a[: len(b)] == b for b in alts)]
    return tuple(sorted(out))


_CALL_LAYOUTS = ("tool_call_result", "system_tool_call_result", "tool_call_then_user")


def _render_layout(
    tok: Any, name: str, *, strict: bool, errors: list[str]
) -> tuple[list[list[int]], list[list[int]]] | None:
    """``(with generation prompt, without)`` renders of the three variants of a layout, or
    None when the template refuses it (tool-call arguments tried as a dict, then a string)."""
    calls = name in _CALL_LAYOUTS or name == "reasoning_tool_call"
    for as_string in (False, True) if calls else (False,):
        try:
            on, off = [], []
            for v in range(len(_TEXTS)):
                probe = next(p for p in _layout_probes(v, as_string=as_string) if p[0] == name)
                on.append(_render(tok, probe[1], gen=True, tools=probe[2]))
                off.append(_render(tok, probe[1], gen=False, tools=probe[2]))
            return on, off
        except Exception as exc:  # templates raise anything (jinja, ValueError, ...)
            if name in _BASE_LAYOUTS:
                if strict:
                    raise TemplateError(
                        f"expected a chat template that renders simple conversations, found "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
                errors.append(f"{type(exc).__name__}: {exc}")
            logger.debug("layout probe %s refused by the template: %s", name, exc)
    return None


def _names() -> list[str]:
    return [name for name, _, _ in _layout_probes(0)]


def learn_layouts(tokenizer: Any, *, strict: bool = False) -> Markers:
    """Learn how every layout of the chat template opens and asks for a reply.

    Layout probes (user only; with a system prompt; multi-turn; with tool definitions, with
    and without a system prompt, in one and several turns; a tool call with its id and the tool
    result; reasoning) are rendered through the tokenizer's own template, each in three content
    variants, with and without ``add_generation_prompt``. How a layout opens is the ids its
    three renders share at the start, up to the last template marker (added token) among them;
    a prompt must open as one of the layouts does. The generation prompt is what
    ``add_generation_prompt`` appends; when layouts append different ones, a prompt must hold
    one of them; when a layout's render holds none of them the template has none to check.

    Args:
        tokenizer: Anything with a ``chat_template`` and ``apply_chat_template(messages,
            tokenize=True, add_generation_prompt=..., tools=...)``: a ``transformers``
            tokenizer or a :class:`~distprompt.recover.light.LightTokenizer`.
        strict: Raise on the first plain conversation (user; system and user; multi-turn) the
            template fails to render (else such a probe is left out, and only none rendering
            raises). Other layouts a template refuses are always left out.

    Raises:
        TemplateError: No chat template, or it renders none of the plain conversations (with
            ``strict``: fails on one).

    Example:
        >>> markers = learn_layouts(tok)  # doctest: +SKIP
        >>> [tok.decode(list(s)) for s in markers.starts]  # doctest: +SKIP
        ['<s>[AVAILABLE_TOOLS]', '<s>[INST]']
    """
    if not getattr(tokenizer, "chat_template", None):
        raise TemplateError("expected a tokenizer with a chat template, found none")
    added = _added_ids(tokenizer)
    errors: list[str] = []
    openings: set[tuple[int, ...]] = set()
    suffixes: list[tuple[int, ...]] = []
    renders: list[list[int]] = []
    layouts: list[str] = []
    for name in _names():
        got = _render_layout(tokenizer, name, strict=strict, errors=errors)
        if got is None:
            continue
        on, off = got
        layouts.append(name)
        openings.add(_opening(on, added))
        renders.extend(on)
        for a, b in zip(on, off, strict=True):
            suffixes.append(tuple(a[len(_common_prefix([a, b])) :]))
    if not any(n in layouts for n in _BASE_LAYOUTS):
        raise TemplateError(
            "expected a chat template that renders simple conversations, found errors: "
            + "; ".join(errors[:2])
        )
    starts = _minimal(openings) if len(renders) > 1 else ()
    start = tuple(_common_prefix(starts)) if starts else ()
    # A layout whose render holds none of the generation prompts (some templates append none
    # after a tool result) leaves the check without a marker every prompt holds.
    gens = tuple(sorted({g for g in suffixes if g}))
    if not all(any(_holds(r, g) for g in gens) for r in renders):
        gens = ()
    gen = gens[0] if len(gens) == 1 else ()
    return Markers(
        start=start,
        gen=gen,
        starts=starts if len(starts) > 1 else (),
        gens=gens if len(gens) > 1 else (),
        layouts=tuple(layouts),
    )


def learn_markers(
    tokenizer: Any, *, strict: bool = False
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The ids every prompt starts with and the generation prompt (:func:`learn_layouts`).

    Example:
        >>> start, gen = learn_markers(tok)  # doctest: +SKIP
        >>> tok.decode(list(gen))  # doctest: +SKIP
        '<|im_start|>assistant\\n'
    """
    m = learn_layouts(tokenizer, strict=strict)
    return m.start, m.gen
