"""A source's sampling design: who stands for itself, how the other picks are spread, and what
each item's weight is.

A server reports ratios of sums over the requests it served (accepted length = Σ tokens /
Σ verify steps), so long replies dominate what it measures, and in users' data a few very long
first replies can hold most of a source's reply tokens. A uniform pick of 20–50 prompts takes one
or none of them and misses the figure whatever the prompts look like. Survey sampling's answer,
applied per source:

1. **Take-all stratum** (:func:`take_all`): a row whose first reply alone carries at least a
   ``1/n`` share of the reply tokens still to be represented (``n`` the picks left) is taken and
   stands for itself (weight: its own rows); repeated until no row qualifies.
2. **Length strata** (:func:`length_strata`): the other candidates are cut into strata of about
   equal first-reply token mass; picks are allocated half by the strata's rows, half by their
   reply tokens (:func:`allocate_picks`), so long-reply strata get more than their share of
   rows and short ones are not starved.
3. **Weights** (:func:`calibrate`): each item of stratum ``h`` starts at ``N_h / n_h`` (corpus
   rows of the stratum over its picks) and the weights of a source's non-take-all items are then
   calibrated (bounded linear calibration, ``[1/3, 3]`` times the start) so that the weighted
   totals of rows, prompt tokens and first-reply tokens equal the corpus's exactly, and the
   token-weighted shares of reply content that bear on speculation (tokens whose 1- to 4-gram
   ending at them occurred earlier in the prompt or the reply, tokens a copy predictor gets
   right, n-gram drafters' verify steps and drafted tokens:
   :func:`distprompt.replies.reply_features`; the pipeline picks which) equal their
   estimate from the pool's reference sample (a prompt answered several times with all its
   rows' replies), as closely as the bounds allow
   while the exact totals hold. What calibration cannot reach within the bounds is the
   residual, reported.

The unit of ``weight`` is corpus rows: a source's weights sum to its row count, so across
sources they are comparable as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from distprompt.choose.stratify import largest_remainder

__all__ = [
    "CALIBRATION_BOUNDS",
    "Calibration",
    "allocate_picks",
    "calibrate",
    "length_strata",
    "strata_count",
    "take_all",
]

#: Calibrated weights stay within these multiples of their design weight.
CALIBRATION_BOUNDS = (1.0 / 3.0, 3.0)


def take_all(lengths: Sequence[int], k: int, total: int) -> list[int]:
    """Indices (into ``lengths``, longest first) of the rows that stand for themselves.

    Walking down the longest first replies, a row is taken while ``n_left * length >=
    tokens_left``: with ``n_left`` picks for ``tokens_left`` reply tokens, such a row holds at
    least a pick's share by itself. ``total`` is the source's first-reply tokens (all rows).

    Example:
        >>> take_all([3500, 3400, 3300, 10, 10], 5, 10_500)
        [0, 1, 2]
        >>> take_all([100, 90], 5, 10_000)
        []
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    out: list[int] = []
    left, n_left = total, k
    for i in order:
        if n_left <= 1 or lengths[i] <= 0 or n_left * lengths[i] < left:
            break
        out.append(i)
        left -= lengths[i]
        n_left -= 1
    return out


def strata_count(k: int) -> int:
    """Length strata for ``k`` picks: one per ~4 picks, 1 to 4 (each needs a few picks for its
    weights to be calibrated)."""
    return max(1, min(4, k // 4))


def length_strata(lengths: np.ndarray, mass: np.ndarray, h: int) -> tuple[np.ndarray, list[int]]:
    """Cut candidates into at most ``h`` strata of about equal first-reply token mass
    (``mass * lengths``; ``mass`` = rows a candidate stands for), by length.

    Returns:
        The stratum of each candidate (0 = shortest replies) and the strata's lower length
        bounds. Candidates of one length are never split between strata.

    Example:
        >>> labels, lower = length_strata(np.array([1, 1, 10, 100]), np.ones(4), 2)
        >>> labels.tolist(), lower
        ([0, 0, 0, 1], [1, 100])
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    n = lengths.shape[0]
    labels = np.zeros(n, dtype=np.int64)
    if n == 0 or h <= 1:
        return labels, [int(lengths.min())] if n else [0]
    tokens = np.asarray(mass, dtype=np.float64) * np.maximum(lengths, 1)
    values = np.unique(lengths)
    per_value = np.bincount(np.searchsorted(values, lengths), weights=tokens)
    cum = np.cumsum(per_value) / per_value.sum()
    # the value where each equal-mass boundary falls opens the next stratum
    cuts = sorted({int(np.searchsorted(cum, q, side="right")) for q in np.arange(1, h) / h})
    cuts = [c for c in cuts if 0 < c < values.shape[0]]
    lower = [int(values[0]), *(int(values[c]) for c in cuts)]
    labels = np.searchsorted(np.asarray(lower[1:], dtype=np.int64), lengths, side="right")
    return labels.astype(np.int64), lower


def allocate_picks(
    rows: Sequence[float], tokens: Sequence[float], sizes: Sequence[int], k: int
) -> list[int]:
    """Picks per stratum: ``k`` split by half the strata's row share plus half their reply-token
    share, at least one each while picks last, never more than a stratum holds.

    Example:
        >>> allocate_picks([90, 10], [50, 50], [90, 10], 10)
        [7, 3]
    """
    h = len(sizes)
    tr, tt = float(sum(rows)) or 1.0, float(sum(tokens)) or 1.0
    share = {str(i): 0.5 * rows[i] / tr + 0.5 * tokens[i] / tt for i in range(h)}
    k = min(k, int(sum(sizes)))
    out = [0] * h
    left = k
    for i in sorted(range(h), key=lambda i: -share[str(i)]):
        if left > 0 and sizes[i] > 0:
            out[i], left = 1, left - 1
    open_ = [i for i in range(h) if sizes[i] > out[i]]
    while left > 0 and open_:
        extra = largest_remainder({str(i): share[str(i)] for i in open_}, left)
        given = 0
        for i in open_:
            give = min(extra[str(i)], sizes[i] - out[i])
            out[i] += give
            given += give
        if given == 0:  # what is left went to full strata: one more each, largest share first
            for i in sorted(open_, key=lambda i: -share[str(i)])[:left]:
                out[i] += 1
                given += 1
        left -= given
        open_ = [i for i in open_ if sizes[i] > out[i]]
    return out


@dataclass(frozen=True, slots=True)
class Calibration:
    """Calibrated weights and how close they came.

    Attributes:
        weights: One per item.
        residual: Per constraint, ``(weighted total - target) / target`` (0 where met).
        bounded: Items whose weight ended at a bound.
    """

    weights: np.ndarray
    residual: tuple[float, ...]
    bounded: int


def calibrate(
    design: np.ndarray,
    x: np.ndarray,
    targets: np.ndarray,
    *,
    exact: int | None = None,
    bounds: tuple[float, float] = CALIBRATION_BOUNDS,
    iterations: int = 50,
) -> Calibration:
    """Weights near ``design`` whose totals ``x.T @ w`` equal ``targets`` (bounded linear
    calibration: Deville and Särndal's truncated linear distance; items that would leave
    ``bounds * design`` are fixed at the bound and the rest solved again).

    When the bounds leave no exact solution and ``exact`` is given, the first ``exact``
    constraints are kept exact and the others come as close as the bounds allow (a weighted
    least-squares compromise), instead of all of them missing alike: a few items cannot always
    meet every estimated share, and what they can meet is still worth having.

    Args:
        design: Design weights (> 0), one per item.
        x: ``(items, constraints)`` auxiliary values.
        targets: The corpus totals of the constraints.
        exact: How many leading constraints must hold exactly when not all can (None: all
            are alike).
        bounds: Allowed ratio of calibrated to design weight.
        iterations: At most this many re-solves.

    Example:
        >>> c = calibrate(np.ones(4), np.array([[1, 1], [1, 2], [1, 3], [1, 4]]), np.array([4, 12]))
        >>> [round(float(v), 3) for v in c.weights], c.residual
        ([0.4, 0.8, 1.2, 1.6], (0.0, 0.0))
    """
    d = np.asarray(design, dtype=np.float64)
    t = np.asarray(targets, dtype=np.float64)
    scale = np.where(np.abs(t) > 0, np.abs(t), 1.0)
    xs = np.asarray(x, dtype=np.float64) / scale  # conditioned: every target is +-1 or 0
    ts = t / scale
    lo, hi = d * bounds[0], d * bounds[1]
    w = _linear(d, xs, ts, lo, hi, iterations)
    if np.abs(xs.T @ w - ts).max() > 1e-9:
        w = _compromise(d, xs, ts, lo, hi, w, exact, iterations)
    got = xs.T @ w
    residual = tuple(
        float(round(g - v, 9)) if v == 0 else float(round((g - v) / abs(v), 9))
        for g, v in zip(got, ts, strict=True)
    )
    at_bound = int(np.count_nonzero(np.isclose(w, lo) | np.isclose(w, hi)))
    return Calibration(weights=w, residual=residual, bounded=at_bound)


#: How much more an exact constraint counts than an estimated one in the compromise.
_STIFFNESS = 1e3


def _compromise(
    d: np.ndarray,
    xs: np.ndarray,
    ts: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    w: np.ndarray,
    exact: int | None,
    iterations: int,
) -> np.ndarray:
    """The bounds bind: the weights within them whose totals come closest (least squares, the
    first ``exact`` constraints much stiffer, held near the design by a small ridge), then the
    exact ones met by a last linear step; the exact constraints alone when that fails."""
    from scipy.optimize import lsq_linear

    m = xs.shape[1]
    k = m if exact is None else min(exact, m)
    stiff = np.where(np.arange(m) < k, _STIFFNESS, 1.0) if k < m else np.ones(m)
    ridge = 1e-3 / np.sqrt(d.shape[0])
    a = np.vstack([xs.T * stiff[:, None], ridge * np.diag(1.0 / d)])
    b = np.concatenate([ts * stiff, np.full(d.shape[0], ridge)])
    best = lsq_linear(a, b, bounds=(lo, hi)).x
    if k == m:
        return best if np.abs(xs.T @ best - ts).max() < np.abs(xs.T @ w - ts).max() else w
    # the exact constraints, met from the compromise by the smallest linear step
    polished = _linear(best, xs[:, :k], ts[:k], lo, hi, iterations)
    if np.abs(xs[:, :k].T @ polished - ts[:k]).max() <= 1e-9:
        return polished
    alone = _linear(d, xs[:, :k], ts[:k], lo, hi, iterations)
    if np.abs(xs[:, :k].T @ alone - ts[:k]).max() <= 1e-9:
        return alone
    return _compromise(d, xs[:, :k], ts[:k], lo, hi, alone, None, iterations)


def _linear(
    d: np.ndarray, xs: np.ndarray, ts: np.ndarray, lo: np.ndarray, hi: np.ndarray, iterations: int
) -> np.ndarray:
    """Truncated linear calibration from ``d`` within ``[lo, hi]`` (may miss the targets)."""
    w = d.copy()
    free = np.ones(d.shape[0], dtype=bool)
    for _ in range(iterations):
        if not free.any():
            break
        fixed_total = xs[~free].T @ w[~free]
        xf, df = xs[free], d[free]
        m = (xf * df[:, None]).T @ xf
        lam = np.linalg.lstsq(m, ts - fixed_total - xf.T @ df, rcond=None)[0]
        w[free] = df * (1.0 + xf @ lam)
        out = free & ((w < lo - 1e-12) | (w > hi + 1e-12))
        if not out.any():
            break
        w = np.clip(w, lo, hi)
        free &= ~out
    return np.clip(w, lo, hi)
