"""What a user would write instead of distprompt, and the floors of any full-parse reader.

Each runs in its own process (``python benchmarks/baselines.py NAME DATA``) so that its wall time
and peak memory are its own:

* ``lines``: iterate over every line of every shard (binary), nothing else;
* ``orjson``: ``orjson.loads`` every line, nothing else — the floor of any reader that parses
  the JSON;
* ``stdlib``: the hand-written script: ``json.loads`` every line, check the lengths, keep the
  prompt ids per source, dedup with a set, draw ``--per-source`` at random;
* ``polars``: the same with ``polars.scan_ndjson`` (lazy): the prompt slice per row, unique per
  source, a sample per source;
* ``decompress``: read every ``.gz``/``.zst`` shard to its end (the decompression floor).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path


def _files(data: str) -> list[Path]:
    root = Path(data)
    suffixes = (".jsonl", ".jsonl.gz", ".jsonl.zst")
    return sorted(p for p in root.rglob("*") if p.name.endswith(suffixes))


def lines(data: str, per_source: int) -> None:
    n = 0
    for f in _files(data):
        with open(f, "rb") as fh:
            for _ in fh:
                n += 1
    print(n)


def orjson_floor(data: str, per_source: int) -> None:
    import orjson

    n = 0
    for f in _files(data):
        with open(f, "rb") as fh:
            for line in fh:
                orjson.loads(line)
                n += 1
    print(n)


def stdlib(data: str, per_source: int) -> None:
    by_source: dict[str, set[tuple[int, ...]]] = {}
    for f in _files(data):
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                r = json.loads(line)
                if len(r["input_ids"]) != r["seq_len"] or len(r["loss_mask"]) != r["seq_len"]:
                    continue
                by_source.setdefault(r["source"], set()).add(
                    tuple(r["input_ids"][: r["n_prompt_tokens"]])
                )
    rng = random.Random(0)
    picked = {s: rng.sample(sorted(p), min(per_source, len(p))) for s, p in by_source.items()}
    print(sum(len(v) for v in picked.values()))


def polars_lazy(data: str, per_source: int) -> None:
    import polars as pl

    schema = {
        "input_ids": pl.List(pl.Int64),
        "loss_mask": pl.List(pl.Int64),
        "seq_len": pl.Int64,
        "n_prompt_tokens": pl.Int64,
        "n_response_tokens": pl.Int64,
        "source": pl.String,
    }
    lf = pl.scan_ndjson([str(f) for f in _files(data)], schema=schema)
    prompts = (
        lf.filter(pl.col("input_ids").list.len() == pl.col("seq_len"))
        .select(
            pl.col("source"),
            pl.col("input_ids").list.slice(0, pl.col("n_prompt_tokens")).alias("prompt"),
        )
        .unique()
        .collect()
    )
    picked = prompts.group_by("source").map_groups(
        lambda g: g.sample(min(per_source, g.height), seed=0)
    )
    print(picked.height)


def decompress(data: str, per_source: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from distprompt.read.shards import open_shard

    n = 0
    for f in _files(data):
        with open_shard(f) as fh:
            while chunk := fh.read(1 << 20):
                n += len(chunk)
    print(n)


JOBS = {
    "lines": lines,
    "orjson": orjson_floor,
    "stdlib": stdlib,
    "polars": polars_lazy,
    "decompress": decompress,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("job", choices=sorted(JOBS))
    ap.add_argument("data")
    ap.add_argument("--per-source", type=int, default=50)
    a = ap.parse_args()
    JOBS[a.job](a.data, a.per_source)


if __name__ == "__main__":
    main()
