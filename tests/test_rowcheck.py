"""The pass's per-row marker check (:class:`distprompt.recover.checks.RowCheck`) against a plain
list search: the same reasons for any prompt and markers, int64 bytes that match across an
element boundary included."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from distprompt.read.fastrow import FullView, read_row
from distprompt.recover.checks import RowCheck

from factories import random_row


class _Prompt:
    def __init__(self, ids: Any, dtype: Any = np.int64) -> None:
        self.prompt_ids = np.asarray(ids, dtype=dtype)


def _reference(check: RowCheck, ids: list[int]) -> list[str]:
    out = []
    if check.start and ids[: len(check.start)] != list(check.start):
        out.append("template_start_missing")
    m = len(check.gen)
    if check.gen and not any(ids[i : i + m] == list(check.gen) for i in range(len(ids) - m + 1)):
        out.append("generation_prompt_missing")
    return out


IDS = st.integers(0, 2**40)
SMALL = st.integers(0, 3)


@settings(max_examples=300, deadline=None)
@given(
    ids=st.lists(st.one_of(SMALL, IDS), max_size=12),
    start=st.lists(st.one_of(SMALL, IDS), max_size=3),
    gen=st.lists(st.one_of(SMALL, IDS), max_size=3),
    dtype=st.sampled_from([np.int64, np.int32]),
)
def test_same_reasons_as_a_list_search(
    ids: list[int], start: list[int], gen: list[int], dtype: Any
) -> None:
    if dtype is np.int32:
        ids = [i % 2**31 for i in ids]
    check = RowCheck(start=tuple(start), gen=tuple(gen))
    assert check(_Prompt(ids, dtype)) == _reference(check, ids)


def test_a_byte_match_across_elements_is_no_match() -> None:
    ids = np.array([0x1111111122222222, 0x3333333344444444], dtype=np.int64)
    across = int(np.frombuffer(ids.tobytes()[4:12], dtype=np.int64)[0])
    assert ids.tobytes().find(np.array([across], dtype=np.int64).tobytes()) == 4
    check = RowCheck(start=(), gen=(across,))
    assert check(_Prompt(ids)) == ["generation_prompt_missing"]
    twice = np.concatenate([ids, ids[:1], [across]])
    assert check(_Prompt(twice)) == []


def test_markers_in_the_middle_and_at_the_end() -> None:
    check = RowCheck(start=(7, 8), gen=(5, 6))
    assert check(_Prompt([7, 8, 1, 5, 6])) == []
    assert check(_Prompt([7, 8, 5, 6, 1])) == []
    assert check(_Prompt([7])) == ["template_start_missing", "generation_prompt_missing"]
    assert check(_Prompt([8, 7, 5])) == ["template_start_missing", "generation_prompt_missing"]
    assert RowCheck(start=(), gen=())(_Prompt([])) == []


def test_picklable_with_its_markers() -> None:
    check = RowCheck(start=(151644,), gen=(151644, 77091, 198))
    again = pickle.loads(pickle.dumps(check))
    assert again == check
    row = random_row(40, 12, seed=3)
    ids = [151644, *row["input_ids"][1:9], 151644, 77091, 198]
    assert again(_Prompt(ids)) == check(_Prompt(ids)) == []


def test_views_of_both_readers() -> None:
    """The check sees the same prompt ids from the byte checks and the full parser."""
    import json

    from distprompt.read.validate import parse_row

    row = random_row(3000, 700, seed=4)
    raw = json.dumps(row).encode()
    check = RowCheck(start=tuple(row["input_ids"][:2]), gen=tuple(row["input_ids"][650:653]))
    fast = read_row(raw, shard="s", line=1, offset=0)
    full = FullView(parse_row(raw, shard="s", line=1, offset=0))
    assert check(fast) == check(full) == []


def _reference_alternatives(check: RowCheck, ids: list[int]) -> list[str]:
    out = _reference(RowCheck(start=check.start, gen=check.gen), ids)
    opens = any(ids[: len(s)] == list(s) for s in check.starts if s)
    if "template_start_missing" not in out and check.starts and not opens:
        out.insert(0, "template_start_missing")
    if not check.gen and check.gens:

        def holds(g: tuple[int, ...]) -> bool:
            return any(ids[i : i + len(g)] == list(g) for i in range(len(ids) - len(g) + 1))

        if not any(holds(g) for g in check.gens if g):
            out.append("generation_prompt_missing")
    return out


@settings(max_examples=300, deadline=None)
@given(
    ids=st.lists(SMALL, max_size=10),
    start=st.lists(SMALL, max_size=1),
    starts=st.lists(st.lists(SMALL, min_size=1, max_size=3).map(tuple), max_size=3),
    gens=st.lists(st.lists(SMALL, min_size=1, max_size=2).map(tuple), max_size=3),
)
def test_layout_alternatives_as_a_list_search(
    ids: list[int], start: list[int], starts: list[tuple[int, ...]], gens: list[tuple[int, ...]]
) -> None:
    # A row opens as one of the layouts and holds one of their generation prompts.
    check = RowCheck(start=tuple(start), gen=(), starts=tuple(starts), gens=tuple(gens))
    assert check(_Prompt(ids)) == _reference_alternatives(check, ids)
    assert pickle.loads(pickle.dumps(check))(_Prompt(ids)) == check(_Prompt(ids))
