"""The files of a bench result: ``summary.json``, ``summary.md`` and ``summary.png``; and the
markdown of a comparison of two runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from distprompt.write.out_dir import atomic_write_bytes

__all__ = [
    "PLOT_NAME",
    "SUMMARY_JSON",
    "SUMMARY_MD",
    "render_compare",
    "render_summary",
    "write_summary_files",
]

SUMMARY_MD = "summary.md"
#: Written last: its presence marks a finished result folder.
SUMMARY_JSON = "summary.json"
PLOT_NAME = "summary.png"


def _f(v: Any, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def _ci(e: dict[str, Any] | None, spec: str = ".3f") -> str:
    if not e:
        return "-"
    if e.get("ci_low") is None:
        return f"{e['estimate']:{spec}} (counters, no interval)"
    return f"{e['estimate']:{spec}} [{e['ci_low']:{spec}}, {e['ci_high']:{spec}}]"


def _interval(row: dict[str, Any], name: str, spec: str = ".3f") -> str:
    """A window's figure with its interval when it has one (not from counters)."""
    lo, hi = row.get(f"{name}_ci_low"), row.get(f"{name}_ci_high")
    if lo is None or hi is None:
        return _f(row.get(name), spec)
    return f"{row[name]:{spec}} [{lo:{spec}}, {hi:{spec}}]"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def render_summary(summary: dict[str, Any]) -> str:
    """``summary.md``: the run, the corpus estimate, per source × concurrency, per cluster."""
    meta = summary["meta"]
    state = "complete" if meta.get("complete") else f"INCOMPLETE ({meta.get('stopped', '?')})"
    lines = [
        f"# bench: {meta.get('label')}",
        "",
        f"{meta.get('api')} at {meta.get('url')}, model {meta.get('model') or '-'}; "
        f"{summary['requests']} requests ({summary['ok']} ok) over concurrency "
        f"{', '.join(map(str, meta.get('concurrency', [])))}; ignore_eos={meta.get('ignore_eos')}, "
        f"temperature={meta.get('temperature')}; run {state}.",
    ]
    if summary["errors"]:
        lines.append("")
        lines.append(
            "Errors by kind: " + ", ".join(f"{k} {v}" for k, v in summary["errors"].items())
        )
        for k, msg in (meta.get("first_error") or {}).items():
            lines.append(f"- first {k}: {msg}")
    if meta.get("skipped"):
        lines.append("")
        lines.append(
            "Items not sent (chat endpoint needs exact chat turns): "
            + ", ".join(f"{v} ({k})" for k, v in meta["skipped"].items())
        )
    shares = meta.get("shares", {})
    lines += [
        "",
        "## Corpus-weighted estimate",
        "",
        "What the server would report had it served the corpus: ratios of sums over the "
        "requests (accepted length = Σ w·tokens / Σ w·verify steps, acceptance rate = "
        "Σ w·accepted / Σ w·proposed drafts), each source's item weights scaled to its share of "
        f"the corpus rows ({meta.get('shares_from', 'manifest rows')}: "
        + ", ".join(f"{s} {v:.3f}" for s, v in shares.items())
        + "); 95% stratified bootstrap interval.",
        "",
    ]
    lines += _table(
        [
            "concurrency",
            "accepted length",
            "acceptance rate",
            "output tok/s",
            "req/s",
            "TTFT p50 ms",
            "ITL p50 ms",
        ],
        [
            [
                str(c["concurrency"]),
                _ci(c.get("accept_length")),
                _ci(c.get("accept_rate")),
                _f(c.get("output_tok_s"), ".1f"),
                _f(c.get("req_s")),
                _f(c.get("ttft_p50_ms"), ".1f"),
                _f(c.get("itl_p50_ms")),
            ]
            for c in summary["corpus"]
        ],
    )
    lines += ["", "## Per source and concurrency", ""]
    lines += _table(
        [
            "source",
            "c",
            "req",
            "ok",
            "tok/s",
            "req/s",
            "in flight",
            "TTFT p50/p90/p99 ms",
            "ITL p50/p90/p99 ms",
            "acc. length",
            "acc. rate",
            "acc. length mean per request",
            "from",
        ],
        [
            [
                r["source"],
                str(r["concurrency"]),
                str(r["requests"]),
                str(r["ok"]),
                _f(r["output_tok_s"], ".1f"),
                _f(r["req_s"]),
                _f(r["mean_in_flight"], ".1f"),
                "/".join(_f(r[f"ttft_p{q}_ms"], ".1f") for q in (50, 90, 99)),
                "/".join(_f(r[f"itl_p{q}_ms"]) for q in (50, 90, 99)),
                _interval(r, "accept_length"),
                _interval(r, "accept_rate"),
                _f(r.get("accept_length_mean_per_request"), ".3f"),
                r["spec_from"] or "-",
            ]
            for r in summary["by_source"]
        ],
    )
    est = [
        f"{r['source']} c={r['concurrency']}: {r[k]} without {what}"
        for r in summary["by_source"]
        for k, what in (
            ("accept_length_steps_estimated", "steps"),
            ("accept_rate_drafted_estimated", "drafts"),
        )
        if r.get(k)
    ]
    if est:
        lines += [
            "",
            "Requests whose server reported no step or draft count (estimated from the output "
            "tokens and the accepted length, or counted per request): " + ", ".join(est) + ".",
        ]
    lines += [
        "",
        "acc. length and acc. rate are ratios of item-weighted sums, as a server reports them; "
        "the per-request mean weighs a short reply as much as a long one.",
    ]
    if summary["clusters"]:
        n = summary["method"]["min_cluster_requests"]
        lines += ["", f"## Per cluster (clusters with at least {n} successful requests)", ""]
        lines += _table(
            ["source", "cluster", "requests", "items", "acc. length", "acc. rate", "TTFT p50 ms"],
            [
                [
                    r["source"],
                    str(r["cluster"]),
                    str(r["requests"]),
                    str(r["items"]),
                    _f(r["accept_length"], ".3f"),
                    _f(r["accept_rate"], ".3f"),
                    _f(r["ttft_p50_ms"], ".1f"),
                ]
                for r in summary["clusters"]
            ],
        )
    return "\n".join(lines) + "\n"


def concurrency_axis(ax: Any, levels: list[int]) -> None:
    """A log-2 x axis labelled with the concurrency levels run, as numbers (1, 2, 4), not 2⁰."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(levels))
    ax.xaxis.set_major_formatter(FixedFormatter([str(c) for c in levels]))
    ax.xaxis.set_minor_locator(NullLocator())


def _plot(summary: dict[str, Any], path: Path) -> bool:
    rows = summary["by_source"]
    if not rows:
        return False
    from distprompt.write.render import _figure, _png

    sources = sorted({r["source"] for r in rows})
    fig = _figure(figsize=(11, 4))
    ax1, ax2 = fig.subplots(1, 2)
    levels = sorted({r["concurrency"] for r in rows})
    width = 0.8 / max(1, len(levels))
    for j, c in enumerate(levels):
        vals = [
            next(
                (r["accept_length"] for r in rows if r["source"] == s and r["concurrency"] == c),
                None,
            )
            for s in sources
        ]
        xs = [i + j * width for i, v in enumerate(vals) if v is not None]
        ys = [v for v in vals if v is not None]
        if ys:
            ax1.bar(xs, ys, width=width, label=f"c={c}")
    for c in summary["corpus"]:
        est = c.get("accept_length")
        if est:
            ax1.axhline(est["estimate"], linestyle="--", linewidth=0.8, color="k")
    ax1.set_xticks([i + 0.4 - width / 2 for i in range(len(sources))])
    ax1.set_xticklabels(sources, rotation=30, ha="right")
    ax1.set_ylabel("accepted length (tokens / verify step)")
    ax1.set_title("acceptance per source (dashed: corpus estimate)")
    if ax1.get_legend_handles_labels()[0]:
        ax1.legend(fontsize=8)
    for s in sources:
        pts = sorted(
            (r["concurrency"], r["output_tok_s"])
            for r in rows
            if r["source"] == s and r["output_tok_s"] is not None
        )
        if pts:
            ax2.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=s)
    concurrency_axis(ax2, levels)
    ax2.set_xlabel("concurrency")
    ax2.set_ylabel("output tok/s")
    ax2.set_title("throughput vs concurrency")
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(fontsize=8)
    fig.tight_layout()
    atomic_write_bytes(path, _png(fig))
    return True


def write_summary_files(out: Path, summary: dict[str, Any], meta: dict[str, Any]) -> None:
    """Write ``summary.json`` (last: its presence marks a result), ``summary.md`` and the plot."""
    atomic_write_bytes(out / SUMMARY_MD, render_summary(summary).encode())
    _plot(summary, out / PLOT_NAME)
    atomic_write_bytes(
        out / SUMMARY_JSON,
        orjson.dumps(summary, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n",
    )


def render_compare(cmp: dict[str, Any]) -> str:
    """Markdown of :func:`distprompt.benchmark.stats.compare`."""
    lines = [f"# {cmp['a']} vs {cmp['b']} (speedup = output tok/s of {cmp['a']} / {cmp['b']})", ""]
    lines += _table(
        [
            "concurrency",
            f"corpus tok/s {cmp['a']}",
            f"corpus tok/s {cmp['b']}",
            "corpus speedup [95% CI]",
        ],
        [
            [
                str(c["concurrency"]),
                _f(c.get("tok_s_a"), ".1f"),
                _f(c.get("tok_s_b"), ".1f"),
                f"{c['speedup']:.3f} [{c['ci_low']:.3f}, {c['ci_high']:.3f}]",
            ]
            for c in cmp["corpus"]
        ],
    )
    lines += [
        "",
        "Corpus tok/s: output tokens per request over seconds per request, each summed over the "
        "sources weighted by their share of the corpus rows (the throughput of serving the "
        "corpus's mix); the speedup is their ratio.",
        "",
    ]
    lines += _table(
        ["source", "c", f"tok/s {cmp['a']}", f"tok/s {cmp['b']}", "speedup [95% CI]"],
        [
            [
                r["source"],
                str(r["concurrency"]),
                f"{r['tok_s_a']:.1f}",
                f"{r['tok_s_b']:.1f}",
                f"{r['speedup']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]",
            ]
            for r in cmp["rows"]
        ],
    )
    lines += ["", "Speculation stops paying (speedup ≤ 1 from this concurrency on):", ""]
    for name, sp in cmp["stops_paying"].items():
        if sp["concurrency"] is None:
            lines.append(f"- {name}: pays at every concurrency measured")
        else:
            sure = "interval wholly ≤ 1" if sp["certain"] else "interval still reaches above 1"
            lines.append(f"- {name}: from concurrency {sp['concurrency']} ({sure})")
    return "\n".join(lines) + "\n"
