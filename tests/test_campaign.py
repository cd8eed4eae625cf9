"""A fuzz campaign over the sample shards: whole builds of corrupted corpora, both policies.

Each case (a fixed seed: ``pytest tests/test_campaign.py -k "case[17]"`` replays one) takes
three sample sources (24 real Qwen3 rows each), applies one to four corruptions — most of them
quiet, the kind a cheap check could miss (lengths that do not add up by one, a boolean among
the ids beside a float written without exponent, a shifted ``n_prompt_tokens``, a valid
one-token row, an id outside the vocabulary, a duplicated key, a stray source) — writes the
shards plain, gzip or zstd, and builds a suite with ``on_error`` ``raise`` or ``skip``.

An oracle of the test's own says what every line is: the standard library's ``json`` and the
row contract (``test_fuzz.oracle_line``), the vocabulary, and the template markers (the Qwen3
start marker opens the prompt, the generation prompt is in it), with the corpus verdict of
docs/concepts.md (the tokenizer is blamed when more than half of all checked rows, or of a
source's with at least three, lack the markers). Then:

- ``raise``: an error (a :class:`DistpromptError`, never another exception) exactly when a line
  is bad, naming a bad line as ``shard:line``; a row problem is named as one;
- ``skip``: a suite whose every item is a valid row of the corpus, with the recorded lengths;
  the manifest's ``rows`` the valid rows, ``skipped`` the bad ones (by reason, each first
  position a bad line), the summary saying the same;
- every 30th case also runs through the CLI: exit 0 with a complete folder or exit 2 with none.

``DISTPROMPT_FUZZ_EXAMPLES`` cases (CI: 300), about a third of a second each; the first 40 in the
quick run (``-m "not slow"``).
"""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import zstandard

from distprompt import build_suite
from distprompt.cli import main
from distprompt.errors import DataError, DistpromptError, TokenizerError
from distprompt.read.validate import DEFAULT_MAX_LINE_BYTES
from test_fuzz import EXAMPLES, oracle_line

from conftest import QWEN_DIR, SAMPLES_DIR

SOURCES = ("C1_opencodeinstruct", "D1_mixturethoughts", "E2_sharegpt")
ROWS = 24
CASES = max(30, EXAMPLES)
MARKER_REASONS = {"template_start_missing", "generation_prompt_missing"}


def _sample_lines() -> dict[str, list[bytes]]:
    out = {}
    for name in SOURCES:
        path = SAMPLES_DIR / "prepared" / name / "tokenized_data.jsonl"
        out[name] = path.read_bytes().splitlines()[:ROWS]
    return out


BASE = _sample_lines()


# --------------------------------------------------------------------------------------------
# corruptions: each edits one shard's lines (a list of bytes) in place
# --------------------------------------------------------------------------------------------


def _edit(lines: list[bytes], rng: random.Random, fn: Any) -> None:
    """Apply ``fn`` to the row of a random line that is still a JSON object."""
    for _ in range(5):
        i = rng.randrange(len(lines))
        try:
            row = orjson.loads(lines[i])
        except orjson.JSONDecodeError:
            continue
        if isinstance(row, dict) and isinstance(row.get("input_ids"), list) and row["input_ids"]:
            new = fn(row)
            if new is not None:
                lines[i] = new
            return


def _sum_off(rng: random.Random) -> Any:
    def fn(row: dict[str, Any]) -> bytes:
        d = rng.choice([1, -1, 100])
        row["n_response_tokens"] = (
            row["seq_len"] if rng.random() < 0.25 else max(0, row["n_response_tokens"] + d)
        )
        return orjson.dumps(row)

    return fn


def _bool_beside_float(key: str, rng: random.Random) -> Any:
    def fn(row: dict[str, Any]) -> bytes:
        at = rng.randrange(len(row[key]))
        row[key][at] = rng.choice([True, False])
        row["x"] = 1e-7
        text = orjson.dumps(row)
        return text.replace(b"1e-7", b"0.0000001") if rng.random() < 0.7 else text

    return fn


def _shift_prompt(rng: random.Random) -> Any:
    def fn(row: dict[str, Any]) -> bytes | None:
        k = rng.choice([-3, -1, 1, 2])
        p = row["n_prompt_tokens"] + k
        if not 0 < p <= row["seq_len"]:
            return None
        row["n_prompt_tokens"], row["n_response_tokens"] = p, row["seq_len"] - p
        return orjson.dumps(row)

    return fn


def _set(key: str, value: Any, *, raw: bytes | None = None) -> Any:
    def fn(row: dict[str, Any]) -> bytes:
        row[key] = value
        text = orjson.dumps(row)
        return text.replace(b'"@@"', raw) if raw is not None else text

    return fn


def _element(key: str, value: Any, rng: random.Random) -> Any:
    def fn(row: dict[str, Any]) -> bytes:
        row[key][rng.randrange(len(row[key]))] = value
        return orjson.dumps(row)

    return fn


def _one_token_row(source: str, rng: random.Random) -> bytes:
    return orjson.dumps(
        {
            "input_ids": [rng.randrange(151643)],
            "loss_mask": [0],
            "seq_len": 1,
            "n_prompt_tokens": 1,
            "n_response_tokens": 0,
            "source": source,
        }
    )


def _stray_row(rng: random.Random) -> bytes:
    n = rng.randint(2, 30)
    p = rng.randint(1, n)
    return json.dumps(
        {
            "source": "stray",
            "input_ids": [rng.randrange(150000) for _ in range(n)],
            "loss_mask": [0] * p + [1] * (n - p),
            "seq_len": n,
            "n_prompt_tokens": p,
            "n_response_tokens": n - p,
        },
        separators=(", ", ": "),
    ).encode()


def corrupt(lines: list[bytes], source: str, rng: random.Random) -> str:
    """One random corruption of ``lines``; returns its name."""
    op = rng.choice(
        [
            "sum_off", "sum_off", "bool_ids", "bool_ids", "bool_mask", "shift_prompt",
            "shift_prompt", "one_token", "oov", "dup_key", "negative_id", "seq_len_off",
            "mask_two", "truncate", "garbage", "blank", "empty_source", "prompt_zero",
            "int_as_float", "spaced", "stray", "stray", "strays",
        ]
    )  # fmt: skip
    if op == "sum_off":
        _edit(lines, rng, _sum_off(rng))
    elif op == "bool_ids":
        _edit(lines, rng, _bool_beside_float("input_ids", rng))
    elif op == "bool_mask":
        _edit(lines, rng, _bool_beside_float("loss_mask", rng))
    elif op == "shift_prompt":
        _edit(lines, rng, _shift_prompt(rng))
    elif op == "one_token":
        lines.insert(rng.randrange(len(lines) + 1), _one_token_row(source, rng))
    elif op == "oov":
        _edit(lines, rng, _element("input_ids", rng.choice([151669, 10**6, 2**40]), rng))
    elif op == "dup_key":
        i = rng.randrange(len(lines))
        if lines[i].endswith(b"}"):
            lines[i] = lines[i][:-1] + rng.choice([b',"source":"other"}', b',"seq_len":3}'])
    elif op == "negative_id":
        _edit(lines, rng, _element("input_ids", -1, rng))
    elif op == "seq_len_off":
        _edit(lines, rng, lambda row: _set("seq_len", row["seq_len"] + 1)(row))
    elif op == "mask_two":
        _edit(lines, rng, _element("loss_mask", 2, rng))
    elif op == "truncate":
        i = rng.randrange(len(lines))
        lines[i] = lines[i][: rng.randrange(1, max(2, len(lines[i])))]
    elif op == "garbage":
        lines.insert(rng.randrange(len(lines) + 1), rng.choice([b"{", b"null", b"[1,2]", b"\xff"]))
    elif op == "blank":
        lines.insert(rng.randrange(len(lines) + 1), b"")
    elif op == "empty_source":
        _edit(lines, rng, _set("source", rng.choice(["", "  "])))
    elif op == "prompt_zero":
        _edit(lines, rng, _set("n_prompt_tokens", 0))
    elif op == "int_as_float":
        _edit(lines, rng, lambda row: _set("seq_len", "@@", raw=b"%d.0" % row["seq_len"])(row))
    elif op == "spaced":  # a valid row in another spelling: not a corruption
        _edit(lines, rng, lambda row: json.dumps(row, separators=(", ", ": ")).encode())
    elif op == "stray":  # a row of a source of its own, without the markers: a bad row
        lines.insert(rng.randrange(len(lines) + 1), _stray_row(rng))
    else:  # several: a source the tokenizer evidently does not match (the verdict blames it)
        for _ in range(rng.randint(3, 5)):
            lines.insert(rng.randrange(len(lines) + 1), _stray_row(rng))
    return op


# --------------------------------------------------------------------------------------------
# the oracle
# --------------------------------------------------------------------------------------------


@dataclass
class Expect:
    """What the oracle says of a corpus."""

    valid: dict[tuple[str, int], dict[str, Any]]  # (shard, line) -> row, in the suite's reach
    bad: dict[tuple[str, int], str]  # (shard, line) -> "contract" | "vocab" | "markers"
    blamed: bool  # the tokenizer is blamed (the marker check fails on the corpus)


def _contains(hay: list[int], needle: list[int]) -> bool:
    n = len(needle)
    return any(hay[i : i + n] == needle for i in range(len(hay) - n + 1))


def judge(shards: dict[str, list[bytes]], tok: Any) -> Expect:
    vocab = len(tok)
    start = [tok.convert_tokens_to_ids("<|im_start|>")]
    gen = tok.encode("<|im_start|>assistant\n", add_special_tokens=False)
    valid, bad, marked = {}, {}, {}
    checked: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    for name, lines in shards.items():
        for number, raw in enumerate(lines, 1):
            v = oracle_line(raw, DEFAULT_MAX_LINE_BYTES)
            if v is None:
                continue
            if not isinstance(v, dict):
                bad[(name, number)] = "contract"
            elif max(v["input_ids"]) >= vocab:
                bad[(name, number)] = "vocab"
            else:
                prompt = v["input_ids"][: v["n_prompt_tokens"]]
                checked[v["source"]] += 1
                if prompt[:1] != start or not _contains(prompt, gen):
                    failed[v["source"]] += 1
                    marked[(name, number)] = v
                else:
                    valid[(name, number)] = v
    total, total_failed = sum(checked.values()), sum(failed.values())
    blamed = total_failed > total / 2 or any(
        n >= 3 and n > checked[s] / 2 for s, n in failed.items()
    )
    if blamed:  # the marker failures are the tokenizer's, not the rows'
        valid.update(marked)
    else:
        bad.update(dict.fromkeys(marked, "markers"))
    return Expect(valid, bad, blamed)


# --------------------------------------------------------------------------------------------
# the campaign
# --------------------------------------------------------------------------------------------


def _write(folder: Path, shards: dict[str, list[bytes]], rng: random.Random) -> dict[str, str]:
    """The shards on disk; returns shard name (as provenance names it) per source key."""
    names = {}
    for key, lines in shards.items():
        suffix = rng.choice([".jsonl", ".jsonl", ".jsonl", ".jsonl.gz", ".jsonl.zst"])
        text = b"\n".join(lines) + b"\n"
        if suffix.endswith(".gz"):
            blob = gzip.compress(text, mtime=0)
        elif suffix.endswith(".zst"):
            blob = zstandard.ZstdCompressor().compress(text)
        else:
            blob = text
        (folder / f"{key}{suffix}").write_bytes(blob)
        names[key] = f"{key}{suffix}"
    return names


def _where(text: str) -> tuple[str, int]:
    shard, _, line = text.partition(": ")[0].rpartition(":")
    return shard, int(line)


#: Cases in the quick run (``-m "not slow"``); the others are marked slow (CI runs them all).
QUICK = 40


@pytest.mark.parametrize(
    "seed",
    [pytest.param(i, marks=[pytest.mark.slow] if i >= QUICK else []) for i in range(CASES)],
    ids=[f"case[{i}]" for i in range(CASES)],
)
def test_campaign(seed: int, qwen_tokenizer: Any, tmp_path: Path) -> None:
    rng = random.Random(seed)
    shards = {k: list(v) for k, v in BASE.items()}
    ops = [corrupt(shards[k], k, rng) for k in rng.choices(SOURCES, k=rng.randint(1, 4))]
    skip = seed % 2 == 1
    data = tmp_path / "data"
    data.mkdir()
    names = _write(data, shards, rng)
    expect = judge({names[k]: v for k, v in shards.items()}, qwen_tokenizer)
    workers = 2 if seed % 25 == 7 else 1
    try:
        suite = build_suite(
            data,
            tokenizer=qwen_tokenizer,
            per_source=3,
            recover_turns=False,
            on_error="skip" if skip else "raise",
            workers=workers,
        )
    except DistpromptError as exc:
        if isinstance(exc, TokenizerError):  # skipping, or raising with no other bad line
            assert expect.blamed, (ops, exc)
            assert "template_markers check failed" in str(exc)
            assert skip or all(why == "markers" for why in expect.bad.values()), (ops, exc)
        else:
            assert not skip, (ops, exc)  # skipping: only a blamed tokenizer stops the build
            assert expect.bad, (ops, exc)  # nothing bad: nothing to refuse
            assert isinstance(exc, DataError), (ops, exc)
            where = _where(str(exc))
            assert where in expect.bad, (ops, exc, sorted(expect.bad))
            if exc.reason in MARKER_REASONS:
                assert expect.bad[where] == "markers" and "a problem of this row" in str(exc)
            else:  # the first bad line of its shard (a row problem is told after the pass)
                first = min(
                    n for (s, n), why in expect.bad.items() if s == where[0] and why != "markers"
                )
                assert where[1] == first, (ops, exc)
        _cli(seed, data, tmp_path, skip=skip, ok=False)
        return
    assert not expect.blamed, ops
    assert skip or not expect.bad, (ops, sorted(expect.bad))
    m = suite.manifest
    counts = m.counts
    assert counts.rows == len(expect.valid), ops
    assert sum(counts.skipped.values()) == len(expect.bad), (ops, counts.skipped)
    for reason, first in counts.first_skipped.items():
        assert _where(first + ": ") in expect.bad, (ops, reason, first)
    markers = sum(why == "markers" for why in expect.bad.values())
    assert sum(n for r, n in counts.skipped.items() if r in MARKER_REASONS) == markers, ops
    assert sum(s.rows for s in m.sources.values()) == counts.rows
    assert sum(s.rows for s in m.corpus.shards) == counts.rows
    table = suite.summary()
    if counts.skipped:
        listed = ", ".join(f"{k}={v}" for k, v in counts.skipped.items())
        assert f"skipped rows: {listed}" in table
        assert any(w.startswith(f"skipped {len(expect.bad)} bad rows") for w in m.warnings)
    else:
        assert "skipped rows" not in table
    for item in suite:
        key = (item.provenance.shard, item.provenance.line)
        assert key in expect.valid, (ops, key)  # no corrupt row in the suite
        row = expect.valid[key]
        assert item.source == row["source"]
        assert (item.n_prompt_tokens, item.n_response_tokens) == (
            row["n_prompt_tokens"],
            row["n_response_tokens"],
        )
        assert list(item.prompt_ids) == row["input_ids"][: row["n_prompt_tokens"]]
    _cli(seed, data, tmp_path, skip=skip, ok=True, rows=counts.rows)


def _cli(seed: int, data: Path, tmp_path: Path, *, skip: bool, ok: bool, rows: int = 0) -> None:
    """Every 30th case through the CLI: exit 0 with a complete folder, or 2 with none."""
    if seed % 30 != 0:
        return
    out = tmp_path / "out"
    argv = ["export", str(data), "--tokenizer", str(QWEN_DIR), "--out", str(out)]
    argv += ["--per-source", "3", "--no-turns", "--no-progress"]
    code = main([*argv, "--on-error", "skip" if skip else "raise"])
    assert code == (0 if ok else 2)
    if not ok:
        assert not out.exists()
        return
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert manifest["counts"]["rows"] == rows
    items = (out / "suite.jsonl").read_bytes().splitlines()
    assert len(items) == sum(s["selected"] for s in manifest["sources"].values())
