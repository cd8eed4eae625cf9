"""One frozen, keyword-only configuration, validated before any shard is read."""

from __future__ import annotations

import importlib.util
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal, get_args

from distprompt.errors import ConfigError

__all__ = [
    "ALLOCATIONS",
    "ENGINES",
    "METHODS",
    "ON_ERROR",
    "PER_SOURCE",
    "RAY_INSTALL_HINT",
    "Allocation",
    "Config",
    "Engine",
    "Method",
    "OnError",
    "require_engine",
    "resolve",
]

#: Items from every source when neither ``per_source`` nor ``total`` is given.
PER_SOURCE = 50

#: How ``total`` is split between sources: by rows, by the square root of rows, or equally.
Allocation = Literal["proportional", "sqrt", "equal"]
#: How a source's representatives are chosen.
Method = Literal["herding", "kmedoids", "random"]
#: Stop at the first bad row, or skip bad rows and count them by reason.
OnError = Literal["raise", "skip"]
#: Where the pass runs.
Engine = Literal["local", "ray"]

ALLOCATIONS: tuple[Allocation, ...] = get_args(Allocation)
METHODS: tuple[Method, ...] = get_args(Method)
ON_ERROR: tuple[OnError, ...] = get_args(OnError)
ENGINES: tuple[Engine, ...] = get_args(Engine)
RAY_INSTALL_HINT = "pip install 'distprompt[ray]'"


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """Options of a suite build, validated here before any shard is read.

    Attributes:
        per_source: Items from every source. Set to None when ``total`` is given.
        total: Total items, split between sources by ``allocation``.
        allocation: ``proportional`` (to rows), ``sqrt`` or ``equal``; with ``total``.
        min_per_source: Floor per source; only with ``total`` (refused without it).
        max_candidates: Unique prompts kept per source for selection (bounds memory).
        seed: Seeds every random choice; same input and seed give byte-identical output.
        on_error: ``raise`` at the first bad row, or ``skip`` bad rows and count them by reason.
        method: ``herding`` (default), ``kmedoids`` or ``random``.
        max_output_tokens: Cap on each item's ``max_tokens``.
        near_duplicate: TF-IDF cosine at which two prompts count as near-duplicates.
        lsa_dims: Dimensions of the LSA content vectors selection works in.
        length_weight: Weight of the log prompt length beside the content vectors.
        workers: Processes reading shards in parallel. On a corpus of 64 MiB or more (a
            compressed shard counts as 4x its size on disk) the sources are selected in
            parallel after the pass: in two threads with 1 or 2, in as many processes with more
            (more memory). Does not change the result.
        recover_turns: Recover chat ``messages`` and check fidelity (needs a chat template).
        check_tokenizer: Refuse a tokenizer that fails the checks ``inspect`` runs; False builds
            the suite anyway and records the failed verdict in the manifest.
        glob: Which files of each DATA folder are shards (see
            :func:`distprompt.read.shards.find_shards`).
        engine: ``local`` (this machine) or ``ray`` (Ray tasks; ``pip install
            'distprompt[ray]'``); does not change the result.
        ray_address: The Ray cluster for ``engine="ray"``; None starts or joins a local Ray.

    Example:
        >>> Config(total=100, per_source=None, allocation="sqrt").allocation
        'sqrt'
    """

    per_source: int | None = PER_SOURCE
    total: int | None = None
    allocation: Allocation = "proportional"
    min_per_source: int = 0
    max_candidates: int = 20000
    seed: int = 0
    on_error: OnError = "raise"
    method: Method = "herding"
    max_output_tokens: int | None = None
    # 0.9 also caught prompts that only share a long system prompt (docs/concepts.md)
    near_duplicate: float = 0.95
    lsa_dims: int = 64
    length_weight: float = 1.0
    workers: int = 1
    recover_turns: bool = True
    # False writes a suite even when the tokenizer checks fail (the verdict is recorded).
    check_tokenizer: bool = True
    glob: str | None = None
    engine: Engine = "local"
    ray_address: str | None = None

    def __post_init__(self) -> None:
        if self.total is not None and self.per_source is not None:
            # total wins over the per_source default; the library sets per_source=None for it.
            raise ConfigError("expected either per_source or total, found both; pass one of them")
        if self.total is None and self.per_source is None:
            raise ConfigError("expected per_source or total, found neither")
        if self.total is None and self.min_per_source:
            # a floor of total's split: with per_source every source gets per_source anyway
            raise ConfigError(
                f"expected min_per_source with total (a floor of its split between sources), "
                f"found min_per_source={self.min_per_source!r} with per_source="
                f"{self.per_source!r}; pass total, or leave min_per_source out"
            )
        for name in ("per_source", "total"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ConfigError(f"expected {name} to be a positive integer, found {v!r}")
        checks: list[tuple[str, bool, str]] = [
            ("allocation", self.allocation in ALLOCATIONS, f"one of {', '.join(ALLOCATIONS)}"),
            ("on_error", self.on_error in ON_ERROR, f"one of {', '.join(ON_ERROR)}"),
            ("method", self.method in METHODS, f"one of {', '.join(METHODS)}"),
            (
                "min_per_source",
                _is_int(self.min_per_source) and self.min_per_source >= 0,
                "an integer >= 0",
            ),
            (
                "max_candidates",
                _is_int(self.max_candidates) and self.max_candidates >= 1,
                "an integer >= 1",
            ),
            ("seed", _is_int(self.seed) and 0 <= self.seed < 2**63, "an integer in [0, 2**63)"),
            (
                "max_output_tokens",
                self.max_output_tokens is None
                or (_is_int(self.max_output_tokens) and self.max_output_tokens >= 1),
                "None or an integer >= 1",
            ),
            ("near_duplicate", 0.0 < float(self.near_duplicate) <= 1.0, "a number in (0, 1]"),
            ("lsa_dims", _is_int(self.lsa_dims) and self.lsa_dims >= 1, "an integer >= 1"),
            ("length_weight", float(self.length_weight) >= 0.0, "a number >= 0"),
            ("workers", _is_int(self.workers) and self.workers >= 1, "an integer >= 1"),
            ("check_tokenizer", isinstance(self.check_tokenizer, bool), "True or False"),
            (
                "glob",
                self.glob is None or (isinstance(self.glob, str) and bool(self.glob.strip())),
                "None or a non-empty pattern",
            ),
        ]
        for name, ok, expected in checks:
            if not ok:
                raise ConfigError(
                    f"expected {name} to be {expected}, found {getattr(self, name)!r}"
                )
        require_engine(self.engine)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def resolve(config: Config | None = None, /, **overrides: Any) -> Config:
    """``config`` (default: ``Config()``) with ``overrides`` applied and validated.

    A ``total`` given without ``per_source`` replaces the ``per_source`` default.

    Raises:
        ConfigError: An unknown option, or an invalid value.

    Example:
        >>> resolve(total=100).per_source is None
        True
    """
    known = {f.name for f in fields(Config)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(
            f"expected options among {', '.join(sorted(known))}, found {', '.join(unknown)}"
        )
    if overrides.get("total") is not None and "per_source" not in overrides:
        overrides["per_source"] = None
    return replace(config if config is not None else Config(), **overrides)


def require_engine(engine: str) -> None:
    """Check that ``engine`` is known and, for ``ray``, installed — before any shard is read.

    Raises:
        ConfigError: An unknown engine, or ``ray`` without Ray installed.

    Example:
        >>> require_engine("local")
    """
    if engine not in ENGINES:
        raise ConfigError(f"expected engine to be one of {', '.join(ENGINES)}, found {engine!r}")
    if engine == "ray" and importlib.util.find_spec("ray") is None:
        raise ConfigError(
            "expected Ray for engine 'ray', found it is not installed; install it with "
            f"{RAY_INSTALL_HINT} (or pip install ray), or use the local engine"
        )


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
