"""A window of a longer trace runs after its lead-in and is scored on the window alone (cluster/lead_in.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from sim_helpers import config, run, trace

from keda_llm.simulator.cluster.lead_in import lead_and_window, scored_part
from keda_llm.simulator.control.baselines import queue_baseline
from keda_llm.simulator.control.controllers import KedaController, PodPlan, ScheduleController
from keda_llm.simulator.control.policies import build_controller
from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.report.frontier_cache import trace_digest
from keda_llm.simulator.report.summary import Slo, Summary, summarize
from keda_llm.simulator.run import Backtest, simulate
from keda_llm.simulator.workload.traces import Trace, TraceError


def _hashed(arrivals: list[float]) -> Trace:
    n = len(arrivals)
    offs = np.arange(0, 2 * n + 1, 2, dtype=np.int64)  # two hashes per request: (i, 1000 + i)
    vals = np.array([v for i in range(n) for v in (i, 1000 + i)], dtype=np.int64)
    return Trace("h", np.asarray(arrivals, dtype=np.float64), np.arange(1, n + 1, dtype=np.int32),
                 np.full(n, 3, dtype=np.int32), offs, vals)


def test_window_keeps_the_traffic_before_it() -> None:
    tr = _hashed([0.0, 5.0, 40.0, 55.0, 60.0, 61.0, 90.0, 130.0])
    w = tr.window(60.0, 120.0, lead_s=30.0)
    assert list(w.arrival_s) == [0.0, 1.0, 30.0]  # 60, 61, 90 re-based
    assert w.lead is not None and w.lead_s == 30.0
    assert list(w.lead.arrival_s) == [10.0, 25.0]  # 40 and 55 re-based to the lead-in's start (30 s)
    both = w.after_lead()
    assert list(both.arrival_s) == [10.0, 25.0, 30.0, 31.0, 60.0]
    assert list(both.prompt_tokens) == [3, 4, 5, 6, 7]
    # the prefix hashes follow their requests through the join
    assert [both.prefix_hashes(i) for i in range(len(both))] == [(i, 1000 + i) for i in range(2, 7)]
    # as much lead-in as the trace has: a window at 20 s gets 20 s
    early = tr.window(20.0, 50.0, lead_s=3600.0)
    assert early.lead_s == 20.0 and early.lead is not None and list(early.lead.arrival_s) == [0.0, 5.0]
    # none asked, or a window at the trace's start: no lead-in
    assert tr.window(60.0, 120.0).lead is None and tr.window(0.0, 50.0, lead_s=30.0).lead is None
    assert tr.window(60.0, 120.0).after_lead() is not None


def test_a_whole_trace_takes_its_own_end_as_its_lead_in() -> None:
    tr = _hashed([0.0, 5.0, 40.0, 55.0, 60.0])
    w = tr.wrapped(20.0)  # the last 20 s: 40 s to 60 s
    assert list(w.arrival_s) == list(tr.arrival_s) and w.lead is not None and w.lead_s == 20.0
    assert list(w.lead.arrival_s)[:2] == [0.0, 15.0] and w.lead.arrival_s[-1] < 20.0  # 60 s: just before 20
    assert [w.lead.prefix_hashes(i) for i in range(3)] == [(i, 1000 + i) for i in (2, 3, 4)]
    assert list(w.after_lead().arrival_s)[3:] == [20.0, 25.0, 60.0, 75.0, 80.0]
    assert tr.wrapped(600.0).lead_s == 60.0  # at most the whole trace
    assert tr.wrapped(0.0).lead is None and trace([]).wrapped(60.0).lead is None
    with pytest.raises(TraceError, match="lead-in"):
        tr.wrapped(float("nan"))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_bad_lead_in_is_a_trace_error(bad: float) -> None:
    with pytest.raises(TraceError, match="lead-in"):
        trace([0.0, 1.0]).window(0.5, 2.0, lead_s=bad)
    with pytest.raises(TraceError, match="lead-in"):
        dataclasses.replace(trace([1.0]), lead=trace([5.0]), lead_s=2.0)  # its arrivals past its length


def test_the_cache_key_sees_the_lead_in() -> None:
    tr = trace([float(i) for i in range(100)])
    assert trace_digest(tr.window(50.0, 80.0)) != trace_digest(tr.window(50.0, 80.0, lead_s=20.0))
    assert trace_digest(tr.window(50.0, 80.0, lead_s=10.0)) != trace_digest(tr.window(50.0, 80.0, lead_s=20.0))


def test_totals_count_from_the_window() -> None:
    # one pod ready at 0 all run long; the lead-in is 100 s: GPU-seconds count from 100 to the end only,
    # and the requests of the lead-in are not in the result
    ctl = ScheduleController("fixed", [PodPlan(ready_at=0.0, remove_at=float("inf"), cold_start_s=60.0)])
    cfg = dataclasses.replace(config(), score_from_s=100.0)
    res = scored_part(run(trace([10.0, 20.0, 150.0, 160.0]), cfg, ctl), 100.0)
    assert [r.arrival_s for r in res.requests] == [50.0, 60.0]
    assert all(r.finish_s is not None and r.finish_s > r.arrival_s for r in res.requests)
    assert res.gpu_seconds == pytest.approx(res.end_s)  # one GPU from the window's start to the run's end
    assert res.timeline.t[0] == 0.0 and all(t >= 0 for t in res.timeline.t)
    assert res.cold_starts == 0 and res.scale_events == 0


def test_cold_starts_and_scalings_in_the_lead_in_are_not_the_windows() -> None:
    # 12 requests at 0 scale the queue baseline up in the lead-in (cold starts at 0): none counted after 300 s
    settings, scaler = queue_baseline(max_replicas=10)
    ctl = KedaController("queue", settings, scaler)
    cfg = dataclasses.replace(config(max_num_seqs=1), score_from_s=300.0)
    res = scored_part(run(trace([0.0] * 12 + [400.0], output=100), cfg, ctl), 300.0)
    changes = [(e.at, e.replicas_after) for e in ctl.events if e.replicas_before != e.replicas_after]
    assert changes[0] == (0.0, 3)  # it scaled up in the lead-in
    assert res.cold_starts == 0  # those pods were created in the lead-in
    assert res.scale_events == len([c for c in changes if c[0] >= 300.0]) < len(changes)
    assert [e.at for e in res.events] == [e.at - 300.0 for e in ctl.events if e.at >= 300.0]
    assert [r.arrival_s for r in res.requests] == [100.0]


PRESET = get_preset("llama-3.1-8b/h100")
SLO = Slo(ttft_s=2.0, itl_s=0.1)


def _steady(rate: float, seconds: float, seed: int = 0) -> Trace:
    rng = np.random.default_rng(seed)
    n = int(rate * seconds)
    arr = np.sort(rng.uniform(0.0, seconds, n))
    return Trace("steady", arr, rng.integers(200, 2000, n).astype(np.int32), rng.integers(50, 300, n).astype(np.int32))


def test_a_reactive_policy_meets_the_window_once_it_has_lived_the_lead_in() -> None:
    # a steady 40 requests/s that needs several 8B replicas: ours started cold at the window's start (one
    # replica, no history) misses most of the window's first cold start; after a 10-minute lead-in of the
    # same load it holds the replicas already, as a running deployment would, and pays for the window only
    tr = _steady(rate=40.0, seconds=1200.0)
    bt = Backtest(PRESET, slo=SLO, mode="fluid")
    cold_start_p90 = PRESET.cold_start("typical").quantile(0.9)

    def summary(window: Trace) -> Summary:
        ctl = build_controller("ours", model="m", max_replicas=16, concurrency_target=1.0, static_replicas=1,
                               slo=(SLO.ttft_s, SLO.itl_s), cold_start_s=cold_start_p90)
        return summarize(simulate(window, bt, ctl, "fluid"), SLO)

    cold, warm = summary(tr.window(600.0, 1200.0)), summary(tr.window(600.0, 1200.0, lead_s=600.0))
    assert cold.requests == warm.requests == len(tr.window(600.0, 1200.0))
    assert cold.slo_attainment < 0.9 < 0.99 < warm.slo_attainment
    assert warm.gpu_hours < cold.gpu_hours  # no catching up: the window's pods only
    assert warm.cold_starts < cold.cold_starts


def test_a_schedule_planned_for_the_window_ignores_the_lead_in() -> None:
    tr = _steady(rate=5.0, seconds=600.0)
    bt = Backtest(PRESET, slo=SLO, mode="detailed")
    plan = [PodPlan(ready_at=0.0, remove_at=float("inf"), cold_start_s=60.0)]
    a = simulate(tr.window(300.0, 600.0), bt, ScheduleController("oracle", plan), "detailed")
    b = simulate(tr.window(300.0, 600.0, lead_s=300.0), bt, ScheduleController("oracle", plan), "detailed")
    assert [r.finish_s for r in a.requests] == [r.finish_s for r in b.requests]
    assert a.gpu_seconds == b.gpu_seconds


def test_lead_and_window_without_a_lead_in_is_the_trace() -> None:
    tr = trace([0.0, 1.0])
    assert lead_and_window(tr) == (tr, 0.0)
