"""The pass on the local engine and on Ray, 1 and 2 workers, and the costs a scaling model needs.

Builds a multi-shard corpus from perturbed copies of ``data_samples/`` (prompts stay unique), then
runs the pass (:func:`distprompt.read.scan.scan`) in a fresh process per configuration, interleaved
over ``--rounds`` rounds (A B C D A B C D …), and prints the median of each:

* ``local-1`` / ``local-2``: the local engine, ``--workers 1`` / ``2``;
* ``ray-1`` / ``ray-2``: a Ray started in the child with ``num_cpus=1`` / ``2`` (its start is
  timed apart: on a cluster it is paid once, not per run);
* the driver's CPU time during the Ray pass (fetching and merging partials): the per-unit cost
  that does not shrink with more nodes.

Also checks that every configuration gives the same partial (a digest of its pools and counts).
Not a test: numbers depend on the machine and on what else runs on it.

Usage: python benchmarks/bench_engine.py [--copies 20] [--parts 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIGS = ("local-1", "local-2", "ray-1", "ray-2")


def make_corpus(dst: Path, copies: int, parts: int) -> tuple[int, int]:
    """``parts`` shards per source of ``copies`` perturbed copies each; (rows, shards)."""
    rows = shards = 0
    for shard in sorted((REPO / "data_samples" / "prepared").glob("*/tokenized_data.jsonl")):
        lines = [json.loads(x) for x in shard.read_text(encoding="utf-8").splitlines()]
        outs = [
            open(dst / shard.parent.name / f"part{p}.jsonl", "w", encoding="utf-8")  # noqa: SIM115
            for p in range(parts)
            if (dst / shard.parent.name).mkdir(parents=True, exist_ok=True) or True
        ]
        shards += parts
        for c in range(copies):
            for r in lines:
                ids = list(r["input_ids"])
                ids[1] = (ids[1] + c) % 150000  # a different prompt each copy
                outs[c % parts].write(json.dumps({**r, "input_ids": ids}) + "\n")
                rows += 1
        for fh in outs:
            fh.close()
    return rows, shards


def child(config: str, data: str, k: int) -> None:
    from distprompt.engine import Schedule
    from distprompt.read.scan import scan
    from distprompt.read.shards import discover_shards

    engine, workers = config.split("-")
    start = 0.0
    if engine == "ray":
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # listen on 127.0.0.1
        import ray

        t = time.perf_counter()
        ray.init(
            address="local",
            num_cpus=int(workers),
            include_dashboard=False,
            logging_level=logging.WARNING,
        )
        start = time.perf_counter() - t
    shards = discover_shards(data)
    cpu0 = time.process_time()
    t = time.perf_counter()
    part = scan(shards, max_candidates=k, schedule=Schedule(workers=int(workers), engine=engine))
    seconds = time.perf_counter() - t
    driver_cpu = time.process_time() - cpu0
    h = hashlib.sha256()
    for src in sorted(part.stats):
        h.update(f"{src}:{part.stats[src].rows}".encode())
        for c in part.pools[src].candidates():
            h.update(f"{c.key}:{c.provenance}:{c.count}".encode())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "seconds": seconds,
                "start": start,
                "driver_cpu": driver_cpu,
                "peak_mib": peak,
                "digest": h.hexdigest()[:16],
            }
        )
    )


def merge_cost(data: str, k: int) -> dict[str, float]:
    """What the driver spends on one unit's partial: unpickling it and merging it into the
    total (here: the whole corpus read as one partial, merged into the partial of another seed,
    so no key is shared and every candidate is inserted or rejected)."""
    import pickle

    from distprompt.read.scan import scan
    from distprompt.read.shards import discover_shards

    shards = discover_shards(data)
    part = scan(shards, max_candidates=k)
    other = scan(shards, max_candidates=k, seed=1)
    n = sum(len(p) for p in part.pools.values())
    blob = pickle.dumps(part)
    t = time.process_time()
    got = pickle.loads(blob)
    loads = time.process_time() - t
    t = time.process_time()
    other.merge(got)
    merge = time.process_time() - t
    return {"candidates": n, "bytes": len(blob), "unpickle_s": loads, "merge_s": merge}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--parts", type=int, default=2, help="shards per source")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-candidates", type=int, default=2000)
    ap.add_argument("--child", choices=[*CONFIGS, "merge"])
    ap.add_argument("--data")
    a = ap.parse_args()
    if a.child == "merge":
        print(json.dumps(merge_cost(a.data, a.max_candidates)))
        return 0
    if a.child:
        child(a.child, a.data, a.max_candidates)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        rows, shards = make_corpus(Path(tmp), a.copies, a.parts)
        mib = sum(p.stat().st_size for p in Path(tmp).rglob("*.jsonl")) / 2**20
        print(f"corpus: {rows} rows, {shards} shards, {mib:.0f} MiB; k={a.max_candidates}")
        res: dict[str, list[dict[str, float]]] = {c: [] for c in CONFIGS}
        for _ in range(a.rounds):
            for config in CONFIGS:
                cmd = [sys.executable, __file__, "--child", config, "--data", tmp]
                cmd += ["--max-candidates", str(a.max_candidates)]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True)
                res[config].append(json.loads(out.stdout.strip().splitlines()[-1]))
        digests = {r["digest"] for rs in res.values() for r in rs}
        print(f"same partial in every run: {len(digests) == 1}")
        print("| config | pass s (median) | s/MiB | Ray start s | driver CPU s | peak MiB |")
        print("|---|---:|---:|---:|---:|---:|")
        for config, rs in res.items():
            med = {key: statistics.median(r[key] for r in rs) for key in rs[0] if key != "digest"}
            print(
                f"| {config} | {med['seconds']:.2f} | {med['seconds'] / mib:.4f} | "
                f"{med['start']:.1f} | {med['driver_cpu']:.2f} | {med['peak_mib']:.0f} |"
            )
        for k in sorted({a.max_candidates, 20000}):
            cmd = [sys.executable, __file__, "--child", "merge", "--data", tmp]
            out = subprocess.run([*cmd, "--max-candidates", str(k)], capture_output=True, text=True)
            m = json.loads(out.stdout.strip().splitlines()[-1])
            print(
                f"driver per partial, k={k}: {m['candidates']} candidates, "
                f"{m['bytes'] / 2**20:.1f} MiB pickled; unpickle {m['unpickle_s']:.3f} s, "
                f"merge {m['merge_s']:.3f} s"
            )
        print(
            "all runs:",
            json.dumps({c: [round(r["seconds"], 2) for r in rs] for c, rs in res.items()}),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
