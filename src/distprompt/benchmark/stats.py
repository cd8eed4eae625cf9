"""The figures of a bench run, from its request records: per source × concurrency, per cluster,
the corpus-weighted estimate with its bootstrap interval, and the comparison of two runs.

Definitions (also in ``docs/bench.md``):

- A *window* is one (source, concurrency) pass; its duration runs from its first request's send
  to its last request's end. Output tok/s = output tokens of its successful requests / duration;
  request/s = successful requests / duration.
- TTFT percentiles are over successful requests; ITL percentiles over all their inter-token gaps
  pooled. Latencies are reported in milliseconds.
- A source's accepted length (tokens per verify step, bonus token included) and acceptance rate
  (accepted / proposed draft tokens) are the means of the per-request figures weighted by the
  items' ``weight``; from counters (vLLM ``/metrics``) they are ``1 + accepted / drafts`` and
  ``accepted / draft_tokens`` of the window's deltas.
- The corpus estimate is ``sum_s share_s * mean_s`` with ``share_s`` the source's share of the
  corpus rows (manifest), renormalised over the sources that have a figure. Its 95% interval is a
  stratified bootstrap: ``rng = numpy.random.default_rng(seed)``; for each source in sorted
  order draw ``idx = rng.integers(0, n_s, size=(B, n_s))`` over its requests, recompute the
  weighted means and the weighted sum, and take the 2.5th and 97.5th percentiles (numpy's linear
  method) of the ``B`` estimates.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["BOOTSTRAP", "MIN_CLUSTER_REQUESTS", "compare", "corpus_estimate", "summarize"]

BOOTSTRAP = 2000
MIN_CLUSTER_REQUESTS = 3
SEED = 0
_FIGS = ("accept_length", "accept_rate")


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else None


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1000.0


def _wmean(values: np.ndarray, weights: np.ndarray) -> float:
    total = weights.sum()
    return float((values * weights).sum() / total) if total > 0 else float(values.mean())


def _ok(r: dict[str, Any]) -> bool:
    return r.get("error_kind") is None


def corpus_estimate(
    per_source: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    shares: dict[str, float],
    *,
    n_boot: int = BOOTSTRAP,
    seed: int = SEED,
) -> dict[str, Any] | None:
    """Share-weighted mean of per-source weighted means, with a stratified bootstrap interval.

    Args:
        per_source: ``source -> (values, item weights)`` of the successful requests.
        shares: Source shares of the corpus rows (renormalised over the sources given).
        n_boot: Bootstrap replicates.
        seed: Seed of the bootstrap generator.

    Returns:
        ``{"estimate", "ci_low", "ci_high", "sources", "n"}``, or None without any value.
    """
    srcs = sorted(s for s, (v, _) in per_source.items() if len(v) and shares.get(s, 0) > 0)
    if not srcs:
        return None
    total = sum(shares[s] for s in srcs)
    sh = {s: shares[s] / total for s in srcs}
    rng = np.random.default_rng(seed)
    point = 0.0
    boot = np.zeros(n_boot)
    for s in srcs:
        v = np.asarray(per_source[s][0], dtype=float)
        w = np.asarray(per_source[s][1], dtype=float)
        point += sh[s] * _wmean(v, w)
        idx = rng.integers(0, len(v), size=(n_boot, len(v)))
        wb = w[idx]
        sums = wb.sum(axis=1)
        means = np.where(
            sums > 0, (v[idx] * wb).sum(axis=1) / np.where(sums > 0, sums, 1.0), v[idx].mean(axis=1)
        )
        boot += sh[s] * means
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return {
        "estimate": point,
        "ci_low": float(lo),
        "ci_high": float(hi),
        "sources": {s: sh[s] for s in srcs},
        "n": int(sum(len(per_source[s][0]) for s in srcs)),
    }


def _window_figures(reqs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in reqs if _ok(r)]
    errors = Counter(r["error_kind"] for r in reqs if not _ok(r))
    start = min(r["start"] for r in reqs)
    end = max(r["end"] for r in reqs)
    dur = end - start
    toks = sum(r["output_tokens"] for r in ok)
    ttft = [r["ttft"] for r in ok if r.get("ttft") is not None]
    itl = [x for r in ok for x in r.get("itl") or ()]
    busy = sum(r["end"] - r["start"] for r in reqs)
    out: dict[str, Any] = {
        "requests": len(reqs),
        "ok": len(ok),
        "errors": dict(sorted(errors.items())),
        "duration_s": dur,
        "output_tokens": toks,
        "output_tok_s": toks / dur if dur > 0 else None,
        "req_s": len(ok) / dur if dur > 0 else None,
        "mean_in_flight": busy / dur if dur > 0 else None,
    }
    for q in (50, 90, 99):
        out[f"ttft_p{q}_ms"] = _ms(_pct(ttft, q))
        out[f"itl_p{q}_ms"] = _ms(_pct(itl, q))
    return out


def _spec_values(reqs: list[dict[str, Any]], fig: str) -> tuple[list[float], list[float]]:
    rs = [r for r in reqs if _ok(r) and r.get(fig) is not None]
    return [float(r[fig]) for r in rs], [float(r["weight"]) for r in rs]


def _from_counters(w: dict[str, Any]) -> dict[str, float | None]:
    drafts, dtoks = w.get("drafts", 0.0), w.get("draft_tokens", 0.0)
    acc = w.get("accepted_tokens", 0.0)
    return {
        "accept_length": 1.0 + acc / drafts if drafts > 0 else None,
        "accept_rate": acc / dtoks if dtoks > 0 else None,
    }


def summarize(
    requests: Sequence[dict[str, Any]],
    windows: Sequence[dict[str, Any]],
    meta: dict[str, Any],
    *,
    n_boot: int = BOOTSTRAP,
    seed: int = SEED,
    min_cluster_requests: int = MIN_CLUSTER_REQUESTS,
) -> dict[str, Any]:
    """Every figure of ``summary.json`` from the request records (see the module docstring)."""
    shares: dict[str, float] = meta.get("shares", {})
    by_win: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in requests:
        by_win[(r["source"], int(r["concurrency"]))].append(r)
    counters = {(w["source"], int(w["concurrency"])): w for w in windows}
    rows = []
    for (src, c), reqs in sorted(by_win.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        fig = _window_figures(reqs)
        spec_from = None
        for name in _FIGS:
            vals, ws = _spec_values(reqs, name)
            fig[name] = _wmean(np.asarray(vals), np.asarray(ws)) if vals else None
            fig[f"{name}_n"] = len(vals)
            if vals:
                spec_from = "per-request"
        if (src, c) in counters:
            cf = _from_counters(counters[(src, c)])
            for name in _FIGS:
                fig[f"{name}_counters"] = cf[name]
                if fig[name] is None and cf[name] is not None:
                    fig[name] = cf[name]
                    spec_from = spec_from or "counters"
        fig["spec_from"] = spec_from
        rows.append({"source": src, "concurrency": c, **fig})
    levels = sorted({c for _, c in by_win})
    corpus = []
    for c in levels:
        entry: dict[str, Any] = {"concurrency": c}
        reqs_c = [r for (s, cc), rs in by_win.items() if cc == c for r in rs]
        entry.update(_window_figures(reqs_c) if reqs_c else {})
        # the whole level's duration is the sum of its source windows (they run one after another)
        dur = sum(row["duration_s"] for row in rows if row["concurrency"] == c)
        toks = sum(row["output_tokens"] for row in rows if row["concurrency"] == c)
        oks = sum(row["ok"] for row in rows if row["concurrency"] == c)
        entry["duration_s"] = dur
        entry["output_tok_s"] = toks / dur if dur > 0 else None
        entry["req_s"] = oks / dur if dur > 0 else None
        entry.pop("mean_in_flight", None)
        for name in _FIGS:
            per_source = {s: _spec_values(rs, name) for (s, cc), rs in by_win.items() if cc == c}
            est = corpus_estimate(per_source, shares, n_boot=n_boot, seed=seed)
            if est is None:  # counters only: share-weighted, no interval
                means = {
                    row["source"]: float(row[name])
                    for row in rows
                    if row["concurrency"] == c and row[name] is not None
                }
                tot = sum(shares.get(s, 0.0) for s in means)
                if tot > 0:
                    est = {
                        "estimate": sum(shares.get(s, 0.0) * v for s, v in means.items()) / tot,
                        "ci_low": None,
                        "ci_high": None,
                        "sources": {s: shares.get(s, 0.0) / tot for s in sorted(means)},
                        "n": None,
                    }
            entry[name] = est
        corpus.append(entry)
    clusters = _clusters(requests, min_cluster_requests)
    errors = Counter(r["error_kind"] for r in requests if not _ok(r))
    return {
        "meta": meta,
        "requests": len(requests),
        "ok": sum(1 for r in requests if _ok(r)),
        "errors": dict(sorted(errors.items())),
        "by_source": rows,
        "corpus": corpus,
        "clusters": clusters,
        "windows": list(windows),
        "method": {
            "bootstrap": n_boot,
            "seed": seed,
            "interval": "95% stratified bootstrap over requests",
            "min_cluster_requests": min_cluster_requests,
        },
    }


def _clusters(requests: Sequence[dict[str, Any]], min_n: int) -> list[dict[str, Any]]:
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in requests:
        if _ok(r):
            groups[(r["source"], int(r["cluster"]))].append(r)
    out = []
    for (src, cl), rs in sorted(groups.items()):
        if len(rs) < min_n:
            continue
        row: dict[str, Any] = {
            "source": src,
            "cluster": cl,
            "requests": len(rs),
            "items": len({r["id"] for r in rs}),
        }
        for name in _FIGS:
            vals = [float(r[name]) for r in rs if r.get(name) is not None]
            row[name] = float(np.mean(vals)) if vals else None
        ttft = [r["ttft"] for r in rs if r.get("ttft") is not None]
        row["ttft_p50_ms"] = _ms(_pct(ttft, 50))
        out.append(row)
    return out


def _window_boot(
    reqs: list[dict[str, Any]], rng: np.random.Generator, n_boot: int
) -> tuple[float, np.ndarray]:
    """Output tok/s of a window and its bootstrap replicates.

    A replicate resamples the window's requests and scales ``sum(tokens) / sum(latency)`` by the
    window's mean number of requests in flight, so the point estimate is the window's tok/s.
    """
    toks = np.asarray([r["output_tokens"] if _ok(r) else 0 for r in reqs], dtype=float)
    lat = np.asarray([r["end"] - r["start"] for r in reqs], dtype=float)
    dur = max(r["end"] for r in reqs) - min(r["start"] for r in reqs)
    point = float(toks.sum() / dur) if dur > 0 else 0.0
    scale = float(lat.sum() / dur) if dur > 0 else 0.0
    idx = rng.integers(0, len(reqs), size=(n_boot, len(reqs)))
    lsum = lat[idx].sum(axis=1)
    boot = np.where(lsum > 0, toks[idx].sum(axis=1) / np.where(lsum > 0, lsum, 1.0), 0.0) * scale
    return point, boot


def compare(
    a: Any,
    b: Any,
    *,
    n_boot: int = BOOTSTRAP,
    seed: int = SEED,
) -> dict[str, Any]:
    """Speedup of run ``a`` over baseline ``b`` (output tok/s ratio) per source × concurrency,
    the corpus-weighted speedup per concurrency, and where speculation stops paying.

    Args:
        a, b: :class:`~distprompt.benchmark.run.BenchResults` (``a`` the speculative server).

    Returns:
        ``{"a", "b", "rows", "corpus", "stops_paying"}``; every speedup with a 95% bootstrap
        interval (requests resampled within each window of both runs).
    """
    rng = np.random.default_rng(seed)

    def windows(res: Any) -> dict[tuple[str, int], list[dict[str, Any]]]:
        out: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
        for r in res.requests:
            out[(r["source"], int(r["concurrency"]))].append(r)
        return out

    wa, wb = windows(a), windows(b)
    keys = sorted(set(wa) & set(wb), key=lambda k: (k[1], k[0]))
    shares = a.meta.get("shares") or b.meta.get("shares") or {}
    rows = []
    boots: dict[tuple[str, int], np.ndarray] = {}
    for k in keys:
        pa, ba = _window_boot(wa[k], rng, n_boot)
        pb, bb = _window_boot(wb[k], rng, n_boot)
        if pb <= 0:
            continue
        ratio = np.where(bb > 0, ba / np.where(bb > 0, bb, 1.0), np.nan)
        boots[k] = ratio
        lo, hi = np.nanpercentile(ratio, [2.5, 97.5])
        rows.append(
            {
                "source": k[0],
                "concurrency": k[1],
                "tok_s_a": pa,
                "tok_s_b": pb,
                "speedup": pa / pb,
                "ci_low": float(lo),
                "ci_high": float(hi),
            }
        )
    corpus = []
    for c in sorted({k[1] for k in boots}):
        srcs = sorted(s for s, cc in boots if cc == c and shares.get(s, 0) > 0)
        if not srcs:
            continue
        tot = sum(shares[s] for s in srcs)
        speed = {r["source"]: r["speedup"] for r in rows if r["concurrency"] == c}
        point = float(sum(shares[s] / tot * speed[s] for s in srcs))
        boot = sum(shares[s] / tot * boots[(s, c)] for s in srcs)
        lo, hi = np.nanpercentile(boot, [2.5, 97.5])
        corpus.append(
            {"concurrency": c, "speedup": point, "ci_low": float(lo), "ci_high": float(hi)}
        )
    return {
        "a": a.meta.get("label"),
        "b": b.meta.get("label"),
        "rows": rows,
        "corpus": corpus,
        "stops_paying": _stops_paying(rows, corpus),
    }


def _stops_paying(rows: list[dict[str, Any]], corpus: list[dict[str, Any]]) -> dict[str, Any]:
    """The lowest concurrency from which the speedup stays at or below 1 (None: it always pays),
    and whether the interval there lies wholly at or below 1."""

    def first(series: list[dict[str, Any]]) -> dict[str, Any]:
        series = sorted(series, key=lambda r: r["concurrency"])
        for i, r in enumerate(series):
            if all(x["speedup"] <= 1.0 for x in series[i:]):
                return {"concurrency": r["concurrency"], "certain": r["ci_high"] <= 1.0}
        return {"concurrency": None, "certain": None}

    out: dict[str, Any] = {"corpus": first(corpus)}
    for src in sorted({r["source"] for r in rows}):
        out[src] = first([r for r in rows if r["source"] == src])
    return out
