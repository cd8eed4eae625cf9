"""Clusters in the joint feature space: k-means medoids, and assignment to representatives."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["assign", "kmeans_medoids", "nearest", "sq_distances"]


def sq_distances(x: np.ndarray, y: np.ndarray, *, x_sq: np.ndarray | None = None) -> np.ndarray:
    """Squared Euclidean distances between the rows of ``x`` and ``y``.

    ``x_sq``: the rows' squared norms ``(x * x).sum(1)`` when already at hand (a row's norm
    does not depend on the rows around it: the same bits as computing it here).
    """
    xs = (x * x).sum(1) if x_sq is None else x_sq
    d = xs[:, None] + (y * y).sum(1)[None, :] - 2.0 * (x @ y.T)
    return np.maximum(d, 0.0)


def nearest(
    x: np.ndarray,
    centers: Sequence[int] | np.ndarray,
    *,
    chunk: int = 4096,
    x_sq: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """For every row of ``x``, the index (into ``centers``) of the nearest selected row, ties to
    the earlier center, and the squared distance to it.

    Example:
        >>> import numpy as np
        >>> labels, d = nearest(np.array([[0.0], [1.0], [3.0]]), [2, 0])
        >>> labels.tolist(), d.tolist()
        ([1, 1, 0], [0.0, 1.0, 0.0])
    """
    c = x[np.asarray(centers, dtype=np.int64)]
    labels = np.empty(x.shape[0], dtype=np.int64)
    dmin = np.empty(x.shape[0])
    for s in range(0, x.shape[0], chunk):
        d = sq_distances(x[s : s + chunk], c, x_sq=None if x_sq is None else x_sq[s : s + chunk])
        best = np.argmin(d, axis=1)
        labels[s : s + chunk] = best
        dmin[s : s + chunk] = np.take_along_axis(d, best[:, None], axis=1)[:, 0]  # no 2nd scan
    return labels, dmin


def assign(
    x: np.ndarray,
    centers: Sequence[int] | np.ndarray,
    *,
    chunk: int = 4096,
    x_sq: np.ndarray | None = None,
) -> np.ndarray:
    """Index (into ``centers``) of the nearest selected row for every row of ``x``.

    Ties go to the earlier center, so the result is deterministic.
    """
    out = nearest(x, centers, chunk=chunk, x_sq=x_sq)[0]
    # A representative stands for itself even when another one coincides with it.
    out[np.asarray(centers, dtype=np.int64)] = np.arange(len(centers))
    return out


def kmeans_medoids(x: np.ndarray, k: int, *, seed: int = 0) -> list[int]:
    """k-means in ``x``, then the member nearest each centroid (its medoid), largest cluster first.

    Kept as a comparison method: medoids are "typical" prompts, so they cover modes but skew the
    length distribution (see docs/concepts.md).
    """
    from sklearn.cluster import KMeans

    n = x.shape[0]
    if k >= n:
        return list(range(n))
    km = KMeans(n_clusters=k, n_init=3, random_state=seed).fit(x)
    labels = km.labels_
    chosen: list[tuple[int, int]] = []
    for c in range(k):
        members = np.flatnonzero(labels == c)
        if members.size == 0:
            continue
        d = sq_distances(x[members], km.cluster_centers_[c : c + 1])[:, 0]
        chosen.append((-members.size, int(members[np.argmin(d)])))
    chosen.sort()
    picked = [i for _, i in chosen]
    if len(picked) < k:  # empty clusters: fill with the farthest remaining points
        rest = [i for i in range(n) if i not in set(picked)]
        d = sq_distances(x[rest], x[picked]).min(1)
        picked += [rest[i] for i in np.argsort(-d, kind="stable")[: k - len(picked)]]
    return picked
