"""The zstd frame walker: whole files pass, a cut or damaged file is named with where it breaks,
and the stream gives every row before the damage."""

from __future__ import annotations

import io

import pytest
import zstandard

from distprompt.read.zstd import check_whole, open_zstd, zstd_problem

TEXT = b"".join(b'{"n": %d}\n' % i for i in range(5000))


def _frames(*chunks: bytes) -> bytes:
    c = zstandard.ZstdCompressor(write_checksum=True)
    return b"".join(c.compress(x) for x in chunks)


def test_whole_multi_frame_file_has_no_problem() -> None:
    data = _frames(TEXT[:20000], TEXT[20000:])
    assert zstd_problem(io.BytesIO(data)) == (None, len(data))


def test_a_skippable_frame_is_passed_over() -> None:
    skip = (0x184D2A50).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"abc"
    data = skip + _frames(TEXT)
    assert zstd_problem(io.BytesIO(data))[0] is None


def test_a_cut_file_is_read_to_its_end_and_named_cut() -> None:
    data = _frames(TEXT)
    why, stop = zstd_problem(io.BytesIO(data[:-50]))
    assert why is not None and "cut inside a frame" in why
    assert stop == len(data) - 50


def test_garbage_after_a_frame_stops_there() -> None:
    first = _frames(TEXT)
    why, stop = zstd_problem(io.BytesIO(first + b"not zstd at all"))
    assert why is not None and f"no zstd frame at byte {len(first)}" in why
    assert stop == len(first)


def test_stream_keeps_the_rows_before_the_damage_then_check_whole_raises() -> None:
    first = _frames(TEXT)
    stream = open_zstd(io.BytesIO(first + b"garbage!"), buffer_size=1 << 16)
    assert stream.read() == TEXT
    with pytest.raises(EOFError, match="no zstd frame"):
        check_whole(stream)


def test_check_whole_passes_a_whole_stream_and_plain_files() -> None:
    stream = open_zstd(io.BytesIO(_frames(TEXT)), buffer_size=1 << 16)
    assert stream.read() == TEXT
    check_whole(stream)
    check_whole(io.BytesIO(b"plain"))  # not a zstd stream: nothing to check
