"""Evaluation corpora with repeated prompts, made from those of ``make_eval_corpora.py``.

Real training data often holds one prompt several times with other replies (rejection sampling,
several agent rollouts of one issue), which the corpora of ``make_eval_corpora.py`` do not: every
prompt there is unique. This script writes, for each corpus given, a copy in which about a third
of each source's prompts get one to three more rows, each with the response (ids and loss mask
after the prompt) of another row of the same source, and the rows of a prompt are written longest
first reply first (as a pipeline that writes the accepted or the longest rollout first would):
what stands for a repeated prompt, and with which reply, then decides the estimates.

The copy is named ``<name>-rep`` and keeps the original's role and tokenizer; its rows follow
the users' layout and the row contract (``seq_len`` = ids, prompt + response = ids), and the
harness (``eval_representativeness.py``) computes its exact figures from every row as for the
others.

Usage:
    python benchmarks/make_repeated_corpora.py --eval /work/bench-data/eval \
        --out /work/bench-data/eval-rep [--only delta meridian ...]

Seeded and deterministic: the same command writes the same bytes.
"""

from __future__ import annotations

import argparse
import json
import random
import zlib
from pathlib import Path
from typing import Any

#: Share of a source's prompts that get more rows, and how many more (uniform in the range).
REPEATED = 1 / 3
MORE_ROWS = (1, 3)


def _first_reply(row: dict[str, Any]) -> int:
    mask = row["loss_mask"][row["n_prompt_tokens"] :]
    if 1 not in mask:
        return 0
    start = mask.index(1)
    end = mask.index(0, start) if 0 in mask[start:] else len(mask)
    return end - start


def _answered_by(row: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """``row``'s prompt with ``other``'s response."""
    n, m = row["n_prompt_tokens"], other["n_prompt_tokens"]
    ids = row["input_ids"][:n] + other["input_ids"][m:]
    return {
        "input_ids": ids,
        "loss_mask": row["loss_mask"][:n] + other["loss_mask"][m:],
        "seq_len": len(ids),
        "n_prompt_tokens": n,
        "n_response_tokens": len(ids) - n,
        "source": row["source"],
    }


def repeat_shard(rows: list[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    """The shard's rows with about :data:`REPEATED` of them repeated with borrowed replies."""
    out: list[dict[str, Any]] = []
    for row in rows:
        group = [row]
        if len(rows) > 1 and rng.random() < REPEATED:
            for _ in range(rng.randint(*MORE_ROWS)):
                other = rng.choice(rows)
                while other is row:
                    other = rng.choice(rows)
                group.append(_answered_by(row, other))
        group.sort(key=_first_reply, reverse=True)  # stable: ties keep the original first
        out.extend(group)
    return out


def make(corpus: Path, out: Path) -> dict[str, Any]:
    info = json.loads((corpus / "corpus.json").read_text(encoding="utf-8"))
    name = f"{info['name']}-rep"
    dest = out / name
    summary: dict[str, Any] = {
        "name": name,
        "role": info["role"],
        "template": info.get("template"),
        "tokenizer": info["tokenizer"],
        "made_from": info["name"],
        "sources": [],
    }
    for shard in sorted((corpus / "prepared").glob("*/tokenized_data.jsonl")):
        folder = shard.parent.name
        rows = [json.loads(line) for line in shard.read_text(encoding="utf-8").splitlines()]
        rng = random.Random(zlib.crc32(f"{name}/{folder}".encode()))
        got = repeat_shard(rows, rng)
        target = dest / "prepared" / folder / "tokenized_data.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("w", encoding="utf-8") as fh:
            for r in got:
                fh.write(json.dumps(r, separators=(",", ":")) + "\n")
        summary["sources"].append({"folder": folder, "rows": len(got), "prompts": len(rows)})
    (dest / "corpus.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eval", type=Path, required=True, help="make_eval_corpora.py's --out")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", nargs="*", help="corpus names (default: every JUDGE corpus)")
    args = ap.parse_args(argv)
    for meta in sorted(args.eval.glob("*/corpus.json")):
        info = json.loads(meta.read_text(encoding="utf-8"))
        if args.only and info["name"] not in args.only:
            continue
        if not args.only and info["role"] != "JUDGE":
            continue
        s = make(meta.parent, args.out)
        rows = sum(x["rows"] for x in s["sources"])
        prompts = sum(x["prompts"] for x in s["sources"])
        print(f"{s['name']}: {rows} rows of {prompts} prompts")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
