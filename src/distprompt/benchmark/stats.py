"""The figures of a bench run, from its request records: per source × concurrency, per cluster,
the corpus-weighted estimate with its bootstrap interval, and the comparison of two runs.

Every acceptance figure is what a server reports: a ratio of sums over the requests, so long
replies weigh by their length (definitions also in ``docs/bench.md``):

- A *window* is one (source, concurrency) pass; its duration runs from its first request's send
  to its last request's end. Output tok/s = output tokens of its successful requests / duration;
  request/s = successful requests / duration.
- TTFT percentiles are over successful requests; ITL percentiles over all their inter-token gaps
  pooled. Latencies are reported in milliseconds.
- Each successful request gives a figure as a numerator and a denominator (:func:`request_parts`):
  accepted length = tokens / verify steps (``accept_length × steps``: SGLang's completion tokens,
  vLLM's steps + accepted drafts) and acceptance rate = accepted / proposed draft tokens. A
  group's figure is ``Σ w·num / Σ w·den`` with ``w`` the items' ``weight`` (scale-free, so the
  weights' unit does not matter); from counters (vLLM ``/metrics``) it is
  ``1 + accepted / drafts`` and ``accepted / draft_tokens`` of the window's deltas. The item-
  weighted mean of the per-request ratios stays as ``<figure>_mean_per_request``.
- The corpus estimate scales each source's weights to its share of the corpus rows,
  ``w'_i = share_s · w_i / Σ_{j∈s} w_j`` (shares renormalised over the sources that have a
  figure), and is ``Σ w'·num / Σ w'·den``: what the server would report had it served the corpus.
  Its 95% interval is a stratified bootstrap: ``rng = numpy.random.default_rng(seed)``; for each
  source in sorted order draw ``idx = rng.integers(0, n_s, size=(B, n_s))`` over its requests,
  recompute the source's weighted sums with the resampled weights renormalised to its share, the
  corpus ratio of sums, and take the 2.5th and 97.5th percentiles (numpy's linear method) of the
  ``B`` estimates. A source's own interval is the same procedure on that source alone.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from distprompt.benchmark.profile import acceptance_profiles, request_parts

__all__ = [
    "BOOTSTRAP",
    "MIN_CLUSTER_REQUESTS",
    "RatioParts",
    "corpus_estimate",
    "ok_request",
    "request_parts",
    "summarize",
    "traffic_of",
    "traffics",
]

BOOTSTRAP = 2000
MIN_CLUSTER_REQUESTS = 3
SEED = 0
_FIGS = ("accept_length", "accept_rate")
# what each figure divides by, in the name of the count of requests where it was not reported
_DEN = {"accept_length": "steps", "accept_rate": "drafted"}


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else None


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1000.0


def _wmean(values: np.ndarray, weights: np.ndarray) -> float:
    total = weights.sum()
    return float((values * weights).sum() / total) if total > 0 else float(values.mean())


def ok_request(r: dict[str, Any]) -> bool:
    """Whether a request finished without error."""
    return r.get("error_kind") is None


@dataclass(frozen=True, slots=True)
class RatioParts:
    """One figure of a group of successful requests: per request its numerator, denominator and
    item weight; :meth:`ratio` is the server-equivalent figure ``Σ w·num / Σ w·den``.

    Attributes:
        num: Per-request numerators (tokens, accepted drafts).
        den: Per-request denominators (verify steps, proposed drafts).
        weight: Item weights (any unit; only their ratios within the group matter).
        estimated: Requests whose denominator the server did not report (see
            :func:`request_parts`).
    """

    num: tuple[float, ...]
    den: tuple[float, ...]
    weight: tuple[float, ...]
    estimated: int = 0

    @classmethod
    def of(cls, reqs: Iterable[Mapping[str, Any]], fig: str) -> RatioParts:
        """The parts of ``fig`` over the successful requests of ``reqs`` that have it."""
        num: list[float] = []
        den: list[float] = []
        weight: list[float] = []
        estimated = 0
        for r in reqs:
            p = request_parts(r, fig) if r.get("error_kind") is None else None
            if p is None:
                continue
            num.append(p[0])
            den.append(p[1])
            weight.append(float(r["weight"]))
            estimated += p[2]
        return cls(tuple(num), tuple(den), tuple(weight), estimated)

    def __len__(self) -> int:
        return len(self.num)

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        w = np.asarray(self.weight, dtype=float)
        if not w.sum() > 0:  # no usable weights: every request counts the same
            w = np.ones(len(w))
        return np.asarray(self.num, dtype=float), np.asarray(self.den, dtype=float), w

    def ratio(self) -> float | None:
        """``Σ w·num / Σ w·den`` (None without requests)."""
        if not len(self):
            return None
        num, den, w = self._arrays()
        d = float((w * den).sum())
        return float((w * num).sum()) / d if d > 0 else None

    def mean_per_request(self) -> float | None:
        """The item-weighted mean of the per-request ratios (a secondary figure)."""
        if not len(self):
            return None
        num, den, w = self._arrays()
        ok = den > 0
        return _wmean(num[ok] / den[ok], w[ok]) if ok.any() else None


def corpus_estimate(
    per_source: Mapping[str, RatioParts],
    shares: dict[str, float],
    *,
    n_boot: int = BOOTSTRAP,
    seed: int = SEED,
) -> dict[str, Any] | None:
    """The corpus's ratio of sums with each source's weights scaled to its share, and a
    stratified bootstrap interval (see the module docstring).

    Args:
        per_source: ``source -> parts`` of the successful requests.
        shares: Source shares of the corpus rows (renormalised over the sources given).
        n_boot: Bootstrap replicates.
        seed: Seed of the bootstrap generator.

    Returns:
        ``{"estimate", "ci_low", "ci_high", "sources", "n"}``, or None without any value.

    Example:
        >>> a = RatioParts((4.0, 30.0), (2.0, 10.0), (1.0, 1.0))
        >>> round(corpus_estimate({"a": a}, {"a": 1.0}, n_boot=10)["estimate"], 3)
        2.833
    """
    srcs = sorted(s for s, p in per_source.items() if len(p) and shares.get(s, 0) > 0)
    if not srcs:
        return None
    total = sum(shares[s] for s in srcs)
    sh = {s: shares[s] / total for s in srcs}
    rng = np.random.default_rng(seed)
    pn = pd = 0.0
    bn = np.zeros(n_boot)
    bd = np.zeros(n_boot)
    for s in srcs:
        num, den, w = per_source[s]._arrays()
        wn = w / w.sum()
        pn += sh[s] * float((wn * num).sum())
        pd += sh[s] * float((wn * den).sum())
        idx = rng.integers(0, len(num), size=(n_boot, len(num)))
        wb = w[idx]
        sums = wb.sum(axis=1, keepdims=True)
        wb = np.where(sums > 0, wb / np.where(sums > 0, sums, 1.0), 1.0 / len(num))
        bn += sh[s] * (wb * num[idx]).sum(axis=1)
        bd += sh[s] * (wb * den[idx]).sum(axis=1)
    if not pd > 0:
        return None
    boot = np.where(bd > 0, bn / np.where(bd > 0, bd, 1.0), np.nan)
    lo, hi = np.nanpercentile(boot, [2.5, 97.5])
    return {
        "estimate": pn / pd,
        "ci_low": float(lo),
        "ci_high": float(hi),
        "sources": {s: sh[s] for s in srcs},
        "n": int(sum(len(per_source[s]) for s in srcs)),
    }


def _window_figures(reqs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in reqs if ok_request(r)]
    errors = Counter(r["error_kind"] for r in reqs if not ok_request(r))
    start = min(r["start"] for r in reqs)
    end = max(r["end"] for r in reqs)
    dur = end - start
    toks = sum(r["output_tokens"] for r in ok)
    ttft = [r["ttft"] for r in ok if r.get("ttft") is not None]
    itl = [x for r in ok for x in r.get("itl") or ()]
    busy = sum(r["end"] - r["start"] for r in reqs)
    cached = [r for r in ok if r.get("cached_tokens") is not None and r.get("n_prompt_tokens")]
    out: dict[str, Any] = {
        "requests": len(reqs),
        "ok": len(ok),
        "errors": dict(sorted(errors.items())),
        "duration_s": dur,
        "output_tokens": toks,
        "output_tok_s": toks / dur if dur > 0 else None,
        "req_s": len(ok) / dur if dur > 0 else None,
        "mean_in_flight": busy / dur if dur > 0 else None,
        "prompt_cached_fraction": (
            sum(r["cached_tokens"] for r in cached) / sum(r["n_prompt_tokens"] for r in cached)
            if cached
            else None
        ),
    }
    for q in (50, 90, 99):
        out[f"ttft_p{q}_ms"] = _ms(_pct(ttft, q))
        out[f"itl_p{q}_ms"] = _ms(_pct(itl, q))
    return out


def _counter_parts(w: Mapping[str, Any]) -> dict[str, tuple[float, float] | None]:
    """Numerator and denominator of each figure from a window's counter deltas."""
    drafts, dtoks = w.get("drafts", 0.0), w.get("draft_tokens", 0.0)
    acc = w.get("accepted_tokens", 0.0)
    return {
        "accept_length": (drafts + acc, drafts) if drafts > 0 else None,
        "accept_rate": (acc, dtoks) if dtoks > 0 else None,
    }


def _spec_figures(
    fig: dict[str, Any],
    reqs: list[dict[str, Any]],
    counters: Mapping[str, Any] | None,
    *,
    n_boot: int,
    seed: int,
) -> None:
    """A window's acceptance figures, added to ``fig``: per request when the server gave them
    (with a bootstrap interval: the corpus procedure on this source alone), else from its
    counters (no interval)."""
    spec_from = None
    cparts = _counter_parts(counters) if counters is not None else None
    for name in _FIGS:
        parts = RatioParts.of(reqs, name)
        fig[name] = parts.ratio()
        one = corpus_estimate({"s": parts}, {"s": 1.0}, n_boot=n_boot, seed=seed)
        fig[f"{name}_ci_low"] = one["ci_low"] if one else None
        fig[f"{name}_ci_high"] = one["ci_high"] if one else None
        fig[f"{name}_mean_per_request"] = parts.mean_per_request()
        fig[f"{name}_n"] = len(parts)
        fig[f"{name}_{_DEN[name]}_estimated"] = parts.estimated
        if len(parts):
            spec_from = "per-request"
        if cparts is not None:
            cp = cparts[name]
            fig[f"{name}_counters"] = cp[0] / cp[1] if cp is not None else None
            if fig[name] is None and cp is not None:
                fig[name] = cp[0] / cp[1]
                spec_from = spec_from or "counters"
    fig["spec_from"] = spec_from


def _counters_estimate(
    windows: Mapping[str, tuple[Mapping[str, Any], int]], name: str, shares: dict[str, float]
) -> dict[str, Any] | None:
    """The corpus figure from counters alone: each source's counter sums per request, scaled to
    its share, then the ratio of the sums (no interval: there is nothing to resample)."""
    parts = {}
    for s, (w, n) in windows.items():
        cp = _counter_parts(w)[name]
        if cp is not None and n > 0 and shares.get(s, 0.0) > 0:
            parts[s] = (cp[0] / n, cp[1] / n)
    tot = sum(shares[s] for s in parts)
    if not parts or tot <= 0:
        return None
    num = sum(shares[s] * p[0] for s, p in parts.items())
    den = sum(shares[s] * p[1] for s, p in parts.items())
    return {
        "estimate": num / den,
        "ci_low": None,
        "ci_high": None,
        "sources": {s: shares[s] / tot for s in sorted(parts)},
        "n": None,
    }


def traffic_of(r: Mapping[str, Any]) -> str:
    """The traffic mode a request was sent in (``per-source`` for runs before there were two)."""
    return str(r.get("traffic") or "per-source")


def traffics(requests: Iterable[Mapping[str, Any]]) -> list[str]:
    """The traffic modes present, the headline (``mixed`` when it ran) first."""
    present = {traffic_of(r) for r in requests}
    return [t for t in ("mixed", "per-source") if t in present] + sorted(
        present - {"mixed", "per-source"}
    )


def _view(
    requests: Sequence[dict[str, Any]],
    windows: Sequence[dict[str, Any]],
    shares: dict[str, float],
    *,
    interleaved: bool,
    n_boot: int,
    seed: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``by_source`` rows and ``corpus`` entries of one traffic mode."""
    by_win: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in requests:
        by_win[(r["source"], int(r["concurrency"]))].append(r)
    counters = {(w["source"], int(w["concurrency"])): w for w in windows}
    rows = []
    for (src, c), reqs in sorted(by_win.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        fig = _window_figures(reqs)
        _spec_figures(fig, reqs, counters.get((src, c)), n_boot=n_boot, seed=seed)
        rows.append({"source": src, "concurrency": c, **fig})
    levels = sorted({c for _, c in by_win})
    corpus = []
    for c in levels:
        entry: dict[str, Any] = {"concurrency": c}
        reqs_c = [r for (s, cc), rs in by_win.items() if cc == c for r in rs]
        entry.update(_window_figures(reqs_c) if reqs_c else {})
        if not interleaved:
            # the level's duration is the sum of its source windows (they run one after
            # another); in an interleaved run (mixed traffic, AIPerf: every source at once) it
            # is its own span
            dur = sum(row["duration_s"] for row in rows if row["concurrency"] == c)
            toks = sum(row["output_tokens"] for row in rows if row["concurrency"] == c)
            oks = sum(row["ok"] for row in rows if row["concurrency"] == c)
            entry["duration_s"] = dur
            entry["output_tok_s"] = toks / dur if dur > 0 else None
            entry["req_s"] = oks / dur if dur > 0 else None
            entry.pop("mean_in_flight", None)
        for name in _FIGS:
            per_source = {s: RatioParts.of(rs, name) for (s, cc), rs in by_win.items() if cc == c}
            est = corpus_estimate(per_source, shares, n_boot=n_boot, seed=seed)
            if est is None and ("*", c) in counters:  # a mixed window's counters: the mix itself
                cp = _counter_parts(counters[("*", c)])[name]
                if cp is not None:
                    est = {
                        "estimate": cp[0] / cp[1],
                        "ci_low": None,
                        "ci_high": None,
                        "sources": None,
                        "n": None,
                    }
            if est is None:  # counters only
                wins = {
                    s: (counters[(s, c)], sum(1 for r in rs if ok_request(r)))
                    for (s, cc), rs in by_win.items()
                    if cc == c and (s, c) in counters
                }
                est = _counters_estimate(wins, name, shares)
            entry[name] = est
        corpus.append(entry)
    return rows, corpus


def summarize(
    requests: Sequence[dict[str, Any]],
    windows: Sequence[dict[str, Any]],
    meta: dict[str, Any],
    *,
    n_boot: int = BOOTSTRAP,
    seed: int = SEED,
    min_cluster_requests: int = MIN_CLUSTER_REQUESTS,
) -> dict[str, Any]:
    """Every figure of ``summary.json`` from the request records (see the module docstring).

    Each traffic mode that ran gets its own ``by_source`` rows and ``corpus`` entries (tagged
    ``traffic``); ``headline`` names the mode whose corpus estimate leads (``mixed`` when it
    ran: the traffic a server of the training mix sees), and its entries come first.
    """
    shares: dict[str, float] = meta.get("shares", {})
    modes = traffics(requests) or ["per-source"]
    rows: list[dict[str, Any]] = []
    corpus: list[dict[str, Any]] = []
    for t in modes:
        r_t = [r for r in requests if traffic_of(r) == t]
        w_t = [w for w in windows if traffic_of(w) == t]
        vr, vc = _view(
            r_t,
            w_t,
            shares,
            interleaved=bool(meta.get("interleaved")) or t == "mixed",
            n_boot=n_boot,
            seed=seed,
        )
        rows += [{"traffic": t, **x} for x in vr]
        corpus += [{"traffic": t, **x} for x in vc]
    head = [r for r in requests if traffic_of(r) == modes[0]]
    clusters = _clusters(head, min_cluster_requests)  # one mode: weights mean one thing
    errors = Counter(r["error_kind"] for r in requests if not ok_request(r))
    return {
        "meta": meta,
        "requests": len(requests),
        "ok": sum(1 for r in requests if ok_request(r)),
        "errors": dict(sorted(errors.items())),
        "headline": modes[0],
        "traffics": modes,
        "warnings": list(meta.get("warnings") or ()),
        "by_source": rows,
        "corpus": corpus,
        "clusters": clusters,
        "profiles": acceptance_profiles(
            head, [w for w in windows if traffic_of(w) == modes[0]], shares
        ),
        "windows": list(windows),
        "method": {
            "bootstrap": n_boot,
            "seed": seed,
            "estimate": "ratio of item-weighted sums, weights scaled to each source's share",
            "interval": "95% stratified bootstrap over requests",
            "min_cluster_requests": min_cluster_requests,
        },
    }


def _clusters(requests: Sequence[dict[str, Any]], min_n: int) -> list[dict[str, Any]]:
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in requests:
        if ok_request(r):
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
            parts = RatioParts.of(rs, name)
            row[name] = parts.ratio()
            row[f"{name}_mean_per_request"] = parts.mean_per_request()
        ttft = [r["ttft"] for r in rs if r.get("ttft") is not None]
        row["ttft_p50_ms"] = _ms(_pct(ttft, 50))
        out.append(row)
    return out
