"""Background work: one call in a thread while the caller goes on (:class:`InThread`), modules
imported in a thread (:func:`start_warm_imports`, joined before a fork), and fresh Python
processes that each serve one pickled request (:class:`Helpers`).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = [
    "Helpers",
    "InThread",
    "Served",
    "import_quietly",
    "join_warm_imports",
    "start_warm_imports",
]

T = TypeVar("T")


def import_quietly(modules: Sequence[str]) -> None:
    """Import ``modules``; one that fails is left to where it is used (imported, and reported,
    again there)."""
    for name in modules:
        with contextlib.suppress(Exception):
            importlib.import_module(name)


#: The warm-imports threads started, joined before this process forks again.
_WARMING: list[threading.Thread] = []


def start_warm_imports(modules: Sequence[str]) -> None:
    """Import ``modules`` in a thread of their own (seconds of work that need not wait)."""
    thread = threading.Thread(
        target=import_quietly, args=(tuple(modules),), name="distprompt-imports", daemon=True
    )
    thread.start()
    _WARMING.append(thread)


def join_warm_imports() -> None:
    """Wait for the warm imports (a fork while another thread imports can deadlock the child)."""
    while _WARMING:
        _WARMING.pop().join()


class InThread(Generic[T]):
    """``fn()`` in a daemon thread of its own, started by :meth:`start` (once): seconds of work
    (loading a tokenizer) that the caller need not wait for. :meth:`result` joins the thread,
    or runs ``fn`` here when it never started, and raises what ``fn`` raised.

    Example:
        >>> job = InThread(lambda: 6 * 7, name="answer")
        >>> job.start()
        >>> job.result()
        42
    """

    def __init__(self, fn: Callable[[], T], *, name: str) -> None:
        self._fn = fn
        self._name = name
        self._thread: threading.Thread | None = None
        self._out: T | None = None
        self._error: BaseException | None = None
        self._ran = False

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Start ``fn`` in its thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self._out = self._fn()
        except BaseException as exc:  # re-raised in the caller's thread by result()
            self._error = exc
        self._ran = True

    def wait(self) -> T | None:
        """For another thread: ``fn``'s result once it is done (this waits), None if it failed
        or was never started (:meth:`result` says why)."""
        if self._thread is None:
            return None
        self._thread.join()
        return self._out if self._error is None else None

    def result(self) -> T:
        """``fn``'s result (run here if never started).

        Raises:
            BaseException: What ``fn`` raised.
        """
        if self._thread is None:
            if not self._ran:
                self._run()
        else:
            self._thread.join()
        if self._error is not None:
            raise self._error
        return self._out  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class Served:
    """What one helper process gave back.

    Attributes:
        args: Its command-line arguments (its share of the work).
        result: What it wrote on stdout, unpickled (None: it failed).
        why: The last line of its stderr, or its exit code when it wrote none: what to say when
            its answer is not used.
    """

    args: tuple[str, ...]
    result: Any
    why: str


class Helpers:
    """Fresh Python processes (``python -c code ARGS``, one per entry of ``shares``) started
    now, each waiting on stdin for the request :meth:`send` hands over (pickled) and writing
    its answer, pickled, on stdout.

    Subprocesses rather than forked workers, which would copy the pages they share with this
    one (~100 MB for the export's plots, measured on the benchmark corpus), and rather than a
    multiprocessing spawn, which imports the caller's main script again. Started before the
    request exists, they import what they need meanwhile. They import distprompt from where
    this process did.
    """

    def __init__(self, code: str, shares: Sequence[Sequence[str]]) -> None:
        import subprocess

        self._procs = [
            (
                tuple(args),
                subprocess.Popen(
                    [sys.executable, "-c", code, *args],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
                ),
            )
            for args in shares
        ]
        self._out: list[tuple[bytes, bytes]] = [(b"", b"")] * len(self._procs)
        self._readers: list[threading.Thread] = []

    def send(self, request: Any) -> None:
        """Hand ``request`` over (pickled, on each process's stdin)."""
        import pickle

        data = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        for i in range(len(self._procs)):
            # Written and read as it goes (communicate), so that no process blocks on a pipe.
            reader = threading.Thread(target=self._communicate, args=(i, data), daemon=True)
            reader.start()
            self._readers.append(reader)

    def _communicate(self, i: int, data: bytes) -> None:
        proc = self._procs[i][1]
        with contextlib.suppress(OSError, ValueError):  # it died before it read the request
            self._out[i] = proc.communicate(data)
        proc.wait()

    def results(self) -> list[Served]:
        """Each process's answer, once they are all done (:meth:`send` first)."""
        import pickle

        assert self._readers, "send() first"
        for reader in self._readers:
            reader.join()
        served = []
        for (args, proc), (out, err) in zip(self._procs, self._out, strict=True):
            got = None
            if proc.returncode == 0:
                with contextlib.suppress(Exception):
                    got = pickle.loads(out)
            lines = err.decode("utf-8", "replace").strip().splitlines()
            served.append(Served(args, got, lines[-1] if lines else f"exit code {proc.returncode}"))
        return served

    def stop(self) -> None:
        """Stop the processes (their answers are not wanted)."""
        for _, proc in self._procs:
            proc.kill()
        for reader in self._readers:
            reader.join()
        for _, proc in self._procs:
            with contextlib.suppress(OSError, ValueError):
                proc.communicate()
