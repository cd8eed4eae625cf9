"""Pick a source's representatives from its candidate pool.

Default ``herding``: greedy MMD minimisation (kernel herding) with an RBF kernel over the joint
space (LSA content + scaled log prompt and response lengths). Each step takes the candidate that
most reduces the maximum mean discrepancy between the suite and the pool: it is drawn towards
dense regions (the mean-embedding term) and pushed away from what is already chosen (the repulsion
term), so the suite matches the distribution — lengths included — and still covers its modes.
``kmedoids`` (k-means medoids) and ``random`` (uniform sample) are there to compare against.

A near-duplicate guard keeps two prompts whose TF-IDF cosine similarity is at least
``near_duplicate`` out of the same suite while a distinct candidate is left. Every candidate is
then assigned to its nearest representative: that is the representative's cluster, and the
cluster's share of the pool is its weight.
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
    # Larger pools: the mean embedding against a uniform sample of landmarks (linear in n).
    land = np.arange(n) if n <= _MAX_EXACT else np.sort(rng.choice(n, _LANDMARKS, replace=False))
    mu = np.empty(n)
    for s in range(0, n, 512):  # 512 x landmarks floats at a time
        mu[s : s + 512] = np.exp(-gamma * sq_distances(x[s : s + 512], x[land])).mean(1)
    repulse = np.zeros(n)
    # sparse @ dense vector: linear in the non-zeros, where sparse @ sparse builds a product
    # matrix each step
    rows = tfidf.tocsr() if tfidf is not None else None
    taken = np.zeros(n, dtype=bool)
    near = np.zeros(n, dtype=bool)
    picked: list[int] = []
    for t in range(k):
        score = mu - repulse / (t + 1)
        score[taken] = -np.inf
        if tfidf is not None and not np.all(near | taken):
            score[near] = -np.inf
        i = int(np.argmax(score))
        picked.append(i)
        taken[i] = True
        repulse += np.exp(-gamma * sq_distances(x, x[i : i + 1])[:, 0])
        if rows is not None:
            lo, hi = rows.indptr[i], rows.indptr[i + 1]
            v = np.zeros(rows.shape[1])
            v[rows.indices[lo:hi]] = rows.data[lo:hi]
            sim = rows @ v
            near |= sim >= near_duplicate
    return picked


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
