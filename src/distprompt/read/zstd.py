"""Reading ``.zst`` shards without losing rows silently.

zstandard's stream reader stops quietly at the end of a truncated file and drops what it had
decompressed when it meets garbage. :func:`zstd_problem` walks the frame and block headers first
(a few bytes per block), :func:`open_zstd` feeds the reader only the valid part, and
:func:`check_whole` raises at the end of the stream when the file was cut or corrupt, so every
readable row comes out and the damage is still reported.
"""

from __future__ import annotations

import io
from typing import IO

__all__ = ["ZstdStream", "check_whole", "open_zstd", "zstd_problem"]


def open_zstd(raw: IO[bytes], *, buffer_size: int) -> ZstdStream:
    """The decompressed stream of the open ``.zst`` file ``raw`` (closed with it)."""
    import zstandard

    source = _WholeZstdFile(raw)
    reader = zstandard.ZstdDecompressor().stream_reader(
        source,  # type: ignore[arg-type]  # has read() and close()
        closefd=True,
        read_across_frames=True,
    )
    stream = ZstdStream(reader, buffer_size=buffer_size)
    stream.source = source
    return stream


class _WholeZstdFile:
    """The compressed file under a zstd stream reader, checked to hold whole frames.

    zstandard's stream reader stops quietly at the end of a truncated file, which would lose the
    rows of the missing tail without a word, and it drops the bytes it had decompressed when it
    meets garbage. Walking the frame and block headers first (a few bytes per block of up to
    128 KiB) finds where the file stops being valid zstd: the reader is fed up to that point, so
    every readable row still comes out, and the verdict is kept in ``problem`` for
    :func:`iter_lines` to raise at the end of the stream.
    """

    def __init__(self, fh: IO[bytes]) -> None:
        self._fh = fh
        self.problem, self._stop = zstd_problem(fh)

    def read(self, size: int = -1) -> bytes:
        left = self._stop - self._fh.tell()
        if left <= 0:
            return b""
        return self._fh.read(left if size < 0 else min(size, left))

    def close(self) -> None:
        self._fh.close()


class ZstdStream(io.BufferedReader):
    """Decompressed bytes of a ``.zst`` shard; ``source.problem`` tells a cut file at its end."""

    source: _WholeZstdFile


def check_whole(fh: IO[bytes]) -> None:
    """At the end of a stream: raise when a zstd file turned out to be cut or corrupt."""
    if isinstance(fh, ZstdStream) and fh.source.problem is not None:
        raise EOFError(f"the zstd stream {fh.source.problem}")


_ZSTD_MAGIC = 0xFD2FB528


def zstd_problem(fh: IO[bytes]) -> tuple[str | None, int]:
    """``(why the zstd file is not a sequence of whole frames or None, where to stop reading)``.

    A file cut inside a frame is read to its end (the decompressor returns what it can); garbage
    or a corrupt block header stops reading where it starts. ``fh`` is left at offset 0.
    """
    size = fh.seek(0, io.SEEK_END)  # not fstat: a remote (fsspec) file has no descriptor
    pos = 0

    def at(offset: int, n: int) -> bytes | None:
        fh.seek(offset)
        b = fh.read(n)
        return b if len(b) == n else None

    cut = f"is cut inside a frame ({size} bytes, the last frame needs more)"
    try:
        while pos < size:
            head = at(pos, 5)
            if head is None:  # a few bytes left: the start of a frame, or garbage
                fh.seek(pos)
                tail = fh.read(4)
                if _ZSTD_MAGIC.to_bytes(4, "little").startswith(tail) or (
                    tail[0] & 0xF0 == 0x50 and b"\x2a\x4d\x18".startswith(tail[1:])
                ):
                    return cut, size
                return f"has no zstd frame at byte {pos} (garbage or another format)", pos
            magic = int.from_bytes(head[:4], "little")
            if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame: magic, size, payload
                n = at(pos + 4, 4)
                if n is None:
                    return cut, size
                pos += 8 + int.from_bytes(n, "little")
                continue
            if magic != _ZSTD_MAGIC:
                return f"has no zstd frame at byte {pos} (garbage or another format)", pos
            fhd = head[4]
            if fhd & 0x08:  # the reserved bit must be zero
                return f"has a corrupt frame header at byte {pos}", pos
            single = (fhd >> 5) & 1
            fcs = (1 if single else 0, 2, 4, 8)[fhd >> 6]
            did = (0, 1, 2, 4)[fhd & 3]
            checksum = 4 if (fhd >> 2) & 1 else 0
            pos += 5 + (0 if single else 1) + did + fcs
            while True:
                block = at(pos, 3)
                if block is None:
                    return cut, size
                h = int.from_bytes(block, "little")
                kind = (h >> 1) & 3
                if kind == 3:
                    return f"has a corrupt block header at byte {pos}", pos
                pos += 3 + (1 if kind == 1 else h >> 3)
                if h & 1:  # last block of the frame
                    break
            pos += checksum
        if pos > size:
            return cut, size
        return None, size
    finally:
        fh.seek(0)
