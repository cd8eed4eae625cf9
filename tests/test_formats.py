"""Tests for :mod:`distprompt.write.formats`: the client catalogue and the per-item views."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distprompt.errors import ConfigError
from distprompt.records import SuiteItem
from distprompt.write import formats
from distprompt.write.formats import FORMATS, Plan, check_formats, checked_formats

from factories import suite_item


def _item(
    n: int, messages: list[dict[str, Any]] | None, *, source: str = "s", fidelity: str = "tokens"
) -> SuiteItem:
    msgs = tuple(messages) if messages is not None else None
    item: SuiteItem = suite_item(n, source=source, messages=msgs, fidelity=fidelity)
    return item


def test_format_names_are_checked_and_deduplicated_in_order() -> None:
    assert checked_formats(["guidellm", "openai", "guidellm"]) == ("guidellm", "openai")
    assert checked_formats("sharegpt") == ("sharegpt",)
    assert checked_formats(FORMATS) == FORMATS
    with pytest.raises(ConfigError, match="found 'csv'; fix the format list"):
        check_formats(["openai", "csv"])
    with pytest.raises(ConfigError, match="'x'"):
        checked_formats(["x", "x"])


def test_text_of_reads_strings_and_content_parts() -> None:
    assert formats.text_of(None) == ""
    assert formats.text_of("hi") == "hi"
    parts = ["a", {"type": "text", "text": "b"}, {"type": "image_url", "image_url": {}}]
    assert formats.text_of(parts) == "a\nb"


def test_item_views() -> None:
    user = {"role": "user", "content": "first"}
    multi = _item(
        0, [user, {"role": "assistant", "content": "ok"}, {"role": "user", "content": ""}]
    )
    assert formats.user_texts(multi) == ["first", ""]
    assert formats.first_user_text(multi) == "first" and formats.last_user_text(multi) == ""
    assert formats.has_history(multi) and not formats.has_history(_item(1, [user]))
    assert formats.out_len(multi) == 1  # max_tokens 0 is raised to 1
    assert formats.exact_chat(multi)
    assert not formats.exact_chat(_item(2, [user], fidelity="text"))
    assert not formats.exact_chat(_item(3, None))


def test_plan_partitions_the_items_for_each_layout() -> None:
    user = {"role": "user", "content": "q"}
    items = [
        _item(0, [user], source="b"),
        _item(1, [user, {"role": "assistant", "content": "a"}, {"role": "user", "content": ""}]),
        _item(2, [user], fidelity="text"),
        _item(3, None, source="a/x"),
        _item(4, [{"role": "user", "content": ""}]),
    ]
    plan = Plan.of(items)
    assert [it.id for it in plan.chat] == ["b-0", "s-1", "s-4"]
    assert [it.id for it in plan.single] == ["b-0"]
    assert [it.id for it in plan.first] == ["b-0", "s-1"]
    assert list(plan.by_source) == ["b", "s"] and plan.stems == {"b": "b", "s": "s"}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=30), min_size=1, max_size=8, unique=True))
def test_safe_names_are_unique_for_any_sources(sources: list[str]) -> None:
    stems = formats.safe_names(sources)
    assert set(stems) == set(sources)
    assert len({s.lower() for s in stems.values()}) == len(sources)
    assert all(re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]*", s) for s in stems.values())
