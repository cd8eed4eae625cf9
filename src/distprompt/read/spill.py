"""Candidates' feature windows kept in a temporary file instead of memory.

A pool holds, per candidate, the window of prompt ids its selection features are computed from
(:func:`distprompt.records.feature_window`: up to 512 ids, ~1.1 KB on average on the benchmark
corpus): most of a pool's memory, and it grows with the corpus until every pool is full — all
the pools are held at once between the end of the pass and their selection. The pass's merge
(worker processes or Ray) writes the windows of the candidates that enter the merged pools to
one temporary file (:class:`WindowStore`); a candidate keeps a :class:`SpilledWindow` (where,
how many ids, ~100 bytes), read back when its source is selected. Candidates that a later
merge evicts leave their bytes in the file: the file grows with the pools' insertions, about
``k * (1 + ln(n / k))`` per source of ``n`` unique prompts, not with the corpus.

The file is created unlinked (nothing is left behind) in the temporary directory
(``TMPDIR``); when it cannot be written (a full disk) the windows stay in memory, with a
warning, and the run goes on.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["SpilledWindow", "WindowStore"]

logger = logging.getLogger("distprompt.read.spill")

#: Buffers a ``pwritev`` call takes at most (POSIX guarantees 16; Linux and macOS take 1024).
_IOV_MAX = 1024


def _write_at(fd: int, arrays: Sequence[np.ndarray], at: int) -> None:
    """Write ``arrays`` one after another from offset ``at``: with ``pwritev`` where the
    platform has it, the arrays as they are (no joined copy), a batch of them a call."""
    vectored = hasattr(os, "pwritev")
    step = _IOV_MAX if vectored else max(len(arrays), 1)
    for i in range(0, len(arrays), step):
        bufs = [np.ascontiguousarray(a).data for a in arrays[i : i + step]]
        want = sum(b.nbytes for b in bufs)
        done = os.pwritev(fd, bufs, at) if vectored else 0
        if done < want:  # a short write (or no pwritev): the rest from one joined copy
            data = b"".join(b.tobytes() for b in bufs)
            while done < want:
                done += os.pwrite(fd, data[done:], at + done)
        at += want


class SpilledWindow:
    """Where one candidate's window is in a :class:`WindowStore`; ``read()`` gives the ids.

    Pickles as the ids themselves (another process cannot read this one's file)."""

    __slots__ = ("dtype", "n", "offset", "store")

    def __init__(self, store: WindowStore, offset: int, n: int, dtype: np.dtype[Any]) -> None:
        self.store = store
        self.offset = offset
        self.n = n
        self.dtype = dtype

    def __len__(self) -> int:
        return self.n

    def read(self) -> np.ndarray:
        return self.store.read(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_as_array, (self.read(),))

    def __repr__(self) -> str:
        return f"SpilledWindow(offset={self.offset}, n={self.n}, dtype={self.dtype})"


def _as_array(a: np.ndarray) -> np.ndarray:
    return a


class WindowStore:
    """An append-only temporary file of windows (see the module docstring).

    Appends come from one thread (the pass's merge) while selection threads read: writes and
    reads name their offsets (``pwrite`` / ``pread``), and appends take a lock.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self._lock = threading.Lock()
        self._size = 0
        self._fh: Any = None
        self._dir = directory
        self.failed: str | None = None  # why the file could not be written: windows in memory
        self.spilled = 0  # windows written
        self.kept = 0  # windows kept in memory after a failure

    @property
    def size(self) -> int:
        """Bytes written to the file."""
        return self._size

    def put(self, windows: Sequence[np.ndarray]) -> list[SpilledWindow] | None:
        """Write ``windows`` (1-d integer arrays) and return where each one is; None when the
        file cannot be written (the caller keeps the arrays: counted in :attr:`kept`)."""
        if not windows:
            return []
        if self.failed is not None:
            self.kept += len(windows)
            return None
        with self._lock:
            try:
                if self._fh is None:
                    # closed by close() (or when the store is collected): it outlives this call
                    self._fh = tempfile.TemporaryFile(  # noqa: SIM115
                        prefix="distprompt-windows-", dir=self._dir
                    )
                start = self._size
                refs, at = self._refs(windows, start)
                _write_at(self._fh.fileno(), windows, start)
            except OSError as exc:
                self.failed = f"{type(exc).__name__}: {exc}"
                self.kept += len(windows)
                where = self._dir if self._dir is not None else tempfile.gettempdir()
                logger.warning(
                    "could not write the candidates' feature windows to a temporary file in "
                    "%s (%s): they are kept in memory from here on (set TMPDIR to a directory "
                    "with free space to keep the memory flat)",
                    where,
                    self.failed,
                )
                return None
            self._size = at
            self.spilled += len(refs)
            return refs

    def _refs(self, windows: Sequence[np.ndarray], start: int) -> tuple[list[SpilledWindow], int]:
        """Where each of ``windows`` goes, written from ``start``; and where the next one does."""
        sizes = [w.nbytes for w in windows]
        ends = np.cumsum(sizes).tolist()
        refs = [
            SpilledWindow(self, start + end - size, int(w.shape[0]), w.dtype)
            for w, size, end in zip(windows, sizes, ends, strict=True)
        ]
        return refs, start + (ends[-1] if ends else 0)

    def read(self, ref: SpilledWindow) -> np.ndarray:
        """The ids of one window."""
        fh = self._fh
        if fh is None or fh.closed:
            raise RuntimeError("the window store is closed: the pools it held are done with")
        nbytes = ref.n * ref.dtype.itemsize
        data = os.pread(fh.fileno(), nbytes, ref.offset)
        if len(data) != nbytes:
            raise OSError(
                f"expected {nbytes} bytes at {ref.offset} of the window store, found "
                f"{len(data)}: the temporary file was truncated"
            )
        return np.frombuffer(data, dtype=ref.dtype)

    def close(self) -> None:
        """Delete the file (the windows it holds can no longer be read)."""
        with self._lock:
            if self._fh is not None:
                self._fh.close()

    def __enter__(self) -> WindowStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
