"""Write ``tests/data/aiperf_multi_turn``: a real AIPerf multi-turn run against the test server.

Usage: python scripts/make_aiperf_artifact.py [OUT] (default tests/data/aiperf_multi_turn)

Builds the six-item suite of ``tests/bench_server.py:multi_turn_items`` (one to three user turns
a session), exports ``aiperf_multi_turn.jsonl``, starts the test server (vLLM-style chat with
per-request speculative metrics, every user turn of an item answered), runs the ``aiperf`` CLI of
the client venv (``~/.cache/distprompt-client-venv``, see ``scripts/check_clients.py``) on it at
concurrency 2, and keeps the three files ``bench-import`` reads: ``profile_export.jsonl``,
``profile_export_aiperf.json`` and ``inputs.json``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from distprompt import Suite  # noqa: E402

from bench_server import Behaviour, FakeServer, multi_turn_items  # noqa: E402

AIPERF = Path.home() / ".cache" / "distprompt-client-venv" / "bin" / "aiperf"
KEEP = ("profile_export.jsonl", "profile_export_aiperf.json", "inputs.json")
MANIFEST = {"sources": {"glaive": {"rows": 900}, "sweagent": {"rows": 300}}}


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "data" / "aiperf_multi_turn"
    tok = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "tokenizer_dir.py"), "qwen3"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    items = multi_turn_items()
    with tempfile.TemporaryDirectory() as tmp:
        suite = Path(tmp) / "suite"
        Suite(items, MANIFEST).save(suite, formats=("aiperf",))
        art = Path(tmp) / "art"
        beh = Behaviour(accept={"glaive": 3.0, "sweagent": 1.5}, chat_any=True, lifetime=600)
        with FakeServer(items, beh) as srv:
            cmd = [
                str(AIPERF),
                "profile",
                "--url",
                srv.url,
                "--model",
                "fake-model",
                "--endpoint-type",
                "chat",
                "--streaming",
                "--tokenizer",
                tok,
                "--input-file",
                str(suite / "aiperf_multi_turn.jsonl"),
                "--custom-dataset-type",
                "multi_turn",
                "--conversation-num",
                str(len(items)),
                "--concurrency",
                "2",
                "--extra-inputs",
                "temperature:0.0",
                "--artifact-dir",
                str(art),
                "--ui-type",
                "none",
            ]
            env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
                return proc.returncode
            print(f"server answered {len(srv.log)} chat requests", file=sys.stderr)
        out.mkdir(parents=True, exist_ok=True)
        for name in KEEP:
            found = sorted(art.rglob(name))
            if not found:
                print(f"aiperf wrote no {name}", file=sys.stderr)
                return 1
            shutil.copy(found[0], out / name)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
