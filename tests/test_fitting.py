"""The engine's thread scheduler (``engine.threads.Fitting``, selection's in the export): large
pools not selected at once."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

import pytest

from distprompt.engine.threads import Fitting


def _recorder() -> tuple[dict[str, list], threading.Lock]:
    return {"started": [], "at_once": []}, threading.Lock()


def test_jobs_start_only_when_their_weights_fit_beside_those_under_way() -> None:
    seen, lock = _recorder()
    running: dict[str, int] = {}

    def job(name: str, weight: int) -> str:
        with lock:
            running[name] = weight
            seen["started"].append(name)
            seen["at_once"].append(sum(running.values()))
        time.sleep(0.05)
        with lock:
            del running[name]
        return name

    jobs = [("big1", 10), ("big2", 9), ("s1", 2), ("s2", 2), ("s3", 1), ("huge", 40)]
    with ThreadPoolExecutor(2) as pool:
        fitting = Fitting(pool, 12)
        futs = {fitting.submit(w, job, n, w): n for n, w in jobs}
        wait(futs)
    assert sorted(f.result() for f in futs) == sorted(n for n, _ in jobs)
    # never two jobs over the limit at once; a job above it alone ran anyway
    assert max(x for x in seen["at_once"] if x != 40) <= 12
    assert "huge" in seen["started"]
    # big2 did not start beside big1: the small ones that fit went first
    assert seen["started"][:2] == ["big1", "s1"]
    assert seen["started"].index("big2") > seen["started"].index("s1")


def test_a_waiting_job_can_be_cancelled_and_an_error_reaches_its_future() -> None:
    gate = threading.Event()

    def slow() -> str:
        gate.wait(5)
        return "slow"

    def fails() -> None:
        raise ValueError("boom")

    with ThreadPoolExecutor(2) as pool:
        fitting = Fitting(pool, 10)
        a = fitting.submit(10, slow)
        b = fitting.submit(10, slow)  # does not fit beside a: waits
        c = fitting.submit(0, fails)
        time.sleep(0.1)
        assert b.cancel()
        gate.set()
        wait([a, c])
    assert a.result() == "slow" and b.cancelled()
    with pytest.raises(ValueError, match="boom"):
        c.result()
