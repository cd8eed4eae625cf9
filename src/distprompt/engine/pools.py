"""The pool that works beside the caller's thread (selection's, in the export), its kind decided
once (:class:`SidePool`: none, threads or forked processes) and opened by :func:`open_pool`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from distprompt._heap import trim_heap
from distprompt.engine.background import join_warm_imports
from distprompt.engine.threads import one_thread

if TYPE_CHECKING:
    from concurrent.futures import Executor, ProcessPoolExecutor

__all__ = ["HERE", "SIDE_THREADS", "SidePool", "forked_pool", "open_pool"]

#: Threads beside the caller's with one or two workers (with one, the export has only one of
#: them at work during the pass).
SIDE_THREADS = 2

SideKind = Literal["here", "threads", "forked"]


@dataclass(frozen=True, slots=True)
class SidePool:
    """Where work beside the caller's thread runs.

    Attributes:
        kind: ``here`` (no pool: the caller runs it, one job after another), ``threads`` or
            ``forked`` (processes forked from this one).
        size: Its threads or processes (0 for ``here``).

    Example:
        >>> SidePool.for_workers(2), SidePool.for_workers(3).kind
        (SidePool(kind='threads', size=2), 'forked')
    """

    kind: SideKind
    size: int

    @classmethod
    def for_workers(cls, workers: int) -> SidePool:
        """:data:`SIDE_THREADS` threads for 1 or 2 workers, ``workers`` forked processes for
        more, none for 0.

        Threads copy no pages, and selection's numpy and scipy work and the tokenizer's Rust
        code leave the interpreter lock often enough for two of them to overlap: measured on
        the benchmark corpus with two workers, the export took as long as with two forked
        processes (17.6 / 19.0 s against 18.9 / 19.1 s) and its peak memory was 600 MB PSS
        against 663-672 (559-575 MB once two large pools were no longer selected at once:
        :class:`~distprompt.engine.threads.Fitting`). With more cores, processes (the lock
        would hold more threads back; not measured here).
        """
        if workers < 1:
            return cls("here", 0)
        if workers > SIDE_THREADS:
            return cls("forked", workers)
        return cls("threads", SIDE_THREADS)

    @property
    def shares_memory(self) -> bool:
        """Whether its workers see this process's objects as they are, without pickling them:
        threads, or processes started by fork (when the work is submitted: their start)."""
        import multiprocessing

        return self.kind == "threads" or (
            self.kind == "forked" and multiprocessing.get_start_method() == "fork"
        )


#: No pool: the caller's thread does the work.
HERE = SidePool("here", 0)


@contextlib.contextmanager
def open_pool(side: SidePool) -> Iterator[Executor | None]:
    """The pool ``side`` names (None for ``here``). Threads run BLAS on one thread for as long
    as the pool is open (threadpoolctl's BLAS limits are the process's, so they are set, and
    restored, here and not by each thread); on an error or Ctrl-C in the body the jobs not
    started are dropped (a thread cannot be stopped: the one under way ends first)."""
    if side.kind == "here":
        yield None
        return
    if side.kind == "forked":
        with forked_pool(side.size) as procs:
            yield procs
        return
    from concurrent.futures import ThreadPoolExecutor

    with one_thread():
        pool = ThreadPoolExecutor(side.size, thread_name_prefix="distprompt-select")
        try:
            yield pool
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)


@contextlib.contextmanager
def forked_pool(workers: int) -> Iterator[ProcessPoolExecutor | None]:
    """``workers`` processes forked from this one (None for 0).

    Objects that exist when the pool starts are left out of the garbage collector's walks
    until it is done with: a walk in a forked worker writes to every object it visits, which
    copies the pages it shares with this process (the tokenizer, the imports, the pools).
    """
    if workers < 1:
        yield None
        return
    join_warm_imports()  # a fork while another thread imports can deadlock the child
    import gc

    from distprompt.engine.local import process_pool

    trim_heap()
    gc.freeze()  # the workers are forked as the first tasks are submitted, in the body
    try:
        with process_pool(workers) as pool:
            yield pool
    finally:
        gc.unfreeze()
