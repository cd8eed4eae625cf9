"""Factories for small tokenized corpora built in code with a real tokenizer."""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TOPICS = [
    "sorting a list in Python",
    "Rust lifetimes",
    "French onion soup",
    "quantum entanglement",
    "tax law in Germany",
    "soccer tactics",
    "SQL window functions",
    "the Krebs cycle",
    "日本の歴史",
    "la révolution française",
    "kubernetes networking",
    "emoji 🎉 usage",
]
FILLER = ["very", "quite", "some", "details", "please", "explain", "carefully", "example"]


def _ids(enc: Any) -> list[int]:
    return list(enc["input_ids"] if hasattr(enc, "keys") else enc)


def row_from_messages(
    tokenizer: Any,
    messages: Sequence[dict[str, Any]],
    source: str,
    *,
    train_turn: int = 0,
    tools: Sequence[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A training row: the prompt ends at the generation prompt of assistant turn ``train_turn``."""
    asst = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    k = asst[train_turn]
    kw: dict[str, Any] = {"tools": list(tools)} if tools else {}
    full = _ids(tokenizer.apply_chat_template(list(messages), tokenize=True, **kw))
    prompt = _ids(
        tokenizer.apply_chat_template(
            list(messages[:k]), tokenize=True, add_generation_prompt=True, **kw
        )
    )
    assert full[: len(prompt)] == prompt
    mask = [0] * len(prompt) + [1] * (len(full) - len(prompt))
    return {
        "input_ids": full,
        "loss_mask": mask,
        "seq_len": len(full),
        "n_prompt_tokens": len(prompt),
        "n_response_tokens": len(full) - len(prompt),
        "source": source,
    }


def chat_rows(tokenizer: Any, source: str, n: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` varied single- and multi-turn chat rows."""
    rng = random.Random(f"{source}-{seed}")
    rows = []
    for i in range(n):
        topic = rng.choice(TOPICS)
        words = " ".join(rng.choice(FILLER) for _ in range(rng.randint(2, 120)))
        msgs: list[dict[str, Any]] = []
        if rng.random() < 0.5:
            msgs.append({"role": "system", "content": f"You are an expert on {source}."})
        msgs.append({"role": "user", "content": f"[{i}] Tell me about {topic}. {words}"})
        msgs.append({"role": "assistant", "content": "Sure: " + "ok " * rng.randint(3, 40)})
        rows.append(row_from_messages(tokenizer, msgs, source))
    return rows


def write_shard(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    """Write rows as JSONL (gzip or zstd by suffix)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(data))
    elif path.name.endswith(".zst"):
        import zstandard

        path.write_bytes(zstandard.ZstdCompressor().compress(data))
    else:
        path.write_bytes(data)
    return path


def make_corpus(
    root: Path,
    tokenizer: Any,
    sizes: dict[str, int],
    *,
    seed: int = 0,
    dup_every: int = 0,
) -> Path:
    """``prepared/<ID>_<source>/tokenized_data.jsonl`` for each source; optional exact dups."""
    prepared = root / "prepared"
    for j, (source, n) in enumerate(sorted(sizes.items())):
        rows = chat_rows(tokenizer, source, n, seed=seed)
        if dup_every:
            rows = rows + rows[::dup_every]
        write_shard(prepared / f"A{j + 1}_{source}" / "tokenized_data.jsonl", rows)
    return prepared
