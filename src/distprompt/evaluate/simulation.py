"""``distprompt simulate``: how well a suite estimates what a server would measure on the corpus.

Every item's recorded reply is run through model-free drafters (:mod:`.drafters`); the suite's
estimate of a figure is a weighted ratio of sums, as a server reports it (tokens per verify step
= Σ w·tokens / Σ w·steps, acceptance rate = Σ w·accepted / Σ w·drafted), per source and for the
corpus mix. Item weights come from ``suite.jsonl``; across sources each source's weights are
scaled to its corpus share (``w'_i = share_s · w_i / Σ_{j in s} w_j``), which works whether the
weights sum to 1 per source or count the corpus rows an item represents. A stratified bootstrap
(items resampled within their source) gives a 95 % interval.

With the corpus (``data``), one streaming pass simulates every row (prompt =
``input_ids[:n_prompt_tokens]``, reply = the first trained span after it), so each figure has its
exact corpus value; the suite's error is compared with ``random_samples`` uniform random samples
per source of the suite's size (rows without replacement, equal weights), drawn from the per-row
counts kept during the pass (``4 × drafters`` int32 a row).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from distprompt.errors import ConfigError, InputError, api_spelling
from distprompt.evaluate.drafters import DEFAULT_DRAFTERS, Drafter, SpecCounts, simulate_many
from distprompt.manifest import Manifest

if TYPE_CHECKING:
    from distprompt.records import SuiteItem
    from distprompt.write.suite import Suite

logger = logging.getLogger("distprompt.evaluate.simulation")

__all__ = [
    "FIGURES",
    "MIX",
    "Simulation",
    "SimulationRow",
    "simulate_suite",
    "speculation_verdict",
]

#: Figure name -> (numerator, denominator) columns of the per-row counts.
FIGURES: dict[str, tuple[int, int]] = {"tokens_per_step": (0, 1), "acceptance_rate": (3, 2)}
#: The scope name of the corpus mix (every source at its corpus share).
MIX = "all"
JSON_NAME = "simulate.json"
MD_NAME = "simulate.md"
_COLS = 4  # tokens, steps, drafted, accepted
BOOTSTRAP = 1000


@dataclass(frozen=True, slots=True)
class SimulationRow:
    """One figure of one drafter on one scope (a source or :data:`MIX`).

    Attributes:
        scope: Source name, or :data:`MIX` for the corpus mix.
        drafter: :attr:`Drafter.name`.
        figure: A key of :data:`FIGURES`.
        items: Suite items in the scope.
        suite: The suite's weighted estimate; ``low``/``high`` its 95 % bootstrap interval.
        corpus: The exact corpus value (None without the corpus).
        suite_error: ``|suite - corpus|``.
        random_median_error: Median error of the uniform random samples of the suite's size.
        random_better: Share of those random samples whose error is smaller than the suite's.
    """

    scope: str
    drafter: str
    figure: str
    items: int
    suite: float
    low: float
    high: float
    corpus: float | None = None
    suite_error: float | None = None
    random_median_error: float | None = None
    random_better: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "drafter": self.drafter,
            "figure": self.figure,
            "items": self.items,
            "suite": _num(self.suite),
            "suite_low": _num(self.low),
            "suite_high": _num(self.high),
            "corpus": _num(self.corpus),
            "suite_error": _num(self.suite_error),
            "random_median_error": _num(self.random_median_error),
            "random_better": _num(self.random_better),
        }


@dataclass(frozen=True, slots=True)
class Simulation:
    """What ``distprompt simulate`` measured (:func:`simulate_suite`).

    Attributes:
        drafters: The drafter names, in the order given.
        rows: One :class:`SimulationRow` per scope, drafter and figure.
        shares: Corpus share of each source (rows), the mix's weights.
        corpus_rows: Rows simulated per source (empty without the corpus).
        random_samples: Random samples per source the suite was compared with.
        seed: Seed of the bootstrap and of the random samples.
        missing_sources: Sources of the corpus the suite has no item of (left out of its mix).
    """

    drafters: tuple[str, ...]
    rows: tuple[SimulationRow, ...]
    shares: dict[str, float]
    corpus_rows: dict[str, int]
    random_samples: int
    seed: int
    missing_sources: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The ``simulate.json`` object."""
        return {
            "drafters": list(self.drafters),
            "figures": list(FIGURES),
            "shares": self.shares,
            "corpus_rows": self.corpus_rows,
            "random_samples": self.random_samples,
            "bootstrap": BOOTSTRAP,
            "seed": self.seed,
            "missing_sources": list(self.missing_sources),
            "rows": [r.to_dict() for r in self.rows],
        }

    def table(self) -> str:
        """A Markdown table of every row (what the CLI prints and ``simulate.md`` holds)."""
        with_corpus = bool(self.corpus_rows)
        head = ["scope", "drafter", "figure", "items", "suite", "95% interval"]
        if with_corpus:
            head += ["corpus", "suite error", "random median error", "random better"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in self.rows:
            pct = r.figure == "acceptance_rate"
            cells = [
                r.scope,
                r.drafter,
                r.figure,
                str(r.items),
                _fmt(r.suite, pct),
                f"{_fmt(r.low, pct)} – {_fmt(r.high, pct)}",
            ]
            if with_corpus:
                cells += [
                    _fmt(r.corpus, pct),
                    _fmt(r.suite_error, pct),
                    _fmt(r.random_median_error, pct),
                    _fmt(r.random_better, True),
                ]
            lines.append("| " + " | ".join(cells) + " |")
        notes = [
            "",
            "tokens_per_step = Σ w·tokens / Σ w·steps (the prefill's token counted, its step "
            "not); acceptance_rate = Σ w·accepted / Σ w·drafted; simulated from the recorded "
            "replies with greedy verification.",
        ]
        if with_corpus:
            notes.append(
                f"random: {self.random_samples} uniform samples per source of the suite's size; "
                "random better = share of them closer to the corpus than the suite."
            )
        if self.missing_sources:
            notes.append(
                "sources without items (the corpus mix counts them, the suite's cannot): "
                + ", ".join(self.missing_sources)
            )
        return "\n".join(lines + notes)


def _num(v: float | None) -> float | None:
    return None if v is None or not np.isfinite(v) else round(float(v), 6)


def _fmt(v: float | None, pct: bool) -> str:
    if v is None or not np.isfinite(v):
        return "–"
    return f"{100 * v:.1f}%" if pct else f"{v:.3f}"


@api_spelling
def simulate_suite(
    suite: str | os.PathLike[str] | Suite,
    *,
    data: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
    drafters: Sequence[Drafter | str] | None = None,
    random_samples: int = 20,
    seed: int = 0,
    out: str | os.PathLike[str] | None = None,
    glob: str | None = None,
    progress: bool = False,
) -> Simulation:
    """Simulate model-free drafters on a suite's replies and, with the corpus, on every row.

    Args:
        suite: A suite folder written by ``distprompt export`` (or a loaded ``Suite``).
        data: The corpus the suite was exported from. Needed for the exact corpus figures, the
            comparison with random samples, and for suites whose items carry no
            ``response_ids`` (written before they were kept).
        drafters: Drafters or their names (:meth:`Drafter.parse`); default
            :data:`~distprompt.evaluate.drafters.DEFAULT_DRAFTERS`.
        random_samples: Uniform random samples per source the suite is compared with.
        seed: Seed of the bootstrap and of the random samples.
        out: Folder to write ``simulate.json`` and ``simulate.md`` into (created if needed);
            None writes nothing.
        glob: Which files of a DATA folder are shards (as ``distprompt export --glob``).
        progress: Show a progress bar over the corpus rows (stderr).

    Raises:
        ConfigError: A bad option, or replies missing without ``data``.
        InputError: No suite at ``suite``, or ``data`` is not the suite's corpus.

    Example:
        >>> sim = simulate_suite("out/", data="prepared/", out="out/")  # doctest: +SKIP
        >>> print(sim.table())  # doctest: +SKIP
    """
    from distprompt.write.suite import Suite as SuiteClass

    chosen = _drafters(drafters)
    if random_samples < 0:
        raise ConfigError(
            f"--random-samples: expected a count >= 0, found {random_samples}; pass 0 or more"
        )
    loaded = suite if isinstance(suite, SuiteClass) else SuiteClass.load(suite)
    items = list(loaded)
    if not items:
        raise InputError("suite: expected at least one item, found none; export a suite first")
    corpus: _Corpus | None = None
    if data is not None:
        corpus = _Corpus.read(data, chosen, items, glob=glob, progress=progress)
    item_counts = _item_counts(items, chosen, corpus)
    shares = _shares(loaded.manifest, items, corpus)
    sim = _measure(items, item_counts, shares, chosen, corpus, random_samples, seed)
    if out is not None:
        _save(sim, Path(out))
    return sim


def _drafters(drafters: Sequence[Drafter | str] | None) -> list[Drafter]:
    chosen = [
        d if isinstance(d, Drafter) else Drafter.parse(d) for d in (drafters or DEFAULT_DRAFTERS)
    ]
    names = [d.name for d in chosen]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(
            f"--drafter: expected each drafter once, found {', '.join(dup)} more than once; "
            "name each setting once"
        )
    return chosen


def _row(counts: dict[str, SpecCounts], drafters: Sequence[Drafter]) -> list[int]:
    out: list[int] = []
    for d in drafters:
        c = counts[d.name]
        out += [c.tokens, c.steps, c.drafted, c.accepted]
    return out


@dataclass(slots=True)
class _Corpus:
    """Per-row counts of every row, by source, and the counts of the suite's own rows."""

    counts: dict[str, np.ndarray]  # source -> (rows, drafters, 4) int32
    at_items: dict[int, np.ndarray]  # item index -> (drafters, 4), the item's row

    @classmethod
    def read(
        cls,
        data: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        drafters: Sequence[Drafter],
        items: Sequence[SuiteItem],
        *,
        glob: str | None,
        progress: bool,
    ) -> _Corpus:
        where = {(it.provenance.shard, it.provenance.line): i for i, it in enumerate(items)}
        per_source: dict[str, array[int]] = {}
        at_items: dict[int, np.ndarray] = {}
        for source, shard, line, prompt, reply in _rows(data, glob=glob, progress=progress):
            row = _row(simulate_many(prompt, reply, drafters), drafters)
            per_source.setdefault(source, array("i")).extend(row)
            i = where.get((shard, line))
            if i is not None:
                it = items[i]
                if it.source != source or tuple(prompt.tolist()) != it.prompt_ids:
                    raise InputError(
                        f"{shard}:{line}: expected the prompt of suite item {it.id} "
                        f"({it.source}, {it.n_prompt_tokens} tokens), found another "
                        f"({source}, {len(prompt)} tokens); pass the DATA the suite was exported "
                        "from"
                    )
                at_items[i] = np.array(row, dtype=np.int64).reshape(-1, _COLS)
        counts = {
            s: np.frombuffer(a, dtype=np.int32).reshape(-1, len(drafters), _COLS).astype(np.int64)
            for s, a in sorted(per_source.items())
        }
        if not counts:
            raise InputError("DATA: expected rows, found none; pass the suite's corpus")
        return cls(counts=counts, at_items=at_items)


def _rows(
    data: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    glob: str | None,
    progress: bool,
) -> Iterator[tuple[str, str, int, np.ndarray, np.ndarray]]:
    """``(source, shard, line, prompt, reply)`` of every row, one shard after the other."""
    from distprompt.read.fastrow import read_row
    from distprompt.read.shards import discover_shards, iter_rows

    shards = discover_shards(data, warn=lambda m: logger.warning("%s", m), glob=glob)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(unit="row", desc="simulate", leave=True)
    try:
        for shard in shards:
            for row in iter_rows(shard, parse=read_row):
                start, end = row.first_response_span()
                prov = row.provenance
                yield row.source, prov.shard, prov.line, row.prompt_ids, row.ids(start, end)
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()


def _item_counts(
    items: Sequence[SuiteItem], drafters: Sequence[Drafter], corpus: _Corpus | None
) -> np.ndarray:
    """``(items, drafters, 4)`` counts of the suite's items: from their ``response_ids``, else
    from their row in the corpus."""
    out = np.zeros((len(items), len(drafters), _COLS), dtype=np.int64)
    lacking = []
    for i, it in enumerate(items):
        if corpus is not None and i in corpus.at_items:
            out[i] = corpus.at_items[i]  # simulated in the pass: the same prompt and reply
        elif it.response_ids is not None:
            counts = simulate_many(np.array(it.prompt_ids), np.array(it.response_ids), drafters)
            out[i] = np.array(_row(counts, drafters)).reshape(-1, _COLS)
        else:
            lacking.append(it)
    if lacking and corpus is None:
        raise ConfigError(
            f"suite.jsonl: expected response_ids in every item, found {len(lacking)} of "
            f"{len(items)} without (a suite exported before they were kept); pass --data DATA, "
            "the corpus it was exported from, to read the replies from it"
        )
    if lacking:
        it = lacking[0]
        raise InputError(
            f"{it.provenance.shard}:{it.provenance.line}: expected the row of suite item {it.id} "
            f"in DATA, found no such line ({len(lacking)} items missing); pass the DATA the "
            "suite was exported from"
        )
    return out


def _shares(
    manifest: Manifest, items: Sequence[SuiteItem], corpus: _Corpus | None
) -> dict[str, float]:
    """Corpus share of each source: its rows in DATA when read, else the manifest's."""
    if corpus is not None:
        rows = {s: int(c.shape[0]) for s, c in corpus.counts.items()}
    else:
        rows = {s: e.rows for s, e in manifest.sources.items()}
    missing = sorted({it.source for it in items} - {s for s, n in rows.items() if n > 0})
    if missing:
        raise InputError(
            f"{'DATA' if corpus is not None else 'manifest.json'}: expected rows of every "
            f"source of the suite, found none of {', '.join(missing)}; pass the suite's corpus"
        )
    total = sum(rows.values())
    return {s: n / total for s, n in sorted(rows.items())}


def _ratio(sums: np.ndarray, figure: str) -> np.ndarray:
    """A figure from summed counts (``(..., 4)``); NaN where the denominator is 0."""
    num, den = FIGURES[figure]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(sums[..., den] > 0, sums[..., num] / sums[..., den], np.nan)


def _weights(items: Sequence[SuiteItem], idx: np.ndarray, source: str) -> np.ndarray:
    w = np.array([items[i].weight for i in idx], dtype=np.float64)
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise InputError(
            f"suite.jsonl: expected non-negative weights with a positive sum for source "
            f"{source}, found {w.tolist()[:5]}; export the suite again"
        )
    return w


def _measure(
    items: Sequence[SuiteItem],
    item_counts: np.ndarray,
    shares: dict[str, float],
    drafters: Sequence[Drafter],
    corpus: _Corpus | None,
    random_samples: int,
    seed: int,
) -> Simulation:
    """Suite estimates, bootstrap intervals and, with the corpus, errors against random."""
    boot_seq, rand_seq = np.random.SeedSequence(seed).spawn(2)
    boot_rng, rand_rng = np.random.default_rng(boot_seq), np.random.default_rng(rand_seq)
    sources = sorted({it.source for it in items})
    source_of = np.array([it.source for it in items])
    mean: dict[str, np.ndarray] = {}  # scope -> (drafters, 4): weighted mean counts of the suite
    boot: dict[str, np.ndarray] = {}  # scope -> (B, drafters, 4)
    n_items: dict[str, int] = {}
    for s in sources:
        idx = np.flatnonzero(source_of == s)
        w = _weights(items, idx, s)
        c = item_counts[idx].astype(np.float64)
        n_items[s] = len(idx)
        mean[s] = np.einsum("i,idk->dk", w, c) / w.sum()
        pick = boot_rng.integers(0, len(idx), size=(BOOTSTRAP, len(idx)))
        wb = w[pick]
        boot[s] = np.einsum("bi,bidk->bdk", wb, c[pick]) / wb.sum(axis=1)[:, None, None]
    mean[MIX] = _mix(mean, shares, sources)
    boot[MIX] = _mix(boot, shares, sources)
    n_items[MIX] = len(items)
    truth: dict[str, np.ndarray] = {}
    rand: dict[str, np.ndarray] = {}
    if corpus is not None:
        for s, c in corpus.counts.items():
            truth[s] = c.mean(axis=0)
        truth[MIX] = _mix(truth, shares, list(corpus.counts))
        for s in sources:
            c = corpus.counts[s]
            size = min(n_items[s], c.shape[0])
            rand[s] = (
                np.stack(
                    [
                        c[rand_rng.choice(c.shape[0], size=size, replace=False)].mean(axis=0)
                        for _ in range(random_samples)
                    ]
                )
                if random_samples
                else np.zeros((0, len(drafters), _COLS))
            )
        rand[MIX] = _mix(rand, shares, sources)
    rows = [
        _figure_row(scope, j, d.name, f, n_items[scope], mean, boot, truth, rand)
        for scope in [*sources, MIX]
        for j, d in enumerate(drafters)
        for f in FIGURES
    ]
    return Simulation(
        drafters=tuple(d.name for d in drafters),
        rows=tuple(rows),
        shares=shares,
        corpus_rows={s: int(c.shape[0]) for s, c in corpus.counts.items()} if corpus else {},
        random_samples=random_samples if corpus is not None else 0,
        seed=seed,
        missing_sources=tuple(s for s in shares if s not in n_items),
    )


def _mix(
    parts: dict[str, np.ndarray], shares: dict[str, float], sources: Sequence[str]
) -> np.ndarray:
    """The corpus mix of per-source mean counts: Σ share_s · part_s (ratios of these sums weight
    every source by its share and every item by its weight within it)."""
    return np.sum([shares[s] * parts[s] for s in sources], axis=0)


def _figure_row(
    scope: str,
    j: int,
    name: str,
    figure: str,
    items: int,
    mean: dict[str, np.ndarray],
    boot: dict[str, np.ndarray],
    truth: dict[str, np.ndarray],
    rand: dict[str, np.ndarray],
) -> SimulationRow:
    est = float(_ratio(mean[scope][j], figure))
    b = _ratio(boot[scope][:, j], figure)
    b = b[np.isfinite(b)]
    low, high = (float(v) for v in np.percentile(b, [2.5, 97.5])) if b.size else (np.nan,) * 2
    if scope not in truth:
        return SimulationRow(scope, name, figure, items, est, low, high)
    true = float(_ratio(truth[scope][j], figure))
    err = abs(est - true)
    r = np.abs(_ratio(rand[scope][:, j], figure) - true)
    r = r[np.isfinite(r)]
    return SimulationRow(
        scope,
        name,
        figure,
        items,
        est,
        low,
        high,
        corpus=true,
        suite_error=err,
        random_median_error=float(np.median(r)) if r.size else None,
        random_better=float(np.mean(r < err)) if r.size and np.isfinite(err) else None,
    )


def _save(sim: Simulation, out: Path) -> None:
    import orjson

    from distprompt.write.out_dir import atomic_write_bytes

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        from distprompt.errors import OutputError

        raise OutputError(
            f"{out}: expected a folder to write {JSON_NAME} into, found {exc.strerror}; "
            "pass another --out"
        ) from exc
    data = orjson.dumps(sim.to_dict(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    atomic_write_bytes(out / JSON_NAME, data + b"\n")
    atomic_write_bytes(
        out / MD_NAME, ("# Simulated speculative decoding\n\n" + sim.table() + "\n").encode()
    )
    _into_report(sim, out)


def speculation_verdict(sim: Simulation) -> str:
    """One line: how the suite's corpus-mix estimates compare with random samples of its size."""
    mix = [r for r in sim.rows if r.scope == MIX]
    judged = [r for r in mix if r.random_better is not None]
    if not judged:
        return (
            "Simulated speculation (model-free drafters): the suite's estimates only; run "
            "`distprompt simulate SUITE --data DATA` to compare them with the whole corpus."
        )
    worst = max(judged, key=lambda r: (r.random_better or 0.0, r.drafter, r.figure))
    beaten = 1.0 - (worst.random_better or 0.0)
    return (
        f"Simulated speculation (model-free drafters, corpus mix): the suite's estimate is closer "
        f"to the whole corpus than {100 * beaten:.0f}% or more of {sim.random_samples} uniform "
        f"random samples of its size in each of {len(judged)} figures (worst: {worst.drafter} "
        f"{worst.figure})."
    )


def _into_report(sim: Simulation, out: Path) -> None:
    """Put the verdict and the corpus mix's rows into the suite's report (when ``out`` holds
    one), and render it again: the report shows speculation beside coverage and lengths."""
    from distprompt.write.report import REPORT_JSON, Report

    if not (out / REPORT_JSON).is_file():
        return
    report = dataclasses.replace(
        Report.load(out),
        speculation={
            "verdict": speculation_verdict(sim),
            "random_samples": sim.random_samples,
            "rows": [r.to_dict() for r in sim.rows if r.scope == MIX],
        },
    )
    report.write(out)
