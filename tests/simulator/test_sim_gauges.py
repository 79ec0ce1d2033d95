"""The detailed engine's gauges at an observation are what a real engine exports then: the requests its
step in flight will finish are still running, their KV cache still held. The engine applies a step when it
starts it, and a run of pure-decode iterations lasts until its first request finishes or the next arrival,
so reading its state as-is had the running count and KV usage lead the engine by up to that run (8B H100,
azure2023-conv: 10% fewer requests running at the samples than in flight)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from sim_helpers import config, run, trace

from keda_llm.simulator.cluster.engine import Simulation
from keda_llm.simulator.control.anchors.base import OwnLoopController, Signals
from keda_llm.simulator.control.controllers import PodPlan, ScheduleController
from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.run import Backtest, simulate
from keda_llm.simulator.workload.traces import Trace, load_shipped


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


# -- the gauges as vLLM publishes them (SimConfig.gauges "published") ---------------------------------------


def test_published_gauges_hold_the_last_iteration_ends_state() -> None:
    # 1 s iterations. A (0.5 s) prefills to 1.5 s, then decodes; B arrives at 4.2 s, during the iteration
    # 3.5-4.5 s, and is admitted in the next (4.5-5.5 s). vLLM publishes after each iteration, and B reaches
    # its scheduler after the one in flight: at 1 s nothing is published yet; at 5 s A runs and B is in
    # neither gauge (it is in the engine's queue since 4.2 s); at 6 s both run. The leading timing shows the
    # engine's state as the simulator applies it: A running at 1 s, both at 5 s.
    seen: dict[str, dict[float, Signals]] = {}
    for timing in ("leading", "published"):
        probe = Probe(1.0)
        cfg = replace(config(iteration_s=1.0), gauges=timing)
        run(trace([0.5, 4.2], prompt=10, output=10), cfg, probe)
        seen[timing] = {round(s.at, 6): s for s in probe.seen}
    pub, lead = seen["published"], seen["leading"]
    assert pub[1.0].running == (0.0,) and pub[1.0].kv_sum == 0.0
    assert lead[1.0].running == (1.0,)
    assert pub[2.0].running == (1.0,) and pub[2.0].kv_sum > 0.0
    assert pub[5.0].running == (1.0,) and pub[5.0].waiting == (0.0,)
    assert lead[5.0].running == (2.0,)
    assert pub[6.0].running == (2.0,) and pub[6.0].waiting == (0.0,)


def test_a_decode_run_publishes_at_each_iteration_end() -> None:
    # A alone: its prompt iteration ends at 1.5 s, then nine decode iterations run as one step to 10.5 s. Each
    # iteration's end publishes: at 1 s nothing yet; from 2 s on A runs, and its KV grows a token an iteration
    # (16-token blocks: the prompt's 15 tokens and the first decode's make one block, the next decode's at
    # 3.5 s starts the second).
    probe = Probe(1.0)
    run(trace([0.5, 30.0], prompt=15, output=10), replace(config(iteration_s=1.0), gauges="published"), probe)
    by_t = {round(s.at, 6): s for s in probe.seen}
    assert by_t[1.0].running == (0.0,)
    blocks = [round(by_t[float(t)].kv_sum * 10_000) for t in range(2, 11)]  # of the helper's 10,000
    assert all(by_t[float(t)].running == (1.0,) for t in range(2, 11))
    assert blocks == [1, 1] + [2] * 7  # the second block from the iteration ending at 3.5 s
    assert by_t[11.0].running == (0.0,) and by_t[11.0].kv_sum == 0.0


def _static_means(tr: Trace, mode: str, n: int) -> tuple[float, float]:
    """Mean running and waiting over the replicas at the samples: `n` static 8B H100 replicas, published."""
    bt = Backtest(get_preset("llama-3.1-8b/h100"), cold_start="typical", gauges="published")
    seen: list[tuple[float, float]] = []

    class Record(ScheduleController):
        def observe(self, sim: Simulation, state) -> None:  # type: ignore[no-untyped-def]
            ups = [s for s in state.observation.replicas if s.up]
            seen.append((sum(s.running or 0.0 for s in ups), sum(s.waiting or 0.0 for s in ups)))
            super().observe(sim, state)

    simulate(tr, bt, Record("static", [PodPlan(0.0, np.inf, 0.0)] * n), mode)  # type: ignore[arg-type]
    arr = np.array(seen[len(seen) // 20:])  # past the replicas' first requests
    return float(arr[:, 0].mean()), float(arr[:, 1].mean())


def test_at_light_load_the_fluid_mode_publishes_what_the_engine_does() -> None:
    # Three static 8B H100 replicas, 20 minutes of chat: no queue, and both modes serve the same requests.
    # A fluid sample inside a slice reads the state at the slice's start plus what arrived since; counted
    # as-is, that is the requests that finish later in the slice and the arrivals no iteration has taken
    # yet, 2.8% more running and 0.20 waiting where the engine publishes none (the timing the simulator
    # applies, SimConfig.gauges "leading", reads so). Published, within 2%.
    tr = load_shipped("azure2023-conv").window(0.0, 1200.0)
    run_d, wait_d = _static_means(tr, "detailed", 3)
    run_f, wait_f = _static_means(tr, "fluid", 3)
    assert run_d > 5.0  # busy replicas
    assert abs(run_f - run_d) <= 0.02 * run_d, (run_f, run_d)
    assert abs(wait_f - wait_d) < 0.05, (wait_f, wait_d)


def test_the_gauge_timing_is_checked() -> None:
    with pytest.raises(ValueError, match="gauges must be one of"):
        replace(config(), gauges="late")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="gauges must be one of"):
        Backtest(get_preset("llama-3.1-8b/h100"), gauges="late")  # type: ignore[arg-type]


def test_under_bursts_the_fluid_mode_publishes_the_engines_queue() -> None:
    # One static 8B H100 replica over azure2023-code's hour: long prompts in bursts, a queue of 2.4 in the mean
    # as the engine publishes it. The fluid slice admits for all its room at its start and carries a prefill
    # iteration longer than itself; published, its counts are the engine's within 3% (running) and 5%
    # (waiting). Hiding what reached the replica after a whole iteration before the one in flight read 2.14
    # waiting (-10%), hiding nothing 4.25 running and 2.62 waiting.
    tr = load_shipped("azure2023-code")
    run_d, wait_d = _static_means(tr, "detailed", 1)
    run_f, wait_f = _static_means(tr, "fluid", 1)
    assert wait_d > 1.0  # a queue
    assert abs(run_f - run_d) <= 0.03 * run_d, (run_f, run_d)
    assert abs(wait_f - wait_d) <= 0.05 * wait_d, (wait_f, wait_d)
