"""Comparing a re-rendered conversation with the prompt it was recovered from: ids with their
character offsets, the first difference and how to say it, and which characters the loss mask
covers. :mod:`distprompt.recover.turns` uses them to grade a recovery.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

__all__ = ["diff_reason", "encode_offsets", "first_diff", "masked_prefix"]


def encode_offsets(tokenizer: Any, text: str) -> tuple[list[int], list[tuple[int, int]] | None]:
    """``text``'s ids without special tokens, with their character offsets where the tokenizer
    gives them (None otherwise)."""
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
    except (NotImplementedError, TypeError, ValueError, KeyError):
        return list(tokenizer.encode(text, add_special_tokens=False)), None


def first_diff(a: Sequence[Any], b: Sequence[Any]) -> int:
    """The first index where ``a`` and ``b`` differ (the shorter length when one is a prefix)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def diff_reason(tokenizer: Any, want: Sequence[int], got: Sequence[int], what: str) -> str:
    """Where two id sequences first differ, with the decoded text around it."""
    i = first_diff(want, got)

    def ctx(ids: Sequence[int]) -> str:
        return repr(tokenizer.decode(list(ids[max(0, i - 8) : i + 8]), skip_special_tokens=False))

    return (
        f"{what}: first differing token at index {i} (prompt has {len(want)} tokens, "
        f"re-encoded {len(got)}); prompt …{ctx(want)}… vs …{ctx(got)}…"
    )


def masked_prefix(
    loss_mask: Sequence[int], offsets: list[tuple[int, int]], n_chars: int, shift: int
) -> list[int]:
    """Prefix counts of the characters (from ``shift`` on) that a loss-masked token covers."""
    flags = [0] * n_chars
    for m, (a, b) in zip(loss_mask, offsets, strict=True):
        if m:
            for c in range(max(a - shift, 0), min(b - shift, n_chars)):
                flags[c] = 1
    return [0, *itertools.accumulate(flags)]
