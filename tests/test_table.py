"""Parquet and Arrow shards (read/table.py): the same rows, verdicts and provenance as JSONL."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distprompt.cli import main
from distprompt.errors import CorruptStreamError, DataError, InputError
from distprompt.read import table as table_module
from distprompt.read.fastrow import read_row
from distprompt.read.shards import find_shards, iter_rows, lines_at, rows_at
from distprompt.read.tally import Tally
from distprompt.records import Shard

from conftest import SAMPLES_DIR
from factories import as_row, lines_of, make_row, random_row

SCHEMA = pa.schema(
    [
        ("input_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("seq_len", pa.int64()),
        ("n_prompt_tokens", pa.int64()),
        ("n_response_tokens", pa.int64()),
        ("source", pa.string()),
    ]
)


def write_parquet(
    path: Path, rows: Sequence[dict[str, Any]], *, schema: pa.Schema | None = SCHEMA, **kw: Any
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(list(rows), schema=schema), path, **kw)
    return path


def shard(path: Path) -> Shard:
    return Shard(path=path, name=path.name, size=path.stat().st_size)


def outcome(sh: Shard, *, skip: bool = False) -> tuple[list[tuple[Any, ...]], Any]:
    """Each row the pass's reader yields (its figures, provenance line) and the tally."""
    tally = Tally(on_error="skip" if skip else "raise")
    got = [
        (
            r.source,
            r.seq_len,
            r.n_prompt_tokens,
            r.prompt_ids.tolist(),
            r.trained_turns,
            r.first_response_span(),
            r.prompt_mask().tolist(),
            r.ids(0, r.seq_len).tolist(),
            r.top_id(0),
            r.provenance.line,
        )
        for r in iter_rows(sh, tally=tally, parse=read_row)
    ]
    return got, tally


def test_parquet_rows_equal_jsonl_rows(tmp_path: Path) -> None:
    rows = [make_row(i) for i in range(30)] + [random_row(300, 40, seed=s) for s in range(5)]
    jl = tmp_path / "a.jsonl"
    jl.write_bytes(lines_of(rows))
    pqf = write_parquet(tmp_path / "a.parquet", rows, row_group_size=7)
    want, _ = outcome(shard(jl))
    got, _ = outcome(shard(pqf))
    assert got == want
    # provenance: line = row number, offset = row index, and the row reads back by it
    views = list(iter_rows(shard(pqf), parse=read_row))
    offsets = [v.provenance.offset for v in views]
    assert offsets == list(range(len(rows)))
    assert [v.provenance.line for v in views] == [o + 1 for o in offsets]
    back = lines_at(shard(pqf), [33, 2, 17])
    assert [orjson.loads(b) for b in back if b is not None] == [rows[33], rows[2], rows[17]]


@settings(max_examples=40, deadline=None)
@given(
    masks=st.lists(st.lists(st.integers(0, 1), min_size=2, max_size=30), min_size=1, max_size=12),
    data=st.data(),
)
def test_table_view_equals_line_view(
    tmp_path_factory: pytest.TempPathFactory, masks: list[list[int]], data: st.DataObject
) -> None:
    rows = []
    for i, m in enumerate(masks):
        p = data.draw(st.integers(1, len(m)))
        ids = data.draw(st.lists(st.integers(0, 2**31 - 1), min_size=len(m), max_size=len(m)))
        rows.append(as_row(ids, m, p, f"s{i % 3}"))
    d = tmp_path_factory.mktemp("views")
    (d / "a.jsonl").write_bytes(lines_of(rows))
    write_parquet(d / "a.parquet", rows, row_group_size=5)
    want = outcome(shard(d / "a.jsonl"))[0]
    assert outcome(shard(d / "a.parquet"))[0] == want
    # an Arrow stream of one record batch, read in slices of 3 rows (their values run on)
    with pa.OSFile(str(d / "a.arrow"), "wb") as sink:
        table = pa.Table.from_pylist(rows, schema=SCHEMA).combine_chunks()
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
    with mock.patch.object(table_module, "BATCH_ROWS", 3):
        assert outcome(shard(d / "a.arrow"))[0] == want


def _bad_rows() -> list[dict[str, Any]]:
    """One valid row, then one row per check the validator makes."""
    good = make_row(0)
    n = good["seq_len"]
    bad = [
        {**good, "seq_len": n + 1, "n_response_tokens": good["n_response_tokens"] + 1},
        {**good, "input_ids": [-1, *good["input_ids"][1:]]},
        {**good, "loss_mask": [2, *good["loss_mask"][1:]]},
        {**good, "n_prompt_tokens": 0, "n_response_tokens": n},
        {**good, "n_response_tokens": 1},
        {**good, "source": " "},
        {**good, "source": None},
        {**good, "input_ids": None},
        {**good, "loss_mask": good["loss_mask"][:-1]},
    ]
    return [good, *bad, make_row(1)]


def test_bad_rows_same_verdicts_as_jsonl(tmp_path: Path) -> None:
    rows = _bad_rows()
    jl = tmp_path / "a.jsonl"
    jl.write_bytes(lines_of(rows))
    pqf = write_parquet(tmp_path / "a.parquet", rows, row_group_size=4)
    want, wt = outcome(shard(jl), skip=True)
    got, gt = outcome(shard(pqf), skip=True)
    assert got == want and len(got) == 2
    assert gt.skipped == wt.skipped and sum(gt.skipped.values()) == len(rows) - 2
    assert {k: v.replace("a.parquet", "a.jsonl") for k, v in gt.first_skip.items()} == dict(
        wt.first_skip
    )
    # raised: the first bad row, named by file and row number, with the JSONL message
    with pytest.raises(DataError) as jexc:
        outcome(shard(jl))
    with pytest.raises(DataError) as pexc:
        outcome(shard(pqf))
    where = (pexc.value.shard, pexc.value.line, pexc.value.reason)
    assert where == ("a.parquet", 2, "seq_len_mismatch")
    assert str(pexc.value) == str(jexc.value).replace("a.jsonl", "a.parquet")


@pytest.mark.parametrize(
    ("column", "values", "reason"),
    [
        ("source", None, "missing_source"),
        ("input_ids", pa.array([[1.0, 2.0]] * 3, pa.list_(pa.float64())), "bad_input_ids"),
        ("seq_len", pa.array(["2"] * 3), "bad_seq_len"),
        ("loss_mask", pa.array([b"\x00\x01"] * 3), "bad_loss_mask"),
    ],
)
def test_missing_or_mistyped_columns(
    tmp_path: Path, column: str, values: pa.Array | None, reason: str
) -> None:
    rows = [as_row([5, 6], [0, 1], 1, "s")] * 3
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    i = table.schema.get_field_index(column)
    table = table.remove_column(i) if values is None else table.set_column(i, column, values)
    pq.write_table(table, tmp_path / "a.parquet")
    with pytest.raises(DataError) as exc:
        list(iter_rows(shard(tmp_path / "a.parquet"), parse=read_row))
    assert (exc.value.line, exc.value.reason) == (1, reason)
    assert str(exc.value).startswith("a.parquet:1: expected ")


def test_not_parquet_and_corrupt_row_group(tmp_path: Path) -> None:
    (tmp_path / "x.parquet").write_bytes(b"not a parquet file at all")
    with pytest.raises(InputError, match=r"^x.parquet: expected a Parquet file, found "):
        list(iter_rows(shard(tmp_path / "x.parquet"), parse=read_row))
    rows = [make_row(i) for i in range(40)]
    good = write_parquet(tmp_path / "g.parquet", rows, row_group_size=10, compression="zstd")
    meta = pq.ParquetFile(good).metadata
    col = meta.row_group(2).column(0)  # the third row group's input_ids: rows 21-30
    raw = bytearray(good.read_bytes())
    start = col.data_page_offset
    raw[start : start + col.total_compressed_size] = b"\xff" * col.total_compressed_size
    bad = tmp_path / "c.parquet"
    bad.write_bytes(bytes(raw))
    with pytest.raises(CorruptStreamError, match=r"^c.parquet:21: expected a complete, valid row"):
        list(iter_rows(shard(bad), parse=read_row))
    tally = Tally(on_error="skip")
    kept = list(iter_rows(shard(bad), tally=tally, parse=read_row))
    assert len(kept) == 20 and tally.skipped == {"corrupt_stream": 1}
    assert tally.first_skip["corrupt_stream"] == "c.parquet:21"


_INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
_INT_TYPES += [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]


@settings(max_examples=60, deadline=None)
@given(t=st.sampled_from(_INT_TYPES), data=st.data())
def test_ints_reads_the_array_as_to_pylist(t: pa.DataType, data: st.DataObject) -> None:
    bits = t.bit_width
    if pa.types.is_signed_integer(t):
        lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    else:
        lo, hi = 0, 2**bits - 1
    values = data.draw(st.lists(st.integers(lo, hi), max_size=20))
    arr = pa.array(values, t)
    start = data.draw(st.integers(0, len(values)))
    arr = arr.slice(start, data.draw(st.integers(0, len(values) - start)))
    assert table_module._ints(arr).tolist() == arr.to_pylist()


def test_other_integer_columns_read_as_jsonl(tmp_path: Path) -> None:
    """Any integer types: unsigned ids, a wide mask, narrow counts (the numpy views of
    their buffers)."""
    schema = pa.schema(
        [
            ("input_ids", pa.large_list(pa.uint32())),
            ("loss_mask", pa.list_(pa.int64())),
            ("seq_len", pa.int16()),
            ("n_prompt_tokens", pa.uint16()),
            ("n_response_tokens", pa.int32()),
            ("source", pa.large_string()),
        ]
    )
    rows = [make_row(i) for i in range(20)] + [random_row(200, 30, seed=s) for s in range(3)]
    jl = tmp_path / "a.jsonl"
    jl.write_bytes(lines_of(rows))
    pqf = write_parquet(tmp_path / "a.parquet", rows, schema=schema, row_group_size=6)
    assert outcome(shard(pqf))[0] == outcome(shard(jl))[0]


def test_reading_parquet_leaves_pandas_unimported(tmp_path: Path) -> None:
    """The pass and the read-back convert Arrow arrays without pyarrow's pandas shim (which
    imports pandas: memory and time in every worker, and an import race in threads)."""
    import subprocess
    import sys

    pqf = write_parquet(tmp_path / "a.parquet", [make_row(i) for i in range(30)])
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from distprompt.read.fastrow import read_row\n"
        "from distprompt.read.shards import iter_rows, rows_at\n"
        "from distprompt.records import Shard\n"
        f"p = Path({str(pqf)!r})\n"
        "s = Shard(path=p, name=p.name, size=p.stat().st_size)\n"
        "assert len(list(iter_rows(s, parse=read_row))) == 30\n"
        "assert all(r is not None and not isinstance(r, bytes) for r in rows_at(s, [3, 29]))\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_read_back_of_a_corrupt_row_group(tmp_path: Path) -> None:
    """The read-back names the first row of the row group that does not decode (not the row
    after the last one it decoded), and decodes no group that holds no row wanted."""
    rows = [make_row(i) for i in range(40)]
    good = write_parquet(tmp_path / "g.parquet", rows, row_group_size=10, compression="zstd")
    col = pq.ParquetFile(good).metadata.row_group(2).column(0)  # rows 21-30
    raw = bytearray(good.read_bytes())
    raw[col.data_page_offset : col.data_page_offset + col.total_compressed_size] = (
        b"\xff" * col.total_compressed_size
    )
    bad = tmp_path / "c.parquet"
    bad.write_bytes(bytes(raw))
    for read in (lines_at, rows_at):
        with pytest.raises(CorruptStreamError, match=r"^c.parquet:21: expected a complete, valid"):
            read(shard(bad), [25])
        with pytest.raises(CorruptStreamError, match=r"^c.parquet:21: "):
            read(shard(bad), [35, 3, 22])
    back = lines_at(shard(bad), [35, 3, 12])
    assert [orjson.loads(b or b"") for b in back] == [rows[35], rows[3], rows[12]]


def test_rows_read_back_as_the_pass_read_them(tmp_path: Path) -> None:
    """``rows_at`` gives each row of a table as the pass's reader does (a view straight from
    the Arrow buffers), a bad row as its JSON line (the same verdict from ``read_row``), and
    decodes a row group only up to the last row wanted in it."""
    rows = [random_row(60 + 7 * i, 1 + i, seed=i) for i in range(40)] + _bad_rows()
    pqf = shard(write_parquet(tmp_path / "a.parquet", rows, row_group_size=40))

    def seen(v: Any) -> tuple[Any, ...]:
        span = v.first_response_span()
        return (
            v.source, v.prompt_ids.tolist(), v.prompt_mask().tolist(), span,
            v.ids(*span).tolist(), v.ids(0, v.seq_len).tolist(), v.provenance,
        )  # fmt: skip

    offsets = [33, 2, 17, 2, 40, 41, len(rows) - 1, len(rows)]
    got = rows_at(pqf, offsets)
    assert got[-1] is None and lines_at(pqf, offsets)[-1] is None
    for off, item, line in zip(offsets[:-1], got[:-1], lines_at(pqf, offsets[:-1]), strict=True):
        assert line is not None and item is not None
        if isinstance(item, bytes):  # a bad row: read_row says what is wrong
            assert item == line
            with pytest.raises(DataError) as exc:
                read_row(item, shard="a.parquet", line=off + 1, offset=off)
            assert exc.value.line == off + 1 and 40 < off < len(rows) - 1
            continue
        assert off <= 40 or off == len(rows) - 1  # _bad_rows' first and last are valid
        want = read_row(line, shard="a.parquet", line=off + 1, offset=off)
        assert seen(item) == seen(want)
    # row 2 of the first group: its first batch of READBACK_BATCH_ROWS rows only
    decoded: list[int] = []
    real = pq.ParquetFile.iter_batches

    def counted(self: pq.ParquetFile, *a: Any, **kw: Any) -> Any:
        for batch in real(self, *a, **kw):
            decoded.append(batch.num_rows)
            yield batch

    with mock.patch.object(pq.ParquetFile, "iter_batches", counted):
        assert rows_at(pqf, [2])[0] is not None
    assert decoded == [table_module.READBACK_BATCH_ROWS]


def test_cli_exit_2_names_file_and_row(
    tmp_path: Path, qwen_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_parquet(tmp_path / "d" / "A1_x" / "part-0.parquet", _bad_rows())
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "a.parquet").write_bytes(b"PAR1 truncated")
    cases = (
        (tmp_path / "d", "A1_x/part-0.parquet:2: expected seq_len == len(input_ids)"),
        (tmp_path / "e", "a.parquet: expected a Parquet file, found "),
    )
    for i, (data, where) in enumerate(cases):
        capsys.readouterr()
        args = ["--out", str(tmp_path / f"o{i}"), "--per-source", "3", "--no-progress"]
        assert main(["export", str(data), "--tokenizer", str(qwen_dir), *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {where}") and "Traceback" not in err
        assert not (tmp_path / f"o{i}").exists()
    # inspect counts the bad rows by reason, each first seen at its file:row
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "d")]) == 0
    assert "bad_input_ids: 1 skipped, first at A1_x/part-0.parquet:9" in capsys.readouterr().out


def test_arrow_files_and_save_to_disk(tmp_path: Path) -> None:
    import datasets

    rows = [make_row(i, source=f"s{i % 3}") for i in range(2500)]
    datasets.Dataset(pa.Table.from_pylist(rows, schema=SCHEMA)).save_to_disk(
        str(tmp_path / "hf"), num_shards=2
    )
    found = find_shards(tmp_path / "hf").shards
    assert [s.name for s in found] == ["data-00000-of-00002.arrow", "data-00001-of-00002.arrow"]
    views = [v for s in found for v in iter_rows(s, parse=read_row)]
    assert [v.prompt_ids.tolist() for v in views] == [
        r["input_ids"][: r["n_prompt_tokens"]] for r in rows
    ]
    assert views[1300].provenance.offset == 1300 - 1250
    assert orjson.loads(lines_at(found[1], [50])[0] or b"") == rows[1300]
    # the random-access Arrow file format reads too
    with pa.OSFile(str(tmp_path / "f.arrow"), "wb") as sink:
        table = pa.Table.from_pylist(rows[:10], schema=SCHEMA)
        with pa.ipc.new_file(sink, table.schema) as w:
            w.write_table(table, max_chunksize=3)
    assert len(list(iter_rows(shard(tmp_path / "f.arrow"), parse=read_row))) == 10


def test_mixed_folder_refused_files_named_work(tmp_path: Path) -> None:
    (tmp_path / "A1_x").mkdir()
    (tmp_path / "A1_x" / "tokenized_data.jsonl").write_bytes(lines_of([make_row(0)]))
    write_parquet(tmp_path / "B1_y" / "part-0.parquet", [make_row(1)])
    with pytest.raises(InputError, match="expected shards of one format, found 1 JSON Lines"):
        find_shards(tmp_path)
    names = [s.name for s in find_shards(tmp_path, glob="*.parquet").shards]
    assert names == ["B1_y/part-0.parquet"]
    both = find_shards(
        [tmp_path / "A1_x" / "tokenized_data.jsonl", tmp_path / "B1_y" / "part-0.parquet"]
    ).shards
    got = [v.prompt_ids.tolist() for s in both for v in iter_rows(s, parse=read_row)]
    assert got == [r["input_ids"][: r["n_prompt_tokens"]] for r in (make_row(0), make_row(1))]


def _convert(dst: Path, *, hf: bool) -> Path:
    rows_by = {
        f.parent.name: [orjson.loads(line) for line in f.read_bytes().splitlines() if line.strip()]
        for f in sorted((SAMPLES_DIR / "prepared").glob("*/tokenized_data.jsonl"))
    }
    if hf:
        import datasets

        every = [r for rows in rows_by.values() for r in rows]
        datasets.Dataset(pa.Table.from_pylist(every, schema=SCHEMA)).save_to_disk(str(dst))
        return dst
    for name, rows in rows_by.items():
        write_parquet(dst / name / "part-0.parquet", rows, row_group_size=50)
    return dst


@functools.cache
def _suite(data: str, qwen: str, workers: int = 1) -> list[dict[str, Any]]:
    from distprompt import build_suite

    suite = build_suite(data, tokenizer=qwen, per_source=20, seed=0, workers=workers)
    return [item.to_dict() for item in suite]


@pytest.mark.slow  # three exports of data_samples (~10 s each)
@pytest.mark.parametrize("how", ["parquet", "save_to_disk", "parquet-w2"])
def test_suite_from_tables_has_the_jsonl_items(tmp_path: Path, qwen_dir: Path, how: str) -> None:
    data = _convert(tmp_path / "d", hf=how == "save_to_disk")
    want = _suite(str(SAMPLES_DIR / "prepared"), str(qwen_dir))
    got = _suite(str(data), str(qwen_dir), 2 if how.endswith("w2") else 1)

    def key(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in it.items() if k != "provenance"} for it in items]

    assert key(got) == key(want) and len(got) == 200
    # and each item's provenance points at its row
    for item in got[::17]:
        p = item["provenance"]
        path = data / p["shard"]
        row = orjson.loads(lines_at(shard(path), [p["offset"]])[0] or b"")
        assert row["input_ids"][: row["n_prompt_tokens"]] == item["prompt_ids"]
        assert p["line"] == p["offset"] + 1


def test_row_ranges_give_the_whole_file_pass(tmp_path: Path) -> None:
    """A Parquet shard split into row ranges of whole row groups (as workers share a large
    one) gives the pass of the whole file: figures, pools, provenance, bad rows' lines."""
    from distprompt.engine import Schedule
    from distprompt.read.scan import scan
    from distprompt.read.table import split_table
    from distprompt.read.units import Unit, units

    rows = [random_row(60, 20, seed=i, source=f"s{i % 2}") for i in range(300)]
    rows[250] = {**rows[250], "seq_len": 1}  # a bad row in a later range
    path = write_parquet(tmp_path / "a.parquet", rows, row_group_size=16)
    sh = shard(path)
    ranges, n = split_table(sh, 4096)
    assert n == 300 and len(ranges) > 3 and ranges[0][0] == 0 and ranges[-1][1] == 300
    assert all(a % 16 == 0 for a, _ in ranges)
    work = units([sh], unit_bytes=4096)
    assert len(work) == len(ranges) and all(isinstance(u, Unit) and u.rows == 300 for u in work)

    def view(part: Any) -> Any:
        pools = {s: [(c.key, c.provenance) for c in p.candidates()] for s, p in part.pools.items()}
        return part.stats, pools, part.tally.skipped, dict(part.tally.first_skip)

    kw: dict[str, Any] = {"max_candidates": 50, "on_error": "skip"}
    whole = view(scan([sh], **kw))
    assert whole[3] == {"seq_len_mismatch": "a.parquet:251"}
    assert view(scan([sh], schedule=Schedule(unit_bytes=4096, processes=False), **kw)) == whole
    assert view(scan([sh], schedule=Schedule(unit_bytes=4096, workers=2), **kw)) == whole
    with pytest.raises(DataError, match=r"^a.parquet:251: expected seq_len"):
        scan([sh], max_candidates=50, schedule=Schedule(unit_bytes=4096, processes=False))


def test_fsspec_urls(tmp_path: Path) -> None:
    rows = [make_row(i) for i in range(20)]
    write_parquet(tmp_path / "d" / "A1_x" / "part-0.parquet", rows, row_group_size=6)
    found = find_shards((tmp_path / "d").as_uri()).shards
    assert [s.name for s in found] == ["A1_x/part-0.parquet"] and found[0].url is not None
    views = list(iter_rows(found[0], parse=read_row))
    assert [v.prompt_ids.tolist() for v in views] == [
        r["input_ids"][: r["n_prompt_tokens"]] for r in rows
    ]
    assert orjson.loads(lines_at(found[0], [13])[0] or b"") == rows[13]
    (tmp_path / "d" / "B1_y").mkdir()
    (tmp_path / "d" / "B1_y" / "tokenized_data.jsonl").write_bytes(lines_of(rows[:2]))
    with pytest.raises(InputError, match=r"one format.*put the pattern in the URL"):
        find_shards((tmp_path / "d").as_uri())
