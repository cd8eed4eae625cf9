"""Quota allocation properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distprompt.choose.stratify import allocate, largest_remainder
from distprompt.errors import ConfigError

sources = st.dictionaries(
    st.text("abcdefghij", min_size=1, max_size=6), st.integers(1, 10_000), min_size=1, max_size=12
)


@settings(max_examples=300, deadline=None)
@given(
    rows=sources,
    total=st.integers(1, 2000),
    mode=st.sampled_from(["proportional", "sqrt", "equal"]),
    data=st.data(),
)
def test_total_is_split_exactly(rows: dict[str, int], total: int, mode: str, data) -> None:  # type: ignore[no-untyped-def]
    min_per = data.draw(st.integers(0, total // len(rows)))
    q = allocate(rows, rows, total=total, allocation=mode, min_per_source=min_per)
    assert sum(x.target for x in q.values()) == total
    assert all(x.target >= min_per for x in q.values())
    assert all(0 <= x.granted <= x.target for x in q.values())
    assert all(x.granted == min(x.target, rows[s]) for s, x in q.items())
    if min_per == 0:
        w = {
            s: (r if mode == "proportional" else math.sqrt(r) if mode == "sqrt" else 1.0)
            for s, r in rows.items()
        }
        tot = sum(w.values())
        for s, x in q.items():  # largest remainder: within one of the exact share
            assert abs(x.target - total * w[s] / tot) < 1


@given(
    weights=st.dictionaries(
        st.text("xyz", min_size=1, max_size=3), st.floats(0, 100), min_size=1, max_size=8
    ),
    budget=st.integers(0, 500),
)
def test_largest_remainder_sums(weights: dict[str, float], budget: int) -> None:
    out = largest_remainder(weights, budget)
    assert sum(out.values()) == budget
    assert set(out) == set(weights)


def test_per_source_and_shortfall() -> None:
    q = allocate({"a": 100, "b": 5}, {"a": 100, "b": 3}, per_source=10)
    assert (q["a"].target, q["a"].granted, q["b"].granted, q["b"].shortfall) == (10, 10, 3, 7)


def test_min_per_source_too_large() -> None:
    with pytest.raises(ConfigError, match="min-per-source"):
        allocate({"a": 1, "b": 1}, {"a": 1, "b": 1}, total=3, min_per_source=2)


def test_exactly_one_of_per_source_total() -> None:
    with pytest.raises(ConfigError):
        allocate({"a": 1}, {"a": 1})
