"""Representativeness metrics: how well a selection stands for its source, and against random.

A benchmark replays each suite prompt once, so a suite is representative when it (1) covers the
source's modes and (2) matches its length distribution. Both are measured per source for the
suite and for a uniform random sample of the same size (the median over :data:`N_RANDOM` seeds):

* **length fidelity** — the Kolmogorov–Smirnov statistic between the selection's prompt
  lengths and the corpus's, and between its output lengths and the corpus's, the corpus side
  exact (every row, from the pass's length histograms); unweighted (what a benchmark replays)
  and weighted by item weight (what the suite stands for). The output length is the first reply
  after the prompt as a client asks for it (``max_tokens``: at least 1, capped by
  ``max_output_tokens``) on both sides — :attr:`SourceStats.first_reply_lengths` through
  :func:`~distprompt.records.max_tokens_histogram` — never ``n_response_tokens``, which counts
  the whole rest of the row (every later turn) and can be many times longer; the ``response``
  names of the figures (``ks_response``, the ``response`` curves) mean this output length;
* **coverage** — in the reference space (L2-normalized LSA content vector plus the z-scored log
  prompt length, the selection's joint space at ``length_weight=1``): the mean Euclidean distance
  from each candidate to its nearest selected item, and the *represented share*: the candidates
  are clustered by k-means with ``k`` = number of selected items, and the share of candidates
  whose cluster holds at least one selected item is reported.

:func:`measure_source` runs in the pipeline where the pool, features and selection are at hand
and returns a :class:`SourceEvidence`; :func:`pooled_metrics` pools the sources into overall
figures: KS against the whole corpus (item weights scaled by the source's share of rows for the
weighted variant), coverage averaged over all candidates. :mod:`distprompt.write.report` assembles
the report from them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from distprompt.records import max_tokens_for, max_tokens_histogram

if TYPE_CHECKING:
    from distprompt.records import Candidate, SourceStats

__all__ = [
    "N_RANDOM",
    "Metrics",
    "SelectionSample",
    "SourceEvidence",
    "ks_statistic",
    "mean_nearest_distance",
    "measure_source",
    "pooled_metrics",
    "reference_space",
    "represented_share",
]

#: Seeds of the uniform random baseline (the median over them is reported).
N_RANDOM = 5
_KMEANS_FIT_MAX = 4000  # k-means for the represented share is fitted on at most this many
_PROJECTION_MAX = 400  # candidates per source drawn in the cluster plot
_CHUNK = 4096  # rows of the reference space measured against a selection at a time


def ks_statistic(
    values: Sequence[float] | np.ndarray,
    reference: Mapping[int, int],
    *,
    weights: Sequence[float] | np.ndarray | None = None,
) -> float:
    """Two-sample KS statistic between a (weighted) sample and an exact histogram.

    ``sup_x |F_sample(x) - F_reference(x)|`` with both sides as step functions, evaluated on the
    union of their support (exact for discrete lengths).

    Args:
        values: The sample (e.g. the suite's prompt lengths).
        reference: ``{value: count}`` of the reference distribution (e.g. the corpus).
        weights: Weight of each sample value (normalized here); None for equal weights.

    Example:
        >>> ks_statistic([4], {1: 1, 2: 1, 3: 1, 4: 1})
        0.75
        >>> ks_statistic([1, 4], {1: 1, 4: 1}, weights=[0.75, 0.25])
        0.25
    """
    return _ks(values, _cdf(reference), weights)


def _cdf(reference: Mapping[int, int]) -> tuple[np.ndarray, np.ndarray] | None:
    """A histogram's values, ascending, and its CDF after each (0 first); None when empty.

    Made once per histogram: a source's four KS statistics of each of its six selections are
    against its two histograms.
    """
    items = [(float(k), float(c)) for k, c in reference.items() if c > 0]
    if not items:
        return None
    ref = np.array(items)
    ref = ref[np.argsort(ref[:, 0], kind="stable")]
    rv, rc = ref[:, 0].copy(), ref[:, 1].copy()
    return rv, np.concatenate([[0.0], np.cumsum(rc) / rc.sum()])


def _ks(
    values: Sequence[float] | np.ndarray,
    cdf: tuple[np.ndarray, np.ndarray] | None,
    weights: Sequence[float] | np.ndarray | None,
) -> float:
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0 or cdf is None:
        return float("nan")
    w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.sum() <= 0:
        return float("nan")
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order] / w.sum()
    rv, fr_after = cdf
    grid = np.union1d(v, rv)
    fs = np.concatenate([[0.0], np.cumsum(w)])[np.searchsorted(v, grid, side="right")]
    fr = fr_after[np.searchsorted(rv, grid, "right")]
    return round(float(np.max(np.abs(fs - fr))), 12)


def reference_space(content: np.ndarray, log_length: np.ndarray) -> np.ndarray:
    """The space coverage is measured in: content vectors plus the z-scored log length.

    It is the selection's joint space at ``length_weight=1``, fixed whatever the selection used,
    so figures stay comparable between configurations.

    Example:
        >>> import numpy as np
        >>> reference_space(np.eye(2), np.log(np.array([10.0, 1000.0]))).round(3).tolist()
        [[1.0, 0.0, -1.0], [0.0, 1.0, 1.0]]
    """
    ll = np.asarray(log_length, dtype=np.float64)
    sd = float(ll.std())
    z = (ll - ll.mean()) / sd if sd > 0 else np.zeros_like(ll)
    return np.hstack([np.asarray(content, dtype=np.float64), z[:, None]])


def mean_nearest_distance(x: np.ndarray, selected: Sequence[int] | np.ndarray) -> float:
    """Mean Euclidean distance from each row of ``x`` to its nearest selected row.

    Example:
        >>> import numpy as np
        >>> mean_nearest_distance(np.array([[0.0], [1.0], [2.0], [10.0]]), [0, 3])
        0.75
    """
    from distprompt.choose.cluster import nearest

    sel = np.asarray(selected, dtype=np.int64)
    if sel.size == 0 or x.shape[0] == 0:
        return float("nan")
    return _mean_distance(nearest(x, sel, chunk=_CHUNK)[1])


def _mean_distance(sq_nearest: np.ndarray) -> float:
    """The mean of the square roots of ``sq_nearest``, summed :data:`_CHUNK` at a time."""
    total = 0.0
    for s in range(0, sq_nearest.shape[0], _CHUNK):
        total += float(np.sqrt(sq_nearest[s : s + _CHUNK]).sum())
    return round(total / sq_nearest.shape[0], 12)


def represented_share(labels: np.ndarray, selected: Sequence[int] | np.ndarray) -> float:
    """Share of rows whose cluster (``labels``) holds at least one selected row.

    Example:
        >>> import numpy as np
        >>> represented_share(np.array([0, 0, 0, 1, 1, 2]), [0, 4])
        0.8333333333333334
    """
    labels = np.asarray(labels)
    if labels.size == 0:
        return float("nan")
    hit = np.isin(labels, labels[np.asarray(selected, dtype=np.int64)])
    return float(hit.mean())


def _kmeans_labels(x: np.ndarray, k: int, *, seed: int) -> np.ndarray:
    """k-means labels of every row (fitted on a uniform subsample when the pool is large)."""
    from sklearn.cluster import KMeans

    n = x.shape[0]
    if k >= n:
        return np.arange(n)
    rng = np.random.default_rng(seed)
    fit = x if n <= _KMEANS_FIT_MAX else x[np.sort(rng.choice(n, _KMEANS_FIT_MAX, replace=False))]
    km = KMeans(n_clusters=min(k, fit.shape[0]), n_init=1, random_state=seed).fit(fit)
    return np.asarray(km.predict(x), dtype=np.int64)


@dataclass(frozen=True, slots=True)
class Metrics:
    """Representativeness figures of one selection (suite or random) of one source or overall.

    Attributes:
        ks_prompt: KS statistic, prompt lengths, unweighted.
        ks_prompt_weighted: KS statistic, prompt lengths, weighted by item weights.
        ks_response: KS statistic, output lengths (first reply, ``max_tokens``), unweighted.
        ks_response_weighted: KS statistic, output lengths, weighted by item weights.
        mean_distance: Mean distance from each candidate to its nearest selected item.
        represented_share: Share of candidates in a k-means cluster that holds a selected item.
        ks_prompt_within: Overall only: the sources' ``ks_prompt``, averaged with weights = their
            share of rows. It isolates the selection from the allocation (which gives suite and
            random the same source mix), so the overall length verdict rests on it.
        ks_response_within: Overall only: the same for ``ks_response``.
        ks_prompt_weighted_within: Overall only: the same for ``ks_prompt_weighted``.
        ks_response_weighted_within: Overall only: the same for ``ks_response_weighted``.

    A suite is used with its item weights (corpus rows each stands for; a sampling design
    gives long replies more than their share of items and less weight each), a uniform random
    sample with equal weights: the length verdict compares the suite's weighted KS with the
    random samples' plain one.
    """

    ks_prompt: float | None = None
    ks_prompt_weighted: float | None = None
    ks_response: float | None = None
    ks_response_weighted: float | None = None
    mean_distance: float | None = None
    represented_share: float | None = None
    ks_prompt_within: float | None = None
    ks_response_within: float | None = None
    ks_prompt_weighted_within: float | None = None
    ks_response_weighted_within: float | None = None

    def to_dict(self) -> dict[str, float | None]:
        return {f.name: rounded(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Metrics:
        d = d or {}
        return cls(**{f.name: d.get(f.name) for f in fields(cls)})

    @classmethod
    def median(cls, runs: Sequence[Metrics]) -> Metrics:
        """Field-wise median of several runs."""
        out: dict[str, float | None] = {}
        for f in fields(cls):
            vals = [getattr(r, f.name) for r in runs if getattr(r, f.name) is not None]
            vals = [v for v in vals if not np.isnan(v)]
            out[f.name] = float(np.median(vals)) if vals else None
        return cls(**out)


def rounded(v: float | None, nd: int = 6) -> float | None:
    """``v`` rounded to ``nd`` digits for JSON; None for None and NaN.

    Example:
        >>> rounded(0.1234567), rounded(float("nan"))
        (0.123457, None)
    """
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return None
    return round(float(v), nd)


@dataclass(frozen=True, slots=True, eq=False)
class SelectionSample:
    """One selection's lengths and weights (kept to pool sources into overall figures)."""

    prompt: np.ndarray
    response: np.ndarray
    weights: np.ndarray  # sum to 1 within the source
    distance_sum: float
    represented: float  # candidates represented


@dataclass(frozen=True, slots=True, eq=False)
class SourceEvidence:
    """What :func:`measure_source` measured on one source (held in memory until the report).

    Attributes:
        source: Source name.
        candidates: Pool size (unique prompts the selection chose from).
        selected: Items selected.
        suite: The suite's figures.
        random: Median figures of the random baseline.
        trivial: Every candidate was selected, so coverage is perfect for any method.
        projection: Up to a few hundred candidates in 2-D (PCA of the reference space), with
            their suite cluster and whether they were selected.
    """

    source: str
    candidates: int
    selected: int
    suite: Metrics
    random: Metrics
    trivial: bool
    projection: dict[str, list[Any]] = field(default_factory=dict)
    suite_sample: SelectionSample | None = None
    random_samples: tuple[SelectionSample, ...] = ()
    random_runs: tuple[Metrics, ...] = ()


def _measure(
    idx: np.ndarray,
    weights: np.ndarray,
    *,
    prompt: np.ndarray,
    response: np.ndarray,
    dist: float | None,
    km_labels: np.ndarray | None,
    corpus_prompt: tuple[np.ndarray, np.ndarray] | None,
    corpus_response: tuple[np.ndarray, np.ndarray] | None,
) -> tuple[Metrics, SelectionSample]:
    n = prompt.shape[0]
    if dist is None or km_labels is None:  # every candidate selected
        dist, rep = 0.0, 1.0
    else:
        rep = represented_share(km_labels, idx)
    p, r = prompt[idx], response[idx]
    m = Metrics(
        ks_prompt=_ks(p, corpus_prompt, None),
        ks_prompt_weighted=_ks(p, corpus_prompt, weights),
        ks_response=_ks(r, corpus_response, None),
        ks_response_weighted=_ks(r, corpus_response, weights),
        mean_distance=dist,
        represented_share=rep,
    )
    return m, SelectionSample(p, r, weights, dist * n, rep * n)


def measure_source(
    candidates: Sequence[Candidate],
    selected: Sequence[int],
    weights: Sequence[float],
    *,
    stats: SourceStats,
    content: np.ndarray | None = None,
    log_length: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    seed: int = 0,
    n_random: int = N_RANDOM,
    max_output_tokens: int | None = None,
) -> SourceEvidence:
    """Measure a source's selection against its corpus and against uniform random samples.

    Args:
        candidates: The source's candidate pool.
        selected: Indices of the selected candidates.
        weights: Item weight of each selected candidate, as shares (sums to 1).
        stats: The source's exact corpus statistics (length histograms; the output lengths
            are compared with its ``first_reply_lengths``).
        content: LSA content vectors of the candidates (None when every candidate is selected).
        log_length: Log prompt length of each candidate.
        labels: Suite cluster of every candidate (for the cluster plot).
        seed: Seeds k-means and the random baseline.
        n_random: Random samples in the baseline.
        max_output_tokens: The cap on ``max_tokens`` (applied to both sides of the output-length
            comparison).

    Example:
        >>> ev = measure_source(cands, sel.indices, sel.weights, stats=st,
        ...                     content=f.content, log_length=f.log_length)  # doctest: +SKIP
        >>> ev.suite.mean_distance < ev.random.mean_distance  # doctest: +SKIP
        True
    """
    n = len(candidates)
    idx = np.asarray(selected, dtype=np.int64)
    k = idx.shape[0]
    prompt = np.array([c.n_prompt_tokens for c in candidates], dtype=np.int64)
    # what each candidate's item would ask for, compared with what every corpus row would
    response = np.array(
        [max_tokens_for(c.first_response_length, max_output_tokens) for c in candidates],
        dtype=np.int64,
    )
    trivial = k >= n or content is None or log_length is None
    x = km = x_sq = None
    if not trivial:
        assert content is not None and log_length is not None
        x = reference_space(content, log_length)
        x_sq = (x * x).sum(1)  # once for the six selections measured
        km = _kmeans_labels(x, k, seed=seed)
    space = _Space(
        x=x,
        x_sq=x_sq,
        km=km,
        prompt=prompt,
        response=response,
        corpus_prompt=_cdf(stats.prompt_lengths),
        corpus_response=_cdf(max_tokens_histogram(stats.first_reply_lengths, max_output_tokens)),
    )
    suite, suite_sample = space.run(idx, np.asarray(weights, dtype=np.float64), space.near(idx)[1])
    runs, samples = _random_runs(space, n, k, seed, n_random)
    projection: dict[str, list[Any]] = {}
    if x is not None:
        projection = _projection(x, idx, labels)
    return SourceEvidence(
        source=candidates[0].source if candidates else "",
        candidates=n,
        selected=k,
        suite=suite,
        random=Metrics.median(runs),
        trivial=trivial,
        projection=projection,
        suite_sample=suite_sample,
        random_samples=tuple(samples),
        random_runs=tuple(runs),
    )


@dataclass(frozen=True, slots=True)
class _Space:
    """What every selection of one source is measured in: the reference space (None when every
    candidate is selected), its k-means labels, the candidates' lengths and the corpus CDFs."""

    x: np.ndarray | None
    x_sq: np.ndarray | None
    km: np.ndarray | None
    prompt: np.ndarray
    response: np.ndarray
    corpus_prompt: tuple[np.ndarray, np.ndarray] | None
    corpus_response: tuple[np.ndarray, np.ndarray] | None

    def near(self, ix: np.ndarray) -> tuple[np.ndarray | None, float | None]:
        """Nearest item of each candidate, and the mean distance to it (mean_nearest_distance)."""
        from distprompt.choose.cluster import nearest

        if self.x is None:
            return None, None
        if ix.size == 0:
            return None, float("nan")
        labels, sq_nearest = nearest(self.x, ix, chunk=_CHUNK, x_sq=self.x_sq)
        return labels, _mean_distance(sq_nearest)

    def run(
        self, ix: np.ndarray, w: np.ndarray, dist: float | None
    ) -> tuple[Metrics, SelectionSample]:
        """The metrics of the selection ``ix`` with item weights ``w``."""
        return _measure(
            ix,
            w,
            prompt=self.prompt,
            response=self.response,
            dist=dist,
            km_labels=self.km,
            corpus_prompt=self.corpus_prompt,
            corpus_response=self.corpus_response,
        )


def _random_runs(
    space: _Space, n: int, k: int, seed: int, n_random: int
) -> tuple[list[Metrics], list[SelectionSample]]:
    """The baseline: ``n_random`` uniform samples of ``k`` of the ``n`` candidates, each item
    weighted by the candidates nearest to it."""
    runs: list[Metrics] = []
    samples: list[SelectionSample] = []
    for i in range(n_random):
        rng = np.random.default_rng([seed, i])
        ridx = np.sort(rng.choice(n, size=k, replace=False)) if k < n else np.arange(n)
        # One pass gives the sample's clusters (so its weights) and its mean distance.
        labels_r, dist = space.near(ridx)
        if labels_r is not None:
            labels_r[ridx] = np.arange(k)  # each item stands for itself, as in cluster.assign
            rw = np.bincount(labels_r, minlength=k) / n
        else:
            rw = np.full(k, 1.0 / k)
        m, s = space.run(ridx, rw, dist)
        runs.append(m)
        samples.append(s)
    return runs, samples


def _projection(x: np.ndarray, idx: np.ndarray, labels: np.ndarray | None) -> dict[str, list[Any]]:
    from distprompt.choose.cluster import assign

    n = x.shape[0]
    if labels is None:
        labels = assign(x, idx.tolist())
    # Candidates come in hash order, a uniform sample: the first ones are a fair picture.
    show = np.union1d(np.arange(min(n, _PROJECTION_MAX)), idx)
    xc = x - x.mean(axis=0)
    _, _, vt = np.linalg.svd(xc[show], full_matrices=False)
    xy = xc[show] @ vt[:2].T if vt.shape[0] >= 2 else np.hstack([xc[show] @ vt[:1].T] * 2)
    chosen = set(idx.tolist())
    return {
        "x": [round(float(v), 4) for v in xy[:, 0]],
        "y": [round(float(v), 4) for v in xy[:, 1]],
        "cluster": [int(labels[i]) for i in show],
        "selected": [int(i) in chosen for i in show],
    }


def _within(
    per_source: Sequence[tuple[str, Metrics]], row_share: Mapping[str, float], key: str
) -> float | None:
    vals = [(row_share[s], getattr(m, key)) for s, m in per_source]
    vals = [(w, v) for w, v in vals if v is not None]
    tot = sum(w for w, _ in vals)
    return sum(w * v for w, v in vals) / tot if tot > 0 else None


def pooled_metrics(
    samples: Sequence[tuple[str, SelectionSample | None, int]],
    row_share: Mapping[str, float],
    corpus_prompt: Mapping[int, int],
    corpus_response: Mapping[int, int],
    per_source: Sequence[tuple[str, Metrics]] = (),
) -> Metrics:
    """Overall figures of one selection per source, pooled.

    Args:
        samples: ``(source, sample, candidates)`` per source; None samples are left out.
        row_share: Each source's share of the corpus rows.
        corpus_prompt: Prompt-length histogram of the whole corpus.
        corpus_response: Output-length (``max_tokens``) histogram of the whole corpus.
        per_source: ``(source, figures)`` per source, for the within-source KS.

    Returns:
        KS against the whole corpus (weights scaled by the source's share of rows), coverage
        averaged over all candidates, and the sources' KS averaged by share of rows.
    """
    parts = [(src, s, n) for src, s, n in samples if s is not None]
    if not parts:
        return Metrics()
    p = np.concatenate([s.prompt for _, s, _ in parts])
    r = np.concatenate([s.response for _, s, _ in parts])
    w = np.concatenate([s.weights * row_share[src] for src, s, _ in parts])
    cands = sum(n for _, _, n in parts)
    return Metrics(
        ks_prompt=ks_statistic(p, corpus_prompt),
        ks_prompt_weighted=ks_statistic(p, corpus_prompt, weights=w),
        ks_response=ks_statistic(r, corpus_response),
        ks_response_weighted=ks_statistic(r, corpus_response, weights=w),
        mean_distance=sum(s.distance_sum for _, s, _ in parts) / cands if cands else None,
        represented_share=sum(s.represented for _, s, _ in parts) / cands if cands else None,
        ks_prompt_within=_within(per_source, row_share, "ks_prompt"),
        ks_response_within=_within(per_source, row_share, "ks_response"),
        ks_prompt_weighted_within=_within(per_source, row_share, "ks_prompt_weighted"),
        ks_response_weighted_within=_within(per_source, row_share, "ks_response_weighted"),
    )
