"""The simulated replicas report the engines' TTFT/ITL histograms' _sum/_count (what the SLO term reads),
and `ours` carries the backtest's SLO as its latency targets."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sim_helpers import config, trace

from keda_llm.simulator.cluster.engine import Simulation
from keda_llm.simulator.cluster.fluid import FluidBackend
from keda_llm.simulator.control.controllers import KedaController, PodPlan, ScheduleController
from keda_llm.simulator.control.policies import at_latency_knob, build_controller, default_scaledobject
from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.run import Backtest, simulate
from keda_llm.simulator.workload.traces import Trace


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


@pytest.mark.parametrize("fluid", [False, True], ids=["detailed", "fluid"])
def test_the_engines_ttft_runs_from_when_it_got_a_held_request(fluid: bool) -> None:
    """Two requests reach the gateway at 1 s and 2 s; the one replica is ready at 30 s (0.01 s iterations: each
    request's first token about 0.01-0.02 s after it is handed over). A user waited ~28-29 s for the first token
    (the request table); the engine got the request at 30 s, and vLLM's TTFT histogram runs from there. When
    the simulated engines counted the gateway's hold in their TTFT, ours' latency term read a wake from zero
    as a TTFT many times its target and scaled BurstGPT's one replica to 13-14 after every wake-up (2,093 cold
    starts in the week instead of 333; docs/simulator-results.md, "Found and fixed (the hold in the TTFT)")."""
    backend = FluidBackend.slices(0.25) if fluid else None
    sim = Simulation(trace([1.0, 2.0]), config(iteration_s=0.01),
                     ScheduleController("late", [PodPlan(30.0, math.inf, 20.0)]), backend=backend)
    table = sim.run().request_table()
    (a,) = sim.observe().observation.replicas
    assert table.ttft_s.tolist() == pytest.approx([29.0, 28.0], abs=0.1)  # the users' TTFT: the hold included
    assert a.ttft_count == 2.0
    assert 0.0 < a.ttft_sum < 0.1  # the engine's: from 30 s


def test_a_wake_from_zero_sizes_for_the_engines_latency_not_for_the_wait_at_the_gateway() -> None:
    """ours-zero (70B TP4, typical cold starts) under six visits 40 minutes apart, each six requests 10 s apart
    and then one every 30 s for 15 minutes: every visit finds the model at zero and waits a cold start at
    the gateway. When the engines' TTFT counted that wait, the latency term read it as a TTFT many times its
    target and asked for up to 10 replicas (19 cold starts); from the engines' own TTFT (the released
    requests queue a few seconds in the one replica) it asks for one more at most: 10 cold starts."""
    p = get_preset("llama-3.1-70b/h100-tp4")
    visits = [600.0 + b * 2400.0 for b in range(6)]
    arr = np.sort([t0 + 10.0 * i for t0 in visits for i in range(6)] +
                  [t0 + 60.0 + 30.0 * j for t0 in visits for j in range(1, 31)])
    tr = Trace("visits", arr, np.full(len(arr), 1000, np.int32), np.full(len(arr), 200, np.int32))
    ctl = build_controller("ours-zero", model=p.model.name, max_replicas=16, concurrency_target=1.0,
                           static_replicas=1, cold_start_s=p.cold_start("typical").quantile(0.9), slo=(2.0, 0.1))
    res = simulate(tr, Backtest(p), ctl, "detailed")
    assert res.timeline.desired.count(0) > 0  # at zero between the visits
    assert max(res.timeline.desired) <= 2
    assert res.cold_starts <= 10
    assert all(r.finish_s is not None for r in res.requests)


def test_ours_carries_the_backtest_slo_as_latency_targets() -> None:
    meta = default_scaledobject("m", slo_ttft_s=2.0, slo_itl_s=0.1).triggers[0].metadata
    assert (meta["targetTimeToFirstToken"], meta["targetInterTokenLatency"]) == ("2s", "0.1s")
    assert "targetTimeToFirstToken" not in default_scaledobject("m").triggers[0].metadata


def test_the_backtests_ours_holds_the_mean_latencies_at_about_half_the_slo() -> None:
    # each term holds a mean (ITL over all tokens, TTFT over requests); the SLO is judged per request
    # (simulator/control/policies.py: the ITL target at 0.56 of the SLO, the TTFT target at 0.5)
    ctl = build_controller("ours", model="m", max_replicas=8, concurrency_target=8, static_replicas=1,
                           slo=(2.0, 0.1))
    assert isinstance(ctl, KedaController)
    meta = ctl.settings.triggers[0].metadata
    assert meta["targetInterTokenLatency"] == "0.056s" and meta["targetTimeToFirstToken"] == "1s"


def test_ours_frontier_knob_moves_both_latency_targets_by_one_factor() -> None:
    # the frontier's knob for ours: the ITL target, the TTFT target kept at the same fraction of its SLO
    # (1 s / 0.05 s = 20 ITL targets): 0.035 s -> 0.7 s, 0.1 s -> 2 s
    so = default_scaledobject("m", slo_ttft_s=1.0, slo_itl_s=0.05)
    for itl, ttft in ((0.035, "0.7s"), (0.1, "2s"), (0.05, "1s")):
        meta = at_latency_knob(so, itl).triggers[0].metadata
        assert (meta["targetInterTokenLatency"], meta["targetTimeToFirstToken"]) == (f"{itl:g}s", ttft)
        assert meta["policy"] == "tokens" and meta["model"] == "m"  # the rest as it was
    # no TTFT target set: the ITL alone, none invented
    meta = at_latency_knob(default_scaledobject("m", slo_itl_s=0.05), 0.07).triggers[0].metadata
    assert meta["targetInterTokenLatency"] == "0.07s" and "targetTimeToFirstToken" not in meta
    # a TTFT target with no ITL target to scale from: the ITL is set, the TTFT left as the user wrote it
    meta = at_latency_knob(default_scaledobject("m", slo_ttft_s=1.5), 0.07).triggers[0].metadata
    assert (meta["targetInterTokenLatency"], meta["targetTimeToFirstToken"]) == ("0.07s", "1.5s")
    with pytest.raises(ValueError, match="targetInterTokenLatency"):
        at_latency_knob(so, 0.0)


def test_the_frontier_point_runs_ours_at_the_knob() -> None:
    from keda_llm.simulator.hardware.presets import get_preset
    from keda_llm.simulator.report.frontier_point import build_point_controller
    from keda_llm.simulator.report.summary import Slo
    from keda_llm.simulator.run import Backtest

    bt = Backtest(get_preset("llama-3.1-70b/h100-tp4"), slo=Slo(2.0, 0.1))
    # the backtest's defaults: 0.56 x 0.1 s and 0.5 x 2 s, both moved by 0.035 / 0.056
    ctl = build_point_controller("ours", 0.035, trace([0.0, 1.0]), bt)
    assert isinstance(ctl, KedaController)
    meta = ctl.settings.triggers[0].metadata
    assert (meta["targetInterTokenLatency"], meta["targetTimeToFirstToken"]) == ("0.035s", "0.625s")
