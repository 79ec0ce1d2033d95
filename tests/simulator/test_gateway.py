"""The simulator's gateway runs the activator's rules (activator/core.py): a burst at zero past the bound
gets the production rejects, in both modes; the routing rules are core's; and spies show the activator
proxy and the simulator's gateway calling the same functions."""

from __future__ import annotations

import asyncio
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from sim_helpers import config, trace

sys.path.insert(0, str(Path(__file__).parents[1] / "activator"))  # the activator's loopback harness
from activator_harness import FakeModel, act_url, model_config, run, start_activator, wait_for

from keda_llm.activator import core
from keda_llm.activator import proxy as activator_proxy
from keda_llm.activator.config import ActivatorConfig
from keda_llm.simulator.cluster.engine import SimConfig, Simulation
from keda_llm.simulator.cluster.fluid import FluidBackend
from keda_llm.simulator.cluster.router import Router
from keda_llm.simulator.control.controllers import PodPlan, ScheduleController

BURST = [100.0 + i for i in range(10)]  # ten requests, one a second, at zero
ONE_POD_AT_130 = [PodPlan(130.0, math.inf, 30.0)]  # created at 100 (the first hold), ready at 130


def bounded(max_held: int) -> SimConfig:
    cfg = config(iteration_s=1.0)  # cold start 10 s + 50 s: Retry-After counts down from 60 s
    return SimConfig(cfg.replica, cfg.perf, cfg.cold_start, collection_interval_s=cfg.collection_interval_s,
                     model="m", max_held=max_held)


def test_a_burst_at_zero_past_the_bound_gets_the_activators_429s_with_retry_after() -> None:
    res = Simulation(trace(BURST), bounded(4), ScheduleController("one", ONE_POD_AT_130)).run()
    # held: the first four (the bound); refused: the next six, 429 queue_full, each told what is left of
    # the 60 s expected cold start since the first hold at t=100 (core.retry_after): 60 - (t - 100)
    assert [(r.request.rid, r.at, r.reason, r.status, r.retry_after) for r in res.refused] == [
        (4, 104.0, "queue_full", 429, 56), (5, 105.0, "queue_full", 429, 55), (6, 106.0, "queue_full", 429, 54),
        (7, 107.0, "queue_full", 429, 53), (8, 108.0, "queue_full", 429, 52), (9, 109.0, "queue_full", 429, 51)]
    assert res.refused_count == 6
    # the held four go to the pod when it is ready at 130: one prefill iteration (first token at 131),
    # then four decode iterations (5 output tokens): done at 135; the refused never reach a replica
    got = [(r.rid, r.first_token_s, r.finish_s) for r in res.requests]
    assert got == [(i, 131.0, 135.0) for i in range(4)] + [(i, None, None) for i in range(4, 10)]
    assert res.dropped_timeout == [] and res.end_s == 135.0
    # the report counts them as not served: a refusal misses the SLO
    table = res.request_table()
    assert np.isinf(table.ttft_s).sum() == 6


def test_the_fluid_mode_refuses_the_same_requests() -> None:
    res = Simulation(trace(BURST), bounded(4), ScheduleController("one", ONE_POD_AT_130), backend=FluidBackend).run()
    table = res.request_table()
    assert res.refused_count == 6
    assert np.isinf(table.ttft_s).tolist() == [False] * 4 + [True] * 6  # the first four held, then served


def test_no_bound_holds_every_request_and_max_wait_is_the_activators() -> None:
    res = Simulation(trace(BURST), config(iteration_s=1.0), ScheduleController("one", ONE_POD_AT_130)).run()
    assert res.refused == [] and all(r.finish_s is not None for r in res.requests)
    q = Router(max_wait_s=30.0)
    assert q.held.max_wait == 30.0 and isinstance(q.held, core.HeldQueue)


def test_max_held_zero_refuses_everything_and_a_negative_bound_is_an_error() -> None:
    res = Simulation(trace([5.0]), bounded(0), ScheduleController("none", [])).run()
    assert [(r.reason, r.status) for r in res.refused] == [("queue_full", 429)]
    with pytest.raises(ValueError, match="max_held must be >= 0, got -1"):
        Router(max_held=-1)


class _Rep:
    def __init__(self, index: int, outstanding: int) -> None:
        self.index, self.outstanding = index, outstanding


def test_least_outstanding_is_fewest_outstanding_ties_to_the_oldest() -> None:
    router = Router("least_outstanding")
    rng = np.random.default_rng(7)
    for _ in range(500):
        reps = [_Rep(i, int(rng.integers(0, 3))) for i in range(int(rng.integers(1, 6)))]
        want = min(reps, key=lambda r: (r.outstanding, r.index))  # the rule before core ran it
        assert router.pick(reps) is want


def test_the_fluid_loops_least_outstanding_is_cores_pick() -> None:
    # the compiled loop cannot call Python per request: its copy of the rule must pick what core picks
    import keda_llm.simulator.cluster.fluid_kernel as k

    rng = np.random.default_rng(11)
    for _ in range(300):
        n_slots = int(rng.integers(1, 7))
        slots = np.zeros((k.N_SLOT_ROWS, n_slots))
        slots[k.OUTSTANDING] = rng.integers(0, 3, n_slots)
        ready = np.sort(rng.choice(n_slots, int(rng.integers(1, n_slots + 1)), replace=False)).astype(np.int64)
        loads = [core.EndpointLoad("", int(slots[k.OUTSTANDING, s])) for s in ready]
        want = ready[core.pick_index(loads, core.RoutingRules(), 0)]  # type: ignore[index]
        before = slots[k.OUTSTANDING].copy()
        ints = np.zeros(k.N_INTS, dtype=np.int64)
        k.route(np.array([0], dtype=np.int64), ready, k.RULE_LEAST, ints, np.zeros((2, 4), dtype=np.int64),
                np.zeros((2, 4)), slots, np.array([10.0]), np.array([5.0]), 1e9)
        assert np.flatnonzero(slots[k.OUTSTANDING] - before).tolist() == [want]


def test_least_loaded_routes_on_the_last_collection_with_the_saturation_escape() -> None:
    router = Router("least_loaded")
    reps = [_Rep(0, 0), _Rep(1, 5), _Rep(2, 1)]
    # no collection yet: fewest outstanding
    assert router.pick(reps) is reps[0]
    # replica 0 saturated (KV 0.97 >= 0.95) though idle; of the others, score = kv + 0.1 waiting + 0.01 out:
    # replica 1: 0.30 + 0 + 0.05 = 0.35, replica 2: 0.20 + 0.2 + 0.01 = 0.41 -> replica 1
    router.observed({0: (0.97, 0.0), 1: (0.30, 0.0), 2: (0.20, 2.0)})
    assert router.pick(reps) is reps[1]


def test_least_loaded_refuses_the_fluid_mode() -> None:
    cfg = config(routing="least_loaded")
    with pytest.raises(ValueError, match=r"least_loaded .* detailed mode only"):
        Simulation(trace([1.0]), cfg, ScheduleController("none", []), backend=FluidBackend)


# ------------------------------------------------------------------------- one copy of the rules


SPIED = ("offer", "pop", "expire")


class Spies:
    """Counts calls to core's queue methods and routing and Retry-After functions, then calls through."""

    def __init__(self, mp: pytest.MonkeyPatch) -> None:
        self.calls: dict[str, int] = {}
        for name in SPIED:
            mp.setattr(core.HeldQueue, name, self._wrap(f"HeldQueue.{name}", getattr(core.HeldQueue, name)))
        mp.setattr(core, "pick_index", self._wrap("pick_index", core.pick_index))
        assert activator_proxy.retry_after is core.retry_after  # the proxy's name is core's function
        spy = self._wrap("retry_after", core.retry_after)
        mp.setattr(core, "retry_after", spy)
        mp.setattr(activator_proxy, "retry_after", spy)

    def _wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def spy(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            return fn(*args, **kwargs)
        return spy

    def names(self) -> set[str]:
        return set(self.calls)


@pytest.fixture
def spies(monkeypatch: pytest.MonkeyPatch) -> Iterator[Spies]:
    yield Spies(monkeypatch)


WANT = {"HeldQueue.offer", "HeldQueue.pop", "HeldQueue.expire", "pick_index", "retry_after"}


def test_the_simulators_gateway_calls_cores_rules(spies: Spies) -> None:
    # two pods at 130 (so routing has a choice), a bound of 4 (a refusal), expiry checked each collection
    plan = ONE_POD_AT_130 * 2
    res = Simulation(trace([*BURST, 140.0, 140.0]), bounded(4), ScheduleController("two", plan)).run()
    assert res.refused_count == 6
    assert spies.names() == WANT


def test_the_activator_proxy_calls_the_same_rules(spies: Spies) -> None:
    async def main() -> None:
        a, b = await FakeModel(ready=False).start(), await FakeModel(ready=False).start()
        cfg = ActivatorConfig(models=(model_config("m", (a.url, b.url), max_held=1, max_wait=30, cold_start=45,
                                                   scaled_object=""),),
                              default_model="m", probe_interval=0.05)
        act = await start_activator(cfg)
        try:
            async with aiohttp.ClientSession() as s:
                async def call() -> int:
                    async with s.post(act_url(act) + "/v1/completions", json={"model": "m"}) as r:
                        await r.read()
                        return r.status
                first = asyncio.create_task(call())
                await wait_for(lambda: len(act.models["m"].queue) == 1, what="one held")
                assert await call() == 429  # past the bound of 1
                await wait_for(lambda: "HeldQueue.expire" in spies.calls, what="the ticker's expiry pass")
                a.ready = b.ready = True
                assert await first == 200
                assert await call() == 200
        finally:
            await act.stop()
            await a.server.close()  # type: ignore[union-attr]
            await b.server.close()  # type: ignore[union-attr]

    run(main(), timeout=30)
    assert spies.names() == WANT


def test_move_ready_ends_a_cold_start_early_and_the_held_requests_follow() -> None:
    # the demo's warmed weights: a pod created at 10 (cold start 60 s: scheduled at 20, ready at 70) is told
    # at 30 that it is ready at 35 instead; the request held since 5 goes to it then: prefill 35-36, four
    # decode iterations, done at 40; the stale event at 70 changes nothing
    sim = Simulation(trace([5.0]), config(iteration_s=1.0), ScheduleController("one", [PodPlan(70.0, math.inf, 60.0)]))
    sim.begin()
    sim.advance_to(30.0)
    (pod,) = sim.cluster.replicas
    assert (pod.scheduled_at, pod.ready_at, sim.router.pending) == (20.0, 70.0, 1)
    sim.move_ready(pod, 35.0)
    sim.advance_to(100.0)
    (req,) = sim.requests
    assert (req.first_token_s, req.finish_s, pod.startup_seconds) == (36.0, 40.0, 25.0)
    assert sim.router.waits == [30.0] and sim.router.pending == 0
    with pytest.raises(ValueError, match="replica-0 is ready, not starting"):
        sim.move_ready(pod, 80.0)
