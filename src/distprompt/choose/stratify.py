"""Quotas: how many suite items each source gets.

``per_source`` asks the same number from every source. ``total`` splits a budget by
``allocation``: ``proportional`` to the source's rows (its share of the training mix), ``sqrt``
of them (small sources get more than their share), or ``equal``; every source first gets
``min_per_source``, the rest is split by largest-remainder rounding (ties broken by source name),
so quotas sum exactly to the budget. A source that has fewer unique prompts than its quota gives
all it has; the shortfall is reported, not redistributed, so shares stay what was asked.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from distprompt.config import ALLOCATIONS
from distprompt.errors import ConfigError

__all__ = ["Quota", "allocate", "largest_remainder"]


@dataclass(frozen=True, slots=True)
class Quota:
    """A source's quota: what was asked (``target``) and what it can give (``granted``)."""

    source: str
    target: int
    granted: int

    @property
    def shortfall(self) -> int:
        return self.target - self.granted


def largest_remainder(weights: Mapping[str, float], budget: int) -> dict[str, int]:
    """Split ``budget`` in proportion to ``weights`` with largest-remainder rounding.

    Example:
        >>> largest_remainder({"a": 1, "b": 1, "c": 1}, 10)
        {'a': 4, 'b': 3, 'c': 3}
    """
    if budget < 0:
        raise ValueError("budget must be >= 0")
    names = sorted(weights)
    tot = float(sum(max(0.0, weights[n]) for n in names))
    if not names:
        return {}
    if tot <= 0:
        shares = {n: budget / len(names) for n in names}
    else:
        shares = {n: budget * max(0.0, weights[n]) / tot for n in names}
    out = {n: math.floor(shares[n]) for n in names}
    left = budget - sum(out.values())
    order = sorted(names, key=lambda n: (-(shares[n] - out[n]), n))
    for n in order[:left]:
        out[n] += 1
    return out


def allocate(
    rows: Mapping[str, int],
    available: Mapping[str, int],
    *,
    per_source: int | None = None,
    total: int | None = None,
    allocation: str = "proportional",
    min_per_source: int = 0,
) -> dict[str, Quota]:
    """Quota per source.

    Args:
        rows: Rows per source (the training mix).
        available: Unique prompts each source can give (its candidate pool size).
        per_source: Items from every source (exclusive with ``total``).
        total: Budget to split by ``allocation``.
        allocation: ``proportional`` | ``sqrt`` | ``equal``.
        min_per_source: Floor per source when splitting ``total``.

    Returns:
        ``{source: Quota}``; ``sum(target) == total`` when ``total`` is given.

    Raises:
        ConfigError: Options that cannot be satisfied together.

    Example:
        >>> q = allocate({"a": 90, "b": 10}, {"a": 90, "b": 3}, total=20)
        >>> (q["a"].target, q["b"].target, q["b"].granted)
        (18, 2, 2)
    """
    if (per_source is None) == (total is None):
        raise ConfigError("expected exactly one of per_source and total")
    sources = sorted(rows)
    if per_source is not None:
        targets = dict.fromkeys(sources, per_source)
    else:
        assert total is not None
        if allocation not in ALLOCATIONS:
            raise ConfigError(
                f"expected allocation in {', '.join(ALLOCATIONS)}, found {allocation!r}"
            )
        floor = min(min_per_source, total // len(sources)) if sources else 0
        if sources and min_per_source * len(sources) > total:
            raise ConfigError(
                f"expected --total ({total}) >= --min-per-source ({min_per_source}) x "
                f"{len(sources)} sources, found less; lower --min-per-source or raise --total"
            )
        if allocation == "proportional":
            w = {s: float(rows[s]) for s in sources}
        elif allocation == "sqrt":
            w = {s: math.sqrt(rows[s]) for s in sources}
        else:
            w = dict.fromkeys(sources, 1.0)
        rest = largest_remainder(w, total - floor * len(sources))
        targets = {s: floor + rest[s] for s in sources}
    return {
        s: Quota(source=s, target=targets[s], granted=min(targets[s], int(available.get(s, 0))))
        for s in sources
    }
