"""The row contract, on every reader: the fast reader and the full parser agree with each other
and with an independent oracle on every line, however it is written.

The contract (docs/concepts.md, "The row contract"): a JSON object, each schema key once;
``input_ids`` integers in ``[0, vocab)``; ``loss_mask`` 0/1 of the same length;
``seq_len == len(input_ids)``; ``0 < n_prompt_tokens <= seq_len``; ``n_response_tokens >= 0``;
``n_prompt_tokens + n_response_tokens == seq_len``; ``source`` a non-empty string.

Here one property: rows (valid, or broken in a way a cheap check could miss: a boolean among
the ids next to a float written without exponent, lengths that do not add up, a duplicated key,
an integer field written as a float) are written by a writer of our own in many spellings —
whitespace around every separator, key order, ``\\u`` and ``\\/`` escapes, floats with and
without exponents — and the same bytes go to :func:`~distprompt.read.validate.parse_row`, to
both paths of :func:`~distprompt.read.fastrow.read_row` (parsed whole, checked as bytes) and to
the standard library's ``json`` (``test_fuzz.oracle_line``). They must agree line by line: the
verdict, the reason, the values. ``tests/test_campaign.py`` runs whole exports over corrupted
sample shards.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distprompt.errors import DataError
from distprompt.read import fastrow
from distprompt.read.validate import DEFAULT_MAX_LINE_BYTES, parse_row
from test_fastrow import agree
from test_fuzz import EXAMPLES, as_tuple, oracle_line, row_tuple, valid_rows

SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)


@dataclass(frozen=True)
class Style:
    """How one line is spelled (every choice a JSON writer may make)."""

    comma: str  # between elements and members: "," ", " " ,\t" ...
    colon: str  # between a key and its value
    inner: str  # after "[" / "{" and before "]" / "}"
    strings: str  # "plain", "ascii" (\\u for non-ASCII), "all" (\\u for every character)
    slash: bool  # "/" written as "\\/"
    floats: str  # "repr" (1e-07), "plain" (0.0000001), "upper" (1.000000E-07)


WS = st.sampled_from(["", "", " ", "  ", "\t", " \r", "\t "])
styles = st.builds(
    Style,
    comma=st.tuples(WS, WS).map(lambda p: p[0] + "," + p[1]),
    colon=st.tuples(WS, WS).map(lambda p: p[0] + ":" + p[1]),
    inner=WS,
    strings=st.sampled_from(["plain", "ascii", "all"]),
    slash=st.booleans(),
    floats=st.sampled_from(["repr", "plain", "upper"]),
)


class Raw(str):
    """A value written as it is (``true`` among ids, ``5.0`` for an integer)."""


def _string(s: str, style: Style) -> str:
    if style.strings == "all":
        # json's escapes kept (surrogate pairs for non-BMP characters), every other character
        # \\u-escaped
        text = _keep_escapes(json.dumps(s, ensure_ascii=True)[1:-1])
    else:
        text = json.dumps(s, ensure_ascii=style.strings == "ascii")[1:-1]
    if style.slash:
        text = text.replace("/", "\\/")
    return '"' + text + '"'


def _keep_escapes(out: str) -> str:
    """``out`` (json's escaped text) with every character outside an escape \\u-escaped."""
    parts, i = [], 0
    while i < len(out):
        if out[i] == "\\":
            n = 6 if out[i + 1] == "u" else 2
            parts.append(out[i : i + n])
            i += n
        else:
            parts.append(f"\\u{ord(out[i]):04x}")
            i += 1
    return "".join(parts)


def _float(x: float, style: Style) -> str:
    if style.floats == "repr" or x == 0 or not math.isfinite(x):
        return repr(x)
    if style.floats == "upper":
        return f"{x:E}"
    text = format(Decimal(repr(x)), "f")  # the shortest digits, without exponent
    return text if "." in text else text + ".0"


def write(v: Any, style: Style) -> str:
    """``v`` as JSON text in ``style``; a dict given as a list of pairs may repeat a key."""
    if isinstance(v, Raw):
        return str(v)
    if v is None or isinstance(v, bool):
        return json.dumps(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _float(v, style)
    if isinstance(v, str):
        return _string(v, style)
    if isinstance(v, dict):
        v = Pairs(v.items())
    if isinstance(v, Pairs):
        body = style.comma.join(_string(k, style) + style.colon + write(x, style) for k, x in v)
        return "{" + style.inner + body + style.inner + "}"
    body = style.comma.join(write(x, style) for x in v)
    return "[" + style.inner + body + style.inner + "]"


class Pairs(list):  # type: ignore[type-arg]
    """A JSON object as its list of pairs (a key may repeat)."""


#: Breaks a cheap check could miss, each kept small: the row stays almost valid.
BREAKS = [
    "none", "none", "none", "bool_in_ids", "bool_in_ids", "bool_in_mask", "sum_plus",
    "sum_minus", "resp_is_seq_len", "dup_key", "int_as_float", "id_as_float", "prompt_zero",
]  # fmt: skip


@st.composite
def lines(draw: st.DrawFn) -> bytes:
    row = draw(valid_rows())
    n = row["seq_len"]
    if draw(st.integers(0, 4)) == 0:  # now and then a longer row
        reps = draw(st.integers(2, 60))
        for k in ("input_ids", "loss_mask"):
            row[k] = row[k] * reps
        row["seq_len"] = n = n * reps
        row["n_response_tokens"] = n - row["n_prompt_tokens"]
    brk = draw(st.sampled_from(BREAKS))
    at = draw(st.integers(0, n - 1))
    flag = Raw(draw(st.sampled_from(["true", "false"])))
    if brk == "bool_in_ids":
        row["input_ids"] = [*row["input_ids"][:at], flag, *row["input_ids"][at + 1 :]]
    if brk == "bool_in_mask":
        row["loss_mask"] = [*row["loss_mask"][:at], flag, *row["loss_mask"][at + 1 :]]
    if draw(st.booleans()):  # a float orjson writes with an exponent (the style may not)
        row["x"] = draw(st.sampled_from([1e-7, 2.5e-12, 1e22, -3e-300, 0.0000123]))
    if brk == "sum_plus":
        row["n_response_tokens"] += draw(st.integers(1, 100))
    if brk == "sum_minus":
        row["n_response_tokens"] -= 1
    if brk == "resp_is_seq_len":
        row["n_response_tokens"] = n
    if brk == "int_as_float":
        k = draw(st.sampled_from(["seq_len", "n_prompt_tokens", "n_response_tokens"]))
        row[k] = Raw(draw(st.sampled_from([f"{row[k]}.0", f"{row[k]}e0", f"{row[k]}E+0"])))
    if brk == "id_as_float":
        v = row["input_ids"][at]
        spelled = Raw(draw(st.sampled_from([f"{v}.0", f"{v}e0", f"{v}0e-1"])))
        row["input_ids"] = [*row["input_ids"][:at], spelled, *row["input_ids"][at + 1 :]]
    if brk == "prompt_zero":
        row["n_prompt_tokens"] = 0
    pairs = Pairs(row.items())
    if brk == "dup_key":
        k = draw(st.sampled_from(sorted(row)))
        pairs.insert(draw(st.integers(0, len(pairs))), (k, row[k]))
    style = draw(styles)
    return (style.inner + write(pairs, style) + style.inner).encode()


def _oracle(raw: bytes) -> Any:
    return oracle_line(raw, DEFAULT_MAX_LINE_BYTES)


@SETTINGS
@given(raw=lines(), short=st.booleans())
def test_fast_and_full_parse_agree_with_the_oracle(raw: bytes, short: bool) -> None:
    """The same bytes to both readers (both paths of the fast one) and to the oracle."""
    want = _oracle(raw)
    assert want is not None  # no blank line is written
    try:
        row = parse_row(raw, shard="s.jsonl", line=7, offset=11)
    except DataError as exc:
        assert want == "bad", (raw, exc)
    else:
        assert want != "bad", (raw, row_tuple(row))
        assert row_tuple(row) == as_tuple(want)
    old = fastrow.SHORT_LINE
    fastrow.SHORT_LINE = 1 << 40 if short else 0  # parsed whole / checked as bytes
    try:
        agree(raw)  # read_row == parse_row: verdict, reason, message, values, for every limit
    finally:
        fastrow.SHORT_LINE = old


def test_the_writer_spells_what_json_reads() -> None:
    """The test's own writer: every style gives the value json reads back."""
    value = {"s": 'a/é\n"\\ \U0001f600', "f": [1e-7, 0.5, 1e22], "i": [0, 7], "b": [True]}
    for strings in ("plain", "ascii", "all"):
        for floats in ("repr", "plain", "upper"):
            style = Style(", ", " : ", "\t", strings, True, floats)
            text = write(value, style)
            assert json.loads(text) == value, text
    plain = Style(",", ":", "", "all", False, "plain")
    assert write([1e-7, "/a"], plain) == '[0.0000001,"\\u002f\\u0061"]'
    assert write([1e-7, "/"], Style(",", ":", "", "plain", True, "upper")) == '[1.000000E-07,"\\/"]'


# --------------------------------------------------------------------------------------------
# the same verdicts wherever the pass runs: one process, worker processes, byte ranges, URLs
# (and Ray, tests/test_engine.py), plain and compressed
# --------------------------------------------------------------------------------------------


def contract_corpus(root: Path, tokenizer: Any) -> tuple[Path, dict[str, int]]:
    """Two sources over a plain and a zstd shard, with rows that break the contract quietly
    and rows that fail the marker check; returns the folder and the skips expected."""
    from factories import chat_rows

    rows = chat_rows(tokenizer, "chat", 40) + chat_rows(tokenizer, "code", 20)
    lines = [orjson.dumps(r) for r in rows]
    sum_off = dict(rows[3], n_response_tokens=rows[3]["n_response_tokens"] + 1)
    flagged = dict(rows[5], input_ids=[*rows[5]["input_ids"][:-1], True], x=1e-7)
    cut = dict(rows[7], n_prompt_tokens=2, n_response_tokens=rows[7]["seq_len"] - 2)
    one = {"input_ids": [9], "loss_mask": [0], "seq_len": 1, "n_prompt_tokens": 1,
           "n_response_tokens": 0, "source": "code"}  # fmt: skip
    lines[3] = orjson.dumps(sum_off)
    lines[5] = orjson.dumps(flagged).replace(b"1e-7", b"0.0000001")
    lines[7] = orjson.dumps(cut)  # the generation prompt cut off: a row problem
    lines.insert(50, orjson.dumps(one))  # the start marker missing: a row problem
    data = root / "data"
    write_lines(data / "a.jsonl", lines[:30])
    write_lines(data / "b.jsonl.zst", lines[30:])
    expected = {
        "length_sum_mismatch": 1,
        "bad_input_ids": 1,
        "generation_prompt_missing": 1,
        "template_start_missing": 1,
    }
    return data, expected


def write_lines(path: Path, lines: list[bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = b"\n".join(lines) + b"\n"
    if path.name.endswith(".zst"):
        text = zstandard.ZstdCompressor().compress(text)
    path.write_bytes(text)


def scan_options(tokenizer: Any) -> dict[str, Any]:
    """``scan``'s options for :func:`contract_corpus`: skipping, with the tokenizer's checks."""
    from distprompt.recover.checks import prepare_checks

    checks = prepare_checks(tokenizer, len(tokenizer))
    return {
        "max_candidates": 8,
        "on_error": "skip",
        "vocab_size": checks.vocab_size,
        "check": checks.row_check,
    }


def partial_view(part: Any) -> Any:
    """What a pass's partial says, held rows included, in comparable form."""
    if part is None:
        return None
    pools = {
        s: [(c.key, c.provenance, c.count) for c in p.candidates()] for s, p in part.pools.items()
    }
    return (part.stats, pools, part.tally, part.shard_rows, part.settled, partial_view(part.held))


def test_every_way_of_running_the_pass_gives_the_same_verdicts(
    tmp_path: Path, qwen_tokenizer: Any
) -> None:
    from distprompt.engine import Schedule
    from distprompt.read.scan import scan
    from distprompt.read.shards import discover_shards
    from distprompt.recover.checks import settle_rows

    data, expected = contract_corpus(tmp_path, qwen_tokenizer)
    shards = discover_shards(data)
    kw = scan_options(qwen_tokenizer)
    parts = [
        scan(shards, **kw),
        scan(shards, schedule=Schedule(workers=2), **kw),
        scan(
            shards, schedule=Schedule(workers=2, unit_bytes=2048), **kw
        ),  # the plain shard in byte ranges
        scan(discover_shards(data.as_uri()), **kw),  # as URLs, read through fsspec
    ]
    views = [partial_view(p) for p in parts]
    assert all(v == views[0] for v in views[1:])
    for part in parts:
        assert part.held is not None and sum(st_.rows for st_ in part.held.stats.values()) == 2
        settle_rows(part)
        assert part.settled == "set_aside"
        assert dict(part.tally.skipped) == expected
        assert sum(st_.rows for st_ in part.stats.values()) == 61 - 4
    assert parts[0].tally.first_skip == {
        "bad_input_ids": "a.jsonl:6",
        "generation_prompt_missing": "a.jsonl:8",
        "length_sum_mismatch": "a.jsonl:4",
        "template_start_missing": "b.jsonl.zst:21",
    }
