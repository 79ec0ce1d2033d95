"""The detailed engine's gauges at an observation are what a real engine exports then: the requests its
step in flight will finish are still running, their KV cache still held. The engine applies a step when it
starts it, and a run of pure-decode iterations lasts until its first request finishes or the next arrival,
so reading its state as-is had the running count and KV usage lead the engine by up to that run (8B H100,
azure2023-conv: 10% fewer requests running at the samples than in flight)."""

from __future__ import annotations

import numpy as np
from sim_helpers import config, run, trace

from keda_llm.simulator.cluster.engine import Simulation
from keda_llm.simulator.control.anchors.base import OwnLoopController, Signals
from keda_llm.simulator.control.controllers import PodPlan, ScheduleController
from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.run import Backtest, simulate
from keda_llm.simulator.workload.traces import load_shipped


class Probe(OwnLoopController):
    """One warm replica, never scaled; records every scrape."""

    def __init__(self, every_s: float) -> None:
        super().__init__("probe", scrape_s=every_s, tick_s=every_s)
        self.seen: list[Signals] = []

    def sample(self, sim: Simulation, sig: Signals) -> None:
        self.seen.append(sig)

    def decide(self, sim: Simulation) -> int | None:
        return None


def test_a_request_in_a_decode_run_is_running_until_its_last_token() -> None:
    # 1 s iterations: the prompt's iteration ends at 1.5 s, then nine decode iterations run as one step to
    # 10.5 s (nothing arrives before 20 s to cut it); the request and its cache are there at 5 s and 10 s,
    # gone at 15 s.
    probe = Probe(5.0)
    res = run(trace([0.5, 20.0], prompt=10, output=10), config(iteration_s=1.0), probe)
    by_t = {round(s.at, 6): s for s in probe.seen}
    for t in (5.0, 10.0):
        assert by_t[t].running == (1.0,) and by_t[t].waiting == (0.0,), t
        assert by_t[t].kv_sum > 0.0, t
    assert by_t[15.0].running == (0.0,) and by_t[15.0].kv_sum == 0.0
    assert res.request_table().ttft_s[0] == 1.0  # the first token at the prompt iteration's end (from 0.5 s)


def test_the_running_count_at_every_sample_is_the_requests_in_the_engines() -> None:
    # Two static 8B H100 replicas on ten minutes of chat traffic: at each 5 s sample the reported running +
    # waiting equals the requests the engines hold then (arrived, last token not yet out), from the requests'
    # own times; ties at an event's instant aside, on every sample.
    preset = get_preset("llama-3.1-8b/h100")
    tr = load_shipped("azure2023-conv").window(600.0, 1200.0)
    bt = Backtest(preset, cold_start="typical")
    seen: list[tuple[float, float]] = []

    class Record(ScheduleController):
        def observe(self, sim: Simulation, state) -> None:  # type: ignore[no-untyped-def]
            seen.append((sim.now, sum((s.running or 0.0) + (s.waiting or 0.0)
                                        for s in state.observation.replicas if s.up)))
            super().observe(sim, state)

    res = simulate(tr, bt, Record("static", [PodPlan(0.0, np.inf, 0.0)] * 2), "detailed")
    t = res.request_table()
    latency = preset.perf().request_latency_s
    first = t.arrival_s + t.ttft_s
    engine_end = first + np.nan_to_num(t.tpot_s) * np.maximum(tr.output_tokens - 1, 0) - latency
    gauge = np.array([g for _, g in seen])
    truth = np.array([np.count_nonzero((t.arrival_s <= at) & (engine_end > at)) for at, _ in seen])
    assert len(seen) > 100 and truth.mean() > 2.0  # the replicas are busy at the samples
    assert np.mean(gauge == truth) >= 0.97, (gauge - truth)[gauge != truth]
    assert abs(float(np.mean(gauge - truth))) < 0.05
