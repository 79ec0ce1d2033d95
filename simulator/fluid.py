"""The fluid mode: the same cluster, router, control loop and policies, with engines stepped in time slices.

The detailed mode runs every engine iteration of every request, which is exact but costs tens of
microseconds per request: a week of the Azure 2024 code trace (16.8 M requests) would take an hour.
Here each replica advances `dt` seconds at a time with numpy over its requests:

- admission at the start of a slice, FIFO, while the batch limit and the KV cache allow (the KV check
  counts tokens already computed plus the new prompt; preemption is not modelled: admission waits);
- within the slice, mixed iterations (every decoding request + a chunk of `budget - decoding` prompt
  tokens, FIFO) until the admitted prompts are prefilled, then pure decode iterations; each phase's
  iteration time comes from the same PerfModel as the detailed engine, at the slice's batch and KV;
- first tokens and completions are placed inside the slice where their token counts are reached, so
  TTFT and TPOT are not rounded to the slice.

Not modelled here: KV preemption and prefix caching (so `auto` keeps traces with prefix hashes in the
detailed mode). Arrivals in a slice are routed at its start in arrival order with the same rules (least outstanding or
round robin); a request cannot get its first token before its arrival plus its own prefill. Pods,
gateway queue, observations and the controllers are the detailed mode's (events keep their exact
times). tests/test_sim_fluid.py holds it to the detailed mode on the one-hour traces.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from scaler.model import Observation, ReplicaSample
from simulator.cluster import Phase, SimReplica
from simulator.engine import (
    _EPSILON_S,
    ARRIVAL,
    CONTROL,
    OBSERVE,
    PHASE,
    Controller,
    ObservedState,
    RequestTable,
    SimConfig,
    SimResult,
    Simulation,
)
from simulator.perf import ConstantPerf, PerfModel, PhysicsPerf
from simulator.traces import Trace

DEFAULT_DT_S = 0.25
ScalarStep = Callable[[float, float, float], float]


def scalar_step(perf: PerfModel) -> ScalarStep:
    """One iteration's time as plain float arithmetic: the fluid loop asks a few hundred thousand times
    per simulated day, where numpy's per-call overhead would dominate. Same formulas as PhysicsPerf and
    ConstantPerf (a test checks they agree); any other PerfModel goes through its vectorised method."""
    if isinstance(perf, PhysicsPerf):
        m, tp, eff, gpu = perf.model, perf.tp, perf.eff, perf.gpu
        bw = gpu.hbm_bandwidth * eff.bandwidth
        w_t = m.streamed_weight_bytes / tp / bw
        kv_t = m.kv_bytes_per_token / tp / bw
        peak = gpu.peak_flops(m.bytes_per_param) * eff.mfu * tp
        lin = 2.0 * m.streamed_params / peak
        att = m.attention_flops_per_pair / peak
        over = eff.step_overhead_s
        comm_fixed = 0.0 if tp == 1 else 2 * m.n_layers * eff.allreduce_latency_s
        ring = m.hidden * 2.0 * 2.0 * (tp - 1) / tp / gpu.interconnect_bandwidth  # per token, per all-reduce
        comm_tok = 0.0 if tp == 1 else 2 * m.n_layers * ring

        def physics(new: float, kv: float, pairs: float) -> float:
            return max(w_t + kv * kv_t, lin * new + att * pairs) + over + comm_fixed + comm_tok * new

        return physics
    if isinstance(perf, ConstantPerf):
        c = perf

        def constant(new: float, kv: float, pairs: float) -> float:
            return c.base_s + c.per_token_s * new + c.per_kv_token_s * kv

        return constant

    def generic(new: float, kv: float, pairs: float) -> float:
        return float(perf.step_times(np.array([new]), np.array([kv]), np.array([pairs]))[0])

    return generic


@dataclass
class FluidEngine:
    """One replica's requests as numpy columns: admitted (running) and queued (waiting), FIFO."""

    idx: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # running: trace index
    prompt: np.ndarray = field(default_factory=lambda: np.empty(0))
    out: np.ndarray = field(default_factory=lambda: np.empty(0))  # output tokens (>= 1)
    pre: np.ndarray = field(default_factory=lambda: np.empty(0))  # prompt tokens still to prefill
    gen: np.ndarray = field(default_factory=lambda: np.empty(0))  # tokens after the first
    first: np.ndarray = field(default_factory=lambda: np.empty(0))  # first-token time (NaN: not yet)
    wait: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # queued: trace index
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    finished: int = 0
    busy_s: float = 0.0

    @property
    def num_running(self) -> int:
        return len(self.idx)

    @property
    def num_waiting(self) -> int:
        return len(self.wait)

    @property
    def outstanding(self) -> int:
        return len(self.idx) + len(self.wait)

    def kv_tokens(self) -> float:
        return float(np.sum(self.prompt - self.pre + self.gen)) if len(self.idx) else 0.0


class FluidSimulation(Simulation):
    """Simulation with time-sliced engines; see the module docstring."""

    def __init__(self, trace: Trace, config: SimConfig, controller: Controller,
                 progress: Callable[[int, int], None] | None = None, dt_s: float = DEFAULT_DT_S) -> None:
        super().__init__(trace, config, controller, progress)
        if not dt_s > 0:
            raise ValueError(f"fluid: dt_s must be > 0, got {dt_s}")
        self.dt = dt_s
        n = len(trace)
        self._ttft = np.full(n, np.inf, dtype=np.float32)
        self._tpot = np.full(n, np.nan, dtype=np.float32)
        self._engines: dict[int, FluidEngine] = {}
        self._held: list[np.ndarray] = []  # gateway queue: arrays of trace indices, oldest first
        self._held_n = 0
        self._dropped = 0
        self._rr = 0
        self._arr64 = trace.arrival_s
        self._p64 = np.maximum(1, trace.prompt_tokens).astype(np.float64)
        self._o64 = np.maximum(1, trace.output_tokens).astype(np.float64)
        cfg = config.replica
        self._kv_cap = float(cfg.kv_capacity_tokens)
        self._budget = float(cfg.max_num_batched_tokens)
        self._seqs = cfg.max_num_seqs
        self._step_time = scalar_step(config.perf)
        # a request's own prefill alone (the floor of its TTFT), vectorised once
        p = self._p64
        self._own_prefill = np.asarray(config.perf.step_times(np.minimum(p, self._budget), np.zeros(n),
                                                              p * (p + 1) / 2), dtype=np.float64)
        self._own_prefill *= np.ceil(p / self._budget)

    # -- pods ---------------------------------------------------------------------------------------
    def _engine(self, r: SimReplica) -> FluidEngine:
        e = self._engines.get(r.index)
        if e is None:
            e = self._engines[r.index] = FluidEngine()
        return e

    # -- run ----------------------------------------------------------------------------------------
    def run(self) -> SimResult:
        n = len(self.trace)
        last = float(self._arr64[-1]) if n else 0.0
        hard_end = last + self.config.tail_s
        self.controller.start(self)
        self.push(0.0, OBSERVE)
        t_ctl = self.controller.next_time()
        if t_ctl is not None:
            self.push(t_ctl, CONTROL)
        t = 0.0
        end = hard_end
        next_progress = 0
        while t <= hard_end:
            t_next = t + self.dt
            # events due in [t, t_next): in time order, each at its own time (state as of the slice start)
            while self._heap and self._heap[0][0] < t_next:
                at, _, _, kind, obj = heapq.heappop(self._heap)
                self.now = max(at, t)
                if kind == PHASE:
                    self._on_phase_fluid(obj)
                elif kind == OBSERVE:
                    self._on_observe_fluid()
                elif kind == CONTROL:
                    self._on_control()
            self.now = t
            lo = self._next_arrival
            hi = int(np.searchsorted(self._arr64, t_next, side="left"))
            if hi > lo:
                self._arrive(lo, hi)
                self._next_arrival = hi
                self._arrivals_since += hi - lo
            busy = False
            for r in list(self.cluster.replicas):
                e = self._engines.get(r.index)
                if e is not None and e.outstanding:
                    self._step_engine(r, e, t)
                    busy = True
            if self._progress is not None and self._next_arrival >= next_progress:
                self._progress(self._next_arrival, n)
                next_progress = self._next_arrival + max(1, n // 200)
            if self._next_arrival >= n and self._open == 0:
                end = t_next
                break
            t = t_next
            if not busy and self._held_n == 0 and self._next_arrival < n:
                t = self._fast_forward(t)
        self.now = end
        self._dropped += self._held_n
        self._held, self._held_n = [], 0
        self.cluster.close(end)
        if self._progress is not None:
            self._progress(n, n)
        s = self.cluster.stats
        table = RequestTable(self._arr64, np.ones(n), self._ttft.astype(np.float64), self._tpot.astype(np.float64))
        return SimResult(self.controller.name, self.trace.name, [], [], [], end, self.timeline, s.gpu_seconds,
                         s.cold_starts, s.zero_seconds, self.scale_events, list(getattr(self.controller, "events", [])),
                         mode="fluid", cohorts=table)

    def _fast_forward(self, t: float) -> float:
        """Nothing runs and nobody waits: skip whole slices up to the next arrival or event."""
        nxt = float(self._arr64[self._next_arrival])
        if self._heap:
            nxt = min(nxt, self._heap[0][0])
        if nxt <= t + self.dt:
            return t
        return t + math.floor((nxt - t) / self.dt) * self.dt

    # -- gateway and routing --------------------------------------------------------------------------
    def _arrive(self, lo: int, hi: int) -> None:
        idx = np.arange(lo, hi, dtype=np.int64)
        self._open += hi - lo
        if not self.cluster.ready():
            self._held.append(idx)
            self._held_n += len(idx)
            self.controller.gateway_hold(self)
            return
        self._route(idx)

    def _route(self, idx: np.ndarray) -> None:
        ready = self.cluster.ready()
        if not ready:
            self._held.append(idx)
            self._held_n += len(idx)
            return
        too_big = (self._p64[idx] + self._o64[idx]) > self._kv_cap
        if too_big.any():
            self._dropped += int(too_big.sum())
            self._open -= int(too_big.sum())
            idx = idx[~too_big]
        if not len(idx):
            return
        engines = [self._engine(r) for r in ready]
        if self.router.rule == "round_robin":
            k = len(ready)
            who = (self._rr + np.arange(len(idx))) % k
            self._rr = int((self._rr + len(idx)) % k)
        else:
            # least outstanding, one request at a time (ties to the oldest pod), in closed form per pod
            load = np.array([e.outstanding for e in engines], dtype=np.int64)
            who = np.empty(len(idx), dtype=np.int64)
            for j in range(len(idx)):
                w = int(np.argmin(load))
                who[j] = w
                load[w] += 1
        for w, (r, e) in enumerate(zip(ready, engines, strict=True)):
            mine = idx[who == w]
            if len(mine):
                e.wait = np.concatenate([e.wait, mine])
                r.outstanding = e.outstanding

    def _on_phase_fluid(self, r: SimReplica) -> None:
        if r.phase is Phase.GONE:
            return
        self.cluster.advance_phase(r, self.now)
        if r.phase is Phase.LOADING:
            self.push(r.ready_at, PHASE, r)
        elif r.phase is Phase.READY and self._held_n:
            held = np.concatenate(self._held)
            self._held, self._held_n = [], 0
            late = self.now - self._arr64[held] > self.config.max_wait_s
            if late.any():
                self._dropped += int(late.sum())
                self._open -= int(late.sum())
            self._route(held[~late])

    def _on_observe_fluid(self) -> None:
        if self._held_n:
            held = np.concatenate(self._held)
            late = self.now - self._arr64[held] > self.config.max_wait_s
            if late.any():
                self._dropped += int(late.sum())
                self._open -= int(late.sum())
                held = held[~late]
            self._held = [held] if len(held) else []
            self._held_n = len(held)
        state = self.observe()
        self.controller.observe(self, state)
        self._record()
        self.push(self.now + self.config.collection_interval_s, OBSERVE)

    # -- one slice of one engine ------------------------------------------------------------------------
    def _admit(self, e: FluidEngine) -> None:
        """Admit from the queue, FIFO, what the slice can start prefilling: vLLM admits a request only in an
        iteration with token budget left for it, so under a prefill backlog requests stay *waiting* (what
        num_requests_waiting shows the scalers), not running."""
        if not len(e.wait) or len(e.idx) >= self._seqs:
            return
        kv = e.kv_tokens()
        room = self._kv_cap - kv
        b_dec = float(np.count_nonzero(e.pre <= 0))
        chunk = max(self._budget - b_dec, 0.0)
        if chunk <= 0:
            return
        tau = self._step_time(b_dec + chunk, kv, kv + b_dec + chunk * chunk / 2)
        prefill_room = self.dt / tau * chunk - float(e.pre.sum())  # prompt tokens this slice can still take
        if prefill_room <= 0:
            return
        cand = e.wait[: self._seqs - len(e.idx)]
        cum = np.cumsum(self._p64[cand])
        k = int(np.searchsorted(cum, room, side="right"))
        # the one that straddles the slice's end is admitted too (it starts its prefill in this slice)
        k = min(k, int(np.searchsorted(cum, prefill_room, side="left")) + 1)
        if k == 0:
            return
        new = cand[:k]
        e.wait = e.wait[k:]
        e.idx = np.concatenate([e.idx, new])
        e.prompt = np.concatenate([e.prompt, self._p64[new]])
        e.out = np.concatenate([e.out, self._o64[new]])
        e.pre = np.concatenate([e.pre, self._p64[new]])
        e.gen = np.concatenate([e.gen, np.zeros(k)])
        e.first = np.concatenate([e.first, np.full(k, np.nan)])

    def _step_engine(self, r: SimReplica, e: FluidEngine, t: float) -> None:
        dt = self.dt
        self._admit(e)
        if not len(e.idx):
            return
        lat = self.config.perf.request_latency_s
        decoding = e.pre <= 0
        b_dec = int(decoding.sum())
        pending = float(e.pre.sum())
        kv = e.kv_tokens()
        gain = np.zeros(len(e.idx))
        t1 = 0.0
        tau1 = 0.0
        if pending > 0:
            c = min(max(self._budget - b_dec, 0.0), pending)
            if c > 0:
                pre_mean = float(np.mean(e.prompt[~decoding]))
                # a chunk's tokens attend, on average, to half of their own prompt (whether the chunk holds
                # several short prompts or a slice of a long one)
                tau1 = self._step_time(b_dec + c, kv, kv + b_dec + c * (pre_mean + 1) / 2)
                t1 = min(dt, pending / c * tau1)
                done_tokens = t1 / tau1 * c
                pf = np.flatnonzero(~decoding)
                cum = np.cumsum(e.pre[pf])
                full = cum <= done_tokens + 1e-6
                finished_pf = pf[full]
                t_first = t + np.ceil(cum[full] / c - 1e-9) * tau1
                arrival = self._arr64[e.idx[finished_pf]]
                t_first = np.maximum(t_first, arrival + self._own_prefill[e.idx[finished_pf]])
                e.first[finished_pf] = t_first + lat
                e.pre[finished_pf] = 0.0
                part = pf[~full]
                if len(part):
                    used = float(cum[full][-1]) if full.any() else 0.0
                    e.pre[part[0]] -= done_tokens - used
                e.prompt_tokens += done_tokens
                e.generation_tokens += len(finished_pf)
                gain[decoding] += t1 / tau1
                # newly prefilled requests decode in the mixed iterations left after their first token
                gain[finished_pf] += np.maximum(0.0, (t + t1) - t_first) / tau1
        t2 = dt - t1
        now_dec = e.pre <= 0
        b2 = int(now_dec.sum())
        tau2 = 0.0
        if t2 > 0 and b2 > 0:
            kv2 = kv + float(gain.sum())
            tau2 = self._step_time(b2, kv2, kv2 + b2)
            # each decodes from the later of the phase start and its own first token (arrivals mid-slice)
            start = np.fmax(e.first[now_dec] - lat, t + t1)  # fmax: NaN (no first token yet) -> phase start
            gain[now_dec] += np.maximum(0.0, t + dt - start) / tau2
        busy = t1 + (t2 if b2 > 0 else 0.0)
        # completions: requests whose tokens after the first reach out - 1
        need = e.out - 1.0 - e.gen
        e.gen += gain
        fin = now_dec & (e.gen >= e.out - 1.0 - 1e-9)
        if fin.any():
            tau_last = tau2 if tau2 > 0 else (tau1 if tau1 > 0 else 0.0)
            over = e.gen[fin] - (e.out[fin] - 1.0)
            t_fin = np.maximum(t + busy - over * tau_last, e.first[fin] - lat) + lat
            if fin.all() and not len(e.wait):
                busy = min(busy, float(t_fin.max()) - lat - t)  # idle after the last one finished
            rows = e.idx[fin]
            self._ttft[rows] = (e.first[fin] - self._arr64[rows]).astype(np.float32)
            o = e.out[fin]
            with np.errstate(invalid="ignore", divide="ignore"):
                tp = np.where(o >= 2, (t_fin - e.first[fin]) / (o - 1.0), np.nan)
            self._tpot[rows] = tp.astype(np.float32)
            e.generation_tokens += float(np.sum(np.minimum(gain[fin], need[fin])))
            keep = ~fin
            e.generation_tokens += float(gain[keep].sum())
            e.finished += int(fin.sum())
            for name in ("idx", "prompt", "out", "pre", "gen", "first"):
                setattr(e, name, getattr(e, name)[keep])
            self._open -= int(fin.sum())
        else:
            e.generation_tokens += float(gain.sum())
        e.busy_s += busy
        r.outstanding = e.outstanding
        if r.phase is Phase.DRAINING and e.outstanding == 0:
            self.cluster.finish_drain(r, min(t + busy, t + dt))

    # -- what the controllers see -------------------------------------------------------------------------
    def observe(self) -> ObservedState:
        now = self.now
        dt = now - self._last_obs_t
        cfg = self.config.replica
        samples: list[ReplicaSample] = []
        utils: list[float] = []
        for r in self.cluster.active():
            if r.phase is not Phase.READY:
                samples.append(ReplicaSample(pod=r.pod, timestamp=0.0, up=False))
                continue
            e = self._engine(r)
            util = min(1.0, (e.busy_s - r.busy_prev) / dt) if dt > 0 else 0.0
            r.busy_prev = e.busy_s
            utils.append(max(0.0, util))
            samples.append(ReplicaSample(
                pod=r.pod, timestamp=now if now > 0 else _EPSILON_S, up=True, running=float(e.num_running),
                waiting=float(e.num_waiting), max_running=float(cfg.max_num_seqs),
                kv_usage_ratio=min(1.0, e.kv_tokens() / self._kv_cap), kv_capacity_tokens=self._kv_cap,
                prompt_tokens_total=e.prompt_tokens, generation_tokens_total=e.generation_tokens,
                requests_finished_total=float(e.finished),
                startup_seconds=r.startup_seconds if r.startup_seconds > 0 else None,
            ))
        self._last_obs_t = now
        obs = Observation(self.config.namespace, self.config.model, now, tuple(samples),
                          upstream_demand=float(self._held_n))
        return ObservedState(obs, tuple(utils), self._held_n)

    def _record(self) -> None:
        tl = self.timeline
        ready = starting = draining = running = waiting = 0
        for r in self.cluster.replicas:
            if r.phase is Phase.READY:
                ready += 1
            elif r.phase is Phase.DRAINING:
                draining += 1
            else:
                starting += 1
            e = self._engines.get(r.index)
            if e is not None:
                running += e.num_running
                waiting += e.num_waiting
        tl.t.append(self.now)
        tl.arrivals.append(self._arrivals_since)
        self._arrivals_since = 0
        tl.ready.append(ready)
        tl.starting.append(starting)
        tl.draining.append(draining)
        tl.desired.append(self.desired)
        tl.gateway.append(self._held_n)
        tl.running.append(running)
        tl.waiting.append(waiting)


__all__ = ["ARRIVAL", "DEFAULT_DT_S", "FluidEngine", "FluidSimulation"]
