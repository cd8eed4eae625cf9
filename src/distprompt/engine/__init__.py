"""Where the work runs, and nothing else: the engine knows tasks, not rows.

A stage hands the engine a plain picklable function, one argument per unit of work, and what
the engine needs to know of each unit (a :class:`Task`: its name, the group whose units are
merged in order, its bytes); a frozen :class:`Schedule` (workers, ``local`` or ``ray``, the Ray
address, worker processes or this one) says where they run. :func:`run` gives the results back
as ``(index, result)``, each group's in order, and stops the work still queued or running when
it is closed. Merging the results is the stage's.

- ``engine/schedule.py``: :class:`Schedule`, :class:`Task`, :func:`run`, :data:`UNIT_BYTES`.
- ``engine/local.py``: the local process pool (:func:`process_pool`), the order tasks are
  handed to it, the map over it and the one in this process.
- ``engine/cluster.py``: Ray (:func:`connect_ray`, :func:`ray_map`, :class:`UnitFailure`).
- ``engine/pools.py``: the pool beside the caller's thread, its kind decided once
  (:class:`SidePool`, :attr:`Schedule.side_pool`: threads or forked processes) and opened by
  :func:`open_pool`.
- ``engine/threads.py``: BLAS and OpenMP on one thread (:func:`one_thread`,
  :func:`one_openmp_thread`), and :class:`Fitting`, which starts a thread pool's jobs once
  their weights fit.
- ``engine/background.py``: imports warmed in a thread (:func:`start_warm_imports`,
  :func:`join_warm_imports`) and fresh helper processes serving one pickled request
  (:class:`Helpers`).

The package imports only ``config`` and ``errors``; every stage and the wiring may import it.
"""

from distprompt.engine.background import (
    Helpers,
    Served,
    import_quietly,
    join_warm_imports,
    start_warm_imports,
)
from distprompt.engine.cluster import (
    MAX_RETRIES,
    UnitFailure,
    connect_ray,
    ray_map,
    ray_unit_bytes,
)
from distprompt.engine.local import process_pool, run_order, terminate_pool
from distprompt.engine.pools import HERE, SIDE_THREADS, SidePool, forked_pool, open_pool
from distprompt.engine.schedule import DEFAULT_SCHEDULE, UNIT_BYTES, Schedule, Task, run
from distprompt.engine.threads import Fitting, one_openmp_thread, one_thread

__all__ = [
    "DEFAULT_SCHEDULE",
    "HERE",
    "MAX_RETRIES",
    "SIDE_THREADS",
    "UNIT_BYTES",
    "Fitting",
    "Helpers",
    "Schedule",
    "Served",
    "SidePool",
    "Task",
    "UnitFailure",
    "connect_ray",
    "forked_pool",
    "import_quietly",
    "join_warm_imports",
    "one_openmp_thread",
    "one_thread",
    "open_pool",
    "process_pool",
    "ray_map",
    "ray_unit_bytes",
    "run",
    "run_order",
    "start_warm_imports",
    "terminate_pool",
]
