#!/usr/bin/env python3
"""Run every command of a suite's RUN.md with the pinned benchmark clients, against a local
server that records each request body, and fail when RUN.md and the clients disagree.

    python scripts/check_clients.py [--venv DIR] [--out DIR] [--suite DIR ...] [--jobs N]
                                    [--by-source N] [--only TEXT] [--venv-only]

Without ``--suite`` it builds two suites from ``data_samples/`` (Qwen3 and DeepSeek-V3
tokenizers, the packages of the ``samples`` extra) and checks both. The client venv is built
from scratch when missing or made for other pins (``pip install torch==2.13.0`` takes this
machine's CPU wheel; everything else comes with uv; sglang and vllm with ``--no-deps`` and only
the packages their benchmark code imports). The pins are
:data:`distprompt.write.formats.CLIENT_VERSIONS`: RUN.md prints the same ones.

A command fails the check when it exits non-zero, when the number of generation requests the
server saw differs from RUN.md's ``Requests sent: **N**`` (plus the warm-up RUN.md names), when
a request's prompt is not one of the file's prompts unchanged, when a request carries no output
length or another one than the file (or RUN.md) says, or when its temperature is not RUN.md's.
The server listens on 127.0.0.1 only and answers each request with a two-word reply.

SGLang's ``bench_serving`` imports ``sglang.srt.disaggregation.utils`` only for the constant
``FAKE_BOOTSTRAP_HOST``; that module pulls in the GPU server and torchvision, which has no build
beside CPU torch 2.13.0. The venv gets a ``.pth`` hook that gives that one module the constant
(read from the real file) and nothing else; every other line of the client runs as installed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from distprompt.write.formats import CLIENT_VERSIONS  # noqa: E402

TORCH = "torch==2.13.0"
# What sglang 0.5.23 pins (vllm 0.33.0 wants < 5.21): the transformers a user's client env has.
TRANSFORMERS = "transformers==5.19.0"
# What the benchmark code of sglang and vllm imports beyond guidellm's and aiperf's deps.
HELPERS = [
    "pybase64",
    "IPython",
    "cbor2",
    "openai-harmony",
    "openai",
    "cloudpickle",
    "cachetools",
    "py-cpuinfo",
    "partial_json_parser",
    "xgrammar",
    "llguidance",
    "blake3",
    "einops",
]
# Installed by some helper's resolver but unusable beside CPU torch 2.13.0.
REMOVE = ["torchvision", "torchaudio", "torchcodec"]
MODEL = "dp-model"
GEN_PATHS = ("/v1/chat/completions", "/v1/completions", "/generate")
SHIM_MOD = "_distprompt_sglang_shim"
SHIM = '''"""distprompt check_clients: sglang.srt.disaggregation.utils with its one constant."""
import ast, importlib.abc, importlib.machinery, importlib.util, os, sys, types

_NAME = "sglang.srt.disaggregation.utils"


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name != _NAME:
            return None
        return importlib.machinery.ModuleSpec(name, self)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        root = importlib.util.find_spec("sglang").submodule_search_locations[0]
        src = os.path.join(root, "srt", "disaggregation", "utils.py")
        for node in ast.parse(open(src, encoding="utf-8").read()).body:
            if isinstance(node, ast.Assign) and any(
                getattr(t, "id", None) == "FAKE_BOOTSTRAP_HOST" for t in node.targets
            ):
                module.FAKE_BOOTSTRAP_HOST = ast.literal_eval(node.value)


sys.meta_path.insert(0, _Finder())
'''


def pins() -> list[str]:
    return [f"{k}=={v}" for k, v in CLIENT_VERSIONS.items()]


def _pip(venv: Path, *args: str) -> None:
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *args], check=True)


def _uv(venv: Path, *args: str) -> None:
    """``uv pip install`` into the venv: parallel downloads, about 1 min for what pip takes
    15+ min over here (its serial downloads of sglang's, vllm's and aiperf's wheels)."""
    py = str(venv / "bin" / "python")
    cmd = [str(venv / "bin" / "uv"), "pip", "install", "-q", "--python", py, *args]
    subprocess.run(cmd, check=True, env={**os.environ, "UV_NO_PROGRESS": "1"})


def ensure_venv(venv: Path) -> Path:
    """Build the client venv unless it exists for the same pins; returns its bin folder."""
    stamp = venv / "distprompt-clients.txt"
    want = "\n".join([TORCH, TRANSFORMERS, *pins(), *HELPERS]) + "\n"
    if stamp.is_file() and stamp.read_text() == want:
        return venv / "bin"
    t0 = time.monotonic()
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    cons = venv / "constraints.txt"
    cons.write_text(TORCH + "\n" + TRANSFORMERS + "\n")
    # pip for torch: it takes the machine's CPU wheel (pip's find-links); uv for the rest.
    _pip(venv, TORCH, "uv")
    sg, vl = (p for p in pins() if p.startswith(("sglang", "vllm")))
    _uv(venv, "--no-deps", sg, vl)
    _uv(venv, "-c", str(cons), *(p for p in pins() if p.startswith(("guidellm", "aiperf"))))
    _uv(venv, "-c", str(cons), *HELPERS)
    _uv(venv, "--no-deps", sg, vl)  # a helper's resolver must not have moved them
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "uninstall", "-y", "-q", *REMOVE], check=False
    )
    site = Path(
        subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-c",
                "import sysconfig;print(sysconfig.get_path('purelib'))",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site / f"{SHIM_MOD}.py").write_text(SHIM)
    (site / f"{SHIM_MOD}.pth").write_text(f"import {SHIM_MOD}\n")
    stamp.write_text(want)
    print(f"check_clients: client venv built in {time.monotonic() - t0:.0f} s", flush=True)
    return venv / "bin"


# --------------------------------------------------------------------------------------------
# The recording server
# --------------------------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[tuple[str, dict[str, Any]]] = []

    def take(self) -> list[tuple[str, dict[str, Any]]]:
        with self.lock:
            out, self.requests = self.requests, []
        return out


def _handler(rec: Recorder) -> type[BaseHTTPRequestHandler]:
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: Any) -> None:
            pass

        def _json(self, obj: Any, code: int = 200) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            if path.rstrip("/").endswith("models"):
                self._json({"object": "list", "data": [{"id": MODEL, "object": "model"}]})
            else:
                self._json({"status": "ok"})

        def do_POST(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {"_raw": raw.decode("utf-8", "replace")}
            path = self.path.split("?")[0]
            with rec.lock:
                rec.requests.append((path, body))
            words = ["ok", " done"]
            usage = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
            if path == "/generate":
                chunks = [
                    {
                        "text": "".join(words[: i + 1]),
                        "meta_info": {"completion_tokens": i + 1, "prompt_tokens": 1},
                    }
                    for i in range(len(words))
                ]
                if body.get("stream"):
                    return self._sse(chunks)
                return self._json(chunks[-1])
            chat = path.endswith("chat/completions")
            if body.get("stream"):
                chunks = []
                for i, w in enumerate(words):
                    choice: dict[str, Any] = {"index": 0, "finish_reason": None}
                    if chat:
                        choice["delta"] = (
                            {"role": "assistant", "content": w} if i == 0 else {"content": w}
                        )
                    else:
                        choice["text"] = w
                    chunks.append(
                        {
                            "id": "r",
                            "object": "chat.completion.chunk" if chat else "text_completion",
                            "created": 0,
                            "model": MODEL,
                            "choices": [choice],
                        }
                    )
                last = {"index": 0, "finish_reason": "stop"}
                last.update({"delta": {}} if chat else {"text": ""})
                chunks.append(
                    {
                        "id": "r",
                        "object": "chat.completion.chunk" if chat else "text_completion",
                        "created": 0,
                        "model": MODEL,
                        "choices": [last],
                        "usage": usage,
                    }
                )
                return self._sse(chunks)
            text = "".join(words)
            choice = {"index": 0, "finish_reason": "stop"}
            choice.update(
                {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
            )
            return self._json(
                {
                    "id": "r",
                    "object": "chat.completion" if chat else "text_completion",
                    "created": 0,
                    "model": MODEL,
                    "choices": [choice],
                    "usage": usage,
                }
            )

        def _sse(self, chunks: list[dict[str, Any]]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for c in chunks:
                self.wfile.write(b"data: " + json.dumps(c).encode() + b"\n\n")
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

    return H


class Server(ThreadingHTTPServer):
    """The recording server. Clients open every request at once (SGLang and vLLM with an
    infinite request rate): the default listen backlog of 5 overflows on a busy machine, the
    kernel drops SYNs, and the clients either retry them with a growing back-off (minutes) or
    give up on some requests, which looked like a client dropping items."""

    request_queue_size = 4096
    daemon_threads = True


# --------------------------------------------------------------------------------------------
# RUN.md
# --------------------------------------------------------------------------------------------

_BLOCK = re.compile(r"```bash\n(.*?)\n```\n\n(Requests sent: \*\*(\d+)\*\*[^\n]*)", re.S)
_TEMP = re.compile(r"sets `temperature` ([0-9.]+) explicitly")


def commands(run_md: str) -> list[tuple[str, int, bool]]:
    """``(command, requests announced, warm-up announced)`` for each command of RUN.md."""
    out = []
    for m in _BLOCK.finditer(run_md):
        cmd = m.group(1).replace("\\\n", " ")
        out.append((cmd, int(m.group(3)), "after one warm-up" in m.group(2)))
    n_blocks = run_md.count("```bash")
    if n_blocks != len(out):
        raise SystemExit(f"RUN.md: {n_blocks} commands but {len(out)} with a request count")
    return out


def _max_tokens(path: str, body: dict[str, Any]) -> int | None:
    if path == "/generate":
        return (body.get("sampling_params") or {}).get("max_new_tokens")
    v = body.get("max_completion_tokens", body.get("max_tokens"))
    return v


def _temperature(path: str, body: dict[str, Any]) -> Any:
    if path == "/generate":
        return (body.get("sampling_params") or {}).get("temperature", body.get("temperature"))
    return body.get("temperature")


def _content(m: dict[str, Any]) -> str:
    c = m.get("content")
    if isinstance(c, list):
        return "\n".join(p.get("text", "") for p in c if isinstance(p, dict))
    return c or ""


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def expected_prompts(cmd: str, suite: Path) -> tuple[dict[str, list[int]], str]:
    """``{prompt key: [allowed output lengths]}`` and the key kind for a command's file.

    The key is the last message's text on chat endpoints, the prompt text on completions and
    /generate. An empty list of lengths means any length RUN.md states (checked separately).
    """
    path = re.search(r"(?:--dataset-path|--input-file) (\S+)", cmd)
    f = path.group(1) if path else "guidellm.jsonl"
    p = suite / f
    exp: dict[str, list[int]] = {}
    if f == "openai.jsonl":
        for r in _jsonl(p):
            exp.setdefault(_content(r["messages"][-1]), []).append(r["max_tokens"])
    elif f == "vllm_custom.jsonl":
        for r in _jsonl(p):
            exp.setdefault(r["prompt"], []).append(r["output_tokens"])
    elif f == "sharegpt.json":
        for r in json.loads(p.read_text(encoding="utf-8")):
            exp.setdefault(r["conversations"][0]["value"], [])
    elif f == "guidellm.jsonl":
        chat = "chat/completions" in cmd
        for r in _jsonl(p):
            if chat and r["messages"]:
                exp.setdefault(_content(r["messages"][-1]), []).append(r["output_tokens_count"])
            elif not chat:
                exp.setdefault(r["prompt"], []).append(r["output_tokens_count"])
    elif f == "aiperf.jsonl":
        for r in _jsonl(p):
            exp.setdefault(r["text"], []).append(r["output_length"])
    elif f.endswith("aiperf_multi_turn.jsonl"):
        for r in _jsonl(p):
            for t in r["turns"]:
                if t.get("role") != "system":
                    exp.setdefault(t["text"], []).append(t["output_length"])
    elif f.startswith("by_source/"):
        for r in _jsonl(p):
            exp.setdefault(r["turns"][0], [])
    return exp, f


def _rows_by_key(f: str, suite: Path, exp: dict[str, list[int]]) -> Counter[str]:
    """How many rows of the command's file have each prompt key (``exp`` holds one output
    length per row, except for sharegpt.json, whose rows are counted here)."""
    if f == "sharegpt.json":
        rows = json.loads((suite / f).read_text(encoding="utf-8"))
        return Counter(r["conversations"][0]["value"] for r in rows)
    return Counter({k: len(v) for k, v in exp.items()})


def _key(path: str, body: dict[str, Any]) -> str:
    if path.endswith("chat/completions"):
        msgs = [m for m in body.get("messages") or [] if m.get("role") != "assistant"]
        return _content(msgs[-1]) if msgs else ""
    if path == "/generate":
        return body.get("text", "")
    p = body.get("prompt", "")
    return p if isinstance(p, str) else json.dumps(p)


def check_command(
    cmd: str,
    announced: int,
    warmup: bool,
    suite: Path,
    bindir: Path,
    temperature: float,
) -> tuple[list[str], str]:
    """Run one command against its own recording server; return what is wrong (empty: fine)
    and its row of the log table."""
    rec = Recorder()
    server = Server(("127.0.0.1", 0), _handler(rec))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        return _check_command(cmd, announced, warmup, suite, rec, bindir, server, temperature)
    finally:
        server.shutdown()
        server.server_close()


def _check_command(
    cmd: str,
    announced: int,
    warmup: bool,
    suite: Path,
    rec: Recorder,
    bindir: Path,
    server: Server,
    temperature: float,
) -> tuple[list[str], str]:
    errors: list[str] = []
    url = f"http://127.0.0.1:{server.server_address[1]}"
    run = cmd.replace("<URL>", url).replace("<MODEL>", MODEL)
    env = dict(os.environ)
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    env.pop("HF_HUB_OFFLINE", None) if run.startswith("aiperf") else None
    art = suite / ".check" / str(abs(hash(cmd)) % 10**8)
    art.mkdir(parents=True, exist_ok=True)
    if run.startswith("aiperf"):
        # RUN.md names an artifact folder per command; the check keeps its own per command
        run = re.sub(r" --artifact-dir \S+", "", run) + f" --artifact-dir {art} --ui-type none"
    if run.startswith("guidellm"):
        run += " --disable-console-interactive"
    if run.startswith("vllm") or run.startswith("python -m sglang"):
        run += " --seed 0"
    rec.take()
    t0 = time.monotonic()
    proc = subprocess.run(
        ["bash", "-c", run], cwd=suite, env=env, capture_output=True, text=True, timeout=900
    )
    dt = time.monotonic() - t0
    reqs = [(p, b) for p, b in rec.take() if p in GEN_PATHS]
    fm = re.search(r"(?:--dataset-path|--input-file) (\S+)", cmd)
    tool = cmd.split(" ")[0] if not cmd.startswith("python") else cmd.split(" ")[2]
    name = f"{tool} {fm.group(1) if fm else 'guidellm.jsonl'}"
    ep = re.search(r"/v1/(chat/)?completions", cmd)
    if ep and tool == "guidellm":
        name += f" {ep.group(0)}"
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        row = f"| {suite.name} | `{name}` | exit {proc.returncode} | | | | {dt:.0f} s | FAIL |"
        return [f"{name}: exit {proc.returncode}\n{tail}"], row
    want = announced + (1 if warmup else 0)
    if len(reqs) != want:
        errors.append(
            f"{name}: RUN.md says {announced} requests{' + 1 warm-up' if warmup else ''}, "
            f"server saw {len(reqs)}"
        )
    exp, f = expected_prompts(cmd, suite)
    med = re.search(r"--(?:spec|speed)-bench-output-len (\d+)", cmd)
    lengths = Counter()
    seen: Counter[str] = Counter()
    for i, (path, body) in enumerate(reqs):
        key = _key(path, body)
        mt = _max_tokens(path, body)
        if warmup and i == 0:
            # The warm-up repeats the first request (SGLang caps its output at 32 tokens).
            if key not in exp and not any(t in key for t in exp):
                errors.append(f"{name}: warm-up prompt not from the file: {key[:80]!r}")
            continue
        lengths[mt] += 1
        if _temperature(path, body) != temperature and not (
            path == "/generate" and temperature == 0 and _temperature(path, body) == 0.0
        ):
            errors.append(
                f"{name}: temperature {_temperature(path, body)!r}, RUN.md says {temperature}"
            )
        if mt is None:
            errors.append(f"{name}: a request with no output length: {key[:60]!r}")
        if f.startswith("by_source/"):
            if med and mt != int(med.group(1)):
                errors.append(f"{name}: output length {mt}, RUN.md says {med.group(1)}")
            if not any(t in key for t in exp):
                errors.append(f"{name}: prompt not from the file: {key[:80]!r}")
            continue
        if key not in exp:
            errors.append(f"{name}: prompt altered or not from the file: {key[:80]!r}")
            continue
        seen[key] += 1
        if exp[key] and mt not in exp[key]:
            errors.append(f"{name}: output length {mt} for {key[:40]!r}, file says {exp[key]}")
    if f == "sharegpt.json":
        errors += _sharegpt_lengths(name, reqs[1 if warmup else 0 :], suite)
    # every announced row sent once: as many requests as announced (above), and no prompt
    # text more often than the file holds it (two items may share a text: the single-turn
    # files keep only the last user turn)
    rows = _rows_by_key(f, suite, exp)
    twice = sorted(k for k, c in seen.items() if c > rows.get(k, 1))
    if not f.startswith("by_source/") and twice:
        errors.append(
            f"{name}: {len(twice)} prompts sent more often than the file holds them "
            f"(RUN.md says {announced} requests): {twice[0][:60]!r}"
        )
    errors = errors[:20]
    lo = min((k for k in lengths if k is not None), default=None)
    hi = max((k for k in lengths if k is not None), default=None)
    row = (
        f"| {suite.name} | `{name}` | {len(reqs)} | {announced}{' + 1' if warmup else ''} | "
        f"{lo}–{hi} | {sum(k for k in lengths.elements() if k is not None)} | {dt:.0f} s | "
        f"{'ok' if not errors else 'FAIL'} |"
    )
    if len(reqs) != want:
        # What the client said about the requests it did not send (connection errors, …).
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        errors.append(f"{name}: client output ends:\n{tail}")
    return errors, row


# RUN.md: "… differs for 200 of 200 items (180 items 1 token shorter, 20 items 3 tokens shorter:
# why)"
_DIFF = re.compile(r"output lengths: .*?differs for \d+ of \d+ items \(([^)]*)\)")
_GAP = re.compile(r"(\d+) items? (\d+) tokens? (shorter|longer)")


def _sharegpt_lengths(name: str, reqs: list[tuple[str, dict[str, Any]]], suite: Path) -> list[str]:
    """Output length asked minus the item's ``max_tokens``, against RUN.md's announced split.

    Items whose first turn has the same text (two prompts that differ only in the history the
    format drops) are paired with the requests of that text in order of length."""
    items = {r["id"]: r for r in _jsonl(suite / "suite.jsonl")}
    by_text: dict[str, list[int]] = {}
    for r in json.loads((suite / "sharegpt.json").read_text(encoding="utf-8")):
        by_text.setdefault(r["conversations"][0]["value"], []).append(
            max(1, items[r["id"]]["max_tokens"])
        )
    asked: dict[str, list[int]] = {}
    for p, b in reqs:
        mt = _max_tokens(p, b)
        if _key(p, b) in by_text and mt is not None:  # a missing length is reported apart
            asked.setdefault(_key(p, b), []).append(mt)
    seen: Counter[int] = Counter()
    for text, got in asked.items():
        want = sorted(by_text[text])
        for i, g in enumerate(sorted(got)):
            seen[g - want[min(i, len(want) - 1)]] += 1
    m = _DIFF.search((suite / "RUN.md").read_text(encoding="utf-8"))
    said = {
        (-1 if way == "shorter" else 1) * int(d): int(c)
        for c, d, way in (_GAP.findall(m.group(1)) if m else [])
    }
    extra = {d for d in seen if d and d not in said}
    out = [f"{name}: output length off by {d} (not announced in RUN.md)" for d in sorted(extra)]
    if name.startswith("sglang") and {d: c for d, c in seen.items() if d} != said:
        out.append(f"{name}: output length differences {dict(seen)}, RUN.md says {said}")
    return out


_PROBE = """
import json, sys, transformers
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
texts = json.load(sys.stdin)
print(json.dumps([transformers.__version__, type(tok).__name__, [tok.encode(t) for t in texts]]))
"""


def tokenizer_agreement(bindir: Path, tok_path: str, texts: list[str]) -> str | None:
    """None when the client venv's transformers tokenizes ``texts`` as distprompt does, else why."""
    import transformers
    from transformers import AutoTokenizer

    ours = AutoTokenizer.from_pretrained(tok_path)
    proc = subprocess.run(
        [str(bindir / "python"), "-c", _PROBE, tok_path],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        check=True,
    )
    version, cls, theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    differ = sum(1 for t, ids in zip(texts, theirs, strict=True) if ours.encode(t) != ids)
    if not differ:
        return None
    return (
        f"the clients' transformers {version} loads {tok_path} as {cls} and tokenizes {differ} "
        f"of {len(texts)} sharegpt texts differently from distprompt's transformers "
        f"{transformers.__version__} ({type(ours).__name__}): RUN.md's sharegpt counts use the "
        "latter"
    )


def build_suites(out: Path) -> list[Path]:
    """Suites of the bundled samples: ``data_samples/`` as shipped (Qwen3) and the same corpus
    regenerated with the DeepSeek-V3 tokenizer by ``scripts/make_samples.py``."""
    suites = []
    for name, key in (("qwen3", "qwen3"), ("deepseek_v3", "deepseek-v3")):
        tok = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "tokenizer_dir.py"), key],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        corpus = ROOT / "data_samples"
        if key == "deepseek-v3":
            # RUN.md's own advice for this folder (see its "Client tokenizer class" warning): the
            # clients' transformers 5.19 would load the shipped config as LlamaTokenizer.
            fixed = out / "tokenizer_deepseek_v3"
            shutil.rmtree(fixed, ignore_errors=True)
            shutil.copytree(tok, fixed)
            cfg_path = fixed / "tokenizer_config.json"
            cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
            cfg["tokenizer_class"] = "TokenizersBackend"
            cfg_path.write_text(json.dumps(cfg, ensure_ascii=False, indent=2), encoding="utf-8")
            tok = str(fixed.resolve())
        if key != "qwen3":
            corpus = out / f"corpus_{name}"
            subprocess.run(
                [
                    sys.executable,
                    str(ROOT / "scripts" / "make_samples.py"),
                    "--out",
                    str(corpus),
                    "--tokenizer",
                    key,
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
        dest = out / name
        subprocess.run(
            [
                sys.executable,
                "-m",
                "distprompt",
                "export",
                str(corpus / "prepared"),
                "--tokenizer",
                tok,
                "--per-source",
                "10",
                "--out",
                str(dest),
                "--overwrite",
                "--no-progress",
            ],
            check=True,
            stderr=subprocess.DEVNULL,
        )
        suites.append(dest)
    return suites


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--venv",
        type=Path,
        default=Path(
            os.environ.get(
                "DISTPROMPT_CLIENT_VENV", Path.home() / ".cache" / "distprompt-client-venv"
            )
        ),
    )
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "check_clients")
    ap.add_argument(
        "--suite", type=Path, action="append", help="Check this suite folder (repeatable)."
    )
    ap.add_argument("--only", default="", help="Run only commands containing this text.")
    ap.add_argument(
        "--by-source",
        type=int,
        default=None,
        help="Run the by_source/ commands of only the first N sources of each suite (CI: each "
        "client start costs 15-30 s here); every other command always runs.",
    )
    ap.add_argument(
        "--jobs",
        type=int,
        default=2,
        help="Commands run at the same time, each against its own recording server.",
    )
    ap.add_argument(
        "--venv-only",
        action="store_true",
        help="Build (or confirm) the client venv and stop: CI does this while the tests run.",
    )
    args = ap.parse_args(argv)
    bindir = ensure_venv(args.venv)
    if args.venv_only:
        print(f"check_clients: client venv ready at {args.venv}", flush=True)
        return 0
    suites = args.suite or build_suites(args.out)
    failures: list[str] = []
    log = [
        "| suite | command | requests seen | RUN.md | output lengths | output tokens | time | |",
        "|---|---|---|---|---|---|---|---|",
    ]
    jobs: list[tuple[str, int, bool, Path, float]] = []
    for suite in suites:
        text = (suite / "RUN.md").read_text(encoding="utf-8")
        m = _TEMP.search(text)
        if not m:
            failures.append(f"{suite}: RUN.md states no temperature")
            continue
        temperature = float(m.group(1))
        tm = re.search(r"^Tokenizer: `([^`]*)`", text, re.M)
        if tm and (suite / "sharegpt.json").is_file():
            texts = [
                t
                for r in json.loads((suite / "sharegpt.json").read_text(encoding="utf-8"))
                for t in (r["conversations"][0]["value"], r["conversations"][1]["value"])
            ]
            why = tokenizer_agreement(bindir, tm.group(1), texts)
            if why:
                print(f"check_clients: {suite.name}: {why}", flush=True)
                failures.append(f"{suite.name}: {why}")
        sources = sorted(set(re.findall(r"--dataset-path (by_source/\S+)", text)))
        keep = set(sources[: args.by_source]) if args.by_source is not None else set(sources)
        for cmd, n, warm in commands(text):
            if args.only and args.only not in cmd:
                continue
            bs = re.search(r"--dataset-path (by_source/\S+)", cmd)
            if bs and bs.group(1) not in keep:
                continue
            jobs.append((cmd, n, warm, suite, temperature))
    # Each command has its own recording server, so commands can run side by side: a client's
    # start (imports, tokenizer) is most of its time and mostly one core.
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [
            pool.submit(check_command, cmd, n, warm, suite, bindir, temp)
            for cmd, n, warm, suite, temp in jobs
        ]
        for (_, _, _, suite, _), fut in zip(jobs, futures, strict=True):
            errs, row = fut.result()
            log.append(row)
            print(
                row if not errs or not errs[0].count("exit") else f"{suite.name}: {errs[0]}",
                flush=True,
            )
            failures += [f"{suite.name}: {e}" for e in errs]
    print("\n".join(log))
    if failures:
        print("\ncheck_clients: FAILED\n" + "\n".join(failures), file=sys.stderr)
        return 1
    print(f"check_clients: ok ({len(log) - 2} commands on {len(suites)} suites)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
