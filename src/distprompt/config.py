"""One frozen, keyword-only configuration, validated before any shard is read."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from distprompt.choose.select import METHODS
from distprompt.choose.stratify import ALLOCATIONS
from distprompt.errors import ConfigError

__all__ = ["ON_ERROR", "Config"]

ON_ERROR = ("raise", "skip")


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """Options of a suite build (see :func:`distprompt.build_suite` for their meaning)."""

    per_source: int | None = 50
    total: int | None = None
    allocation: str = "proportional"
    min_per_source: int = 0
    max_candidates: int = 20000
    seed: int = 0
    on_error: str = "raise"
    method: str = "herding"
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
    engine: str = "local"
    ray_address: str | None = None

    def __post_init__(self) -> None:
        if self.total is not None and self.per_source is not None:
            # total wins over the per_source default; the library sets per_source=None for it.
            raise ConfigError("expected either per_source or total, found both; pass one of them")
        if self.total is None and self.per_source is None:
            raise ConfigError("expected per_source or total, found neither")
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
        from distprompt.read.engine import require_engine

        require_engine(self.engine)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
