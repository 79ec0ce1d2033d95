"""The perfectly informed reactive schedule (simulator/report/reactive.py): the oracle's counts, a cold start
late, held; by hand, and through the simulator against the oracle on a burst."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sim_helpers import config, fixed_cold_start

from keda_llm.simulator.cluster.engine import SimResult, Simulation
from keda_llm.simulator.control.controllers import PodPlan, ScheduleController
from keda_llm.simulator.report.oracle import plan_oracle
from keda_llm.simulator.report.reactive import (
    ReactivePoint,
    cheapest_meeting,
    counted,
    delay_buckets,
    reactive_counts,
    reactive_pods,
)
from keda_llm.simulator.report.summary import Slo, summarize
from keda_llm.simulator.workload.traces import Trace


def test_counts_by_hand() -> None:
    c = np.array([1, 1, 5, 1, 1, 1, 1, 2])
    # two buckets late: b reads b - 2, the first two wrap to the trace's last buckets (the trace repeats)
    assert reactive_counts(c, 2, 0).tolist() == [1, 2, 1, 1, 5, 1, 1, 1]
    # held two more buckets: the burst's 5 is kept from bucket 4 to 6
    assert reactive_counts(c, 2, 2).tolist() == [1, 2, 2, 2, 5, 5, 5, 1]
    assert reactive_counts(c, 0, 0).tolist() == c.tolist()  # no delay, no hold: the oracle's own counts
    # headroom rounds up: 5 x 1.5 = 7.5 -> 8, 1 x 1.5 -> 2, 2 x 1.5 = 3
    assert reactive_counts(c, 0, 0, 1.5).tolist() == [2, 2, 8, 2, 2, 2, 2, 3]
    assert reactive_counts(np.array([], dtype=np.int64), 3, 3).tolist() == []


@pytest.mark.parametrize(("delay", "hold", "headroom"), [(-1, 0, 1.0), (0, -1, 1.0), (0, 0, 0.0), (0, 0, math.nan),
                                                         (0, 0, math.inf), (0, 0, -2.0)])
def test_bad_arguments_are_refused(delay: int, hold: int, headroom: float) -> None:
    with pytest.raises(ValueError):
        reactive_counts(np.array([1, 2]), delay, hold, headroom)


def test_delay_is_the_median_cold_start_in_whole_buckets_rounded_down() -> None:
    assert delay_buckets(fixed_cold_start(20.0, 100.0), 60.0) == 2  # 120 s
    assert delay_buckets(fixed_cold_start(20.0, 99.0), 60.0) == 1  # 119 s: generous, a bucket early
    assert delay_buckets(fixed_cold_start(5.0, 25.0), 60.0) == 0


def test_a_stored_schedule_is_counted_per_minute_as_the_pods_ready_in_it() -> None:
    """The frontier's store keeps an oracle planned on from a policy's schedule as its pods: the count of each
    minute is the pods ready at its middle (ready by it, removed after it): a pod ready at 90 s counts from the
    second minute on, one removed at 150 s not in the third, one removed at 200 s not in the fourth."""
    pods = [PodPlan(0.0, 300.0, 60.0), PodPlan(90.0, 200.0, 60.0), PodPlan(120.0, 150.0, 60.0),
            PodPlan(240.0, float("inf"), 60.0)]
    c = counted(pods, 300.0, 0.98)
    assert c.counts.tolist() == [1, 2, 2, 1, 2] and c.bucket_s == 60.0 and c.target_over_all == 0.98
    assert counted(pods, 0.0, 0.98).counts.tolist() == []
    assert counted(pods, 90.0, 0.98).counts.tolist() == [1, 2]  # a part minute counts as a bucket
    with pytest.raises(ValueError):
        counted(pods, math.nan, 0.98)


def test_counted_oracle_pods_give_the_reactive_schedule_the_oracles_own_counts() -> None:
    """Counted back from the oracle's own pods, the counts are at least the plan's (its pods bridge gaps
    shorter than a cold start) and the reactive schedule over them is at least the one over the plan."""
    tr = _burst()
    cfg = config(iteration_s=0.02, cold=(20.0, 100.0))
    slo = Slo(ttft_s=0.5, itl_s=0.05)
    plan = plan_oracle(tr, lambda ctl: Simulation(tr, cfg, ctl).run(), cfg.perf, cfg.replica, cfg.cold_start, slo,
                       bucket_s=60.0, target=0.99, max_replicas=16)
    back = counted(plan.pods, tr.duration_s, plan.target_over_all)
    assert len(back.counts) == len(plan.counts)
    assert (back.counts >= plan.counts).all() and back.counts.max() == plan.counts.max()
    assert back.target_over_all == plan.target_over_all


def _burst() -> Trace:
    """2 requests/s for 5 minutes, 19/s for 3, 2/s for 7 (Poisson, seeded); prompt 10, 20 output tokens."""
    rng = np.random.default_rng(3)
    parts = [np.sort(rng.uniform(a, a + d, int(rate * d))) for a, d, rate in ((0, 300, 2), (300, 180, 19),
                                                                              (480, 420, 2))]
    arr = np.concatenate(parts)
    n = len(arr)
    return Trace("burst", arr, np.full(n, 10, np.int32), np.full(n, 20, np.int32))


def test_a_burst_shorter_than_the_delay_plus_its_length_is_missed_late_and_met_only_when_held() -> None:
    tr = _burst()
    cfg = config(iteration_s=0.02, cold=(20.0, 100.0))  # 120 s: the reactive schedule is 2 buckets late
    slo = Slo(ttft_s=0.5, itl_s=0.05)

    def run(ctl: ScheduleController) -> SimResult:
        return Simulation(tr, cfg, ctl).run()

    plan = plan_oracle(tr, run, cfg.perf, cfg.replica, cfg.cold_start, slo, bucket_s=60.0, target=0.99,
                       max_replicas=16)
    assert plan.met_target
    oracle = summarize(plan.result, slo)
    late = summarize(run(ScheduleController("r", reactive_pods(plan, cfg.cold_start, 0, max_replicas=16))), slo)
    # the burst's replicas arrive two of its three minutes late: most of its requests queue past the SLO
    assert late.slo_attainment < 0.8 < oracle.slo_attainment
    # held past the burst's next occurrence (the trace repeats: 15 buckets), the count is the peak all along
    held_pods = reactive_pods(plan, cfg.cold_start, 15, max_replicas=16)
    assert reactive_counts(plan.counts, 2, 15).tolist() == [int(plan.counts.max())] * len(plan.counts)
    held = summarize(run(ScheduleController("r", held_pods)), slo)
    assert held.slo_attainment >= 0.99
    assert held.gpu_hours > oracle.gpu_hours


def test_long_buckets_are_cut_into_minutes_before_the_delay() -> None:
    """Planned in 120 s buckets, the schedule runs in 60 s steps: a 120 s cold start is two steps late, and
    every minute has at least the oracle's count of two minutes before (gaps shorter than a cold start are
    bridged, as the oracle's own pods are)."""
    tr = _burst()
    cfg = config(iteration_s=0.02, cold=(20.0, 100.0))
    slo = Slo(ttft_s=0.5, itl_s=0.05)
    plan = plan_oracle(tr, lambda ctl: Simulation(tr, cfg, ctl).run(), cfg.perf, cfg.replica, cfg.cold_start, slo,
                       bucket_s=120.0, target=0.99, max_replicas=16)
    pods = reactive_pods(plan, cfg.cold_start, 0, max_replicas=16)
    assert all(p.ready_at % 60.0 == 0 and p.remove_at % 60.0 == 0 for p in pods)
    per_minute = np.repeat(plan.counts, 2)
    expected = reactive_counts(per_minute, 2, 0)
    minutes = np.arange(len(per_minute)) * 60.0
    ready = np.array([sum(p.ready_at <= t < p.remove_at for p in pods) for t in minutes])
    assert (ready >= expected).all() and ready.max() == expected.max()
    # unsplit (resolution as long as the bucket), the same cold start is one bucket late
    whole = reactive_pods(plan, cfg.cold_start, 0, max_replicas=16, resolution_s=120.0)
    assert all(p.ready_at % 120.0 == 0 for p in whole)


def test_the_limit_is_the_cheapest_setting_at_the_target_and_none_where_no_setting_meets_it() -> None:
    pts = [ReactivePoint(0, 1.0, 0.95, 10.0, 0.0), ReactivePoint(4, 1.0, 0.991, 12.0, 0.0),
           ReactivePoint(2, 1.25, 0.999, 11.5, 0.0), ReactivePoint(10, 1.0, 0.99, 14.0, 0.0)]
    best = cheapest_meeting(pts, 0.99)
    assert best is not None and (best.hold, best.headroom) == (2, 1.25)  # cheaper than hold 4 and hold 10
    # exactly at the target meets it (float noise forgiven); above every point none does
    at = cheapest_meeting([ReactivePoint(10, 1.0, 0.99 - 1e-12, 14.0, 0.0)], 0.99)
    assert at is not None and at.hold == 10
    assert cheapest_meeting(pts, 0.9995) is None
    assert cheapest_meeting([], 0.5) is None
