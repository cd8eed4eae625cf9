"""The one set of test factories: rows, shards, candidates and corpora, built in code.

Rows come in two kinds: rendered with a real tokenizer's chat template (:func:`row_from_messages`,
:func:`chat_rows`, :func:`make_corpus`) and synthetic (:func:`make_row`, :func:`sized_row`,
:func:`random_row`: ids below 1000 unless asked otherwise, valid for every real tokenizer, no
chat-template markers). Every builder returns the row as the dict a shard line holds
(:func:`as_row`); :func:`dumps`/:func:`lines_of`/:func:`write_shard`/:func:`shard_with` write
them. Candidates: :func:`candidate`, :func:`grouped_candidates`; a small report on them:
:func:`two_source_report`. Suite items: :func:`suite_item`.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

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
    return as_row(full, [0] * len(prompt) + [1] * (len(full) - len(prompt)), len(prompt), source)


def as_row(ids: Sequence[int], mask: Sequence[int], n_prompt: int, source: str) -> dict[str, Any]:
    """The dict of one valid shard line: ``seq_len`` and ``n_response_tokens`` follow from ids."""
    return {
        "input_ids": list(ids),
        "loss_mask": list(mask),
        "seq_len": len(ids),
        "n_prompt_tokens": n_prompt,
        "n_response_tokens": len(ids) - n_prompt,
        "source": source,
    }


def make_row(i: int, source: str = "chat") -> dict[str, Any]:
    """A synthetic valid row of 8–40 ids below 1000; ``(source, i)`` makes it unique and
    reproducible."""
    rng = random.Random(f"{source}-{i}")
    n = rng.randint(8, 40)
    p = rng.randint(1, n - 1)
    return as_row([rng.randrange(1000) for _ in range(n)], [0] * p + [1] * (n - p), p, source)


def sized_row(
    source: str, n_prompt: int, n_resp: int, *, runs: int = 1, base: int = 0
) -> dict[str, Any]:
    """A synthetic row of given lengths: prompt ids unique per (source, n_prompt, base),
    ``runs`` trained spans (2: an earlier trained turn inside the prompt)."""
    seq = n_prompt + n_resp
    ids = [(base * 7919 + n_prompt * 31 + j) % 5000 + 10 for j in range(seq)]
    mask = [0] * n_prompt + [1] * n_resp
    if runs == 2 and n_prompt >= 3:
        mask[1] = 1
    return as_row(ids, mask, n_prompt, source)


def random_row(n: int, p: int, *, seed: int = 0, source: str = "s") -> dict[str, Any]:
    """A synthetic row of ``n`` ids below 160,000 and a random 0/1 mask (many trained runs)."""
    rng = np.random.default_rng(seed)
    mask = (rng.random(n) < 0.5).astype(int).tolist()
    return as_row(rng.integers(0, 160000, n).tolist(), mask, p, source)


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


def dumps(row: Any) -> bytes:
    """One compact JSON line (json, not orjson: it also writes integers beyond 64 bits)."""
    return json.dumps(row, separators=(",", ":"), ensure_ascii=False).encode()


def lines_of(rows: Sequence[dict[str, Any]]) -> bytes:
    """Rows as JSONL bytes, one compact line each."""
    return b"".join(dumps(r) + b"\n" for r in rows)


def shard_with(
    path: Path,
    bad: bytes,
    *,
    rows: Sequence[dict[str, Any]] | None = None,
    source: str = "chat",
    before: int = 2,
    after: int = 2,
) -> Path:
    """``before`` valid rows, the bad line, ``after`` valid rows: the bad line is ``before + 1``.

    The valid rows are ``rows`` (the first ``before + after``), else :func:`make_row` rows.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    valid = list(rows or [make_row(i, source) for i in range(before + after)])
    valid = valid[: before + after]
    path.write_bytes(lines_of(valid[:before]) + bad + b"\n" + lines_of(valid[before:]))
    return path


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


def synthetic_corpus(root: Path, sizes: dict[str, int]) -> Path:
    """``root/<source>.jsonl`` of :func:`make_row` rows for each source (no tokenizer needed)."""
    root.mkdir(parents=True, exist_ok=True)
    for source, n in sizes.items():
        (root / f"{source}.jsonl").write_bytes(lines_of([make_row(i, source) for i in range(n)]))
    return root


def candidate(
    key: int,
    *,
    source: str = "x",
    n_prompt: int | None = None,
    n_resp: int = 0,
    shard: str | None = None,
    line: int = 1,
    offset: int = 0,
) -> Any:
    """A :class:`~distprompt.records.Candidate`: prompt ids ``0..n_prompt-1`` (or the single id
    ``key % 7`` when ``n_prompt`` is None), response ids ``0..n_resp-1``, provenance
    ``shard:line`` at byte ``offset`` (``shard`` defaults to ``<source>.jsonl``)."""
    from distprompt.records import Candidate, Provenance

    prompt = np.array([key % 7] if n_prompt is None else np.arange(n_prompt), dtype=np.int32)
    return Candidate(
        key=key,
        source=source,
        prompt_ids=prompt,
        prompt_mask=np.zeros(prompt.shape[0], dtype=np.int8),
        response_ids=np.arange(n_resp, dtype=np.int32),
        n_response_tokens=n_resp,
        provenance=Provenance(shard if shard is not None else f"{source}.jsonl", line, offset),
    )


def grouped_candidates(source: str, per: int = 10) -> tuple[list[Any], np.ndarray, Any]:
    """Four groups of ``per`` identical candidates and their :class:`SourceStats`: content
    ``e_g`` (returned as the matrix), prompt length ``10 * 2**g``, response length ``5(g+1)``."""
    from distprompt.records import SourceStats

    cands, content = [], []
    st = SourceStats()
    for g in range(4):
        for j in range(per):
            i = g * per + j
            cands.append(
                candidate(i, source=source, n_prompt=10 * 2**g, n_resp=5 * (g + 1), line=i + 1)
            )
            content.append(np.eye(4)[g])
            st.rows += 1
            st.prompt_lengths[10 * 2**g] += 1
            st.response_lengths[5 * (g + 1)] += 1
            st.first_reply_lengths[5 * (g + 1)] += 1
    return cands, np.array(content), st


def _report_items(cands: list[Any], idx: list[int], weights: list[float]) -> list[Any]:
    from distprompt.records import SuiteItem

    return [
        SuiteItem(
            id=f"{cands[i].source}-{i}",
            source=cands[i].source,
            prompt=f"prompt {i}",
            n_prompt_tokens=cands[i].n_prompt_tokens,
            n_response_tokens=cands[i].n_response_tokens,
            max_tokens=1,
            cluster=j,
            cluster_size=10,
            weight=w,
            provenance=cands[i].provenance,
            prompt_ids=tuple(int(t) for t in cands[i].prompt_ids),
        )
        for j, (i, w) in enumerate(zip(idx, weights, strict=True))
    ]


def two_source_report(*, items_later: bool = False, fidelity: bool = False) -> Any:
    """A :class:`~distprompt.write.report.Report` of two sources built on
    :func:`grouped_candidates`: ``a`` (40 rows) takes one item per group, ``b`` (20 rows) the two
    shortest groups. ``items_later``: built before the items (their counts only), then
    completed with them (:func:`~distprompt.write.report.with_items`), as the pipeline does;
    ``fidelity``: the items carry recovery verdicts (token-exact or not, by turns or flat)."""
    from distprompt.choose.stratify import Quota
    from distprompt.write.metrics import measure_source
    from distprompt.write.report import build_report, with_items

    a, ca, sa = grouped_candidates("a", per=10)  # 40 rows
    b, cb, sb = grouped_candidates("b", per=5)  # 20 rows
    ev = {
        "a": measure_source(
            a,
            [0, 10, 20, 30],
            [0.25] * 4,
            stats=sa,
            content=ca,
            log_length=np.log([c.n_prompt_tokens for c in a]),
            seed=0,
        ),
        "b": measure_source(
            b,
            [0, 5],
            [0.5, 0.5],
            stats=sb,
            content=cb,
            log_length=np.log([c.n_prompt_tokens for c in b]),
            seed=0,
        ),
    }
    items = _report_items(a, [0, 10, 20, 30], [0.25] * 4) + _report_items(b, [0, 5], [0.5, 0.5])
    if fidelity:
        kinds = [("tokens", "turns"), ("text", "turns"), ("lossy", "flat")]
        items = [
            dataclasses.replace(it, fidelity=kinds[i % 3][0], structure=kinds[i % 3][1])
            for i, it in enumerate(items)
        ]
    quotas = {"a": Quota("a", 4, 4), "b": Quota("b", 4, 4)}
    stats = {"a": sa, "b": sb}
    if items_later:
        early = build_report(
            ev, stats=stats, quotas=quotas, items=(), selected={"a": 4, "b": 2},
            meta={"method": "test"},
        )  # fmt: skip
        return with_items(early, items)
    return build_report(ev, stats=stats, quotas=quotas, items=items, meta={"method": "test"})


def suite_item(n: int, *, source: str = "s", **fields: Any) -> Any:
    """A :class:`~distprompt.records.SuiteItem` ``<source>-<n>`` from ``<source>.jsonl`` line
    ``n + 1``: prompt ``"p"`` of one id, no response, weight 1; ``fields`` override any field."""
    from distprompt.records import Provenance, SuiteItem

    base: dict[str, Any] = {
        "id": f"{source}-{n}",
        "source": source,
        "prompt": "p",
        "n_prompt_tokens": 1,
        "n_response_tokens": 0,
        "max_tokens": 0,
        "cluster": 0,
        "cluster_size": 1,
        "weight": 1.0,
        "provenance": Provenance(f"{source}.jsonl", n + 1, 0),
        "prompt_ids": (1,),
    }
    return SuiteItem(**{**base, **fields})
