"""Hostile and broken input end to end: clear errors, nothing lost, nothing half-written (issue 4).

Every case is checked where it matters: the library raises a :class:`DistpromptError` naming
``shard:line`` (or counts the row when skipping), and the CLI prints one ``error:`` line and exits
2 without leaving an output folder behind. The verdict on each single line is the table of
``test_validate.py`` (parse_row); here a handful of those rows run through the CLI one by one,
all of them at once with ``--on-error skip``, and the cases that are about files, folders,
streams and runs. Rows are synthetic (ids below 1000, valid for every real tokenizer) and the
CLI runs with ``--no-turns`` so each case costs well under a second. Synthetic rows carry no
chat-template markers, so exports here run with ``--no-tokenizer-check`` (the checks themselves
are tested on real tokenizers in ``test_checks.py``).
"""

from __future__ import annotations

import builtins
import errno
import gzip
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import zstandard

import distprompt.write.out_dir
from distprompt.cli import main
from distprompt.errors import CorruptStreamError, DataError
from distprompt.manifest import Manifest
from distprompt.read.scan import scan
from distprompt.read.shards import discover_shards, iter_lines, iter_rows
from distprompt.read.tally import Tally
from distprompt.read.validate import DEFAULT_MAX_LINE_BYTES
from distprompt.write.out_dir import MANIFEST_NAME, prepare_out_dir
from distprompt.write.suite import SUITE_NAME
from test_validate import ROW_CASES

from factories import dumps, lines_of, make_row, shard_with, synthetic_corpus


def _permissions_enforced() -> bool:
    """Whether file modes stop this process (not as root, unless its capabilities are dropped,
    e.g. ``setpriv --inh-caps=-dac_override,-dac_read_search --bounding-set=...``)."""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "locked"
        p.write_text("x")
        p.chmod(0)
        try:
            p.read_text()
        except PermissionError:
            return True
        finally:
            p.chmod(0o600)
    return False


ENFORCED = _permissions_enforced()
VOCAB = 151_000  # below the Qwen3 vocabulary the CLI runs use


# --------------------------------------------------------------------------------------------
# running the CLI
# --------------------------------------------------------------------------------------------


@dataclass
class Run:
    code: int
    err: str
    out: Path

    @property
    def manifest(self) -> Manifest:
        return Manifest.from_dict(orjson.loads((self.out / MANIFEST_NAME).read_bytes()))


@pytest.fixture
def export(
    qwen_dir: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> Callable[..., Run]:
    """Run ``distprompt export`` in-process; ``out`` defaults to a fresh folder in tmp."""

    def run(data: Path | str, *args: str, out: Path | None = None, tok: str | None = None) -> Run:
        out = out if out is not None else tmp_path / "out"
        capsys.readouterr()
        code = main(
            [
                "export",
                str(data),
                "--tokenizer",
                tok if tok is not None else str(qwen_dir),
                "--out",
                str(out),
                "--per-source",
                "3",
                "--no-turns",
                "--no-progress",
                "--no-tokenizer-check",
                *args,
            ]
        )
        return Run(code, capsys.readouterr().err, out)

    return run


def leftovers(folder: Path) -> list[str]:
    """Temp files and folders a run may leave beside its output."""
    return sorted(
        p.name
        for p in folder.iterdir()
        if p.name.endswith((".partial", ".tmp", ".old")) or p.name.startswith(".out")
    )


def assert_one_error(run: Run, where: str, *needles: str) -> str:
    """Exit 2, a single ``error: where: expected ...`` line, no traceback, no output left."""
    assert run.code == 2, run.err
    lines = run.err.strip().splitlines()
    assert len(lines) == 1, run.err
    line = lines[0]
    assert line.startswith(f"error: {where}: expected "), line
    assert "Traceback" not in run.err
    for needle in needles:
        assert needle in line, (needle, line)
    assert not run.out.exists()
    assert leftovers(run.out.parent) == []
    return line


# --------------------------------------------------------------------------------------------
# row-level cases: default stops with shard:line and exit 2; skip keeps every valid row
# --------------------------------------------------------------------------------------------


def _scan(tmp_path: Path, *, skip: bool) -> Any:
    return scan(
        discover_shards(tmp_path / "data"),
        max_candidates=100,
        on_error="skip" if skip else "raise",
        vocab_size=VOCAB,
        tokenizer_name="t",
    )


#: The row cases also run here end to end, one of each kind (not JSON, not an object, a key
#: missing or twice, a bad array, a bad count, a bad source); test_validate has all of them.
STRICT_CASES = [
    "not_json",
    "json_array",
    "duplicate_source",
    "missing_seq_len",
    "ids_bool_among_ints",
    "seq_len_mismatch",
    "source_null",
]


@pytest.mark.parametrize(
    ("bad", "reason", "needle"),
    [c[1:] for c in ROW_CASES if c[0] in STRICT_CASES],
    ids=[c[0] for c in ROW_CASES if c[0] in STRICT_CASES],
)
def test_bad_row(
    tmp_path: Path, export: Callable[..., Run], bad: bytes, reason: str, needle: str
) -> None:
    shard_with(tmp_path / "data" / "sub" / "bad.jsonl", bad)
    # library, default: the first bad row raises, naming shard:line
    with pytest.raises(DataError) as ei:
        _scan(tmp_path, skip=False)
    assert str(ei.value).startswith("sub/bad.jsonl:3: expected "), str(ei.value)
    assert needle in str(ei.value)
    assert (ei.value.shard, ei.value.line, ei.value.reason) == ("sub/bad.jsonl", 3, reason)
    # library, skipping: the four valid rows are kept, the bad one counted by reason
    part = _scan(tmp_path, skip=True)
    assert part.stats["chat"].rows == 4
    assert dict(part.tally.skipped) == {reason: 1}
    assert part.tally.first_skip == {reason: "sub/bad.jsonl:3"}
    # CLI, default: one readable line, exit 2, nothing written
    assert_one_error(export(tmp_path / "data"), "sub/bad.jsonl:3", needle)


#: Bad for the pass, not for the parser: ids beyond the tokenizer's vocabulary.
BEYOND_VOCAB = dumps({**make_row(999), "input_ids": [*make_row(999)["input_ids"][:-1], 10**7]})
CLI_CASES = [*ROW_CASES, ("ids_beyond_vocab", BEYOND_VOCAB, "id_out_of_vocab", "10000000")]


@pytest.mark.slow  # one export of 60 shards (~20-50 s)
def test_bad_rows_skipped_by_the_cli(tmp_path: Path, export: Callable[..., Run]) -> None:
    """Every row-level case at once with --on-error skip: all valid rows kept, skips by reason."""
    data = tmp_path / "data"
    # One source for all of them (a report of 60 sources spends a minute drawing plots).
    for k, (name, bad, _, _) in enumerate(CLI_CASES):
        rows = [make_row(4 * k + i, "cases") for i in range(4)]
        shard_with(data / "cases" / f"{name}.jsonl", bad, rows=rows)
    # the truncated last line of a shard: no newline, cut mid-JSON
    cut = data / "cases" / "zz_truncated.jsonl"
    cut.write_bytes(
        lines_of([make_row(i, "cut") for i in range(3)]) + dumps(make_row(3, "cut"))[:25]
    )
    (data / "filler.jsonl").write_bytes(lines_of([make_row(i, "filler") for i in range(150)]))
    run = export(data, "--on-error", "skip")
    assert run.code == 0, run.err
    counts = run.manifest.counts
    want = Counter(reason for _, _, reason, _ in CLI_CASES)
    want["invalid_json"] += 1
    assert counts.skipped == dict(sorted(want.items()))
    assert counts.rows == 4 * len(CLI_CASES) + 3 + 150
    assert counts.first_skipped["duplicate_key"] == "cases/duplicate_escaped.jsonl:3"
    shard_rows = {s.name: s.rows for s in run.manifest.corpus.shards}
    assert shard_rows["cases/zz_truncated.jsonl"] == 3
    assert all(shard_rows[f"cases/{c[0]}.jsonl"] == 4 for c in CLI_CASES)
    # the counts are on stderr too, every reason named
    assert f"skipped {sum(want.values())} bad rows" in run.err
    for reason in want:
        assert f"{reason}=" in run.err and f"{reason}: {want[reason]}" in run.err


@pytest.mark.slow  # two exports
def test_truncated_last_line(tmp_path: Path, export: Callable[..., Run]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    row = dumps(make_row(9))
    (data / "s.jsonl").write_bytes(lines_of([make_row(i) for i in range(4)]) + row[: len(row) // 2])
    assert_one_error(export(data), "s.jsonl:5", "invalid JSON", "truncated")
    run = export(data, "--on-error", "skip")
    assert run.code == 0, run.err
    assert run.manifest.counts.rows == 4
    assert run.manifest.counts.skipped == {"invalid_json": 1}


@pytest.mark.slow  # two exports
def test_out_of_vocabulary_rows_are_bad_rows(tmp_path: Path, export: Callable[..., Run]) -> None:
    # Ids beyond the vocabulary make a row bad like any other: strict stops at the first,
    # skip keeps the others (whether the tokenizer is wrong is the tokenizer checks' call).
    data = tmp_path / "data"
    data.mkdir()
    rows = [make_row(i) for i in range(20)]
    for r in rows[2:]:
        r["input_ids"][0] = 200_000
    (data / "s.jsonl").write_bytes(lines_of(rows))
    assert_one_error(export(data), "s.jsonl:3", "token ids below", "--on-error skip")
    run = export(data, "--on-error", "skip")
    assert run.code == 0, run.err
    assert run.manifest.counts.rows == 2
    assert run.manifest.counts.skipped == {"id_out_of_vocab": 18}
    assert run.manifest.tokenizer_check.checks["vocabulary"].passed is True


# --------------------------------------------------------------------------------------------
# lines that are fine: blank lines, CRLF, BOM, extra keys, length-sum anomaly
# --------------------------------------------------------------------------------------------


@pytest.mark.slow  # an export with report (~5-7 s)
def test_blank_lines_crlf_and_bom(tmp_path: Path, export: Callable[..., Run]) -> None:
    rows = [make_row(i) for i in range(6)]
    bom = b"\xef\xbb\xbf"
    body = (
        bom
        + dumps(rows[0])
        + b"\r\n"  # BOM at the start of the file, CRLF ending
        + b"\n"  # blank line
        + dumps(rows[1])
        + b"\r\n"
        + b"   \t \r\n"  # whitespace-only line
        + bom
        + dumps(rows[2])
        + b"\n"  # a second BOM: files joined with cat
        + dumps(rows[3])
        + b"\n"
        + b"\n\n"  # blank lines at the end
        + dumps(rows[4])
        + b"\n"
        + dumps(rows[5])  # no final newline
    )
    data = tmp_path / "data"
    data.mkdir()
    path = data / "s.jsonl"
    path.write_bytes(body)
    (shard,) = discover_shards(data)
    tally = Tally()  # on_error="raise", the default
    anomalies, first = tally.anomalies, tally.first_anomaly
    got = list(iter_rows(shard, tally=tally))
    assert [r.input_ids.tolist() for r in got] == [r["input_ids"] for r in rows]
    assert [r.provenance.line for r in got] == [1, 3, 5, 6, 9, 10]
    assert anomalies == {"blank_line": 4} and first == {"blank_line": "s.jsonl:2"}
    for r in got:  # offsets land on the line (BOM included), line numbers count every line
        with open(path, "rb") as fh:
            fh.seek(r.provenance.offset)
            line = fh.readline()
        assert orjson.loads(line.removeprefix(bom))["input_ids"] == r.input_ids.tolist()
        assert body.count(b"\n", 0, r.provenance.offset) + 1 == r.provenance.line
    run = export(data)
    assert run.code == 0, run.err
    assert run.manifest.counts.rows == 6
    assert run.manifest.counts.anomalies == {"blank_line": 4}
    assert run.manifest.counts.skipped == {}


@pytest.mark.slow  # two exports with report (~5-7 s each)
def test_length_sum_mismatch_is_a_bad_row(tmp_path: Path, export: Callable[..., Run]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    odd = make_row(5)
    odd["n_response_tokens"] += 3  # n_prompt + n_response != seq_len: where does the prompt end?
    (data / "s.jsonl").write_bytes(lines_of([*[make_row(i) for i in range(4)], odd]))
    run = export(data)
    assert run.code == 2 and run.err.startswith("error: s.jsonl:5: expected n_prompt_tokens + ")
    assert not (tmp_path / "out").exists()
    run = export(data, "--on-error", "skip")
    assert run.code == 0, run.err
    assert run.manifest.counts.rows == 4
    assert run.manifest.counts.anomalies == {}
    assert run.manifest.counts.skipped == {"length_sum_mismatch": 1}
    assert run.manifest.counts.first_skipped == {"length_sum_mismatch": "s.jsonl:5"}
    assert "length_sum_mismatch: 1 (first at s.jsonl:5)" in run.err


# --------------------------------------------------------------------------------------------
# very long lines: refused without being held in memory
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".jsonl.zst"])
def test_line_too_long(tmp_path: Path, suffix: str) -> None:
    rows = [make_row(i) for i in range(4)]
    limit = 4096
    long_row = make_row(77)
    long_row["padding"] = "x" * 10_000
    body = lines_of(rows[:2]) + dumps(long_row) + b"\n" + lines_of(rows[2:])
    path = tmp_path / f"s{suffix}"
    if suffix.endswith(".gz"):
        path.write_bytes(gzip.compress(body))
    elif suffix.endswith(".zst"):
        path.write_bytes(zstandard.ZstdCompressor().compress(body))
    else:
        path.write_bytes(body)
    (shard,) = discover_shards(path)
    with pytest.raises(DataError) as ei:
        list(iter_rows(shard, max_line_bytes=limit))
    assert ei.value.reason == "line_too_long" and ei.value.line == 3
    assert str(ei.value).startswith(f"s{suffix}:3: expected a JSON line of reasonable size")
    tally = Tally(on_error="skip")
    got = list(iter_rows(shard, tally=tally, max_line_bytes=limit))
    assert tally.skipped == {"line_too_long": 1}
    assert [r.provenance.line for r in got] == [1, 2, 4, 5]
    assert [r.provenance.offset for r in got][2] == body.index(dumps(rows[2]))
    # a line of exactly the limit is fine, one byte more is not
    exact = len(dumps(rows[0]))
    assert len(list(iter_rows(shard, tally=Tally(on_error="skip"), max_line_bytes=exact))) >= 1
    lines = list(iter_lines(shard, max_line_bytes=exact))
    assert lines[0][2] == dumps(rows[0])


def test_default_line_limit_is_sensible() -> None:
    # A million-token row is ~10 MB of JSON; a glued shard of gigabytes must not be read whole.
    assert 16 << 20 <= DEFAULT_MAX_LINE_BYTES <= 256 << 20


_PEAK_RSS = textwrap.dedent(
    """
    import resource, sys
    from pathlib import Path
    import numpy, orjson  # imported before the baseline
    from distprompt.read.shards import iter_rows
    from distprompt.read.tally import Tally
    from distprompt.records import Shard
    path = Path(sys.argv[1])
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tally = Tally(on_error="skip")
    shard = Shard(path, path.name, path.stat().st_size)
    rows = [r.provenance.line for r in iter_rows(shard, tally=tally)]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    skipped = dict(tally.skipped)
    print(orjson.dumps({"growth_kib": peak - base, "skipped": skipped, "rows": rows}).decode())
    """
)


def test_huge_line_memory_stays_bounded(tmp_path: Path) -> None:
    """A 300 MB line (a shard whose newlines were lost) costs at most the line limit in memory."""
    path = tmp_path / "huge.jsonl"
    ids = b"12345, " * (1 << 20)  # 7 MiB of ids
    with open(path, "wb") as fh:
        fh.write(dumps(make_row(0)) + b"\n")
        fh.write(b'{"input_ids": [')
        for _ in range(43):  # ~300 MB, never held by the test either
            fh.write(ids)
        fh.write(b'1], "source": "x"}\n')
        fh.write(dumps(make_row(1)) + b"\n")
    assert path.stat().st_size > 300_000_000
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK_RSS, str(path)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    res = orjson.loads(proc.stdout)
    assert res["skipped"] == {"line_too_long": 1}
    assert res["rows"] == [1, 3]
    growth = res["growth_kib"] * 1024  # ru_maxrss is in KiB on Linux
    assert growth < DEFAULT_MAX_LINE_BYTES + (32 << 20), f"peak grew by {growth >> 20} MiB"


# --------------------------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------------------------


@pytest.mark.slow  # two exports
def test_empty_shard(tmp_path: Path, export: Callable[..., Run]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "empty.jsonl").write_bytes(b"")
    # alone: no rows at all is an error, not an empty suite that looks finished
    run = export(data)
    assert run.code == 2
    assert run.err.strip().splitlines() == [
        "warning: empty.jsonl: an empty shard (no lines), nothing to read",
        f"error: {data}: expected at least one valid row in 1 shard(s), found none (no rows); "
        "check DATA and the bad-row counts",
    ]
    assert not run.out.exists()
    # beside a real shard: read, named in a warning and in the manifest with 0 rows
    (data / "real.jsonl").write_bytes(lines_of([make_row(i) for i in range(5)]))
    run = export(data)
    assert run.code == 0, run.err
    assert "warning: empty.jsonl: an empty shard" in run.err
    rows = {s.name: s.rows for s in run.manifest.corpus.shards}
    assert rows == {"empty.jsonl": 0, "real.jsonl": 5}


def test_only_bad_rows_is_an_error_even_when_skipping(
    tmp_path: Path, export: Callable[..., Run]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "s.jsonl").write_bytes(b"{broken\n[]\n")
    run = export(data, "--on-error", "skip")
    assert run.code == 2
    assert (
        "error: " in run.err
        and "at least one valid row" in run.err
        and "2 bad rows skipped" in run.err
    )
    assert not run.out.exists()


@pytest.mark.slow  # three CLI runs
def test_empty_directory_and_no_match(tmp_path: Path, export: Callable[..., Run]) -> None:
    (tmp_path / "empty").mkdir()
    assert_one_error(export(tmp_path / "empty"), str(tmp_path / "empty"), "found none")
    pattern = str(tmp_path / "empty" / "*.jsonl")
    assert_one_error(export(pattern), pattern, "found none")
    missing = tmp_path / "missing"
    assert_one_error(export(missing), str(missing), "found nothing at that path")


def _gz_cut(tmp_path: Path, rows: list[dict[str, Any]]) -> tuple[Path, int]:
    """A .gz cut short; returns it and how many whole lines its readable part holds."""
    blob = gzip.compress(lines_of(rows))
    cut = blob[: len(blob) * 2 // 3]
    path = tmp_path / "data" / "s.jsonl.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(cut)
    readable = zlib.decompressobj(wbits=31).decompress(cut)
    return path, readable.count(b"\n")


@pytest.mark.slow  # two exports
def test_truncated_gz(tmp_path: Path, export: Callable[..., Run]) -> None:
    rows = [make_row(i) for i in range(300)]
    path, whole = _gz_cut(tmp_path, rows)
    assert 0 < whole < len(rows)
    line = assert_one_error(export(path.parent), f"s.jsonl.gz:{whole + 1}", "truncated or corrupt")
    assert "--on-error skip" in line
    with pytest.raises(CorruptStreamError):
        list(iter_rows(discover_shards(path)[0]))
    # skipping: every row before the cut is kept, the cut counted once
    run = export(path.parent, "--on-error", "skip")
    assert run.code == 0, run.err
    assert run.manifest.counts.rows == whole
    assert run.manifest.counts.skipped == {"corrupt_stream": 1}
    assert run.manifest.counts.first_skipped == {"corrupt_stream": f"s.jsonl.gz:{whole + 1}"}


@pytest.mark.parametrize(
    "damage", ["cut", "cut_tail", "garbage_after", "not_zstd", "flipped_header"]
)
def test_corrupt_zst(tmp_path: Path, export: Callable[..., Run], damage: str) -> None:
    rows = [make_row(i) for i in range(300)]
    body = lines_of(rows)
    blob = zstandard.ZstdCompressor(write_checksum=True).compress(body)
    bad = {
        "cut": blob[: len(blob) // 2],
        "cut_tail": blob[:-2],  # only the checksum is short: every row decompresses
        "garbage_after": blob + b"garbage!",
        "not_zstd": body,  # plain text named .zst
        "flipped_header": blob[:4] + bytes([blob[4] ^ 0x08]) + blob[5:],  # reserved bit
    }[damage]
    path = tmp_path / "data" / "s.jsonl.zst"
    path.parent.mkdir()
    path.write_bytes(bad)
    run = export(path.parent)
    assert run.code == 2 and len(run.err.strip().splitlines()) == 1, run.err
    assert run.err.startswith("error: s.jsonl.zst:") and "truncated or corrupt" in run.err
    assert not run.out.exists() and leftovers(run.out.parent) == []
    with pytest.raises(CorruptStreamError):
        list(iter_rows(discover_shards(path)[0]))
    tally = Tally(on_error="skip")
    kept = list(iter_rows(discover_shards(path)[0], tally=tally))
    assert tally.skipped == {"corrupt_stream": 1}
    if damage in ("cut_tail", "garbage_after"):
        assert len(kept) == len(rows)  # nothing readable is lost


def test_multi_frame_and_skippable_zst_read_whole(tmp_path: Path) -> None:
    rows = [make_row(i) for i in range(50)]
    c = zstandard.ZstdCompressor()
    skippable = (0x184D2A50).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"abc"
    path = tmp_path / "s.jsonl.zst"
    path.write_bytes(c.compress(lines_of(rows[:20])) + skippable + c.compress(lines_of(rows[20:])))
    assert len(list(iter_rows(discover_shards(path)[0]))) == 50


def test_unreadable_file(
    tmp_path: Path, export: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.jsonl").write_bytes(lines_of([make_row(i) for i in range(3)]))
    locked = data / "b.jsonl.gz"
    locked.write_bytes(gzip.compress(lines_of([make_row(i, "b") for i in range(3)])))
    real_open = builtins.open

    def deny(file: Any, *args: Any, **kwargs: Any) -> Any:  # as root, chmod 000 does not stop reads
        if str(file) == str(locked):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", deny)
    for args in ((), ("--on-error", "skip")):  # not a bad row: skipping does not hide it
        run = export(data, *args)
        assert run.code == 2, run.err
        assert run.err.strip().splitlines() == [
            f"error: {locked}: expected a readable file, found Permission denied; fix its "
            "permissions or leave it out of DATA"
        ]
        assert not run.out.exists()


@pytest.mark.skipif(not ENFORCED, reason="root reads files whatever their mode (simulated above)")
def test_unreadable_file_chmod(tmp_path: Path, export: Callable[..., Run]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    path = data / "a.jsonl"
    path.write_bytes(lines_of([make_row(i) for i in range(3)]))
    path.chmod(0)
    try:
        run = export(data)
    finally:
        path.chmod(0o644)
    assert run.code == 2 and "expected a readable file" in run.err


def test_unlistable_folder(
    tmp_path: Path, export: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    (data / "locked").mkdir(parents=True)
    (data / "a.jsonl").write_bytes(lines_of([make_row(i) for i in range(3)]))
    (data / "locked" / "b.jsonl").write_bytes(lines_of([make_row(i, "b") for i in range(3)]))
    real_scandir = os.scandir

    def deny(path: Any = ".") -> Any:
        if str(path) == str(data / "locked"):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", deny)
    run = export(data)
    assert run.code == 2
    assert run.err.strip() == (
        f"error: {data / 'locked'}: expected a readable folder, found Permission denied; fix its "
        "permissions or leave it out of DATA"
    )


@pytest.mark.slow  # three exports
def test_symlink_loops(tmp_path: Path, export: Callable[..., Run]) -> None:
    data = tmp_path / "data"
    (data / "A1_chat").mkdir(parents=True)
    (data / "A1_chat" / "tokenized_data.jsonl").write_bytes(
        lines_of([make_row(i) for i in range(5)])
    )
    (data / "A1_chat" / "again").symlink_to(data)  # a folder loop: read once, with a warning
    (data / "up").symlink_to("..", target_is_directory=True)
    run = export(data)
    assert run.code == 0, run.err
    assert run.manifest.counts.rows == 5
    assert [s.name for s in run.manifest.corpus.shards] == ["A1_chat/tokenized_data.jsonl"]
    assert "symlink loop" in run.err
    # a shard-named symlink loop (or a dangling one) is refused, not passed over in silence
    (data / "x.jsonl").symlink_to(data / "y.jsonl")
    (data / "y.jsonl").symlink_to(data / "x.jsonl")
    assert_one_error(export(data, out=tmp_path / "o2"), "x.jsonl", "a symbolic link that loops")
    (data / "x.jsonl").unlink()
    (data / "y.jsonl").unlink()
    (data / "gone.jsonl").symlink_to(data / "nowhere.jsonl")
    assert_one_error(export(data, out=tmp_path / "o3"), "gone.jsonl", "missing target")


@pytest.mark.slow  # an export with report (~5-7 s)
def test_source_folder_without_a_shard_is_ignored_with_a_warning(
    tmp_path: Path, export: Callable[..., Run]
) -> None:
    prepared = tmp_path / "prepared"
    (prepared / "A1_chat").mkdir(parents=True)
    (prepared / "A1_chat" / "tokenized_data.jsonl").write_bytes(
        lines_of([make_row(i) for i in range(5)])
    )
    (prepared / "B1_code").mkdir()
    (prepared / "B1_code" / "tokenized_data.json").write_bytes(b"[]")
    (prepared / "C1_empty" / "nested").mkdir(parents=True)
    (prepared / ".cache").mkdir()  # hidden: not worth a warning
    run = export(prepared)
    assert run.code == 0, run.err
    assert run.manifest.counts.rows == 5
    want = [
        "B1_code/: a folder without any *.jsonl, *.jsonl.gz, *.jsonl.zst, *.parquet or *.arrow "
        "shard (it holds 1 other file(s): tokenized_data.json), ignored",
        "C1_empty/: a folder without any *.jsonl, *.jsonl.gz, *.jsonl.zst, *.parquet or *.arrow "
        "shard (no file directly in it), ignored",
    ]
    assert [w for w in run.manifest.warnings if "folder without" in w] == want
    for w in want:
        assert f"warning: {w}" in run.err
    assert ".cache" not in run.err


def test_unsupported_compression_named_explicitly(
    tmp_path: Path, export: Callable[..., Run]
) -> None:
    path = tmp_path / "s.jsonl.bz2"
    path.write_bytes(b"BZh9")
    assert_one_error(export(path), str(path), "found a .bz2 file", "decompress it")


# --------------------------------------------------------------------------------------------
# runs: output folder, full disk, permissions, interruption, tokenizer
# --------------------------------------------------------------------------------------------


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return synthetic_corpus(tmp_path / "data", {"a": 8, "b": 8})


@pytest.fixture
def bad_corpus(tmp_path: Path) -> Path:
    """A corpus that fails on reading: a refusal that comes first proves it came before reading."""
    data = tmp_path / "bad"
    shard_with(data / "s.jsonl", b"{oops")
    return data


def test_occupied_out_is_refused_before_reading(
    tmp_path: Path, export: Callable[..., Run], bad_corpus: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    run = export(bad_corpus, out=out)
    assert run.code == 2
    assert run.err.strip().splitlines() == [
        f"error: {out}: expected an empty or new output folder, found files in it; pass "
        "--overwrite to replace it, or choose another --out"
    ]
    assert (out / "notes.txt").read_text() == "mine"
    # --overwrite replaces only a previous distprompt output, never a folder of other files
    run = export(bad_corpus, "--overwrite", out=out)
    assert run.code == 2 and "--overwrite never deletes" in run.err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


@pytest.mark.slow  # three exports
def test_overwrite_replaces_a_previous_output(
    tmp_path: Path, export: Callable[..., Run], corpus: Path
) -> None:
    out = tmp_path / "out"
    assert export(corpus, out=out).code == 0
    first = (out / SUITE_NAME).read_bytes()
    assert export(corpus, out=out).code == 2
    # A different selection, so the replacement is visible in the file.
    run = export(corpus, "--overwrite", "--method", "random", "--seed", "1", out=out)
    assert run.code == 0, run.err
    assert (out / SUITE_NAME).read_bytes() != first
    assert leftovers(tmp_path) == []


def test_out_is_a_file_or_below_a_file(
    tmp_path: Path, export: Callable[..., Run], bad_corpus: Path
) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    run = export(bad_corpus, out=afile)
    assert run.code == 2 and run.err.startswith(
        f"error: {afile}: expected an output folder, found a file"
    )
    assert afile.read_text() == "x"
    below = afile / "sub" / "out"
    run = export(bad_corpus, out=below)
    assert run.code == 2
    assert run.err.strip() == (
        f"error: {below}: expected a folder to write into, found {afile} is a file; choose "
        "another --out"
    )


def test_out_not_writable(
    tmp_path: Path, export: Callable[..., Run], corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tempfile.mkdtemp

    def deny(*args: Any, **kwargs: Any) -> str:  # as root, a read-only folder does not stop us
        if kwargs.get("dir") == tmp_path:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(tmp_path))
        return real(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkdtemp", deny)
    run = export(corpus)
    assert run.code == 2
    assert run.err.strip().splitlines()[-1] == (
        f"error: {tmp_path}: expected a writable folder, found Permission denied; choose another "
        "--out or fix its permissions"
    )
    assert not run.out.exists() and leftovers(tmp_path) == []


@pytest.mark.skipif(not ENFORCED, reason="root writes into read-only folders (simulated above)")
def test_out_not_writable_chmod(tmp_path: Path, export: Callable[..., Run], corpus: Path) -> None:
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    try:
        run = export(corpus, out=parent / "out")
    finally:
        parent.chmod(0o755)
    assert run.code == 2 and "expected a writable folder" in run.err


class _FullDisk:
    """A file whose writes fail with ENOSPC once the shared byte budget is spent."""

    def __init__(self, fh: Any, budget: list[int]) -> None:
        self._fh = fh
        self._budget = budget

    def write(self, data: bytes) -> int:
        if len(data) > self._budget[0]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._budget[0] -= len(data)
        return int(self._fh.write(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)

    def __enter__(self) -> _FullDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self._fh.close()


def _fill_disk(monkeypatch: pytest.MonkeyPatch, budget: int) -> None:
    left = [budget]

    class OsWithFullDisk:
        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        @staticmethod
        def fdopen(fd: int, mode: str) -> _FullDisk:
            return _FullDisk(os.fdopen(fd, mode), left)

    monkeypatch.setattr(distprompt.write.out_dir, "os", OsWithFullDisk())


@pytest.mark.slow  # three exports per case
@pytest.mark.parametrize("budget", [0, 3000], ids=["first_file", "later_file"])
def test_disk_full(
    tmp_path: Path,
    export: Callable[..., Run],
    corpus: Path,
    monkeypatch: pytest.MonkeyPatch,
    budget: int,
) -> None:
    out = tmp_path / "out"
    assert export(corpus, out=out).code == 0  # a previous, finished output
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    _fill_disk(monkeypatch, budget)
    for target, args in ((tmp_path / "new", ()), (out, ("--overwrite",))):
        run = export(corpus, *args, out=target)
        assert run.code == 2, run.err
        (line,) = run.err.strip().splitlines()[-1:]
        assert line.startswith("error: ") and "No space left on device" in line
        assert "check free disk space" in line
        assert "Traceback" not in run.err
        assert leftovers(tmp_path) == []
    assert not (tmp_path / "new").exists()  # nothing that looks finished
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the old output is intact


@pytest.mark.slow  # a build and three saves
def test_interrupted_save_leaves_nothing(
    tmp_path: Path, corpus: Path, qwen_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C in the middle of writing (in-process): no OUT, no temp files, old OUT intact."""
    from distprompt import build_suite
    from distprompt.write import export as export_mod

    suite = build_suite(
        corpus, tokenizer=qwen_dir, per_source=3, recover_turns=False, check_tokenizer=False
    )
    out = tmp_path / "out"
    suite.save(out)
    before = sorted(p.name for p in out.iterdir())

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(export_mod, "write_exports", interrupted)
    with pytest.raises(KeyboardInterrupt):
        suite.save(tmp_path / "new")
    with pytest.raises(KeyboardInterrupt):
        suite.save(out, overwrite=True)
    assert not (tmp_path / "new").exists()
    assert sorted(p.name for p in out.iterdir()) == before
    assert leftovers(tmp_path) == []


def test_swap_interrupted_between_renames_restores_old_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / MANIFEST_NAME).write_text("{}")
    real_replace = os.replace
    calls = []

    def replace(src: Any, dst: Any) -> None:
        calls.append((src, dst))
        if len(calls) == 2:  # the second rename (temp folder onto OUT) is interrupted
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt), prepare_out_dir(out, overwrite=True) as tmp:
        (tmp / MANIFEST_NAME).write_text('{"new": 1}')
    monkeypatch.undo()
    assert (out / MANIFEST_NAME).read_text() == "{}"
    assert leftovers(tmp_path) == []


def test_output_permissions_follow_the_umask(
    tmp_path: Path, export: Callable[..., Run], corpus: Path
) -> None:
    old = os.umask(0o022)
    try:
        distprompt.write.out_dir._UMASK.clear()
        run = export(corpus)
    finally:
        os.umask(old)
        distprompt.write.out_dir._UMASK.clear()
    assert run.code == 0, run.err
    assert run.out.stat().st_mode & 0o777 == 0o755  # not mkdtemp's private 0700
    for p in run.out.iterdir():
        assert p.stat().st_mode & 0o777 == 0o644, p.name  # not mkstemp's 0600


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("missing", "found nothing at that path"),
        ("no_files", "found none"),
        ("corrupt_json", "expected a loadable tokenizer"),
        ("a_shard", "expected a loadable tokenizer"),
        ("not_on_hub", "pass a local tokenizer folder"),
    ],
)
def test_tokenizer_missing_or_not_a_tokenizer(
    tmp_path: Path, export: Callable[..., Run], corpus: Path, spec: str, needle: str
) -> None:
    (tmp_path / "no_files").mkdir()
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "tokenizer.json").write_text('{"model": ')
    tok = {
        "missing": str(tmp_path / "missing"),
        "no_files": str(tmp_path / "no_files"),
        "corrupt_json": str(tmp_path / "corrupt"),
        "a_shard": str(corpus / "a.jsonl"),
        "not_on_hub": "no-such-org-xyz/no-such-tokenizer",
    }[spec]
    run = export(corpus, tok=tok)
    assert run.code == 2
    (line,) = run.err.strip().splitlines()
    assert line.startswith(f"error: {tok}: expected ") and needle in line
    assert not run.out.exists()


def test_internal_error_is_one_line_unless_verbose(
    tmp_path: Path,
    corpus: Path,
    qwen_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import distprompt.pipeline

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(distprompt.pipeline, "build_suite", boom)
    argv = [
        "export",
        str(corpus),
        "--tokenizer",
        str(qwen_dir),
        "--out",
        str(tmp_path / "o"),
        "--no-tokenizer-check",
    ]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "error: internal error (RuntimeError: boom); this is a bug in distprompt — run again "
        "with -v for the traceback and report it"
    ]
    assert main(["-v", *argv]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_verbose_shows_the_traceback_of_bad_input(
    tmp_path: Path, bad_corpus: Path, qwen_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "export",
        str(bad_corpus),
        "--tokenizer",
        str(qwen_dir),
        "--out",
        str(tmp_path / "o"),
        "--no-tokenizer-check",
    ]
    assert main(argv) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert main(["-v", *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "error: s.jsonl:3: expected one JSON object" in err


@pytest.mark.slow  # two exports with two workers
def test_parallel_workers_report_the_same_error(tmp_path: Path, export: Callable[..., Run]) -> None:
    data = tmp_path / "data"
    for i in range(3):
        shard_with(
            data / f"s{i}.jsonl",
            dumps({**make_row(999), "seq_len": 1}) if i == 1 else dumps(make_row(50 + i)),
        )
    run = export(data, "--workers", "2")
    assert_one_error(run, "s1.jsonl:3", "expected seq_len == len(input_ids)")
    run = export(data, "--workers", "2", "--on-error", "skip")
    assert run.code == 0, run.err
    assert run.manifest.counts.skipped == {"seq_len_mismatch": 1}
    assert run.manifest.counts.rows == 14


# --------------------------------------------------------------------------------------------
# real subprocesses: exit codes, and interruption with SIGINT / SIGTERM
# --------------------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).parents[1] / "src"), env.get("PYTHONPATH", "")]
    )
    return env


@pytest.mark.slow  # a CLI subprocess (~4-8 s)
def test_subprocess_bad_row_exit_code(tmp_path: Path, bad_corpus: Path, qwen_dir: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "distprompt", "export", str(bad_corpus), "--tokenizer",
         str(qwen_dir), "--out", str(out), "--no-turns", "--no-tokenizer-check"],
        capture_output=True, text=True, env=_env(), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: s.jsonl:3: expected one JSON object per line, found invalid")
    assert line.endswith("a truncated or corrupt line — fix it or run with --on-error skip")
    assert not out.exists()


@pytest.fixture(scope="module")
def big_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Enough shards and rows that an export runs for a few seconds."""
    data = tmp_path_factory.mktemp("big") / "data"
    for s in range(8):
        sub = data / f"S{s}_src{s % 3}"
        sub.mkdir(parents=True)
        rows = []
        for i in range(1500):
            row = make_row(i, f"src{s % 3}-{s}")
            row["source"] = f"src{s % 3}"
            rows.append(row)
        (sub / "tokenized_data.jsonl").write_bytes(lines_of(rows))
    return data


def _session_alive(pgid: int) -> list[int]:
    """Processes still in the session the export started (its workers included)."""
    alive = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == pgid and fields[0] != "Z":
                alive.append(int(d.name))
    return alive


def _reading(pid: int, data: Path) -> bool:
    try:
        return any(
            os.readlink(f"/proc/{pid}/fd/{fd}").startswith(str(data))
            for fd in os.listdir(f"/proc/{pid}/fd")
        )
    except OSError:
        return False


def _wait_for(cond: Callable[[], bool], timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.005)
    return False


def _assert_interrupted(proc: subprocess.Popen[str], sig: int, out: Path) -> None:
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err
    word = "terminated" if sig == signal.SIGTERM else "interrupted"
    assert (
        err.strip().splitlines()[-1].startswith(f"{word}: stopped; no output folder was finished")
    )
    assert not (out / SUITE_NAME).exists() and not (out / MANIFEST_NAME).exists()
    assert leftovers(out.parent) == []
    assert _wait_for(lambda: not _session_alive(proc.pid), 30), "worker processes left running"


@pytest.mark.slow  # an export of 12,000 rows in a subprocess
@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see the run read")
@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_while_reading(
    tmp_path: Path, big_corpus: Path, qwen_dir: Path, sig: int, workers: str
) -> None:
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "distprompt", "export", str(big_corpus), "--tokenizer",
         str(qwen_dir), "--out", str(out), "--no-turns", "--workers", workers,
         "--no-tokenizer-check"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
        start_new_session=True,
    )  # fmt: skip
    try:

        def reading() -> bool:  # the export, or one of its workers, has a shard open
            return any(_reading(p, big_corpus) for p in [proc.pid, *_session_alive(proc.pid)])

        assert _wait_for(reading, 120), "never read"
        assert proc.poll() is None, "finished before the signal"
        os.kill(proc.pid, sig)
        _assert_interrupted(proc, sig, out)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


_SLOW_SAVE = textwrap.dedent(
    """
    import sys, time
    import distprompt.write.export as export
    real = export.write_exports
    def slow(*args, **kwargs):
        files = real(*args, **kwargs)
        time.sleep(60)  # the signal lands here, with a half-built folder beside OUT
        return files
    export.write_exports = slow
    from distprompt.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.mark.slow  # an export, then one in a subprocess
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("overwrite", [False, True], ids=["new", "overwrite"])
def test_interrupt_while_saving(
    tmp_path: Path, corpus: Path, qwen_dir: Path, sig: int, overwrite: bool
) -> None:
    out = tmp_path / "out"
    argv = ["export", str(corpus), "--tokenizer", str(qwen_dir), "--out", str(out), "--no-turns"]
    argv.append("--no-tokenizer-check")
    before: dict[str, bytes] = {}
    if overwrite:
        assert main(argv) == 0
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        argv.append("--overwrite")
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW_SAVE, *argv],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
        start_new_session=True,
    )  # fmt: skip
    try:

        def half_built() -> bool:
            return any(
                (p / SUITE_NAME).exists() for p in tmp_path.iterdir() if p.name.endswith(".partial")
            )

        assert _wait_for(half_built, 120), "never started writing"
        os.kill(proc.pid, sig)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 128 + sig, err
        assert "Traceback" not in err
        assert leftovers(tmp_path) == []
        if overwrite:
            assert {p.name: p.read_bytes() for p in out.iterdir()} == before
        else:
            assert not out.exists()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
