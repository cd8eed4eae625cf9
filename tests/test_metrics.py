"""Tests for :mod:`distprompt.write.metrics`: each metric on a case with a known answer."""

from __future__ import annotations

import math

import numpy as np
import pytest

from distprompt.write.metrics import (
    ks_statistic,
    mean_nearest_distance,
    measure_source,
    reference_space,
    represented_share,
)

from factories import grouped_candidates


def test_ks_statistic_known_values() -> None:
    ref = {1: 1, 2: 1, 3: 1, 4: 1}
    assert ks_statistic([1, 2, 3, 4], ref) == 0.0
    assert ks_statistic([4], ref) == 0.75
    assert ks_statistic([1, 4], {1: 1, 4: 1}, weights=[0.75, 0.25]) == 0.25
    assert ks_statistic([100, 200], ref) == 1.0  # disjoint supports
    assert ks_statistic([2, 2, 3], {2: 2, 3: 1}) == 0.0  # counts, not just support
    assert ks_statistic([1, 2], {1: 3, 2: 1}) == 0.25  # F: 0.5 vs 0.75 at x=1
    assert math.isnan(ks_statistic([], ref))


def test_mean_nearest_distance_known_value() -> None:
    x = np.array([[0.0, 0.0], [3.0, 4.0], [6.0, 8.0], [10.0, 0.0]])
    # nearest of {0, 3}: 0, 5 (to 0), 8.94 (to 3: sqrt(16 + 64)), 0
    expect = (0 + 5 + math.sqrt(16 + 64) + 0) / 4
    assert mean_nearest_distance(x, [0, 3]) == pytest.approx(expect)
    assert mean_nearest_distance(x, [0, 1, 2, 3]) == 0.0


def test_represented_share_known_value() -> None:
    labels = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 3])
    assert represented_share(labels, [0]) == pytest.approx(0.3)
    assert represented_share(labels, [1, 5, 9]) == pytest.approx(0.8)  # clusters 0, 2, 3
    assert represented_share(labels, [0, 3, 5, 9]) == 1.0


def test_reference_space_appends_zscored_log_length() -> None:
    x = reference_space(np.eye(3), np.log(np.array([10.0, 100.0, 1000.0])))
    assert x.shape == (3, 4)
    assert x[:, 3] == pytest.approx([-math.sqrt(1.5), 0.0, math.sqrt(1.5)])


def test_measure_source_one_item_per_group_is_perfect() -> None:
    cands, content, st = grouped_candidates("s")
    loglen = np.log([c.n_prompt_tokens for c in cands])
    ev = measure_source(
        cands, [0, 10, 20, 30], [0.25] * 4, stats=st, content=content, log_length=loglen, seed=0
    )
    s = ev.suite
    assert (s.mean_distance, s.represented_share) == (0.0, 1.0)
    assert (s.ks_prompt, s.ks_prompt_weighted, s.ks_response, s.ks_response_weighted) == (
        0.0,
        0.0,
        0.0,
        0.0,
    )
    # 4 random items out of 4 groups of 10 cover every group with probability ~0.11
    r = ev.random
    assert r.mean_distance is not None and r.mean_distance > 0.0
    assert r.represented_share is not None and r.represented_share < 1.0
    assert r.ks_prompt is not None and r.ks_prompt >= 0.25
    assert len(ev.random_runs) == 5 and not ev.trivial
    assert set(ev.projection) == {"x", "y", "cluster", "selected"}
    assert sum(ev.projection["selected"]) == 4


def test_measure_source_skewed_and_trivial_selections() -> None:
    cands, content, st = grouped_candidates("s")
    loglen = np.log([c.n_prompt_tokens for c in cands])
    # Both items from the shortest group: KS = the corpus mass beyond it.
    ev = measure_source(
        cands, [0, 1], [0.5, 0.5], stats=st, content=content, log_length=loglen, seed=0
    )
    assert ev.suite.ks_prompt == 0.75  # all mass at the shortest length, corpus has 1/4 there
    trivial = measure_source(cands, range(40), [1 / 40] * 40, stats=st, seed=0)
    assert trivial.trivial and trivial.suite.mean_distance == 0.0
    assert trivial.suite.represented_share == 1.0 and trivial.suite.ks_prompt == 0.0
    assert trivial.random == trivial.suite


def test_measure_source_figures_are_those_of_the_plain_functions() -> None:
    # measure_source shares work between its six selections (norms once, one pass for a random
    # sample's clusters and distance, each histogram prepared once): its figures must be, to
    # the bit, those of the public functions applied one by one; a pool over 4096 candidates
    # is measured in several chunks.
    from distprompt.choose.cluster import assign
    from distprompt.records import SourceStats

    from factories import candidate

    rng = np.random.default_rng(4)
    n, k = 5000, 30
    lengths = rng.integers(5, 400, size=n)
    resp = rng.integers(1, 900, size=n)
    cands = [candidate(i, n_prompt=int(lengths[i]), n_resp=int(resp[i])) for i in range(n)]
    st = SourceStats()
    for p, r in zip(rng.integers(5, 400, size=8000), rng.integers(1, 900, size=8000), strict=True):
        st.rows += 1
        st.prompt_lengths[int(p)] += 1
        st.response_lengths[int(r)] += 1
        st.first_reply_lengths[int(r)] += 1  # single-turn rows: the first reply is the rest
    content = rng.normal(size=(n, 6))
    content /= np.linalg.norm(content, axis=1)[:, None]
    loglen = np.log(lengths.astype(np.float64))
    sel = rng.choice(n, size=k, replace=False).tolist()
    w = rng.random(k)
    w /= w.sum()
    ev = measure_source(cands, sel, w, stats=st, content=content, log_length=loglen, seed=3)
    x = reference_space(content, loglen)
    runs = [(np.asarray(sel), w)]
    for i in range(5):
        ridx = np.sort(np.random.default_rng([3, i]).choice(n, size=k, replace=False))
        runs.append((ridx, np.bincount(assign(x, ridx.tolist()), minlength=k) / n))
    for (ix, wx), got in zip(runs, (ev.suite, *ev.random_runs), strict=True):
        assert got.mean_distance == mean_nearest_distance(x, ix)
        for field, values, hist in (
            ("prompt", lengths[ix], st.prompt_lengths),
            ("response", resp[ix], st.first_reply_lengths),
        ):
            assert getattr(got, f"ks_{field}") == ks_statistic(values, hist)
            assert getattr(got, f"ks_{field}_weighted") == ks_statistic(values, hist, weights=wx)
    assert [s.weights.tolist() for s in ev.random_samples] == [wx.tolist() for _, wx in runs[1:]]


def test_nearest_is_the_argmin_and_min_of_all_distances() -> None:
    from distprompt.choose.cluster import nearest, sq_distances

    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 5))
    x[7] = x[3]  # a candidate equidistant from two coinciding centers: the earlier one wins
    centers = [3, 250, 7, 40]
    labels, d = nearest(x, centers, chunk=64)
    full = sq_distances(x, x[centers])
    assert labels.tolist() == np.argmin(full, axis=1).tolist()
    assert d == pytest.approx(full.min(1))  # a matmul of another shape may round otherwise
    assert labels[7] == 0
    assert np.array_equal(nearest(x, centers, x_sq=(x * x).sum(1))[1], d)


def test_output_lengths_are_max_tokens_against_the_capped_first_replies() -> None:
    """Multi-turn rows: n_response_tokens counts every later turn, the first reply (what a
    client asks for) is a fraction of it; both sides of the KS are the first reply, capped."""
    import dataclasses

    from distprompt.records import SourceStats, max_tokens_histogram

    from factories import candidate

    rng = np.random.default_rng(7)
    n, cap = 400, 300
    first = rng.integers(0, 600, size=n)  # 0: an empty first reply asks for 1 token
    rest = first * rng.integers(3, 20, size=n) + 1
    cands = [
        dataclasses.replace(
            candidate(i, n_prompt=10 + i % 50, n_resp=int(rest[i])), n_first_response=int(first[i])
        )
        for i in range(n)
    ]
    st = SourceStats()
    for i in range(n):  # the corpus: the candidates' rows twice over
        st.rows += 2
        st.prompt_lengths[10 + i % 50] += 2
        st.response_lengths[int(rest[i])] += 2
        st.first_reply_lengths[int(first[i])] += 2
    sel = list(range(0, n, 20))
    w = np.full(len(sel), 1.0 / len(sel))
    for c in (None, cap):
        ev = measure_source(cands, sel, w, stats=st, seed=0, n_random=1, max_output_tokens=c)
        want = np.maximum(1, first[sel]) if c is None else np.clip(first[sel], 1, c)
        assert ev.suite_sample is not None
        assert ev.suite_sample.response.tolist() == want.tolist()
        ref = max_tokens_histogram(st.first_reply_lengths, c)
        assert ev.suite.ks_response == ks_statistic(want, ref)
        # the rest of the row is far from what clients ask for: the old reference would fail
        assert ks_statistic(want, st.response_lengths) > 0.5
    # capped items against the uncapped corpus would look far off: the cap applies to both
    uncapped = ks_statistic(want, max_tokens_histogram(st.first_reply_lengths))
    assert ev.suite.ks_response is not None and uncapped > ev.suite.ks_response + 0.2
