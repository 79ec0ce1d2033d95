"""The event loop's order (time, then the kinds' priority, then insertion) and the one loop's two backends."""

from __future__ import annotations

import math

import pytest
from sim_helpers import config, trace

from keda_llm.simulator.cluster.detailed import DetailedBackend
from keda_llm.simulator.cluster.engine import Simulation
from keda_llm.simulator.cluster.events import ARRIVAL, CONTROL, OBSERVE, PHASE, STEP, EventLoop
from keda_llm.simulator.cluster.fluid import FluidBackend
from keda_llm.simulator.control.controllers import PodPlan, ScheduleController


def test_events_leave_by_time_then_priority_then_insertion() -> None:
    loop = EventLoop()
    loop.push(2.0, STEP, "late step")
    loop.push(1.0, CONTROL, "control")
    loop.push(1.0, ARRIVAL, "first arrival")
    loop.push(1.0, PHASE, "phase")
    loop.push(1.0, ARRIVAL, "second arrival")
    loop.push(1.0, OBSERVE, "observe")
    assert (len(loop), loop.next_time()) == (6, 1.0)
    got = []
    while (ev := loop.pop_before(math.inf)) is not None:
        got.append(ev[2])
    assert got == ["phase", "first arrival", "second arrival", "observe", "control", "late step"]
    assert loop.next_time() == math.inf


def test_pop_before_leaves_what_is_due_at_or_after_the_bound() -> None:
    loop = EventLoop()
    loop.push(5.0, OBSERVE)
    assert loop.pop_before(5.0) is None
    assert loop.pop_before(math.nextafter(5.0, math.inf)) == (5.0, OBSERVE, None)
    assert len(loop) == 0


def _static() -> ScheduleController:
    return ScheduleController("static", [PodPlan(0.0, math.inf, 0.0)])


def test_both_modes_are_the_same_simulation_with_another_backend() -> None:
    detailed = Simulation(trace([0.0, 1.0]), config(iteration_s=0.1), _static())
    fluid = Simulation(trace([0.0, 1.0]), config(iteration_s=0.1), _static(), backend=FluidBackend)
    assert type(detailed) is type(fluid) is Simulation
    assert isinstance(detailed.backend, DetailedBackend) and isinstance(fluid.backend, FluidBackend)
    # each request: 1 prefill iteration + 4 decode ones of 0.1 s (5 output tokens), on a warm replica
    for res in (detailed.run(), fluid.run()):
        table = res.request_table()
        assert table.ttft_s.tolist() == pytest.approx([0.1, 0.1])
        assert res.mode == ("detailed" if res.cohorts is None else "fluid")


def test_the_fluid_backend_runs_whole_not_to_a_given_time() -> None:
    sim = Simulation(trace([0.0]), config(), _static(), backend=FluidBackend.slices(0.5))
    sim.begin()
    with pytest.raises(ValueError, match="fluid mode runs whole"):
        sim.advance_to(10.0)


def test_advancing_in_steps_handles_the_same_events_as_one_run() -> None:
    # a pod from 0 and one more from 20 s (10 s + 50 s cold start: ready at 80 s), 40 requests over 100 s
    arrivals = [2.5 * i for i in range(40)]
    plan = [PodPlan(0.0, math.inf, 0.0), PodPlan(20.0, math.inf, 60.0)]
    whole = Simulation(trace(arrivals, output=30), config(iteration_s=0.2, max_num_seqs=2),
                       ScheduleController("two", plan))
    whole.run()
    stepped = Simulation(trace(arrivals, output=30), config(iteration_s=0.2, max_num_seqs=2),
                         ScheduleController("two", plan))
    stepped.begin()
    t = 0.0
    while stepped.in_flight or stepped.arrived < len(arrivals):
        t += 7.0
        stepped.advance_to(t)
        assert stepped.now == t
    assert [(q.first_token_s, q.finish_s) for q in stepped.requests] == \
        [(q.first_token_s, q.finish_s) for q in whole.requests]
    assert len(stepped.cluster.replicas) == 2 and all(q.finish_s is not None for q in whole.requests)
