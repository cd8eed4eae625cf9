"""What each benchmark client does to a suite's ``sharegpt.json``, by the client's own rule.

Both SGLang and vLLM tokenize the human turn and the gpt turn of a ``sharegpt.json`` pair again,
with the tokenizer's special tokens added, and then filter by their own thresholds (read in
sglang 0.5.23 ``sglang/benchmark/datasets/sharegpt.py`` and vllm 0.33.0
``vllm/benchmarks/datasets/datasets.py``, ``ShareGPTDataset.sample`` / ``is_valid_sequence``):

- vLLM: ``tokenizer(text).input_ids``; keeps a pair when 4 <= prompt <= 1024, prompt + output
  <= 2048 and output >= 4.
- SGLang: ``tokenizer.encode(text)``; drops a pair when prompt < 2 or output < 2 (and, only with
  ``--sharegpt-context-len``, when prompt + output is longer).

The output length both ask for is the re-tokenized response, not ``max_tokens``: the response
text holds no end-of-turn token, so it usually comes out one shorter (plus a BOS where the
tokenizer adds one).

Example:
    >>> drops = sharegpt_drops([], tokenizer=None)
    >>> drops["vllm"].total
    0
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from distprompt.records import SuiteItem
from distprompt.write.formats import last_user_text, out_len

__all__ = [
    "SGLANG_SHAREGPT_MIN_LEN",
    "VLLM_SHAREGPT_MAX_PROMPT",
    "VLLM_SHAREGPT_MAX_TOTAL",
    "VLLM_SHAREGPT_MIN_LEN",
    "ShareGptDrops",
    "sharegpt_drops",
    "sharegpt_lengths",
]

VLLM_SHAREGPT_MIN_LEN = 4
VLLM_SHAREGPT_MAX_PROMPT = 1024
VLLM_SHAREGPT_MAX_TOTAL = 2048
SGLANG_SHAREGPT_MIN_LEN = 2


@dataclass(frozen=True, slots=True)
class ShareGptDrops:
    """The ``sharegpt.json`` pairs one client drops, by reason (a pair may have several).

    Attributes:
        client: ``vllm`` or ``sglang``.
        total: Pairs dropped.
        reasons: ``{reason: pairs}`` in the client's own terms.
        ids: Ids of the dropped items, in file order.
        kept_out_lens: Output length the client asks for, per kept item id.
        computed: False when no tokenizer was given: nothing was counted.
    """

    client: str
    total: int
    reasons: dict[str, int]
    ids: tuple[str, ...]
    kept_out_lens: dict[str, int]
    computed: bool = True


def sharegpt_lengths(items: Sequence[SuiteItem], tokenizer: Any) -> list[tuple[int, int]]:
    """``(prompt, output)`` token counts of each item's ``sharegpt.json`` pair, as both clients
    count them: the text re-tokenized with special tokens added.

    Example:
        >>> sharegpt_lengths([], tokenizer=None)
        []
    """
    if not items:
        return []
    from distprompt.recover.decode import encode_many

    texts = [t for it in items for t in (last_user_text(it), it.response or "")]
    ids = encode_many(tokenizer, texts, add_special_tokens=True)
    return [(len(ids[i]), len(ids[i + 1])) for i in range(0, len(ids), 2)]


def sharegpt_drops(items: Sequence[SuiteItem], tokenizer: Any) -> dict[str, ShareGptDrops]:
    """What vLLM and SGLang drop from ``sharegpt.json`` (the items of ``Plan.single``).

    Without a tokenizer nothing can be counted: every entry has ``computed=False``.

    Example:
        >>> sharegpt_drops([], tokenizer=None)["sglang"].computed
        False
    """
    if tokenizer is None:
        return {
            c: ShareGptDrops(c, 0, {}, (), {it.id: out_len(it) for it in items}, computed=False)
            for c in ("vllm", "sglang")
        }
    lengths = sharegpt_lengths(items, tokenizer)
    vllm_reasons = {
        f"prompt < {VLLM_SHAREGPT_MIN_LEN}": 0,
        f"prompt > {VLLM_SHAREGPT_MAX_PROMPT}": 0,
        f"prompt + output > {VLLM_SHAREGPT_MAX_TOTAL}": 0,
        f"output < {VLLM_SHAREGPT_MIN_LEN}": 0,
    }
    sglang_reasons = {
        f"prompt < {SGLANG_SHAREGPT_MIN_LEN}": 0,
        f"output < {SGLANG_SHAREGPT_MIN_LEN}": 0,
    }
    v_ids: list[str] = []
    s_ids: list[str] = []
    v_kept: dict[str, int] = {}
    s_kept: dict[str, int] = {}
    for it, (p, o) in zip(items, lengths, strict=True):
        v_flags = (
            p < VLLM_SHAREGPT_MIN_LEN,
            p > VLLM_SHAREGPT_MAX_PROMPT,
            p + o > VLLM_SHAREGPT_MAX_TOTAL,
            o < VLLM_SHAREGPT_MIN_LEN,
        )
        s_flags = (p < SGLANG_SHAREGPT_MIN_LEN, o < SGLANG_SHAREGPT_MIN_LEN)
        for flags, reasons, ids, kept in (
            (v_flags, vllm_reasons, v_ids, v_kept),
            (s_flags, sglang_reasons, s_ids, s_kept),
        ):
            for key, flag in zip(reasons, flags, strict=True):
                reasons[key] += flag
            if any(flags):
                ids.append(it.id)
            else:
                kept[it.id] = o
    return {
        "vllm": ShareGptDrops("vllm", len(v_ids), vllm_reasons, tuple(v_ids), v_kept),
        "sglang": ShareGptDrops("sglang", len(s_ids), sglang_reasons, tuple(s_ids), s_kept),
    }
