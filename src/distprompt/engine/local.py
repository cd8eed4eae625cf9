"""The pass's work in local processes: a pool that stops at once on an error
(:func:`process_pool`), the order units are handed to it (:func:`run_order`), and the map that
gives each group's results back in order as they finish (:func:`in_processes`); or in this
process, one after the other (:func:`in_this_process`).
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

    from distprompt.engine.schedule import Task

__all__ = ["in_processes", "in_this_process", "process_pool", "run_order", "terminate_pool"]

T = TypeVar("T")
R = TypeVar("R")


@contextlib.contextmanager
def process_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """A pool of ``workers`` local processes. Ctrl-C is handled by this process only (the
    workers ignore SIGINT, so they do not each print a traceback); on an error or an
    interruption in the ``with`` body the queued work is cancelled and the workers are
    terminated rather than left to finish.

    Example:
        >>> with process_pool(2) as ex:  # doctest: +SKIP
        ...     ex.submit(abs, -1).result()
        1
    """
    from concurrent.futures import ProcessPoolExecutor

    ex = ProcessPoolExecutor(max_workers=workers, initializer=_ignore_sigint)
    try:
        yield ex
    except BaseException:
        # shutdown() would wait for every running unit to finish; the result is not wanted.
        terminate_pool(ex)
        raise
    ex.shutdown(wait=True)


def terminate_pool(ex: ProcessPoolExecutor) -> None:
    """Cancel the pool's queued work and terminate its workers (their results are not wanted)."""
    ex.shutdown(wait=False, cancel_futures=True)
    procs = getattr(ex, "_processes", None) or {}  # private, but the only handle
    for proc in list(procs.values()):
        proc.terminate()


def _ignore_sigint() -> None:
    # Ctrl-C reaches the whole process group: only the parent handles it (and stops the workers),
    # so workers do not each print a KeyboardInterrupt traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A worker that inherited pyarrow (DATA holds Parquet or Arrow shards) allocates from the C
    # library's heap: pyarrow's default mimalloc pool took 4.2-4.3 s of CPU where the system one
    # took 3.5 s to read 1,000 SWE-agent rows (28M tokens) of Parquet. Only in these processes,
    # which are distprompt's own (a caller's process keeps its pool).
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:
        arrow.set_memory_pool(arrow.system_memory_pool())


def run_order(tasks: Sequence[Task], workers: int) -> list[int]:
    """The order tasks are handed to worker processes: smallest group first (a source whose
    shards are all read can be worked on while the largest are read), except that the
    smallest is read just before the largest, and that with several workers a task of more
    than ``1 / (2 * workers)`` of the bytes (a large compressed shard: it cannot be split)
    starts first, lest it run alone at the end.

    The other tasks of a group stay together and in order, so that a group is merged as soon as
    its last task is done.
    """
    total = sum(t.size for t in tasks) or 1
    first: dict[str, int] = {}
    for i, t in enumerate(tasks):
        first.setdefault(t.group, i)

    def alone(t: Task) -> bool:
        return workers > 1 and t.size * 2 * workers > total

    # The other groups by size, but the smallest read just before the largest: a source is
    # worked on once a shard ends that added nothing to it, so the one read before the
    # largest waits for the largest, and that is best the one of least work.
    rest = sorted({t.group: t.group_size for t in tasks if not alone(t)}.items(),
                  key=lambda kv: (kv[1], first[kv[0]]))  # fmt: skip
    if len(rest) >= 3:
        rest = [*rest[1:-1], rest[0], rest[-1]]
    rank = {name: r for r, (name, _) in enumerate(rest)}

    def key(i: int) -> tuple[int, int, int]:
        t = tasks[i]
        if alone(t):
            return (0, -t.size, i)
        return (1, rank[t.group], i)

    return sorted(range(len(tasks)), key=key)


def in_processes(
    fn: Callable[[T], R],
    args: Sequence[T],
    tasks: Sequence[Task],
    *,
    workers: int,
    on_started: Callable[[], None] | None = None,
    on_done: Callable[[int], None] | None = None,
) -> Generator[tuple[int, R], None, None]:
    """``(i, fn(args[i]))`` for each task, run in ``workers`` local processes in
    :func:`run_order`: each group's results in task order, the groups as they finish.

    ``on_done(i)`` is called as each task finishes (completion order). Closing the iterator
    (or an error) cancels the queued tasks and terminates the workers.
    """
    from concurrent.futures import FIRST_COMPLETED, wait

    waiting: dict[str, list[int]] = {}  # per group, its tasks not yielded yet
    for i, t in enumerate(tasks):
        waiting.setdefault(t.group, []).append(i)
    arrived: dict[int, R] = {}
    with process_pool(workers) as ex:
        futures = {ex.submit(fn, args[i]): i for i in run_order(tasks, workers)}
        if on_started is not None:
            on_started()
        pending = set(futures)
        while pending:
            ready, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(ready, key=futures.__getitem__):
                # dropped: a future holds its result, the unit's partial, for as long as it is
                # referenced (all of them until the end of the pass, before: measured on the
                # benchmark's 4x corpus, two workers: the pass's peak in this process 378 -> 203 MB)
                i = futures.pop(fut)
                arrived[i] = fut.result()
                del fut
                if on_done is not None:
                    on_done(i)
                left = waiting[tasks[i].group]
                while left and left[0] in arrived:
                    j = left.pop(0)
                    yield j, arrived.pop(j)


def in_this_process(
    run: Callable[[int], R],
    n: int,
    *,
    on_started: Callable[[], None] | None = None,
    on_done: Callable[[int], None] | None = None,
) -> Generator[tuple[int, R], None, None]:
    """``(i, run(i))`` for ``i`` in ``range(n)``, in this process, one after the other."""
    if on_started is not None:
        on_started()
    for i in range(n):
        res = run(i)
        if on_done is not None:
            on_done(i)
        yield i, res
