"""A benchmark corpus shaped like users' data, of a given size, built from ``data_samples/``.

Shape (see benchmarks/README.md): one dominant shard of long SWE-agent rows (prompts of 1-3k
tokens, responses of ~27k tokens made of alternating trained assistant spans and untrained tool
outputs) holding ~80 % of the bytes; two medium agent sources; many short chat, tool-call, code
and reasoning rows (glaive the largest by rows). Every row is a perturbed copy of a real
``data_samples/`` row (a few prompt tokens replaced by other tokens of the same prompt, never the
template markers at either end), so prompts stay unique and the ids stay in the vocabulary.
Seeded and deterministic. Written as Python's ``json.dumps`` writes (``", "`` and ``": "``
separators: the users' writers) or, with ``--spelling compact``, as ``orjson`` writes.

Usage:
    python benchmarks/make_corpus.py --out /work/bench-data/c1 --size-gb 1.5 [--gz] [--zst]
        [--spelling json|compact]
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import time
from pathlib import Path

import numpy as np
import orjson

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "data_samples" / "prepared"

#: Rows per source at 1.5 GB (scaled linearly with the size); the dominant shard fills the rest.
SHORT_ROWS = {
    "B1_glaive": 18000,
    "E2_sharegpt": 4000,
    "E1_ultrachat": 3000,
    "C1_opencodeinstruct": 3000,
    "C2_magicoder": 2000,
    "D1_mixturethoughts": 1500,
    "D2_openthoughts": 1500,
}
#: Medium agent sources: rows at 1.5 GB and their response length range (tokens).
MEDIUM_ROWS = {"A1_deepswekimi": (1500, 4000, 12000), "A2_kimik25": (1500, 2000, 8000)}
DOMINANT = "A3_sweagent"
DOMINANT_SHARE = 0.80
BASE_GB = 1.5


def _load(folder: str) -> list[dict]:
    with open(SAMPLES / folder / "tokenized_data.jsonl", "rb") as fh:
        return [orjson.loads(line) for line in fh if line.strip()]


def _perturb(prompt: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    p = prompt.copy()
    n = p.shape[0]
    if n > 12:
        for _ in range(int(rng.integers(2, 5))):
            i = int(rng.integers(5, n - 6))
            p[i] = p[int(rng.integers(5, n - 6))]
    return p


#: ``"json"``: the separators of Python's ``json.dumps`` (what users' files hold), ``"compact"``:
#: orjson's. Set by ``--spelling``.
SPELLING = "json"


def _row(prompt: np.ndarray, resp: np.ndarray, resp_mask: np.ndarray, source: str) -> bytes:
    ids = np.concatenate([prompt, resp]).astype(np.int64)
    mask = np.concatenate([np.zeros(prompt.shape[0], np.int64), resp_mask.astype(np.int64)])
    line = orjson.dumps(
        {
            "input_ids": ids,
            "loss_mask": mask,
            "seq_len": int(ids.shape[0]),
            "n_prompt_tokens": int(prompt.shape[0]),
            "n_response_tokens": int(resp.shape[0]),
            "source": source,
        },
        option=orjson.OPT_SERIALIZE_NUMPY,
    )
    if SPELLING == "json":
        # no string of a row holds "," or ":" (keys and source names), so this is exactly what
        # json.dumps writes
        line = line.replace(b",", b", ").replace(b":", b": ")
    return line


class _Pieces:
    """Assistant spans (trained) and tool outputs (untrained) to build long responses from."""

    def __init__(self, rows: list[dict]) -> None:
        self.asst: list[np.ndarray] = []
        self.tool: list[np.ndarray] = []
        for r in rows:
            ids = np.asarray(r["input_ids"], dtype=np.int64)
            mask = np.asarray(r["loss_mask"], dtype=np.int8)
            n = r["n_prompt_tokens"]
            resp, rmask = ids[n:], mask[n:]
            if rmask.any():
                self.asst.append(resp[rmask == 1])
            # tool-like text: slices of prompts past their system prompt
            body = ids[min(n, 200) : n]
            for s in range(0, body.shape[0] - 300, 700):
                self.tool.append(body[s : s + 700])

    def response(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        parts, masks, total = [], [], 0
        while total < n:
            a = self.asst[int(rng.integers(len(self.asst)))]
            a = a[: int(rng.integers(150, 1500))]
            parts.append(a)
            masks.append(np.ones(a.shape[0], np.int8))
            t = self.tool[int(rng.integers(len(self.tool)))]
            parts.append(t)
            masks.append(np.zeros(t.shape[0], np.int8))
            total += a.shape[0] + t.shape[0]
        return np.concatenate(parts)[:n], np.concatenate(masks)[:n]


def make(out: Path, size_gb: float, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    scale = size_gb / BASE_GB
    out.mkdir(parents=True, exist_ok=True)
    budget = int(size_gb * 1e9)
    written = 0
    stats: dict[str, dict] = {}
    agent_rows = _load("A3_sweagent") + _load("A1_deepswekimi") + _load("A2_kimik25")
    pieces = _Pieces(agent_rows)

    def write(folder: str, lines_iter) -> None:
        nonlocal written
        path = out / folder / "tokenized_data.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = toks = ptoks = 0
        with open(path, "wb") as fh:
            for line, n_tok, n_prompt in lines_iter:
                fh.write(line)
                fh.write(b"\n")
                rows += 1
                toks += n_tok
                ptoks += n_prompt
        size = path.stat().st_size
        written += size
        stats[folder] = {"rows": rows, "bytes": size, "tokens": toks, "prompt_tokens": ptoks}

    for folder, n in SHORT_ROWS.items():
        base = _load(folder)
        n = max(1, round(n * scale))
        src = folder.split("_", 1)[1]

        def short(base=base, n=n, src=src):
            for i in range(n):
                r = base[i % len(base)]
                ids = np.asarray(r["input_ids"], dtype=np.int64)
                p = r["n_prompt_tokens"]
                prompt = _perturb(ids[:p], rng)
                mask = np.asarray(r["loss_mask"], dtype=np.int8)[p:]
                yield _row(prompt, ids[p:], mask, src), ids.shape[0], p

        write(folder, short())

    for folder, (n, lo, hi) in MEDIUM_ROWS.items():
        base = [r for r in _load(folder) if r["n_prompt_tokens"] <= 3000]
        n = max(1, round(n * scale))
        src = folder.split("_", 1)[1]

        def medium(base=base, n=n, lo=lo, hi=hi, src=src):
            for i in range(n):
                r = base[i % len(base)]
                ids = np.asarray(r["input_ids"], dtype=np.int64)
                p = r["n_prompt_tokens"]
                prompt = _perturb(ids[:p], rng)
                resp, rmask = pieces.response(int(rng.integers(lo, hi)), rng)
                yield _row(prompt, resp, rmask, src), p + resp.shape[0], p

        write(folder, medium())

    dominant_bytes = max(budget - written, int(DOMINANT_SHARE * budget))
    base = [r for r in _load(DOMINANT) + _load("A1_deepswekimi") if r["n_prompt_tokens"] <= 3000]

    def dominant():
        done = 0
        i = 0
        while done < dominant_bytes:
            r = base[i % len(base)]
            i += 1
            ids = np.asarray(r["input_ids"], dtype=np.int64)
            p = r["n_prompt_tokens"]
            prompt = _perturb(ids[:p], rng)
            n_resp = int(np.clip(rng.normal(27000, 4000), 15000, 32000))
            resp, rmask = pieces.response(n_resp, rng)
            line = _row(prompt, resp, rmask, "sweagent")
            done += len(line) + 1
            yield line, p + n_resp, p

    write(DOMINANT, dominant())
    return stats


def compress(src: Path, dst: Path, kind: str) -> None:
    for f in sorted(src.rglob("*.jsonl")):
        target = dst / f.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        if kind == "gz":
            with open(f, "rb") as i, gzip.open(str(target) + ".gz", "wb", compresslevel=6) as o:
                shutil.copyfileobj(i, o, 1 << 22)
        else:
            import zstandard

            with open(f, "rb") as i, open(str(target) + ".zst", "wb") as o:
                zstandard.ZstdCompressor(level=3).copy_stream(i, o)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--size-gb", type=float, default=1.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gz", type=Path, default=None, help="also write a .jsonl.gz copy here")
    ap.add_argument("--zst", type=Path, default=None, help="also write a .jsonl.zst copy here")
    ap.add_argument(
        "--spelling",
        choices=("json", "compact"),
        default="json",
        help='separators: "json" as json.dumps writes (", " and ": "), "compact" as orjson',
    )
    a = ap.parse_args()
    global SPELLING
    SPELLING = a.spelling
    t = time.perf_counter()
    stats = make(a.out, a.size_gb, a.seed)
    if a.gz:
        compress(a.out, a.gz, "gz")
    if a.zst:
        compress(a.out, a.zst, "zst")
    total = {k: sum(s[k] for s in stats.values()) for k in ("rows", "bytes", "tokens")}
    total["prompt_tokens"] = sum(s["prompt_tokens"] for s in stats.values())
    stats["total"] = total
    stats["spelling"] = a.spelling  # type: ignore[assignment]
    stats["seconds"] = round(time.perf_counter() - t, 1)
    (a.out.parent / f"{a.out.name}.shape.json").write_text(json.dumps(stats, indent=1))
    print(json.dumps(stats, indent=1))


if __name__ == "__main__":
    main()
