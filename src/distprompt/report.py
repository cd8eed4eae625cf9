"""Representativeness report: does the suite stand for the corpus, and does it beat random?

A benchmark replays each suite prompt once, so a suite is representative when it (1) covers the
source's modes and (2) matches its length distribution. Both are measured per source and
overall, for the suite and for a uniform random sample of the same size per source (the median
over :data:`N_RANDOM` seeds), so any advantage — or the lack of one — is plain:

* **shares** — the source's share of corpus rows, of the quota targets, and of the suite;
* **length fidelity** — the Kolmogorov–Smirnov statistic between the suite's prompt (and
  response) lengths and the corpus's, the corpus side exact (every row, from the pass's length
  histograms); unweighted (what a benchmark replays) and weighted by item weight (what the suite
  stands for);
* **coverage** — in the reference space (L2-normalized LSA content vector plus the z-scored log
  prompt length, the selection's joint space at ``length_weight=1``): the mean Euclidean distance
  from each candidate to its nearest selected item, and the *represented share*: the candidates
  are clustered by k-means with ``k`` = number of selected items, and the share of candidates
  whose cluster holds at least one selected item is reported.

Overall figures pool the sources: KS against the whole corpus (item weights scaled by the
source's share of rows for the weighted variant), coverage averaged over all candidates.

:func:`measure_source` runs in the pipeline where the pool, features and selection are at hand;
:func:`build_report` assembles a :class:`Report`, which writes ``report.json``, ``report.md``,
PNG plots and one self-contained ``report.html`` (:meth:`Report.write`);
:func:`render_report` re-renders them from ``report.json``.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from distprompt._io import atomic_write_bytes
from distprompt.errors import InputError

if TYPE_CHECKING:
    from distprompt.records import Candidate, SuiteItem
    from distprompt.sample import SourceStats
    from distprompt.stratify import Quota

__all__ = [
    "N_RANDOM",
    "PLOT_NAMES",
    "REPORT_HTML",
    "REPORT_JSON",
    "REPORT_MD",
    "Metrics",
    "Report",
    "SourceEvidence",
    "build_report",
    "ks_statistic",
    "mean_nearest_distance",
    "measure_source",
    "reference_space",
    "render_report",
    "represented_share",
]

logger = logging.getLogger("distprompt.report")

#: Seeds of the uniform random baseline (the median over them is reported).
N_RANDOM = 5
REPORT_JSON = "report.json"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
PLOT_NAMES = (
    "report_shares.png",
    "report_prompt_length.png",
    "report_response_length.png",
    "report_coverage.png",
    "report_clusters.png",
)
_KMEANS_FIT_MAX = 4000  # k-means for the represented share is fitted on at most this many
_PROJECTION_MAX = 400  # candidates per source drawn in the cluster plot
_EXCERPT_HEAD = 900
_EXCERPT_TAIL = 600
_FORMAT_VERSION = 1


# ---------------------------------------------------------------------------------------------
# metrics
# ---------------------------------------------------------------------------------------------


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
    v = np.asarray(values, dtype=np.float64)
    ref = sorted((float(k), float(c)) for k, c in reference.items() if c > 0)
    if v.size == 0 or not ref:
        return float("nan")
    w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.sum() <= 0:
        return float("nan")
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order] / w.sum()
    rv = np.array([k for k, _ in ref])
    rc = np.array([c for _, c in ref])
    grid = np.union1d(v, rv)
    fs = np.concatenate([[0.0], np.cumsum(w)])[np.searchsorted(v, grid, side="right")]
    fr = np.concatenate([[0.0], np.cumsum(rc) / rc.sum()])[np.searchsorted(rv, grid, "right")]
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
        1.0
    """
    from distprompt.cluster import sq_distances

    sel = np.asarray(selected, dtype=np.int64)
    if sel.size == 0 or x.shape[0] == 0:
        return float("nan")
    c = x[sel]
    total = 0.0
    for s in range(0, x.shape[0], 4096):
        total += float(np.sqrt(sq_distances(x[s : s + 4096], c).min(axis=1)).sum())
    return round(total / x.shape[0], 12)


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
        ks_response: KS statistic, response lengths, unweighted.
        ks_response_weighted: KS statistic, response lengths, weighted by item weights.
        mean_distance: Mean distance from each candidate to its nearest selected item.
        represented_share: Share of candidates in a k-means cluster that holds a selected item.
        ks_prompt_within: Overall only: the sources' ``ks_prompt``, averaged with weights = their
            share of rows. It isolates the selection from the allocation (which gives suite and
            random the same source mix), so the overall length verdict rests on it.
        ks_response_within: Overall only: the same for ``ks_response``.
    """

    ks_prompt: float | None = None
    ks_prompt_weighted: float | None = None
    ks_response: float | None = None
    ks_response_weighted: float | None = None
    mean_distance: float | None = None
    represented_share: float | None = None
    ks_prompt_within: float | None = None
    ks_response_within: float | None = None

    def to_dict(self) -> dict[str, float | None]:
        return {f.name: _r(getattr(self, f.name)) for f in fields(self)}

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


def _r(v: float | None, nd: int = 6) -> float | None:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return None
    return round(float(v), nd)


@dataclass(frozen=True, slots=True, eq=False)
class _Sample:
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
    suite_sample: _Sample | None = None
    random_samples: tuple[_Sample, ...] = ()
    random_runs: tuple[Metrics, ...] = ()


def _measure(
    idx: np.ndarray,
    weights: np.ndarray,
    *,
    prompt: np.ndarray,
    response: np.ndarray,
    x: np.ndarray | None,
    km_labels: np.ndarray | None,
    corpus_prompt: Mapping[int, int],
    corpus_response: Mapping[int, int],
) -> tuple[Metrics, _Sample]:
    n = prompt.shape[0]
    if x is None or km_labels is None:  # every candidate selected
        dist, rep = 0.0, 1.0
    else:
        dist = mean_nearest_distance(x, idx)
        rep = represented_share(km_labels, idx)
    p, r = prompt[idx], response[idx]
    m = Metrics(
        ks_prompt=ks_statistic(p, corpus_prompt),
        ks_prompt_weighted=ks_statistic(p, corpus_prompt, weights=weights),
        ks_response=ks_statistic(r, corpus_response),
        ks_response_weighted=ks_statistic(r, corpus_response, weights=weights),
        mean_distance=dist,
        represented_share=rep,
    )
    return m, _Sample(p, r, weights, dist * n, rep * n)


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
) -> SourceEvidence:
    """Measure a source's selection against its corpus and against uniform random samples.

    Args:
        candidates: The source's candidate pool.
        selected: Indices of the selected candidates.
        weights: Item weight of each selected candidate (sums to 1).
        stats: The source's exact corpus statistics (length histograms).
        content: LSA content vectors of the candidates (None when every candidate is selected).
        log_length: Log prompt length of each candidate.
        labels: Suite cluster of every candidate (for the cluster plot).
        seed: Seeds k-means and the random baseline.
        n_random: Random samples in the baseline.

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
    response = np.array([c.n_response_tokens for c in candidates], dtype=np.int64)
    trivial = k >= n or content is None or log_length is None
    x = km = None
    if not trivial:
        assert content is not None and log_length is not None
        x = reference_space(content, log_length)
        km = _kmeans_labels(x, k, seed=seed)

    def run(ix: np.ndarray, w: np.ndarray) -> tuple[Metrics, _Sample]:
        return _measure(
            ix,
            w,
            prompt=prompt,
            response=response,
            x=x,
            km_labels=km,
            corpus_prompt=stats.prompt_lengths,
            corpus_response=stats.response_lengths,
        )

    suite, suite_sample = run(idx, np.asarray(weights, dtype=np.float64))
    runs: list[Metrics] = []
    samples: list[_Sample] = []
    for i in range(n_random):
        rng = np.random.default_rng([seed, i])
        ridx = np.sort(rng.choice(n, size=k, replace=False)) if k < n else np.arange(n)
        if x is not None:
            from distprompt.cluster import assign

            rw = np.bincount(assign(x, ridx.tolist()), minlength=k) / n
        else:
            rw = np.full(k, 1.0 / k)
        m, s = run(ridx, rw)
        runs.append(m)
        samples.append(s)
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


def _projection(x: np.ndarray, idx: np.ndarray, labels: np.ndarray | None) -> dict[str, list[Any]]:
    from distprompt.cluster import assign

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


# ---------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Report:
    """The representativeness report of a suite (what ``report.json`` holds).

    Attributes:
        summary: One line: does the suite beat random on coverage and on length fidelity?
        verdict: ``coverage`` (``better`` | ``not better`` | ``n/a``) and ``length``
            (``better`` | ``no worse`` | ``worse`` | ``n/a``), overall.
        overall: Figures over all sources (``suite``, ``random`` :class:`Metrics` as dicts).
        sources: Figures per source: rows, candidates, selected, ``share`` (corpus, target,
            achieved), ``suite`` and ``random`` metrics, and per-source verdicts.
        examples: Per source, one entry per cluster: the representative item and its prompt.
        curves: Per source and ``overall``: length quantiles of the corpus, suite and random.
        projection: Per source: candidates in 2-D with cluster labels (the cluster plot).
        meta: Method, seed, number of random seeds, definitions.

    Example:
        >>> suite = build_suite("data_samples/prepared", tokenizer=tok)  # doctest: +SKIP
        >>> print(suite.report.summary)  # doctest: +SKIP
        Suite beats uniform random on coverage and on length fidelity ...
    """

    summary: str
    verdict: dict[str, str]
    overall: dict[str, Any]
    sources: dict[str, dict[str, Any]]
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    curves: dict[str, dict[str, Any]] = field(default_factory=dict)
    projection: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"Report({self.summary!r})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": _FORMAT_VERSION,
            "summary": self.summary,
            "verdict": self.verdict,
            "overall": self.overall,
            "sources": self.sources,
            "meta": self.meta,
            "examples": self.examples,
            "curves": self.curves,
            "projection": self.projection,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Report:
        return cls(
            summary=str(d["summary"]),
            verdict=dict(d.get("verdict", {})),
            overall=dict(d.get("overall", {})),
            sources=dict(d.get("sources", {})),
            examples=dict(d.get("examples", {})),
            curves=dict(d.get("curves", {})),
            projection=dict(d.get("projection", {})),
            meta=dict(d.get("meta", {})),
        )

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict(), option=orjson.OPT_INDENT_2) + b"\n"

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Report:
        """Read ``report.json`` (a file, or the suite folder holding it).

        Raises:
            InputError: No readable report there.
        """
        p = Path(path)
        if p.is_dir():
            p = p / REPORT_JSON
        try:
            return cls.from_dict(orjson.loads(p.read_bytes()))
        except FileNotFoundError as exc:
            raise InputError(
                f"{p}: expected a {REPORT_JSON} written by export, found none; pass the --out "
                "folder of a finished export"
            ) from exc
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise InputError(
                f"{p}: expected a {REPORT_JSON} written by export, found {exc}"
            ) from exc

    def to_markdown(self) -> str:
        """``report.md``: the summary, definitions, figures per source and the plots."""
        from distprompt._report_render import markdown

        return markdown(self)

    def to_html(self) -> str:
        """``report.html``: self-contained (plots inlined), with example prompts per cluster."""
        from distprompt._report_render import html_page, plots

        return html_page(self, plots(self))

    def write(self, out: str | os.PathLike[str]) -> list[str]:
        """Write ``report.json``, ``report.md``, the PNG plots and ``report.html`` into ``out``.

        Every file is written atomically. Returns the names written.
        """
        out_path = Path(out)
        atomic_write_bytes(out_path / REPORT_JSON, self.to_json())
        return [REPORT_JSON, *self._render(out_path)]

    def _render(self, out: Path) -> list[str]:
        from distprompt._report_render import html_page, markdown, plots

        pngs = plots(self)
        for name, data in pngs.items():
            atomic_write_bytes(out / name, data)
        atomic_write_bytes(out / REPORT_MD, markdown(self).encode("utf-8"))
        atomic_write_bytes(out / REPORT_HTML, html_page(self, pngs).encode("utf-8"))
        return [*pngs, REPORT_MD, REPORT_HTML]


def render_report(out: str | os.PathLike[str]) -> Report:
    """Re-render ``report.md``, the plots and ``report.html`` from ``OUT/report.json``.

    Raises:
        InputError: ``OUT`` holds no readable ``report.json``.

    Example:
        >>> from distprompt import render_report
        >>> print(render_report("out").summary)  # doctest: +SKIP
    """
    report = Report.load(out)
    report._render(Path(out))
    return report


def _within(
    per_source: Sequence[tuple[str, Metrics]], row_share: Mapping[str, float], key: str
) -> float | None:
    vals = [(row_share[s], getattr(m, key)) for s, m in per_source]
    vals = [(w, v) for w, v in vals if v is not None]
    tot = sum(w for w, _ in vals)
    return sum(w * v for w, v in vals) / tot if tot > 0 else None


def _pooled(
    samples: Sequence[tuple[str, _Sample | None, int]],
    row_share: Mapping[str, float],
    corpus_prompt: Mapping[int, int],
    corpus_response: Mapping[int, int],
    per_source: Sequence[tuple[str, Metrics]] = (),
) -> Metrics:
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
    )


def _quantile_curve(counts: Mapping[int, int], points: int = 101) -> list[int]:
    items = sorted((int(k), int(v)) for k, v in counts.items() if v > 0)
    if not items:
        return []
    vals = np.array([k for k, _ in items])
    cum = np.cumsum([v for _, v in items])
    n = int(cum[-1])
    ranks = np.maximum(1, np.ceil(np.linspace(0, 1, points) * n - 1e-9)).astype(np.int64)
    return [int(vals[i]) for i in np.searchsorted(cum, ranks)]


def _excerpt(text: str) -> str:
    if len(text) <= _EXCERPT_HEAD + _EXCERPT_TAIL + 80:
        return text
    cut = len(text) - _EXCERPT_HEAD - _EXCERPT_TAIL
    return f"{text[:_EXCERPT_HEAD]}\n[… {cut:,} characters …]\n{text[-_EXCERPT_TAIL:]}"


def _coverage_verdict(suite: Metrics, rnd: Metrics) -> str:
    if suite.mean_distance is None or rnd.mean_distance is None:
        return "n/a"
    if abs(suite.mean_distance - rnd.mean_distance) < 1e-12:
        return "n/a"  # every candidate selected: nothing to compare
    return "better" if suite.mean_distance < rnd.mean_distance else "not better"


def _length_verdict(suite: Metrics, rnd: Metrics) -> str:
    pairs = [
        (suite.ks_prompt, rnd.ks_prompt),
        (suite.ks_response, rnd.ks_response),
    ]
    if suite.ks_prompt_within is not None:  # overall: judge the selection, not the allocation
        pairs = [
            (suite.ks_prompt_within, rnd.ks_prompt_within),
            (suite.ks_response_within, rnd.ks_response_within),
        ]
    if any(a is None or b is None for a, b in pairs):
        return "n/a"
    if any(a > b + 1e-12 for a, b in pairs):  # type: ignore[operator]
        return "worse"
    if any(a < b - 1e-12 for a, b in pairs):  # type: ignore[operator]
        return "better"
    return "no worse"


def _summary(overall_suite: Metrics, overall_random: Metrics, sources: Mapping[str, Any]) -> str:
    cov = _coverage_verdict(overall_suite, overall_random)
    length = _length_verdict(overall_suite, overall_random)
    beats_cov = cov == "better"
    beats_len = length in ("better", "no worse")
    if beats_cov and beats_len:
        head = "Suite beats uniform random on coverage and on length fidelity"
    elif beats_cov:
        head = "Suite beats uniform random on coverage but not on length fidelity"
    elif beats_len:
        head = "Suite does not beat uniform random on coverage; length fidelity no worse"
    else:
        head = "Suite does not beat uniform random on coverage nor on length fidelity"
    if cov == "n/a" and length != "n/a":
        head = "Every candidate was selected (coverage is trivially complete)"

    def f(v: float | None, pct: bool = False) -> str:
        if v is None:
            return "-"
        return f"{100 * v:.0f}%" if pct else f"{v:.3f}"

    s, r = overall_suite, overall_random
    cov_src = [v["coverage"] for v in sources.values() if v.get("coverage") not in (None, "n/a")]
    len_src = [v["length"] for v in sources.values() if v.get("length") not in (None, "n/a")]
    return (
        f"{head} (median of {N_RANDOM} seeds): mean distance to nearest item "
        f"{f(s.mean_distance)} vs {f(r.mean_distance)}, clusters represented "
        f"{f(s.represented_share, True)} vs {f(r.represented_share, True)}; prompt-length KS "
        f"{f(s.ks_prompt_within)} vs {f(r.ks_prompt_within)}, response-length KS "
        f"{f(s.ks_response_within)} vs {f(r.ks_response_within)} (within sources, mean weighted "
        f"by rows); per source, coverage better in "
        f"{sum(v == 'better' for v in cov_src)}/{len(cov_src)}, lengths no worse in "
        f"{sum(v != 'worse' for v in len_src)}/{len(len_src)}."
    )


def build_report(
    evidence: Mapping[str, SourceEvidence | None],
    *,
    stats: Mapping[str, SourceStats],
    quotas: Mapping[str, Quota],
    items: Sequence[SuiteItem],
    meta: Mapping[str, Any] | None = None,
) -> Report:
    """Assemble the :class:`Report` from per-source evidence and the corpus statistics.

    Args:
        evidence: :func:`measure_source` per source (None for a source nothing was selected from).
        stats: Exact corpus statistics per source.
        quotas: Quota per source (its ``target`` is the source's target share of the suite).
        items: The suite's items (for achieved shares, curves and examples).
        meta: Extra facts recorded in ``meta`` (method, seed, ...).

    Example:
        >>> rep = build_report(ev, stats=part.stats, quotas=quotas, items=items)  # doctest: +SKIP
    """
    names = sorted(stats)
    rows = {s: stats[s].rows for s in names}
    total_rows = sum(rows.values()) or 1
    row_share = {s: rows[s] / total_rows for s in names}
    total_target = sum(q.target for q in quotas.values()) or 1
    by_source: dict[str, list[SuiteItem]] = {s: [] for s in names}
    for it in items:
        by_source.setdefault(it.source, []).append(it)
    total_items = len(items) or 1
    corpus_prompt: Counter[int] = Counter()
    corpus_response: Counter[int] = Counter()
    for s in names:
        corpus_prompt.update(stats[s].prompt_lengths)
        corpus_response.update(stats[s].response_lengths)

    sources: dict[str, dict[str, Any]] = {}
    curves: dict[str, dict[str, Any]] = {}
    for s in names:
        ev = evidence.get(s)
        suite_m = ev.suite if ev else Metrics()
        rnd_m = ev.random if ev else Metrics()
        sources[s] = {
            "rows": rows[s],
            "candidates": ev.candidates if ev else 0,
            "selected": len(by_source.get(s, [])),
            "share": {
                "corpus": _r(row_share[s]),
                "target": _r(quotas[s].target / total_target if s in quotas else 0.0),
                "achieved": _r(len(by_source.get(s, [])) / total_items),
            },
            "suite": suite_m.to_dict(),
            "random": rnd_m.to_dict(),
            "coverage": _coverage_verdict(suite_m, rnd_m),
            "length": _length_verdict(suite_m, rnd_m),
        }
        curves[s] = _curves(stats[s].prompt_lengths, stats[s].response_lengths, ev)

    pooled_suite = _pooled(
        [(s, ev.suite_sample, ev.candidates) for s, ev in evidence.items() if ev],
        row_share,
        corpus_prompt,
        corpus_response,
        [(s, ev.suite) for s, ev in evidence.items() if ev],
    )
    n_runs = max((len(ev.random_samples) for ev in evidence.values() if ev), default=0)
    pooled_runs = [
        _pooled(
            [
                (s, ev.random_samples[i], ev.candidates)
                for s, ev in evidence.items()
                if ev and i < len(ev.random_samples)
            ],
            row_share,
            corpus_prompt,
            corpus_response,
            [
                (s, ev.random_runs[i])
                for s, ev in evidence.items()
                if ev and i < len(ev.random_runs)
            ],
        )
        for i in range(n_runs)
    ]
    pooled_random = Metrics.median(pooled_runs) if pooled_runs else Metrics()
    targets = [v["share"]["target"] or 0.0 for v in sources.values()]
    achieved = [v["share"]["achieved"] or 0.0 for v in sources.values()]
    overall = {
        "rows": sum(rows.values()),
        "candidates": sum(v["candidates"] for v in sources.values()),
        "selected": len(items),
        "share_gap_max": _r(
            max((abs(a - t) for a, t in zip(achieved, targets, strict=True)), default=0.0)
        ),
        "suite": pooled_suite.to_dict(),
        "random": pooled_random.to_dict(),
        "coverage": _coverage_verdict(pooled_suite, pooled_random),
        "length": _length_verdict(pooled_suite, pooled_random),
    }
    curves["overall"] = _curves(
        corpus_prompt,
        corpus_response,
        None,
        suite=[ev.suite_sample for ev in evidence.values() if ev],
        rnd=[ev.random_samples[0] for ev in evidence.values() if ev and ev.random_samples],
    )
    examples = {
        s: [
            {
                "cluster": it.cluster,
                "cluster_size": it.cluster_size,
                "weight": _r(it.weight),
                "id": it.id,
                "where": f"{it.provenance.shard}:{it.provenance.line}",
                "n_prompt_tokens": it.n_prompt_tokens,
                "n_response_tokens": it.n_response_tokens,
                "prompt": _excerpt(it.prompt),
            }
            for it in sorted(by_source.get(s, []), key=lambda it: it.cluster)
        ]
        for s in names
    }
    m = dict(meta or {})
    m.update(
        {
            "random_seeds": N_RANDOM,
            "definitions": {
                "ks": "Kolmogorov-Smirnov statistic between suite and corpus lengths (corpus: "
                "every row); weighted variant uses item weights (overall: times the source's "
                "share of rows)",
                "ks_within": "overall only: the sources' unweighted KS averaged with weights "
                "= their share of rows; the overall length verdict uses it, because the pooled "
                "KS also reflects the allocation, which is the same for suite and random",
                "mean_distance": "mean Euclidean distance from each candidate to its nearest "
                "selected item in the reference space (LSA content + z-scored log prompt "
                "length); lower is better",
                "represented_share": "share of candidates whose k-means cluster (k = items "
                "selected from the source) holds a selected item; higher is better",
                "random": f"uniform random sample of the same size per source, median over "
                f"{N_RANDOM} seeds",
            },
        }
    )
    return Report(
        summary=_summary(pooled_suite, pooled_random, sources),
        verdict={"coverage": overall["coverage"], "length": overall["length"]},
        overall=overall,
        sources=sources,
        examples=examples,
        curves=curves,
        projection={s: ev.projection for s, ev in evidence.items() if ev and ev.projection},
        meta=m,
    )


def _curves(
    prompt_counts: Mapping[int, int],
    response_counts: Mapping[int, int],
    ev: SourceEvidence | None,
    *,
    suite: Sequence[_Sample | None] | None = None,
    rnd: Sequence[_Sample] | None = None,
) -> dict[str, Any]:
    if suite is None:
        suite = [ev.suite_sample] if ev else []
    if rnd is None:
        rnd = [ev.random_samples[0]] if ev and ev.random_samples else []
    out: dict[str, Any] = {}
    for key, counts in (("prompt", prompt_counts), ("response", response_counts)):
        s = [x for x in suite if x is not None]
        out[key] = {
            "corpus": _quantile_curve(counts),
            "suite": sorted(int(v) for x in s for v in getattr(x, key)),
            "random": sorted(int(v) for x in rnd for v in getattr(x, key)),
        }
    return out
