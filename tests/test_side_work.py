"""The engine's side work (issue 31): the pool beside the caller's thread, its kind decided once
by the schedule (``engine/pools.py``), the helper processes and warm imports
(``engine/background.py``); and the records selection hands across those pools (``Chosen``,
``Pick``), which must pickle."""

from __future__ import annotations

import pickle
import sys
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from distprompt.engine import (
    HERE,
    SIDE_THREADS,
    Helpers,
    Schedule,
    SidePool,
    import_quietly,
    join_warm_imports,
    open_pool,
    start_warm_imports,
)
from distprompt.pipeline.items import Pick
from distprompt.pipeline.sources import Chosen
from distprompt.records import Candidate

from factories import candidate


@given(st.integers(0, 64))
def test_the_side_pool_is_threads_for_few_workers_and_processes_for_more(workers: int) -> None:
    side = SidePool.for_workers(workers)
    if workers == 0:
        assert side == HERE
    elif workers <= SIDE_THREADS:
        assert side == SidePool("threads", SIDE_THREADS)
    else:
        assert side == SidePool("forked", workers)
    if workers:
        assert Schedule(workers=workers).side_pool == side
        assert Schedule(workers=workers, engine="ray").side_pool == side


def test_open_pool_opens_the_kind_it_is_told() -> None:
    with open_pool(HERE) as none:
        assert none is None
    with open_pool(SidePool.for_workers(1)) as threads:
        assert isinstance(threads, ThreadPoolExecutor)
        assert threads.submit(sum, [1, 2]).result() == 3
    with open_pool(SidePool.for_workers(3)) as procs:
        assert isinstance(procs, ProcessPoolExecutor)
        assert procs.submit(abs, -4).result() == 4
    assert SidePool.for_workers(1).shares_memory and not HERE.shares_memory


def test_a_thread_pool_drops_what_has_not_started_on_an_error() -> None:
    import threading

    gate = threading.Event()
    futs = []
    try:
        with pytest.raises(KeyError), open_pool(SidePool.for_workers(1)) as pool:
            assert pool is not None
            futs += [pool.submit(gate.wait, 30) for _ in range(SIDE_THREADS + 3)]
            raise KeyError("stop")
    finally:
        gate.set()  # the ones under way end
    assert sum(f.cancelled() for f in futs) >= 3  # at least those no thread held


_ECHO = (
    "import pickle, sys; req = pickle.load(sys.stdin.buffer); "
    "sys.stdout.buffer.write(pickle.dumps({a: req[a] * 2 for a in sys.argv[1:]}))"
)


def test_helpers_serve_a_pickled_request_and_say_why_one_failed() -> None:
    helpers = Helpers(_ECHO, [("a",), ("b", "c")])
    helpers.send({"a": 1, "b": 2, "c": 3})
    served = helpers.results()
    assert [(s.args, s.result) for s in served] == [
        (("a",), {"a": 2}),
        (("b", "c"), {"b": 4, "c": 6}),
    ]
    failing = Helpers("import sys; sys.exit('no plots here')", [("x",)])
    failing.send({})
    (bad,) = failing.results()
    assert bad.result is None and bad.why == "no plots here"


def test_stopped_helpers_give_nothing_back() -> None:
    helpers = Helpers("import time; time.sleep(30)", [("a",)])
    helpers.send(None)
    helpers.stop()
    (served,) = helpers.results()
    assert served.result is None


def test_warm_imports_import_what_they_can_and_are_joined() -> None:
    name = "email.mime.text"
    sys.modules.pop("json.tool", None)
    start_warm_imports(["json.tool", "no_such_module_distprompt"])
    join_warm_imports()
    assert "json.tool" in sys.modules
    import_quietly(["no_such_module_distprompt", name])  # a missing one is left, not raised
    assert name in sys.modules


def _cand() -> Candidate:
    return candidate(3, source="chat", n_prompt=3, n_resp=2)


@given(st.integers(1, 50), st.floats(0, 1e9), st.sampled_from(["take-all", "len1", "len2"]))
def test_chosen_and_pick_are_named_records_that_pickle(
    size: int, weight: float, stratum: str
) -> None:
    chosen = Chosen(_cand(), size, weight, stratum)
    pick = Pick(chosen.candidate, 4, size, weight, stratum)
    for rec in (chosen, pick):
        back = pickle.loads(pickle.dumps(rec, protocol=pickle.HIGHEST_PROTOCOL))
        assert type(back) is type(rec) and back._fields == rec._fields
        assert back[1:] == rec[1:]
        assert np.array_equal(back.candidate.prompt_ids, rec.candidate.prompt_ids)
    assert (pick.cluster, pick.size, pick.weight, pick.stratum) == (4, size, weight, stratum)
    with pytest.raises(AttributeError):
        chosen.size = 2  # type: ignore[misc]


def test_a_call_in_its_thread_gives_its_result_or_raises_in_the_caller() -> None:
    import threading

    from distprompt.engine.background import InThread

    seen: list[str] = []

    def work() -> int:
        seen.append(threading.current_thread().name)
        return 42

    job = InThread(work, name="distprompt-test")
    assert job.wait() is None and not job.started  # not started: nothing to wait for
    job.start()
    job.start()  # once
    assert job.wait() == 42 and job.result() == 42 and seen == ["distprompt-test"]

    here = InThread(work, name="unused")
    assert here.result() == 42 and here.result() == 42  # never started: run here, once
    assert seen == ["distprompt-test", threading.current_thread().name]

    def fail() -> int:
        raise ValueError("no tokenizer there")

    bad = InThread(fail, name="distprompt-test")
    bad.start()
    assert bad.wait() is None
    with pytest.raises(ValueError, match="no tokenizer there"):
        bad.result()
