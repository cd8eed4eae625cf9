"""The pass's fast reader (:func:`distprompt.read.fastrow.read_row`) against the plain full parser
(:func:`distprompt.read.validate.parse_row`): the same verdict, reason and ``shard:line`` on every
line — the table of ``test_validate`` and the random corruptions of ``test_fuzz`` — and the
same values on every valid row; and the pass split into byte ranges and workers gives the same
result as one whole read.

Both of the fast reader's paths run: short lines are parsed whole, long ones checked as bytes;
``SHORT_LINE`` is set to 0 (every line checked as bytes) and to a huge value (every line parsed)
in turn.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distprompt.engine import Schedule
from distprompt.errors import DataError
from distprompt.read import fastrow
from distprompt.read.fastrow import FullView, read_row
from distprompt.read.scan import scan
from distprompt.read.shards import discover_shards, iter_rows
from distprompt.read.tally import Tally
from distprompt.read.validate import parse_row
from distprompt.records import Shard
from test_fuzz import EXAMPLES, REQUIRED, serialize, shards, valid_rows
from test_validate import LINES

from factories import random_row

LIMITS = (None, 2, 1000, 1400, 1450, 151669, 10**18, 2**63)
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(params=["bytes", "whole"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(fastrow, "SHORT_LINE", 0 if request.param == "bytes" else 1 << 40)
    return str(request.param)


def _verdict(fn: Any, raw: bytes | None, **kw: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(raw, shard="s.jsonl", line=7, offset=11, **kw)
    except DataError as exc:
        return "bad", (exc.reason, exc.shard, exc.line, str(exc))


def agree(raw: bytes | None) -> None:
    """read_row and parse_row agree on one line, for every id limit."""
    want, ref = _verdict(parse_row, raw)
    for limit in LIMITS:
        got, view = _verdict(read_row, raw, id_limit=limit)
        assert got == want, (raw, got, view, ref)
        if want == "bad":
            assert view == ref
            continue
        full = FullView(ref)
        assert (view.source, view.seq_len, view.n_prompt_tokens, view.n_response_tokens) == (
            full.source,
            full.seq_len,
            full.n_prompt_tokens,
            full.n_response_tokens,
        )
        assert view.provenance == full.provenance
        assert view.trained_turns == full.trained_turns
        assert view.prompt_ids.dtype == np.int64
        assert view.prompt_ids.tolist() == full.prompt_ids.tolist()
        assert view.prompt_mask().dtype == np.int8
        assert view.prompt_mask().tolist() == full.prompt_mask().tolist()
        assert view.first_response_span() == full.first_response_span()
        start, end = view.first_response_span()
        assert view.ids(start, end).tolist() == full.ids(start, end).tolist()
        assert view.ids(0, full.seq_len).tolist() == ref.input_ids.tolist()
        for other in LIMITS:
            if other is not None:
                assert view.top_id(other) == full.top_id(other), (limit, other)


@pytest.mark.parametrize("raw", [c[1] for c in LINES], ids=[c[0] for c in LINES])
def test_bad_input_cases(path: str, raw: bytes) -> None:
    agree(raw)


def test_line_too_long(path: str) -> None:
    agree(None)


EDGE_LINES = [
    # a nested "input_ids" key: the top-level one is the one read
    json.dumps({**random_row(5, 2), "meta": {"input_ids": [9, 9]}}).encode(),
    json.dumps({"meta": {"loss_mask": [1]}, **random_row(5, 2)}).encode(),
    # the key inside a string
    json.dumps({**random_row(5, 2), "note": 'say "input_ids": [1]'}).encode(),
    # spaced separators, tabs, a leading zero, -0, an exponent, a huge id
    json.dumps(random_row(6, 3)).encode(),
    b'{"input_ids":[1,\t2],"loss_mask":[0,1],"seq_len":2,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s"}',
    b'{"input_ids":[01,2],"loss_mask":[0,1],"seq_len":2,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s"}',
    b'{"input_ids":[1,02],"loss_mask":[0,1],"seq_len":2,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s"}',
    b'{"input_ids":[-0,2],"loss_mask":[0,1],"seq_len":2,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s"}',
    b'{"input_ids":[1e2,2],"loss_mask":[0,1],"seq_len":2,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s"}',
    b'{"input_ids":[0,2],"loss_mask":[0,-0],"seq_len":2,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s"}',
    b'{"input_ids":[0,2],"loss_mask":[0,1 ],"seq_len":2,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s"}',
    b'{"input_ids":[0,2],"loss_mask":[0,,1],"seq_len":3,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s"}',
    b'{"input_ids":[0,,2],"loss_mask":[0,1,1],"seq_len":3,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s"}',
    b'{"input_ids":[9223372036854775808,2],"loss_mask":[0,1],"seq_len":2,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s"}',
    b'{"input_ids":[9223372036854775807,2],"loss_mask":[0,1],"seq_len":2,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s"}',
    b'{"input_ids":[999999999999999999,2],"loss_mask":[0,1],"seq_len":2,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s"}',
    b'{"input_ids":[151669,151668],"loss_mask":[0,1],"seq_len":2,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s"}',
    b'{"loss_mask":[0,1],"input_ids":[151668,1516680],"seq_len":2,"n_prompt_tokens":2,'
    b'"n_response_tokens":0,"source":"s"}',
    b'{"input_ids":[1,2],"loss_mask":[0,1],"seq_len":2,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s","input_ids":[3,4]}',
    b'{"input_ids":[1,2],"loss_mask":[0,1],"seq_len":2,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s","input\\u005fids":[3,4]}',
    b'{"input_ids":[1,2],"loss_mask":[0,1],"seq_len":2,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s","loss_mask":[1,1]}',
    b'{"input_ids":[1,2],"loss_mask":[0,1],"seq_len":2,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s","seq_len":2}',
    b'{"input_ids":[1,2]"loss_mask":[0,1],"seq_len":2,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s"}',
    b'{"input_ids":[1,2],"loss_mask":[0,1],"seq_len":2,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s"',
    b'{"input_ids":[[1,2]],"loss_mask":[0,1],"seq_len":2,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s"}',
    b'{"input_ids":[1,2],"loss_mask":[0,1],"seq_len":2,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s", "x": "]"}',
    b'{"input_ids":[1,2],"loss_mask":[2,1],"seq_len":2,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s"}',
    b'{"input_ids":[1,2],"loss_mask":[0,1],"seq_len":2,"n_prompt_tokens":1,'
    b'"n_response_tokens":1,"source":"s"}',
    b'{"input_ids" : [1,2] , "loss_mask" :[1, 1],"seq_len":2,"n_prompt_tokens":2,'
    b'"n_response_tokens":0,"source":"s"}',
    b'{"input_ids":[5],"loss_mask":[1],"seq_len":1,"n_prompt_tokens":1,'
    b'"n_response_tokens":0,"source":"s"}',
    json.dumps(random_row(3000, 700, seed=1), separators=(",", ":")).encode(),
    json.dumps(random_row(3000, 3000, seed=2), separators=(",", ":")).encode(),
    json.dumps(random_row(3000, 1, seed=3)).encode(),
    # input_ids separated by ", " (json.dumps): checked on a copy without the spaces, so every
    # other use of spaces must still be rejected or sent to the full parser
    json.dumps(random_row(3000, 700, seed=4), separators=(", ", ":")).encode(),
    json.dumps({**random_row(2000, 2000, seed=5), "input_ids": [151669] * 2000}).encode(),
    json.dumps({**random_row(2000, 9, seed=6), "input_ids": [7] * 1999 + [151668]}).encode(),
    *[
        b'{"input_ids": [' + body + b'], "loss_mask": [0, 1, 1], "seq_len": 3, '
        b'"n_prompt_tokens": 2, "n_response_tokens": 1, "source": "s"}'
        for body in (
            b"1, 2, 3",
            b"1,  2, 3",
            b"1 , 2, 3",
            b"1,2, 3",
            b" 1, 2, 3",
            b"1, 2, 3 ",
            b"1, 2,\t3",
            b"1, , 3",
            b"1, 02, 3",
            b"1, -2, 3",
            b"1, 2, 3, 4",
            b"1, 2",
            b"1, 2.0, 3",
            b"1, 2e0, 3",
            b"1, 2, 99999999999999999999",
            # the ", " structure: a stray separator byte that the counts alone would let
            # through (a comma just before the last digit, a space inside a number) ...
            b"1, 2 ,3",
            b"1, 2 3,4",
            b"1,  2,3",
            b"1, 2,, 3",
            b"1, 2!3 ,4",
            b"1, 2, 3\x00",
            # ... and leading zeros after either separator
            b"1, 0, 05",
            b"0, 1,05",
        )
    ],
]


@pytest.mark.parametrize("raw", EDGE_LINES)
def test_edge_lines(path: str, raw: bytes) -> None:
    agree(raw)


@pytest.mark.slow  # hypothesis, DISTPROMPT_FUZZ_EXAMPLES cases (~7 s at the default)
@FUZZ
@given(case=shards(whole=True), short=st.booleans())
def test_random_corruptions(case: tuple[bytes, str, bytes | None, int], short: bool) -> None:
    """Every line of a randomly damaged shard: the same verdict and values."""
    text = case[0]
    old = fastrow.SHORT_LINE
    fastrow.SHORT_LINE = 1 << 40 if short else 0
    try:
        for line in text.split(b"\n"):
            if line.startswith(b"\xef\xbb\xbf"):
                line = line[3:]
            line = line.rstrip(b"\r")
            if line and not line.isspace():
                agree(line)
    finally:
        fastrow.SHORT_LINE = old


@settings(max_examples=max(20, EXAMPLES // 4), deadline=None)
@given(row=valid_rows(), style=st.sampled_from(["orjson", "ascii", "utf8"]), data=st.data())
def test_long_rows(row: dict[str, Any], style: str, data: st.DataObject) -> None:
    """Rows grown past the byte-check threshold, with one element damaged now and then."""
    reps = data.draw(st.integers(1, 400))
    for k in ("input_ids", "loss_mask"):
        row[k] = row[k] * reps
    row["seq_len"] *= reps
    if data.draw(st.booleans()):
        k = data.draw(st.sampled_from(["input_ids", "loss_mask"]))
        row[k][data.draw(st.integers(0, len(row[k]) - 1))] = data.draw(
            st.sampled_from([2, -1, True, 1.0, 10**19, 151669, 0, 1, "1", None])
        )
    if data.draw(st.booleans()):
        row[data.draw(st.sampled_from(REQUIRED))] = data.draw(
            st.sampled_from([0, -1, 1, "x", None, [], 10**6])
        )
    agree(serialize(row, style))


def _partial_view(part: Any) -> Any:
    pools = {
        s: [
            (
                c.key,
                c.provenance,
                c.count,
                c.feature_ids.tolist(),
                c.n_prompt_tokens,
                c.first_response_length,
                c.n_response_tokens,
            )
            for c in pool.candidates()
        ]
        for s, pool in part.pools.items()
    }
    stats = {
        s: (st_.rows, st_.prompt_lengths, st_.trained_turns, st_.flags)
        for s, st_ in part.stats.items()
    }
    return (
        pools,
        stats,
        {s: p.distinct() for s, p in part.pools.items()},
        dict(part.tally.skipped),
        dict(part.tally.first_skip),
        dict(part.tally.anomalies),
        dict(part.tally.first_anomaly),
        part.shard_rows,
    )


def _shard(folder: str, lines: list[bytes], name: str = "a.jsonl") -> Shard:
    path = Path(folder) / name
    path.write_bytes(b"\n".join(lines) + b"\n")
    return Shard(path=path, name=name, size=path.stat().st_size)


@pytest.mark.slow  # hypothesis over byte ranges and workers (~6 s)
@FUZZ
@given(case=shards(whole=True), unit=st.integers(1, 400), k=st.integers(1, 6))
def test_units_merge_exactly(case: tuple[bytes, str, bytes | None, int], unit: int, k: int) -> None:
    """A shard read in byte ranges of any size merges to the same result as one read,
    errors included: the same first bad row (shard:line) in raise mode."""
    text = case[0]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "a.jsonl"
        path.write_bytes(text)
        shard = Shard(path=path, name="a.jsonl", size=path.stat().st_size)
        kw: dict[str, Any] = {"max_candidates": k, "on_error": "skip", "vocab_size": 1450}
        whole = scan([shard], **kw)
        split = scan([shard], schedule=Schedule(unit_bytes=unit), **kw)
        assert _partial_view(split) == _partial_view(whole)
        errors = []
        for ub in (None, unit):
            try:
                scan([shard], max_candidates=k, vocab_size=1450, schedule=Schedule(unit_bytes=ub))
                errors.append(None)
            except Exception as exc:  # the same error, with the same line, either way
                errors.append((type(exc).__name__, str(exc)))
        assert errors[0] == errors[1]


def test_workers_give_identical_results(tmp_path: Path) -> None:
    rows = [json.dumps(random_row(50 + i % 37, 10 + i % 11, seed=i)).encode() for i in range(400)]
    rows[123] = b"not json"
    rows[300] = b""
    for i in range(0, 400, 50):
        rows.insert(i, rows[i + 1])  # duplicates across ranges
    _shard(str(tmp_path), rows)
    shards_ = discover_shards(tmp_path)
    kw: dict[str, Any] = {"max_candidates": 50, "on_error": "skip", "vocab_size": 151000}
    one = _partial_view(scan(shards_, **kw))
    assert _partial_view(scan(shards_, schedule=Schedule(workers=2, unit_bytes=4096), **kw)) == one
    assert (
        _partial_view(scan(shards_, schedule=Schedule(workers=2, unit_bytes=1 << 20), **kw)) == one
    )
    assert one[4]["invalid_json"] == "a.jsonl:" + str(1 + 123 + 3)


def test_iter_rows_fast_equals_full(tmp_path: Path) -> None:
    """iter_rows with either parser: the same rows, skips and first shard:line."""
    lines = [c[1] for c in LINES] + EDGE_LINES + [serialize(random_row(40, 5), "orjson")] * 3
    shard = _shard(str(tmp_path), lines)
    out = []
    for parse in (parse_row, read_row):
        tally = Tally(on_error="skip")
        rows = list(iter_rows(shard, tally=tally, parse=parse))
        out.append(([(r.provenance, r.prompt_ids.tolist()) for r in rows], tally))
    assert out[0] == out[1]


def test_selected_candidates_are_read_back(tmp_path: Path) -> None:
    """Pools of plain shards hold windows only; load_candidates reads the rest back by offset,
    and refuses a shard that changed since the pass."""
    from distprompt.errors import InputError
    from distprompt.read.readback import load_candidates

    rows = [json.dumps(random_row(900 + i, 600 + i, seed=i)).encode() for i in range(5)]
    shard = _shard(str(tmp_path), rows)
    part = scan([shard], max_candidates=10)
    cands = part.pools["s"].candidates()
    assert all(not c.loaded and c.window is not None for c in cands)
    full = load_candidates(cands, [shard])
    for c in full:
        r = json.loads(rows[c.provenance.line - 1])
        n = r["n_prompt_tokens"]
        assert c.prompt_ids is not None and c.prompt_ids.tolist() == r["input_ids"][:n]
        assert c.prompt_mask is not None and c.prompt_mask.tolist() == r["loss_mask"][:n]
        assert c.response_ids is not None and len(c.response_ids) == c.first_response_length
    shard.path.write_bytes(b"\n".join(reversed(rows)) + b"\n")
    with pytest.raises(InputError, match="changed"):
        load_candidates(cands, [shard])


def test_read_back_gives_the_full_parse_values(tmp_path: Path) -> None:
    """load_candidates reads rows back with the pass's reader: the values (and dtypes) of a
    full parse, for long and short rows of either spelling, rows the byte checks hand to the
    full parser, and rows with nothing trained after the prompt; a row that is no longer the
    one the pass read is refused with the shard:line and the offset."""
    from distprompt.errors import InputError
    from distprompt.read.pools import compact_ids as _compact
    from distprompt.read.readback import load_candidates

    rows = [random_row(3000 + 7 * i, 40 + 300 * i, seed=i) for i in range(6)]
    rows += [random_row(30 + i, 10 + i, seed=50 + i) for i in range(4)]
    untrained = random_row(2500, 600, seed=70)
    untrained["loss_mask"] = [0] * untrained["seq_len"]
    rows.append(untrained)
    lines = [
        json.dumps(r).encode() if i % 2 else serialize(r, "orjson") for i, r in enumerate(rows)
    ]
    # separators of both kinds in one body: valid JSON the byte checks hand to the full parser
    mixed = serialize(random_row(2600, 300, seed=80), "orjson")
    lines.append(mixed.replace(b",", b", ", 1))
    shard = _shard(str(tmp_path), lines)
    part = scan([shard], max_candidates=100, sample=0)
    cands = [c for pool in part.pools.values() for c in pool.candidates()]
    assert len(cands) == len(lines)
    got = load_candidates(cands, [shard])
    for c in got:
        p = c.provenance
        full = FullView(parse_row(lines[p.line - 1], shard=p.shard, line=p.line, offset=p.offset))
        start, end = full.first_response_span()
        for have, want in (
            (c.prompt_ids, _compact(full.prompt_ids)),
            (c.prompt_mask, full.prompt_mask()),
            (c.response_ids, _compact(full.ids(start, end))),
        ):
            assert have is not None and have.dtype == want.dtype
            assert have.tolist() == want.tolist()
    assert {type(read_row(raw, shard="a", line=1, offset=0)) for raw in lines} == {
        fastrow.LineView,
        fastrow.ListView,
        FullView,
    }
    shard.path.write_bytes(b"\n".join([lines[1], lines[0], *lines[2:]]) + b"\n")
    first = next(c for c in cands if c.provenance.line == 1)
    with pytest.raises(InputError) as err:
        load_candidates([first], [shard])
    assert str(err.value) == (
        "a.jsonl:1: expected the row read before at byte 0, found another; the shard changed "
        "during the run — run again"
    )


@pytest.mark.parametrize("seps", [(",", ":"), (", ", ": "), (", ", ":"), (",", ": ")])
def test_both_spellings_take_the_byte_checks(seps: tuple[str, str]) -> None:
    """orjson's compact lines and json.dumps's ``", "`` lines are both read by the byte checks
    (not handed to the full parser), with the full parser's values."""
    raw = json.dumps(random_row(3000, 700, seed=9), separators=seps).encode()
    assert len(raw) > fastrow.SHORT_LINE
    view = read_row(raw, shard="s.jsonl", line=1, offset=0, id_limit=160000)
    assert isinstance(view, fastrow.LineView)
    agree(raw)


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".jsonl.zst"])
def test_compressed_candidates_are_read_back(tmp_path: Path, suffix: str) -> None:
    """Pools of compressed shards hold windows only too; load_candidates reads the selected
    rows back in one pass over the stream (a stream cannot be seeked), stopping at the last."""
    from distprompt.read.readback import load_candidates

    from factories import write_shard

    rows = [random_row(900 + i, 600 + i, seed=i) for i in range(6)]
    write_shard(tmp_path / "s" / f"a{suffix}", rows)
    found = discover_shards(tmp_path)
    part = scan(found, max_candidates=10)
    cands = part.pools["s"].candidates()
    assert all(not c.loaded and c.window is not None for c in cands)
    some = [c for c in cands if c.provenance.line in (2, 5)]
    full = load_candidates(some, found)
    assert sorted(c.provenance.line for c in full) == [2, 5]
    for c in full:
        r = rows[c.provenance.line - 1]
        n = r["n_prompt_tokens"]
        assert c.prompt_ids is not None and c.prompt_ids.tolist() == r["input_ids"][:n]
        assert c.prompt_mask is not None and c.prompt_mask.tolist() == r["loss_mask"][:n]
        assert c.response_ids is not None and len(c.response_ids) == c.first_response_length


def _row_line(ids: bytes, mask: bytes, seq_len: int, n_prompt: int = 1) -> bytes:
    return (
        b'{"input_ids": ['
        + ids
        + b'], "loss_mask": ['
        + mask
        + b'], "seq_len": '
        + str(seq_len).encode()
        + b', "n_prompt_tokens": '
        + str(n_prompt).encode()
        + b', "n_response_tokens": '
        + str(seq_len - n_prompt).encode()
        + b', "source": "s"}'
    )


def _boundary_lines() -> list[bytes]:
    """Lines at the edges of the byte checks' shortcuts: long numbers at every alignment (the
    8-byte blocks of the run check, its tail), numbers of exactly a limit's length around
    the limit, and mask bodies with the bytes one off from ``","`` and ``" "``."""
    out = []
    for sep in (b",", b", "):
        for long in (10**14, 10**15 - 1, 10**17, 10**18 - 1, 10**18, 10**18 + 1, 2**63 - 1, 2**63):
            for before in range(10):
                ids = [3] * before + [long] + [5] * (before % 3)
                body = sep.join(str(i).encode() for i in ids)
                mask = sep.join(b"1" for _ in ids)
                out.append(_row_line(body, mask, len(ids), n_prompt=len(ids)))
        for limit in (1000, 1400, 1450, 151669, 10**17):
            for near in (limit - 1, limit, limit + 1, limit * 10 - 1):
                ids = [7, near, 1] if near % 2 else [near, 9, 10, 0]
                body = sep.join(str(i).encode() for i in ids)
                mask = sep.join(b"0" for _ in ids)
                out.append(_row_line(body, mask, len(ids), n_prompt=len(ids)))
    for mask in (
        b"0, 1, 1",
        b"0- 1, 1",
        b"0,!1, 1",
        b"0, 1,!1",
        b"1, 1- 1",
        b"0, 1, 2",
        b"0, 1, /",
        b"0,  1,1",
        b"0,1,1",
        b"0,1-1",
        b"0,1,\x00",
        b"0.1,1",
    ):
        out.append(_row_line(b"1, 2, 3", mask, 3))
    for ids in (
        b"0, 1, 00",
        b"0, 0, 0",
        b"10, 0, 01",
        b"00, 1, 2",
        b"0,0,0",
        b"1,00,2",
        b"1,0,02",
        # another byte below "0" where a comma should be
        b"1,2!3",
        b"1,2\t3",
        b"1+2,3",
        b"1,2\x003",
        b'1,2"3',
    ):
        out.append(_row_line(ids, b"0, 1, 1", 3))
    return out


BOUNDARY_LINES = _boundary_lines()


@pytest.mark.parametrize("raw", BOUNDARY_LINES)
def test_boundary_lines(path: str, raw: bytes) -> None:
    agree(raw)


def test_fresh_buffers_for_huge_bodies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bodies over the kept buffers' bound get fresh temporaries: the same verdicts."""
    monkeypatch.setattr(fastrow, "SHORT_LINE", 0)
    monkeypatch.setattr(fastrow, "SCRATCH_MAX", 8)
    for raw in [*EDGE_LINES, *BOUNDARY_LINES]:
        agree(raw)


def test_buffers_reused_across_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long valid row, then damaged shorter ones, then the long one again: what a row
    leaves in the kept buffers never decides the next row."""
    monkeypatch.setattr(fastrow, "SHORT_LINE", 0)
    big = json.dumps(random_row(5000, 900, seed=11)).encode()
    lines = [big, *BOUNDARY_LINES, big, *[c[1] for c in LINES], big]
    for raw in lines:
        agree(raw)


def test_scratch_is_per_thread() -> None:
    """Threads reading rows at once each get their own buffers."""
    from concurrent.futures import ThreadPoolExecutor

    rows = [json.dumps(random_row(2000 + 97 * i, 300, seed=i)).encode() for i in range(8)]
    want = [parse_row(r, shard="s", line=1, offset=0).prompt_ids.tolist() for r in rows]

    def read_all(k: int) -> list[list[int]]:
        return [
            read_row(rows[(k + j) % 8], shard="s", line=1, offset=0).prompt_ids.tolist()
            for j in range(40)
        ]

    with ThreadPoolExecutor(4) as pool:
        for k, got in enumerate(pool.map(read_all, range(8))):
            assert got == [want[(k + j) % 8] for j in range(40)]
