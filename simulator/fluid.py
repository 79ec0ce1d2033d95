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

import numpy as np

from scaler.model import Observation, ReplicaSample
from simulator.cluster import Phase, SimReplica
from simulator.engine import (
    _EPSILON_S,
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


VectorStep = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def vector_step(perf: PerfModel) -> VectorStep:
    """`perf.step_times` with its coefficients folded once (PhysicsPerf), for the per-slice calls."""
    if not isinstance(perf, PhysicsPerf):
        return perf.step_times
    m, tp, eff, gpu = perf.model, perf.tp, perf.eff, perf.gpu
    bw = gpu.hbm_bandwidth * eff.bandwidth
    w_t, kv_t = m.streamed_weight_bytes / tp / bw, m.kv_bytes_per_token / tp / bw
    peak = gpu.peak_flops(m.bytes_per_param) * eff.mfu * tp
    lin, att = 2.0 * m.streamed_params / peak, m.attention_flops_per_pair / peak
    ring = m.hidden * 2.0 * 2.0 * (tp - 1) / tp / gpu.interconnect_bandwidth
    fixed = eff.step_overhead_s + (0.0 if tp == 1 else 2 * m.n_layers * eff.allreduce_latency_s)
    per_tok = 0.0 if tp == 1 else 2 * m.n_layers * ring

    def physics(new: np.ndarray, kv: np.ndarray, pairs: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.maximum(w_t + kv * kv_t, lin * new + att * pairs) + (fixed + per_tok * new)
        return out

    return physics


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


def _column(i: int, doc: str) -> property:
    def get(self: Rows) -> np.ndarray:
        col: np.ndarray = self.f[i]
        return col

    def put(self: Rows, value: np.ndarray) -> None:
        self.f[i] = value

    return property(get, put, doc=doc)


class Rows:
    """The requests held by every replica; `rep` is the replica's slot, `idx` the trace index.

    Running (admitted) rows keep admission order, waiting rows arrival order, so FIFO within a replica is
    the rows' order among those of its slot. The five float columns live in one (5, n) array, so taking
    or appending rows, done several times a slice, is three numpy calls rather than seven.
    """

    prompt = _column(0, "prompt tokens")
    out = _column(1, "output tokens (>= 1)")
    pre = _column(2, "prompt tokens still to prefill")
    gen = _column(3, "tokens after the first")
    first = _column(4, "first-token time (NaN: not yet)")

    def __init__(self, rep: np.ndarray | None = None, idx: np.ndarray | None = None,
                 prompt: np.ndarray | None = None, out: np.ndarray | None = None, pre: np.ndarray | None = None,
                 gen: np.ndarray | None = None, first: np.ndarray | None = None, *,
                 f: np.ndarray | None = None) -> None:
        self.rep: np.ndarray = rep if rep is not None else np.empty(0, np.int64)
        self.idx: np.ndarray = idx if idx is not None else np.empty(0, np.int64)
        if f is None:
            cols = (prompt, out, pre, gen, first)
            f = np.array([c if c is not None else np.empty(0) for c in cols], dtype=np.float64).reshape(5, -1)
        self.f: np.ndarray = f

    def __len__(self) -> int:
        return len(self.idx)

    def keep(self, mask: np.ndarray) -> Rows:
        return Rows(self.rep[mask], self.idx[mask], f=self.f[:, mask])

    def extend(self, other: Rows) -> None:
        self.rep = np.concatenate([self.rep, other.rep])
        self.idx = np.concatenate([self.idx, other.idx])
        self.f = np.concatenate([self.f, other.f], axis=1)


def _group_first(groups: np.ndarray) -> np.ndarray:
    """Per row, the index of its group's first row (`groups` sorted, small non-negative ints: slots).
    bincount + cumsum: a handful of numpy calls whatever the number of groups, since the fluid loop makes
    these calls every slice and their fixed cost, not the arrays' length, is what counts."""
    counts = np.bincount(groups)
    out: np.ndarray = (np.cumsum(counts) - counts)[groups]
    return out


def segment_cumsum(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Cumulative sums restarting at each new group (`groups` sorted non-negative ints, equal ones adjacent)."""
    if not len(values):
        return values
    cum = np.zeros(len(values) + 1)
    np.cumsum(values, out=cum[1:])
    out: np.ndarray = cum[1:] - cum[_group_first(groups)]
    return out


def segment_rank(groups: np.ndarray) -> np.ndarray:
    """0, 1, 2 ... within each run of equal `groups` (sorted non-negative ints)."""
    if not len(groups):
        return groups
    out: np.ndarray = np.arange(len(groups)) - _group_first(groups)
    return out


SLOT_COUNTERS = ("_prompt_tok", "_gen_tok", "_finished", "_busy", "_ttft_sum", "_ttft_n", "_itl_sum", "_itl_n")


class FluidSimulation(Simulation):
    """Simulation with time-sliced engines, all replicas stepped together; see the module docstring."""

    def __init__(self, trace: Trace, config: SimConfig, controller: Controller,
                 progress: Callable[[int, int], None] | None = None, dt_s: float = DEFAULT_DT_S) -> None:
        super().__init__(trace, config, controller, progress)
        if not dt_s > 0:
            raise ValueError(f"fluid: dt_s must be > 0, got {dt_s}")
        self.dt = dt_s
        n = len(trace)
        self._ttft = np.full(n, np.inf, dtype=np.float32)
        self._tpot = np.full(n, np.nan, dtype=np.float32)
        self.run_rows = Rows()
        self.wait_rows = Rows()
        self._slot: dict[int, int] = {}  # SimReplica.index -> slot
        self._by_slot: list[SimReplica | None] = []
        self._free: list[int] = []
        self._prompt_tok = np.zeros(0)
        self._gen_tok = np.zeros(0)
        self._finished = np.zeros(0)
        self._busy = np.zeros(0)
        # per slot, the TTFT/ITL histograms' _sum/_count (Simulation._count_latency's semantics)
        self._ttft_sum = np.zeros(0)
        self._ttft_n = np.zeros(0)
        self._itl_sum = np.zeros(0)
        self._itl_n = np.zeros(0)
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
        self._step_times = vector_step(config.perf)
        self._lat = config.perf.request_latency_s
        # a request's own prefill alone (the floor of its TTFT), vectorised once
        p = self._p64
        self._own_prefill = np.asarray(config.perf.step_times(np.minimum(p, self._budget), np.zeros(n),
                                                              p * (p + 1) / 2), dtype=np.float64)
        self._own_prefill *= np.ceil(p / self._budget)

    # -- slots --------------------------------------------------------------------------------------
    def _slot_of(self, r: SimReplica) -> int:
        k = self._slot.get(r.index)
        if k is not None:
            return k
        if self._free:
            k = self._free.pop()
            self._by_slot[k] = r
        else:
            k = len(self._by_slot)
            self._by_slot.append(r)
            for name in SLOT_COUNTERS:
                setattr(self, name, np.append(getattr(self, name), 0.0))
        for name in SLOT_COUNTERS:
            getattr(self, name)[k] = 0.0
        self._slot[r.index] = k
        return k

    def _release_gone(self) -> None:
        for idx, k in list(self._slot.items()):
            r = self._by_slot[k]
            if r is not None and r.phase is Phase.GONE:
                del self._slot[idx]
                self._by_slot[k] = None
                self._free.append(k)

    def _per_slot(self, rows: Rows, weights: np.ndarray | None = None) -> np.ndarray:
        out: np.ndarray = np.bincount(rows.rep, weights=weights, minlength=len(self._by_slot))
        return out if weights is not None else out.astype(np.float64)

    # -- run ----------------------------------------------------------------------------------------
    def run(self) -> SimResult:
        # the slice arithmetic divides by zero where a replica has nothing in a phase and masks it out
        # after: ignored once for the run (np.errstate per slice costs more than the arithmetic)
        saved = np.seterr(invalid="ignore", divide="ignore")
        try:
            return self._run()
        finally:
            np.seterr(**saved)

    def _run(self) -> SimResult:
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
            busy = len(self.run_rows) > 0 or len(self.wait_rows) > 0
            if busy:
                self._step_all(t)
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
        self._route(idx, sync=False)

    def _route(self, idx: np.ndarray, sync: bool = True) -> None:
        """Route `idx` to the ready replicas; `sync=False` (arrivals, which a slice step follows at once) leaves
        the replicas' outstanding counts to the step."""
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
        k = len(idx)
        if not k:
            return
        slots = np.array([self._slot_of(r) for r in ready], dtype=np.int64)
        if self.router.rule == "round_robin":
            who = (self._rr + np.arange(k)) % len(ready)
            self._rr = int((self._rr + k) % len(ready))
        else:
            # least outstanding, one request at a time, ties to the oldest pod: the k smallest
            # (load + j, pod) pairs, j = 0..k-1, in order
            # (outstanding is in sync with the rows here: set after every slice and every routing); a stable
            # sort of the pod-major levels breaks ties by pod
            load = np.array([r.outstanding for r in ready], dtype=np.float64)
            levels = (load[:, None] + np.arange(k)[None, :]).ravel()
            who = np.argsort(levels, kind="stable")[:k] // k
        rows = Rows(slots[who], idx, self._p64[idx], self._o64[idx], self._p64[idx].copy(), np.zeros(k),
                    np.full(k, np.nan))
        self.wait_rows.extend(rows)
        if sync:
            self._sync_outstanding()

    def _sync_outstanding(self) -> None:
        S = len(self._by_slot)
        held = np.bincount(self.run_rows.rep, minlength=S) + np.bincount(self.wait_rows.rep, minlength=S)
        for r, h in zip(self._by_slot, held.tolist(), strict=True):
            if r is not None:
                r.outstanding = h

    def _drop_late(self) -> None:
        if not self._held_n:
            return
        held = np.concatenate(self._held)
        late = self.now - self._arr64[held] > self.config.max_wait_s
        if late.any():
            self._dropped += int(late.sum())
            self._open -= int(late.sum())
            held = held[~late]
        self._held = [held] if len(held) else []
        self._held_n = len(held)

    def _on_phase_fluid(self, r: SimReplica) -> None:
        if r.phase is Phase.GONE:
            return
        self.cluster.advance_phase(r, self.now)
        if r.phase is Phase.LOADING:
            self.push(r.ready_at, PHASE, r)
        elif r.phase is Phase.READY and self._held_n:
            self._drop_late()
            held = np.concatenate(self._held) if self._held else np.empty(0, np.int64)
            self._held, self._held_n = [], 0
            if len(held):
                self._route(held)

    def _on_observe_fluid(self) -> None:
        self._drop_late()
        self._release_gone()
        state = self.observe()
        self.controller.observe(self, state)
        self._record()
        self.push(self.now + self.config.collection_interval_s, OBSERVE)

    # -- one slice of every engine ------------------------------------------------------------------------
    def _admit(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Admit from the queues, FIFO per replica, what each can start prefilling in this slice: vLLM admits
        a request only in an iteration with token budget left for it, so under a prefill backlog requests
        stay *waiting* (what num_requests_waiting shows the scalers), not running."""
        w = self.wait_rows
        if not len(w):
            return None
        run = self.run_rows
        kv = self._per_slot(run, run.prompt - run.pre + run.gen)
        n_run = self._per_slot(run)
        b_dec = self._per_slot(run, (run.pre <= 0).astype(np.float64))
        pending = self._per_slot(run, run.pre)
        chunk = np.maximum(self._budget - b_dec, 0.0)
        tau = self._step_times(b_dec + chunk, kv, kv + b_dec + chunk * chunk / 2)
        prefill_room = self.dt / tau * chunk - pending
        order = np.argsort(w.rep, kind="stable")
        rep = w.rep[order]
        cum = segment_cumsum(w.prompt[order], rep)
        rank = segment_rank(rep)
        ok = ((cum <= self._kv_cap - kv[rep]) & (rank < self._seqs - n_run[rep])
              & (cum - w.prompt[order] < prefill_room[rep]) & (chunk[rep] > 0))
        if not ok.any():
            return b_dec, pending, kv
        take = np.zeros(len(w), dtype=bool)
        take[order[ok]] = True
        new = w.keep(take)
        self.run_rows.extend(new)
        self.wait_rows = w.keep(~take)
        # admitted rows have computed nothing yet: KV and decoding counts are unchanged, pending grows
        return b_dec, pending + self._per_slot(new, new.prompt), kv

    def _step_all(self, t: float) -> None:
        dt = self.dt
        lat = self._lat
        sums = self._admit()
        run = self.run_rows
        if not len(run):
            self._sync_outstanding()
            return
        S = len(self._by_slot)
        rep = run.rep
        decoding = run.pre <= 0
        if sums is None:
            b_dec = self._per_slot(run, decoding.astype(np.float64))
            pending = self._per_slot(run, run.pre)
            kv = self._per_slot(run, run.prompt - run.pre + run.gen)
        else:
            b_dec, pending, kv = sums
        gain = np.zeros(len(run))
        t1 = np.zeros(S)
        tau1 = np.zeros(S)
        done_tokens = np.zeros(S)
        if pending.any():
            c = np.minimum(np.maximum(self._budget - b_dec, 0.0), pending)
            live = (pending > 0) & (c > 0)
            n_pf = self._per_slot(run, (~decoding).astype(np.float64))
            pre_mean = self._per_slot(run, run.prompt * ~decoding) / np.maximum(n_pf, 1.0)
            # a chunk's tokens attend, on average, to half of their own prompt (whether the chunk holds
            # several short prompts or a slice of a long one)
            tau_all = self._step_times(b_dec + c, kv, kv + b_dec + c * (pre_mean + 1) / 2)
            tau1 = np.where(live, tau_all, 0.0)
            t1 = np.where(live, np.minimum(dt, pending / np.where(live, c, 1.0) * tau1), 0.0)
            done_tokens = np.where(live, t1 / np.where(live, tau1, 1.0) * c, 0.0)
            pf = np.flatnonzero(~decoding)
            pf = pf[np.argsort(rep[pf], kind="stable")]
            prep = rep[pf]
            cum = segment_cumsum(run.pre[pf], prep)
            full = live[prep] & (cum <= done_tokens[prep] + 1e-6)
            fin_pf = pf[full]
            frep = prep[full]
            t_first = t + np.ceil(cum[full] / c[frep] - 1e-9) * tau1[frep]
            rows = run.idx[fin_pf]
            t_first = np.maximum(t_first, self._arr64[rows] + self._own_prefill[rows])
            run.first[fin_pf] = t_first + lat
            # the one straddling the slice's end keeps what is left of its prompt; those after it keep all
            run.pre[pf] = np.where(full, 0.0, np.minimum(run.pre[pf], np.maximum(cum - done_tokens[prep], 0.0)))
            self._prompt_tok += done_tokens
            self._gen_tok += np.bincount(frep, minlength=S)
            gain[decoding] += np.where(live[rep[decoding]], t1[rep[decoding]] / np.where(
                live[rep[decoding]], tau1[rep[decoding]], 1.0), 0.0)
            gain[fin_pf] += np.maximum(0.0, (t + t1[frep]) - t_first) / tau1[frep]
        now_dec = run.pre <= 0
        b2 = self._per_slot(run, now_dec.astype(np.float64))
        t2 = dt - t1
        kv2 = kv + self._per_slot(run, gain)
        tau2 = np.where(b2 > 0, self._step_times(np.maximum(b2, 1.0), kv2, kv2 + b2), 0.0)
        dec_rep = rep[now_dec]
        start = np.fmax(run.first[now_dec] - lat, t + t1[dec_rep])  # fmax: NaN (no first token) -> phase start
        gain[now_dec] += np.where(b2[dec_rep] > 0, np.maximum(0.0, t + dt - start) / np.where(
            tau2[dec_rep] > 0, tau2[dec_rep], 1.0), 0.0)
        busy = t1 + np.where(b2 > 0, t2, 0.0)
        need = run.out - 1.0 - run.gen
        run.gen += gain
        fin = now_dec & (run.gen >= run.out - 1.0 - 1e-9)
        if fin.any():
            frep = rep[fin]
            tau_last = np.where(tau2 > 0, tau2, tau1)[frep]
            over = run.gen[fin] - (run.out[fin] - 1.0)
            t_fin = np.maximum(t + busy[frep] - over * tau_last, run.first[fin] - lat) + lat
            rows = run.idx[fin]
            self._ttft[rows] = (run.first[fin] - self._arr64[rows]).astype(np.float32)
            o = run.out[fin]
            tp = np.where(o >= 2, (t_fin - run.first[fin]) / (o - 1.0), np.nan)
            self._tpot[rows] = tp.astype(np.float32)
            self._ttft_sum += np.bincount(frep, weights=run.first[fin] - self._arr64[rows], minlength=S)
            self._ttft_n += np.bincount(frep, minlength=S)
            multi = o >= 2  # sum of gaps = finish - first token, over output - 1 gaps (vLLM's ITL histogram)
            self._itl_sum += np.bincount(frep[multi], weights=(t_fin - run.first[fin])[multi], minlength=S)
            self._itl_n += np.bincount(frep[multi], weights=o[multi] - 1.0, minlength=S)
            gen_gain = np.where(fin, np.minimum(gain, need), gain)
            self._gen_tok += self._per_slot(run, gen_gain)
            n_fin = np.bincount(frep, minlength=S)
            self._finished += n_fin
            # a replica whose requests all finished in this slice, nothing queued, was idle after the last one
            last = np.full(S, -np.inf)
            np.maximum.at(last, frep, t_fin - lat - t)
            left = self._per_slot(run) - n_fin + self._per_slot(self.wait_rows)
            busy = np.where((left == 0) & np.isfinite(last), np.minimum(busy, last), busy)
            self.run_rows = run.keep(~fin)
            self._open -= int(fin.sum())
        else:
            self._gen_tok += self._per_slot(run, gain)
        self._busy += busy
        self._sync_outstanding()
        for k, r in enumerate(self._by_slot):
            if r is not None and r.phase is Phase.DRAINING and r.outstanding == 0:
                self.cluster.finish_drain(r, t + float(min(busy[k], dt)))

    # -- what the controllers see -------------------------------------------------------------------------
    def observe(self) -> ObservedState:
        now = self.now
        dt = now - self._last_obs_t
        cfg = self.config.replica
        run = self.run_rows
        n_run = self._per_slot(run)
        n_wait = self._per_slot(self.wait_rows)
        kv = self._per_slot(run, run.prompt - run.pre + run.gen)
        samples: list[ReplicaSample] = []
        utils: list[float] = []
        for r in self.cluster.active():
            if r.phase is not Phase.READY:
                samples.append(ReplicaSample(pod=r.pod, timestamp=0.0, up=False))
                continue
            k = self._slot_of(r)
            if k >= len(n_run):  # a slot made after the counts above
                n_run, n_wait, kv = (np.r_[a, np.zeros(k + 1 - len(a))] for a in (n_run, n_wait, kv))
            busy = float(self._busy[k])
            util = min(1.0, (busy - r.busy_prev) / dt) if dt > 0 else 0.0
            r.busy_prev = busy
            utils.append(max(0.0, util))
            samples.append(ReplicaSample(
                pod=r.pod, timestamp=now if now > 0 else _EPSILON_S, up=True, running=float(n_run[k]),
                waiting=float(n_wait[k]), max_running=float(cfg.max_num_seqs),
                kv_usage_ratio=min(1.0, float(kv[k]) / self._kv_cap), kv_capacity_tokens=self._kv_cap,
                prompt_tokens_total=float(self._prompt_tok[k]), generation_tokens_total=float(self._gen_tok[k]),
                requests_finished_total=float(self._finished[k]),
                startup_seconds=r.startup_seconds if r.startup_seconds > 0 else None,
                ttft_sum=float(self._ttft_sum[k]), ttft_count=float(self._ttft_n[k]),
                itl_sum=float(self._itl_sum[k]), itl_count=float(self._itl_n[k]),
            ))
        self._last_obs_t = now
        obs = Observation(self.config.namespace, self.config.model, now, tuple(samples),
                          upstream_demand=float(self._held_n))
        return ObservedState(obs, tuple(utils), self._held_n)

    def _record(self) -> None:
        self.timeline.add(self.now, self._arrivals_since, self.cluster, self.desired, self._held_n,
                          len(self.run_rows), len(self.wait_rows))
        self._arrivals_since = 0


__all__ = ["DEFAULT_DT_S", "FluidSimulation", "Rows", "scalar_step", "segment_cumsum", "segment_rank"]
