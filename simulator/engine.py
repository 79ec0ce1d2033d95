"""The detailed discrete-event loop: trace arrivals, engine iterations, pod lifecycle, observations, control.

Every event sits on one heap keyed `(time, priority, seq)`; at one instant the priorities order them:

  0 step    an engine iteration (or decode run) ends: its finished requests leave, the next one starts
  1 phase   a pod is scheduled or becomes ready (a ready pod takes the gateway's queue)
  2 arrival the next trace request reaches the gateway
  3 observe collection: the replicas' gauges and counters become an Observation (every interval)
  4 control the controller's next tick (KEDA poll / HPA sync / StreamIsActive push, or a schedule step)

and `seq` (insertion order) breaks the remaining ties, so a run is a pure function of its inputs and
seed. The controller (simulator.controllers) decides the replica count; this loop only carries it out.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict

import numpy as np

from keda_llm.scaler.model import Observation, ReplicaSample
from keda_llm.simulator.cluster import Cluster, Phase, SimReplica
from keda_llm.simulator.coldstart import ColdStartModel
from keda_llm.simulator.perf import PerfModel
from keda_llm.simulator.replica import ReplicaConfig, Request
from keda_llm.simulator.router import Refusal, Router, RoutingRule
from keda_llm.simulator.traces import Trace

STEP, PHASE, ARRIVAL, OBSERVE, CONTROL = 0, 1, 2, 3, 4
#: a scrape at time 0 is stamped just after it: the scaler reads a timestamp of 0 as "never scraped"
_EPSILON_S = 1e-6


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
    degraded: tuple[DegradedSpell, ...] = ()  # slow replicas (throttled GPUs); detailed mode only

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


class _LatencyFields(TypedDict):
    ttft_sum: float
    ttft_count: float
    itl_sum: float
    itl_count: float


def _latency_fields(acc: Sequence[float] | None) -> _LatencyFields:
    """ReplicaSample's TTFT/ITL _sum/_count from [ttft_sum, ttft_count, itl_sum, itl_count] (zeros: none yet)."""
    a = acc if acc is not None else (0.0, 0.0, 0.0, 0.0)
    return {"ttft_sum": float(a[0]), "ttft_count": float(a[1]), "itl_sum": float(a[2]), "itl_count": float(a[3])}


def _settled(r: SimReplica) -> bool:
    """Gone or ready: a phase event for it has nothing left to do."""
    return r.phase in (Phase.GONE, Phase.READY)


class Simulation:
    """One policy on one trace. `run()` returns the SimResult; `progress(done, total)` is told of arrivals."""

    def __init__(self, trace: Trace, config: SimConfig, controller: Controller,
                 progress: Callable[[int, int], None] | None = None) -> None:
        self.trace = trace
        self.config = config
        self.controller = controller
        self.rng = np.random.default_rng(config.seed)
        self.cluster = Cluster(config.replica, config.perf, config.cold_start, self.rng, config.gpus_per_replica)
        # the activator's cold_start (the Retry-After it counts down) is the cold start's median here
        self.router = Router(config.routing, config.max_wait_s, config.max_held, config.cold_start.median_sum_s)
        self._least_loaded = config.routing == "least_loaded"
        self.now = 0.0
        self.desired = 0  # what the controller last asked for
        self.scale_events = 0
        self.requests: list[Request] = []
        self.dropped_timeout: list[Request] = []
        self.dropped_rejected: list[Request] = []
        self.timeline = Timeline()
        self._heap: list[tuple[float, int, int, int, Any]] = []
        self._seq = 0
        self._next_arrival = 0
        self._open = 0  # arrived, neither finished nor dropped
        self._arrivals_since = 0
        self._progress = progress
        self._last_obs_t = 0.0
        self._arr = trace.arrival_s
        self._prompt = trace.prompt_tokens
        self._output = trace.output_tokens
        self._hashes = trace.hash_offsets is not None
        # Per pod, the engine's TTFT and ITL histograms' _sum/_count, from its finished requests (see
        # _count_latency): [ttft_sum_s, ttft_count, itl_sum_s, itl_count].
        self._latency: dict[str, list[float]] = {}
        #: told of each engine step's finished requests, at the step's end (the demo's per-pod histograms)
        self.on_finished: Callable[[SimReplica, list[Request]], None] | None = None

    # -- heap -------------------------------------------------------------------------------------
    def push(self, at: float, kind: int, obj: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, kind, self._seq, kind, obj))

    def _next_arrival_time(self) -> float:
        i = self._next_arrival
        return float(self._arr[i]) if i < len(self._arr) else math.inf

    # -- run --------------------------------------------------------------------------------------
    def _start_control(self) -> None:
        """The controller's pods at time 0, the first observation and its first control tick on the heap."""
        self.controller.start(self)
        self.push(0.0, OBSERVE)
        t_ctl = self.controller.next_time()
        if t_ctl is not None:
            self.push(t_ctl, CONTROL)

    def begin(self) -> None:
        """The state at time 0: the controller's pods and first tick, the first observation and arrival."""
        self._start_control()
        if len(self.trace):
            self.push(float(self._arr[0]), ARRIVAL)

    def _handle(self, kind: int, obj: Any) -> None:
        if kind == STEP:
            self._on_step(obj)
        elif kind == PHASE:
            self._on_phase(obj)
        elif kind == ARRIVAL:
            self._on_arrival()
        elif kind == OBSERVE:
            self._on_observe()
        else:
            self._on_control()

    def advance_to(self, t: float) -> None:
        """Handle every event due at or before `t`, in the heap's order, then stand at `t` (never back).

        For a caller that moves time itself (the demo steps the world to the wall clock): after `begin()`,
        any sequence of calls handles the same events in the same order as `run()` up to that time."""
        heap = self._heap
        while heap and heap[0][0] <= t:
            at, _, _, kind, obj = heapq.heappop(heap)
            self.now = at
            self._handle(kind, obj)
        self.now = max(self.now, t)

    @property
    def arrived(self) -> int:
        """Requests of the trace that have reached the gateway so far."""
        return self._next_arrival

    @property
    def in_flight(self) -> int:
        """Requests that arrived and were neither finished nor dropped (held at the gateway included)."""
        return self._open

    def run(self) -> SimResult:
        n = len(self.trace)
        last = float(self._arr[-1]) if n else 0.0
        hard_end = last + self.config.tail_s
        self.begin()
        end = hard_end
        while self._heap:
            at, _, _, kind, obj = heapq.heappop(self._heap)
            if at > hard_end:
                break
            self.now = at
            self._handle(kind, obj)
            if self._next_arrival >= n and self._open == 0:
                end = self.now
                break
        self.now = end
        self.dropped_timeout.extend(self.router.take_all())
        self.cluster.close(end)
        if self._progress is not None:
            self._progress(n, n)
        s = self.cluster.stats
        events = list(getattr(self.controller, "events", []))
        return SimResult(self.controller.name, self.trace.name, self.requests, self.dropped_timeout,
                         self.dropped_rejected, end, self.timeline, s.gpu_seconds, s.cold_starts, s.zero_seconds,
                         self.scale_events, events, refused=list(self.router.refused),
                         refused_count=len(self.router.refused))

    # -- handlers ---------------------------------------------------------------------------------
    def _on_arrival(self) -> None:
        i = self._next_arrival
        hashes = self.trace.prefix_hashes(i) if self._hashes else ()
        req = Request(i, float(self._arr[i]), max(1, int(self._prompt[i])), int(self._output[i]), hashes)
        self.requests.append(req)
        self._open += 1
        self._arrivals_since += 1
        self._next_arrival = i + 1
        if self._next_arrival < len(self._arr):
            self.push(float(self._arr[self._next_arrival]), ARRIVAL)
        if self._progress is not None and i % 4096 == 0:
            self._progress(i, len(self._arr))
        self._dispatch(req)

    def _dispatch(self, req: Request, kick: bool = True) -> SimReplica | None:
        """Route one request; `kick`: start the replica's engine now if it is idle (a batch of releases
        kicks once, after all of them are queued, so they share the first iteration)."""
        r = self.router.pick(self.cluster.ready())
        if r is None:
            if self.router.hold(req, self.now) is not None:  # refused past the bound: answered, not held
                self._open -= 1
                return None
            self.controller.gateway_hold(self)
            return None
        assert isinstance(r, SimReplica)
        if not self.cluster.route_to(r, req, self.now):
            self.dropped_rejected.append(req)
            self._open -= 1
            return None
        if kick and not r.stepping:
            self._step(r)
        return r

    def _step(self, r: SimReplica) -> None:
        if self.config.degraded:
            spell = self.config.spell(r.index, self.now)
            r.engine.speed = spell.speed if spell is not None else 1.0
        res = r.engine.step(self.now, self._next_arrival_time())
        r.stepping = True
        r.step_end = self.now + res.duration
        self.push(self.now + res.duration, STEP, (r, res.finished))

    def _on_step(self, obj: tuple[SimReplica, list[Request]]) -> None:
        r, finished = obj
        r.stepping = False
        if finished:
            self._count_latency(r.pod, finished)
            if self.on_finished is not None:
                self.on_finished(r, finished)
        r.outstanding -= len(finished)
        self._open -= len(finished)
        if r.engine.has_work:
            self._step(r)
        elif r.phase is Phase.DRAINING:
            self.cluster.finish_drain(r, self.now)

    def _count_latency(self, pod: str, finished: list[Request]) -> None:
        """Add finished requests to the pod's latency histograms, with vLLM's semantics: TTFT one
        observation per request; ITL one per inter-token gap, so a request adds finish - first token
        (the sum of its gaps) over output tokens - 1 gaps, and the mean is sum of gaps / gaps. Counted
        when the request finishes (vLLM observes as tokens come; the difference is a request's duration)."""
        acc = self._latency.setdefault(pod, [0.0, 0.0, 0.0, 0.0])
        for q in finished:
            if q.first_token_s is None or q.finish_s is None:
                continue
            acc[0] += q.first_token_s - q.arrival_s
            acc[1] += 1.0
            if q.target_output >= 2:
                acc[2] += q.finish_s - q.first_token_s
                acc[3] += q.target_output - 1

    def _on_phase(self, r: SimReplica) -> None:
        if _settled(r):  # READY: the later of two events after a `move_ready`
            return
        self.cluster.advance_phase(r, self.now)
        if r.phase is Phase.LOADING:
            self.push(r.ready_at, PHASE, r)
        elif r.phase is Phase.READY:
            keep, late = self.router.release(self.now)
            self.dropped_timeout.extend(late)
            self._open -= len(late)
            touched = {self._dispatch(req, kick=False) for req in keep}
            for rep in sorted((t for t in touched if t is not None), key=lambda x: x.index):
                if not rep.stepping and rep.engine.has_work:
                    self._step(rep)

    def _on_observe(self) -> None:
        late = self.router.expire(self.now)
        self.dropped_timeout.extend(late)
        self._open -= len(late)
        state = self.observe()
        self.controller.observe(self, state)
        self._record()
        self.push(self.now + self.config.collection_interval_s, OBSERVE)

    def _on_control(self) -> None:
        self.controller.tick(self)
        t = self.controller.next_time()
        if t is not None:
            self.push(max(t, self.now), CONTROL)

    # -- what controllers call ---------------------------------------------------------------------
    def scale_to(self, target: int) -> None:
        """Make the Deployment's replica count `target`: create pods, or remove (drain) the ReplicaSet's picks."""
        if target < 0:
            raise ValueError(f"scale_to: target must be >= 0, got {target}")
        if target != self.desired:
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
            self.push(r.scheduled_at, PHASE, r)
        elif r.phase is Phase.LOADING:
            self.push(r.ready_at, PHASE, r)
        return r

    def move_ready(self, r: SimReplica, ready_at: float) -> None:
        """A starting pod's cold start ends at `ready_at` instead (not before now): a phase shortened or
        lengthened after the pod was created (the demo: weights found warm when the pod loads them)."""
        if not r.starting:
            raise ValueError(f"move_ready: {r.pod} is {r.phase.value}, not starting")
        r.ready_at = max(ready_at, self.now, r.scheduled_at)
        self.push(r.ready_at, PHASE, r)

    def remove_replica(self, r: SimReplica) -> None:
        self.cluster.remove(r, self.now)

    def observe(self) -> ObservedState:
        """The replicas' gauges and counters now, as the exporters would report them."""
        now = self.now
        dt = now - self._last_obs_t
        samples: list[ReplicaSample] = []
        utils: list[float] = []
        loads: dict[int, tuple[float, float]] = {}
        cfg = self.config.replica
        for r in self.cluster.active():
            eng = r.engine
            if r.phase is not Phase.READY:
                samples.append(ReplicaSample(pod=r.pod, timestamp=0.0, up=False))
                continue
            if self._least_loaded:
                loads[r.index] = (eng.kv_usage, float(eng.num_waiting))
            c = eng.counters
            busy = c.busy_s - max(0.0, r.step_end - now)  # the engine adds a step's time when it starts it
            util = min(1.0, (busy - r.busy_prev) / dt) if dt > 0 else 0.0
            r.busy_prev = busy
            utils.append(max(0.0, util))
            samples.append(ReplicaSample(
                pod=r.pod, timestamp=now if now > 0 else _EPSILON_S, up=True, running=float(eng.num_running),
                waiting=float(eng.num_waiting),
                max_running=float(cfg.max_num_seqs), kv_usage_ratio=eng.kv_usage,
                kv_capacity_tokens=float(cfg.kv_capacity_tokens), prompt_tokens_total=float(c.prompt_tokens),
                generation_tokens_total=float(c.generation_tokens), requests_finished_total=float(c.requests_finished),
                startup_seconds=r.startup_seconds if r.startup_seconds > 0 else None,
                degraded=("gpu_throttled",) if (d := self.config.spell(r.index, now)) is not None and d.reported
                else (),
                **_latency_fields(self._latency.get(r.pod)),
            ))
        self._last_obs_t = now
        if self._least_loaded:
            self.router.observed(loads)
        obs = Observation(self.config.namespace, self.config.model, now, tuple(samples),
                          upstream_demand=float(self.router.pending))
        return ObservedState(obs, tuple(utils), self.router.pending)

    def _record(self) -> None:
        running = sum(r.engine.num_running for r in self.cluster.replicas)
        waiting = sum(r.engine.num_waiting for r in self.cluster.replicas)
        self.timeline.add(self.now, self._arrivals_since, self.cluster, self.desired, self.router.pending,
                          running, waiting)
        self._arrivals_since = 0
