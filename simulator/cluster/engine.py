"""The simulation: one policy on one trace, the same loop for both modes.

The loop (`Simulation.run`) pops the events of its `EventLoop` (simulator/cluster/events.py: the clock and the heap)
and handles them: pods' phases, collections (observations for the controller) and the controller's ticks
are the Simulation's own; how the replicas run between those events is a `Backend`'s:

- `DetailedBackend` (simulator/cluster/detailed.py): every engine iteration and every arrival is an event of its own;
  nothing happens between events;
- `FluidBackend` (simulator/cluster/fluid.py): the replicas are stepped in time slices by a compiled kernel between
  events; the events inside a slice are handled at their own times with the state as of the slice's start.

Either way the controller (simulator.control.controllers, simulator.control.anchors) decides the replica count through
the same methods (`scale_to`, `add_replica`, `observe`, ...); this loop only carries it out.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from keda_llm.scaler.model import Observation, ReplicaSample
from keda_llm.simulator.cluster.events import ARRIVAL, CONTROL, OBSERVE, PHASE, STEP, EventLoop
from keda_llm.simulator.cluster.pods import Cluster, Phase, SimReplica
from keda_llm.simulator.cluster.router import Refusal, Router, RoutingRule
from keda_llm.simulator.hardware.coldstart import ColdStartModel
from keda_llm.simulator.hardware.perf import PerfModel
from keda_llm.simulator.hardware.replica import ReplicaConfig, Request
from keda_llm.simulator.workload.traces import Trace

#: when the engines' gauges (requests running and waiting, KV usage) change as the exporters read them:
#: `leading`, the engine's state as the simulator applies it (a step at its start, so a step ahead of a real
#: engine's gauges); `published`, what vLLM publishes (the state at the last iteration's end, without the
#: requests that arrived during the iteration in flight). See docs/simulator.md, "What the exporters read".
GaugeTiming = Literal["leading", "published"]
GAUGE_TIMINGS: tuple[GaugeTiming, ...] = ("leading", "published")

#: a scrape at time 0 is stamped just after it: the scaler reads a timestamp of 0 as "never scraped"
EPSILON_S = 1e-6


@dataclass(frozen=True)
class ObservedState:
    """One collection cycle as the controllers see it: the scaler's Observation plus what baselines read
    (GPU utilization per ready pod, as NVML's busy fraction over the interval)."""

    observation: Observation
    gpu_utilization: tuple[float, ...]
    gateway_pending: int


class Controller(Protocol):
    """Decides the replica count. The loop calls `start` once, `tick` at `next_time()`, `observe` every
    collection interval and `gateway_hold` when a request waits because no pod is ready."""

    name: str

    def start(self, sim: Simulation) -> None: ...

    def next_time(self) -> float | None: ...

    def tick(self, sim: Simulation) -> None: ...

    def observe(self, sim: Simulation, state: ObservedState) -> None: ...

    def gateway_hold(self, sim: Simulation) -> None: ...


@dataclass(frozen=True)
class DegradedSpell:
    """A replica running slower for a while, as on a throttled GPU (detailed mode only): every engine step
    started within [start_s, end_s) takes 1/speed as long. `reported`: its exporter says so
    (`llm_replica_degraded{reason="gpu_throttled"}`); unreported, only its token rate shows it."""

    replica: int  # the pod's index (replica-<index>: creation order; scale-down removes the newest first)
    start_s: float
    end_s: float
    speed: float
    reported: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.speed <= 1:
            raise ValueError(f"degraded speed must be in (0, 1], got {self.speed}")
        if not self.end_s > self.start_s:
            raise ValueError(f"degraded spell must end after it starts, got {self.start_s}..{self.end_s}")


@dataclass(frozen=True)
class SimConfig:
    """Everything about the cluster but the policy. `namespace`/`model` name the observations."""

    replica: ReplicaConfig
    perf: PerfModel
    cold_start: ColdStartModel
    gpus_per_replica: int = 1
    collection_interval_s: float = 5.0
    routing: RoutingRule = "least_outstanding"
    max_wait_s: float = 600.0
    max_held: int | None = None  # the gateway's bound (the activator's max_held); None: unbounded
    seed: int = 0
    namespace: str = "default"
    model: str = "model"
    tail_s: float = 3600.0  # after the last arrival, stop at the latest this much later
    #: the run's totals (GPU-seconds, cold starts, scalings, time at zero) count from here: the trace's
    #: first `score_from_s` seconds are a lead-in (simulator/cluster/lead_in.py)
    score_from_s: float = 0.0
    degraded: tuple[DegradedSpell, ...] = ()  # slow replicas (throttled GPUs); detailed mode only
    gauges: GaugeTiming = "leading"  # when the gauges change (GaugeTiming)

    def spell(self, replica: int, t: float) -> DegradedSpell | None:
        """The degraded spell replica `replica` is in at time `t`, if any."""
        return next((d for d in self.degraded if d.replica == replica and d.start_s <= t < d.end_s), None)

    def __post_init__(self) -> None:
        if not self.collection_interval_s > 0:
            raise ValueError(f"collection_interval_s must be > 0, got {self.collection_interval_s}")
        if self.gpus_per_replica < 1:
            raise ValueError(f"gpus_per_replica must be >= 1, got {self.gpus_per_replica}")
        if self.max_held is not None and self.max_held < 0:
            raise ValueError(f"max_held must be >= 0, got {self.max_held}")
        if not (math.isfinite(self.score_from_s) and self.score_from_s >= 0):
            raise ValueError(f"score_from_s must be finite and >= 0, got {self.score_from_s}")
        if self.gauges not in GAUGE_TIMINGS:
            raise ValueError(f"gauges must be one of {', '.join(GAUGE_TIMINGS)}, got {self.gauges!r}")


@dataclass
class Timeline:
    """One row per observation: for the plot and the report."""

    t: list[float] = field(default_factory=list)
    arrivals: list[int] = field(default_factory=list)  # arrivals since the previous row
    ready: list[int] = field(default_factory=list)
    starting: list[int] = field(default_factory=list)
    draining: list[int] = field(default_factory=list)
    desired: list[int] = field(default_factory=list)
    gateway: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)

    def add(self, t: float, arrivals: int, cluster: Cluster, desired: int, gateway: int, running: int,
            waiting: int) -> None:
        """One row; pods are counted by phase (pending and loading count as starting)."""
        phases = [r.phase for r in cluster.replicas]
        ready, draining = phases.count(Phase.READY), phases.count(Phase.DRAINING)
        self.t.append(t)
        self.arrivals.append(arrivals)
        self.ready.append(ready)
        self.starting.append(len(phases) - ready - draining)
        self.draining.append(draining)
        self.desired.append(desired)
        self.gateway.append(gateway)
        self.running.append(running)
        self.waiting.append(waiting)


@dataclass(frozen=True)
class RequestTable:
    """Per request (or per cohort of identical requests, weighted): arrival, TTFT (inf: dropped), TPOT."""

    arrival_s: np.ndarray
    weight: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray


@dataclass
class SimResult:
    policy: str
    trace: str
    requests: list[Request]
    dropped_timeout: list[Request]
    dropped_rejected: list[Request]
    end_s: float
    timeline: Timeline
    gpu_seconds: float
    cold_starts: int
    zero_seconds: float
    scale_events: int
    events: list[Any] = field(default_factory=list)  # controller events (ControlEvent or tuples)
    mode: str = "detailed"
    # the fluid mode keeps no Request objects: it fills this instead (see `request_table`)
    cohorts: RequestTable | None = None
    #: requests the gateway refused past its bound (429 queue_full, with Retry-After); the fluid mode
    #: counts them in `refused_count` only
    refused: list[Refusal] = field(default_factory=list)
    refused_count: int = 0
    #: the backend's `engine_totals` at the run's end (preemptions, prompt tokens computed), lead-in included
    engine_totals: tuple[int, float] = (0, 0.0)

    def request_table(self) -> RequestTable:
        """Every request of the trace as (arrival, weight, TTFT, TPOT): TTFT inf when not served (dropped),
        TPOT NaN when undefined (one output token). The fluid mode gives cohorts with weights instead."""
        if self.cohorts is not None:
            return self.cohorts
        reqs = self.requests
        arrival = np.fromiter((r.arrival_s for r in reqs), dtype=np.float64, count=len(reqs))
        ttft = np.fromiter((math.inf if r.finish_s is None or r.first_token_s is None
                            else r.first_token_s - r.arrival_s for r in reqs), dtype=np.float64, count=len(reqs))
        tpot = np.fromiter((math.nan if (t := r.tpot_s) is None else t for r in reqs), dtype=np.float64,
                           count=len(reqs))
        return RequestTable(arrival, np.ones(len(reqs)), ttft, tpot)



@dataclass(frozen=True)
class Outcome:
    """What a backend adds to a run's result: per-request cohorts (fluid) and the gateway's refusals."""

    cohorts: RequestTable | None
    refused: list[Refusal]
    refused_count: int


class Backend(Protocol):
    """How the replicas run between the loop's events, take the gateway's work and are measured.

    The loop asks `window` which events to handle next: those due before `until`, each at its own time or
    at `floor` when that is later. After each it asks `finished`; when the window has none left it calls
    `advance`, which moves the replicas on and returns the run's end time, or None to go on."""

    mode: str
    #: every change of state is an event (the loop can stop at any time: `Simulation.advance_to`)
    event_driven: bool

    @property
    def arrived(self) -> int:
        """Requests of the trace that have reached the gateway so far."""
        ...

    @property
    def in_flight(self) -> int:
        """Requests that arrived and were neither finished nor dropped (held at the gateway included)."""
        ...

    def handlers(self) -> dict[int, Callable[[Any], None]]:
        """Its own event kinds (simulator/cluster/events.py) and their handlers."""
        ...

    def begin(self) -> None:
        """Its first events, after the controller's."""
        ...

    def window(self, hard_end: float) -> tuple[float, float]:
        """(until, floor): the events the loop handles before the next `advance`."""
        ...

    def finished(self) -> bool:
        """Every request of the trace arrived and none is open: the run ends now."""
        ...

    def advance(self, hard_end: float) -> float | None:
        """Move the replicas to the next event: the run's end time when it ends, else None."""
        ...

    def on_ready(self) -> None:
        """A pod became ready: the requests held at the gateway go to the ready pods."""
        ...

    def before_observe(self) -> None:
        """A collection is due: the gateway drops what waited too long."""
        ...

    def samples(self, now: float, dt: float) -> tuple[list[ReplicaSample], list[float], int]:
        """Every active pod's exporter sample, the ready pods' GPU utilization over the last `dt` seconds, and
        the requests held at the gateway."""
        ...

    def row(self) -> tuple[int, int, int, int]:
        """The timeline's counts now: (arrivals since the last row, held at the gateway, running, waiting)."""
        ...

    def engine_totals(self) -> tuple[int, float]:
        """(preemptions, prompt tokens computed, recomputation included): what a fidelity check compares."""
        ...

    def close(self, end: float) -> Outcome:
        """The run ended at `end`: what is still held is dropped."""
        ...


BackendFactory = Callable[["Simulation"], Backend]


def _settled(r: SimReplica) -> bool:
    """Gone or ready: a phase event for it has nothing left to do."""
    return r.phase in (Phase.GONE, Phase.READY)


def _no_handler(kind: int) -> Callable[[Any], None]:
    def fail(obj: Any) -> None:
        raise RuntimeError(f"simulation: an event of kind {kind} has no handler in this backend")
    return fail


class Simulation:
    """One policy on one trace. `run()` returns the SimResult; `progress(done, total)` is told of arrivals.

    `backend`: how the replicas run (default: the detailed engine); `FluidBackend` for the fluid mode."""

    def __init__(self, trace: Trace, config: SimConfig, controller: Controller,
                 progress: Callable[[int, int], None] | None = None, backend: BackendFactory | None = None) -> None:
        self.trace = trace
        self.config = config
        self.controller = controller
        self.rng = np.random.default_rng(config.seed)
        self.cluster = Cluster(config.replica, config.perf, config.cold_start, self.rng, config.gpus_per_replica,
                               count_from_s=config.score_from_s)
        # the activator's cold_start (the Retry-After it counts down) is the cold start's median here
        self.router = Router(config.routing, config.max_wait_s, config.max_held, config.cold_start.median_sum_s)
        self.loop = EventLoop()
        self.desired = 0  # what the controller last asked for
        self.scale_events = 0
        self.requests: list[Request] = []  # the detailed backend's, in arrival order (the fluid keeps none)
        self.dropped_timeout: list[Request] = []
        self.dropped_rejected: list[Request] = []
        self.timeline = Timeline()
        self.progress = progress
        self._last_obs_t = 0.0
        #: told of each engine step's finished requests, at the step's end (the demo's per-pod histograms;
        #: detailed backend only)
        self.on_finished: Callable[[SimReplica, list[Request]], None] | None = None
        if backend is None:
            from keda_llm.simulator.cluster.detailed import DetailedBackend

            backend = DetailedBackend
        self.backend = backend(self)
        own = self.backend.handlers()
        shared: dict[int, Callable[[Any], None]] = {PHASE: self._on_phase, OBSERVE: self._on_observe,
                                                    CONTROL: self._on_control}
        self._handlers = [own.get(kind) or shared.get(kind) or _no_handler(kind)
                          for kind in (STEP, PHASE, ARRIVAL, OBSERVE, CONTROL)]

    @property
    def now(self) -> float:
        """The simulated time (the event loop's clock)."""
        return self.loop.now

    @now.setter
    def now(self, t: float) -> None:
        self.loop.now = t

    # -- run --------------------------------------------------------------------------------------
    def begin(self) -> None:
        """The state at time 0: the controller's pods and first tick, the first observation, the backend's
        first events (the detailed backend's first arrival)."""
        self.controller.start(self)
        self.loop.push(0.0, OBSERVE)
        t_ctl = self.controller.next_time()
        if t_ctl is not None:
            self.loop.push(t_ctl, CONTROL)
        self.backend.begin()

    def advance_to(self, t: float) -> None:
        """Handle every event due at or before `t`, in the heap's order, then stand at `t` (never back).

        For a caller that moves time itself (the demo steps the world to the wall clock): after `begin()`,
        any sequence of calls handles the same events in the same order as `run()` up to that time.
        Event-driven backends only (the fluid mode runs whole)."""
        if not self.backend.event_driven:
            raise ValueError(f"advance_to: the {self.backend.mode} mode runs whole (run()), not to a given time")
        loop, handlers = self.loop, self._handlers
        until = math.nextafter(t, math.inf)
        while (ev := loop.pop_before(until)) is not None:
            at, kind, obj = ev
            loop.now = at
            handlers[kind](obj)
        loop.now = max(loop.now, t)

    @property
    def arrived(self) -> int:
        """Requests of the trace that have reached the gateway so far."""
        return self.backend.arrived

    @property
    def in_flight(self) -> int:
        """Requests that arrived and were neither finished nor dropped (held at the gateway included)."""
        return self.backend.in_flight

    def run(self) -> SimResult:
        n = len(self.trace)
        hard_end = (float(self.trace.arrival_s[-1]) if n else 0.0) + self.config.tail_s
        self.begin()
        loop, backend, handlers = self.loop, self.backend, self._handlers
        end: float | None = None
        while end is None:
            until, floor = backend.window(hard_end)
            while (ev := loop.pop_before(until)) is not None:
                at, kind, obj = ev
                loop.now = at if at > floor else floor
                handlers[kind](obj)
                if backend.finished():
                    end = loop.now
                    break
            else:
                end = backend.advance(hard_end)
        loop.now = end
        outcome = backend.close(end)
        self.cluster.close(end)
        if self.progress is not None:
            self.progress(n, n)
        s = self.cluster.stats
        events = list(getattr(self.controller, "events", []))
        return SimResult(self.controller.name, self.trace.name, self.requests, self.dropped_timeout,
                         self.dropped_rejected, end, self.timeline, s.gpu_seconds, s.cold_starts, s.zero_seconds,
                         self.scale_events, events, mode=backend.mode, cohorts=outcome.cohorts,
                         refused=outcome.refused, refused_count=outcome.refused_count,
                         engine_totals=backend.engine_totals())

    # -- the loop's own events ----------------------------------------------------------------------
    def _on_phase(self, r: SimReplica) -> None:
        if _settled(r):  # READY: the later of two events after a `move_ready`
            return
        self.cluster.advance_phase(r, self.now)
        if r.phase is Phase.LOADING:
            self.loop.push(r.ready_at, PHASE, r)
        elif r.phase is Phase.READY:
            self.backend.on_ready()

    def _on_observe(self, _: Any = None) -> None:
        self.backend.before_observe()
        state = self.observe()
        self.controller.observe(self, state)
        self._record()
        self.loop.push(self.now + self.config.collection_interval_s, OBSERVE)

    def _on_control(self, _: Any = None) -> None:
        self.controller.tick(self)
        t = self.controller.next_time()
        if t is not None:
            self.loop.push(max(t, self.now), CONTROL)

    # -- what controllers call ---------------------------------------------------------------------
    def scale_to(self, target: int) -> None:
        """Make the Deployment's replica count `target`: create pods, or remove (drain) the ReplicaSet's picks."""
        if target < 0:
            raise ValueError(f"scale_to: target must be >= 0, got {target}")
        if target != self.desired and self.now >= self.config.score_from_s:
            self.scale_events += 1
        self.desired = target
        active = len(self.cluster.active())
        for _ in range(target - active):
            self.add_replica()
        if target < active:
            for r in self.cluster.pick_for_removal(active - target):
                self.cluster.remove(r, self.now)

    def add_replica(self, cold_start_s: float | None = None, *, warm: bool = False) -> SimReplica:
        r = self.cluster.add(self.now, cold_start_s, warm=warm)
        if r.phase is Phase.PENDING:
            self.loop.push(r.scheduled_at, PHASE, r)
        elif r.phase is Phase.LOADING:
            self.loop.push(r.ready_at, PHASE, r)
        return r

    def move_ready(self, r: SimReplica, ready_at: float) -> None:
        """A starting pod's cold start ends at `ready_at` instead (not before now): a phase shortened or
        lengthened after the pod was created (the demo: weights found warm when the pod loads them)."""
        if not r.starting:
            raise ValueError(f"move_ready: {r.pod} is {r.phase.value}, not starting")
        r.ready_at = max(ready_at, self.now, r.scheduled_at)
        self.loop.push(r.ready_at, PHASE, r)

    def remove_replica(self, r: SimReplica) -> None:
        self.cluster.remove(r, self.now)

    def observe(self) -> ObservedState:
        """The replicas' gauges and counters now, as the exporters would report them."""
        now = self.now
        samples, utils, pending = self.backend.samples(now, now - self._last_obs_t)
        self._last_obs_t = now
        obs = Observation(self.config.namespace, self.config.model, now, tuple(samples),
                          upstream_demand=float(pending))
        return ObservedState(obs, tuple(utils), pending)

    def _record(self) -> None:
        arrivals, gateway, running, waiting = self.backend.row()
        self.timeline.add(self.now, arrivals, self.cluster, self.desired, gateway, running, waiting)
