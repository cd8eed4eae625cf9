"""Tests for :mod:`distprompt.choose.vectorize`: TF-IDF/LSA features and the joint space."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distprompt.choose.vectorize import vectorize


def _docs(n: int = 30, seed: int = 0) -> list[np.ndarray]:
    """Three families of prompts (ids from disjoint ranges) of varied lengths."""
    rng = np.random.default_rng(seed)
    return [
        rng.integers(100 * (i % 3), 100 * (i % 3) + 50, int(rng.integers(5, 60))) for i in range(n)
    ]


def test_same_input_and_seed_give_identical_matrices() -> None:
    a, b = vectorize(_docs(), seed=3), vectorize(_docs(), seed=3)
    assert np.array_equal(a.content, b.content) and np.array_equal(a.joint, b.joint)
    assert (a.tfidf != b.tfidf).nnz == 0


def test_dims_are_capped_by_lsa_dims_and_the_pool_size() -> None:
    docs = _docs(30)
    assert vectorize(docs, dims=4).content.shape == (30, 4)
    assert vectorize(docs[:3], dims=64).content.shape[1] <= 2  # at most n - 1 components


def test_content_rows_are_unit_length_and_joint_appends_lengths() -> None:
    docs = _docs(20)
    f = vectorize(docs, dims=5, response_lengths=[3 * (i + 1) for i in range(20)])
    assert np.linalg.norm(f.content, axis=1) == pytest.approx(np.ones(20))
    assert f.joint.shape == (20, f.content.shape[1] + 2)
    assert np.array_equal(f.joint[:, : f.content.shape[1]], f.content)
    assert f.log_length == pytest.approx(np.log([len(d) for d in docs]))
    z = f.joint[:, f.content.shape[1]]  # z-scored log prompt length
    assert z.mean() == pytest.approx(0.0, abs=1e-9) and z.std() == pytest.approx(1.0)
    half = vectorize(docs, dims=5, length_weight=0.5)
    assert half.joint.shape == (20, f.content.shape[1] + 1)
    assert half.joint[:, -1] == pytest.approx(0.5 * z)


def test_prompts_of_a_family_are_closer_than_across_families() -> None:
    f = vectorize(_docs(30), dims=8)
    sim = f.content @ f.content.T
    fam = np.arange(30) % 3
    same = sim[fam[:, None] == fam[None, :]].mean()
    other = sim[fam[:, None] != fam[None, :]].mean()
    assert same > other + 0.5


def test_token_budget_keeps_only_each_prompts_ends() -> None:
    # Two prompts equal in their first and last 16 tokens, different in the middle.
    head, tail = np.arange(1, 17), np.arange(500, 516)
    a = np.concatenate([head, np.arange(100, 140), tail])
    b = np.concatenate([head, np.arange(200, 240), tail])
    # The fourth prompt holds both middles, so their features are kept (seen in two prompts).
    docs = [a, b, np.arange(600, 650), np.concatenate([np.arange(100, 140), np.arange(200, 240)])]
    small = vectorize(docs, token_budget=10)  # window w = 16 tokens at each end
    assert (small.tfidf[0] != small.tfidf[1]).nnz == 0
    assert small.log_length == pytest.approx(np.log([72, 72, 50, 80]))  # whole prompts' lengths
    whole = vectorize(docs)
    assert (whole.tfidf[0] != whole.tfidf[1]).nnz > 0


def _reference_counts(docs: list[np.ndarray], vocab_hint: int) -> dict[tuple[int, int], int]:
    """The counts ``_counts`` must give, by a dictionary: (document, kept feature) -> count."""
    from distprompt.choose.vectorize import _BIGRAM_BUCKETS

    per_doc = []
    for d in docs:
        a = [int(v) for v in d]
        feats = a + [
            vocab_hint + (x * 1_000_003 + y) % _BIGRAM_BUCKETS for x, y in itertools.pairwise(a)
        ]
        c: dict[int, int] = {}
        for f in feats:
            c[f] = c.get(f, 0) + 1
        per_doc.append(c)
    df: dict[int, int] = {}
    for c in per_doc:
        for f in c:
            df[f] = df.get(f, 0) + 1
    kept = sorted(f for f, n in df.items() if n >= 2) or sorted(df)
    col = {f: j for j, f in enumerate(kept)}
    return {(i, col[f]): n for i, c in enumerate(per_doc) for f, n in c.items() if f in col}


@settings(max_examples=60, deadline=None)
@given(
    docs=st.lists(
        st.lists(st.integers(0, 40), max_size=12).map(lambda v: np.array(v, dtype=np.int32)),
        min_size=1,
        max_size=12,
    )
)
def test_counts_match_a_plain_count_of_unigrams_and_bigrams(docs: list[np.ndarray]) -> None:
    # Empty and one-token documents, repeats within a document, features of one document only
    # (dropped) and pools where every feature is of one document (all kept).
    from distprompt.choose.vectorize import _counts

    vocab_hint = max((int(d.max()) for d in docs if len(d)), default=0) + 1
    m = _counts(docs, vocab_hint)
    assert (_counts(docs) != m).nnz == 0  # the default vocab_hint is the same
    want = _reference_counts(docs, vocab_hint)
    assert m.shape == (len(docs), max(1, len({j for _, j in want})))
    assert m.has_sorted_indices and m.data.dtype == np.float64
    got = {
        (i, int(j)): v
        for i, row in enumerate(m)
        for j, v in zip(row.indices, row.data, strict=True)
    }
    assert got == want
