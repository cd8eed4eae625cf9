"""Threads: BLAS and OpenMP held to one thread (:func:`one_thread`, :func:`one_openmp_thread`)
and the scheduler that starts a thread pool's jobs once their weights fit (:class:`Fitting`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from distprompt.engine.background import import_quietly

if TYPE_CHECKING:
    from concurrent.futures import Executor, Future

__all__ = ["Fitting", "one_openmp_thread", "one_thread"]


def one_thread() -> Any:
    """BLAS on one thread, for the whole process (a context manager): the selection's matrices
    are small, and on a machine whose cores are busy (other work, the pass's workers) extra BLAS
    threads spin against each other. The numbers do not change (the pinned-output test holds).
    OpenMP's limit holds for one thread only: each thread that selects sets it
    (:func:`one_openmp_thread`).

    threadpoolctl limits the libraries loaded when it is called, and only from the thread that
    set the first limit (OpenBLAS's thread pool is the process's). So scipy's BLAS, the one
    scikit-learn's SVD and k-means call, is imported first (0.2 s): the early selection's pool is
    entered while the warm imports still run in another thread, which left scipy's OpenBLAS on
    two threads beside the pass, spinning — measured on the benchmark corpus, three interleaved
    runs: the one-worker export's main process used 13.6-13.9 s of CPU, 9.5-10.1 s with one
    thread, and the export took 11.1 s, 9.0-9.6 s.
    """
    import scipy.linalg  # noqa: F401
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


@contextlib.contextmanager
def one_openmp_thread(preload: Sequence[str] = ()) -> Iterator[None]:
    """OpenMP on one thread in this thread (its limit is per thread), once the modules that
    load it (``preload``) are imported (in another thread, the warm imports may still run:
    :func:`~distprompt.engine.background.start_warm_imports`)."""
    from threadpoolctl import threadpool_limits

    import_quietly(preload)
    with threadpool_limits(limits=1, user_api="openmp"):
        yield


_Job = tuple["Future[Any]", int, Callable[..., Any], tuple[Any, ...]]


class Fitting:
    """Jobs on a thread pool, each started by the first free thread once its weight fits: the
    weights of the jobs under way and its own at most ``limit`` between them (a job alone
    always starts). Among the jobs that fit, the first submitted starts first. The futures are
    this class's own; one still waiting can be cancelled."""

    def __init__(self, pool: Executor, limit: int) -> None:
        self._pool = pool
        self._limit = limit
        self._cond = threading.Condition()
        self._waiting: list[_Job] = []
        self._used = 0
        self._running = 0

    def submit(self, weight: int, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        from concurrent.futures import Future

        fut: Future[Any] = Future()
        with self._cond:
            self._waiting.append((fut, weight, fn, args))
            self._cond.notify_all()  # a thread waiting for a job that fits may take this one
        self._pool.submit(self._run_next)  # one task a job: each runs whichever fits first
        return fut

    def _take(self) -> _Job | None:
        """The first waiting job that fits (the lock held), or None."""
        for i, job in enumerate(self._waiting):
            if job[0].cancelled():
                continue
            if self._running == 0 or self._used + job[1] <= self._limit:
                del self._waiting[i]
                return job
        self._waiting = [j for j in self._waiting if not j[0].cancelled()]
        return None

    def _run_next(self) -> None:
        with self._cond:
            while (job := self._take()) is None and self._waiting:
                self._cond.wait()
            if job is None:
                return  # the others took every job
            fut, weight, fn, args = job
            if not fut.set_running_or_notify_cancel():
                return
            self._used += weight
            self._running += 1
        try:
            fut.set_result(fn(*args))
        except BaseException as exc:  # the caller gets it from the future
            fut.set_exception(exc)
        finally:
            with self._cond:
                self._used -= weight
                self._running -= 1
                self._cond.notify_all()
