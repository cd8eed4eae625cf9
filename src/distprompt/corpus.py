"""What is in a corpus, from one streaming pass — before any decision is made.

:func:`distprompt.inspect_corpus` reuses the suite's pass (:func:`distprompt.read.scan.scan`, with
bad rows counted and skipped rather than raised), so the figures are the ones an export would see:
shards, rows and bytes; per source the share of rows and of tokens, exact length quantiles, trained
assistant turns (runs of 1s in ``loss_mask``), duplicate prompts (exact up to the pool size, a
k-minimum-values estimate beyond) and every schema anomaly by kind with its first ``shard:line``.

With a tokenizer, the checks of :mod:`distprompt.recover.checks` (``vocabulary``,
``template_markers``, ``round_trip``) say whether it is the data's — the same checks, from the same
code, as ``export`` runs; :meth:`CorpusInfo.raise_for_mismatch` raises a
:class:`~distprompt.errors.TokenizerError` that names the failed check and the rows. Rows with ids
outside the vocabulary are bad rows (``id_out_of_vocab``), counted and left out of the figures like
every other bad row.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from distprompt.errors import TokenizerError, api_spelling
from distprompt.records import Shard, histogram_quantiles
from distprompt.recover.checks import TokenizerFigures
from distprompt.write.render import format_table

if TYPE_CHECKING:
    from distprompt.read.scan import Partial

__all__ = [
    "Anomaly",
    "CorpusInfo",
    "Quantiles",
    "ShardFigures",
    "SourceFigures",
    "corpus_info",
    "length_quantiles",
]

logger = logging.getLogger("distprompt.corpus")


@dataclass(frozen=True, slots=True)
class Quantiles:
    """Nearest-rank quantiles of a length distribution (in tokens)."""

    min: int
    p50: int
    p90: int
    p99: int
    max: int
    mean: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "min": self.min,
            "p50": self.p50,
            "p90": self.p90,
            "p99": self.p99,
            "max": self.max,
            "mean": round(self.mean, 3),
        }


def length_quantiles(counts: Mapping[int, int]) -> Quantiles | None:
    """Nearest-rank quantiles of an exact length histogram (``{length: rows}``).

    ``pXX`` is the smallest length ``v`` with at least ``XX%`` of the rows at or below ``v``.

    Example:
        >>> q = length_quantiles({n: 1 for n in range(1, 101)})
        >>> (q.p50, q.p90, q.p99, q.max)
        (50, 90, 99, 100)
    """
    qs = histogram_quantiles(counts, (0.0, 0.5, 0.9, 0.99, 1.0))
    if not qs:
        return None
    n = sum(int(v) for v in counts.values() if v > 0)
    mean = sum(int(k) * int(v) for k, v in counts.items() if v > 0) / n
    return Quantiles(min=qs[0], p50=qs[1], p90=qs[2], p99=qs[3], max=qs[4], mean=mean)


@dataclass(frozen=True, slots=True)
class ShardFigures:
    """One shard: its name relative to DATA, its size on disk and its valid rows."""

    name: str
    bytes: int
    rows: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.bytes, "rows": self.rows}


@dataclass(frozen=True, slots=True)
class SourceFigures:
    """What one source holds.

    Attributes:
        source: The source name.
        rows: Valid rows.
        share_rows: Share of the corpus's valid rows.
        tokens: Sum of ``seq_len`` (prompt + response tokens).
        share_tokens: Share of the corpus's tokens.
        prompt_tokens: Quantiles of ``n_prompt_tokens``.
        response_tokens: Quantiles of ``n_response_tokens``.
        total_tokens: Quantiles of ``seq_len``.
        trained_turns: ``total`` trained assistant turns (runs of 1s in ``loss_mask``), ``mean``
            and ``max`` per row, ``rows_multi`` rows with more than one.
        unique_prompts: Distinct prompts (exact when ``unique_exact``, else a KMV estimate).
        unique_exact: Whether ``unique_prompts`` is exact.
        duplicate_rows: Rows whose prompt an earlier row already had (``rows - unique``).
        flags: Valid rows flagged by a check, by reason.
        round_trip: Share of the sampled prompts that decode and re-encode to the same ids
            (None without a tokenizer).
        round_trip_sampled: How many prompts were sampled for it.
        prompt_lengths: Exact histogram ``{n_prompt_tokens: rows}``.
        response_lengths: Exact histogram ``{n_response_tokens: rows}``.
        total_lengths: Exact histogram ``{seq_len: rows}``.
    """

    source: str
    rows: int
    share_rows: float
    tokens: int
    share_tokens: float
    prompt_tokens: Quantiles | None
    response_tokens: Quantiles | None
    total_tokens: Quantiles | None
    trained_turns: dict[str, float]
    unique_prompts: int
    unique_exact: bool
    duplicate_rows: int
    flags: dict[str, int]
    round_trip: float | None = None
    round_trip_sampled: int = 0
    prompt_lengths: dict[int, int] = field(default_factory=dict, repr=False)
    response_lengths: dict[int, int] = field(default_factory=dict, repr=False)
    total_lengths: dict[int, int] = field(default_factory=dict, repr=False)

    def to_dict(self, *, histograms: bool = False) -> dict[str, Any]:
        """JSON object; the exact histograms only when ``histograms``."""
        d: dict[str, Any] = {
            "rows": self.rows,
            "share_rows": round(self.share_rows, 6),
            "tokens": self.tokens,
            "share_tokens": round(self.share_tokens, 6),
            "prompt_tokens": self.prompt_tokens.to_dict() if self.prompt_tokens else None,
            "response_tokens": self.response_tokens.to_dict() if self.response_tokens else None,
            "total_tokens": self.total_tokens.to_dict() if self.total_tokens else None,
            "trained_turns": self.trained_turns,
            "unique_prompts": self.unique_prompts,
            "unique_exact": self.unique_exact,
            "duplicate_rows": self.duplicate_rows,
            "flags": dict(sorted(self.flags.items())),
            "round_trip": None if self.round_trip is None else round(self.round_trip, 6),
            "round_trip_sampled": self.round_trip_sampled,
        }
        if histograms:
            for name in ("prompt_lengths", "response_lengths", "total_lengths"):
                d[name] = {str(k): v for k, v in sorted(getattr(self, name).items())}
        return d


@dataclass(frozen=True, slots=True)
class Anomaly:
    """A kind of schema problem: how many lines, and the first ``shard:line``.

    ``skipped`` lines were not valid rows (left out of every figure); the others are noted:
    valid rows a check flagged (still counted in the figures) and blank lines.
    """

    kind: str
    count: int
    first: str
    skipped: bool

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "first": self.first, "skipped": self.skipped}


@dataclass(frozen=True, slots=True)
class CorpusInfo:
    """Result of :func:`inspect_corpus`.

    Attributes:
        shards: Each shard, in sorted order.
        rows: Valid rows in the corpus.
        bytes: Bytes on disk of all shards.
        sources: Figures per source, by source name (sorted).
        anomalies: Schema anomalies by kind (skipped rows and flagged valid rows).
        tokenizer: Tokenizer checks, when a tokenizer was given.
        ignored: ``*.jsonl*`` files under DATA that were not read (beside the
            ``tokenized_data.*`` shards, or not matched by ``glob``).
    """

    shards: tuple[ShardFigures, ...]
    rows: int
    bytes: int
    sources: dict[str, SourceFigures]
    anomalies: dict[str, Anomaly]
    tokenizer: TokenizerFigures | None = None
    ignored: tuple[str, ...] = ()

    @property
    def skipped_rows(self) -> int:
        """Lines that were not valid rows."""
        return sum(a.count for a in self.anomalies.values() if a.skipped)

    def to_dict(self, *, histograms: bool = False) -> dict[str, Any]:
        """The ``inspect --json`` object: ``sources`` maps each source to its figures."""
        return {
            "shards": [s.to_dict() for s in self.shards],
            "n_shards": len(self.shards),
            "rows": self.rows,
            "bytes": self.bytes,
            "skipped_rows": self.skipped_rows,
            "sources": {name: f.to_dict(histograms=histograms) for name, f in self.sources.items()},
            "anomalies": {k: a.to_dict() for k, a in sorted(self.anomalies.items())},
            "ignored": list(self.ignored),
            "tokenizer": self.tokenizer.to_dict() if self.tokenizer else None,
            "mismatch": self.mismatch,
        }

    @property
    def mismatch(self) -> str | None:
        """Why the tokenizer evidently is not the data's (one line per failed check), or None."""
        return None if self.tokenizer is None else self.tokenizer.mismatch

    @api_spelling
    def raise_for_mismatch(self) -> None:
        """Raise :class:`~distprompt.errors.TokenizerError` when a tokenizer check failed."""
        msg = self.mismatch
        if msg is not None:
            raise TokenizerError(msg)

    def table(self) -> str:
        """A readable plain-text summary for the terminal."""
        return _table(self)


def corpus_info(
    part: Partial,
    shards: Sequence[Shard],
    *,
    ignored: Any,
    tokenizer: TokenizerFigures | None,
    round_trips: Mapping[str, tuple[int, int, str | None]],
) -> CorpusInfo:
    """The :class:`CorpusInfo` of a finished pass (:func:`distprompt.inspect_corpus` wires it)."""
    total_rows = sum(st.rows for st in part.stats.values())
    total_tokens = sum(_weighted_sum(st.seq_lengths) for st in part.stats.values())
    sources: dict[str, SourceFigures] = {}
    for src in sorted(part.stats):
        st = part.stats[src]
        unique, exact = part.pools[src].distinct()
        tokens = _weighted_sum(st.seq_lengths)
        rt = round_trips.get(src)
        sources[src] = SourceFigures(
            source=src,
            rows=st.rows,
            share_rows=st.rows / total_rows if total_rows else 0.0,
            tokens=tokens,
            share_tokens=tokens / total_tokens if total_tokens else 0.0,
            prompt_tokens=length_quantiles(st.prompt_lengths),
            response_tokens=length_quantiles(st.response_lengths),
            total_tokens=length_quantiles(st.seq_lengths),
            trained_turns=_turns(st.trained_turns, st.rows),
            unique_prompts=min(unique, st.rows),
            unique_exact=exact,
            duplicate_rows=max(0, st.rows - unique),
            flags=dict(sorted(st.flags.items())),
            round_trip=(rt[0] / rt[1] if rt and rt[1] else None),
            round_trip_sampled=rt[1] if rt else 0,
            prompt_lengths=dict(sorted(st.prompt_lengths.items())),
            response_lengths=dict(sorted(st.response_lengths.items())),
            total_lengths=dict(sorted(st.seq_lengths.items())),
        )
    anomalies: dict[str, Anomaly] = {}
    for kind, n in part.tally.skipped.items():
        anomalies[kind] = Anomaly(kind, n, part.tally.first_skip.get(kind, "?"), skipped=True)
    for kind, n in part.tally.anomalies.items():
        anomalies[kind] = Anomaly(kind, n, part.tally.first_anomaly.get(kind, "?"), skipped=False)
    return CorpusInfo(
        shards=tuple(
            ShardFigures(name=s.name, bytes=s.size, rows=part.shard_rows.get(s.name, 0))
            for s in shards
        ),
        rows=total_rows,
        bytes=sum(s.size for s in shards),
        sources=sources,
        anomalies=dict(sorted(anomalies.items())),
        tokenizer=tokenizer,
        ignored=ignored,
    )


def _weighted_sum(counter: Mapping[int, int]) -> int:
    return int(sum(int(k) * int(v) for k, v in counter.items()))


def _turns(counter: Mapping[int, int], rows: int) -> dict[str, float]:
    total = _weighted_sum(counter)
    return {
        "total": total,
        "mean": round(total / rows, 3) if rows else 0.0,
        "max": max(counter) if counter else 0,
        "rows_multi": int(sum(v for k, v in counter.items() if k > 1)),
        "rows_none": int(counter.get(0, 0)),
    }


# ---------------------------------------------------------------------------------------------
# the terminal table
# ---------------------------------------------------------------------------------------------


def _ignored_line(names: Sequence[str]) -> str:
    shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
    return f"ignored {len(names)} other *.jsonl file(s), not read: {shown}"


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"


def _q(q: Quantiles | None) -> list[str]:
    return [str(v) for v in (q.p50, q.p90, q.p99, q.max)] if q else ["-"] * 4


def _table(info: CorpusInfo) -> str:
    out = [
        f"{len(info.shards)} shards, {info.rows:,} rows, {_human_bytes(info.bytes)}"
        + (
            f", {info.skipped_rows:,} bad {'line' if info.skipped_rows == 1 else 'lines'} skipped"
            if info.skipped_rows
            else ""
        )
    ]
    if info.sources:
        mix: list[list[str]] = [
            ["source", "rows", "rows%", "tokens", "tokens%", "unique", "dups", "turns", "flagged"]
        ]
        for name, f in info.sources.items():
            mix.append(
                [
                    name,
                    f"{f.rows:,}",
                    f"{100 * f.share_rows:.1f}",
                    f"{f.tokens:,}",
                    f"{100 * f.share_tokens:.1f}",
                    f"{f.unique_prompts:,}" + ("" if f.unique_exact else "~"),
                    f"{f.duplicate_rows:,}",
                    f"{f.trained_turns['mean']:.2f}",
                    str(sum(f.flags.values())),
                ]
            )
        out += ["", *format_table(mix)]
        head = ["p50", "p90", "p99", "max"]
        lens: list[list[str]] = [
            ["tokens", *(f"prompt {h}" for h in head), *(f"resp {h}" for h in head)]
            + [f"total {h}" for h in head]
        ]
        for name, f in info.sources.items():
            lens.append([name, *_q(f.prompt_tokens), *_q(f.response_tokens), *_q(f.total_tokens)])
        out += ["", *format_table(lens)]
    if info.ignored:
        out += ["", _ignored_line(info.ignored)]
    if info.anomalies:
        out += ["", "anomalies (kind: rows, first at):"]
        for a in info.anomalies.values():
            what = "skipped" if a.skipped else "flagged"
            out.append(f"  {a.kind}: {a.count:,} {what}, first at {a.first}")
    if info.tokenizer is not None:
        t = info.tokenizer
        out += ["", f"tokenizer {t.name} ({t.vocab_size:,} ids):"]
        for c in t.checks:
            state = {True: "ok", False: "FAILED", None: "skipped"}[c.passed]
            out.append(f"  {c.name}: {state} — {c.detail}")
    return "\n".join(out)
