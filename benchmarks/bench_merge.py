"""The driver's side of the Ray pass: merging the units' partials as they arrive, few large
units against many small ones.

Builds the corpus of ``bench_engine.py`` (perturbed copies of ``data_samples/``), reads it once per
unit size into the units' partials (``scan_unit``, not timed) and pickles each one — what a Ray
task leaves in the object store. Then replays what the driver does with them, in unit order, as
``scan`` does on Ray: unpickle one partial, rebase its line numbers on the units of its shard
before it, merge it into the total (the pools' windows written to a spill file, as the export on
Ray does), drop it. Per unit size and ``--max-candidates``, it prints:

* units, candidates that arrive (the sum over units: each unit holds at most ``k`` candidates per
  source it contains, and no more than its rows), pickled MiB;
* the driver's CPU seconds for the replay, split into unpickling and merging, and µs per arriving
  candidate (``d`` in docs/scale.md's model) and per unit;
* memory (tracemalloc, a second replay): the peak during the replay above what the total holds
  at the end — the partial in flight and the merge's transient — and the total itself. A driver
  that held every partial would show the sum of all partials here.

``--ray`` also runs the pass itself on a local Ray (2 CPUs, a fresh process per unit size) and
prints the driver's CPU seconds and peak RSS: Ray's own cost per task (submit, wait, fetch)
on top of the replay's.

Not a test: numbers depend on the machine and on what else runs on it.

Usage: python benchmarks/bench_merge.py [--copies 10] [--ray]
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import make_corpus

#: Unit sizes (None: whole shards) from few large units to many small ones.
SIZES: tuple[int | None, ...] = (None, 1 << 20, 256 << 10, 64 << 10, 16 << 10)


def _label(size: int | None) -> str:
    return "whole shards" if size is None else f"{size >> 10} KiB"


def partials(data: str, size: int | None, k: int) -> tuple[list[Any], list[bytes]]:
    """The units of the corpus at ``size`` and their pickled results."""
    from distprompt.read.scan import SAMPLE, scan_unit
    from distprompt.read.shards import discover_shards
    from distprompt.read.units import units

    work = units(discover_shards(data), unit_bytes=size)
    blobs = [pickle.dumps(scan_unit(u, max_candidates=k, sample=SAMPLE)) for u in work]
    return work, blobs


def replay(
    work: list[Any], blobs: list[bytes], k: int, spill_dir: str
) -> tuple[dict[str, float], Any]:
    """The driver's loop over the units' results, in unit order (see ``scan``'s ``merge``); its
    figures and the merged partial."""
    from distprompt.read.scan import SAMPLE, Partial
    from distprompt.read.spill import WindowStore

    total = Partial(k=k, sample=SAMPLE, spill=WindowStore(spill_dir))
    base: dict[str, int] = {}
    unpickle = merge = 0.0
    arrived = 0
    for unit, blob in zip(work, blobs, strict=True):
        t = time.process_time()
        res = pickle.loads(blob)
        t1 = time.process_time()
        arrived += sum(len(p) for p in res.partial.pools.values())
        name = unit.shard.name
        at = base.get(name, 0)
        if at:
            res.partial.rebase(name, at)
        base[name] = at + res.lines
        total.merge(res.partial)
        del res
        merge += time.process_time() - t1
        unpickle += t1 - t
    kept = sum(len(p) for p in total.pools.values())
    return {"arrived": arrived, "kept": kept, "unpickle_s": unpickle, "merge_s": merge}, total


def replay_memory(work: list[Any], blobs: list[bytes], k: int, spill_dir: str) -> dict[str, float]:
    """Peak traced memory during the replay, above what the merged total holds at its end."""
    gc.collect()
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    _, total = replay(work, blobs, k, spill_dir)
    gc.collect()
    end, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del total
    return {"total_mib": (end - start) / 2**20, "transient_mib": (peak - end) / 2**20}


def ray_child(data: str, size: int | None, k: int) -> None:
    """The pass on a local Ray of 2 CPUs: the driver's CPU seconds and peak RSS."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # listen on 127.0.0.1
    import ray

    from distprompt.engine import Schedule
    from distprompt.read.scan import SAMPLE, scan
    from distprompt.read.shards import discover_shards
    from distprompt.read.spill import WindowStore

    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    shards = discover_shards(data)
    with tempfile.TemporaryDirectory() as tmp:
        cpu = time.process_time()
        t = time.perf_counter()
        scan(
            shards,
            max_candidates=k,
            schedule=Schedule(engine="ray", unit_bytes=size if size is not None else 1 << 40),
            sample=SAMPLE,
            spill=WindowStore(tmp),
        )
        wall = time.perf_counter() - t
        cpu = time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"driver_cpu_s": cpu, "wall_s": wall, "peak_rss_mib": peak}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--parts", type=int, default=2, help="shards per source")
    ap.add_argument("--k", type=int, nargs="+", default=[20000, 200], help="--max-candidates")
    ap.add_argument("--ray", action="store_true", help="also the pass on a local Ray")
    ap.add_argument("--ray-child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.ray_child is not None:
        ray_child(a.data, a.ray_child or None, a.k[0])
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp, "data")
        rows, shards = make_corpus(data, a.copies, a.parts)
        mib = sum(p.stat().st_size for p in data.rglob("*.jsonl")) / 2**20
        print(f"corpus: {rows} rows, {shards} shards, {mib:.0f} MiB")
        print(
            "| k | units | unit size | candidates arriving | pickled MiB | unpickle s | "
            "merge s | µs/candidate | ms/unit | total MiB | transient MiB |"
        )
        print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for k in a.k:
            for size in SIZES:
                work, blobs = partials(str(data), size, k)
                r, _ = replay(work, blobs, k, tmp)
                m = replay_memory(work, blobs, k, tmp)
                cpu = r["unpickle_s"] + r["merge_s"]
                print(
                    f"| {k} | {len(work)} | {_label(size)} | {r['arrived']:,} | "
                    f"{sum(map(len, blobs)) / 2**20:.1f} | {r['unpickle_s']:.3f} | "
                    f"{r['merge_s']:.3f} | {cpu / max(r['arrived'], 1) * 1e6:.1f} | "
                    f"{cpu / len(work) * 1e3:.2f} | {m['total_mib']:.1f} | "
                    f"{m['transient_mib']:.1f} |",
                    flush=True,
                )
                del work, blobs
        if a.ray:
            print("\n| on Ray (2 CPUs), k | unit size | driver CPU s | wall s | peak RSS MiB |")
            print("|---:|---|---:|---:|---:|")
            for size in SIZES:
                cmd = [sys.executable, __file__, "--ray-child", str(size or 0), "--data", str(data)]
                out = subprocess.run(
                    [*cmd, "--k", str(a.k[0])], capture_output=True, text=True, check=True
                )
                r = json.loads(out.stdout.strip().splitlines()[-1])
                print(
                    f"| {a.k[0]} | {_label(size)} | {r['driver_cpu_s']:.2f} | "
                    f"{r['wall_s']:.1f} | {r['peak_rss_mib']:.0f} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
