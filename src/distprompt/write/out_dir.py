"""The output folder and atomic writes: an interrupted run never leaves a file (or a folder)
that looks complete.

:func:`check_out_dir` refuses an unusable ``--out`` before any work; :func:`prepare_out_dir`
builds the folder beside it and renames it into place.

Each file is written to a hidden temp file beside its target, flushed to disk, then renamed onto
the target; any failure (a full disk, Ctrl-C, SIGTERM) removes the temp file and surfaces as an
:class:`~distprompt.errors.OutputError` (or the interruption itself). Files get the permissions of
an ordinary ``open()`` (``0o666`` minus the umask), not the private mode of a temp file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, NoReturn

from distprompt.errors import DistpromptError, OutputError

__all__ = [
    "MANIFEST_NAME",
    "atomic_open",
    "atomic_write_bytes",
    "atomic_write_lines",
    "check_out_dir",
    "prepare_out_dir",
    "umask",
]

#: The file whose presence marks a finished distprompt output (the only kind ``--overwrite``
#: replaces).
MANIFEST_NAME = "manifest.json"

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
    with _unwritable_folder(path.parent):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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
        _raise_write_error(path, exc)


@contextlib.contextmanager
def _unwritable_folder(folder: Path) -> Iterator[None]:
    """An OSError while making something in ``folder`` becomes an :class:`OutputError`."""
    try:
        yield
    except OSError as exc:
        if isinstance(exc, DistpromptError):
            raise
        raise OutputError(
            f"{folder}: expected a writable folder, found {exc.strerror or exc}; "
            "choose another --out or fix its permissions"
        ) from exc


def _raise_write_error(path: Path, exc: BaseException) -> NoReturn:
    """Re-raise ``exc`` (a write of ``path`` failed), an OSError as an :class:`OutputError`."""
    if isinstance(exc, OSError) and not isinstance(exc, DistpromptError):
        raise OutputError(
            f"{path}: could not be written ({exc.strerror or exc}); check free disk space "
            "and permissions, then run again"
        ) from exc
    raise exc


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


def check_out_dir(out: Path, *, overwrite: bool) -> None:
    """Refuse an output folder that cannot be used, before any work is done.

    ``--overwrite`` replaces only a previous distprompt output (a folder holding
    ``manifest.json``): a mistyped ``--out`` (the corpus, a home folder) is never deleted.

    Raises:
        OutputError: ``out`` is a file; a non-empty folder (without ``overwrite``); a folder that
            is not a distprompt output, or holds the working directory (with ``overwrite``); or
            its parent is not a folder.
    """
    out = Path(out)
    if out.exists():
        if not out.is_dir():
            raise OutputError(
                f"{out}: expected an output folder, found a file; choose another --out"
            )
        if any(out.iterdir()):
            if not overwrite:
                raise OutputError(
                    f"{out}: expected an empty or new output folder, found files in it; "
                    "pass --overwrite to replace it, or choose another --out"
                )
            if not (out / MANIFEST_NAME).is_file():
                raise OutputError(
                    f"{out}: expected a previous distprompt output to replace (a folder with "
                    f"{MANIFEST_NAME}), found a folder of other files; --overwrite never deletes "
                    "those — choose another --out or empty it yourself"
                )
            cwd = Path.cwd().resolve()
            if out.resolve() == cwd or out.resolve() in cwd.parents:
                raise OutputError(
                    f"{out}: expected an output folder outside the working directory, found it "
                    "holds the working directory; choose another --out"
                )
    # The first existing ancestor must be a folder, or nothing can be created below it.
    anc = out.absolute().parent
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        raise OutputError(
            f"{out}: expected a folder to write into, found {anc} is a file; choose another --out"
        )


@contextlib.contextmanager
def prepare_out_dir(out: Path, *, overwrite: bool) -> Iterator[Path]:
    """Yield an empty temp folder beside ``out``; on success it replaces ``out``.

    Whatever goes wrong (an error, a full disk, Ctrl-C, SIGTERM), the temp folder is removed and
    ``out`` is left as it was: a folder named ``out`` is always a finished suite.

    Raises:
        OutputError: ``out`` cannot be used (see :func:`check_out_dir`) or written.
    """
    out = Path(out)
    check_out_dir(out, overwrite=overwrite)
    parent = out.absolute().parent
    with _unwritable_folder(parent):
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=parent))
    old: Path | None = None
    try:
        os.chmod(tmp, 0o777 & ~umask())  # mkdtemp makes it private (0700)
        yield tmp
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=parent))
            os.replace(out, old / "x")
        os.replace(tmp, out)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and (old / "x").exists() and not out.exists():
            os.replace(old / "x", out)  # interrupted between the two renames: put it back
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        _raise_write_error(out, exc)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
