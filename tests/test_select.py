"""Selection within a source: herding, clusters, weights, near-duplicates."""

from __future__ import annotations

import numpy as np
import pytest
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


def _herding_reference(x: np.ndarray, k: int, tfidf: object, near_duplicate: float) -> list[int]:
    """Kernel herding as first written: every distance from scratch, and the near-duplicate
    guard as the similarity of every candidate with each pick (herding must pick the same)."""
    from distprompt.choose.cluster import sq_distances
    from distprompt.choose.select import _LANDMARKS, _MAX_EXACT, _gamma

    n = x.shape[0]
    rng = np.random.default_rng(0)
    gamma = _gamma(x, rng)
    land = np.arange(n) if n <= _MAX_EXACT else np.sort(rng.choice(n, _LANDMARKS, replace=False))
    mu = np.empty(n)
    for s in range(0, n, 512):
        mu[s : s + 512] = np.exp(-gamma * sq_distances(x[s : s + 512], x[land])).mean(1)
    rows = tfidf.tocsr()  # type: ignore[attr-defined]
    repulse, taken, near = np.zeros(n), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    picked: list[int] = []
    for t in range(k):
        score = mu - repulse / (t + 1)
        score[taken] = -np.inf
        if not np.all(near | taken):
            score[near] = -np.inf
        i = int(np.argmax(score))
        picked.append(i)
        taken[i] = True
        repulse += np.exp(-gamma * sq_distances(x, x[i : i + 1])[:, 0])
        v = rows[i].toarray()[0]
        near |= rows @ v >= near_duplicate
    return picked


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 1000),
    families=st.integers(1, 6),
    copies=st.integers(1, 40),
    k=st.integers(1, 40),
    threshold=st.sampled_from([0.5, 0.8, 0.9, 0.95, 0.99]),
)
def test_herding_picks_what_the_plain_guard_picks(
    seed: int, families: int, copies: int, k: int, threshold: float
) -> None:
    # Families of near-duplicates (a template with a few tokens changed): the guard fires
    # often, scans many candidates in a step (more than it compares one at a time) and runs out
    # of distinct candidates; the picks, and so every figure after them, must not change.
    from distprompt.choose.select import herding

    rng = np.random.default_rng(seed)
    docs = []
    for f in range(families):
        base = rng.integers(0, 400, size=int(rng.integers(20, 120)))
        for _ in range(copies):
            d = base.copy()
            j = rng.integers(0, d.shape[0], size=int(rng.integers(0, 4)))
            d[j] = rng.integers(400, 800, size=j.shape[0])
            docs.append(d + 1000 * f)
    feats = vectorize(docs, seed=0, dims=8)
    n = len(docs)
    if k >= n:
        return
    got = herding(feats.joint, k, tfidf=feats.tfidf, near_duplicate=threshold)
    assert got == _herding_reference(feats.joint, k, feats.tfidf, threshold)


@pytest.mark.parametrize("max_scan", [0, 1, 64])
def test_herding_guard_gives_the_same_picks_however_far_it_scans(
    monkeypatch: pytest.MonkeyPatch, max_scan: int
) -> None:
    # A family of 150 near-copies and a few distinct prompts, k larger than the distinct
    # ones: the guard skips the whole family after its first pick, then runs out of distinct
    # candidates. 0: every candidate against every pick from the start; 1: after one candidate
    # in a step; 64 (the default): mostly one at a time.
    from distprompt.choose import select as sel

    rng = np.random.default_rng(5)
    base = rng.integers(0, 400, size=80)
    docs = []
    for _ in range(150):
        d = base.copy()
        d[rng.integers(0, 80, size=2)] = rng.integers(400, 800, size=2)
        docs.append(d)
    docs += [rng.integers(1000 * (i + 1), 1000 * (i + 1) + 400, size=60) for i in range(4)]
    feats = vectorize(docs, seed=0, dims=8)
    monkeypatch.setattr(sel, "GUARD_SCAN", max_scan)
    got = sel.herding(feats.joint, 12, tfidf=feats.tfidf, near_duplicate=0.5)
    assert got == _herding_reference(feats.joint, 12, feats.tfidf, 0.5)
    assert sum(1 for i in got[:5] if i < 150) == 1  # every distinct prompt before a second copy


def test_guard_similarities_are_the_bits_of_the_sparse_product() -> None:
    # Sums in another order (a dot product of dense rows, or np.sum) differ in the last bits,
    # and a similarity at the threshold would then flip a pick.
    from scipy import sparse

    from distprompt.choose.select import _Guard

    rng = np.random.default_rng(2)
    m = sparse.random(300, 2000, density=0.05, random_state=3, format="csr")
    m.data = rng.random(m.data.shape[0])
    m = sparse.csr_matrix(m.multiply(1.0 / np.sqrt(m.multiply(m).sum(1))))
    m = sparse.csr_matrix(sparse.vstack([m[:7], m[3], m[8:]]))  # row 7 a copy of row 3
    guard = _Guard(m, 0.95, 300)
    picks = [3, 10, 250, 7]
    want = np.stack([m @ m[p].toarray()[0] for p in picks], axis=1)
    for j in range(300):
        assert np.array_equal(guard.similarities(j, picks), want[j])
