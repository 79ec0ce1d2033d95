"""Helpers for the simulator's loop tests: a constant-time engine, fixed cold starts, tiny traces."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from keda_llm.simulator.cluster.engine import Controller, SimConfig, SimResult, Simulation
from keda_llm.simulator.hardware.coldstart import ColdStartModel, Phase
from keda_llm.simulator.hardware.perf import ConstantPerf
from keda_llm.simulator.hardware.replica import ReplicaConfig
from keda_llm.simulator.workload.traces import Trace


def fixed_cold_start(scheduling_s: float, loading_s: float) -> ColdStartModel:
    """A cold start with no spread: scheduling then loading (p90 = median, so sigma 0)."""
    return ColdStartModel("fixed", (Phase("scheduling", scheduling_s, scheduling_s), Phase("loading", loading_s,
                                                                                          loading_s)))


def config(*, iteration_s: float = 1.0, max_num_seqs: int = 4, cold: tuple[float, float] = (10.0, 50.0),
           max_wait_s: float = 600.0, routing: str = "least_outstanding", interval_s: float = 5.0) -> SimConfig:
    """Every iteration takes `iteration_s` whatever it holds; KV is plentiful; cold start 10 s + 50 s."""
    return SimConfig(ReplicaConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=64, kv_blocks=10_000,
                                   block_size=16, enable_prefix_caching=False),
                     ConstantPerf(base_s=iteration_s), fixed_cold_start(*cold), max_wait_s=max_wait_s,
                     routing=routing, collection_interval_s=interval_s, model="m")  # type: ignore[arg-type]


def trace(arrivals: Sequence[float], prompt: int = 10, output: int = 5, name: str = "t") -> Trace:
    n = len(arrivals)
    return Trace(name, np.asarray(arrivals, dtype=np.float64), np.full(n, prompt, dtype=np.int32),
                 np.full(n, output, dtype=np.int32))


def run(tr: Trace, cfg: SimConfig, controller: Controller) -> SimResult:
    return Simulation(tr, cfg, controller).run()


def at(result: SimResult, t: float) -> tuple[int, int, int]:
    """(ready, starting, desired) in the timeline row at time t (an observation instant)."""
    i = result.timeline.t.index(t)
    tl = result.timeline
    return tl.ready[i], tl.starting[i], tl.desired[i]


def busiest(tr: Trace, minutes: int) -> Trace:
    """The `minutes`-long window (on whole minutes) with the most arrivals."""
    per_min = np.bincount(np.floor(tr.arrival_s / 60.0).astype(np.int64))
    start = int(np.argmax(np.convolve(per_min, np.ones(minutes, dtype=np.int64), "valid")))
    return tr.window(start * 60.0, (start + minutes) * 60.0)
