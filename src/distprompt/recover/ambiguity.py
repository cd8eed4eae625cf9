"""Prompts with two readings: a system prompt the template writes into a user turn.

Some templates (Mistral v3 and kin) write the system prompt as the head of a user message,
joined by a plain separator (``"\\n\\n"``). The tokens then do not say whether ``"X\\n\\nY"`` was
one user message or a system prompt ``X`` and a user message ``Y``: both re-render to the same
ids. Nothing is invented on such a prompt: :func:`user_reading` keeps the user reading and
records an :class:`~distprompt.records.Ambiguity`; :func:`settle_system_prompts` reads a system
prompt out of it only with evidence from the source: the same leading text opens many of its
items (a fixed system prompt does; a user's own first paragraph seldom does).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

from distprompt.records import Ambiguity, SuiteItem
from distprompt.recover.template import SYSTEM, USER, TemplateProfile

__all__ = [
    "MIN_EVIDENCE",
    "MIN_EVIDENCE_SHARE",
    "SYSTEM_IN_USER",
    "settle_system_prompts",
    "system_separators",
    "user_reading",
]

logger = logging.getLogger("distprompt.recover.ambiguity")

SYSTEM_IN_USER = "system_in_user"
#: A leading text is evidence of a system prompt when at least this many of the source's items
#: open with it ...
MIN_EVIDENCE = 3
#: ... and at least this share of the source's items (a fixed system prompt opens many rows;
#: the same first paragraph of a user's own text seldom opens three).
MIN_EVIDENCE_SHARE = 0.05
_MAX_TRIES = 4  # user messages tried, last first (where such templates put the system prompt)


def system_separators(profile: TemplateProfile) -> tuple[str, ...]:
    """What the template writes between a system prompt and user text inside one turn: the
    literals from a system slot to a user slot that hold no template marker (a marker would
    tell the readings apart)."""
    seps = {
        lit
        for prev, nxt, _new, lit in profile.transitions
        if (prev, nxt) == (SYSTEM, USER) and lit and not any(mk in lit for mk in profile.markers)
    }
    return tuple(sorted(seps, key=lambda s: (-len(s), s)))


def _render(tokenizer: Any, messages: Sequence[dict[str, Any]], tools: Any, kw: Any) -> Any:
    try:
        return tokenizer.apply_chat_template(
            list(messages),
            tools=list(tools) if tools else None,
            add_generation_prompt=True,
            tokenize=False,
            **(kw or {}),
        )
    except Exception as exc:  # a template refusing a reading rules it out
        logger.debug("reading refused by the template: %s", exc)
        return None


def user_reading(
    tokenizer: Any,
    body: str,
    messages: Sequence[dict[str, Any]],
    tools: Any,
    switches: dict[str, Any] | None,
    profile: TemplateProfile,
) -> tuple[list[dict[str, Any]], Ambiguity | None]:
    """The reading without a system prompt the tokens do not prove, and the ambiguity if any.

    ``messages`` re-render to ``body``. When they hold a system prompt the template wrote into
    a user turn with a plain separator, and the messages without it (its text at the head of
    that user turn) re-render to ``body`` too, those are returned. When they hold no system
    prompt but a user turn could be split into one, the messages stay. Either way the
    :class:`~distprompt.records.Ambiguity` says where (reading ``user``); None when the tokens
    have one reading.
    """
    msgs = [dict(m) for m in messages]
    seps = system_separators(profile)
    if not seps or not msgs:
        return msgs, None
    users = [i for i, m in enumerate(msgs) if m.get("role") == USER]
    if msgs[0].get("role") == SYSTEM and isinstance(msgs[0].get("content"), str):
        head = msgs[0]["content"]
        for j in reversed(users[-_MAX_TRIES:]):
            for sep in seps:
                merged = [dict(m) for m in msgs[1:]]
                merged[j - 1]["content"] = head + sep + str(msgs[j].get("content") or "")
                if _render(tokenizer, merged, tools, switches) == body:
                    return merged, Ambiguity(SYSTEM_IN_USER, j - 1, sep, "user")
        return msgs, None
    if any(m.get("role") == SYSTEM for m in msgs):
        return msgs, None
    for j in reversed(users[-_MAX_TRIES:]):
        content = msgs[j].get("content")
        for sep in seps:
            if not isinstance(content, str) or sep not in content:
                continue
            head, _, rest = content.partition(sep)
            split = [{"role": SYSTEM, "content": head}, *(dict(m) for m in msgs)]
            split[j + 1]["content"] = rest
            if _render(tokenizer, split, tools, switches) == body:
                return msgs, Ambiguity(SYSTEM_IN_USER, j, sep, "user")
    return msgs, None


def _heads(text: str, sep: str) -> list[str]:
    """Every leading part of ``text`` that ends where ``sep`` starts, shortest first."""
    out, at = [], text.find(sep)
    while at > 0:
        out.append(text[:at])
        at = text.find(sep, at + 1)
    return out


def settle_system_prompts(
    items: Sequence[SuiteItem], tokenizer: Any, profile: TemplateProfile | None
) -> list[SuiteItem]:
    """Read a system prompt out of a user turn where the source gives evidence for it.

    For each source, a leading text ``X`` (up to a separator) of an ambiguous item's user
    text is evidence of a system prompt when at least :data:`MIN_EVIDENCE` of the source's
    items, and :data:`MIN_EVIDENCE_SHARE` of them, open with ``X`` +
    separator (or hold ``X`` as their system prompt). The longest such ``X`` is read as the
    system prompt when the messages then re-render to the item's prompt ids; the ambiguity
    stays on the item, reading ``system`` with the count. Items without evidence keep the
    user reading.

    Example:
        >>> items = settle_system_prompts(items, tok, profile)  # doctest: +SKIP
        >>> items[0].ambiguities[0].reading  # doctest: +SKIP
        'system'
    """
    if profile is None or not any(it.ambiguities for it in items):
        return list(items)
    by_source: dict[str, list[SuiteItem]] = {}
    for it in items:
        by_source.setdefault(it.source, []).append(it)
    changed: dict[str, SuiteItem] = {}
    for group in by_source.values():
        opens: Counter[tuple[str, str]] = Counter()  # (leading text, separator) -> items
        for it in group:
            msgs = it.messages or ()
            if msgs and msgs[0].get("role") == SYSTEM:
                for sep in system_separators(profile):
                    opens[(str(msgs[0].get("content")), sep)] += 1
                continue
            found: set[tuple[str, str]] = set()
            for a in it.ambiguities:
                if a.kind == SYSTEM_IN_USER and a.reading == "user":
                    text = str(msgs[a.message].get("content") or "")
                    found.update((h, a.separator) for h in _heads(text, a.separator))
            opens.update(found)
        need = max(MIN_EVIDENCE, MIN_EVIDENCE_SHARE * len(group))
        for it in group:
            new = _split(it, opens, need, tokenizer)
            if new is not None:
                changed[it.id] = new
    return [changed.get(it.id, it) for it in items]


def _split(
    it: SuiteItem, opens: Counter[tuple[str, str]], need: float, tokenizer: Any
) -> SuiteItem | None:
    for k, a in enumerate(it.ambiguities):
        if a.kind != SYSTEM_IN_USER or a.reading != "user" or it.messages is None:
            continue
        text = str(it.messages[a.message].get("content") or "")
        heads = [h for h in _heads(text, a.separator) if opens[(h, a.separator)] >= need]
        if not heads:
            continue
        head = heads[-1]
        msgs = [dict(m) for m in it.messages]
        msgs[a.message]["content"] = text[len(head) + len(a.separator) :]
        msgs.insert(0, {"role": SYSTEM, "content": head})
        rendered = _render(tokenizer, msgs, it.tools, it.chat_template_kwargs)
        if rendered is None:
            continue
        ids = tokenizer.encode(rendered, add_special_tokens=False)
        if list(ids) != list(it.prompt_ids):
            continue
        settled = Ambiguity(
            a.kind, a.message + 1, a.separator, "system", opens[(head, a.separator)]
        )
        rest = [*it.ambiguities[:k], settled, *it.ambiguities[k + 1 :]]
        return dataclasses.replace(it, messages=tuple(msgs), ambiguities=tuple(rest))
    return None
