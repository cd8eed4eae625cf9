"""Discovery, streaming, validation and provenance of shards."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from distprompt.errors import DataError, InputError
from distprompt.read.shards import discover_shards, find_shards, iter_rows, open_shard
from distprompt.read.tally import Tally
from distprompt.records import Shard

from factories import chat_rows, shard_with, write_shard


@pytest.fixture(scope="module")
def rows(qwen_tokenizer):  # type: ignore[no-untyped-def]
    return chat_rows(qwen_tokenizer, "chat", 12)


def test_discover_directory_sorted_recursive(tmp_path: Path, rows) -> None:  # type: ignore[no-untyped-def]
    write_shard(tmp_path / "b" / "x.jsonl", rows[:2])
    write_shard(tmp_path / "a" / "deep" / "y.jsonl.gz", rows[:2])
    write_shard(tmp_path / "c.jsonl.zst", rows[:2])
    (tmp_path / "notes.txt").write_text("not a shard")
    names = [s.name for s in discover_shards(tmp_path)]
    assert names == ["a/deep/y.jsonl.gz", "b/x.jsonl", "c.jsonl.zst"]


def test_discover_glob_and_files(tmp_path: Path, rows) -> None:  # type: ignore[no-untyped-def]
    a = write_shard(tmp_path / "p" / "A1_x" / "tokenized_data.jsonl", rows[:1])
    b = write_shard(tmp_path / "p" / "B1_y" / "tokenized_data.jsonl", rows[:1])
    by_glob = [s.name for s in discover_shards(str(tmp_path / "p" / "*" / "*.jsonl"))]
    assert by_glob == ["A1_x/tokenized_data.jsonl", "B1_y/tokenized_data.jsonl"]
    by_files = [s.name for s in discover_shards([str(b), str(a)])]
    assert by_files == by_glob
    assert [s.name for s in discover_shards(str(a))] == ["tokenized_data.jsonl"]


def test_tokenized_data_files_only_when_there_are_any(tmp_path: Path, rows) -> None:  # type: ignore[no-untyped-def]
    write_shard(tmp_path / "prepared" / "A1_x" / "tokenized_data.jsonl", rows[:2])
    write_shard(tmp_path / "prepared" / "B1_y" / "tokenized_data.jsonl.zst", rows[:2])
    write_shard(tmp_path / "prepared" / "B1_y" / "extra.jsonl", rows[:2])
    (tmp_path / "answers.jsonl").write_text('{"id": 1, "answer": "42"}\n')
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "conversations.jsonl.gz").write_bytes(gzip.compress(b"{}\n"))
    warnings: list[str] = []
    found = find_shards(tmp_path, warn=warnings.append)
    assert [s.name for s in found.shards] == [
        "prepared/A1_x/tokenized_data.jsonl",
        "prepared/B1_y/tokenized_data.jsonl.zst",
    ]
    assert found.ignored == (
        "answers.jsonl",
        "prepared/B1_y/extra.jsonl",
        "raw/conversations.jsonl.gz",
    )
    # listed once, in one warning
    assert len(warnings) == 1, warnings
    assert "read only the 2 tokenized_data.* shard(s); ignored 3 other" in warnings[0]
    assert "answers.jsonl" in warnings[0] and "--glob" in warnings[0]
    # --glob chooses explicitly; the rest is ignored the same way
    found = find_shards(tmp_path, glob="prepared/*/*.jsonl", warn=warnings.append)
    assert [s.name for s in found.shards] == [
        "prepared/A1_x/tokenized_data.jsonl",
        "prepared/B1_y/extra.jsonl",
    ]
    assert found.ignored == (
        "answers.jsonl",
        "prepared/B1_y/tokenized_data.jsonl.zst",
        "raw/conversations.jsonl.gz",
    )
    assert [s.name for s in find_shards(tmp_path, glob="*.jsonl.gz").shards] == [
        "raw/conversations.jsonl.gz"
    ]
    with pytest.raises(InputError, match=r"matching --glob '\*\.parquet'"):
        find_shards(tmp_path, glob="*.parquet")
    # a folder without tokenized_data.* keeps the old rule: every *.jsonl*
    assert find_shards(tmp_path / "raw").ignored == ()
    assert [s.name for s in discover_shards(tmp_path / "raw")] == ["conversations.jsonl.gz"]
    # a file given as DATA is read as given
    assert [s.name for s in discover_shards(tmp_path / "answers.jsonl")] == ["answers.jsonl"]


def test_discover_nothing(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="found none"):
        discover_shards(tmp_path)
    with pytest.raises(InputError, match="found nothing"):
        discover_shards(tmp_path / "missing")


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".jsonl.zst"])
def test_provenance_reads_back(tmp_path: Path, rows, suffix: str) -> None:  # type: ignore[no-untyped-def]
    path = write_shard(tmp_path / f"s{suffix}", rows)
    (shard,) = discover_shards(tmp_path)
    got = list(iter_rows(shard))
    assert len(got) == len(rows)
    for row, want in zip(got, rows, strict=True):
        # Seek to the offset in the uncompressed stream: that line, those prompt ids.
        with open_shard(path) as fh:
            data = fh.read()
        line = data[row.provenance.offset :].split(b"\n", 1)[0]
        assert data.count(b"\n", 0, row.provenance.offset) + 1 == row.provenance.line
        obj = orjson.loads(line)
        assert obj["input_ids"][: obj["n_prompt_tokens"]] == row.prompt_ids.tolist()
        assert obj == want


def test_plain_offset_seek(tmp_path: Path, rows) -> None:  # type: ignore[no-untyped-def]
    path = write_shard(tmp_path / "s.jsonl", rows)
    (shard,) = discover_shards(path)
    for row in iter_rows(shard):
        with open(path, "rb") as fh:
            fh.seek(row.provenance.offset)
            obj = json.loads(fh.readline())
        assert obj["input_ids"] == row.input_ids.tolist()


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda r: r.pop("source"), "missing_source"),
        (lambda r: r.update(seq_len=r["seq_len"] + 1), "seq_len_mismatch"),
        (lambda r: r.update(n_prompt_tokens=0), "bad_n_prompt_tokens"),
        (lambda r: r.update(loss_mask=r["loss_mask"][:-1]), "loss_mask_length"),
        (lambda r: r.update(input_ids=[str(i) for i in r["input_ids"]]), "bad_input_ids"),
        (lambda r: r.update(source=""), "bad_source"),
    ],
)
def test_bad_row_raises_or_skips(tmp_path: Path, rows, mutate, reason: str) -> None:  # type: ignore[no-untyped-def]
    r = json.loads(json.dumps(rows[5]))
    mutate(r)
    shard = discover_shards(
        shard_with(tmp_path / "bad.jsonl", orjson.dumps(r), rows=rows, after=1)
    )[0]
    with pytest.raises(DataError) as ei:
        list(iter_rows(shard))
    assert ei.value.reason == reason
    assert str(ei.value).startswith("bad.jsonl:3: expected")
    tally = Tally(on_error="skip")
    kept = list(iter_rows(shard, tally=tally))
    assert len(kept) == 3
    assert tally.skipped == {reason: 1}
    assert tally.first_skip == {reason: "bad.jsonl:3"}


def test_gzip_stream_is_not_loaded_whole(tmp_path: Path, rows) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "s.jsonl.gz"
    p.write_bytes(gzip.compress(b"".join(orjson.dumps(r) + b"\n" for r in rows)))
    (shard,) = discover_shards(p)
    it = iter_rows(shard)
    first = next(it)
    assert first.provenance.line == 1 and first.provenance.offset == 0


def _lines_blob(rng: np.random.Generator, n: int) -> bytes:
    """``n`` lines of a few bytes to a few dozen: BOMs, CRLF endings, blank lines, \\r inside,
    maybe no newline at the end."""
    out = []
    for _ in range(n):
        body = bytes(rng.choice(list(b"ab{}\r 9"), size=int(rng.integers(0, 40))).tolist())
        if rng.random() < 0.1:
            body = b"\xef\xbb\xbf" + body
        out.append(body + (b"\r\n" if rng.random() < 0.2 else b"\n"))
    blob = b"".join(out)
    return blob[:-1] if rng.random() < 0.3 else blob


def _compressed(blob: bytes, how: str, rng: np.random.Generator) -> bytes:
    import zstandard

    cuts = sorted(int(c) for c in rng.integers(0, len(blob) + 1, size=3))
    pieces = [blob[a:b] for a, b in zip([0, *cuts], [*cuts, len(blob)], strict=True)]
    if how == "gz":
        return gzip.compress(blob)
    if how == "gz members":  # members one after another, zero padding between and after
        return b"\x00\x00".join(gzip.compress(p) for p in pieces) + b"\x00" * 5
    return b"".join(zstandard.ZstdCompressor().compress(p) for p in pieces)


def _outcome(fn: Any, *args: Any, **kw: Any) -> Any:
    try:
        return fn(*args, **kw)
    except Exception as exc:
        return type(exc), str(exc)


@pytest.mark.parametrize("block", [(3, 2), (64, 5), (4 << 20, 1 << 20)])
@pytest.mark.parametrize("how", ["gz", "gz members", "zst"])
def test_compressed_lines_are_cut_from_blocks_as_iter_lines_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, block: tuple[int, int]
) -> None:
    """lines_at decompresses in blocks and cuts the lines wanted out of them: the lines the
    line-by-line read gives (BOM and line ending stripped, None for a line too long or where
    no line starts), whatever the block size, without falling back to it."""
    from distprompt.read import shards

    monkeypatch.setattr(shards, "READBACK_BLOCK", block[0])
    monkeypatch.setattr(shards, "READBACK_FEED", block[1])
    by_line = shards.lines_by_line
    seen = 0
    for seed in range(25):
        rng = np.random.default_rng(seed)
        blob = _lines_blob(rng, int(rng.integers(1, 60)))
        path = tmp_path / f"s{seed}.jsonl.{how[:2] if how != 'zst' else 'zst'}"
        path.write_bytes(_compressed(blob, how, rng))
        shard = Shard(path=path, name=path.name, size=path.stat().st_size)
        starts = [0] + [i + 1 for i in range(len(blob)) if blob[i] == 10 and i + 1 < len(blob)]
        picked = [s for s in starts if rng.random() < 0.4]
        others = [int(o) for o in rng.integers(0, len(blob) + 10, size=4)]
        for want in (starts, picked, sorted(picked + others), [starts[-1]], [len(blob) + 3]):
            limit = int(rng.choice([10, 30, 1 << 20]))
            ref = by_line(shard, sorted(set(want)), limit)
            expected = [ref.get(o) for o in want]
            monkeypatch.setattr(shards, "lines_by_line", None)  # no fallback here
            assert shards.lines_at(shard, want, max_line_bytes=limit) == expected, (seed, want)
            monkeypatch.setattr(shards, "lines_by_line", by_line)
            seen += sum(line is not None for line in expected)
    assert seen > 300  # lines were cut out, not only None


def _damaged(how: str, body: bytes) -> bytes:
    import zstandard

    gz = gzip.compress(body)
    zst = zstandard.ZstdCompressor(write_checksum=True).compress(body)
    return {
        "gz cut": gz[: len(gz) * 2 // 3],
        "gz cut in its trailer": gz[:-3],
        "gz crc flipped": gz[:-8] + bytes([gz[-8] ^ 1]) + gz[-7:],
        "gz garbage after": gz + b"garbage!",
        "gz padding then garbage": gz + b"\x00\x00x",
        "gz second member cut": gz + gzip.compress(body)[:40],
        "gz empty": b"",
        "zst cut": zst[: len(zst) // 2],
        "zst cut tail": zst[:-2],
        "zst garbage after": zst + b"garbage!",
        "zst flipped header": zst[:4] + bytes([zst[4] ^ 0x08]) + zst[5:],
    }[how]


@pytest.mark.parametrize(
    "how",
    [
        "gz cut",
        "gz cut in its trailer",
        "gz crc flipped",
        "gz garbage after",
        "gz padding then garbage",
        "gz second member cut",
        "gz empty",
        "zst cut",
        "zst cut tail",
        "zst garbage after",
        "zst flipped header",
    ],
)
def test_a_damaged_stream_read_back_as_before(tmp_path: Path, how: str) -> None:
    """On a truncated or corrupt stream lines_at gives what the line-by-line read back gave:
    the lines before the damage, or its CorruptStreamError with the shard:line where reading
    stopped."""
    from distprompt.errors import CorruptStreamError
    from distprompt.read import shards

    body = b"".join(orjson.dumps({"i": i, "pad": "x" * (i % 50)}) + b"\n" for i in range(400))
    path = tmp_path / ("s.jsonl.gz" if how.startswith("gz") else "s.jsonl.zst")
    path.write_bytes(_damaged(how, body))
    shard = Shard(path=path, name=path.name, size=path.stat().st_size)
    starts = [0] + [i + 1 for i in range(len(body) - 1) if body[i] == 10]
    errors = 0
    for want in ([0], starts[:50], starts[150:160], starts[-5:], starts, [len(body) + 1]):
        ref = _outcome(shards.lines_by_line, shard, want, 1 << 20)
        expected = ref if isinstance(ref, tuple) else [ref.get(o) for o in want]
        assert _outcome(shards.lines_at, shard, want) == expected, want
        if isinstance(ref, tuple):
            assert ref[0] is CorruptStreamError and "truncated or corrupt" in ref[1]
            errors += 1
    assert errors or how in ("gz empty", "zst cut tail", "zst garbage after")


def _plain_and_gz(tmp_path: Path, text: bytes) -> tuple[Shard, Shard]:
    plain = tmp_path / "a.jsonl"
    plain.write_bytes(text)
    gz = tmp_path / "a.jsonl.gz"
    gz.write_bytes(gzip.compress(text))
    return (
        Shard(path=plain, name="a.jsonl", size=plain.stat().st_size),
        Shard(path=gz, name="a.jsonl.gz", size=gz.stat().st_size),
    )


@pytest.mark.parametrize("blocks", [(1, 1), (1, 3), (2, 64), (7, 7), (1 << 16, 4 << 20)])
@pytest.mark.parametrize("seed", range(6))
def test_plain_blocks_cut_lines_as_readline_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, blocks: tuple[int, int], seed: int
) -> None:
    """Plain shards are cut into lines from blocks (compressed ones with ``readline``): the
    same lines, sizes, offsets and too-long lines, whatever the block sizes — lines across
    blocks, CRLF and lone CRs, BOMs, blank lines, a last line without a newline — and the same
    for every byte range :func:`split_shard` cuts."""
    from distprompt.read import shards as shards_mod
    from distprompt.read.shards import iter_lines, split_shard

    monkeypatch.setattr(shards_mod, "FIRST_BLOCK", blocks[0])
    monkeypatch.setattr(shards_mod, "LARGEST_BLOCK", blocks[1])
    rng = np.random.default_rng(seed)
    pieces = [b"", b"\r", b"\r\r", b"\xef\xbb\xbf", b" ", b"x" * 30, b"\xef\xbb", b"{}"]
    lines = []
    for _ in range(int(rng.integers(1, 40))):
        body = b"".join(pieces[int(i)] for i in rng.integers(0, len(pieces), 3))
        lines.append(body + b"y" * int(rng.integers(0, 3) * rng.integers(0, 50)))
    text = b"\n".join(lines) + (b"\n" if seed % 2 else b"")
    plain, gz = _plain_and_gz(tmp_path, text)
    for limit in (5, 31, 64 << 20):
        want = list(iter_lines(gz, max_line_bytes=limit))
        assert list(iter_lines(plain, max_line_bytes=limit)) == want
        for unit in (1, 13, 50):
            got = []
            base = 0
            for start, end in split_shard(plain, unit):
                part = list(iter_lines(plain, max_line_bytes=limit, start=start, end=end))
                got += [(n + base, off, raw) for n, off, raw in part]
                base += len(part)
            assert got == want


def test_plain_lines_read_back_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A line read back from its offset is read in small blocks, not the largest."""
    from distprompt.read import shards as shards_mod
    from distprompt.read.shards import lines_at

    sizes = []
    real = shards_mod.plain_lines

    def spy(fh: Any, limit: int, pos: int, stop: int) -> Any:
        class Counting:
            def readinto(self, b: Any) -> int:
                sizes.append(len(b))
                return int(fh.readinto(b))

        return real(Counting(), limit, pos, stop)  # type: ignore[arg-type]

    monkeypatch.setattr(shards_mod, "plain_lines", spy)
    long = b"7" * 200_000
    plain, _ = _plain_and_gz(tmp_path, b"a\n" + long + b"\nb\n")
    assert lines_at(plain, [2, 0, 200_003]) == [long, b"a", b"b"]
    assert max(sizes) <= 1 << 18
