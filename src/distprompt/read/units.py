"""The pass's units of work and the merge of their results.

A :class:`Unit` is a whole shard or the lines of one that start in a byte range (a row range
of a Parquet file); :func:`units` splits the shards. Each unit's result counts its lines from 1;
:func:`merge_units` merges the results the engine gives back (each shard's units in order)
into the pass's :class:`~distprompt.read.partial.Partial`, adding the lines of the units
before, so provenance and ``shard:line`` are exact, and raises the first error in shard order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from distprompt._heap import trim_heap
from distprompt.engine import Task, UnitFailure
from distprompt.errors import CorruptStreamError, DataError, InputError, TokenizerError
from distprompt.read.partial import Partial
from distprompt.read.shards import open_shard, split_shard
from distprompt.read.table import is_table, split_table
from distprompt.read.tally import rebase_where
from distprompt.records import Shard

__all__ = [
    "Unit",
    "UnitOutcome",
    "UnitResult",
    "count_lines",
    "merge_units",
    "rebase_error",
    "units",
]


@dataclass(frozen=True, slots=True)
class Unit:
    """One piece of work of the pass: the lines of ``shard`` that start in ``[start, end)``.

    A whole shard is ``Unit(shard)``; :func:`units` splits large plain shards into byte ranges
    at line starts. Picklable: :func:`~distprompt.read.scan.scan_unit` runs it in any process.
    """

    shard: Shard
    start: int = 0
    end: int | None = None
    #: The shard's rows when it is a Parquet file split into row ranges (``start``/``end``
    #: are then row indices, see :func:`~distprompt.read.table.split_table`).
    rows: int | None = None

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.end is None

    @property
    def name(self) -> str:
        """The shard's name, with the range when the unit is part of it."""
        if self.whole:
            return self.shard.name
        if self.rows is not None:
            return f"{self.shard.name} (rows {self.start + 1}-{self.end or self.rows})"
        end = self.end if self.end is not None else self.shard.size
        return f"{self.shard.name} (bytes {self.start}-{end})"

    @property
    def size(self) -> int:
        """Its bytes (a row range: its share of the file)."""
        if self.rows is not None:
            rows = (self.end if self.end is not None else self.rows) - self.start
            return self.shard.size * rows // max(self.rows, 1)
        return (self.end if self.end is not None else self.shard.size) - self.start

    @property
    def task(self) -> Task:
        """What the engine knows of it: a shard's units are merged in their order."""
        return Task(self.name, self.shard.name, self.size, self.shard.size)


@dataclass(slots=True)
class UnitResult:
    """What :func:`~distprompt.read.scan.scan_unit` returns: the partial, with line numbers
    counted from 1 at the unit's start, and how many lines the unit holds (to rebase the next
    unit's lines)."""

    partial: Partial
    lines: int


#: A unit's result, or the error it stopped at (returned, not raised: a retry would not change
#: it), or on Ray the failure of a task that kept failing.
UnitOutcome = UnitResult | DataError | TokenizerError | CorruptStreamError


def units(shards: Sequence[Shard], *, unit_bytes: int | None) -> list[Unit]:
    """The work units of a pass: whole shards, or (with ``unit_bytes``) plain shards split into
    byte ranges of about that size at line starts, Parquet shards into row ranges of whole row
    groups of about that size uncompressed."""
    out: list[Unit] = []
    for shard in shards:
        if unit_bytes is None:
            out.append(Unit(shard))
            continue
        if is_table(shard.name):
            ranges, rows = split_table(shard, unit_bytes)
            out.extend(Unit(shard, a, b, rows if b is not None else None) for a, b in ranges)
            continue
        for start, end in split_shard(shard, unit_bytes):
            out.append(Unit(shard, start, end))
    return out


def count_lines(unit: Unit) -> int:
    """The lines that start in a unit's byte range, counted without parsing them."""
    if unit.whole:
        return 0  # no later unit of the shard needs its line count
    if unit.rows is not None:
        return (unit.end if unit.end is not None else unit.rows) - unit.start
    n = 0
    last = b"\n"
    with open_shard(unit.shard.url or unit.shard.path) as fh:
        fh.seek(unit.start)
        left = unit.size
        while left > 0:
            chunk = fh.read(min(left, 1 << 20))
            if not chunk:
                break
            n += chunk.count(b"\n")
            last = chunk[-1:]
            left -= len(chunk)
    return n + (last != b"\n")  # a last line without a newline


def rebase_error(exc: Exception, shard: str, base: int) -> Exception:
    """The error of a unit with its line counted from the start of the shard."""
    if not base:
        return exc
    if isinstance(exc, DataError):
        if exc.shard == shard and exc.line:
            return DataError(exc.shard, exc.line + base, exc.reason, exc.detail)
        return exc
    msg = str(exc)
    where, sep, rest = msg.partition(": ")
    if sep and where.rpartition(":")[0] == shard:
        return type(exc)(f"{rebase_where(where, shard, base)}: {rest}")
    return exc


def merge_units(
    results: Iterable[tuple[int, UnitOutcome | UnitFailure]],
    work: Sequence[Unit],
    total: Partial,
    *,
    ordered: bool,
    skip: bool,
    on_shard: Callable[[Partial], None] | None = None,
) -> None:
    """Merge the units' results into ``total`` (whose ``shards`` are the pass's, in order).

    Args:
        results: ``(i, outcome of work[i])``, each shard's in unit order.
        work: The units.
        total: The pass's partial.
        ordered: The results come in unit order: each is merged straight into ``total``.
            Otherwise a shard's units are merged apart, and into ``total`` once all are done
            (with a window store, their windows are written as they are merged: the units of a
            large shard arrive one by one until the end of the pass).
        skip: A unit whose Ray task kept failing is left out and recorded in ``failed``
            (its lines still count for the units after it); otherwise it raises.
        on_shard: Called with ``total`` each time every unit of a shard is merged.

    Raises:
        DataError: The first error in shard order (``DataError``, ``TokenizerError``,
            ``CorruptStreamError``), once every shard before it is done without one.
        InputError: A unit whose Ray task kept failing, unless ``skip``.
    """
    shard_at = {name: i for i, name in enumerate(total.shards)}
    left: dict[str, int] = {}  # per shard, its units not merged yet
    for u in work:
        left[u.shard.name] = left.get(u.shard.name, 0) + 1
    lines: dict[str, int] = {}  # per shard, the lines of its units merged so far
    parts: dict[str, Partial] = {}  # a shard's units merged so far (not ``ordered``)
    errors: dict[int, Exception] = {}  # by shard index: its first error, rebased
    for i, res in results:
        unit = work[i]
        name = unit.shard.name
        at = lines.get(name, 0)
        left[name] -= 1
        if isinstance(res, UnitFailure):
            found = f"its Ray task failed {res.attempts} times ({res.reason})"
            if not skip:
                raise InputError(
                    f"{res.name}: expected the shard's Ray task to finish, found {found}; "
                    "see the worker logs (ray logs), fix the cause, or run with "
                    "--on-error skip to leave the shard out"
                )
            total.failed[res.name] = found
            res = UnitResult(Partial(k=total.k), count_lines(unit))
        if shard_at[name] in errors:
            pass  # the rest of a shard after its first error
        elif isinstance(res, Exception):
            errors[shard_at[name]] = rebase_error(res, name, at)
        else:
            if at:
                res.partial.rebase(name, at)
            lines[name] = at + res.lines
            if ordered:
                total.merge(res.partial)
            else:
                part = parts.get(name)
                if part is None:
                    part = parts[name] = Partial(k=total.k, sample=total.sample, spill=total.spill)
                part.merge(res.partial)
                if total.spill is not None:
                    trim_heap()  # the windows written and the unit's partial, given back
        if not left[name]:
            del left[name]
            part = parts.pop(name, None)
            if shard_at[name] not in errors:
                if part is not None:
                    total.merge(part)
                if on_shard is not None:
                    on_shard(total)
        if errors and all(shard_at[n] >= min(errors) for n in left):
            raise errors[min(errors)]
