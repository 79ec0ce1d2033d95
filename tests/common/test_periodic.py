"""The one periodic worker (common/periodic.py): every background loop's timing and failure rule.

Bounds only from below (a step never comes early, an overrun is never followed back to back): a busy
machine can only make the real gaps longer."""

from __future__ import annotations

import math
import threading
import time

import pytest

from keda_llm.common.periodic import Periodic

INTERVAL = 0.05


def _run_until(calls: int, worker_step: list[float], worker: Periodic, done: threading.Event) -> None:
    worker.start()
    assert done.wait(10), f"only {len(worker_step)} of {calls} steps ran"
    worker.stop()


def test_a_step_that_raises_is_logged_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    starts: list[float] = []
    done = threading.Event()

    def step() -> None:
        starts.append(time.monotonic())
        if len(starts) >= 3:
            done.set()
        raise RuntimeError("boom")

    _run_until(3, starts, Periodic("failing", INTERVAL, step), done)
    assert len(starts) >= 3
    assert "failing: step failed" in caplog.text and "boom" in caplog.text


def test_fixed_rate_and_an_overrun_skips_its_missed_ticks() -> None:
    starts: list[float] = []
    done = threading.Event()

    def step() -> None:
        starts.append(time.monotonic())
        if len(starts) == 2:
            time.sleep(3.5 * INTERVAL)  # overruns three ticks
        if len(starts) >= 4:
            done.set()

    t0 = time.monotonic()
    _run_until(4, starts, Periodic("overrun", INTERVAL, step), done)
    # lower bounds only: a loaded machine starts a step late, and fixed rate then makes the next gap shorter
    assert starts[0] >= t0  # the first step at once
    assert starts[1] >= t0 + INTERVAL * 0.99
    # after the overrun a whole interval passes: the missed ticks are not run back to back
    assert starts[2] - starts[1] >= 3.5 * INTERVAL + INTERVAL * 0.99
    assert starts[3] - starts[1] >= 3.5 * INTERVAL + 2 * INTERVAL * 0.99


def test_first_step_at_once_or_after_one_interval() -> None:
    for first_now in (True, False):
        started = time.monotonic()
        first: list[float] = []
        done = threading.Event()

        def step(first: list[float] = first, done: threading.Event = done) -> None:
            first.append(time.monotonic())
            done.set()

        worker = Periodic("first", 0.3, step, first_now=first_now)
        _run_until(1, first, worker, done)
        if not first_now:
            assert first[0] - started >= 0.3 * 0.99


def test_stop_ends_the_thread_and_start_twice_runs_one_thread() -> None:
    count = 0
    lock = threading.Lock()

    def step() -> None:
        nonlocal count
        with lock:
            count += 1

    worker = Periodic("twice", INTERVAL, step)
    worker.start()
    worker.start()
    assert sum(t.name == "twice" for t in threading.enumerate()) == 1
    worker.stop()
    assert not worker.running
    after = count
    time.sleep(3 * INTERVAL)
    assert count == after  # no step after stop() returned


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan])
def test_an_interval_that_is_not_positive_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="interval must be > 0"):
        Periodic("bad", bad, lambda: None)
