"""Columnar shards: Parquet files and the Arrow files of a ``datasets.save_to_disk`` folder.

A table shard holds the columns of a JSONL row (``input_ids``, ``loss_mask``, ``seq_len``,
``n_prompt_tokens``, ``n_response_tokens``, ``source``; other columns are not read). It is
streamed by record batch, so memory is bounded by a batch (and, for Parquet, by the writer's
row group), never by the file.

Provenance: the shard's path relative to DATA, ``line`` = the 1-based row number in the file and
``offset`` = the 0-based row index (``pyarrow.parquet.read_table(f).slice(offset, 1)`` is the
row; for an Arrow file, the row ``offset`` of the concatenated record batches).

Every row is validated as :func:`~distprompt.read.validate.parse_row` validates a JSONL line, with
the same verdicts and messages: a batch whose columns have the expected types is checked with
whole-column numpy operations, and any row those checks cannot vouch for (a null, a float
column, a wrong length, an id below 0 ...) is written as the JSON object of its row and handed
to the same parser, which raises the exact :class:`~distprompt.errors.DataError` (reason,
``shard:row``). A missing column is therefore ``missing_<column>`` on each row.

A file that is not Parquet (or not Arrow) raises :class:`~distprompt.errors.InputError` naming
it; a row group or batch that cannot be decoded raises
:class:`~distprompt.errors.CorruptStreamError` naming the first row it holds (skippable, as a
corrupt compressed stream is: the rows before it are kept).
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import orjson

from distprompt.errors import CorruptStreamError, DataError, InputError
from distprompt.read.fastrow import RowView, _view
from distprompt.read.validate import REQUIRED_KEYS, parse_row
from distprompt.records import TABLE_SUFFIXES, Provenance

if TYPE_CHECKING:
    import pyarrow as pa

    from distprompt.read.tally import Tally
    from distprompt.records import Shard

__all__ = [
    "TableView",
    "import_arrow",
    "is_table",
    "iter_table_rows",
    "split_table",
    "table_lines_at",
    "table_rows_at",
]

logger = logging.getLogger("distprompt.read.table")

_T = TypeVar("_T")

#: Rows per slice of an Arrow record batch (zero-copy; ``save_to_disk`` writes batches of 1000
#: rows): a slice of the benchmark's longest rows (50k tokens) is ~30 MB.
BATCH_ROWS = 128

#: Rows per record batch decoded from a Parquet row group. pyarrow decodes small batches of long
#: rows faster than whole groups (its buffers are reused, not allocated anew for each group), and
#: a read-back (:func:`table_rows_at`, in batches of :data:`READBACK_BATCH_ROWS`) stops after
#: the batch holding the last row it wants of a group. Measured on the benchmark's Parquet copy
#: (row groups of 128 rows): reading every row as the pass does took 3.3-3.7 s CPU and
#: 158-179 MB peak RSS in batches of 8 or 16 rows,
#: against 5.5-6.1 s and 293 MB in batches of 128 (3.7-4.5 s, 241 MB in 64); reading back the
#: 50 SWE-agent picks (26 of its 40 groups) took 0.6 s against 2.5 s in whole groups.
PARQUET_BATCH_ROWS = 16

#: Rows per record batch a read-back (:func:`table_rows_at`) decodes: it stops after the batch
#: holding the last row it wants of a group, so smaller batches decode fewer rows it does not
#: want. Measured reading back the benchmark's 500 picks from its Parquet copy (one process,
#: CPU, 4 runs each, interleaved): 0.87-0.98 s and 120 MB peak RSS in batches of 8, 0.92-1.9 s
#: and 128-142 MB in batches of 16 (batches of 4: 0.94-1.24 s).
READBACK_BATCH_ROWS = 8


_IMPORT = threading.Lock()


def import_arrow() -> None:
    """Import pyarrow's modules this reader uses, once, under a lock.

    pyarrow's package imports its own submodules in a cycle: imported from two threads at once
    (a selection thread reading a row back while the main one writes ``suite.parquet``), one of
    them got a partially initialized module (``AttributeError``). Discovery calls this in the
    main thread as soon as DATA holds a table, before any other thread starts.
    """
    with _IMPORT:
        import pyarrow.ipc
        import pyarrow.parquet
        import pyarrow.types  # noqa: F401


def is_table(name: str) -> bool:
    """Whether a shard name is a Parquet or Arrow file (read by this module)."""
    return name.lower().endswith(TABLE_SUFFIXES)


class _Reader:
    """One open table shard: its schema, row count and batches (Parquet or Arrow IPC)."""

    def __init__(self, shard: Shard) -> None:
        import_arrow()
        import pyarrow as pa
        import pyarrow.ipc as ipc
        import pyarrow.parquet as pq

        from distprompt.read.remote import open_url

        self.name = shard.name
        self.parquet = shard.name.lower().endswith(".parquet")
        self._fh: Any = None
        try:
            if shard.url is not None:
                self._fh = open_url(shard.url)
                src: Any = self._fh
            else:
                src = pa.memory_map(str(shard.path)) if not self.parquet else str(shard.path)
            if self.parquet:
                self.pf = pq.ParquetFile(src)
                self.schema = self.pf.schema_arrow
                sizes = [
                    self.pf.metadata.row_group(i).num_rows for i in range(self.pf.num_row_groups)
                ]
                self.group_starts = np.cumsum([0, *sizes]).tolist()
                self.rows = int(self.group_starts[-1])
            else:
                self._src = src
                try:
                    self.ipc_file: Any = ipc.open_file(src)
                    self.schema = self.ipc_file.schema
                except pa.ArrowInvalid:
                    if hasattr(src, "seek"):
                        src.seek(0)
                    self.ipc_file = None
                    self.schema = ipc.open_stream(src).schema
        except InputError:
            raise
        except OSError as exc:
            if isinstance(exc, (FileNotFoundError, PermissionError)):
                found = exc.strerror or str(exc)
                hint = "fix its permissions or leave it out of DATA"
            else:
                found = f"{type(exc).__name__}: {exc}"
                hint = "re-copy it, re-write it, or leave it out of DATA"
            self.close()
            kind = "Parquet" if self.parquet else "Arrow (IPC)"
            raise InputError(
                f"{shard.name}: expected a readable {kind} file, found {found}; {hint}"
            ) from exc
        except Exception as exc:  # pyarrow.ArrowInvalid is a ValueError
            self.close()
            kind = "Parquet" if self.parquet else "Arrow (IPC)"
            raise InputError(
                f"{shard.name}: expected a {kind} file, found {type(exc).__name__}: {exc}; "
                "re-copy it, re-write it, or leave it out of DATA"
            ) from exc
        self.columns = [k for k in REQUIRED_KEYS if k in self.schema.names]
        self._at = 0  # the first row of the batch being decoded (:meth:`batches`)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def batches(
        self,
        start: int,
        end: int | None,
        *,
        wanted: Sequence[int] | None = None,
    ) -> Iterator[tuple[int, pa.RecordBatch]]:
        """``(row index of its first row, batch)`` for the rows in ``[start, end)``; a batch
        that cannot be decoded raises :class:`CorruptStreamError` naming its first row.

        With ``wanted`` (ascending row indices; Parquet), only the row groups holding one of
        them are decoded, each up to the batch holding the last one it holds.
        """
        it = self._raw_batches(start, wanted)
        while True:
            try:
                first, batch = next(it)
            except StopIteration:
                return
            except Exception as exc:
                raise CorruptStreamError(
                    f"{self.name}:{self._at + 1}: expected a complete, valid "
                    f"{'row group' if self.parquet else 'record batch'}, found "
                    f"{type(exc).__name__}: {exc}; the file is truncated or corrupt — re-copy "
                    "it, leave it out, or run with --on-error skip to keep the rows before "
                    "this one"
                ) from exc
            lo = max(start - first, 0)
            hi = batch.num_rows if end is None else min(batch.num_rows, end - first)
            if hi <= lo:
                if end is not None and first >= end:
                    return
                continue
            if lo or hi < batch.num_rows:
                batch = batch.slice(lo, hi - lo)
            yield first + lo, batch

    def _raw_batches(
        self, start: int, wanted: Sequence[int] | None
    ) -> Iterator[tuple[int, pa.RecordBatch]]:
        """The batches from the one holding row ``start``; ``self._at`` is the first row of
        the batch being decoded (what a decoding error names)."""
        import pyarrow.ipc as ipc

        cols = self.columns
        self._at = 0
        if self.parquet:
            for g in range(self.pf.num_row_groups):
                first, stop = self.group_starts[g], self.group_starts[g + 1]
                if stop <= start:
                    continue
                last = stop - 1
                if wanted is not None:
                    k = bisect.bisect_left(wanted, stop)
                    if k == 0 or wanted[k - 1] < first:
                        continue  # no row wanted in this group: not decoded
                    last = wanted[k - 1]
                self._at = first
                for batch in self.pf.iter_batches(
                    batch_size=PARQUET_BATCH_ROWS if wanted is None else READBACK_BATCH_ROWS,
                    row_groups=[g],
                    columns=cols,
                    use_threads=False,
                ):
                    yield self._at, batch
                    self._at += batch.num_rows
                    if self._at > last:
                        break  # the rest of the group is not decoded
            return
        if self.ipc_file is not None:
            batches: Iterator[Any] = (
                self.ipc_file.get_batch(i) for i in range(self.ipc_file.num_record_batches)
            )
        else:
            if hasattr(self._src, "seek"):
                self._src.seek(0)
            batches = iter(ipc.open_stream(self._src))
        for batch in batches:
            n = batch.num_rows
            if self._at + n > start:
                batch = batch.select(cols)
                for i in range(0, n, BATCH_ROWS):
                    yield self._at + i, batch.slice(i, BATCH_ROWS)
            self._at += n


def _is_int_list(t: pa.DataType) -> bool:
    import pyarrow.types as pt

    return (pt.is_list(t) or pt.is_large_list(t)) and pt.is_integer(t.value_type)


def _fast_columns(batch: pa.RecordBatch) -> bool:
    """Whether the batch has all six columns with types the fast checks read."""
    import pyarrow.types as pt

    s = batch.schema
    if s.names.count("source") != 1 or len(set(s.names)) != len(s.names):
        return False
    try:
        types = {k: s.field(k).type for k in REQUIRED_KEYS}
    except KeyError:
        return False
    return (
        _is_int_list(types["input_ids"])
        and _is_int_list(types["loss_mask"])
        and all(pt.is_integer(types[k]) for k in REQUIRED_KEYS[2:5])
        and (pt.is_string(types["source"]) or pt.is_large_string(types["source"]))
    )


def _ints(arr: pa.Array) -> np.ndarray:
    """A numpy view of an integer array without nulls, from its data buffer.

    Not ``Array.to_numpy`` (nor ``numpy.asarray``): pyarrow imports pandas, when installed, the
    first time it converts an array so: in each worker process reading Parquet (~76 MB and
    0.6 s, see ``cli._keep_pandas_out``), and in the command's own process, from a selection
    thread reading picks back, it raced the main thread's import of it (exports failed with
    "partially initialized module 'pandas'").
    """
    import pyarrow.types as pt

    t = arr.type
    dtype = np.dtype(f"{'i' if pt.is_signed_integer(t) else 'u'}{t.bit_width // 8}")
    data = arr.buffers()[1]
    if data is None or not len(arr):
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(data, dtype=dtype, count=arr.offset + len(arr))[arr.offset :]


def _list_parts(col: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
    """``(values, offsets)`` of a list column (offsets index ``values``), or None when a
    value is null."""
    values = col.values
    if values.null_count:
        return None
    return _ints(values), _ints(col.offsets).astype(np.int64)


def _nonempty(offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of a list column with one element or more, and where each starts: the
    indices ``numpy.ufunc.reduceat`` reduces each of them over (an empty row between two
    adds nothing to the first)."""
    rows = np.flatnonzero(np.diff(offsets) > 0)
    return rows, offsets[rows]


class TableView(RowView):
    """A :class:`RowView` of one row of a record batch (arrays shared with the batch; what
    outlives the batch — prompt ids, mask, reply ids — is copied)."""

    __slots__ = ("_a", "_ids", "_m", "_mask", "_top")
    _ids: np.ndarray  # the batch's flat ids
    _mask: np.ndarray  # the batch's flat mask (int8)
    _a: int  # the row's first id in ``_ids``
    _m: int  # its first mask value in ``_mask``
    _top: int  # an upper bound of its ids (the batch's largest)

    def top_id(self, limit: int) -> int | None:
        if self._top < limit:
            return None
        top = int(self._ids[self._a : self._a + self.seq_len].max())
        return top if top >= limit else None

    def prompt_mask(self) -> np.ndarray:
        return self._mask[self._m : self._m + self.n_prompt_tokens].astype(np.int8)

    def first_response_span(self) -> tuple[int, int]:
        n, m = self.n_prompt_tokens, self._m
        tail = self._mask[m + n : m + self.seq_len]
        p = int(tail.argmax()) if tail.size else 0
        if not tail.size or tail[p] != 1:
            return n, self.seq_len
        rest = tail[p:]
        q = int(rest.argmin())
        return n + p, (self.seq_len if rest[q] != 0 else n + p + q)

    def ids(self, start: int, end: int) -> np.ndarray:
        if end <= start:
            return np.zeros(0, dtype=np.int64)
        return self._ids[self._a + start : self._a + end].astype(np.int64)


def _row_json(batch: pa.RecordBatch, i: int) -> bytes:
    """Row ``i`` as the JSON line a JSONL shard would hold (the columns read only)."""
    row = batch.slice(i, 1).to_pylist()[0]
    return orjson.dumps(row, default=lambda v: {"unreadable": type(v).__name__})


def _batch_views(batch: pa.RecordBatch, first: int, base: int, name: str) -> list[RowView | bytes]:
    """Each row of a batch: a :class:`TableView` when the whole-column checks vouch for it,
    else its JSON line (for the row parser, which says what is wrong or returns the row)."""
    n = batch.num_rows
    if not _fast_columns(batch) or any(batch.column(k).null_count for k in REQUIRED_KEYS):
        return [_row_json(batch, i) for i in range(n)]
    ids_col, mask_col = batch.column("input_ids"), batch.column("loss_mask")
    ids_parts, mask_parts = _list_parts(ids_col), _list_parts(mask_col)
    if ids_parts is None or mask_parts is None:
        return [_row_json(batch, i) for i in range(n)]
    ids, ioff = ids_parts
    mask, moff = mask_parts
    # a sliced column's values run on at both ends: keep the batch's own
    ids, mask = ids[ioff[0] : ioff[-1]], mask[moff[0] : moff[-1]]
    ioff, moff = ioff - ioff[0], moff - moff[0]
    seq = _ints(batch.column("seq_len")).astype(np.int64)
    npr = _ints(batch.column("n_prompt_tokens")).astype(np.int64)
    nre = _ints(batch.column("n_response_tokens")).astype(np.int64)
    ilen = np.diff(ioff)
    ok = (
        (ilen == seq)
        & (np.diff(moff) == seq)
        & (npr > 0)
        & (npr <= seq)
        & (nre == seq - npr)
        & (seq.astype(np.uint64) < 2**62)
    )
    turns = np.zeros(n, dtype=np.int64)
    # the largest id of the batch bounds each row's (the exact one is read on demand, for a
    # bound at or above the vocabulary); per-row reductions only when the batch holds a
    # negative id or one of 2**63 or more
    bound = int(ids.max()) if ids.size else 0
    if ids.size and ((ids.dtype.kind == "i" and ids.min() < 0) or bound >= 2**63):
        ids_rows, ids_at = _nonempty(ioff)
        if ids.dtype.kind == "i":
            ok[ids_rows[np.minimum.reduceat(ids, ids_at) < 0]] = False
        else:
            ok[ids_rows[np.maximum.reduceat(ids, ids_at) >= 2**63]] = False
        bound = 2**63 - 1
    mask_rows, mask_at = _nonempty(moff)
    if mask_rows.size:
        if mask.min() < 0 or mask.max() > 1:
            high = np.maximum.reduceat(mask, mask_at) > 1
            bad = high | (np.minimum.reduceat(mask, mask_at) < 0)
            ok[mask_rows[bad]] = False
            mask = np.clip(mask, 0, 1)  # the rows left ok hold only 0s and 1s
        mask = mask.astype(np.int8, copy=False)
        # trained turns: the 1s of the mask after a 0 (not at a row's first element, which
        # belongs to its own row), and each row's first element when it is 1
        rises = np.flatnonzero(mask[1:] > mask[:-1]) + 1
        rises = rises[~np.isin(rises, mask_at)]
        row = np.searchsorted(mask_at, rises, side="right") - 1
        counts = np.bincount(row, minlength=mask_rows.size) + (mask[mask_at] == 1)
        turns[mask_rows] = counts
    lo = ioff[:-1]
    sources = batch.column("source").to_pylist()
    out: list[RowView | bytes] = []
    for i in range(n):
        src = sources[i]
        if not ok[i] or not src.strip():
            out.append(_row_json(batch, i))
            continue
        k = int(npr[i])
        a = int(lo[i])
        where = Provenance(shard=name, line=base + i + 1, offset=first + i)
        v = _view(
            TableView,
            src,
            int(seq[i]),
            k,
            int(nre[i]),
            where,
            ids[a : a + k].astype(np.int64),
            int(turns[i]),
        )
        v._ids = ids
        v._mask = mask
        v._a = a
        v._m = int(moff[i])
        v._top = bound
        out.append(v)
    return out


def iter_table_rows(
    shard: Shard,
    *,
    tally: Tally,
    parse: Callable[..., Any],
    start: int = 0,
    end: int | None = None,
    lines: list[int] | None = None,
) -> Iterator[Any]:
    """Yield the valid rows of a table shard, as :func:`~distprompt.read.shards.iter_rows`
    yields those of a JSONL one (``start``/``end`` are row indices here; line numbers count
    from 1 at ``start``).

    ``parse`` is :func:`~distprompt.read.validate.parse_row` (a
    :class:`~distprompt.records.Row` for each row) or the pass's
    :func:`~distprompt.read.fastrow.read_row` (a :class:`TableView`, or what it returns for the
    rows the column checks leave to it).

    Raises:
        DataError: A bad row, unless the tally skips them.
        InputError: The file is not a table of its kind or cannot be read;
            :class:`CorruptStreamError` (unless the tally skips) for a batch that does not
            decode.
    """
    reader = _Reader(shard)
    rows = parse is not parse_row
    count = 0
    try:
        for first, batch in reader.batches(start, end):
            base = first - start
            got = _batch_views(batch, first, base, shard.name) if rows else None
            for i in range(batch.num_rows):
                count = base + i + 1
                item = got[i] if got is not None else _row_json(batch, i)
                if not isinstance(item, bytes):
                    yield item
                    continue
                try:
                    row = parse(item, shard=shard.name, line=count, offset=first + i)
                except DataError as exc:
                    tally.bad(exc)
                    continue
                yield row
    except CorruptStreamError as exc:
        tally.lost_stream(exc)
    finally:
        reader.close()
        if lines is not None:
            lines[0] = count
    if count == 0 and start == 0 and end is None:
        logger.warning("%s: an empty table (no rows), nothing to read", shard.name)


def split_table(shard: Shard, unit_bytes: int) -> tuple[list[tuple[int, int | None]], int]:
    """Row ranges ``[start, end)`` of a Parquet shard, whole row groups of about ``unit_bytes``
    (uncompressed) each, and its row count; an Arrow shard (or a Parquet one of a single
    range) is one range ``(0, None)``.

    Raises:
        InputError: The file is not Parquet.
    """
    if not shard.name.lower().endswith(".parquet"):
        return [(0, None)], 0
    reader = _Reader(shard)
    try:
        meta = reader.pf.metadata
        sizes = [meta.row_group(g).total_byte_size for g in range(meta.num_row_groups)]
    finally:
        reader.close()
    starts, held = [0], 0
    for g, size in enumerate(sizes):
        if held and held + size > unit_bytes:
            starts.append(reader.group_starts[g])
            held = 0
        held += size
    rows = reader.rows
    if len(starts) == 1:
        return [(0, None)], rows
    ends: list[int | None] = [*starts[1:], rows]
    return list(zip(starts, ends, strict=True)), rows


def table_lines_at(shard: Shard, offsets: Sequence[int]) -> list[bytes | None]:
    """The rows at the 0-based row indices ``offsets``, each as the JSON line of its row (None
    past the last row).

    Raises:
        InputError: The file cannot be read (:class:`CorruptStreamError` when the batch holding
            a row does not decode).
    """
    return _rows_at(shard, offsets, lambda batch, i, off: _row_json(batch, i))


def table_rows_at(shard: Shard, offsets: Sequence[int]) -> list[RowView | bytes | None]:
    """The rows at the 0-based row indices ``offsets``, as the pass read them (the read-back of
    :func:`~distprompt.read.shards.rows_at`): a :class:`TableView` straight from the Arrow
    buffers when the column checks vouch for the row, else its JSON line (for
    :func:`~distprompt.read.fastrow.read_row`, which says what is wrong); None past the last
    row. A Parquet row group is decoded only up to the last row wanted in it.

    Raises:
        InputError: The file cannot be read (:class:`CorruptStreamError` naming the first row
            of the batch, holding a row wanted or before it, that does not decode).
    """

    def view(batch: pa.RecordBatch, i: int, off: int) -> RowView | bytes:
        got = _batch_views(batch.slice(i, 1), off, off, shard.name)[0]
        if isinstance(got, TableView):
            # the row's own values, not a view of the batch's buffers
            got._ids, got._mask = got._ids.copy(), got._mask.copy()
        return got

    return _rows_at(shard, offsets, view)


def _rows_at(
    shard: Shard, offsets: Sequence[int], make: Callable[[pa.RecordBatch, int, int], _T]
) -> list[_T | None]:
    """``make(batch, i, offset)`` for the row at each of ``offsets`` (row ``i`` of ``batch``),
    None past the last row."""
    want = sorted(set(offsets))
    found: dict[int, _T] = {}
    if want:
        reader = _Reader(shard)
        try:
            t = 0
            for first, batch in reader.batches(want[0], want[-1] + 1, wanted=want):
                while t < len(want) and want[t] < first:
                    t += 1  # in a group not read (cannot be): never another row for it
                while t < len(want) and want[t] < first + batch.num_rows:
                    found[want[t]] = make(batch, want[t] - first, want[t])
                    t += 1
                if t == len(want):
                    break
        finally:
            reader.close()
    return [found.get(off) for off in offsets]
