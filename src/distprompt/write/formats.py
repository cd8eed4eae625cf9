"""The client files of a suite: their names, and which items and which text each one holds.

Shared by the writers (:mod:`distprompt.write.export`) and ``RUN.md``
(:mod:`distprompt.write.runmd`) so that
the counts and commands in ``RUN.md`` agree with the files: the format names (:data:`FORMATS`),
the client versions the layouts were checked against, the per-item views (user turns, output
length) and the :class:`Plan` of which items each layout holds.

Example:
    >>> checked_formats(["openai", "openai", "guidellm"])
    ('openai', 'guidellm')
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from distprompt.config import FORMATS, check_formats, checked_formats
from distprompt.records import SuiteItem

__all__ = ["CLIENT_VERSIONS", "FORMATS", "Plan", "check_formats", "checked_formats"]


#: Client versions whose loaders the layouts and commands were checked against.
CLIENT_VERSIONS: dict[str, str] = {
    "sglang": "0.5.23",
    "vllm": "0.33.0",
    "guidellm": "0.8.1",
    "aiperf": "0.13.0",
}

#: File names shared by the writers and RUN.md.
RUN_MD = "RUN.md"
PROVENANCE_NAME = "provenance.jsonl"
AIPERF_MULTI_NAME = "aiperf_multi_turn.jsonl"

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")
_WINDOWS_RESERVED = frozenset(
    {"CON", "PRN", "AUX", "NUL"}
    | {f"COM{i}" for i in range(1, 10)}
    | {f"LPT{i}" for i in range(1, 10)}
)


# --------------------------------------------------------------------------------------------
# Per-item views shared by the writers and RUN.md
# --------------------------------------------------------------------------------------------


def has_messages(item: SuiteItem) -> bool:
    return bool(item.messages)


def exact_chat(item: SuiteItem) -> bool:
    """Messages that re-render to the prompt ids: the only items a chat endpoint is sent."""
    return has_messages(item) and item.fidelity == "tokens"


def out_len(item: SuiteItem) -> int:
    """Output length to ask for: at least 1 (AIPerf aborts the load on 0, others misbehave)."""
    return max(1, int(item.max_tokens))


def text_of(content: Any) -> str:
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


def user_texts(item: SuiteItem) -> list[str]:
    return [text_of(m.get("content")) for m in item.messages or () if m.get("role") == "user"]


def first_user_text(item: SuiteItem) -> str:
    texts = user_texts(item)
    return texts[0] if texts else ""


def last_user_text(item: SuiteItem) -> str:
    texts = user_texts(item)
    return texts[-1] if texts else ""


def has_history(item: SuiteItem) -> bool:
    """True when the prompt carries more than one user turn: system, earlier turns, tools."""
    if item.tools:
        return True
    msgs = item.messages or ()
    return any(m.get("role") != "user" for m in msgs) or len(msgs) > 1


def safe_names(sources: Iterable[str]) -> dict[str, str]:
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


@dataclass(frozen=True, slots=True)
class Plan:
    """Which items each layout holds; shared by the writers and RUN.md so counts agree."""

    items: tuple[SuiteItem, ...]
    chat: tuple[SuiteItem, ...]  # items with token-exact recovered messages (openai)
    single: tuple[SuiteItem, ...]  # + a non-empty last user turn (sharegpt, aiperf)
    first: tuple[SuiteItem, ...]  # + a non-empty first user turn (by_source)
    by_source: dict[str, tuple[SuiteItem, ...]]
    stems: dict[str, str]

    @classmethod
    def of(cls, items: Sequence[SuiteItem]) -> Plan:
        all_items = tuple(items)
        chat = tuple(it for it in all_items if exact_chat(it))
        single = tuple(it for it in chat if last_user_text(it))
        first = tuple(it for it in chat if first_user_text(it))
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
            stems=safe_names(by_source),
        )
