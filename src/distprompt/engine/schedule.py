"""Where a pass's work runs, decided once: the :class:`Schedule` a pass is given, the
:class:`Task` the engine knows of each unit of work, and :func:`run`, the one map over them.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from distprompt.config import ENGINES, Engine, require_engine
from distprompt.engine.cluster import UnitFailure, on_ray, ray_unit_bytes
from distprompt.engine.local import in_processes, in_this_process
from distprompt.engine.pools import SidePool
from distprompt.errors import ConfigError

if TYPE_CHECKING:
    from distprompt.config import Config

__all__ = ["DEFAULT_SCHEDULE", "UNIT_BYTES", "Schedule", "Task", "run"]

T = TypeVar("T")
R = TypeVar("R")

#: With several workers (or on Ray), plain shards larger than this are split into byte ranges.
UNIT_BYTES = 32 << 20


@dataclass(frozen=True, slots=True)
class Schedule:
    """Where a pass's work runs.

    Attributes:
        workers: Local worker processes (unused on Ray).
        engine: ``local`` (this machine) or ``ray`` (one Ray task per unit).
        ray_address: The Ray cluster (see :func:`~distprompt.engine.cluster.connect_ray`).
        processes: Run in worker processes even with one worker (None: when ``workers > 1``):
            the caller's process is then free (the pipeline loads the tokenizer meanwhile).
        unit_bytes: Split plain shards into units of about this size (None: :data:`UNIT_BYTES`
            in worker processes, a size fit for the cluster on Ray, whole shards in this
            process).

    Example:
        >>> s = Schedule(workers=2)
        >>> s.in_processes(3), s.split_bytes(1 << 30) == UNIT_BYTES
        (True, True)
    """

    workers: int = 1
    engine: Engine = "local"
    ray_address: str | None = None
    processes: bool | None = None
    unit_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            require_engine(self.engine)  # names the engines
        if self.workers < 1:
            raise ConfigError(f"expected workers to be an integer >= 1, found {self.workers}")

    @classmethod
    def of(cls, config: Config, *, processes: bool | None = None) -> Schedule:
        """The schedule ``config`` asks for (its ``workers``, ``engine``, ``ray_address``)."""
        return cls(config.workers, config.engine, config.ray_address, processes)

    @property
    def remote(self) -> bool:
        """Whether the work runs in processes that are not this machine's children (on Ray):
        they do not share this directory, so paths must be absolute."""
        return self.engine == "ray"

    def split_bytes(self, total_bytes: int) -> int | None:
        """The size units are split to (None: whole shards), for ``total_bytes`` of work.

        On Ray this joins the cluster (its CPUs set the size, see
        :func:`~distprompt.engine.cluster.ray_unit_bytes`)."""
        if self.unit_bytes is not None:
            return self.unit_bytes
        if self.engine == "ray":
            return ray_unit_bytes(total_bytes, UNIT_BYTES, address=self.ray_address)
        if self.workers > 1 or self.processes:
            return UNIT_BYTES
        return None

    def in_processes(self, n_tasks: int) -> bool:
        """Whether ``n_tasks`` tasks run in local worker processes."""
        wanted = self.workers > 1 or bool(self.processes)
        return self.engine == "local" and wanted and (n_tasks > 1 or bool(self.processes))

    @property
    def side_pool(self) -> SidePool:
        """The pool that works beside the caller's thread (the export's selection while the main
        thread checks and decodes): threads for one or two workers, forked processes for more
        (:meth:`~distprompt.engine.pools.SidePool.for_workers`)."""
        return SidePool.for_workers(self.workers)

    def ordered(self, n_tasks: int) -> bool:
        """Whether :func:`run` gives the results of ``n_tasks`` tasks in task order (in this
        process or on Ray), not only each group's in order (worker processes)."""
        return not self.in_processes(n_tasks)


#: A pass not told otherwise: whole shards, one after the other, in this process.
DEFAULT_SCHEDULE = Schedule()


@dataclass(frozen=True, slots=True)
class Task:
    """What the engine knows of a unit of work.

    Attributes:
        name: Named when its Ray task keeps failing (:class:`UnitFailure`).
        group: The tasks of a group are merged in their order (a shard's byte ranges).
        size: Its bytes: progress, and the order it is handed out in.
        group_size: Its group's bytes.
    """

    name: str
    group: str
    size: int
    group_size: int


def run(
    fn: Callable[[T], R],
    args: Sequence[T],
    tasks: Sequence[Task],
    schedule: Schedule,
    *,
    here: Callable[[int], R] | None = None,
    on_started: Callable[[], None] | None = None,
    on_done: Callable[[int], None] | None = None,
) -> Generator[tuple[int, R | UnitFailure], None, None]:
    """``(i, fn(args[i]))`` for each task where ``schedule`` says, each group's in task order
    (all in task order when :meth:`Schedule.ordered`).

    Args:
        fn: A picklable (module-level) function: it runs in worker processes or Ray tasks.
        args: One picklable argument per task.
        tasks: What the engine knows of each: name, group, size.
        schedule: Where they run.
        here: How task ``i`` runs in this process (default ``fn(args[i])``); need not pickle.
        on_started: Called once the work is handed out (after the worker processes started).
        on_done: Called with a task's index as it finishes (completion order).

    Yields:
        ``(i, result)``; on Ray, a :class:`UnitFailure` for a task that kept failing. Close
        the iterator to stop the work still queued or running.

    Raises:
        Exception: What ``fn`` raised, as a local call would raise it.
    """
    if schedule.engine == "ray":
        return on_ray(
            fn, args, tasks, address=schedule.ray_address, on_started=on_started, on_done=on_done
        )
    if schedule.in_processes(len(tasks)):
        return in_processes(
            fn, args, tasks, workers=schedule.workers, on_started=on_started, on_done=on_done
        )
    local = here if here is not None else (lambda i: fn(args[i]))
    return in_this_process(local, len(tasks), on_started=on_started, on_done=on_done)
