"""Atomic writes: an interrupted run never leaves a file that looks complete.

Each file is written to a hidden temp file beside its target, flushed to disk, then renamed onto
the target; any failure (a full disk, Ctrl-C, SIGTERM) removes the temp file and surfaces as an
:class:`~distprompt.errors.OutputError` (or the interruption itself). Files get the permissions of
an ordinary ``open()`` (``0o666`` minus the umask), not the private mode of a temp file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from distprompt.errors import DistpromptError, OutputError

__all__ = ["atomic_open", "atomic_write_bytes", "atomic_write_lines", "umask"]

_UMASK: list[int] = []


def umask() -> int:
    """The process umask (read once: reading it means setting it, briefly)."""
    if not _UMASK:
        current = os.umask(0o022)
        os.umask(current)
        _UMASK.append(current)
    return _UMASK[0]


@contextlib.contextmanager
def atomic_open(path: Path) -> Iterator[IO[bytes]]:
    """Open a temp file beside ``path``; on success fsync and rename it onto ``path``.

    On any exception (including KeyboardInterrupt) the temp file is removed and ``path`` is left
    untouched.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise OutputError(
            f"{path.parent}: expected a writable folder, found {exc.strerror or exc}; "
            "choose another --out or fix its permissions"
        ) from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fd, 0o666 & ~umask())  # mkstemp makes it private (0600)
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and not isinstance(exc, DistpromptError):
            raise OutputError(
                f"{path}: could not write ({exc.strerror or exc}); "
                "check free disk space and permissions, then run again"
            ) from exc
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_open(path) as fh:
        fh.write(data)


def atomic_write_lines(path: Path, lines: Iterable[bytes]) -> None:
    """Write each of ``lines`` followed by ``\\n`` to ``path`` atomically."""
    with atomic_open(path) as fh:
        for line in lines:
            fh.write(line)
            fh.write(b"\n")
