"""The pass's work as tasks on a Ray cluster (:func:`ray_map`, :func:`on_ray`).

The pass is a map of one picklable function over work units (a shard, or a byte range of one), each
returning a mergeable partial; the driver merges the partials and runs the bounded selection stage
itself. :func:`ray_map` is that map on Ray:

- one Ray task per unit (one CPU each), at most a window of tasks ahead of the next unit to merge,
  so finished partials wait in Ray's object store (which spills to disk), not in the driver;
- results come back **in unit order** — the same merge order as a local run, hence the same
  result and the same first error;
- ``on_done(i)`` is called as each task finishes, in completion order (progress);
- a task whose worker dies (killed, out of memory, node lost) or that raises an ``OSError`` is
  retried by Ray (``max_retries``); one that keeps failing is yielded as a :class:`UnitFailure`
  naming the unit and the reason, and the caller applies its ``--on-error`` policy;
- when the consumer stops early (an error, Ctrl-C), the tasks still queued or running are
  cancelled.

Ray is an optional dependency (``pip install 'distprompt[ray]'``); nothing here imports it at
module import time.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from distprompt.config import require_engine

if TYPE_CHECKING:
    from distprompt.engine.schedule import Task

__all__ = [
    "MAX_RETRIES",
    "UnitFailure",
    "connect_ray",
    "on_ray",
    "ray_map",
    "ray_unit_bytes",
]

logger = logging.getLogger("distprompt.engine.cluster")

#: Ray retries of a task whose worker died or that raised an OSError (Ray's own default is 3).
MAX_RETRIES = 3

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class UnitFailure:
    """A unit whose task failed on every attempt.

    Attributes:
        name: The unit's name (the shard's name relative to DATA).
        attempts: How many times it was run.
        reason: The last failure, in one line.
    """

    name: str
    attempts: int
    reason: str


def connect_ray(address: str | None = None) -> Any:
    """Join the Ray cluster at ``address``, or start or join a Ray on this machine; the module.

    A Ray that is already initialized in this process (``ray.init`` called by the user) is used
    as it is. Otherwise ``address`` (``auto``, ``host:6379``, ``ray://host:10001``) is joined; with
    None, ``RAY_ADDRESS`` when it is set, else a Ray started with ``ray start`` on this machine,
    else a new local Ray that listens on 127.0.0.1 only. distprompt leaves it running (the
    process's exit stops a Ray it started).

    Raises:
        ConfigError: Ray is not installed.
        InputError: The cluster cannot be reached.
    """
    require_engine("ray")
    private = address is None and not os.environ.get("RAY_ADDRESS") and not _ray_started_here()
    if private and "ray" not in sys.modules:
        # A Ray started for this process listens on 127.0.0.1 only: without this Ray binds the
        # machine's network address (it treats 127.0.0.1 as "this node" and resolves it).
        os.environ.setdefault(_LOOPBACK_ENV, "0")
    import ray

    if ray.is_initialized():
        return ray
    kwargs: dict[str, Any] = {
        "address": "local" if private else address,
        "logging_level": logging.WARNING,
        "log_to_driver": True,
    }
    if private:
        kwargs["include_dashboard"] = False
    try:
        ray.init(**kwargs)
    except ConnectionError as exc:
        from distprompt.errors import InputError

        if _refused_for_token(exc):
            raise InputError(
                f"{address or 'Ray'}: expected the Ray cluster to accept this driver, found it "
                "asks for an authentication token (InvalidAuthToken); run with "
                "RAY_AUTH_MODE=token and the cluster's token (~/.ray/auth_token, "
                "RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN), see docs/scale.md"
            ) from exc
        raise InputError(
            f"{address or 'Ray'}: expected a reachable Ray cluster, found {exc}; check "
            "--ray-address (host:6379, ray://host:10001 or auto) and that the cluster is up"
        ) from exc
    return ray


def _refused_for_token(exc: BaseException) -> bool:
    """Whether Ray's connection error comes from a cluster with token authentication that this
    driver did not authenticate to (Ray names it in the chain of causes: an
    ``AuthenticationError``, or its text in the traceback a retry loop kept)."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return False
        if type(seen).__name__ == "AuthenticationError" or "InvalidAuthToken" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


#: Ray's switch for multi-node clusters; "0" makes a Ray started here use the loopback address.
_LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def _ray_started_here() -> bool:
    """Whether ``ray start`` runs a cluster on this machine (its address file exists)."""
    tmp = os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()
    return Path(tmp, "ray", "ray_current_cluster").is_file()


#: Units per CPU of the cluster when a large corpus is split for Ray: enough to balance the load,
#: few enough that the driver, which unpickles and merges every unit's partial, keeps up.
UNITS_PER_CPU = 4


def ray_unit_bytes(total_bytes: int, floor: int, *, address: str | None = None) -> int:
    """The byte range a Ray task reads: ``floor``, or larger for a corpus of more than
    :data:`UNITS_PER_CPU` such ranges per CPU of the cluster (see docs/scale.md: the driver's
    cost per unit, not the workers', bounds the pass on a large cluster)."""
    ray = connect_ray(address)
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    return max(floor, -(-total_bytes // (UNITS_PER_CPU * cpus)))


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = next((t.strip() for t in text if t.strip()), type(exc).__name__)
    return f"{type(exc).__name__}: {line}"[:300]


def ray_map(
    fn: Callable[..., R],
    args: Sequence[T],
    *,
    names: Sequence[str],
    address: str | None = None,
    on_done: Callable[[int], None] | None = None,
    max_retries: int = MAX_RETRIES,
    window: int | None = None,
    shared: Any = None,
) -> Generator[R | UnitFailure, None, None]:
    """``fn(arg)`` (or ``fn(arg, shared)``) for each arg as Ray tasks; results in the order of
    ``args``.

    Args:
        fn: A picklable function (module level); it runs in Ray workers.
        args: One picklable argument per unit.
        names: The units' names, for :class:`UnitFailure`.
        address: The Ray cluster (see :func:`connect_ray`).
        on_done: Called with a unit's index when its task finishes (completion order).
        max_retries: Ray retries of a task whose worker died or that raised an ``OSError``.
        window: Tasks submitted ahead of the next result to yield; default twice the cluster's
            CPUs.
        shared: When not None, put once in Ray's object store and passed to every call as the
            second argument (a tokenizer, say, instead of one copy per task).

    Yields:
        ``fn(args[i])`` for ``i = 0, 1, …``, or a :class:`UnitFailure` for a unit whose worker
        died on every attempt.

    Raises:
        Exception: What ``fn`` raised in a worker (after Ray's retries for an ``OSError``), as a
            local call would raise it.

    Example:
        >>> list(ray_map(abs, [-1, 2], names=["a", "b"]))  # doctest: +SKIP
        [1, 2]
    """
    ray = connect_ray(address)
    from ray.exceptions import RayError, RayTaskError

    task = ray.remote(num_cpus=1, max_retries=max_retries, retry_exceptions=[OSError])(fn)
    n = len(args)
    if window is None:
        window = max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
    extra = () if shared is None else (ray.put(shared),)
    refs: dict[int, Any] = {}
    finished: set[int] = set()
    submitted = nxt = 0
    try:
        while nxt < n:
            while submitted < n and submitted - nxt < window:
                refs[submitted] = task.remote(args[submitted], *extra)
                submitted += 1
            if nxt not in finished:
                waiting = {refs[i]: i for i in refs if i not in finished}
                ready, _ = ray.wait(list(waiting), num_returns=1, fetch_local=False)
                for ref in ready:
                    finished.add(waiting[ref])
                    if on_done is not None:
                        on_done(waiting[ref])
                continue
            ref = refs.pop(nxt)
            finished.discard(nxt)
            result: R | UnitFailure
            try:
                result = ray.get(ref)
            except RayTaskError as exc:
                cause = getattr(exc, "cause", None)
                raise (cause if isinstance(cause, Exception) else exc) from None
            except RayError as exc:  # the worker died on every attempt: a system failure
                result = UnitFailure(names[nxt], max_retries + 1, _reason(exc))
            del ref
            yield result
            nxt += 1
    finally:
        for ref in refs.values():
            try:
                ray.cancel(ref, force=True)
            except Exception as exc:  # a task that finished meanwhile cannot be cancelled
                logger.debug("cancel: %s", exc)


def on_ray(
    fn: Callable[[T], R],
    args: Sequence[T],
    tasks: Sequence[Task],
    *,
    address: str | None,
    on_started: Callable[[], None] | None = None,
    on_done: Callable[[int], None] | None = None,
) -> Generator[tuple[int, R | UnitFailure], None, None]:
    """``(i, fn(args[i]))`` for each task, run as Ray tasks (:func:`ray_map`), in task order;
    a task that kept failing gives a :class:`UnitFailure`. Close the iterator to cancel the
    tasks not yet merged."""
    connect_ray(address)
    if on_started is not None:  # the tasks are submitted as the loop below starts
        on_started()
    results = ray_map(fn, args, names=[t.name for t in tasks], address=address, on_done=on_done)
    with contextlib.closing(results):
        yield from enumerate(results)
