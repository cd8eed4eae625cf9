"""The files of a bench result: ``summary.json``, ``summary.md`` and ``summary.png``; and the
markdown of a comparison of two runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from distprompt.write.out_dir import atomic_write_bytes

__all__ = [
    "PLOT_KIND",
    "PLOT_LENGTH",
    "PLOT_NAME",
    "PLOT_POSITION",
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
PLOT_POSITION = "acceptance_by_position.png"
PLOT_LENGTH = "acceptance_by_length.png"
PLOT_KIND = "acceptance_by_kind.png"


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
    lines = _run_lines(summary) + _corpus_lines(summary) + _source_lines(summary)
    lines += _render_profiles(summary.get("profiles") or {})
    lines += _cluster_lines(summary)
    return "\n".join(lines) + "\n"


def _run_lines(summary: dict[str, Any]) -> list[str]:
    """The run: server, requests, traffic, limits, warnings, errors, items not sent."""
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
    lim = meta.get("server_limits") or {}
    lines.append("")
    lines.append(
        f"Traffic: {meta.get('traffic', 'per-source')}"
        + (
            f" ({meta.get('mixed_requests')} draws a level, seed {meta.get('seed')})"
            if meta.get("mixed_requests")
            else ""
        )
        + "; prefix cache flushed before every window: "
        + ("yes" if meta.get("flush_cache") else "no")
        + (
            f" ({', '.join(f'{k} ×{v}' for k, v in meta['flushes'].items())})"
            if meta.get("flushes")
            else ""
        )
        + "; server limits: "
        + (
            ", ".join(
                [f"{k} {lim[k]}" for k in ("max_running_requests", "context_length") if k in lim]
                + [
                    "speculative " + " ".join(f"{k}={v}" for k, v in lim["speculative"].items())
                    for _ in (1,)
                    if lim.get("speculative")
                ]
            )
            or "none exposed"
        )
        + "."
    )
    warnings = summary.get("warnings") or meta.get("warnings") or []
    if warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in warnings]
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
    return lines


def _corpus_lines(summary: dict[str, Any]) -> list[str]:
    """The corpus-weighted estimate per traffic and concurrency."""
    meta = summary["meta"]
    lines: list[str] = []
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
    if len(summary.get("traffics") or ()) > 1:
        lines += [
            f"Headline: the **{summary['headline']}** traffic's estimate (the server fed the "
            "corpus's mix); the per-source windows follow for comparison.",
            "",
        ]
    if "mixed" in (summary.get("traffics") or ()):
        lines[-1:] = [
            "",
            "Mixed traffic draws each request with probability ∝ share × item weight, so there "
            "every request counts once (weight 1) and its throughput is the mixed window's own.",
            "",
        ]
    lines += _table(
        [
            "traffic",
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
                c.get("traffic", "per-source"),
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
    return lines


def _source_lines(summary: dict[str, Any]) -> list[str]:
    """Per source and concurrency, with the requests whose counts were estimated."""
    lines: list[str] = []
    lines += ["", "## Per source and concurrency", ""]
    lines += _table(
        [
            "traffic",
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
                r.get("traffic", "per-source"),
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
        "the per-request mean weighs a short reply as much as a long one. In mixed traffic a "
        "source's row is its share of the mixed window (every source in flight at once).",
    ]
    return lines


def _cluster_lines(summary: dict[str, Any]) -> list[str]:
    """Per cluster, for the clusters with enough successful requests."""
    lines: list[str] = []
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
    return lines


def _render_profiles(prof: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    pos = prof.get("by_position") or {}
    if pos.get("rows"):
        depth = max(len(r["accepted"]) for r in pos["rows"])
        lines += [
            "",
            f"## Acceptance by draft position (from {pos['from']})",
            "",
            "Share of verify steps that accepted the draft at position k (and all before it); "
            "in brackets, given position k − 1 was accepted. Ratios of weighted sums; corpus: "
            "weights scaled to the source shares.",
            "",
        ]
        lines += _table(
            ["source", *[f"pos {k + 1}" for k in range(depth)], "tokens / step"],
            [
                [
                    r["source"],
                    *[
                        f"{_f(a, '.3f')} ({_f(c, '.2f')})"
                        for a, c in zip(r["accepted"], r["conditional"], strict=True)
                    ],
                    _f(r["accept_length"], ".3f"),
                ]
                for r in pos["rows"]
            ],
        )
    for key, title, col in (
        ("by_length", "prompt length", "length_bucket"),
        ("by_kind", "reply kind", "reply_kind"),
    ):
        rows = prof.get(key) or []
        if not rows:
            continue
        lines += ["", f"## Acceptance by {title}", ""]
        lines += _table(
            [title, "source", "requests", "accepted length", "acceptance rate"],
            [
                [
                    str(r[col]),
                    r["source"],
                    str(r["requests"]),
                    _f(r["accept_length"], ".3f"),
                    _f(r["accept_rate"], ".3f"),
                ]
                for r in rows
            ],
        )
    return lines


def _plot_profiles(prof: dict[str, Any], out: Path) -> None:
    from distprompt.write.render import _figure, _png

    pos = (prof.get("by_position") or {}).get("rows") or []
    if pos:
        fig = _figure(figsize=(6, 4))
        ax = fig.subplots()
        for r in pos:
            xs = [k + 1 for k, a in enumerate(r["accepted"]) if a is not None]
            ys = [a for a in r["accepted"] if a is not None]
            corpus = r["source"] == "corpus"
            ax.plot(
                xs,
                ys,
                marker="o",
                label=r["source"],
                linewidth=2.5 if corpus else 1.0,
                color="k" if corpus else None,
            )
        ax.set_xticks(range(1, max(len(r["accepted"]) for r in pos) + 1))
        ax.set_xlabel("draft position")
        ax.set_ylabel("share of steps accepting it")
        ax.set_ylim(0, 1)
        ax.set_title("acceptance by draft position")
        ax.legend(fontsize=8)
        fig.tight_layout()
        atomic_write_bytes(out / PLOT_POSITION, _png(fig))
    for key, col, name in (
        ("by_length", "length_bucket", PLOT_LENGTH),
        ("by_kind", "reply_kind", PLOT_KIND),
    ):
        rows = [r for r in prof.get(key) or [] if r["accept_length"] is not None]
        if not rows:
            continue
        groups = list(dict.fromkeys(str(r[col]) for r in rows))
        who = list(dict.fromkeys(r["source"] for r in rows))
        fig = _figure(figsize=(7, 4))
        ax = fig.subplots()
        width = 0.8 / max(1, len(who))
        for j, s in enumerate(who):
            vals = {str(r[col]): r["accept_length"] for r in rows if r["source"] == s}
            bx = [i + j * width for i, g in enumerate(groups) if g in vals]
            ax.bar(
                bx,
                [vals[g] for g in groups if g in vals],
                width=width,
                label=s,
                color="k" if s == "corpus" else None,
            )
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(groups))])
        ax.set_xticklabels(groups, rotation=20, ha="right")
        ax.set_ylabel("accepted length (tokens / verify step)")
        ax.set_title(f"acceptance by {col.replace('_', ' ')}")
        ax.legend(fontsize=8)
        fig.tight_layout()
        atomic_write_bytes(out / name, _png(fig))


def concurrency_axis(ax: Any, levels: list[int]) -> None:
    """A log-2 x axis labelled with the concurrency levels run, as numbers (1, 2, 4), not 2⁰."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(levels))
    ax.xaxis.set_major_formatter(FixedFormatter([str(c) for c in levels]))
    ax.xaxis.set_minor_locator(NullLocator())


def _plot(summary: dict[str, Any], path: Path) -> bool:
    head = summary.get("headline", "per-source")
    all_rows = summary["by_source"]
    rows = [r for r in all_rows if r.get("traffic", "per-source") == head]
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
        if c.get("traffic", "per-source") != head:
            continue
        est = c.get("accept_length")
        if est:
            ax1.axhline(est["estimate"], linestyle="--", linewidth=0.8, color="k")
    ax1.set_xticks([i + 0.4 - width / 2 for i in range(len(sources))])
    ax1.set_xticklabels(sources, rotation=30, ha="right")
    ax1.set_ylabel("accepted length (tokens / verify step)")
    ax1.set_title(f"acceptance per source, {head} traffic (dashed: corpus)")
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
    for t in summary.get("traffics") or ():
        pts = sorted(
            (c["concurrency"], c["output_tok_s"])
            for c in summary["corpus"]
            if c.get("traffic", "per-source") == t and c.get("output_tok_s") is not None
        )
        if pts:
            ax2.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                marker="s",
                linestyle="--",
                color="k" if t == "mixed" else "grey",
                label=f"corpus ({t})",
            )
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
    _plot_profiles(summary.get("profiles") or {}, out)
    atomic_write_bytes(
        out / SUMMARY_JSON,
        orjson.dumps(summary, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n",
    )


def render_compare(cmp: dict[str, Any]) -> str:
    """Markdown of :func:`distprompt.benchmark.compare.compare`."""
    lines = [f"# {cmp['a']} vs {cmp['b']} (speedup = output tok/s of {cmp['a']} / {cmp['b']})", ""]
    if cmp.get("differences"):
        lines += [
            "**Compared with --force although the runs differ in** "
            + "; ".join(cmp["differences"])
            + ": the speedups mix those differences with the drafter's.",
            "",
        ]
    lines += _table(
        [
            "traffic",
            "concurrency",
            f"corpus tok/s {cmp['a']}",
            f"corpus tok/s {cmp['b']}",
            "corpus speedup [95% CI]",
        ],
        [
            [
                c.get("traffic", "per-source"),
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
        "Corpus tok/s: mixed traffic, the mixed window's own output tok/s (the server was fed the "
        "corpus's mix; the headline when it ran); per-source, output tokens per request over "
        "seconds per request, each summed over the sources weighted by their share of the corpus "
        "rows. The speedup is their ratio.",
        "",
    ]
    lines += _table(
        ["traffic", "source", "c", f"tok/s {cmp['a']}", f"tok/s {cmp['b']}", "speedup [95% CI]"],
        [
            [
                r.get("traffic", "per-source"),
                r["source"],
                str(r["concurrency"]),
                f"{r['tok_s_a']:.1f}",
                f"{r['tok_s_b']:.1f}",
                f"{r['speedup']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]",
            ]
            for r in cmp["rows"]
        ],
    )
    lines += [
        "",
        f"Speculation stops paying ({cmp.get('headline', 'per-source')} traffic; speedup ≤ 1 "
        "from this concurrency on):",
        "",
    ]
    for name, sp in cmp["stops_paying"].items():
        if sp["concurrency"] is None:
            lines.append(f"- {name}: pays at every concurrency measured")
        else:
            sure = "interval wholly ≤ 1" if sp["certain"] else "interval still reaches above 1"
            lines.append(f"- {name}: from concurrency {sp['concurrency']} ({sure})")
    lines += _render_advice(cmp.get("advice"))
    return "\n".join(lines) + "\n"


def _render_advice(adv: dict[str, Any] | None) -> list[str]:
    if not adv:
        return [
            "",
            "No draft-length advice: the run has no acceptance by draft position (per-request "
            "histograms or vLLM per-position counters).",
        ]
    d = adv["draft_length_measured"]
    e = adv["expected_tokens_per_step"]
    lines = [
        "",
        f"## Advice (derived from this run, {adv['derived_from']}, and this baseline)",
        "",
        f"Measured at draft length D = {d}: acceptance by position "
        + ", ".join(f"p{k + 1} = {p:.3f}" for k, p in enumerate(adv["position_acceptance"]))
        + "; so a draft of d tokens yields E(d) = 1 + p1 + … + pd tokens a step: "
        + ", ".join(f"E({k}) = {v:.3f}" for k, v in enumerate(e))
        + ". At each concurrency the measured speedup S gives the cost one draft token adds "
        f"to a step, κ = (E({d}) / S − 1) / {d}; assuming that cost per token also holds for "
        "shorter drafts, d predicts a speedup E(d) / (1 + d·κ), and the advice is the best "
        f"d ≤ {d} (0 = speculation off; longer drafts were not measured).",
        "",
    ]
    lines += _table(
        ["concurrency", "measured speedup", "κ", "predicted speedup d = 0…D", "advised d"],
        [
            [
                str(r["concurrency"]),
                f"{r['speedup']:.3f}",
                f"{r['overhead_per_draft_token']:.3f}",
                " / ".join(f"{x:.2f}" for x in r["predicted_speedup"]),
                str(r["draft_length"]),
            ]
            for r in adv["by_concurrency"]
        ],
    )
    lines += ["", "Suggested draft length per concurrency range:", ""]
    for r in adv["ranges"]:
        span = f"{r['from']}" if r["from"] == r["to"] else f"{r['from']}–{r['to']}"
        lines.append(
            f"- concurrency {span}: d = {r['draft_length']} "
            f"(vLLM {r['vllm']}; SGLang {r['sglang']})"
        )
    off = adv.get("speculation_off_from")
    lines.append(
        f"- speculation stops paying from concurrency {off} by this model"
        if off is not None
        else "- by this model speculation pays at every concurrency measured"
    )
    return lines
