"""Stream the lines of shards and stamp provenance (shards are found by
:mod:`distprompt.read.discover`, rows validated by :mod:`distprompt.read.validate`).

Shards are listed in sorted order and read as byte streams (``.jsonl``, ``.jsonl.gz``,
``.jsonl.zst``); memory does not depend on file size. Each line's provenance is the shard path
relative to DATA (with ``/``), its 1-based line number and the byte offset of its start in the
uncompressed stream, so ``open(shard).seek(offset)`` lands on it.

Broken input is reported, never passed over in silence (see :mod:`distprompt.errors`):

- A line that is not a valid row raises :class:`DataError` with ``shard:line``, or, when skipping,
  is counted under its reason. Duplicate top-level keys of the schema are a bad row
  (``duplicate_key``): JSON parsers silently keep the last value, which hides a broken writer.
  Extra keys are allowed and ignored.
- Blank lines (empty or whitespace only) carry no row: they are passed over and counted as the
  anomaly ``blank_line``. Line endings (LF or CRLF) and a UTF-8 BOM at the start of a line (files
  concatenated with ``cat`` keep one per file) are stripped.
- A line longer than ``max_line_bytes`` (default :data:`DEFAULT_MAX_LINE_BYTES`) is refused
  (``line_too_long``) without being held in memory: a missing newline can glue a whole shard into
  one line.
- A truncated or corrupt ``.gz``/``.zst`` stream raises :class:`CorruptStreamError` (an
  :class:`InputError`) naming the line where reading stopped; when skipping, the rest of that
  shard is counted as ``corrupt_stream``.
- Discovery refuses shard-named symlinks that are broken or loop, and folders it cannot list;
  folders without any shard are ignored with a warning (sources come from the rows, not from
  folder names, but a folder of ``.json`` files is probably a mistake).
- Parquet and Arrow files (``*.parquet``; the ``*.arrow`` files of a ``datasets.save_to_disk``
  folder) are shards too, read by :mod:`distprompt.read.table` (provenance: row number and row
  index). A DATA folder that holds both JSON Lines and table shards is refused (the same rows
  in two formats would count twice) unless ``glob`` chooses; files named one by one may mix.
- A DATA folder that holds ``tokenized_data.jsonl`` (``.gz``, ``.zst``) files is read for those
  only: a dataset folder also holds other JSON Lines files (answer keys, stats, raw
  conversations) that are not shards. The others are listed once as ignored (a warning, and
  :attr:`ShardSet.ignored` for the manifest). A folder without any ``tokenized_data.*`` file is
  read for every ``*.jsonl*`` file; ``glob`` chooses the files explicitly.
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import zlib
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from distprompt.errors import CorruptStreamError, DataError, InputError
from distprompt.read.discover import SHARD_NAMES, ShardSet, discover_shards, find_shards
from distprompt.read.fastrow import RowView
from distprompt.read.table import (
    is_table,
    iter_table_rows,
    table_lines_at,
    table_rows_at,
)
from distprompt.read.tally import Tally
from distprompt.read.validate import DEFAULT_MAX_LINE_BYTES, parse_row
from distprompt.read.zstd import check_whole, open_zstd
from distprompt.records import (
    Shard,
)

__all__ = [
    "SHARD_NAMES",
    "ShardSet",
    "discover_shards",
    "find_shards",
    "iter_lines",
    "iter_rows",
    "lines_at",
    "open_shard",
    "rows_at",
    "split_shard",
]

logger = logging.getLogger("distprompt.read.shards")

_READ_CHUNK = 1 << 20
_BOM = b"\xef\xbb\xbf"


def open_shard(path: Path | str) -> IO[bytes]:
    """Open a shard (a path, or an fsspec URL) as a binary stream of uncompressed bytes.

    Raises:
        InputError: The file cannot be opened.
    """
    from distprompt.read.remote import is_url, open_url

    if isinstance(path, str) and is_url(path):
        name, raw = path, open_url(path)
        if name.endswith(".gz"):
            return _OwningGzipFile(raw)  # type: ignore[return-value]
    else:
        path = Path(path)
        name = path.name
        try:
            if name.endswith(".gz"):
                return gzip.open(path, "rb")  # type: ignore[return-value]  # owns the file
            # A buffer of several lines: a long row comes out of one read, in one copy.
            raw = open(path, "rb", buffering=_READ_CHUNK)  # noqa: SIM115 - returned to the caller
        except OSError as exc:
            raise InputError(
                f"{path}: expected a readable file, found {exc.strerror or exc}; fix its "
                "permissions or leave it out of DATA"
            ) from exc
    if name.endswith(".zst"):
        return open_zstd(raw, buffer_size=_READ_CHUNK)
    return raw


class _OwningGzipFile(gzip.GzipFile):
    """A gzip stream over an open file object that it closes with itself."""

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def _next_line(fh: IO[bytes], limit: int) -> tuple[bytes | None, int]:
    """The next line (newline included) and its size; None for a line of more than ``limit``
    bytes (newline excluded), which is read through without being held. ``(b"", 0)`` at the end.
    """
    first = fh.readline(_READ_CHUNK)
    if len(first) < _READ_CHUNK or first.endswith(b"\n"):  # whole line (or the end of the file)
        return (first if len(first) - first.endswith(b"\n") <= limit else None), len(first)
    parts: list[bytes] | None = [first]
    size = len(first)
    while True:
        piece = fh.readline(_READ_CHUNK)
        size += len(piece)
        if parts is not None:
            if size - piece.endswith(b"\n") > limit:
                parts = None  # too long: drop what was read, count the rest
            else:
                parts.append(piece)
        if not piece or piece.endswith(b"\n"):
            break
    return (b"".join(parts) if parts is not None else None), size


#: What a broken compressed stream raises while it is read.
_CORRUPT_STREAM: tuple[type[BaseException], ...] = (EOFError, zlib.error, gzip.BadGzipFile)


def iter_lines(
    shard: Shard,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    start: int = 0,
    end: int | None = None,
) -> Iterator[tuple[int, int, bytes | None]]:
    """Yield ``(line_number, offset, raw_line)`` for each line of a shard.

    Line endings (LF or CRLF) and a UTF-8 BOM at the start of a line are stripped. A line longer
    than ``max_line_bytes`` is not held in memory: it is yielded as ``None`` (the caller reports
    it) and the rest of it is skipped, so memory stays near ``max_line_bytes`` whatever the file.

    Args:
        start, end: Read only the lines that start in ``[start, end)`` (plain ``.jsonl`` shards;
            ``start`` must be a line start, see :func:`split_shard`). Line numbers then count
            from 1 at ``start``: the caller adds the lines before it.

    Raises:
        InputError: The file cannot be opened or read.
        CorruptStreamError: A compressed stream is truncated or corrupt; the lines before the
            damage have been yielded.
    """
    lineno = 0
    offset = start
    stop = end if end is not None else -1
    with open_shard(shard.url or shard.path) as fh:
        try:
            if start:
                fh.seek(start)
            if shard.name.endswith(".jsonl"):
                if 0 <= stop <= offset:
                    return
                for line, size in plain_lines(fh, max_line_bytes, offset, stop):
                    lineno += 1
                    at = offset
                    offset += size
                    if line is not None:
                        if line.startswith(_BOM):
                            line = line[3:]
                        line = line.rstrip(b"\r")  # the newline is cut already
                    yield lineno, at, line
                    if 0 <= stop <= offset:
                        return
                return
            while stop < 0 or offset < stop:
                line, size = _next_line(fh, max_line_bytes)
                if not size or (line is not None and not line.endswith(b"\n")):
                    check_whole(fh)  # the end: a cut .zst must not pass for a short one
                if not size:
                    return
                start = offset
                lineno += 1
                offset += size
                if line is None:
                    yield lineno, start, None
                    continue
                if line.startswith(_BOM):
                    line = line[3:]
                yield lineno, start, line.rstrip(b"\r\n")
        except InputError:
            raise
        except Exception as exc:
            err = _read_error(shard, lineno + 1, exc)
            if err is exc:
                raise
            raise err from exc


#: The blocks a plain shard is read in grow from the first size to the largest (one read-back
#: line reads little). Not larger: reads of 2 MB or more took three times the kernel time of
#: 1 MB reads here (1.0 vs 0.35 s for the 1.5 GB benchmark corpus).
FIRST_BLOCK = 1 << 16
LARGEST_BLOCK = 1 << 20
#: Buffers of finished reads, for the next (a fresh one is zeroed, page by page).
_SPARE: list[bytearray] = []


def plain_lines(
    fh: IO[bytes], limit: int, pos: int, stop: int
) -> Iterator[tuple[bytes | None, int]]:
    """``(line, size)`` for each line of a plain stream read from byte ``pos``: the line without
    its newline (None when longer than ``limit`` bytes: not held, only counted) and its size
    with the newline; the last line may lack one.

    The stream is read into a reused buffer, in blocks that grow to :data:`LARGEST_BLOCK`
    (smaller near ``stop``, past which only the line begun before it is finished), and each
    line is cut out with one copy; ``readline`` would scan every byte in Python's own loop and
    the newline strip would copy each line again.
    """
    largest = LARGEST_BLOCK
    buf = _SPARE.pop() if _SPARE else bytearray(largest)  # list.pop: atomic across threads
    if len(buf) < largest:
        buf = bytearray(largest)
    try:
        yield from _cut_plain(fh, buf, limit, pos, stop, largest)
    finally:
        if len(_SPARE) < 2:
            _SPARE.append(buf)


def _cut_plain(
    fh: IO[bytes], buf: bytearray, limit: int, pos: int, stop: int, largest: int
) -> Iterator[tuple[bytes | None, int]]:
    view = memoryview(buf)
    readinto = getattr(fh, "readinto", None)
    block = min(FIRST_BLOCK, largest)
    parts: list[bytes] | None = []  # the pieces of a line begun in an earlier block
    held = 0  # its bytes so far (0: no line is begun)
    while True:
        want = block if stop < 0 else min(block, max(stop - pos, FIRST_BLOCK))
        if readinto is not None:
            got = readinto(view[:want])
        else:  # a file object without readinto (some fsspec files)
            chunk = fh.read(want)
            got = len(chunk)
            view[:got] = chunk
        if not got:
            break
        i = 0
        while True:
            j = buf.find(b"\n", i, got)
            if j < 0:
                break
            if held:
                size = held + j + 1 - i
                line = None
                if parts is not None and size - 1 <= limit:
                    parts.append(bytes(view[i:j]))
                    line = b"".join(parts)
                parts, held = [], 0
            else:
                size = j + 1 - i
                line = bytes(view[i:j]) if j - i <= limit else None
            yield line, size
            i = j + 1
        if i < got:
            held += got - i
            if parts is not None:
                if held > limit:
                    parts = None  # too long: drop what was read, count the rest
                else:
                    parts.append(bytes(view[i:got]))
        pos += got
        if block < largest and (stop < 0 or pos < stop):
            block = min(2 * block, largest)
    if held:
        yield (b"".join(parts) if parts is not None else None), held


#: Decompressed bytes per block of a compressed read-back, and compressed bytes fed per call.
READBACK_BLOCK = 4 << 20
READBACK_FEED = 1 << 20


def lines_at(
    shard: Shard, offsets: Sequence[int], *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> list[bytes | None]:
    """The lines starting at ``offsets``, as :func:`iter_lines` yields them (BOM and line
    ending stripped; None for a line longer than ``max_line_bytes`` or where no line starts).

    A plain shard is seeked to each offset. A compressed one is decompressed once, up to the
    last of them, in large blocks from which only the lines wanted are cut (no iteration over
    the other lines: a long shard of long rows decompresses at zlib's speed). Should that read
    fail (a truncated or corrupt stream, an unreadable file), the shard is read line by line
    as :func:`iter_lines` reads it, up to the last line wanted: the lines before the damage
    come out as they would from it, and so does its error, with the ``shard:line`` where
    reading stopped (logged at debug level when it happens).

    Raises:
        InputError: The shard cannot be read; :class:`CorruptStreamError` when a compressed
            stream is truncated or corrupt before the last line wanted ends.
    """
    if is_table(shard.name):
        return table_lines_at(shard, offsets)
    if shard.name.endswith(".jsonl"):
        out: list[bytes | None] = []
        for off in offsets:
            # the generator (and its file) is closed as soon as it is dropped
            first = next(iter_lines(shard, max_line_bytes=max_line_bytes, start=off), None)
            out.append(None if first is None else first[2])
        return out
    want = sorted(set(offsets))
    if not want:
        return []
    try:
        with contextlib.closing(_blocks(shard)) as blocks:  # the file closes once all are cut
            found = _cut_lines(blocks, want, max_line_bytes)
    except Exception as exc:  # whatever it is, the line-by-line read says it as iter_lines does
        logger.debug("%s: read back line by line (%s: %s)", shard.name, type(exc).__name__, exc)
        found = lines_by_line(shard, want, max_line_bytes)
    return [found.get(off) for off in offsets]


def rows_at(
    shard: Shard, offsets: Sequence[int], *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> list[RowView | bytes | None]:
    """What :func:`lines_at` reads back, for :func:`~distprompt.read.fastrow.read_row` to take
    or to have been taken: the lines of a JSONL shard; of a table shard, a
    :class:`~distprompt.read.table.TableView` of each row the column checks vouch for, without
    the row's JSON line (:func:`~distprompt.read.table.table_rows_at`).

    Raises:
        InputError: As :func:`lines_at`.
    """
    if is_table(shard.name):
        return table_rows_at(shard, offsets)
    return list(lines_at(shard, offsets, max_line_bytes=max_line_bytes))


def lines_by_line(shard: Shard, want: Sequence[int], limit: int) -> dict[int, bytes | None]:
    """The lines starting at the byte offsets ``want`` (ascending), read line by line as
    :func:`iter_lines` reads them: :func:`lines_at`'s way when its block read fails."""
    found: dict[int, bytes | None] = {}
    wanted = set(want)
    last = want[-1] if want else -1
    for _, off, raw in iter_lines(shard, max_line_bytes=limit):
        if off in wanted:
            found[off] = raw
        if off >= last:
            break
    return found


def _blocks(shard: Shard) -> Generator[bytes, None, None]:
    """The decompressed bytes of a compressed shard in blocks of up to :data:`READBACK_BLOCK` bytes;
    raises at the end of a stream that is cut (only when a block past the end is asked for)."""
    if shard.url is None and shard.name.endswith(".gz"):
        with open(shard.path, "rb") as fh:
            yield from _gunzip(fh)
        return
    with open_shard(shard.url or shard.path) as fh:
        while True:
            block = fh.read(READBACK_BLOCK)
            if not block:
                check_whole(fh)
                return
            yield block


def _gunzip(fh: IO[bytes]) -> Generator[bytes, None, None]:
    """The members of a gzip file, decompressed with zlib (as :mod:`gzip` reads them: one
    after another, zero bytes between or after them passed over)."""
    d = zlib.decompressobj(wbits=31)
    data = b""
    while True:
        if not data:
            data = fh.read(READBACK_FEED)
            if not data:
                if not d.eof:
                    raise EOFError("the gzip stream ended before its end-of-stream marker")
                return
        block = d.decompress(data, READBACK_BLOCK)
        data = d.unconsumed_tail
        if block:
            yield block
        if d.eof:
            data = d.unused_data
            while True:  # the next member, after any zero padding
                data = data.lstrip(b"\x00")
                if data:
                    break
                data = fh.read(READBACK_FEED)
                if not data:
                    return
            d = zlib.decompressobj(wbits=31)


def _cut_lines(blocks: Iterator[bytes], want: Sequence[int], limit: int) -> dict[int, bytes | None]:
    """The lines starting at the ascending offsets ``want`` of the stream cut into ``blocks``
    (None where no line starts or for a line longer than ``limit``, newline excluded)."""
    found: dict[int, bytes | None] = {}
    t = 0  # the next offset wanted
    pos = 0  # stream offset of the block's first byte
    before = 10  # the byte before the block ("\n" at the start: a line starts at 0)
    parts: list[bytes] | None = None  # the line being cut out, None when too long
    at = -1  # its offset, -1 when none is being cut out
    size = 0  # its bytes so far
    for block in blocks:
        i = 0
        n = len(block)
        while True:
            if at >= 0:
                j = block.find(b"\n", i)
                piece = block[i:] if j < 0 else block[i : j + 1]
                size += len(piece)
                if parts is not None:
                    if size - (j >= 0) > limit:
                        parts = None
                    else:
                        parts.append(piece)
                if j < 0:
                    break
                found[at] = _line(parts)
                at = -1
                i = j + 1
            if t == len(want):
                return found
            off = want[t]
            if off >= pos + n:
                break
            k = off - pos
            t += 1
            if k < i or (block[k - 1] if k else before) != 10:
                found[off] = None  # not a line start
                continue
            at, i, parts, size = off, k, [], 0
        pos += n
        before = block[-1] if n else before
    if at >= 0:  # the last line, without a newline
        found[at] = _line(parts)
    return found


def _line(parts: list[bytes] | None) -> bytes | None:
    if parts is None:
        return None
    line = b"".join(parts)
    if line.startswith(_BOM):
        line = line[3:]
    return line.rstrip(b"\r\n")


def _read_error(shard: Shard, line: int, exc: Exception) -> Exception:
    where = f"{shard.name}:{line}"
    found = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(exc, _CORRUPT_STREAM) or type(exc).__name__ == "ZstdError":
        return CorruptStreamError(
            f"{where}: expected a complete, valid compressed stream, found {found}; the file is "
            "truncated or corrupt — re-copy it, leave it out, or run with --on-error skip to keep "
            "the rows before this line"
        )
    if isinstance(exc, OSError):
        return InputError(
            f"{where}: expected a readable file, found {exc.strerror or found}; check the disk "
            "or the network mount, then run again"
        )
    return exc


def split_shard(shard: Shard, unit_bytes: int) -> list[tuple[int, int | None]]:
    """Byte ranges ``[start, end)`` of about ``unit_bytes`` that start at line starts.

    A line belongs to the range its first byte lies in, so reading every range (with
    :func:`iter_lines`) reads every line once. Compressed shards are one range.
    """
    if not shard.name.endswith(".jsonl") or shard.size <= unit_bytes:
        return [(0, None)]
    starts = [0]
    try:
        with open_shard(shard.url or shard.path) as fh:
            at = unit_bytes
            while at < shard.size:
                fh.seek(at - 1)
                pos = at - 1
                while True:  # the next line start at or after ``at``
                    chunk = fh.read(1 << 16)
                    if not chunk:
                        pos = -1
                        break
                    i = chunk.find(b"\n")
                    if i >= 0:
                        pos += i + 1
                        break
                    pos += len(chunk)
                if pos < 0 or pos >= shard.size:
                    break
                starts.append(pos)
                at = pos + unit_bytes
    except OSError as exc:
        raise InputError(
            f"{shard.name}: expected a readable file, found {exc.strerror or exc}; fix its "
            "permissions or leave it out of DATA"
        ) from exc
    ends: list[int | None] = [*starts[1:], None]
    return list(zip(starts, ends, strict=True))


def iter_rows(
    shard: Shard,
    *,
    tally: Tally | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    parse: Callable[..., Any] = parse_row,
    start: int = 0,
    end: int | None = None,
    lines: list[int] | None = None,
) -> Iterator[Any]:
    """Yield the valid rows of a shard.

    Args:
        shard: The shard to read.
        tally: Where bad rows and anomalies go. With ``on_error="skip"`` bad rows are counted
            by reason and skipped, and a truncated or corrupt compressed stream is counted once
            under ``corrupt_stream`` (the rows before it are kept); with ``"raise"`` (and when
            None) the first bad row raises :class:`DataError`. Blank lines are counted as the
            anomaly ``blank_line``.
        max_line_bytes: Longer lines are refused (``line_too_long``) without being held in
            memory.
        parse: Turns ``(raw, shard=, line=, offset=)`` into the row yielded (raising
            :class:`DataError` for a bad one): :func:`~distprompt.read.validate.parse_row` (a
            :class:`Row`) or :func:`~distprompt.read.fastrow.read_row` (what the pass needs).
        start, end: Only the lines starting in this byte range (see :func:`iter_lines`); of a
            Parquet or Arrow shard, the rows in this range of row indices.
        lines: When given, ``lines[0]`` is set to the number of lines read.

    Blank lines (empty or whitespace only) are not rows and not errors: they are passed over in
    both modes and counted as an anomaly. An empty shard is logged as a warning.

    Raises:
        DataError: A bad row, unless the tally skips them.
        InputError: The shard cannot be read; :class:`CorruptStreamError` (unless the tally
            skips bad rows) when a compressed stream is truncated or corrupt.

    Example:
        >>> tally = Tally(on_error="skip")
        >>> rows = list(iter_rows(discover_shards("data")[0], tally=tally))  # doctest: +SKIP
        >>> tally.skipped  # doctest: +SKIP
        Counter({'not_json': 1})
    """
    if tally is None:
        tally = Tally()
    if is_table(shard.name):
        yield from iter_table_rows(
            shard, tally=tally, parse=parse, start=start, end=end, lines=lines
        )
        return
    lineno = 0
    try:
        for lineno, offset, raw in iter_lines(
            shard, max_line_bytes=max_line_bytes, start=start, end=end
        ):
            # isspace() scans in place; strip() would copy every (possibly huge) line.
            if raw is not None and (not raw or raw.isspace()):
                tally.anomaly("blank_line", f"{shard.name}:{lineno}")
                continue
            try:
                row = parse(raw, shard=shard.name, line=lineno, offset=offset)
            except DataError as exc:
                tally.bad(exc)
                continue
            yield row
    except CorruptStreamError as exc:
        tally.lost_stream(exc)
        return
    finally:
        if lines is not None:
            lines[0] = lineno
    if lineno == 0 and start == 0 and end is None:
        logger.warning("%s: an empty shard (no lines), nothing to read", shard.name)
