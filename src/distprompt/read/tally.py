"""What the reader passes over, in one object: bad rows (raised or skipped, by ``on_error``) and
anomalies (counted, never fatal), each with the first ``shard:line`` it was seen at.

The reader (:func:`~distprompt.read.shards.iter_rows`) and the pass
(:func:`~distprompt.read.scan.scan_unit`) report into a :class:`Tally`; the partials of units
merge theirs, and the summary, the manifest and ``inspect`` read the counts from it.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

from distprompt.config import OnError
from distprompt.errors import DataError

__all__ = ["Tally", "rebase_where"]


def _where_key(where: str) -> tuple[str, int]:
    shard, _, line = where.rpartition(":")
    return shard, int(line) if line.isdigit() else 0


def rebase_where(where: str, shard: str, base: int) -> str:
    """``where`` with its line shifted by ``base`` when it is a line of ``shard``."""
    name, _, line = where.rpartition(":")
    if name != shard or not line.isdigit():
        return where
    return f"{name}:{int(line) + base}"


@dataclass(slots=True)
class Tally:
    """Bad rows and anomalies of a pass (or of part of it), by reason.

    Attributes:
        on_error: ``"raise"``: :meth:`bad` raises the error; ``"skip"``: it counts it.
        skipped: Bad rows skipped, by reason (``corrupt_stream`` counts a stream once).
        first_skip: The first ``shard:line`` of each skipped reason.
        anomalies: Things that are not errors (blank lines, rows a check flags), by reason.
        first_anomaly: The first ``shard:line`` of each anomaly.

    Example:
        >>> t = Tally(on_error="skip")
        >>> t.bad(DataError("a.jsonl", 3, "not_json", "expected JSON"))
        >>> t.skipped, t.first_skip
        (Counter({'not_json': 1}), {'not_json': 'a.jsonl:3'})
    """

    on_error: OnError = "raise"
    skipped: Counter[str] = field(default_factory=Counter)
    first_skip: dict[str, str] = field(default_factory=dict)
    anomalies: Counter[str] = field(default_factory=Counter)
    first_anomaly: dict[str, str] = field(default_factory=dict)

    def bad(self, exc: DataError) -> None:
        """A bad row: raised as it is when ``on_error`` is ``"raise"``, else counted."""
        if self.on_error == "raise":
            raise exc
        self.skip(exc.reason, f"{exc.shard}:{exc.line}")

    def lost_stream(self, exc: Exception) -> None:
        """A shard whose stream cannot be read on (a truncated or corrupt compressed stream, a
        row group that does not decode): raised when ``on_error`` is ``"raise"``, else counted
        once as ``corrupt_stream`` at the place its message starts with, and warned about
        (the rows before it are kept)."""
        if self.on_error == "raise":
            raise exc
        self.skip("corrupt_stream", str(exc).split(": ", 1)[0])
        logging.getLogger("distprompt.read").warning("%s", exc)

    def skip(self, reason: str, where: str) -> None:
        """Count a skipped bad row (or stream) under ``reason``, first seen at ``where``."""
        self.skipped[reason] += 1
        self.first_skip.setdefault(reason, where)

    def anomaly(self, reason: str, where: str) -> None:
        """Count an anomaly under ``reason``, first seen at ``where``."""
        self.anomalies[reason] += 1
        self.first_anomaly.setdefault(reason, where)

    def merge(self, other: Tally) -> Tally:
        """Add ``other``'s counts; the first position of each reason is the earlier one."""
        self.skipped.update(other.skipped)
        self.anomalies.update(other.anomalies)
        pairs = ((self.first_skip, other.first_skip), (self.first_anomaly, other.first_anomaly))
        for d, od in pairs:
            for reason, where in od.items():
                d[reason] = min(d.get(reason, where), where, key=_where_key)
        return self

    def rebase(self, shard: str, base: int) -> None:
        """Shift the first positions inside ``shard`` by ``base`` lines (a unit's tally, whose
        lines count from the unit's start)."""
        for d in (self.first_skip, self.first_anomaly):
            for reason, where in d.items():
                d[reason] = rebase_where(where, shard, base)
