"""Worked example of docs/bench.md: a suite replayed against the tests' fake server.

    python scripts/bench_demo.py SUITE_DIR OUT_DIR

Runs ``distprompt bench`` three times against ``tests/bench_server.py`` (no accelerator needed):
SGLang with speculation, vLLM reporting only Prometheus counters, and SGLang without
speculation as the baseline, then ``bench-compare``. The server's acceptance per source is made
up (see ACCEPT); latencies are those of a Python test server and mean nothing about real ones.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from distprompt import Suite
from distprompt.cli import main

from bench_server import Behaviour, FakeServer

ACCEPT = {
    "deepswekimi": 1.8,
    "glaive": 3.2,
    "kimik25": 2.0,
    "magicoder": 2.6,
    "mixturethoughts": 2.2,
    "opencodeinstruct": 2.8,
    "openthoughts": 2.3,
    "sharegpt": 1.9,
    "sweagent": 1.6,
    "ultrachat": 2.0,
}


def run() -> int:
    suite, out = Path(sys.argv[1]), Path(sys.argv[2])
    items = Suite.load(suite).items
    common = ["--concurrency", "1,4", "--max-items", "5", "--no-progress", "--overwrite"]
    beh = {"first_delay": 0.002, "step_delay": 0.0005}
    runs = [  # label, API, server behaviour
        ("eagle3", "sglang", {}),
        ("vllm-counters", "vllm", {"per_request_metrics": False}),
        ("base", "sglang", {"spec": False}),
    ]
    rc = 0
    for label, api, extra in runs:
        with FakeServer(items, Behaviour(accept=ACCEPT, **beh, **extra)) as srv:
            args = ["--url", srv.url, "--api", api, "--label", label, "--out", str(out / label)]
            rc |= main(["bench", str(suite), *args, *common])
    rc |= main(["bench-compare", str(out / "eagle3"), "--baseline", str(out / "base")])
    return rc


if __name__ == "__main__":
    sys.exit(run())
