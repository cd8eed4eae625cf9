"""The read-back of the chosen rows (read/readback.py), where selection reads it (in the
selection job, pipeline/schedule.py), and what a Parquet read-back holds on to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from distprompt.config import Config
from distprompt.errors import InputError
from distprompt.pipeline.schedule import select_job
from distprompt.pipeline.sources import heavy_candidates, quotas_of, select_source
from distprompt.read.readback import load_candidates
from distprompt.read.scan import Partial, scan
from distprompt.read.shards import discover_shards, rows_at
from distprompt.records import Candidate

from factories import random_row, write_shard

CONFIG = Config(per_source=5, seed=7)


def _rows(source: str, n: int, *, seed: int = 0) -> list[dict[str, Any]]:
    return [
        random_row(40 + 13 * i % 90, 5 + i % 30, seed=seed + i, source=source) for i in range(n)
    ]


def _write(root: Path, kind: str, rows: dict[str, list[dict[str, Any]]]) -> None:
    for i, (source, got) in enumerate(sorted(rows.items())):
        folder = root / f"A{i}_{source}"
        if kind == "jsonl":
            write_shard(folder / "tokenized_data.jsonl", got)
        else:
            folder.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.Table.from_pylist(got), folder / "part-0.parquet", row_group_size=16)


def _pass(root: Path) -> Partial:
    return scan(discover_shards(root), max_candidates=60, seed=CONFIG.seed)


def _job(part: Partial, source: str) -> list[Candidate]:
    quotas = quotas_of(part, CONFIG)
    chosen, _ = select_job(
        source,
        quotas[source],
        CONFIG,
        part.stats[source],
        part.pools[source],
        heavy_candidates(part, source),
        part.shards,
    )
    return [c.candidate for c in chosen]


def _seen(c: Candidate) -> tuple[Any, ...]:
    assert c.prompt_ids is not None and c.prompt_mask is not None
    assert c.response_ids is not None
    return (
        c.key,
        c.provenance,
        c.prompt_ids.tolist(),
        c.prompt_mask.tolist(),
        c.response_ids.tolist(),
    )


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_the_selection_job_reads_its_picks_back(tmp_path: Path, kind: str) -> None:
    """A source's picks come out of its selection job read back (prompt, mask, first reply),
    the same candidates, in the same order, as the selection followed by a read-back."""
    _write(tmp_path, kind, {"a": _rows("a", 70), "b": _rows("b", 45, seed=100)})
    part = _pass(tmp_path)
    quotas = quotas_of(part, CONFIG)
    shards = list(part.shards.values())
    for source in ("a", "b"):
        got = _job(part, source)
        plain, _ = select_source(
            part.pools[source].candidates(),
            quotas[source],
            CONFIG,
            part.stats[source],
            heavy_candidates(part, source),
            part.shards,
        )
        assert len(got) == 5 and all(c.loaded for c in got)
        want = load_candidates([c for c, _, _, _ in plain], shards, seed=CONFIG.seed)
        assert [_seen(c) for c in got] == [_seen(c) for c in want]


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_a_shard_changed_after_the_pass_fails_the_selection_job(tmp_path: Path, kind: str) -> None:
    """The rows read back in the selection job are checked as the main thread checked them:
    a shard rewritten since the pass (other rows at the same places) is refused, naming it."""
    rows = _rows("a", 70)
    _write(tmp_path, kind, {"a": rows})
    part = _pass(tmp_path)
    _write(tmp_path, kind, {"a": _rows("a", 70, seed=5000)})
    with pytest.raises(
        InputError, match=r"A0_a/.*: expected the row read before .*the shard changed"
    ):
        _job(part, "a")


def test_a_parquet_read_back_holds_no_batch(tmp_path: Path) -> None:
    """The rows a Parquet read-back returns hold their own values, not views of the record
    batches they were decoded in: once it returns, none of the batches is still allocated
    (one row wanted in each of 8 row groups of long rows: ~1 MB a batch of 16 rows)."""
    rows = [random_row(12_000, 100 + i, seed=i) for i in range(8 * 32)]
    path = tmp_path / "long.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=32)
    [shard] = discover_shards(path)
    before = pa.total_allocated_bytes()
    got = rows_at(shard, [g * 32 + 20 for g in range(8)])
    held = pa.total_allocated_bytes() - before
    assert all(r is not None and not isinstance(r, bytes) for r in got)
    assert held < 200_000, f"{held} bytes of Arrow memory held by the rows read back"
    for i, row in zip(range(8), got, strict=True):
        assert row is not None and not isinstance(row, bytes)
        assert row.ids(0, row.seq_len).tolist() == rows[i * 32 + 20]["input_ids"]
