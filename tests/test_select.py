"""Selection within a source: herding, clusters, weights, near-duplicates."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from distprompt.choose.select import select
from distprompt.choose.vectorize import vectorize


def _docs(rng: np.random.Generator, n: int, base: int, length: tuple[int, int]) -> list[np.ndarray]:
    out = []
    for _ in range(n):
        m = int(rng.integers(*length))
        out.append(base + rng.integers(0, 50, size=m))
    return out


def test_every_mode_is_represented() -> None:
    rng = np.random.default_rng(0)
    # Three modes of different size; the smallest (13%) must still get one of six picks.
    docs = (
        _docs(rng, 200, 1000, (20, 60))
        + _docs(rng, 60, 5000, (20, 60))
        + _docs(rng, 40, 9000, (20, 60))
    )
    mode = np.array([0] * 200 + [1] * 60 + [2] * 40)
    f = vectorize(docs, seed=0)
    for method in ("herding", "kmedoids"):
        sel = select(f, 6, method=method, seed=0)
        assert {int(mode[i]) for i in sel.indices} == {0, 1, 2}, method


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(2, 60),
    k=st.integers(1, 70),
    seed=st.integers(0, 5),
    method=st.sampled_from(["herding", "kmedoids", "random"]),
)
def test_selection_invariants(n: int, k: int, seed: int, method: str) -> None:
    rng = np.random.default_rng(seed)
    docs = _docs(rng, n, 0, (1, 30))
    f = vectorize(docs, seed=seed)
    sel = select(f, k, method=method, seed=seed)
    assert len(sel.indices) == min(k, n)
    assert len(set(sel.indices)) == len(sel.indices)
    assert all(0 <= i < n for i in sel.indices)
    assert sum(sel.sizes) == n
    assert abs(sum(sel.weights) - 1.0) < 1e-9
    assert all(s >= 1 for s in sel.sizes)  # each representative stands at least for itself
    again = select(f, k, method=method, seed=seed)
    assert again.indices == sel.indices


def test_near_duplicates_not_both_selected() -> None:
    rng = np.random.default_rng(1)
    base = rng.integers(0, 3000, size=400)
    near = []
    for j in range(30):  # the same long template with one token changed
        d = base.copy()
        d[j] = 4000 + j
        near.append(d)
    distinct = [rng.integers(0, 3000, size=400) for _ in range(5)]
    f = vectorize(near + distinct, seed=0)
    sel = select(f, 5, method="herding", seed=0, near_duplicate=0.9)
    assert sum(1 for i in sel.indices if i < 30) <= 1
