"""Pick a source's representatives from its candidate pool.

Default ``herding``: greedy MMD minimisation (kernel herding) with an RBF kernel over the joint
space (LSA content + scaled log prompt and response lengths). Each step takes the candidate that
most reduces the maximum mean discrepancy between the suite and the pool: it is drawn towards
dense regions (the mean-embedding term) and pushed away from what is already chosen (the repulsion
term), so the suite matches the distribution — lengths included — and still covers its modes.
``kmedoids`` (k-means medoids) and ``random`` (uniform sample) are there to compare against.

A near-duplicate guard keeps two prompts whose TF-IDF cosine similarity is at least
``near_duplicate`` out of the same suite while a distinct candidate is left. Every candidate is
then assigned to its nearest representative: that is the representative's cluster. Selection
runs within each first-reply length stratum of a source's sampling design, which also sets the
items' weights (:mod:`distprompt.choose.design`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from distprompt.choose.cluster import assign, kmeans_medoids, sq_distances
from distprompt.choose.vectorize import Features
from distprompt.config import METHODS
from distprompt.errors import ConfigError

__all__ = ["Selection", "herding", "select"]

logger = logging.getLogger("distprompt.choose.select")

_MAX_EXACT = 4000  # pool size up to which the mean embedding is computed exactly
_LANDMARKS = 2000  # landmarks of the mean embedding beyond that


@dataclass(frozen=True, slots=True, eq=False)
class Selection:
    """Chosen representatives of one source.

    Attributes:
        indices: Candidate indices, in selection order (cluster ``i`` is ``indices[i]``).
        labels: For every candidate, the cluster (index into ``indices``) it belongs to.
        sizes: Candidates per cluster.
    """

    indices: tuple[int, ...]
    labels: np.ndarray
    sizes: tuple[int, ...]

    @property
    def weights(self) -> tuple[float, ...]:
        n = float(sum(self.sizes))
        return tuple(s / n for s in self.sizes) if n else ()


def _gamma(x: np.ndarray, rng: np.random.Generator) -> float:
    """RBF precision from the median heuristic on a subsample."""
    n = x.shape[0]
    idx = rng.choice(n, size=min(n, 1000), replace=False) if n > 1000 else np.arange(n)
    d = sq_distances(x[idx], x[idx])
    med = float(np.median(d[np.triu_indices(idx.size, k=1)])) if idx.size > 1 else 1.0
    return 1.0 / med if med > 0 else 1.0


def herding(
    x: np.ndarray,
    k: int,
    *,
    seed: int = 0,
    tfidf: Any | None = None,
    near_duplicate: float = 0.95,
) -> list[int]:
    """Greedy kernel herding: ``k`` rows of ``x`` whose empirical distribution is closest in MMD.

    Args:
        x: Joint features, one row per candidate.
        k: How many to pick.
        seed: Seeds the landmark subsample and the bandwidth estimate (ties go to the lower index).
        tfidf: Sparse L2-normalized rows for the near-duplicate guard (None disables it).
        near_duplicate: Cosine similarity at or above which two prompts count as near-duplicates.

    Example:
        >>> import numpy as np
        >>> x = np.array([[0.0], [0.1], [5.0], [5.1]])
        >>> sorted(int(i) // 2 for i in herding(x, 2))  # one from each group
        [0, 1]
    """
    n = x.shape[0]
    if k >= n:
        return list(range(n))
    rng = np.random.default_rng(seed)
    gamma = _gamma(x, rng)
    # Squared norms once: every distance below is ``sq[i] + sq[j] - 2 x_i.x_j``, the same
    # operations (so the same bits) as cluster.sq_distances computing them again each time.
    sq = (x * x).sum(1)
    # Larger pools: the mean embedding against a uniform sample of landmarks (linear in n).
    land = np.arange(n) if n <= _MAX_EXACT else np.sort(rng.choice(n, _LANDMARKS, replace=False))
    y, yy = x[land], sq[land]
    mu = np.empty(n)
    for s in range(0, n, 512):  # 512 x landmarks floats at a time, worked on in place
        g = x[s : s + 512] @ y.T
        d = sq[s : s + 512, None] + yy[None, :]
        g *= 2.0
        d -= g
        del g
        np.maximum(d, 0.0, out=d)
        d *= -gamma
        np.exp(d, out=d)
        mu[s : s + 512] = d.mean(1)
        del d
    repulse = np.zeros(n)
    guard = _Guard(tfidf, near_duplicate, n) if tfidf is not None else None
    taken = np.zeros(n, dtype=bool)
    picked: list[int] = []
    for t in range(k):
        score = mu - repulse / (t + 1)
        score[taken] = -np.inf
        i = guard.pick(score, taken) if guard is not None else int(np.argmax(score))
        picked.append(i)
        taken[i] = True
        d1 = sq + sq[i] - 2.0 * (x @ x[i : i + 1].T)[:, 0]
        np.maximum(d1, 0.0, out=d1)
        d1 *= -gamma
        repulse += np.exp(d1, out=d1)
        if guard is not None:
            guard.picked(i)
    return picked


#: Candidates the near-duplicate guard compares in one step, one at a time, before it compares
#: the whole pool at once.
GUARD_SCAN = 64


class _Guard:
    """The near-duplicate guard of :func:`herding`, evaluated where it can change a pick.

    A candidate is near (a duplicate of) the suite when its cosine similarity with a picked
    prompt is at least the threshold; while a candidate that is not near is left, the best of
    those is picked. Rather than the similarity of every candidate with every pick (a sparse
    product over the whole pool at each step), the best-scored candidate is compared with the
    picks it has not been compared with yet, then the next one while it is near: the pick is the
    same, as long as the same similarities come out. They do, bit for bit: the dot product of
    two rows with sorted indices sums the products of their shared features in index order,
    which is what the sparse product over the whole pool adds (its other terms are ``+0.0``).
    When a step has to look at many candidates (a pool of near-duplicates), the guard turns to
    the product over the whole pool, which is then cheaper than one comparison at a time.
    """

    def __init__(self, tfidf: Any, threshold: float, n: int) -> None:
        rows = tfidf.tocsr()
        if not rows.has_sorted_indices:
            rows = rows.sorted_indices()
        self.rows = rows
        self.threshold = threshold
        self.near = np.zeros(n, dtype=bool)  # known to be near the suite (it only grows)
        self.compared = np.zeros(n, dtype=np.int64)  # picks each candidate was compared with
        self.picks: list[int] = []
        self.eager = False  # near holds every candidate's comparison with every pick
        self.dense = np.zeros(rows.shape[1])

    def _row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = self.rows.indptr[i], self.rows.indptr[i + 1]
        return self.rows.indices[lo:hi], self.rows.data[lo:hi]

    def _near_picks(self, j: int) -> bool:
        """Whether candidate ``j`` is near a pick it was not compared with yet."""
        new = self.picks[self.compared[j] :]
        self.compared[j] = len(self.picks)
        return bool(new) and bool((self.similarities(j, new) >= self.threshold).any())

    def similarities(self, j: int, picks: list[int]) -> np.ndarray:
        """Cosine similarity of candidate ``j`` with each of ``picks``: the same bits as
        ``rows @ v`` with ``v`` the dense row of the pick."""
        cols, vals = self._row(j)
        self.dense[cols] = vals
        parts = [self._row(p) for p in picks]
        idx = np.concatenate([c for c, _ in parts])
        prod = np.concatenate([v for _, v in parts]) * self.dense[idx]
        self.dense[cols] = 0.0
        seg = np.repeat(np.arange(len(picks)), [c.shape[0] for c, _ in parts])
        # bincount adds each pick's products one after another from 0.0, in index order: the
        # sums sparse @ dense makes
        return np.bincount(seg, weights=prod, minlength=len(picks))

    def _product(self, p: int) -> None:
        cols, vals = self._row(p)
        self.dense[cols] = vals
        self.near |= (self.rows @ self.dense) >= self.threshold
        self.dense[cols] = 0.0

    def pick(self, score: np.ndarray, taken: np.ndarray) -> int:
        """The best-scored candidate not near the suite (any best one when all are)."""
        masked = score.copy()
        masked[self.near] = -np.inf
        for _ in range(GUARD_SCAN if not self.eager else 0):
            if np.all(self.near | taken):
                return int(np.argmax(score))
            j = int(np.argmax(masked))
            if not self._near_picks(j):
                return j
            self.near[j] = True
            masked[j] = -np.inf
        if not self.eager:  # many near-duplicates: every candidate against every pick at once
            self.eager = True
            for p in self.picks:
                self._product(p)
            masked[self.near] = -np.inf
        if np.all(self.near | taken):
            return int(np.argmax(score))
        return int(np.argmax(masked))

    def picked(self, i: int) -> None:
        self.picks.append(i)
        if self.eager:
            self._product(i)


def select(
    features: Features,
    k: int,
    *,
    method: str = "herding",
    seed: int = 0,
    near_duplicate: float = 0.95,
) -> Selection:
    """Choose ``k`` representatives and cluster every candidate around them.

    Raises:
        ConfigError: Unknown ``method``.
    """
    x = features.joint
    n = x.shape[0]
    k = min(k, n)
    if k <= 0:
        return Selection(indices=(), labels=np.full(n, -1, dtype=np.int64), sizes=())
    if method == "herding":
        idx = herding(x, k, seed=seed, tfidf=features.tfidf, near_duplicate=near_duplicate)
    elif method == "kmedoids":
        idx = kmeans_medoids(x, k, seed=seed)
    elif method == "random":
        idx = sorted(np.random.default_rng(seed).choice(n, size=k, replace=False).tolist())
    else:
        raise ConfigError(f"expected method in {', '.join(METHODS)}, found {method!r}")
    labels = assign(x, idx)
    sizes = np.bincount(labels, minlength=len(idx))
    return Selection(
        indices=tuple(int(i) for i in idx), labels=labels, sizes=tuple(int(s) for s in sizes)
    )
