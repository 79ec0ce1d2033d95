"""The detailed backend: every engine iteration (or decode run) and every arrival is an event of its own.

Each replica's engine (simulator/hardware/replica.py) runs one step at a time from the loop's clock: a step's end
is a STEP event (its finished requests leave, the next step starts), each trace request an ARRIVAL event
(routed through the gateway: simulator/cluster/router.py, the activator's rules). Exact per request, at tens of
microseconds per request; the fluid backend (simulator/cluster/fluid.py) trades that for speed on long traces.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from keda_llm.scaler.model import ReplicaSample
from keda_llm.simulator.cluster.engine import EPSILON_S, Outcome
from keda_llm.simulator.cluster.events import ARRIVAL, STEP
from keda_llm.simulator.cluster.pods import Phase, SimReplica
from keda_llm.simulator.hardware.replica import Request

if TYPE_CHECKING:
    from keda_llm.simulator.cluster.engine import Simulation


class _LatencyFields(TypedDict):
    ttft_sum: float
    ttft_count: float
    itl_sum: float
    itl_count: float


def _latency_fields(acc: Sequence[float] | None) -> _LatencyFields:
    """ReplicaSample's TTFT/ITL _sum/_count from [ttft_sum, ttft_count, itl_sum, itl_count] (zeros: none yet)."""
    a = acc if acc is not None else (0.0, 0.0, 0.0, 0.0)
    return {"ttft_sum": float(a[0]), "ttft_count": float(a[1]), "itl_sum": float(a[2]), "itl_count": float(a[3])}


def _gauges(r: SimReplica) -> tuple[int, float]:
    """(requests running, KV cache usage) in the leading timing (SimConfig.gauges). The engine applies a step
    when it starts it (`Replica.step`); a real engine's gauges still count the requests that step finishes,
    and the cache they hold, until it ends. Counting them gone at the start had the gauges lead the engine by
    a step, and a pure-decode step runs up to the next arrival: on 8B H100 azure2023-conv with Ray Serve's
    replicas the running count at the samples read 0.97 requests (10%) under the requests in flight."""
    eng = r.engine
    if not r.stepping:
        return eng.num_running, eng.kv_usage
    return (eng.num_running + r.finishing,
            min(1.0, eng.kv_usage + r.finishing_blocks / eng.config.kv_blocks))


def _published(r: SimReplica, now: float) -> tuple[int, int, float]:
    """(requests running, waiting, KV usage) as vLLM publishes them: its scheduler makes its stats after each
    step (`update_from_output`), so the gauges hold the state at the last iteration's end, and a request that
    arrives during a step reaches the scheduler after it. A decode run publishes at each of its iterations'
    ends: its requests and queue from the first, its cache one token a request further at each."""
    run = r.run
    if run is not None and r.stepping and now < r.step_end:
        start, finishing, k = run
        seqs = r.engine.running + finishing  # the run's requests: its step left only arrivals to change
        done, blocks = r.engine.decode_run_at(start, seqs, k, now)
        if done > 0:
            return len(seqs), r.step_waiting, min(1.0, blocks / r.engine.config.kv_blocks)
    return r.pub_running, r.pub_waiting, r.pub_kv


class DetailedBackend:
    """Per-request engines, stepped by events (see the module docstring)."""

    mode = "detailed"
    event_driven = True

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.loop = sim.loop
        trace = sim.trace
        self._least_loaded = sim.config.routing == "least_loaded"
        self._next_arrival = 0
        self._open = 0  # arrived, neither finished nor dropped
        self._arrivals_since = 0
        self._arr = trace.arrival_s
        self._n = len(trace)
        self._prompt = trace.prompt_tokens
        self._output = trace.output_tokens
        self._hashes = trace.hash_offsets is not None
        # Per pod, the engine's TTFT and ITL histograms' _sum/_count, from its finished requests (see
        # _count_latency): [ttft_sum_s, ttft_count, itl_sum_s, itl_count].
        self._latency: dict[str, list[float]] = {}
        self._published = sim.config.gauges == "published"

    # -- what the loop asks -------------------------------------------------------------------------
    @property
    def arrived(self) -> int:
        return self._next_arrival

    @property
    def in_flight(self) -> int:
        return self._open

    def handlers(self) -> dict[int, Callable[[Any], None]]:
        return {STEP: self._on_step, ARRIVAL: self._on_arrival}

    def begin(self) -> None:
        if self._n:
            self.loop.push(float(self._arr[0]), ARRIVAL)

    def window(self, hard_end: float) -> tuple[float, float]:
        return math.nextafter(hard_end, math.inf), -math.inf  # every event up to the end, at its own time

    def finished(self) -> bool:
        return self._next_arrival >= self._n and self._open == 0

    def advance(self, hard_end: float) -> float | None:
        return hard_end  # no event left before the end: nothing runs between events here

    def close(self, end: float) -> Outcome:
        sim = self.sim
        sim.dropped_timeout.extend(sim.router.take_all())
        return Outcome(None, list(sim.router.refused), len(sim.router.refused))

    # -- arrivals and engine steps --------------------------------------------------------------------
    def _next_arrival_time(self) -> float:
        i = self._next_arrival
        return float(self._arr[i]) if i < self._n else math.inf

    def _on_arrival(self, _: Any) -> None:
        i = self._next_arrival
        trace = self.sim.trace
        hashes = trace.prefix_hashes(i) if self._hashes else ()
        req = Request(i, float(self._arr[i]), max(1, int(self._prompt[i])), int(self._output[i]), hashes)
        self.sim.requests.append(req)
        self._open += 1
        self._arrivals_since += 1
        self._next_arrival = i + 1
        if self._next_arrival < self._n:
            self.loop.push(float(self._arr[self._next_arrival]), ARRIVAL)
        progress = self.sim.progress
        if progress is not None and i % 4096 == 0:
            progress(i, self._n)
        self._dispatch(req)

    def _dispatch(self, req: Request, kick: bool = True) -> SimReplica | None:
        """Route one request; `kick`: start the replica's engine now if it is idle (a batch of releases
        kicks once, after all of them are queued, so they share the first iteration)."""
        sim = self.sim
        r = sim.router.pick(sim.cluster.ready())
        if r is None:
            if sim.router.hold(req, self.loop.now) is not None:  # refused past the bound: answered, not held
                self._open -= 1
                return None
            sim.controller.gateway_hold(sim)
            return None
        assert isinstance(r, SimReplica)
        if not sim.cluster.route_to(r, req, self.loop.now):
            sim.dropped_rejected.append(req)
            self._open -= 1
            return None
        if kick and not r.stepping:
            self._step(r)
        return r

    def _step(self, r: SimReplica) -> None:
        now = self.loop.now
        degraded = self.sim.config.degraded
        if degraded:
            spell = self.sim.config.spell(r.index, now)
            r.engine.speed = spell.speed if spell is not None else 1.0
        res = r.engine.step(now, self._next_arrival_time())
        r.stepping = True
        r.step_end = now + res.duration
        r.finishing, r.finishing_blocks = len(res.finished), r.engine.finished_blocks
        if self._published:
            eng = r.engine
            r.step_waiting = eng.num_waiting
            r.run = (now, res.finished, res.iterations) if res.iterations > 1 else None
        self.loop.push(now + res.duration, STEP, (r, res.finished))

    def _on_step(self, obj: tuple[SimReplica, list[Request]]) -> None:
        r, finished = obj
        r.stepping = False
        r.finishing = r.finishing_blocks = 0
        if self._published:
            eng = r.engine
            r.pub_running, r.pub_waiting, r.pub_kv, r.run = eng.num_running, r.step_waiting, eng.kv_usage, None
        if finished:
            self._count_latency(r.pod, finished)
            if self.sim.on_finished is not None:
                self.sim.on_finished(r, finished)
        r.outstanding -= len(finished)
        self._open -= len(finished)
        if r.engine.has_work:
            self._step(r)
        elif r.phase is Phase.DRAINING:
            self.sim.cluster.finish_drain(r, self.loop.now)

    def _count_latency(self, pod: str, finished: list[Request]) -> None:
        """Add finished requests to the pod's latency histograms, with vLLM's semantics: TTFT one
        observation per request; ITL one per inter-token gap, so a request adds finish - first token
        (the sum of its gaps) over output tokens - 1 gaps, and the mean is sum of gaps / gaps. Counted
        when the request finishes (vLLM observes as tokens come; the difference is a request's duration).
        The TTFT runs from when the engine got the request, as vLLM's does: a request the gateway held while
        no replica was ready reaches the engine only then (its own TTFT, in the request table, counts the
        hold too)."""
        acc = self._latency.setdefault(pod, [0.0, 0.0, 0.0, 0.0])
        for q in finished:
            if q.first_token_s is None or q.finish_s is None:
                continue
            acc[0] += q.first_token_s - (q.arrival_s if q.submitted_s is None else q.submitted_s)
            acc[1] += 1.0
            if q.target_output >= 2:
                acc[2] += q.finish_s - q.first_token_s
                acc[3] += q.target_output - 1

    # -- the gateway -----------------------------------------------------------------------------------
    def on_ready(self) -> None:
        sim = self.sim
        keep, late = sim.router.release(self.loop.now)
        sim.dropped_timeout.extend(late)
        self._open -= len(late)
        touched = {self._dispatch(req, kick=False) for req in keep}
        for rep in sorted((t for t in touched if t is not None), key=lambda x: x.index):
            if not rep.stepping and rep.engine.has_work:
                self._step(rep)

    def before_observe(self) -> None:
        late = self.sim.router.expire(self.loop.now)
        self.sim.dropped_timeout.extend(late)
        self._open -= len(late)

    # -- what the exporters would report ---------------------------------------------------------------
    def samples(self, now: float, dt: float) -> tuple[list[ReplicaSample], list[float], int]:
        sim = self.sim
        samples: list[ReplicaSample] = []
        utils: list[float] = []
        loads: dict[int, tuple[float, float]] = {}
        cfg = sim.config.replica
        for r in sim.cluster.active():
            eng = r.engine
            if r.phase is not Phase.READY:
                samples.append(ReplicaSample(pod=r.pod, timestamp=0.0, up=False))
                continue
            running, waiting, kv_usage = self._gauges(r, now)
            if self._least_loaded:
                loads[r.index] = (kv_usage, float(waiting))
            c = eng.counters
            busy = c.busy_s - max(0.0, r.step_end - now)  # the engine adds a step's time when it starts it
            util = min(1.0, (busy - r.busy_prev) / dt) if dt > 0 else 0.0
            r.busy_prev = busy
            utils.append(max(0.0, util))
            samples.append(ReplicaSample(
                pod=r.pod, timestamp=now if now > 0 else EPSILON_S, up=True, running=float(running),
                waiting=float(waiting),
                max_running=float(cfg.max_num_seqs), kv_usage_ratio=kv_usage,
                kv_capacity_tokens=float(cfg.kv_capacity_tokens), prompt_tokens_total=float(c.prompt_tokens),
                generation_tokens_total=float(c.generation_tokens), requests_finished_total=float(c.requests_finished),
                startup_seconds=r.startup_seconds if r.startup_seconds > 0 else None,
                degraded=("gpu_throttled",) if (d := sim.config.spell(r.index, now)) is not None and d.reported
                else (),
                **_latency_fields(self._latency.get(r.pod)),
            ))
        if self._least_loaded:
            sim.router.observed(loads)
        return samples, utils, sim.router.pending

    def _gauges(self, r: SimReplica, now: float) -> tuple[int, int, float]:
        """(running, waiting, KV usage) as the exporters read them, in the run's gauge timing."""
        if self._published:
            return _published(r, now)
        running, kv_usage = _gauges(r)
        return running, r.engine.num_waiting, kv_usage

    def engine_totals(self) -> tuple[int, float]:
        """(preemptions, prompt tokens computed, recomputation included) over the replicas still in the
        cluster: the engine counters a fidelity comparison reads (scripts/fluid_agreement.py --replica)."""
        reps = self.sim.cluster.replicas
        return (sum(r.engine.counters.preemptions for r in reps),
                float(sum(r.engine.counters.prompt_tokens for r in reps)))

    def row(self) -> tuple[int, int, int, int]:
        replicas = self.sim.cluster.replicas
        now = self.loop.now
        gauges = [self._gauges(r, now) for r in replicas]
        running = sum(g[0] for g in gauges)
        waiting = sum(g[1] for g in gauges)
        arrivals, self._arrivals_since = self._arrivals_since, 0
        return arrivals, self.sim.router.pending, running, waiting
