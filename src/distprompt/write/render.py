"""Rendering of a :class:`~distprompt.write.report.Report`: PNG plots, Markdown and one HTML page.

Everything is drawn from the report's own data (what ``report.json`` holds), so
``distprompt report OUT`` re-renders the same files. Plots use matplotlib's Agg backend; the
HTML page inlines them as base64 and needs no other file.
"""

from __future__ import annotations

import base64
import functools
import html
import io
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distprompt.write.report import Report

__all__ = [
    "PLOT_NAMES",
    "format_table",
    "html_page",
    "markdown",
    "plot_groups",
    "plots",
    "serve_plots",
]

#: The report's PNG files, in the order the Markdown and HTML show them.
PLOT_NAMES = (
    "report_shares.png",
    "report_prompt_length.png",
    "report_response_length.png",
    "report_coverage.png",
    "report_clusters.png",
)
_DPI = 90
_SUITE = "#1f77b4"
_RANDOM = "#ff7f0e"
_CORPUS = "#333333"


# ---------------------------------------------------------------------------------------------
# plots
# ---------------------------------------------------------------------------------------------


def _import_matplotlib() -> None:
    """Import what drawing uses (no pyplot: the figures are made on an Agg canvas directly)."""
    import matplotlib.backends.backend_agg
    import matplotlib.figure
    import matplotlib.ticker  # noqa: F401


def _figure(**kw: Any) -> Any:
    """A figure outside pyplot's registry (nothing to close; freed with its last reference) on
    an Agg canvas, whatever the session's backend."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(**kw)
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Any) -> bytes:
    """PNG bytes of ``fig``, laid out by hand: a tight bounding box or ``tight_layout`` would
    draw the whole figure once more (most of a plot's cost is matplotlib's per-artist layout)."""
    buf = io.BytesIO()
    # zlib level 1: a fifth of level 6's encoding time, files ~12 % larger.
    fig.savefig(
        buf,
        format="png",
        dpi=_DPI,
        metadata={"Software": None},
        pil_kwargs={"compress_level": 1},
    )
    return buf.getvalue()


def _text_in(text: str, size: float) -> float:
    """About how wide ``text`` is in inches at ``size`` points (DejaVu Sans averages ~0.6 em),
    for fixed margins that leave room for labels without measuring them (a draw)."""
    return 0.62 * size / 72 * len(text)


def _grid(n: int, ncols: int = 4) -> tuple[int, int]:
    ncols = max(1, min(ncols, n))
    return math.ceil(n / ncols), ncols


def plots(report: Report, names: Sequence[str] | None = None) -> dict[str, bytes]:
    """PNG bytes by file name (see :data:`PLOT_NAMES`), of all or of ``names``."""
    draw = {
        PLOT_NAMES[0]: _shares_plot,
        PLOT_NAMES[1]: lambda r: _length_plot(r, "prompt"),
        PLOT_NAMES[2]: lambda r: _length_plot(r, "response"),
        PLOT_NAMES[3]: _coverage_plot,
    }
    if report.projection:
        draw[PLOT_NAMES[4]] = _cluster_plot
    return {n: f(report) for n, f in draw.items() if names is None or n in names}


#: Relative cost of drawing each plot (CPU seconds on the benchmark corpus's report, least of
#: five in a warm process; a fresh process's first figure costs about the same).
_COST = dict(zip(PLOT_NAMES, (0.12, 0.4, 0.4, 0.21, 0.25), strict=True))


def plot_groups(n: int) -> list[tuple[str, ...]]:
    """:data:`PLOT_NAMES` in ``n`` groups of about the same drawing time (for ``n`` processes).

    Example:
        >>> plot_groups(1) == [PLOT_NAMES]
        True
        >>> sorted(n for g in plot_groups(2) for n in g) == sorted(PLOT_NAMES)
        True
    """
    groups: list[list[str]] = [[] for _ in range(max(1, min(n, len(PLOT_NAMES))))]
    for name in sorted(PLOT_NAMES, key=lambda k: -_COST[k]):
        min(groups, key=lambda g: sum(_COST[k] for k in g)).append(name)
    return [tuple(k for k in PLOT_NAMES if k in g) for g in groups]


def serve_plots(names: Sequence[str] | None = None) -> None:
    """What a plot process runs: import matplotlib, read a pickled :class:`Report` from stdin
    (to its end), draw its plots (all, or ``names``) and write ``{name: PNG bytes}``, pickled,
    to stdout. Nothing is drawn if stdin ends empty (the report was not wanted after all)."""
    import pickle
    import sys

    _import_matplotlib()  # imported while the parent still works towards the report
    data = sys.stdin.buffer.read()
    if not data:
        return
    report = pickle.loads(data)
    sys.stdout.buffer.write(pickle.dumps(plots(report, names), protocol=pickle.HIGHEST_PROTOCOL))
    sys.stdout.buffer.flush()


def _margins(fig: Any, *, left: float, right: float, top: float, bottom: float, **kw: Any) -> None:
    """``subplots_adjust`` with margins in inches."""
    w, h = fig.get_size_inches()
    fig.subplots_adjust(
        left=left / w, right=1 - right / w, top=1 - top / h, bottom=bottom / h, **kw
    )


def _shares_plot(report: Report) -> bytes:
    import numpy as np

    names = list(report.sources)
    x = np.arange(len(names))
    width = max(6.0, 0.9 * len(names) + 2)
    # Room below for the names at 30° (ha="right": the first one also reaches left).
    longest = max((_text_in(n, 10) for n in names), default=0.0)
    first = _text_in(names[0], 10) if names else 0.0
    bottom = 0.5 * longest + 0.35
    fig = _figure(figsize=(width, 3.6 + bottom))
    ax = fig.subplots()
    for j, (key, label, color) in enumerate(
        (
            ("corpus", "corpus rows", _CORPUS),
            ("target", "target", "#999999"),
            ("achieved", "suite", _SUITE),
        )
    ):
        vals = [report.sources[s]["share"][key] or 0.0 for s in names]
        ax.bar(x + (j - 1) * 0.27, vals, width=0.27, label=label, color=color)
    ax.set_xticks(x, names, rotation=30, ha="right", rotation_mode="anchor")
    ax.yaxis.set_major_locator(_locator(5))
    ax.set_ylabel("share")
    ax.set_title("Source shares: corpus rows, target, suite", y=1.0, pad=6)
    ax.legend(frameon=False)
    step = (width - 1.0) / max(1, len(names))  # inches between bars, about
    _margins(
        fig, left=max(0.7, 0.87 * first - 0.3 * step + 0.15), right=0.2, top=0.4, bottom=bottom
    )
    return _png(fig)


def _locator(n: int, *, log: bool = False, subs: bool = False) -> Any:
    """At most about ``n`` major ticks, only those inside the view (matplotlib makes a tick
    object, its most costly part, for every location the locator gives, then hides those
    outside); on a log axis, with ``subs`` also at 2 and 5 times each decade."""
    from matplotlib.ticker import LogLocator, MaxNLocator

    if log:
        return _inside(LogLocator)(subs=(1.0, 2.0, 5.0) if subs else (1.0,), numticks=n)
    return _inside(MaxNLocator)(nbins=n, steps=[1, 2, 2.5, 5, 10])


@functools.cache
def _inside(locator: type) -> type:
    """``locator``'s class giving only the locations inside the axis's view."""

    class Inside(locator):
        def __call__(self) -> Any:
            lo, hi = sorted(self.axis.get_view_interval())
            eps = 1e-9 * max(abs(lo), abs(hi), 1e-300)
            return [v for v in super().__call__() if lo - eps <= v <= hi + eps]

    return Inside


def _tokens(v: float, _pos: Any = None) -> str:
    """A log axis's tick label: 10, 100, 1k, 10k, 1M."""
    for div, unit in ((1e6, "M"), (1e3, "k")):
        if v >= div:
            return f"{v / div:g}{unit}"
    return f"{v:g}"


def _steps(values: Any, y: Any) -> tuple[Any, Any]:
    """The x and y of a right-continuous step curve through ``(values[i], y[i])`` as one plain
    polyline (cheaper to draw than ``drawstyle="steps-post"``)."""
    import numpy as np

    v = np.asarray(values, dtype=float)
    xs = np.repeat(v, 2)[1:]
    ys = np.repeat(np.asarray(y, dtype=float), 2)[:-1]
    return xs, ys


def _ecdf(ax: Any, values: Sequence[int], **kw: Any) -> None:
    import numpy as np

    if not values:
        return
    v = np.sort(np.asarray(values, dtype=float))
    y = np.arange(1, v.size + 1) / v.size
    ax.plot(*_steps(np.concatenate([[v[0]], v]), np.concatenate([[0.0], y])), **kw)


_LENGTH_TITLE = {"prompt": "Prompt", "response": "First reply (max_tokens)"}

#: Lengths reaching this many tokens are drawn on a log axis: on a linear one, a long-prompt
#: source's few short rows and its body share one squeezed corner.
LOG_LENGTHS_FROM = 4096


def log_lengths(lengths: Sequence[int]) -> bool:
    """Whether a panel of these token lengths gets a log axis: they span more than 20× or
    reach :data:`LOG_LENGTHS_FROM`.

    Example:
        >>> log_lengths([100, 300]), log_lengths([30_000, 90_000]), log_lengths([5, 900])
        (False, True, True)
    """
    if not len(lengths) or min(lengths) <= 0:
        return False
    hi = max(lengths)
    return hi / min(lengths) > 20 or hi >= LOG_LENGTHS_FROM


def cluster_colors(n: int) -> Any:
    """``n`` distinct RGBA colours, one a cluster: ``tab20`` up to 20, beyond it evenly spaced
    hues of ``turbo`` in an order that puts far hues side by side (``tab20`` repeated every 20).

    Example:
        >>> len({tuple(c) for c in cluster_colors(50)})
        50
    """
    import math

    import numpy as np
    from matplotlib import colormaps
    from matplotlib.colors import LinearSegmentedColormap

    if n <= 20:
        return colormaps["tab20"](np.arange(max(n, 0)))
    step = next(k for k in (7, 11, 13, 17, 19, 1) if math.gcd(k, n) == 1)
    order = (np.arange(n) * step) % n  # a permutation: neighbours in the list are far hues
    # turbo's 256 colours interpolated to n entries: no two clusters share one
    turbo = colormaps["turbo"](np.arange(256))
    ramp = LinearSegmentedColormap.from_list("clusters", turbo, N=n)
    return ramp(order)


def _length_plot(report: Report, key: str) -> bytes:
    import numpy as np
    from matplotlib.ticker import (
        FixedLocator,
        FuncFormatter,
        NullFormatter,
        NullLocator,
    )

    panels = ["overall", *report.sources]
    rows, cols = _grid(len(panels))
    height = 2.6 * rows
    fig = _figure(figsize=(3.3 * cols, height))
    # Fixed spacing (room for the two-line titles): tight_layout would draw the figure once more.
    grid = {"hspace": 0.75, "wspace": 0.2, "top": 1 - 0.85 / height, "bottom": 0.3 / height}
    spec = fig.add_gridspec(rows, cols, **grid, left=0.04, right=0.98)
    # Only the panels drawn (no empty axes to make and delete), sharing the y axis (its labels
    # in the first column only).
    first = fig.add_subplot(spec[0])
    axes = [first] + [fig.add_subplot(spec[i], sharey=first) for i in range(1, len(panels))]
    for i, ax in enumerate(axes):
        if i % cols:
            ax.tick_params(labelleft=False)
    ks_key = f"ks_{key}"
    for ax, name in zip(axes, panels, strict=True):
        c = report.curves.get(name, {}).get(key, {})
        corpus = c.get("corpus") or []
        if corpus:
            ax.plot(
                *_steps(corpus, np.linspace(0, 1, len(corpus))),
                color=_CORPUS,
                lw=2,
                label="corpus",
            )
        _ecdf(ax, c.get("random") or [], color=_RANDOM, ls="--", lw=1.2, label="random")
        _ecdf(ax, c.get("suite") or [], color=_SUITE, lw=1.4, label="suite")
        figs = report.overall if name == "overall" else report.sources[name]
        s, r = figs["suite"].get(ks_key), figs["random"].get(ks_key)
        label = "overall (pooled as replayed)" if name == "overall" else name
        title = label if s is None else f"{label}\nKS {s:.3f} (random {r:.3f})"
        ax.set_title(title, fontsize=9, y=1.0, pad=4)  # a fixed y: no bounding boxes to place it
        if log_lengths(corpus):
            ax.set_xscale("log")
            # within two decades the decades alone leave a panel with one label or none
            few = max(corpus) < 100 * min(corpus)
            ax.xaxis.set_major_locator(_locator(6 if few else 4, log=True, subs=few))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_minor_formatter(NullFormatter())
        else:
            ax.xaxis.set_major_locator(_locator(3))
        ax.xaxis.set_major_formatter(FuncFormatter(_tokens))  # 20k, not 20000 or a 1e4 offset
        ax.tick_params(labelsize=7)
    first.set_ylim(0, 1.02)  # shared by all
    first.yaxis.set_major_locator(FixedLocator([0, 0.5, 1]))
    if first.get_legend_handles_labels()[0]:  # an empty first panel has nothing to name
        first.legend(fontsize=7, frameon=False, loc="lower right")
    fig.suptitle(
        f"{_LENGTH_TITLE.get(key, key.capitalize())} length (tokens): cumulative distribution",
        fontsize=11,
        y=1 - 0.08 / height,
        va="top",
    )
    return _png(fig)


def _coverage_plot(report: Report) -> bytes:
    import numpy as np

    names = ["overall", *report.sources]
    figs = [report.overall, *report.sources.values()]
    y = np.arange(len(names))
    left = max(_text_in(n, 8) for n in names) + 0.25
    fig = _figure(figsize=(9.0 + left, 0.35 * len(names) + 1.6))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, key, title in (
        (axes[0], "mean_distance", "mean distance to nearest item (lower is better)"),
        (axes[1], "represented_share", "clusters represented (higher is better)"),
    ):
        s = [f["suite"].get(key) or 0.0 for f in figs]
        r = [f["random"].get(key) or 0.0 for f in figs]
        ax.barh(y - 0.2, s, height=0.4, color=_SUITE, label="suite")
        ax.barh(y + 0.2, r, height=0.4, color=_RANDOM, label="random (median)")
        ax.set_title(title, fontsize=10, y=1.0, pad=6)
        ax.tick_params(labelsize=8)
        ax.xaxis.set_major_locator(_locator(5))
    axes[0].set_yticks(y, names)
    axes[0].invert_yaxis()
    axes[1].set_xlim(0, 1.05)
    fig.legend(
        *axes[0].get_legend_handles_labels(),
        loc="upper center",
        ncol=2,
        fontsize=8,
        frameon=False,
        bbox_to_anchor=(0.5, 1.0),
    )
    _margins(fig, left=left, right=0.2, top=0.6, bottom=0.35, wspace=0.06)
    return _png(fig)


def _cluster_plot(report: Report) -> bytes:
    import numpy as np

    names = list(report.projection)
    rows, cols = _grid(len(names))
    height = 3.0 * rows
    fig = _figure(figsize=(3.3 * cols, height))
    w = 3.3 * cols
    spec = fig.add_gridspec(
        rows,
        cols,
        left=0.1 / w,
        right=1 - 0.1 / w,
        top=1 - 0.55 / height,
        bottom=0.1 / height,
        hspace=0.25 * 3.0 / 2.6,
        wspace=0.06,
    )
    for i, name in enumerate(names):  # only the panels drawn: no empty axes to make
        ax = fig.add_subplot(spec[i])
        p = report.projection[name]
        x, y = np.asarray(p["x"]), np.asarray(p["y"])
        lab = np.asarray(p["cluster"], dtype=int)
        sel = np.asarray(p["selected"], dtype=bool)
        colors = cluster_colors(int(lab.max()) + 1 if lab.size else 0)[lab]
        ax.scatter(x[~sel], y[~sel], s=8, c=colors[~sel], alpha=0.6, linewidths=0)
        ax.scatter(
            x[sel], y[sel], s=40, c=colors[sel], marker="*", edgecolors="black", linewidths=0.6
        )
        ax.set_title(f"{name} ({int(sel.sum())} items)", fontsize=9, y=1.0, pad=4)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(
        "Candidates by suite cluster (2-D projection; stars = suite items)",
        fontsize=11,
        y=1 - 0.08 / height,
        va="top",
    )
    return _png(fig)


# ---------------------------------------------------------------------------------------------
# tables
# ---------------------------------------------------------------------------------------------

_HEAD = (
    "source",
    "rows",
    "cands",
    "items",
    "share corpus / target / suite",
    "prompt KS suite (weighted) / random",
    "first reply (max_tokens) KS suite (weighted) / random",
    "suite unweighted KS prompt / first reply",
    "mean distance suite / random",
    "represented suite / random",
    "coverage",
    "lengths",
)


def _f(v: Any, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{100 * v:.0f}%" if pct else f"{v:.3f}"


def _ks(s: Mapping[str, Any], r: Mapping[str, Any], key: str) -> str:
    # The suite with its item weights against random samples with equal ones (the verdict's
    # basis). Overall: the within-source mean, then the pooled figure, which also reflects the
    # allocation (the same for suite and random).
    within = s.get(f"ks_{key}_weighted_within")
    plain = f"{_f(s.get(f'ks_{key}_weighted'))} / {_f(r.get(f'ks_{key}'))}"
    if within is None:
        return plain
    return f"{_f(within)} / {_f(r.get(f'ks_{key}_within'))} (pooled {plain})"


def _row(name: str, figs: Mapping[str, Any]) -> list[str]:
    s, r = figs["suite"], figs["random"]
    share = figs.get("share")
    return [
        name,
        f"{figs['rows']:,}",
        f"{figs['candidates']:,}",
        f"{figs['selected']:,}",
        " / ".join(_f(share[k], True) for k in ("corpus", "target", "achieved")) if share else "",
        _ks(s, r, "prompt"),
        _ks(s, r, "response"),
        f"{_f(s.get('ks_prompt'))} / {_f(s.get('ks_response'))}",
        f"{_f(s.get('mean_distance'))} / {_f(r.get('mean_distance'))}",
        f"{_f(s.get('represented_share'), True)} / {_f(r.get('represented_share'), True)}",
        str(figs.get("coverage", "")),
        str(figs.get("length", "")),
    ]


def _rows(report: Report) -> list[list[str]]:
    return [_row("**overall**", report.overall)] + [
        _row(name, figs) for name, figs in report.sources.items()
    ]


def markdown(report: Report) -> str:
    """``report.md``."""
    lines = ["# Representativeness report", "", report.summary, ""]
    lines += ["| " + " | ".join(_HEAD) + " |", "|" + "---|" * len(_HEAD)]
    lines += ["| " + " | ".join(r) + " |" for r in _rows(report)]
    lines += _recovery_lines(report)
    lines += _speculation_lines(report)
    lines += ["", "## Definitions", ""]
    for k, v in report.meta.get("definitions", {}).items():
        lines.append(f"- **{k}**: {v}")
    meta = {k: v for k, v in report.meta.items() if k != "definitions"}
    if meta:
        lines += ["", "Run: " + ", ".join(f"{k}={v}" for k, v in sorted(meta.items()))]
    lines += ["", "## Plots", ""]
    for name in PLOT_NAMES:
        if name != PLOT_NAMES[4] or report.projection:
            lines.append(f"![{name[len('report_') : -4].replace('_', ' ')}]({name})")
    lines += ["", "Example prompts per source and cluster: see `report.html`.", ""]
    return "\n".join(lines)


def _fs(v: Any, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{100 * v:.1f}%" if pct else f"{v:.3f}"


def _speculation_lines(report: Report) -> list[str]:
    """The report's section on simulated speculation (``distprompt simulate``), when it ran."""
    spec = report.speculation
    rows = spec.get("rows") or []
    if not rows:
        return []
    head = ["drafter", "figure", "suite", "95% interval", "corpus", "suite error",
            "random median error", "random closer"]  # fmt: skip
    lines = ["", "## Speculation, simulated from the recorded replies", "", spec.get("verdict", "")]
    lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        pct = r.get("figure") == "acceptance_rate"
        lines.append(
            "| "
            + " | ".join(
                [
                    str(r.get("drafter")),
                    str(r.get("figure")),
                    _fs(r.get("suite"), pct),
                    f"{_fs(r.get('suite_low'), pct)} – {_fs(r.get('suite_high'), pct)}",
                    _fs(r.get("corpus"), pct),
                    _fs(r.get("suite_error"), pct),
                    _fs(r.get("random_median_error"), pct),
                    _fs(r.get("random_better"), True),
                ]
            )
            + " |"
        )
    lines += ["", "Corpus mix (every source at its share of the corpus rows); per source: "
              "`simulate.md`."]  # fmt: skip
    return lines


def _recovery_lines(report: Report) -> list[str]:
    """Turn recovery per source: token-exact items and items whose every turn was recognised."""
    rec = report.overall.get("recovery") or {}
    if not rec.get("items"):
        return []
    lines = [
        "",
        "## Turn recovery",
        "",
        "Token-exact: the messages re-render to the prompt ids. Structured: every turn was "
        "recognised (`structure: turns`); the rest are flat fallbacks (prompt text, template "
        "markers included, in fewer messages). Ambiguous: items whose tokens have two "
        "readings (a system prompt the template writes into a user turn); the one kept is on "
        "the item (`ambiguities`).",
        "",
        "| source | items | token-exact | structured | ambiguous |",
        "|---|---|---|---|---|",
    ]
    rows = [("**overall**", rec)]
    rows += [(s, v.get("recovery") or {}) for s, v in report.sources.items()]
    for name, r in rows:
        lines.append(
            f"| {name} | {r.get('items', 0)} | {_f(r.get('tokens'), True)} | "
            f"{_f(r.get('turns'), True)} | {r.get('ambiguous', 0)} |"
        )
    return lines


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1200px;
padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:13px;margin:1em 0}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}
th:first-child,td:first-child{text-align:left}
tr:first-child td{font-weight:bold;background:#f4f4f4}
img{max-width:100%;margin:0.5em 0}
pre{white-space:pre-wrap;word-break:break-word;background:#f7f7f7;padding:0.6em;
font-size:12px;max-height:22em;overflow:auto;border:1px solid #e3e3e3}
details{margin:0.4em 0}summary{cursor:pointer;font-weight:bold}
.summary{font-size:1.1em;padding:0.8em;background:#eef5ff;border-left:4px solid #1f77b4}
.meta{color:#666;font-size:12px}
"""


def _esc(s: Any) -> str:
    return html.escape(str(s), quote=True)


def html_page(report: Report, pngs: Mapping[str, bytes]) -> str:
    """``report.html``: one file, plots inlined as base64."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>distprompt representativeness report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>Representativeness report</h1>",
        f'<p class="summary">{_esc(report.summary)}</p>',
        "<table><tr>" + "".join(f"<th>{_esc(h)}</th>" for h in _HEAD) + "</tr>",
    ]
    for r in _rows(report):
        cells = [c.replace("**", "") for c in r]
        parts.append("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in cells) + "</tr>")
    parts.append("</table>")
    spec = _speculation_lines(report)
    if spec:
        parts.append(f"<h2>{_esc(spec[1][3:])}</h2><p>{_esc(spec[3])}</p><table>")
        for line in spec[5:-2]:
            if line.startswith("|---"):
                continue
            tag = "th" if line is spec[5] else "td"
            cells = [c.strip() for c in line.strip("|").split("|")]
            parts.append("<tr>" + "".join(f"<{tag}>{_esc(c)}</{tag}>" for c in cells) + "</tr>")
        parts.append(f"</table><p>{_esc(spec[-1])}</p>")
    rec = _recovery_lines(report)
    if rec:
        parts.append(f"<h2>Turn recovery</h2><p>{_esc(rec[3])}</p><table>")
        for line in rec[5:]:
            if line.startswith("|---"):
                continue
            cells = [c.strip().replace("**", "") for c in line.strip("|").split("|")]
            parts.append("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in cells) + "</tr>")
        parts.append("</table>")
    parts.append("<h2>Definitions</h2><ul>")
    for k, v in report.meta.get("definitions", {}).items():
        parts.append(f"<li><b>{_esc(k)}</b>: {_esc(v)}</li>")
    parts.append("</ul>")
    meta = {k: v for k, v in report.meta.items() if k != "definitions"}
    if meta:
        run = ", ".join(f"{k}={v}" for k, v in sorted(meta.items()))
        parts.append(f'<p class="meta">Run: {_esc(run)}</p>')
    parts.append("<h2>Plots</h2>")
    for name, data in pngs.items():
        uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
        parts.append(f'<div><img alt="{_esc(name)}" src="{uri}"></div>')
    parts.append("<h2>Example prompts per source and cluster</h2>")
    parts.append(
        '<p class="meta">Each suite item is the representative of its cluster: the candidates '
        "nearest to it. Size = candidates it stands for; weight = their share of the source.</p>"
    )
    for source, examples in report.examples.items():
        parts.append(f"<details><summary>{_esc(source)} — {len(examples)} clusters</summary>")
        for ex in examples:
            mt = ex.get("max_tokens")  # absent from reports written before it was recorded
            reply = "" if mt is None else f"{mt} first reply (max_tokens) / "
            parts.append(
                f"<h4>cluster {ex['cluster']} · {ex['cluster_size']} candidates · weight "
                f"{ex['weight']} · {ex['n_prompt_tokens']} prompt tokens · {reply}"
                f"{ex['n_response_tokens']} n_response_tokens (rest of row) · "
                f"<code>{_esc(ex['where'])}</code> · "
                f"<code>{_esc(ex['id'])}</code></h4>"
            )
            parts.append(f"<pre>{_esc(ex['prompt'])}</pre>")
        parts.append("</details>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def format_table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Terminal table lines: first column left-aligned, the others right-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
