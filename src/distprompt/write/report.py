"""Representativeness report: does the suite stand for the corpus, and does it beat random?

The figures come from :mod:`distprompt.write.metrics` (length fidelity and coverage, measured for
the suite and for a uniform random sample of the same size per source, the median over
:data:`~distprompt.write.metrics.N_RANDOM` seeds), per source and overall, so any advantage — or the
lack of one — is plain. The report adds:

* **shares** — the source's share of corpus rows, of the quota targets, and of the suite;
* **verdicts** — per source and overall, whether the suite beats random on coverage and is no
  worse on length fidelity (overall: judged on the within-source KS, which leaves out the
  allocation that suite and random share), and a one-line summary;
* **curves, examples and the projection** behind the plots and the HTML page.

:func:`build_report` assembles a :class:`Report` from the pipeline's
:class:`~distprompt.write.metrics.SourceEvidence`; the report writes ``report.json``, ``report.md``,
PNG plots and one self-contained ``report.html`` (:meth:`Report.write`); :func:`render_report`
re-renders them from ``report.json``.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from distprompt.errors import InputError, api_spelling
from distprompt.records import histogram_quantiles, max_tokens_histogram
from distprompt.write.metrics import (
    N_RANDOM,
    Metrics,
    SelectionSample,
    SourceEvidence,
    pooled_metrics,
    rounded,
)
from distprompt.write.out_dir import atomic_write_bytes

if TYPE_CHECKING:
    from distprompt.choose.stratify import Quota
    from distprompt.records import SourceStats, SuiteItem

__all__ = [
    "REPORT_HTML",
    "REPORT_JSON",
    "REPORT_MD",
    "Report",
    "build_report",
    "render_report",
    "with_items",
]

logger = logging.getLogger("distprompt.write.report")

REPORT_JSON = "report.json"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
_EXCERPT_HEAD = 900
_EXCERPT_TAIL = 600
_FORMAT_VERSION = 1


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
        speculation: What ``distprompt simulate`` measured for this suite, when it was run
            into the suite's folder: ``verdict`` (one line) and ``rows`` (the corpus mix's
            figures per drafter), from ``simulate.json``; empty until then.

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
    speculation: dict[str, Any] = field(default_factory=dict)

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
            "speculation": self.speculation,
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
            speculation=dict(d.get("speculation") or {}),
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
        from distprompt.write.render import markdown

        return markdown(self)

    def to_html(self) -> str:
        """``report.html``: self-contained (plots inlined), with example prompts per cluster."""
        from distprompt.write.render import html_page, plots

        return html_page(self, plots(self))

    def write(
        self, out: str | os.PathLike[str], *, pngs: Mapping[str, bytes] | None = None
    ) -> list[str]:
        """Write ``report.json``, ``report.md``, the PNG plots and ``report.html`` into ``out``.

        Every file is written atomically. Returns the names written.

        Args:
            out: The folder.
            pngs: The plots, already drawn (:func:`distprompt.write.render.plots` of this
                report, e.g. in other processes); drawn here when None.
        """
        out_path = Path(out)
        atomic_write_bytes(out_path / REPORT_JSON, self.to_json())
        return [REPORT_JSON, *self._render(out_path, pngs)]

    def _render(self, out: Path, pngs: Mapping[str, bytes] | None = None) -> list[str]:
        from distprompt.write.render import html_page, markdown, plots

        if pngs is None:
            pngs = plots(self)
        for name, data in pngs.items():
            atomic_write_bytes(out / name, data)
        atomic_write_bytes(out / REPORT_MD, markdown(self).encode("utf-8"))
        atomic_write_bytes(out / REPORT_HTML, html_page(self, pngs).encode("utf-8"))
        return [*pngs, REPORT_MD, REPORT_HTML]


@api_spelling
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


def _quantile_curve(counts: Mapping[int, int], points: int = 101) -> list[int]:
    return histogram_quantiles(counts, np.linspace(0, 1, points).tolist())


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
    # the suite as it is used, with its item weights, against uniform random samples as they
    # are used, with equal weights (the sampling design gives long replies more items and less
    # weight each: unweighted, its lengths look too long by design)
    pairs = [
        (suite.ks_prompt_weighted, rnd.ks_prompt),
        (suite.ks_response_weighted, rnd.ks_response),
    ]
    if suite.ks_prompt_within is not None:  # overall: judge the selection, not the allocation
        pairs = [
            (suite.ks_prompt_weighted_within, rnd.ks_prompt_within),
            (suite.ks_response_weighted_within, rnd.ks_response_within),
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
        f"{f(s.ks_prompt_weighted_within)} vs {f(r.ks_prompt_within)}, first-reply (max_tokens) "
        f"KS {f(s.ks_response_weighted_within)} vs {f(r.ks_response_within)} (the suite with "
        f"its item weights, random samples with equal ones; within sources, mean weighted "
        f"by rows); per source, coverage better in "
        f"{sum(v == 'better' for v in cov_src)}/{len(cov_src)}, lengths no worse in "
        f"{sum(v != 'worse' for v in len_src)}/{len(len_src)}."
    )


#: What the report's figures mean (``meta.definitions``).
_DEFINITIONS = {
    "ks": "Kolmogorov-Smirnov statistic between suite and corpus lengths (corpus: "
    "every row); weighted variant uses item weights (overall: times the source's "
    "share of rows)",
    "response": "output length = the first reply after the prompt as a client asks "
    "for it (max_tokens: at least 1, capped by max_output_tokens), for the suite's "
    "items and every corpus row alike; not n_response_tokens (the rest of the row, "
    "every later turn included)",
    "ks_within": "overall only: the sources' unweighted KS averaged with weights "
    "= their share of rows; the overall length verdict uses it, because the pooled "
    "KS also reflects the allocation, which is the same for suite and random",
    "mean_distance": "mean Euclidean distance from each candidate to its nearest "
    "selected item in the reference space (LSA content + z-scored log prompt "
    "length); lower is better",
    "represented_share": "share of candidates whose k-means cluster (k = items "
    "selected from the source) holds a selected item; higher is better",
    "random": f"uniform random sample of the same size per source, median over {N_RANDOM} seeds",
}


def build_report(
    evidence: Mapping[str, SourceEvidence | None],
    *,
    stats: Mapping[str, SourceStats],
    quotas: Mapping[str, Quota],
    items: Sequence[SuiteItem],
    meta: Mapping[str, Any] | None = None,
    selected: Mapping[str, int] | None = None,
    max_output_tokens: int | None = None,
) -> Report:
    """Assemble the :class:`Report` from per-source evidence and the corpus statistics.

    Args:
        evidence: :func:`measure_source` per source (None for a source nothing was selected from).
        stats: Exact corpus statistics per source.
        quotas: Quota per source (its ``target`` is the source's target share of the suite).
        items: The suite's items (for achieved shares, curves and examples).
        meta: Extra facts recorded in ``meta`` (method, seed, ...).
        selected: Items selected per source, for a report made before the items are decoded
            (``items`` empty), to draw its plots early: they are those of the final report,
            whose examples and recovery rates this one lacks.
        max_output_tokens: The export's cap on ``max_tokens``: the corpus's first replies are
            capped the same way before the output lengths are compared.

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
    if selected is None:
        selected = {s: len(v) for s, v in by_source.items()}
    n_selected = sum(selected.values())
    total_items = n_selected or 1
    replies, corpus_prompt, corpus_response = _histograms(stats, max_output_tokens)

    sources: dict[str, dict[str, Any]] = {}
    curves: dict[str, dict[str, Any]] = {}
    for s in names:
        ev = evidence.get(s)
        share = {
            "corpus": rounded(row_share[s]),
            "target": rounded(quotas[s].target / total_target if s in quotas else 0.0),
            "achieved": rounded(selected.get(s, 0) / total_items),
        }
        sources[s] = _source_entry(ev, rows[s], selected.get(s, 0), share, by_source.get(s, []))
        curves[s] = _curves(stats[s].prompt_lengths, replies[s], ev)

    pooled_suite, pooled_random = _pooled(evidence, row_share, corpus_prompt, corpus_response)
    targets = [v["share"]["target"] or 0.0 for v in sources.values()]
    achieved = [v["share"]["achieved"] or 0.0 for v in sources.values()]
    overall = {
        "rows": sum(rows.values()),
        "candidates": sum(v["candidates"] for v in sources.values()),
        "selected": n_selected,
        "share_gap_max": rounded(
            max((abs(a - t) for a, t in zip(achieved, targets, strict=True)), default=0.0)
        ),
        "suite": pooled_suite.to_dict(),
        "random": pooled_random.to_dict(),
        "coverage": _coverage_verdict(pooled_suite, pooled_random),
        "length": _length_verdict(pooled_suite, pooled_random),
        "recovery": _recovery(items),
    }
    curves["overall"] = _curves(
        corpus_prompt,
        corpus_response,
        None,
        suite=[ev.suite_sample for ev in evidence.values() if ev],
        rnd=[ev.random_samples[0] for ev in evidence.values() if ev and ev.random_samples],
    )
    examples = {s: _examples(by_source.get(s, [])) for s in names}
    m = dict(meta or {})
    m.update(
        {
            "random_seeds": N_RANDOM,
            "max_output_tokens": max_output_tokens,
            "definitions": dict(_DEFINITIONS),
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


def with_items(report: Report, items: Sequence[SuiteItem]) -> Report:
    """The report :func:`build_report` made before the items were decoded (``items=()``,
    ``selected`` their counts per source), completed with them: their recovery rates and the
    examples. Equal to :func:`build_report` given the items, so the report is built once.

    Raises:
        ValueError: The items are not as many per source as the report's ``selected``.
    """
    by_source: dict[str, list[SuiteItem]] = {s: [] for s in report.sources}
    for it in items:
        by_source.setdefault(it.source, []).append(it)
    counts = {s: len(v) for s, v in by_source.items()}
    if counts != {s: v["selected"] for s, v in report.sources.items()}:
        raise ValueError("with_items: expected the items the report was built for")
    sources = {s: {**v, "recovery": _recovery(by_source[s])} for s, v in report.sources.items()}
    examples = {s: _examples(by_source[s]) for s in report.sources}
    overall = {**report.overall, "recovery": _recovery(items)}
    return replace(report, sources=sources, overall=overall, examples=examples)


def _histograms(
    stats: Mapping[str, SourceStats], max_output_tokens: int | None
) -> tuple[dict[str, Counter[int]], Counter[int], Counter[int]]:
    """Each source's output-length histogram, and the corpus's prompt and output lengths.

    Output lengths are the first reply as a client asks for it (``max_tokens``), not
    ``n_response_tokens`` (the rest of the row, every later turn included).
    """
    names = sorted(stats)
    replies = {
        s: max_tokens_histogram(stats[s].first_reply_lengths, max_output_tokens) for s in names
    }
    corpus_prompt: Counter[int] = Counter()
    corpus_response: Counter[int] = Counter()
    for s in names:
        corpus_prompt.update(stats[s].prompt_lengths)
        corpus_response.update(replies[s])
    return replies, corpus_prompt, corpus_response


def _source_entry(
    ev: SourceEvidence | None,
    rows: int,
    selected: int,
    share: dict[str, Any],
    items: Sequence[SuiteItem],
) -> dict[str, Any]:
    """A source's entry of the report: counts, shares, metrics of the suite and of random
    samples, the verdicts and the recovery of its items."""
    suite_m = ev.suite if ev else Metrics()
    rnd_m = ev.random if ev else Metrics()
    return {
        "rows": rows,
        "candidates": ev.candidates if ev else 0,
        "selected": selected,
        "share": share,
        "suite": suite_m.to_dict(),
        "random": rnd_m.to_dict(),
        "coverage": _coverage_verdict(suite_m, rnd_m),
        "length": _length_verdict(suite_m, rnd_m),
        "recovery": _recovery(items),
    }


def _pooled(
    evidence: Mapping[str, SourceEvidence | None],
    row_share: dict[str, float],
    corpus_prompt: Counter[int],
    corpus_response: Counter[int],
) -> tuple[Metrics, Metrics]:
    """The overall metrics of the suite and of the random samples (median over the seeds), the
    sources pooled by their shares of the corpus rows."""
    pooled_suite = pooled_metrics(
        [(s, ev.suite_sample, ev.candidates) for s, ev in evidence.items() if ev],
        row_share,
        corpus_prompt,
        corpus_response,
        [(s, ev.suite) for s, ev in evidence.items() if ev],
    )
    n_runs = max((len(ev.random_samples) for ev in evidence.values() if ev), default=0)
    pooled_runs = [
        pooled_metrics(
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
    return pooled_suite, pooled_random


def _examples(items: Sequence[SuiteItem]) -> list[dict[str, Any]]:
    """A source's items as the report lists them, by cluster."""
    return [
        {
            "cluster": it.cluster,
            "cluster_size": it.cluster_size,
            "weight": rounded(it.weight),
            "id": it.id,
            "where": f"{it.provenance.shard}:{it.provenance.line}",
            "n_prompt_tokens": it.n_prompt_tokens,
            "max_tokens": it.max_tokens,
            "n_response_tokens": it.n_response_tokens,
            "prompt": _excerpt(it.prompt),
        }
        for it in sorted(items, key=lambda it: it.cluster)
    ]


def _recovery(items: Sequence[SuiteItem]) -> dict[str, Any]:
    """Turn-recovery rates: share of items token-exact and share whose every turn was recognised
    (``structure: turns``; the rest are flat fallbacks), and how many items hold a reading the
    tokens leave open (``ambiguities``). None where turn recovery did not run."""
    checked = [it for it in items if it.fidelity is not None]
    n = len(checked)
    return {
        "items": n,
        "tokens": rounded(sum(it.fidelity == "tokens" for it in checked) / n) if n else None,
        "turns": rounded(sum(it.structure == "turns" for it in checked) / n) if n else None,
        "ambiguous": sum(bool(it.ambiguities) for it in checked),
    }


def _curves(
    prompt_counts: Mapping[int, int],
    response_counts: Mapping[int, int],
    ev: SourceEvidence | None,
    *,
    suite: Sequence[SelectionSample | None] | None = None,
    rnd: Sequence[SelectionSample] | None = None,
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
