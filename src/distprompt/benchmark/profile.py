"""Acceptance by draft position, by prompt-length bucket and by reply kind, per source and
weighted to the corpus; and the draft-length advice derived from a run and its baseline.

Every figure is a ratio of weighted sums over the successful requests of the headline traffic
mode, pooled over the concurrency levels (acceptance at temperature 0 does not depend on the
batch):

- *position k* (1-based): ``Σ w·accepted_k / Σ w·steps``, ``accepted_k`` = the request's verify
  steps that accepted at least ``k`` drafts (from its histogram of steps that accepted exactly
  ``j``: ``Σ_{j≥k} hist_j``) — what vLLM's ``vllm:spec_decode_num_accepted_tokens_per_pos``
  counters divided by ``vllm:spec_decode_num_drafts`` give, and what is read from them (their
  window deltas) when no request carries a histogram. ``conditional`` = position ``k`` over
  position ``k − 1``: the chance the drafter's k-th token is right given the ones before were.
- *prompt-length bucket*, *reply kind*: accepted length and acceptance rate of the requests in
  the group (:func:`request_parts`, also the parts every figure of
  :mod:`distprompt.benchmark.stats` is made of).
- *corpus*: each request weighted ``w' = share_s · w_i / Σ_{j∈s} w_j`` (the sum over all of
  source ``s``'s requests of the mode, not just the group's), then ``Σ w'·num / Σ w'·den`` over
  the group: the group's figure as the corpus's traffic would show it.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["LENGTH_BUCKETS", "acceptance_profiles", "advice", "length_bucket", "request_parts"]

#: Lower bounds of the prompt-length buckets, in tokens.
LENGTH_BUCKETS = (0, 512, 2048, 8192, 32768)


def _k(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 else str(n)


def length_bucket(n_prompt_tokens: int) -> str:
    """The bucket of a prompt length: ``<512``, ``512-2k``, ``2k-8k``, ``8k-32k``, ``≥32k``.

    Example:
        >>> length_bucket(100), length_bucket(5000), length_bucket(40000)
        ('<512', '2k-8k', '≥32k')
    """
    b = LENGTH_BUCKETS
    for lo, hi in itertools.pairwise(b[1:]):
        if lo <= n_prompt_tokens < hi:
            return f"{_k(lo)}-{_k(hi)}"
    return f"<{_k(b[1])}" if n_prompt_tokens < b[1] else f"≥{_k(b[-1])}"


def _bucket_order(name: str) -> int:
    labels = [length_bucket(lo) for lo in LENGTH_BUCKETS]
    return labels.index(name) if name in labels else len(labels)


def request_parts(r: Mapping[str, Any], fig: str) -> tuple[float, float, bool] | None:
    """Numerator and denominator of one request's ``fig`` as the server sums them.

    ``accept_length``: ``(accept_length × steps, steps)`` — SGLang's completion tokens or vLLM's
    steps + accepted drafts over the verify steps. ``accept_rate``: ``(accepted, drafted)``.
    When the server did not report the denominator, it is estimated (steps = output tokens /
    accepted length; drafts ∝ steps, else 1) and the third value is True.

    Returns:
        ``(num, den, estimated)``, or None when the request has no such figure.

    Example:
        >>> request_parts({"accept_length": 2.5, "spec_steps": 4}, "accept_length")
        (10.0, 4.0, False)
    """
    if fig == "accept_length":
        v = r.get("accept_length")
        if v is None:
            return None
        steps = r.get("spec_steps")
        if steps:
            return float(v) * steps, float(steps), False
        out = r.get("output_tokens") or 0
        den = out / float(v) if out and v > 0 else 1.0
        return float(v) * den, den, True
    acc, drafted = r.get("spec_accepted"), r.get("spec_drafted")
    if acc is not None and drafted:
        return float(acc), float(drafted), False
    v = r.get("accept_rate")
    if v is None:
        return None
    den = float(r.get("spec_steps") or 1.0)  # a server proposes a fixed number of drafts a step
    return float(v) * den, den, True


def _ok(r: Mapping[str, Any]) -> bool:
    return r.get("error_kind") is None


def _corpus_weights(reqs: Sequence[Mapping[str, Any]], shares: Mapping[str, float]) -> list[float]:
    tot: dict[str, float] = defaultdict(float)
    for r in reqs:
        tot[r["source"]] += float(r["weight"])
    present = {s for s in tot if shares.get(s, 0.0) > 0}
    norm = sum(shares[s] for s in present) or 1.0
    return [
        shares.get(r["source"], 0.0) / norm * float(r["weight"]) / tot[r["source"]]
        if tot[r["source"]] > 0
        else 0.0
        for r in reqs
    ]


def _ratio(pairs: Sequence[tuple[float, float, float]]) -> float | None:
    """``Σ w·num / Σ w·den`` of ``(num, den, w)``."""
    den = sum(w * d for _, d, w in pairs)
    return sum(w * n for n, _, w in pairs) / den if den > 0 else None


def _positions(r: Mapping[str, Any]) -> tuple[list[float], float] | None:
    """Steps that accepted at least k drafts (k = 1…) and the steps, from the histogram."""
    h = r.get("spec_histogram")
    if not h or not _ok(r):
        return None
    steps = float(sum(h))
    if steps <= 0:
        return None
    return [float(sum(h[k:])) for k in range(1, len(h))], steps


def _by_position(
    reqs: Sequence[dict[str, Any]],
    windows: Sequence[Mapping[str, Any]],
    shares: Mapping[str, float],
) -> dict[str, Any]:
    have = [(r, p) for r in reqs if (p := _positions(r)) is not None]
    rows: list[dict[str, Any]] = []
    if have:
        depth = max(len(p[0]) for _, p in have)
        cw = _corpus_weights([r for r, _ in have], shares)
        groups: dict[str, list[tuple[list[float], float, float]]] = defaultdict(list)
        for (r, (acc, steps)), w2 in zip(have, cw, strict=True):
            acc = acc + [0.0] * (depth - len(acc))
            groups[r["source"]].append((acc, steps, float(r["weight"])))
            groups["corpus"].append((acc, steps, w2))
        for name, g in sorted(groups.items(), key=lambda kv: (kv[0] == "corpus", kv[0])):
            rates = [_ratio([(a[k], st, w) for a, st, w in g]) for k in range(depth)]
            rows.append({"source": name, "accepted": rates, "requests": len(g)})
        origin = "per-request histogram"
    else:  # counters: per source, per window's deltas summed over levels
        per: dict[str, list[float]] = {}
        drafts: dict[str, float] = defaultdict(float)
        for w in windows:
            pp = w.get("per_pos") or []
            if not pp or not w.get("drafts"):
                continue
            cur = per.setdefault(w["source"], [])
            cur += [0.0] * (len(pp) - len(cur))
            for i, v in enumerate(pp):
                cur[i] += v
            drafts[w["source"]] += w["drafts"]
        if not per:
            return {"from": None, "rows": []}
        depth = max(len(v) for v in per.values())
        n_ok: dict[str, int] = defaultdict(int)
        for r in reqs:
            n_ok[r["source"]] += _ok(r)
        for src in sorted(per):
            v = per[src] + [0.0] * (depth - len(per[src]))
            rows.append(
                {
                    "source": src,
                    "accepted": [x / drafts[src] for x in v],
                    "requests": n_ok.get(src),
                }
            )
        srcs = [s for s in per if shares.get(s, 0.0) > 0 and n_ok.get(s)]
        if srcs:  # each source's counter sums per request, weighted by its share
            den = sum(shares[s] * drafts[s] / n_ok[s] for s in srcs)
            num = [
                sum(shares[s] * (per[s] + [0.0] * depth)[k] / n_ok[s] for s in srcs)
                for k in range(depth)
            ]
            rows.append({"source": "corpus", "accepted": [x / den for x in num], "requests": None})
        elif "*" in per:  # a mixed window: its counters are the mix
            rows = [dict(r, source="corpus") if r["source"] == "*" else r for r in rows]
        origin = "counters"
    for row in rows:
        acc = row["accepted"]
        row["conditional"] = [
            (a / acc[k - 1] if acc[k - 1] else None) if k else a for k, a in enumerate(acc)
        ]
        row["accept_length"] = 1.0 + sum(a for a in acc if a is not None)
    return {"from": origin, "rows": rows}


def _grouped(
    reqs: Sequence[dict[str, Any]], shares: Mapping[str, float], key: str
) -> list[dict[str, Any]]:
    ok = [r for r in reqs if _ok(r)]
    cw = _corpus_weights(ok, shares)
    out = []
    keys = sorted(
        {r[key] for r in ok if r.get(key) is not None},
        key=_bucket_order if key == "length_bucket" else str,
    )
    for g in keys:
        for who in [*sorted({r["source"] for r in ok}), "corpus"]:
            row: dict[str, Any] = {key: g, "source": who}
            n = 0
            for fig in ("accept_length", "accept_rate"):
                pairs = []
                for r, w2 in zip(ok, cw, strict=True):
                    if r[key] != g or (who != "corpus" and r["source"] != who):
                        continue
                    p = request_parts(r, fig)
                    if p is not None:
                        pairs.append((p[0], p[1], w2 if who == "corpus" else float(r["weight"])))
                row[fig] = _ratio(pairs)
                n = max(n, len(pairs))
            row["requests"] = sum(
                1 for r in ok if r[key] == g and (who == "corpus" or r["source"] == who)
            )
            row["with_figures"] = n
            if row["requests"]:
                out.append(row)
    return out


def acceptance_profiles(
    requests: Sequence[dict[str, Any]],
    windows: Sequence[Mapping[str, Any]],
    shares: Mapping[str, float],
) -> dict[str, Any]:
    """Acceptance by draft position, by prompt-length bucket and by reply kind (module
    docstring), per source and for the corpus.

    Returns:
        ``{"by_position": {"from", "rows": [{"source", "accepted", "conditional",
        "accept_length", "requests"}]}, "by_length": [...], "by_kind": [...]}``; the last two
        rows ``{"length_bucket" | "reply_kind", "source", "accept_length", "accept_rate",
        "requests", "with_figures"}`` (``source`` ``corpus`` for the weighted figure).
    """
    reqs = [
        {
            **r,
            "length_bucket": length_bucket(int(r["n_prompt_tokens"]))
            if r.get("n_prompt_tokens") is not None
            else None,
            "reply_kind": r.get("reply_kind") or "unknown",
        }
        for r in requests
    ]
    return {
        "by_position": _by_position(reqs, windows, shares),
        "by_length": _grouped(reqs, shares, "length_bucket"),
        "by_kind": _grouped(reqs, shares, "reply_kind"),
    }


def advice(
    position: Sequence[float],
    speedups: Sequence[tuple[int, float]],
    *,
    label: str | None = None,
) -> dict[str, Any] | None:
    """A draft length per concurrency range, from the corpus acceptance by position and the
    measured corpus speedup at each concurrency (see ``docs/bench.md``, *Advice*).

    With ``p_k`` the chance a step accepts at least ``k`` drafts, a draft length ``d`` yields
    ``E(d) = 1 + Σ_{k≤d} p_k`` tokens a step. The run's measured speedup ``S(c)`` at its draft
    length ``D`` gives the cost of a step relative to a plain decode step,
    ``E(D) / S(c) = 1 + D·κ(c)``, so ``κ(c)`` is the cost one draft token adds at ``c``
    (drafting and verifying it). Assuming that cost per token holds for shorter drafts, the
    predicted speedup of ``d`` at ``c`` is ``E(d) / (1 + d·κ(c))``; the advice is the ``d ≤ D``
    that maximises it (0: speculation off, speedup 1). Lengths above ``D`` were not measured and
    are never advised. When ``S(c) > E(D)`` (no cost to explain; κ is clamped at 0) the
    predictions are scaled so that ``d = D`` gives the measured ``S(c)``.

    Args:
        position: Corpus acceptance at positions 1…D (``p_k``).
        speedups: ``(concurrency, corpus speedup)`` of the run over its baseline.
        label: The run the figures come from.

    Returns:
        None without a position profile or speedups.

    Example:
        >>> a = advice([0.8, 0.6, 0.4], [(1, 2.2), (16, 2.0), (64, 0.9), (128, 0.5)])
        >>> [(r["from"], r["to"], r["draft_length"]) for r in a["ranges"]]
        [(1, 16, 3), (64, 64, 1), (128, 128, 0)]
        >>> a["speculation_off_from"]
        128
    """
    p = [float(x) for x in position if x is not None]
    if not p or not speedups:
        return None
    depth = len(p)
    e = [1.0 + sum(p[:d]) for d in range(depth + 1)]
    by_c = []
    for c, s in sorted(speedups):
        kappa = max(0.0, (e[depth] / s - 1.0) / depth) if s > 0 else float("inf")
        # anchored to the measurement: d = D predicts S, d = 0 the baseline (1); they differ
        # from E(d) / (1 + d·κ) only when S > E(D) (κ clamped at 0)
        anchor = s / (e[depth] / (1.0 + depth * kappa)) if s > 0 else 1.0
        pred = [1.0] + [e[d] / (1.0 + d * kappa) * anchor for d in range(1, depth + 1)]
        best = max(range(depth + 1), key=lambda d: (round(pred[d], 9), -d))
        by_c.append(
            {
                "concurrency": c,
                "speedup": s,
                "overhead_per_draft_token": kappa,
                "predicted_speedup": pred,
                "draft_length": best,
            }
        )
    ranges: list[dict[str, Any]] = []
    for row in by_c:
        if ranges and ranges[-1]["draft_length"] == row["draft_length"]:
            ranges[-1]["to"] = row["concurrency"]
        else:
            ranges.append(
                {
                    "from": row["concurrency"],
                    "to": row["concurrency"],
                    "draft_length": row["draft_length"],
                }
            )
    for r in ranges:
        d = r["draft_length"]
        r["vllm"] = f'"num_speculative_tokens": {d}' if d else "no --speculative-config"
        r["sglang"] = (
            f"--speculative-num-steps {d} --speculative-eagle-topk 1 "
            f"--speculative-num-draft-tokens {d + 1}"
            if d
            else "no --speculative-* flags"
        )
    off = next((row["concurrency"] for row in by_c if row["draft_length"] == 0), None)
    return {
        "derived_from": label,
        "draft_length_measured": depth,
        "position_acceptance": p,
        "expected_tokens_per_step": e,
        "by_concurrency": by_c,
        "ranges": ranges,
        "speculation_off_from": off,
    }
