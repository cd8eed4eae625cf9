"""Fuzzing the reader: a corrupted shard gives a DistpromptError at shard:line, or every valid row.

Valid shards are written in several styles (compact or spaced JSON, ``\\u`` escapes, CRLF, a BOM,
no final newline, extra keys, plain/gzip/zstd) and then corrupted at random: truncation, byte
flips, inserted, deleted, duplicated and joined lines, swapped fields, deleted and duplicated keys,
values replaced by wrong types, and damage to the compressed bytes themselves. An independent
oracle (the standard library's ``json``, line by line) says which lines are valid rows; the reader
must agree exactly, or stop with a :class:`DistpromptError` at the first bad line. Any other
exception, or a hang (the deadline), is a finding.

The number of examples is ``DISTPROMPT_FUZZ_EXAMPLES`` (default 200, enough for CI); run it long
with e.g. ``DISTPROMPT_FUZZ_EXAMPLES=50000 pytest tests/test_fuzz.py --hypothesis-seed=1``.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import zlib
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distprompt.errors import DataError, DistpromptError
from distprompt.read.scan import scan
from distprompt.read.shards import iter_rows
from distprompt.read.tally import Tally
from distprompt.read.validate import DEFAULT_MAX_LINE_BYTES
from distprompt.records import Shard

EXAMPLES = int(os.environ.get("DISTPROMPT_FUZZ_EXAMPLES", "200"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=timedelta(seconds=5),  # a hang is a finding
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
REQUIRED = ("input_ids", "loss_mask", "seq_len", "n_prompt_tokens", "n_response_tokens", "source")
BOM = b"\xef\xbb\xbf"
VOCAB = 1500
ORJSON_MAX_DEPTH = 1024
ZSTD = shutil.which("zstd")  # judges damaged .zst files; without it they are not generated


# --------------------------------------------------------------------------------------------
# the oracle: what the schema says, checked with the standard library
# --------------------------------------------------------------------------------------------


class _Obj(list):  # type: ignore[type-arg]
    """A JSON object as its list of pairs (so duplicate keys stay visible)."""


def _reject(token: str) -> Any:
    raise ValueError(f"not JSON: {token}")


def _float(token: str) -> float:
    x = float(token)
    if math.isinf(x):
        raise ValueError("infinite number")  # orjson refuses 1e400 too
    return x


def _depth_and_surrogates(v: Any, depth: int = 1) -> tuple[int, bool]:
    """Deepest nesting and whether a string holds a lone surrogate (not valid UTF-8)."""
    if isinstance(v, str):
        return 0, any(0xD800 <= ord(c) <= 0xDFFF for c in v)
    if isinstance(v, list):
        deepest, bad = depth, False
        for item in v:
            items = item if isinstance(v, _Obj) else (item,)
            for x in items:
                d, b = _depth_and_surrogates(x, depth + 1)
                deepest, bad = max(deepest, d), bad or b
        return deepest, bad
    return 0, False


def _is_int(x: Any) -> bool:
    # Integers beyond 64 bits are not integers to the reader (orjson reads them as floats).
    return type(x) is int and -(2**63) <= x < 2**64


def _int_list(v: Any, *, values: tuple[int, int]) -> bool:
    lo, hi = values
    return isinstance(v, list) and all(_is_int(x) and lo <= x <= hi for x in v)


def oracle_line(raw: bytes, limit: int) -> dict[str, Any] | str | None:
    """``None`` for a blank line, ``"bad"`` for a line that is not a valid row, else the row.

    ``raw`` is the line without its ``\\n``.
    """
    if len(raw) > limit:
        return "bad"
    if raw.startswith(BOM):
        raw = raw[3:]
    raw = raw.rstrip(b"\r\n")
    if not raw.strip():
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "bad"
    limit_before = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit_before, 20_000))
    try:
        obj = json.loads(text, object_pairs_hook=_Obj, parse_constant=_reject, parse_float=_float)
    except ValueError:
        return "bad"
    finally:
        sys.setrecursionlimit(limit_before)
    depth, surrogates = _depth_and_surrogates(obj)
    if surrogates or depth > ORJSON_MAX_DEPTH or not isinstance(obj, _Obj):
        return "bad"
    keys = [k for k, _ in obj]
    if any(keys.count(k) > 1 for k in REQUIRED):
        return "bad"
    row = dict(obj)
    if any(k not in row for k in REQUIRED):
        return "bad"
    source, ids, mask = row["source"], row["input_ids"], row["loss_mask"]
    seq_len, n_prompt, n_resp = row["seq_len"], row["n_prompt_tokens"], row["n_response_tokens"]
    ok = (
        isinstance(source, str)
        and source.strip() != ""
        and _is_int(seq_len)
        and _is_int(n_prompt)
        and _is_int(n_resp)
        and _int_list(ids, values=(0, 2**63 - 1))
        and _int_list(mask, values=(0, 1))
        and len(ids) == seq_len
        and len(mask) == seq_len
        and 0 < n_prompt <= seq_len
        and n_resp >= 0
        and n_prompt + n_resp == seq_len
    )
    return {k: row[k] for k in REQUIRED} if ok else "bad"


@dataclass
class Line:
    number: int
    offset: int
    verdict: dict[str, Any] | str | None


def oracle(data: bytes, limit: int) -> list[Line]:
    """Every line of ``data`` (1-based numbers, byte offsets) with its verdict."""
    out = []
    offset = 0
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    for i, raw in enumerate(parts, 1):
        out.append(Line(i, offset, oracle_line(raw, limit)))
        offset += len(raw) + 1
    return out


def as_tuple(row: dict[str, Any]) -> tuple[Any, ...]:
    return (
        row["source"],
        list(row["input_ids"]),
        list(row["loss_mask"]),
        row["seq_len"],
        row["n_prompt_tokens"],
        row["n_response_tokens"],
    )


def row_tuple(r: Any) -> tuple[Any, ...]:
    return (
        r.source,
        r.input_ids.tolist(),
        r.loss_mask.tolist(),
        r.seq_len,
        r.n_prompt_tokens,
        r.n_response_tokens,
    )


# --------------------------------------------------------------------------------------------
# strategies: valid shards, then damage
# --------------------------------------------------------------------------------------------

SOURCES = ["chat", "code", "glaive", "δ-source", "a b", 'q"uote', "back\\slash", "\u00e9t\u00e9"]
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
extra_keys = st.dictionaries(
    st.text(max_size=8).filter(lambda k: k not in REQUIRED)
    | st.sampled_from(["id", "meta", "input_ids_v2", "Source", "e"]),
    json_values,
    max_size=3,
)


@st.composite
def valid_rows(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(1, 24))
    p = draw(st.integers(1, n))
    # most rows valid; some with lengths that do not add up (a bad row, length_sum_mismatch)
    resp = draw(st.sampled_from([n - p, n - p, n - p, n - p, 0, n - p + 2]))
    row: dict[str, Any] = {
        "input_ids": draw(st.lists(st.integers(0, 1400), min_size=n, max_size=n)),
        "loss_mask": draw(st.lists(st.sampled_from([0, 1]), min_size=n, max_size=n)),
        "seq_len": n,
        "n_prompt_tokens": p,
        "n_response_tokens": resp,
        "source": draw(st.sampled_from(SOURCES)),
    }
    if draw(st.integers(0, 3)) == 0:
        row.update(draw(extra_keys))
    if draw(st.integers(0, 7)) == 0:  # beyond the vocabulary of the scan test
        row["input_ids"][draw(st.integers(0, n - 1))] = VOCAB + 50
    order = draw(st.permutations(list(row)))
    return {k: row[k] for k in order}


def serialize(row: dict[str, Any], style: str) -> bytes:
    if style == "orjson":
        return orjson.dumps(row)
    if style == "ascii":  # \u escapes for every non-ASCII character
        return json.dumps(row).encode()
    return json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode()


NASTY_LINES = [
    b"",
    b"   ",
    b"\t\r",
    b"[]",
    b"null",
    b'"x"',
    b"42",
    b"{",
    b"}",
    b"{}",
    b"[1,2",
    b"\xff\xfe",
    b"\x00",
    b"1e999",
    b"NaN",
    BOM,
    b'{"a":' * 40 + b"1" + b"}" * 40,
    b"[" * 1100 + b"]" * 1100,
    b'{"input_ids":[1],"input_ids":[2]}',
    b'{"input_ids":[1],"loss_mask":[0],"seq_len":1,"n_prompt_tokens":1,"n_response_tokens":0,'
    b'"source":"s","source":"t"}',
    b'{"input_ids":[1],"loss_mask":[0],"seq_len":1,"n_prompt_tokens":1,"n_response_tokens":0,'
    b'"sourc\\u0065":"t","source":"s"}',
    b'{"input_ids":[1,true],"loss_mask":[0,0],"seq_len":2,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s"}',
    b'{"input_ids":[9223372036854775808],"loss_mask":[0],"seq_len":1,"n_prompt_tokens":1,'
    b'"n_response_tokens":0,"source":"s"}',
    b'{"input_ids":[1],"loss_mask":[0],"seq_len":1,"n_prompt_tokens":1,"n_response_tokens":0,'
    b'"source":"s","deep":' + b"[" * 1000 + b"]" * 1000 + b"}",
    b'{"input_ids":[1],"loss_mask":[0],"seq_len":1,"n_prompt_tokens":1,"n_response_tokens":0,'
    b'"source":"\\ud800"}',
]
BAD_VALUES: list[Any] = [
    -1, 0, 1, 2, 2**63, 2**64, 10**30, 1.5, 1.0, True, False, None, "x", "", [], [[1]], [True],
    [1.0], [-1], [2], {"a": 1}, [2**63], [0, 1, 2], 10**6,
]  # fmt: skip


BAD_ELEMENTS: list[Any] = [
    2,
    -1,
    True,
    False,
    1.0,
    0.0,
    "1",
    None,
    [1],
    {},
    2**63,
    2**64,
    -(2**63) - 1,
    VOCAB,
    10**6,
]


def _split(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _edit_line(data: bytes, index: int, edit: Any) -> bytes:
    lines = _split(data)
    if not lines:
        return data
    i = index % len(lines)
    try:
        obj = orjson.loads(lines[i])
    except orjson.JSONDecodeError:
        return data
    if not isinstance(obj, dict) or not obj:
        return data
    try:
        new = edit(obj)
    except (TypeError, ValueError, RecursionError):  # nesting deeper than the writers write
        return data
    if new is None:
        return data
    lines[i] = new
    return b"\n".join(lines)


@st.composite
def damage(draw: st.DrawFn, data: bytes) -> bytes:
    """One random corruption of the uncompressed text."""
    op = draw(
        st.sampled_from(
            [
                "truncate", "flip", "insert", "delete", "duplicate", "join", "swap", "drop_key",
                "dup_key", "bad_value", "bad_element", "crlf", "bom", "insert_valid",
            ]
        )
    )  # fmt: skip
    lines = _split(data)
    if op == "truncate":
        return data[: draw(st.integers(0, max(0, len(data))))]
    if op == "flip" and data:
        i = draw(st.integers(0, len(data) - 1))
        return data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1 :]
    if op == "insert":
        line = draw(st.sampled_from(NASTY_LINES) | st.binary(max_size=40))
        i = draw(st.integers(0, len(lines)))
        return b"\n".join([*lines[:i], line, *lines[i:]])
    if op == "insert_valid":
        line = serialize(draw(valid_rows()), "orjson")
        i = draw(st.integers(0, len(lines)))
        return b"\n".join([*lines[:i], line, *lines[i:]])
    if op == "delete" and lines:
        i = draw(st.integers(0, len(lines) - 1))
        return b"\n".join(lines[:i] + lines[i + 1 :])
    if op == "duplicate" and lines:
        i = draw(st.integers(0, len(lines) - 1))
        return b"\n".join([*lines[: i + 1], lines[i], *lines[i + 1 :]])
    if op == "join" and b"\n" in data:
        i = draw(st.integers(0, data.count(b"\n") - 1))
        at = [k for k, c in enumerate(data) if c == 0x0A][i]
        return data[:at] + data[at + 1 :]
    if op == "crlf":
        return data.replace(b"\n", b"\r\n")
    if op == "bom":
        i = draw(st.integers(0, len(lines)))
        return b"\n".join(
            [*lines[:i], BOM + (lines[i] if i < len(lines) else b""), *lines[i + 1 :]]
        )
    index = draw(st.integers(0, 10_000))
    keys = st.sampled_from(REQUIRED)
    if op == "swap":
        a, b = draw(keys), draw(keys)

        def swap(obj: dict[str, Any]) -> bytes | None:
            if a not in obj or b not in obj:
                return None
            obj[a], obj[b] = obj[b], obj[a]
            return json.dumps(obj).encode()

        return _edit_line(data, index, swap)
    if op == "drop_key":
        k = draw(keys)
        return _edit_line(data, index, lambda obj: (obj.pop(k, None), orjson.dumps(obj))[1])
    if op == "dup_key":
        k, v = draw(keys), draw(st.sampled_from(BAD_VALUES) | json_values)
        extra = json.dumps({k: v})[1:-1].encode()

        def dup(obj: dict[str, Any]) -> bytes:
            body = orjson.dumps(obj)
            return body[:-1] + (b"," if len(body) > 2 else b"") + extra + b"}"

        return _edit_line(data, index, dup)
    if op == "bad_element":  # one element of a list replaced, its length kept
        k = draw(st.sampled_from(["input_ids", "loss_mask"]))
        at, v = draw(st.integers(0, 100)), draw(st.sampled_from(BAD_ELEMENTS))

        def element(obj: dict[str, Any]) -> bytes | None:
            if not isinstance(obj.get(k), list) or not obj[k]:
                return None
            obj[k][at % len(obj[k])] = v
            return json.dumps(obj).encode()

        return _edit_line(data, index, element)
    if op == "bad_value":
        k, v = draw(keys), draw(st.sampled_from(BAD_VALUES))
        return _edit_line(
            data, index, lambda obj: (obj.__setitem__(k, v), json.dumps(obj).encode())[1]
        )
    return data


@st.composite
def shards(draw: st.DrawFn, *, whole: bool = False) -> tuple[bytes, str, bytes | None, int]:
    """``(uncompressed text, suffix, damaged compressed bytes or None, max_line_bytes)``.

    ``whole``: the compressed bytes are not damaged and lines have the default limit.
    """
    rows = draw(st.lists(valid_rows(), min_size=1, max_size=8))
    style = draw(st.sampled_from(["orjson", "ascii", "utf8"]))
    ending = draw(st.sampled_from([b"\n", b"\n", b"\r\n"]))
    text = ending.join(serialize(r, style) for r in rows)
    if draw(st.booleans()):
        text += ending
    if draw(st.integers(0, 5)) == 0:
        text = BOM + text
    for _ in range(draw(st.integers(0, 4))):
        text = draw(damage(text))
    suffix = draw(st.sampled_from([".jsonl", ".jsonl", ".jsonl.gz", ".jsonl.zst"]))
    limits = [DEFAULT_MAX_LINE_BYTES, DEFAULT_MAX_LINE_BYTES, 64, 300, 2000]
    limit = DEFAULT_MAX_LINE_BYTES if whole else draw(st.sampled_from(limits))
    compressed = None
    can_judge = suffix.endswith(".gz") or ZSTD is not None
    if (
        not whole and suffix != ".jsonl" and can_judge and draw(st.integers(0, 3)) == 0
    ):  # damage the bytes
        blob = compress(text, suffix, checksum=draw(st.booleans()))
        if draw(st.booleans()) and blob:
            blob = blob[: draw(st.integers(0, len(blob) - 1))]
        else:
            for _ in range(draw(st.integers(1, 3))):
                if blob:
                    i = draw(st.integers(0, len(blob) - 1))
                    blob = blob[:i] + bytes([blob[i] ^ draw(st.integers(1, 255))]) + blob[i + 1 :]
        compressed = blob
    return text, suffix, compressed, limit


def compress(text: bytes, suffix: str, *, checksum: bool = False) -> bytes:
    if suffix.endswith(".gz"):
        return gzip.compress(text, mtime=0)
    if suffix.endswith(".zst"):
        return zstandard.ZstdCompressor(write_checksum=checksum).compress(text)
    return text


def readable(blob: bytes, suffix: str) -> tuple[bytes, bool]:
    """What the standard decompressors recover from damaged bytes, and whether it is whole."""
    if suffix.endswith(".gz"):
        out, rest = b"", blob
        while rest:  # members one after another, zero padding between them, as gzip reads
            d = zlib.decompressobj(wbits=31)
            i = 0
            try:
                while i < len(rest) and not d.eof:  # byte by byte: keep what decodes
                    out += d.decompress(rest[i : i + 1])
                    i += 1
            except zlib.error:
                return out, False
            if not d.eof:
                return out, False
            rest = rest[i:].lstrip(b"\x00")
        return out, True
    d = zstandard.ZstdDecompressor().decompressobj(read_across_frames=True)
    out = b""
    try:
        for i in range(len(blob)):  # byte by byte: keep what decodes before the damage
            out += d.decompress(blob[i : i + 1])
    except zstandard.ZstdError:
        return out, False
    if not blob:
        return out, True  # an empty file is an empty shard, as with gzip
    # Whole or cut: ask the zstd command line tool, an implementation of its own.
    with tempfile.NamedTemporaryFile(suffix=".zst") as fh:
        fh.write(blob)
        fh.flush()
        return out, subprocess.run([ZSTD, "-t", "-q", fh.name], capture_output=True).returncode == 0


# --------------------------------------------------------------------------------------------
# the properties
# --------------------------------------------------------------------------------------------


def _write(folder: str, text: bytes, suffix: str, compressed: bytes | None) -> Shard:
    path = Path(folder) / f"fz{suffix}"
    path.write_bytes(compressed if compressed is not None else compress(text, suffix))
    return Shard(path=path, name=path.name, size=path.stat().st_size)


def check_reader(text: bytes, suffix: str, compressed: bytes | None, limit: int) -> None:
    """The reader against the oracle, in both modes."""
    with tempfile.TemporaryDirectory() as folder:
        shard = _write(folder, text, suffix, compressed)
        whole = True
        if compressed is not None:  # the oracle reads what the standard tools recover
            text, whole = readable(compressed, suffix)
        lines = oracle(text, limit)
        # skipping: every valid row kept, in order, with its provenance; every bad line counted
        tally = Tally(on_error="skip")
        skipped, blank = tally.skipped, tally.anomalies
        try:
            got = list(iter_rows(shard, tally=tally, max_line_bytes=limit))
        except DistpromptError as exc:  # only an unreadable file may stop a skipping read
            pytest.fail(f"skipping read raised {type(exc).__name__}: {exc}")
        corrupt = skipped.pop("corrupt_stream", 0)
        reached = len(got) + sum(skipped.values()) + blank.get("blank_line", 0)
        if corrupt:
            # A damaged stream: counted, and the lines before the damage read exactly (the line
            # it cuts is never passed off as a whole one).
            assert not whole, "a sound stream was called corrupt"
            assert reached <= len(lines)
            lines = lines[:reached]
        else:
            assert whole, "damage went unnoticed"
            assert reached == len(lines), (reached, len(lines))
        want = [ln for ln in lines if isinstance(ln.verdict, dict)]
        assert [(r.provenance.line, r.provenance.offset) for r in got] == [
            (ln.number, ln.offset) for ln in want
        ]
        assert [row_tuple(r) for r in got] == [as_tuple(ln.verdict) for ln in want]  # type: ignore[arg-type]
        assert sum(skipped.values()) == sum(ln.verdict == "bad" for ln in lines)
        assert blank.get("blank_line", 0) == sum(ln.verdict is None for ln in lines)
        # default: stop at the first bad line with shard:line, or read everything
        first_bad = next((ln.number for ln in lines if ln.verdict == "bad"), None)
        try:
            strict = list(iter_rows(shard, max_line_bytes=limit))
        except DataError as exc:
            assert exc.line == first_bad and str(exc).startswith(f"{shard.name}:{first_bad}: ")
            return
        except DistpromptError as exc:  # a damaged stream, named with the line it stopped at
            assert corrupt and first_bad is None, exc
            assert str(exc).startswith(f"{shard.name}:{reached + 1}: expected ")
            return
        assert first_bad is None and not corrupt
        assert [row_tuple(r) for r in strict] == [row_tuple(r) for r in got]


@FUZZ
@given(case=shards())
def test_reader_against_oracle(case: tuple[bytes, str, bytes | None, int]) -> None:
    check_reader(*case)


@FUZZ
@given(case=shards())
def test_scan_counts_every_row(case: tuple[bytes, str, bytes | None, int]) -> None:
    """The pass over the shard: rows, skips and the vocabulary check add up to the oracle."""
    text, suffix, compressed, limit = case
    if compressed is not None:
        return  # covered by the reader property
    with tempfile.TemporaryDirectory() as folder:
        shard = _write(folder, text, suffix, None)
        lines = oracle(text, limit)
        valid = [ln.verdict for ln in lines if isinstance(ln.verdict, dict)]
        in_vocab = [r for r in valid if not r["input_ids"] or max(r["input_ids"]) < VOCAB]
        part = scan(
            [shard],
            max_candidates=1000,
            on_error="skip",
            vocab_size=VOCAB,
            max_line_bytes=limit,
        )
        assert sum(st_.rows for st_ in part.stats.values()) == len(in_vocab)
        n_bad = sum(ln.verdict == "bad" for ln in lines)
        oov = len(valid) - len(in_vocab)
        assert sum(part.tally.skipped.values()) == n_bad + oov
        assert part.tally.skipped.get("id_out_of_vocab", 0) == oov
        assert part.tally.anomalies.get("blank_line", 0) == sum(ln.verdict is None for ln in lines)
        try:
            scan([shard], max_candidates=1000, vocab_size=VOCAB, max_line_bytes=limit)
        except DistpromptError as exc:
            assert str(exc).startswith(f"{shard.name}:")
            assert n_bad or oov
        else:
            assert not n_bad and not oov


@pytest.fixture(scope="module")
def tokenizer(qwen_tokenizer: Any) -> Any:
    return qwen_tokenizer


@settings(
    max_examples=max(5, EXAMPLES // 40),
    deadline=None,  # a full build takes about a second
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=shards(whole=True), skip=st.booleans())
def test_full_build(tokenizer: Any, case: tuple[bytes, str, bytes | None, int], skip: bool) -> None:
    """A few cases through build_suite: a DistpromptError or a suite of exactly the valid rows."""
    from distprompt import build_suite

    text, suffix, _, limit = case
    lines = oracle(text, limit)
    parsed = [ln.verdict for ln in lines if isinstance(ln.verdict, dict)]
    # ids beyond the tokenizer's vocabulary make a row bad like any other
    vocab = len(tokenizer)
    valid = [r for r in parsed if not r["input_ids"] or max(r["input_ids"]) < vocab]
    n_bad = sum(ln.verdict == "bad" for ln in lines) + len(parsed) - len(valid)
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "d").mkdir()
        _write(str(Path(folder) / "d"), text, suffix, None)
        try:
            suite = build_suite(
                Path(folder) / "d",
                tokenizer=tokenizer,
                per_source=3,
                recover_turns=False,
                on_error="skip" if skip else "raise",
                check_tokenizer=False,  # fuzzed ids carry no chat-template markers
            )
        except DistpromptError as exc:
            assert n_bad or not valid, exc
            return
        assert skip or not n_bad
        assert suite.manifest.counts.rows == len(valid)
        assert sum(suite.manifest.counts.skipped.values()) == n_bad
        assert len(suite) == sum(min(3, n) for n in _unique_per_source(valid).values())


def _unique_per_source(rows: list[dict[str, Any]]) -> dict[str, int]:
    seen: dict[str, set[tuple[int, ...]]] = {}
    for r in rows:
        seen.setdefault(r["source"], set()).add(tuple(r["input_ids"][: r["n_prompt_tokens"]]))
    return {s: len(v) for s, v in seen.items()}
