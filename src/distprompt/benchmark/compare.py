"""``bench-compare``: the speedup of a speculative run over its baseline per source ×
concurrency and for the corpus, with bootstrap intervals, where speculation stops paying, and
the draft-length advice; runs of different settings are refused unless forced.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from distprompt.benchmark.profile import advice
from distprompt.benchmark.stats import BOOTSTRAP, SEED, ok_request, traffic_of

__all__ = ["compare", "settings_differences"]


@dataclass(frozen=True, slots=True)
class _WindowBoot:
    """A window's output tokens and seconds per request, and their bootstrap replicates.

    ``tokens / seconds`` is the window's output tok/s; seconds per request is the window's
    duration / its requests, and in a replicate the resampled mean latency scaled by the
    window's mean number of requests in flight.
    """

    tokens: float
    seconds: float
    boot_tokens: np.ndarray
    boot_seconds: np.ndarray


def _window_boot(reqs: list[dict[str, Any]], rng: np.random.Generator, n_boot: int) -> _WindowBoot:
    toks = np.asarray([r["output_tokens"] if ok_request(r) else 0 for r in reqs], dtype=float)
    lat = np.asarray([r["end"] - r["start"] for r in reqs], dtype=float)
    dur = max(r["end"] for r in reqs) - min(r["start"] for r in reqs)
    in_flight = float(lat.sum() / dur) if dur > 0 else 0.0
    idx = rng.integers(0, len(reqs), size=(n_boot, len(reqs)))
    secs = lat[idx].mean(axis=1) / in_flight if in_flight > 0 else np.zeros(n_boot)
    return _WindowBoot(float(toks.mean()), dur / len(reqs), toks[idx].mean(axis=1), secs)


def _speed(tokens: Any, seconds: Any) -> Any:
    """tok/s, 0 where no time passed."""
    return np.where(seconds > 0, tokens / np.where(seconds > 0, seconds, 1.0), 0.0)


def settings_differences(a: Any, b: Any) -> list[str]:
    """What makes two runs not comparable: suite, model, max_tokens, temperature, ignore_eos
    or traffic mode, each as ``name (A vs B)``; empty when they agree.

    The suite is compared by its fingerprint (the items sent and their ``max_tokens``) when both
    runs have one, else by the item ids of their requests; ``max_tokens`` per item id.
    """
    out = []
    ma, mb = a.meta, b.meta
    fa, fb = ma.get("suite_fingerprint"), mb.get("suite_fingerprint")
    ids_a = {r["id"] for r in a.requests}
    ids_b = {r["id"] for r in b.requests}
    if (fa and fb and fa != fb) or (not (fa and fb) and ids_a != ids_b):
        out.append(
            f"suite ({ma.get('suite')} [{fa or len(ids_a)}] vs {mb.get('suite')} "
            f"[{fb or len(ids_b)}])"
        )
    if ma.get("model") != mb.get("model"):
        out.append(f"model ({ma.get('model')} vs {mb.get('model')})")
    mt_a = {r["id"]: r.get("max_tokens") for r in a.requests if r.get("max_tokens") is not None}
    mt_b = {r["id"]: r.get("max_tokens") for r in b.requests if r.get("max_tokens") is not None}
    diff = sorted(i for i in set(mt_a) & set(mt_b) if mt_a[i] != mt_b[i])
    if diff:
        out.append(
            f"max_tokens ({len(diff)} items, e.g. {diff[0]}: {mt_a[diff[0]]} vs {mt_b[diff[0]]})"
        )
    for key in ("temperature", "ignore_eos"):
        if ma.get(key) != mb.get(key):
            out.append(f"{key} ({ma.get(key)} vs {mb.get(key)})")
    ta, tb = ma.get("traffic", "per-source"), mb.get("traffic", "per-source")
    if ta != tb:
        out.append(f"traffic ({ta} vs {tb})")
    return out


def compare(
    a: Any,
    b: Any,
    *,
    n_boot: int = BOOTSTRAP,
    seed: int = SEED,
    force: bool = False,
) -> dict[str, Any]:
    """Speedup of run ``a`` over baseline ``b`` (output tok/s ratio) per source × concurrency,
    the corpus speedup per concurrency, where speculation stops paying, and the draft-length
    advice derived from ``a``'s acceptance by position and these speedups.

    The corpus speedup of per-source windows is the ratio of the two runs' server-equivalent
    throughputs: each run's output tokens per request over its seconds per request, each summed
    over the sources weighted by their shares of the corpus rows — the tok/s of serving the
    corpus's mix. Of mixed traffic it is the ratio of the mixed windows' own tok/s (the mix was
    served). Each traffic mode both runs have gets its rows (tagged ``traffic``); the headline
    (mixed when both ran it) leads and gives ``stops_paying`` and the advice.

    Args:
        a, b: :class:`~distprompt.benchmark.run.BenchResults` (``a`` the speculative server).
        force: Compare even when :func:`settings_differences` finds differences (they are kept
            in ``differences``).

    Returns:
        ``{"a", "b", "differences", "headline", "rows", "corpus", "stops_paying", "advice"}``;
        every speedup with a 95% bootstrap interval (requests resampled within each window of
        both runs).

    Raises:
        ConfigError: The runs differ in a setting and ``force`` is not set.
    """
    from distprompt.errors import ConfigError

    diffs = settings_differences(a, b)
    if diffs and not force:
        raise ConfigError(
            f"bench-compare: expected two runs of the same settings, found different "
            f"{'; '.join(diffs)}; rerun one of them alike, or pass --force to compare anyway"
        )
    rng = np.random.default_rng(seed)

    wa, wb = _windows(a), _windows(b)
    keys = sorted(set(wa) & set(wb), key=lambda k: (k[0] != "mixed", k[2], k[1]))
    shares = a.meta.get("shares") or b.meta.get("shares") or {}
    rows, boots = _window_rows(wa, wb, keys, rng, n_boot)
    modes = [t for t in ("mixed", "per-source") if any(k[0] == t for k in keys)]
    corpus = _corpus_rows(wa, wb, boots, keys, modes, shares, rng, n_boot)
    head = modes[0] if modes else "per-source"
    stops = _stops_paying(
        [r for r in rows if r["traffic"] == head], [c for c in corpus if c["traffic"] == head]
    )
    pos = next(
        (
            r["accepted"]
            for r in (a.summary.get("profiles") or {}).get("by_position", {}).get("rows", [])
            if r["source"] == "corpus"
        ),
        None,
    )
    adv = advice(
        pos or [],
        [(c["concurrency"], c["speedup"]) for c in corpus if c["traffic"] == head],
        label=a.meta.get("label"),
    )
    return {
        "a": a.meta.get("label"),
        "b": b.meta.get("label"),
        "differences": diffs,
        "headline": head,
        "rows": rows,
        "corpus": corpus,
        "stops_paying": stops,
        "advice": adv,
    }


def _windows(res: Any) -> dict[tuple[str, str, int], list[dict[str, Any]]]:
    """A run's requests by window: ``(traffic, source, concurrency)``."""
    out: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in res.requests:
        out[(traffic_of(r), r["source"], int(r["concurrency"]))].append(r)
    return out


_Boots = dict[tuple[str, str, int], tuple["_WindowBoot", "_WindowBoot"]]


def _window_rows(
    wa: dict[tuple[str, str, int], list[dict[str, Any]]],
    wb: dict[tuple[str, str, int], list[dict[str, Any]]],
    keys: list[tuple[str, str, int]],
    rng: np.random.Generator,
    n_boot: int,
) -> tuple[list[dict[str, Any]], _Boots]:
    """The speedup of each window both runs have, and the windows' bootstrap draws."""
    rows = []
    boots: _Boots = {}
    for k in keys:
        ba, bb = _window_boot(wa[k], rng, n_boot), _window_boot(wb[k], rng, n_boot)
        pa, pb = float(_speed(ba.tokens, ba.seconds)), float(_speed(bb.tokens, bb.seconds))
        if pb <= 0:
            continue
        boots[k] = (ba, bb)
        sa, sb = _speed(ba.boot_tokens, ba.boot_seconds), _speed(bb.boot_tokens, bb.boot_seconds)
        lo, hi = np.nanpercentile(
            np.where(sb > 0, sa / np.where(sb > 0, sb, 1.0), np.nan), [2.5, 97.5]
        )
        rows.append(
            {
                "traffic": k[0],
                "source": k[1],
                "concurrency": k[2],
                "tok_s_a": pa,
                "tok_s_b": pb,
                "speedup": pa / pb,
                "ci_low": float(lo),
                "ci_high": float(hi),
            }
        )
    return rows, boots


def _corpus_rows(
    wa: dict[tuple[str, str, int], list[dict[str, Any]]],
    wb: dict[tuple[str, str, int], list[dict[str, Any]]],
    boots: _Boots,
    keys: list[tuple[str, str, int]],
    modes: list[str],
    shares: dict[str, float],
    rng: np.random.Generator,
    n_boot: int,
) -> list[dict[str, Any]]:
    """The corpus speedup per traffic mode and concurrency (see :func:`compare`)."""
    corpus: list[dict[str, Any]] = []
    for t in modes:
        for c in sorted({k[2] for k in keys if k[0] == t}):
            if t == "mixed":
                whole_a = [r for (tt, _, cc), rs in wa.items() if tt == t and cc == c for r in rs]
                whole_b = [r for (tt, _, cc), rs in wb.items() if tt == t and cc == c for r in rs]
                wins = {
                    0: [(1.0, _window_boot(whole_a, rng, n_boot))],
                    1: [(1.0, _window_boot(whole_b, rng, n_boot))],
                }
            else:
                srcs = sorted(
                    s for tt, s, cc in boots if tt == t and cc == c and shares.get(s, 0) > 0
                )
                if not srcs:
                    continue
                wins = {
                    side: [(shares[s], boots[(t, s, c)][side]) for s in srcs] for side in (0, 1)
                }
            sums = {
                side: (
                    sum(sh * w.tokens for sh, w in wins[side]),
                    sum(sh * w.seconds for sh, w in wins[side]),
                    sum(sh * w.boot_tokens for sh, w in wins[side]),
                    sum(sh * w.boot_seconds for sh, w in wins[side]),
                )
                for side in (0, 1)
            }
            ta, tb = _speed(sums[0][0], sums[0][1]), _speed(sums[1][0], sums[1][1])
            if not tb > 0:
                continue
            boot_a, boot_b = _speed(sums[0][2], sums[0][3]), _speed(sums[1][2], sums[1][3])
            ratio = np.where(boot_b > 0, boot_a / np.where(boot_b > 0, boot_b, 1.0), np.nan)
            lo, hi = np.nanpercentile(ratio, [2.5, 97.5])
            corpus.append(
                {
                    "traffic": t,
                    "concurrency": c,
                    "speedup": float(ta / tb),
                    "tok_s_a": float(ta),
                    "tok_s_b": float(tb),
                    "ci_low": float(lo),
                    "ci_high": float(hi),
                }
            )
    return corpus


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
