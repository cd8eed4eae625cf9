"""What a bench run sends: the windows of a run (per source, or draws that follow the corpus
mix), the concurrency levels, the sources' shares of the corpus, and what kind each recorded
reply is (for the acceptance profiles).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from distprompt.errors import ConfigError
from distprompt.manifest import Manifest
from distprompt.records import SuiteItem

__all__ = [
    "TRAFFIC",
    "Job",
    "levels_of",
    "mixed_draws",
    "reply_kind",
    "source_shares",
    "windows_plan",
]


TRAFFIC = ("per-source", "mixed", "both")


@dataclass(frozen=True, slots=True)
class Job:
    item: SuiteItem
    concurrency: int
    traffic: str = "per-source"
    weight: float | None = None  # None: the item's weight


_TOOL_MARKERS = ("<tool_call>", "<|tool_call", "[TOOL_CALLS]", "<｜tool▁call", "<function=")


_CODE_LINE = re.compile(
    r"^\s*(def |class |import |from \S+ import |#include|function |fn |public |package )", re.M
)


def reply_kind(item: SuiteItem) -> str:
    """What the item's recorded reply is: ``tool call``, ``reasoning``, ``code``, ``prose``, or
    ``unknown`` (no recorded reply), judged on its decoded text in that order of precedence: a
    tool-call marker (``<tool_call>``, ``<|tool_call``, ``[TOOL_CALLS]``, …); a non-empty
    ``<think>…</think>`` block; a code fence or a line opening like code; else prose.

    Example:
        >>> from distprompt.records import Provenance
        >>> it = SuiteItem("a", "s", "p", 1, 1, 1, 0, 1, 1.0, Provenance("f", 1, 0), (1,),
        ...                response="<think>hm</think>ok")
        >>> reply_kind(it)
        'reasoning'
    """
    text = item.response or ""
    if not text.strip():
        return "unknown"
    if any(m in text for m in _TOOL_MARKERS):
        return "tool call"
    head, sep, rest = text.partition("</think>")
    if sep:  # an empty thinking block (thinking switched off) is no reasoning
        if head.replace("<think>", "").strip():
            return "reasoning"
        text = rest
    if "```" in text or _CODE_LINE.search(text):
        return "code"
    return "prose"


def mixed_draws(
    items: Sequence[SuiteItem], shares: Mapping[str, float], n: int, *, seed: int = 0
) -> list[SuiteItem]:
    """``n`` draws of the items, each drawn in proportion to ``p_i = share_s · w_i /
    Σ_{j∈s} w_j`` (traffic that follows the corpus mix), in a seeded interleaved order.

    Systematic sampling with probability proportional to ``p_i`` (items in a seeded random
    order, one random start, ``n`` equal steps along their cumulated ``n·p_i``): each item is
    drawn ``⌊n·p_i⌋`` or ``⌈n·p_i⌉`` times: a window's composition is the mix up to rounding,
    not the mix plus the chance of independent draws, and it repeats items only as the mix
    needs. Each draw then counts once (weight 1) in the ratios of sums, which estimate the same
    ``Σ w'·num / Σ w'·den`` as the per-source windows' item weights do.

    Example:
        >>> from distprompt.records import Provenance
        >>> mk = lambda i, s: SuiteItem(i, s, "p", 1, 1, 1, 0, 1, 1.0, Provenance("f", 1, 0), (1,))
        >>> d = mixed_draws([mk("a", "x"), mk("b", "y")], {"x": 0.9, "y": 0.1}, 1000)
        >>> 850 < sum(it.source == "x" for it in d) < 950
        True
    """
    import numpy as np

    if not items or n <= 0:
        return []
    tot: dict[str, float] = {}
    for it in items:
        tot[it.source] = tot.get(it.source, 0.0) + max(it.weight, 0.0)
    count = Counter(it.source for it in items)
    p = np.asarray(
        [
            shares.get(it.source, 0.0)
            * (max(it.weight, 0.0) / tot[it.source] if tot[it.source] > 0 else 1 / count[it.source])
            for it in items
        ],
        dtype=float,
    )
    if not p.sum() > 0:
        p = np.ones(len(items))
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(items))
    edges = np.concatenate([[0.0], np.cumsum(p[order] / p.sum() * n)])
    edges[-1] = n  # the last edge exactly n, whatever the rounding of the sum
    # the points u, u + 1, …, u + n - 1 and the item whose interval holds each
    hits = np.searchsorted(edges, rng.uniform() + np.arange(n), side="right") - 1
    idx = order[np.minimum(hits, len(items) - 1)]
    rng.shuffle(idx)
    return [items[int(i)] for i in idx]


def source_shares(manifest: Manifest, sources: Sequence[str]) -> dict[str, float]:
    """Each benchmarked source's share of the corpus rows (renormalised over them)."""
    rows = {s: float(e.rows) if (e := manifest.sources.get(s)) else 0.0 for s in sources}
    total = sum(rows.values())
    if total <= 0:  # a suite without row counts: equal shares, said in the summary
        return {s: 1.0 / len(sources) for s in sources} if sources else {}
    return {s: rows[s] / total for s in sorted(sources)}


def windows_plan(
    items: Sequence[SuiteItem],
    traffic: str,
    levels: Sequence[int],
    shares: Mapping[str, float],
    n_mixed: int,
    seed: int,
) -> list[tuple[int, str, str, list[Job]]]:
    """The windows of the run in order: ``(concurrency, traffic, source or "*", jobs)``."""
    out = []
    sources = sorted({it.source for it in items})
    for c in levels:
        if traffic in ("per-source", "both"):
            for src in sources:
                out.append((c, "per-source", src, [Job(it, c) for it in items if it.source == src]))
        if traffic in ("mixed", "both"):
            # the same draws at every level (and in every run of the suite with this seed), so
            # levels and runs compare like with like
            draws = mixed_draws(items, shares, n_mixed, seed=seed)
            out.append((c, "mixed", "*", [Job(it, c, "mixed", 1.0) for it in draws]))
    return out


def levels_of(concurrency: Sequence[int]) -> list[int]:
    levels = list(dict.fromkeys(int(c) for c in concurrency))
    if not levels or any(c < 1 for c in levels):
        raise ConfigError(
            f"--concurrency: expected positive integers such as 1,4,16,64, found {concurrency}"
        )
    return levels
