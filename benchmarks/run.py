"""One interleaved benchmark run: distprompt against the baselines, ratios in RESULTS.md.

Every job runs in its own process, in rounds (A B C … A B C …) so that the machine's load,
shared with other work, hits every job alike: the ratios of one run are what this measures, not
the absolute seconds. For each job: the median wall time over the rounds, and the peak memory
of its whole process tree, sampled every 200 ms from /proc with the workers included: the sum
of the processes' PSS (proportional set size: a page shared by a forked worker and its parent
counts once, split between them — what the tree holds) and, for comparison, the sum of their
RSS (which counts such a page in every process that maps it); and the ``ru_maxrss`` that
``wait4`` reports (the largest single process).

Jobs (see ``baselines.py``): distprompt ``export --per-source 50`` with 1 and 2 workers,
``inspect`` with 1 and 2 workers, the stdlib-json script, polars ``scan_ndjson`` (lazy), the
orjson-every-line floor and the line-iteration floor; on the ``.gz``/``.zst`` copies the export
and the decompression floor; on the 4x corpus the export (memory growth). Then selection alone
at 5k and 20k candidates, and a pyinstrument profile of the export.

Usage:
    python benchmarks/run.py --data /work/bench-data/c1 --data4 /work/bench-data/c4 \\
        --gz /work/bench-data/c1gz --zst /work/bench-data/c1zst --rounds 3
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable


@dataclass
class Job:
    name: str
    argv: list[str]
    walls: list[float] = field(default_factory=list)
    tree_mb: list[float] = field(default_factory=list)
    pss_mb: list[float] = field(default_factory=list)
    main_mb: list[float] = field(default_factory=list)
    ok: bool = True
    tail: str = ""


def _tree_kb(pid: int) -> tuple[int, int]:
    """RSS and PSS of ``pid`` and all its descendants (kB)."""
    rss = pss = 0
    children: dict[int, list[int]] = {}
    try:
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as fh:
                    parts = fh.read().rsplit(")", 1)[1].split()
                children.setdefault(int(parts[1]), []).append(int(d))
            except OSError:
                continue
    except OSError:
        return 0, 0
    todo = [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, []))
        try:
            with open(f"/proc/{p}/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1])
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1])
                        break
        except OSError:
            continue
    return rss, pss


def run(job: Job) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    t = time.perf_counter()
    proc = subprocess.Popen(
        job.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=REPO
    )
    peak = [0, 0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            rss, pss = _tree_kb(proc.pid)
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)
            # smaps_rollup walks every page table of the tree: read every 50 ms it took ~10 %
            # of a core (the exports ran 10-20 % slower than alone).
            done.wait(0.2)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    done.set()
    th.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        job.ok = False
        job.tail = out.decode(errors="replace")[-2000:]
        print(f"  {job.name}: FAILED ({proc.returncode})\n{job.tail}", flush=True)
        return
    job.walls.append(wall)
    job.tree_mb.append(peak[0] / 1024)
    job.pss_mb.append(peak[1] / 1024)
    job.main_mb.append(usage.ru_maxrss / 1024)
    print(
        f"  {job.name}: {wall:.2f} s, tree PSS {peak[1] / 1024:.0f} MB, "
        f"RSS {peak[0] / 1024:.0f} MB",
        flush=True,
    )


def med(v: list[float]) -> float:
    return statistics.median(v) if v else float("nan")


def export_argv(data: str, tok: str, out: Path, workers: int) -> list[str]:
    return [
        PY, "-m", "distprompt", "export", data, "--tokenizer", tok, "--per-source", "50",
        "--out", str(out), "--overwrite", "--no-progress", "--workers", str(workers),
    ]  # fmt: skip


def machine() -> dict[str, str]:
    info = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cores": str(os.cpu_count()),
    }
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as fh:
            info["memory"] = fh.readline().split(":", 1)[1].strip()
    except OSError:
        pass
    import numpy
    import orjson
    import polars

    info["versions"] = (
        f"numpy {numpy.__version__}, orjson {orjson.__version__}, polars {polars.__version__}"
    )
    return info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--data4", default=None, help="the 4x corpus (memory growth)")
    ap.add_argument("--gz", default=None)
    ap.add_argument("--zst", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--extra-rounds", type=int, default=1, help="rounds of the compressed jobs")
    ap.add_argument("--big-workers", default="w1,w2", help="exports on the 4x corpus")
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "RESULTS.md")
    ap.add_argument("--json", type=Path, default=None, help="also write the raw figures here")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--skip", default="", help="comma-separated jobs to leave out")
    a = ap.parse_args()
    if not a.no_profile and importlib.util.find_spec("pyinstrument") is None:
        # checked first: found missing after the run, the profiles were left out silently
        sys.exit(
            f"pyinstrument is not installed for {PY} (pip install -e '.[bench]'), "
            "or pass --no-profile"
        )
    tok = (
        a.tokenizer
        or subprocess.check_output(
            [PY, str(REPO / "scripts" / "tokenizer_dir.py"), "qwen3"], text=True
        ).strip()
    )
    tmp = Path(tempfile.mkdtemp(prefix="distprompt-bench-"))
    base = [PY, str(REPO / "benchmarks" / "baselines.py")]
    jobs = [
        Job("export w1", export_argv(a.data, tok, tmp / "e1", 1)),
        Job("export w2", export_argv(a.data, tok, tmp / "e2", 2)),
        Job("inspect w1", [PY, "-m", "distprompt", "inspect", a.data, "--json"]),
        Job("inspect w2", [PY, "-m", "distprompt", "inspect", a.data, "--json", "--workers", "2"]),
        Job("stdlib json", [*base, "stdlib", a.data]),
        Job("polars lazy", [*base, "polars", a.data]),
        Job("orjson floor", [*base, "orjson", a.data]),
        Job("line floor", [*base, "lines", a.data]),
    ]
    extra: list[Job] = []  # interleaved among themselves, ``--extra-rounds`` times
    for name, d in (("gz", a.gz), ("zst", a.zst)):
        if d:
            extra.append(Job(f"export w1 {name}", export_argv(d, tok, tmp / f"e{name}", 1)))
            extra.append(Job(f"decompress {name}", [*base, "decompress", d]))
            extra.append(
                Job(f"export w1 plain ({name} round)", export_argv(a.data, tok, tmp / "ep", 1))
            )
    skip = {s.strip() for s in a.skip.split(",") if s.strip()}
    jobs = [j for j in jobs if j.name not in skip]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load0 = os.getloadavg()
    sel: dict[int, str] = {}
    profile = ""
    shape_file = Path(a.data).parent / f"{Path(a.data).name}.shape.json"
    shape = json.loads(shape_file.read_text()) if shape_file.is_file() else {}
    big: list[Job] = []

    def write() -> None:  # after every stage: a run cut short still leaves its figures
        figures = {
            j.name: {"wall": med(j.walls), "tree_mb": max(j.tree_mb, default=float("nan")),
                     "pss_mb": max(j.pss_mb, default=float("nan")),
                     "main_mb": max(j.main_mb, default=float("nan")), "walls": j.walls,
                     "ok": j.ok}
            for j in [*jobs, *extra, *big]
            if j.walls
        }  # fmt: skip
        if a.json:
            a.json.write_text(json.dumps(figures, indent=1))
        a.out.write_text(
            _report(figures, shape, sel, profile, machine(), started, load0, os.getloadavg(), a)
        )

    for r in range(a.rounds):
        print(f"round {r + 1}/{a.rounds}", flush=True)
        for job in jobs:
            if job.ok:
                run(job)
        write()
    for r in range(a.extra_rounds):
        print(f"compressed, round {r + 1}/{a.extra_rounds}", flush=True)
        for job in extra:
            if job.ok:
                run(job)
        write()
    if a.data4:
        print("4x corpus", flush=True)
        big = [Job(f"export {w} 4x", export_argv(a.data4, tok, tmp / f"b{w}", int(w[1])))
               for w in a.big_workers.split(",")]  # fmt: skip
        for job in big:
            run(job)
        write()
    print("selection", flush=True)
    for n in (5000, 20000):
        outp = subprocess.run(
            [PY, str(REPO / "benchmarks" / "bench_select.py"), "--pool", str(n), "--k", "50"],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        sel[n] = outp.stdout.strip()
        print(sel[n], flush=True)
    write()
    if not a.no_profile:
        print("profile", flush=True)
        argv = [
            PY, "-m", "pyinstrument", "-m", "distprompt", "-v", "export", a.data,
            "--tokenizer", tok, "--per-source", "50", "--out", str(tmp / "prof"), "--overwrite",
            "--no-progress",
        ]  # fmt: skip
        pr = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
        # -v logs the time of each stage (the work in worker processes is not in the profile).
        stages = [ln for ln in pr.stderr.splitlines() if ln.startswith("INFO") and " s" in ln]
        profile = "\n".join(["# stages (-v)", *stages, "", _trim_profile(pr.stdout)])
        write()
        pr = subprocess.run(
            [PY, "-m", "pyinstrument", "-m", "distprompt", "inspect", a.data, "--json"],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        out = pr.stdout
        profile += "\n\n# inspect (the pass alone, in one process)\n" + _trim_profile(
            out[out.find("_     ._") :] if "_     ._" in out else out, lines=60
        )
    write()
    print(f"wrote {a.out}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _trim_profile(text: str, width: int = 140, lines: int = 90) -> str:
    keep = [ln[:width] for ln in text.splitlines() if ln.strip()]
    return "\n".join(keep[:lines])


def _report(
    f: dict,
    shape: dict,
    sel: dict,
    profile: str,
    mach: dict,
    started: str,
    load0: tuple,
    load1: tuple,
    a: argparse.Namespace,
) -> str:
    def w(name: str) -> float:
        return f.get(name, {}).get("wall", float("nan"))

    def ratio(x: str, y: str) -> float:
        return w(x) / w(y)

    orj = w("orjson floor")
    rows = []
    for name, v in f.items():
        walls = ", ".join(f"{x:.1f}" for x in v["walls"])
        rows.append(
            f"| {name} | {v['wall']:.2f} | {walls} | {v.get('pss_mb', float('nan')):.0f} | "
            f"{v['tree_mb']:.0f} | {v['main_mb']:.0f} | {v['wall'] / orj:.2f} |"
        )
    tot = shape.get("total", {})

    def check(ok: bool) -> str:
        return "met" if ok else "**not met**"

    targets = []
    r = ratio("export w2", "orjson floor")
    targets.append(("export --workers 2 / orjson floor", f"{r:.2f}", "≤ 1.0", check(r <= 1.0)))
    r = ratio("export w1", "orjson floor")
    targets.append(("export --workers 1 / orjson floor", f"{r:.2f}", "≤ 1.5", check(r <= 1.5)))
    r = ratio("stdlib json", "export w1")
    targets.append(("stdlib-json script / export (w1)", f"{r:.2f}", "≥ 4", check(r >= 4)))
    r = ratio("polars lazy", "export w1")
    targets.append(("polars scan_ndjson / export (w1)", f"{r:.2f}", "≥ 2", check(r >= 2)))
    r = ratio("inspect w1", "orjson floor")
    targets.append(("inspect (w1) / orjson floor", f"{r:.2f}", "≤ 0.5", check(r <= 0.5)))
    r = ratio("inspect w2", "orjson floor")
    targets.append(("inspect --workers 2 / orjson floor", f"{r:.2f}", "≤ 0.5", check(r <= 0.5)))
    for wk in ("w1", "w2"):
        e = f.get(f"export {wk}", {})
        m = e.get("pss_mb", float("nan"))
        targets.append(
            (f"peak memory export {wk} (process tree, PSS)", f"{m:.0f} MB", "≤ 600 MB",
             check(m <= 600))
        )  # fmt: skip
        # The RSS sum counts a forked worker's pages shared with its parent in both.
        rss, mm = e.get("tree_mb", float("nan")), e.get("main_mb", float("nan"))
        targets.append(
            (f"peak RSS export {wk} (tree sum / largest process)", f"{rss:.0f} / {mm:.0f} MB",
             "≤ 600 MB", check(mm <= 600))
        )  # fmt: skip
        if f"export {wk} 4x" in f:
            m4 = f[f"export {wk} 4x"].get("pss_mb", float("nan"))
            g = m4 / m - 1
            targets.append(
                (f"memory growth 4x corpus, export {wk} (PSS)",
                 f"{100 * g:+.1f}% ({m:.0f} → {m4:.0f} MB)", "< 10%", check(g < 0.10))
            )  # fmt: skip
    for name in ("gz", "zst"):
        if f"export w1 {name}" in f:
            plain = w(f"export w1 plain ({name} round)")
            r = w(f"export w1 {name}") / (w(f"decompress {name}") + plain)
            targets.append(
                (f"export .{name} / (decompression + plain export)", f"{r:.2f}", "≤ 1.3",
                 check(r <= 1.3))
            )  # fmt: skip
    tgt = "\n".join(f"| {t[0]} | {t[1]} | {t[2]} | {t[3]} |" for t in targets)
    shape_rows = "\n".join(
        f"| {k} | {v['rows']:,} | {v['bytes'] / 1e6:,.0f} | "
        f"{v['prompt_tokens'] / max(v['tokens'], 1):.1%} |"
        for k, v in shape.items()
        if isinstance(v, dict) and k != "total"
    )
    return f"""# Benchmark results

Written by `benchmarks/run.py` ({started}); {a.rounds} interleaved rounds.
Machine: {mach.get("cpu", "?")}, {mach.get("cores")} cores (shared with other work:
load average {load0[0]:.1f} at the start, {load1[0]:.1f} at the end),
{mach.get("memory", "?")}; Python {mach["python"]}, {mach["versions"]}.
Absolute seconds depend on the load; the ratios of one interleaved run are what this measures.

Corpus: `{a.data}` — {tot.get("rows", 0):,} rows, {tot.get("bytes", 0) / 1e9:.2f} GB,
{tot.get("prompt_tokens", 0) / max(tot.get("tokens", 1), 1):.1%} of the tokens are prompt tokens
(made by `benchmarks/make_corpus.py`, shape in `benchmarks/README.md`):

| shard folder | rows | MB | prompt share of tokens |
|---|---:|---:|---:|
{shape_rows}

## Targets

| target | measured | wanted | |
|---|---:|---:|---|
{tgt}

## Every job

Wall time is the median over the rounds; memory is the peak over the rounds: of the whole
process tree (workers included) as the sum of PSS and as the sum of RSS, and the largest single
process (`ru_maxrss`).

| job | wall s (median) | every round | PSS tree MB | RSS tree MB | largest MB | / orjson |
|---|---:|---|---:|---:|---:|---:|
{chr(10).join(rows)}

## Selection alone (`bench_select.py`, k = 50)

```
5,000 candidates:
{sel.get(5000, "")}

20,000 candidates:
{sel.get(20000, "")}
```

## Profiles (pyinstrument)

`export --per-source 50` with one worker: the row checks' markers are read from
`tokenizer.json` without `transformers`, the pass runs in a worker process while the main one
loads the tokenizer and imports what selection and the report use (so the pass shows as waiting
in `scan`), smallest shards first; a source whose shards are read is selected and decoded in
a thread meanwhile, one at a time (pyinstrument samples the main thread only: that work shows
as waiting), the rest after the pass in two threads (two large pools not at once) while the
main thread runs the tokenizer checks and decodes each selected source, and the plots are drawn
in two subprocesses. The stage times logged by
`-v` come first. Then `inspect` (the pass in-process).

```
{profile}
```
"""


if __name__ == "__main__":
    sys.exit(main())
