"""The read-back of chosen candidates: their prompt, prompt mask and first response read again
from their shards by byte offset (or row index), for the rows the pass did not keep whole
(:func:`load_candidates`), and the tokenizer checks' sample, taken from the pass's pools where
they hold it (:func:`sampled_prompts`). A row read back must be the one the pass read: a shard
that changed since is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from distprompt.errors import DataError, InputError
from distprompt.read.fastrow import RowView, read_row
from distprompt.read.pools import BottomK, compact_ids, prompt_key
from distprompt.read.shards import rows_at
from distprompt.read.validate import DEFAULT_MAX_LINE_BYTES
from distprompt.records import Candidate, Shard

__all__ = ["load_candidates", "sampled_prompts"]


def sampled_prompts(
    pool: BottomK,
    n: int,
    shards: Sequence[Shard],
    *,
    seed: int = 0,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> tuple[list[Candidate], int]:
    """The first ``n`` candidates of ``pool`` with their prompt ids, and how many of them had
    to be read back.

    The ids of a candidate come from the pool's sample (held by the pass) when the sample holds
    its key with the same provenance — the row they would be read back from. The others (``n``
    larger than the sample, or a pool merged from partials without one) are read back from
    ``shards`` with :func:`load_candidates`, which refuses a shard that changed.

    Raises:
        InputError: As :func:`load_candidates`, for the candidates read back.
    """
    cands = pool.candidates(n)
    held = pool.sample._entries if pool.sample is not None else {}
    out = list(cands)
    missing: list[int] = []
    for i, c in enumerate(cands):
        h = held.get(c.key)
        if h is not None and h.prompt_ids is not None and h.provenance == c.provenance:
            out[i] = replace(c, prompt_ids=h.prompt_ids)
        else:
            missing.append(i)
    if missing:
        got = load_candidates(
            [cands[i] for i in missing], shards, seed=seed, max_line_bytes=max_line_bytes
        )
        for i, c in zip(missing, got, strict=True):
            out[i] = c
    return out, len(missing)


def load_candidates(
    cands: Sequence[Candidate],
    shards: Sequence[Shard],
    *,
    seed: int = 0,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> list[Candidate]:
    """The candidates with their prompt, prompt mask and first response, read back from their
    shards by byte offset (those already held are returned as they are).

    Raises:
        InputError: A shard cannot be read, or its row at the offset is not the one the pass
            read (the file changed since).
    """
    by_name = {s.name: s for s in shards}
    out = list(cands)
    todo: dict[str, list[int]] = {}
    for i, c in enumerate(out):
        if not c.loaded:
            todo.setdefault(c.provenance.shard, []).append(i)
    for name, idx in todo.items():
        shard = by_name[name]
        order = sorted(idx, key=lambda j: out[j].provenance.offset)
        at = rows_at(
            shard, [out[i].provenance.offset for i in order], max_line_bytes=max_line_bytes
        )
        for i, raw in zip(order, at, strict=True):
            c = out[i]
            p = c.provenance
            row = raw if isinstance(raw, RowView) else None  # a table row, checked
            if isinstance(raw, bytes):
                try:
                    # the pass's reader: the whole row validated, only what is kept parsed
                    row = read_row(raw, shard=name, line=p.line, offset=p.offset)
                except DataError:
                    row = None
            if row is None or prompt_key(row.prompt_ids, seed=seed) != c.key:
                raise InputError(
                    f"{name}:{p.line}: expected the row read before at byte {p.offset}, found "
                    "another; the shard changed during the run — run again"
                )
            start, end = row.first_response_span()
            out[i] = replace(
                c,
                prompt_ids=compact_ids(row.prompt_ids),
                prompt_mask=row.prompt_mask(),
                response_ids=compact_ids(row.ids(start, end)),
            )
    return out
