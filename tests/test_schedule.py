"""The engine without Ray: the schedule's decisions, the order tasks are handed out, and the map
that gives each group's results back in order wherever the tasks run."""

from __future__ import annotations

import operator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distprompt.config import Config
from distprompt.engine import UNIT_BYTES, Schedule, Task, run, run_order
from distprompt.errors import ConfigError


def _tasks(sizes: list[list[int]]) -> list[Task]:
    """Tasks of groups ``g0, g1, …``, group ``i`` made of tasks of ``sizes[i]`` bytes."""
    return [
        Task(f"g{g} #{j}", f"g{g}", size, sum(group))
        for g, group in enumerate(sizes)
        for j, size in enumerate(group)
    ]


_GROUPS = st.lists(st.lists(st.integers(1, 1000), min_size=1, max_size=4), min_size=1, max_size=6)


def _in_group_order(order: list[int], tasks: list[Task]) -> bool:
    by_group: dict[str, list[int]] = {}
    for i in order:
        by_group.setdefault(tasks[i].group, []).append(i)
    return all(ids == sorted(ids) for ids in by_group.values())


@settings(max_examples=200, deadline=None)
@given(sizes=_GROUPS, workers=st.integers(1, 4))
def test_run_order_hands_out_every_task_once_large_ones_first_then_by_group(
    sizes: list[list[int]], workers: int
) -> None:
    tasks = _tasks(sizes)
    order = run_order(tasks, workers)
    assert sorted(order) == list(range(len(tasks)))
    # a task of more than 1 / (2 * workers) of the bytes goes first, whatever its group
    alone = {
        i
        for i, t in enumerate(tasks)
        if workers > 1 and t.size * 2 * workers > sum(u.size for u in tasks)
    }
    assert order[: len(alone)] == sorted(alone, key=lambda i: (-tasks[i].size, i))
    assert _in_group_order([i for i in order if i not in alone], tasks)


@pytest.mark.parametrize(
    ("schedule", "split", "processes", "ordered"),
    [
        (Schedule(), None, False, True),
        (Schedule(workers=2), UNIT_BYTES, True, False),
        (Schedule(processes=True), UNIT_BYTES, True, False),
        (Schedule(processes=False), None, False, True),
        (Schedule(unit_bytes=4096, processes=False), 4096, False, True),
        (Schedule(workers=3, unit_bytes=4096), 4096, True, False),
    ],
)
def test_the_schedule_decides_split_and_pool(
    schedule: Schedule, split: int | None, processes: bool, ordered: bool
) -> None:
    assert schedule.split_bytes(1 << 30) == split
    assert schedule.in_processes(3) is processes
    assert schedule.ordered(3) is ordered
    assert not schedule.remote


def test_one_task_with_several_workers_runs_here_unless_processes_are_asked_for() -> None:
    assert not Schedule(workers=2).in_processes(1)
    assert Schedule(workers=2, processes=True).in_processes(1)
    assert Schedule(engine="ray").remote
    assert not Schedule(engine="ray", workers=4).in_processes(8)


def test_the_schedule_of_a_config_and_bad_schedules() -> None:
    config = Config(workers=3, engine="ray", ray_address="auto")
    assert Schedule.of(config, processes=True) == Schedule(3, "ray", "auto", True)
    with pytest.raises(ConfigError, match="workers"):
        Schedule(workers=0)
    with pytest.raises(ConfigError, match="engine"):
        Schedule(engine="spark")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "schedule",
    [Schedule(), Schedule(workers=2), Schedule(processes=True)],
    ids=["here", "two workers", "one worker process"],
)
def test_run_gives_each_groups_results_in_order(schedule: Schedule) -> None:
    sizes = [[5, 1, 1], [900], [3], [2, 2]]  # the large one is handed out first with workers
    tasks = _tasks(sizes)
    args = list(range(-1, -len(tasks) - 1, -1))
    done: list[int] = []
    started: list[bool] = []
    results = run(
        operator.neg,
        args,
        tasks,
        schedule,
        on_started=lambda: started.append(True),
        on_done=done.append,
    )
    got = list(results)
    assert sorted(i for i, _ in got) == list(range(len(tasks)))
    assert all(r == -args[i] for i, r in got)
    assert _in_group_order([i for i, _ in got], tasks)
    if schedule.ordered(len(tasks)):
        assert [i for i, _ in got] == list(range(len(tasks)))
    assert sorted(done) == list(range(len(tasks))) and started == [True]


def test_run_here_uses_the_callers_function_and_raises_what_it_raises() -> None:
    tasks = _tasks([[1, 1]])
    seen: list[int] = []

    def here(i: int) -> int:
        seen.append(i)
        if i == 1:
            raise ValueError("unit 1")
        return i

    results = run(operator.neg, [0, 1], tasks, Schedule(), here=here)
    assert next(results) == (0, 0)
    with pytest.raises(ValueError, match="unit 1"):
        next(results)
    assert seen == [0, 1]


def test_a_worker_error_reaches_the_caller() -> None:
    tasks = _tasks([[1], [1]])
    with pytest.raises(TypeError):
        list(run(operator.neg, ["a", "b"], tasks, Schedule(workers=2)))
