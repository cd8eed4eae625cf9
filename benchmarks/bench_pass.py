"""Speed and memory of distprompt's streaming pass against a load-everything baseline.

Builds a synthetic corpus by repeating ``data_samples/`` with perturbed ids (so prompts stay
unique), then runs, each in its own process so peak memory is its own:

* baseline: ``json.loads`` every line, keep every row's prompt ids in memory, dedup with a set,
  draw a uniform sample per source (what a hand-written script does);
* distprompt: :func:`distprompt.read.scan.scan` (validation, provenance, bottom-k pools).

Prints wall time and peak RSS for both and the ratios. Not a test: numbers depend on the machine.

Usage: python benchmarks/bench_pass.py [--copies 20] [--max-candidates 2000] [--workers 1]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def make_corpus(dst: Path, copies: int) -> int:
    rows = 0
    for shard in sorted((REPO / "data_samples" / "prepared").glob("*/tokenized_data.jsonl")):
        out = dst / shard.parent.name / shard.name
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(shard) as fh:
            lines = [json.loads(x) for x in fh]
        with open(out, "w") as fh:
            for c in range(copies):
                for r in lines:
                    ids = list(r["input_ids"])
                    ids[1] = (ids[1] + c) % 150000  # a different prompt each copy
                    fh.write(json.dumps({**r, "input_ids": ids}) + "\n")
                    rows += 1
    return rows


def baseline(data: str, k: int) -> None:
    by_source: dict[str, list[tuple[int, ...]]] = {}
    for path in sorted(Path(data).rglob("*.jsonl")):
        with open(path) as fh:
            for line in fh:
                r = json.loads(line)
                assert len(r["input_ids"]) == r["seq_len"]
                by_source.setdefault(r["source"], []).append(
                    tuple(r["input_ids"][: r["n_prompt_tokens"]])
                )
    rng = random.Random(0)
    for prompts in by_source.values():
        uniq = sorted(set(prompts))
        rng.sample(uniq, min(k, len(uniq)))


def distprompt_pass(data: str, k: int, workers: int) -> None:
    from distprompt.engine import Schedule
    from distprompt.read.scan import scan
    from distprompt.read.shards import discover_shards

    scan(discover_shards(data), max_candidates=k, schedule=Schedule(workers=workers))


def child(which: str, data: str, k: int, workers: int) -> None:
    t = time.perf_counter()
    if which == "baseline":
        baseline(data, k)
    else:
        distprompt_pass(data, k, workers)
    dt = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB on Linux
    if workers > 1:
        peak += resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps({"seconds": dt, "peak_mib": peak}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--max-candidates", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--child", choices=["baseline", "distprompt"])
    ap.add_argument("--data")
    a = ap.parse_args()
    if a.child:
        child(a.child, a.data, a.max_candidates, a.workers)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        rows = make_corpus(Path(tmp), a.copies)
        size = sum(p.stat().st_size for p in Path(tmp).rglob("*.jsonl")) / 2**20
        print(f"corpus: {rows} rows, {size:.0f} MiB, max_candidates={a.max_candidates}")
        res = {}
        for which in ("baseline", "distprompt"):
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    which,
                    "--data",
                    tmp,
                    "--max-candidates",
                    str(a.max_candidates),
                    "--workers",
                    str(a.workers),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            res[which] = json.loads(out.stdout.strip().splitlines()[-1])
            print(
                f"{which:>10}: {res[which]['seconds']:.1f} s, peak {res[which]['peak_mib']:.0f} MiB"
            )
        b, d = res["baseline"], res["distprompt"]
        print(
            f"ratio distprompt/baseline: time {d['seconds'] / b['seconds']:.2f}, "
            f"peak memory {d['peak_mib'] / b['peak_mib']:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
