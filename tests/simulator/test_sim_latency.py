"""The simulated replicas report the engines' TTFT/ITL histograms' _sum/_count (what the SLO term reads),
and `ours` carries the backtest's SLO as its latency targets."""

from __future__ import annotations

import math

import pytest
from sim_helpers import config, trace

from keda_llm.simulator.cluster.engine import Simulation
from keda_llm.simulator.cluster.fluid import FluidBackend
from keda_llm.simulator.control.controllers import KedaController, PodPlan, ScheduleController
from keda_llm.simulator.control.policies import build_controller, default_scaledobject


def test_detailed_replicas_count_ttft_per_request_and_itl_per_gap_by_hand() -> None:
    # As test_sim_loop's two-replica case (10 ms iterations, 5 output tokens = 4 gaps of 10 ms each):
    # replica 0 serves r0 (TTFT .01), r2 (.02, queued one iteration) and r3 (.01); replica 1 serves r1 (.01).
    sim = Simulation(trace([0, 0, 0, 1.0]), config(iteration_s=0.01),
                     ScheduleController("static", [PodPlan(0.0, math.inf, 0.0)] * 2))
    sim.run()
    a, b = sim.observe().observation.replicas
    assert (a.ttft_sum, a.ttft_count) == pytest.approx((0.04, 3.0))
    assert (a.itl_sum, a.itl_count) == pytest.approx((0.12, 12.0))  # 3 requests x 4 gaps x 10 ms
    assert (b.ttft_sum, b.ttft_count, b.itl_sum, b.itl_count) == pytest.approx((0.01, 1.0, 0.04, 4.0))


def test_fluid_replicas_report_what_the_slo_judges() -> None:
    # One replica, 3 requests of 5 output tokens (4 gaps each): the counters hold the fluid mode's own
    # per-request TTFTs (summed) and TPOT x 4 gaps per request, whatever those are.
    sim = Simulation(trace([0, 10, 20]), config(iteration_s=1.0),
                     ScheduleController("static", [PodPlan(0.0, math.inf, 0.0)]), backend=FluidBackend.slices(0.25))
    table = sim.run().request_table()
    (a,) = sim.observe().observation.replicas
    assert (a.ttft_count, a.itl_count) == (3.0, 12.0)
    assert a.ttft_sum == pytest.approx(float(table.ttft_s.sum()), rel=1e-6)
    assert a.itl_sum == pytest.approx(float((table.tpot_s * 4).sum()), rel=1e-6)


def test_ours_carries_the_backtest_slo_as_latency_targets() -> None:
    meta = default_scaledobject("m", slo_ttft_s=2.0, slo_itl_s=0.1).triggers[0].metadata
    assert (meta["targetTimeToFirstToken"], meta["targetInterTokenLatency"]) == ("2s", "0.1s")
    assert "targetTimeToFirstToken" not in default_scaledobject("m").triggers[0].metadata


def test_the_backtests_ours_holds_the_mean_latencies_at_half_the_slo() -> None:
    # each term holds a mean (ITL over all tokens, TTFT over requests); the SLO is judged per request
    # (simulator/control/policies.py)
    ctl = build_controller("ours", model="m", max_replicas=8, concurrency_target=8, static_replicas=1,
                           slo=(2.0, 0.1))
    assert isinstance(ctl, KedaController)
    meta = ctl.settings.triggers[0].metadata
    assert meta["targetInterTokenLatency"] == "0.05s" and meta["targetTimeToFirstToken"] == "1s"
