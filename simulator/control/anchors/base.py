"""What every anchor shares: its own control loop on the simulated clock, and the signals it reads.

An anchor that replaces the HPA (Knative's KPA, AIBrix's KPA/APA, Dynamo's planner, Ray Serve's
autoscaler) runs as an `OwnLoopController`: it samples the replicas at its own scrape interval and decides
at its own tick, then writes the replica count to the Deployment (`sim.scale_to`), as those controllers
patch `spec.replicas` themselves. Anchors used through KEDA/the HPA (the HPA on KV-cache usage, llm-d's
WVA) are `KedaController`s over a scaler in their own modules.

What an anchor reads comes from `Simulation.observe()` taken at the anchor's own interval: the same
per-pod gauges vLLM exports (`num_requests_running`, `num_requests_waiting`, `kv_cache_usage_perc`,
token counters) plus what the gateway holds. `observe()` only moves the GPU-utilization interval, which
no anchor reads.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from keda_llm.scaler.model import ReplicaSample
from keda_llm.simulator.cluster.engine import ObservedState, Simulation


@dataclass(frozen=True)
class Signals:
    """One scrape, reduced to what the anchors read (ready pods only: a loading pod reports nothing)."""

    at: float
    pods: tuple[str, ...]
    running: tuple[float, ...]
    waiting: tuple[float, ...]
    kv: tuple[float, ...]  # kv_cache_usage_perc, 0-1, per ready pod
    kv_capacity_tokens: float
    gateway_pending: float

    @property
    def ready(self) -> int:
        return len(self.running)

    @property
    def concurrency(self) -> float:
        """Requests in flight at the pods (running + queued in the engine) plus those held upstream."""
        return sum(self.running) + sum(self.waiting) + self.gateway_pending

    @property
    def kv_sum(self) -> float:
        return sum(self.kv)

    @property
    def kv_mean(self) -> float:
        return self.kv_sum / len(self.kv) if self.kv else 0.0


def signals(state: ObservedState) -> Signals:
    reps: Sequence[ReplicaSample] = [r for r in state.observation.replicas if r.up]
    cap = next((r.kv_capacity_tokens for r in reps if r.kv_capacity_tokens), 0.0) or 0.0
    return Signals(state.observation.at, tuple(r.pod for r in reps), tuple(r.running or 0.0 for r in reps),
                   tuple(r.waiting or 0.0 for r in reps), tuple(r.kv_usage_ratio or 0.0 for r in reps),
                   float(cap), float(state.gateway_pending))


class TimeWindow:
    """Samples kept for `window_s`; `average(now, span)` is the mean of those within `span` of `now`
    (the windowed averages Knative and AIBrix keep: an average over the samples present, so a window
    shorter than its span early on averages what it has)."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, float]] = deque()

    def add(self, at: float, value: float) -> None:
        self._samples.append((at, value))
        while self._samples and self._samples[0][0] <= at - self.window_s:
            self._samples.popleft()

    def average(self, now: float, span: float) -> float | None:
        vals = [v for t, v in self._samples if t > now - span]
        return sum(vals) / len(vals) if vals else None

    def maximum(self, now: float, span: float) -> float | None:
        vals = [v for t, v in self._samples if t > now - span]
        return max(vals) if vals else None


class OwnLoopController:
    """An autoscaler with its own loop: samples every `scrape_s`, decides every `tick_s` (both from 0).

    Subclasses implement `sample(sim, sig)` (take a scrape) and `decide(sim) -> int | None` (the replica
    count to write, None for no change). `initial_replicas` pods exist, ready, at time 0. `events` holds
    (time, "scale", before, after, reason) for every change written."""

    def __init__(self, name: str, *, scrape_s: float, tick_s: float, initial_replicas: int = 1,
                 min_replicas: int = 1, max_replicas: int = 64) -> None:
        if not (scrape_s > 0 and tick_s > 0):
            raise ValueError(f"{name}: scrape and tick intervals must be > 0, got {scrape_s}, {tick_s}")
        if not 0 <= min_replicas <= max_replicas:
            raise ValueError(f"{name}: need 0 <= min_replicas <= max_replicas, got {min_replicas}, {max_replicas}")
        self.name = name
        self.scrape_s = scrape_s
        self.tick_s = tick_s
        self.initial_replicas = initial_replicas
        self.min_replicas = min_replicas
        self.max_replicas = max_replicas
        self.events: list[tuple[float, str, int, int, str]] = []
        self._next_scrape = 0.0
        self._next_tick = 0.0
        self.reason = ""

    # -- Controller protocol ----------------------------------------------------------------------
    def start(self, sim: Simulation) -> None:
        for _ in range(self.initial_replicas):
            sim.add_replica(warm=True)
        sim.desired = self.initial_replicas
        self._next_scrape = self._next_tick = sim.now

    def next_time(self) -> float | None:
        return min(self._next_scrape, self._next_tick)

    def tick(self, sim: Simulation) -> None:
        now = sim.now
        if now >= self._next_scrape - 1e-9:
            self.sample(sim, signals(sim.observe()))
            self._next_scrape = _next_after(self._next_scrape, self.scrape_s, now)
        if now >= self._next_tick - 1e-9:
            self._next_tick = _next_after(self._next_tick, self.tick_s, now)
            want = self.decide(sim)
            if want is not None:
                self.write(sim, want)

    def observe(self, sim: Simulation, state: ObservedState) -> None:
        return None  # the anchor scrapes on its own clock (tick)

    def gateway_hold(self, sim: Simulation) -> None:
        return None  # no activator unless the anchor has one

    # -- for subclasses -----------------------------------------------------------------------------
    def sample(self, sim: Simulation, sig: Signals) -> None:
        raise NotImplementedError

    def decide(self, sim: Simulation) -> int | None:
        raise NotImplementedError

    def write(self, sim: Simulation, replicas: int) -> None:
        """Write `replicas` (clamped to [min, max]) to the Deployment."""
        n = max(self.min_replicas, min(self.max_replicas, int(replicas)))
        if n != sim.desired:
            self.events.append((sim.now, "scale", sim.desired, n, self.reason))
            sim.scale_to(n)

    @staticmethod
    def counts(sim: Simulation) -> tuple[int, int]:
        """(spec replicas, ready pods)."""
        ready = sum(1 for r in sim.cluster.active() if r.phase.value == "ready")
        return sim.desired, ready


def _next_after(scheduled: float, period: float, now: float) -> float:
    nxt = scheduled + period
    if nxt <= now:
        nxt = scheduled + period * (math.floor((now - scheduled) / period) + 1)
    return nxt
