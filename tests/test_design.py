"""The sampling design (choose/design.py): take-all rule, length strata, allocation, calibration."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from distprompt.choose.design import (
    CALIBRATION_BOUNDS,
    allocate_picks,
    calibrate,
    length_strata,
    strata_count,
    take_all,
)


def test_take_all_takes_the_rows_that_hold_a_picks_share() -> None:
    # three ~3.5k replies hold two thirds of 15.6k reply tokens: with 20 picks each is worth more
    # than one pick's share (780 tokens), so each stands for itself
    lengths = [3500, 3400, 3600] + [50] * 100
    total = sum(lengths)
    got = take_all(lengths, 20, total)
    assert sorted(got) == [0, 1, 2]


def test_take_all_takes_nothing_from_a_flat_source() -> None:
    lengths = [100 + (i % 7) for i in range(500)]
    assert take_all(lengths, 20, sum(lengths)) == []


def test_take_all_counts_rows_outside_the_list() -> None:
    # the list holds the longest rows only; the total is the whole source's
    assert take_all([2000], 10, 1_000_000) == []
    assert take_all([2000], 10, 10_000) == [0]


@given(
    st.lists(st.integers(0, 5000), min_size=1, max_size=60),
    st.integers(1, 40),
    st.integers(0, 100_000),
)
def test_take_all_invariants(lengths: list[int], k: int, extra: int) -> None:
    total = sum(lengths) + extra
    got = take_all(lengths, k, total)
    assert len(got) <= max(0, k - 1)  # one pick is always left for the rest
    assert len(set(got)) == len(got)
    # longest first, and every one held at least a pick's share of what was left
    left, n_left = total, k
    for i in got:
        assert n_left * lengths[i] >= left
        left -= lengths[i]
        n_left -= 1
    taken = {lengths[i] for i in got}
    if got:
        assert min(taken) >= max(
            (lengths[i] for i in range(len(lengths)) if i not in got), default=0
        )


def test_length_strata_have_about_equal_token_mass() -> None:
    rng = np.random.default_rng(0)
    lengths = np.exp(rng.normal(5, 1.5, 2000)).astype(np.int64) + 1
    labels, lower = length_strata(lengths, np.ones(2000), 4)
    assert len(lower) == 4 and lower == sorted(lower)
    mass = np.bincount(labels, weights=lengths)
    assert mass.min() > 0.1 * mass.sum()
    # a stratum holds a contiguous length range
    for h in range(4):
        got = lengths[labels == h]
        assert got.min() >= lower[h]
        if h + 1 < 4:
            assert got.max() < lower[h + 1]


def test_length_strata_never_split_one_length() -> None:
    labels, lower = length_strata(np.array([5] * 50 + [6]), np.ones(51), 4)
    assert set(labels[:50].tolist()) == {0}
    assert len(lower) <= 2


@given(
    st.lists(st.floats(0, 1000), min_size=1, max_size=5),
    st.lists(st.integers(0, 50), min_size=5, max_size=5),
    st.integers(0, 60),
)
def test_allocate_picks_sums_and_caps(rows: list[float], sizes: list[int], k: int) -> None:
    h = len(rows)
    sizes = sizes[:h]
    tokens = [r * (i + 1) for i, r in enumerate(rows)]
    got = allocate_picks(rows, tokens, sizes, k)
    assert sum(got) == min(k, sum(sizes))
    assert all(0 <= g <= s for g, s in zip(got, sizes, strict=True))
    if k >= h:
        assert all(g >= 1 for g, s in zip(got, sizes, strict=True) if s > 0)


def test_strata_count_grows_with_picks() -> None:
    assert [strata_count(k) for k in (1, 4, 8, 16, 50)] == [1, 1, 2, 4, 4]


def test_calibration_meets_totals_within_bounds() -> None:
    rng = np.random.default_rng(1)
    n = 30
    x = np.column_stack([np.ones(n), rng.integers(10, 1000, n), rng.integers(1, 3000, n)])
    d = np.full(n, 10.0)
    targets = x.T @ (d * rng.uniform(0.7, 1.4, n))
    cal = calibrate(d, x, targets)
    assert np.allclose(x.T @ cal.weights, targets, rtol=1e-6)
    assert max(abs(r) for r in cal.residual) < 1e-6
    lo, hi = CALIBRATION_BOUNDS
    assert (cal.weights >= d * lo - 1e-9).all() and (cal.weights <= d * hi + 1e-9).all()


def test_calibration_reports_what_the_bounds_leave() -> None:
    # one item cannot make 10x its design total within 3x: the residual says so
    cal = calibrate(np.array([1.0]), np.array([[1.0]]), np.array([10.0]))
    assert cal.weights.tolist() == [3.0]
    assert cal.residual == (-0.7,)
    assert cal.bounded == 1


@settings(max_examples=60)
@given(st.integers(5, 40), st.integers(0, 10_000))
def test_calibration_is_within_bounds_and_no_worse_than_design(n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = np.column_stack([np.ones(n), rng.integers(1, 500, n)]).astype(float)
    d = rng.uniform(1, 5, n)
    targets = np.array(
        [d.sum() * rng.uniform(0.8, 1.2), (x[:, 1] * d).sum() * rng.uniform(0.6, 1.5)]
    )
    cal = calibrate(d, x, targets)
    lo, hi = CALIBRATION_BOUNDS
    assert (cal.weights >= d * lo - 1e-9).all() and (cal.weights <= d * hi + 1e-9).all()
    before = np.abs((x.T @ d - targets) / targets).max()
    after = max(abs(r) for r in cal.residual)
    assert after <= before + 1e-9


def test_calibration_keeps_exact_totals_and_comes_close_on_the_rest() -> None:
    # 4 items cannot meet an estimated share far from theirs within the bounds: rows and
    # tokens stay exact, the share comes as close as the bounds allow (not dropped)
    d = np.full(4, 25.0)
    tokens = np.array([10.0, 20.0, 30.0, 40.0])
    share = np.array([0.0, 0.0, 0.1, 0.9]) * tokens
    x = np.column_stack([np.ones(4), tokens, share])
    targets = np.array([100.0, 2500.0, 0.9 * 2500.0])
    cal = calibrate(d, x, targets, exact=2)
    assert abs(cal.residual[0]) < 1e-6 and abs(cal.residual[1]) < 1e-6
    alone = calibrate(d, x[:, :2], targets[:2])
    alone_gap = abs(float(x[:, 2] @ alone.weights) - targets[2]) / targets[2]
    assert abs(cal.residual[2]) < alone_gap - 0.05
    lo, hi = CALIBRATION_BOUNDS
    assert (cal.weights >= d * lo - 1e-9).all() and (cal.weights <= d * hi + 1e-9).all()


@settings(max_examples=60)
@given(st.integers(4, 30), st.integers(0, 10_000))
def test_exact_constraints_hold_whenever_they_can_alone(n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, 3000, n).astype(float)
    x = np.column_stack(
        [np.ones(n), tokens, tokens * rng.uniform(0, 1, n), tokens * rng.uniform(0, 1, n)]
    )
    d = rng.uniform(1, 5, n)
    truth = d * rng.uniform(0.5, 2.0, n)
    targets = x.T @ truth
    targets[2:] *= rng.uniform(0.5, 1.5, 2)  # estimated shares, possibly out of reach
    alone = calibrate(d, x[:, :2], targets[:2])
    cal = calibrate(d, x, targets, exact=2)
    lo, hi = CALIBRATION_BOUNDS
    assert (cal.weights >= d * lo - 1e-9).all() and (cal.weights <= d * hi + 1e-9).all()
    if max(abs(r) for r in alone.residual) < 1e-9:
        assert max(abs(r) for r in cal.residual[:2]) < 1e-6
        # the estimated totals are no further than with the exact constraints alone
        gap = np.abs(x[:, 2:].T @ alone.weights - targets[2:]) / targets[2:]
        assert (np.asarray(cal.residual[2:]) ** 2).sum() <= (gap**2).sum() + 1e-4
