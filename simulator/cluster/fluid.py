"""The fluid backend: the same loop, cluster, gateway rules and policies, with engines stepped in time slices.

The detailed mode runs every engine iteration of every request, which is exact but costs tens of
microseconds per request: a week of the Azure 2024 code trace (16.8 M requests) would take an hour.
Here each replica advances `dt` seconds at a time over its requests (the loops are compiled, in
simulator/cluster/fluid_kernel.py):

- admission at the start of a slice, FIFO, while the batch limit and the KV cache allow (the KV check
  counts tokens already computed, the prompts admitted and one slice of decoding, plus the new prompt),
  and while the slice, or else the next iteration, has prompt-token budget for it (vLLM fills each
  iteration from its queue up to `max_num_batched_tokens`; an iteration carried in from the last slice
  keeps its own chunk, and each fresh one after it gets a whole one); a replica whose cache would overflow within
  the slice preempts its latest requests first (vLLM's recompute: back to the queue's head, prefilled
  again with what they generated);
- within the slice, mixed iterations (every decoding request + a chunk of `budget - decoding` prompt
  tokens, FIFO) until the admitted prompts are prefilled, then pure decode iterations; each phase's
  iteration time comes from the same PerfModel as the detailed engine, at the slice's batch and KV;
  an iteration longer than the slice keeps its chunk and duration into the next slices (it is
  scheduled whole), so decoding requests beside a long prefill get one token per iteration;
- first tokens and completions are placed inside the slice where their token counts are reached, so
  TTFT and TPOT are not rounded to the slice; a replica idle at the slice's start is busy (GPU
  utilization) from its first request's arrival, and idle after its last completion.

Not modelled here: prefix caching (so `auto` keeps traces with prefix hashes in the detailed mode).
Arrivals in a slice are routed at its start in arrival order with the same rules (least outstanding or
round robin). The compiled loop cannot call Python per request, so its least outstanding is a copy of
`activator.core.pick_index` with no exporter metrics and the cursor at 0 (fewest outstanding, ties to
the oldest replica), held to it by tests/simulator/test_gateway.py; the gateway's bound and maximum
wait are the activator's, applied to arrays through `core.room` and `core.expiry_cutoff`;
`least_loaded` is refused here. A request cannot get its first token before its arrival plus its own
prefill, nor (on a busy replica) before the iteration in flight at its arrival ends. Pods, gateway
queue, observations and the controllers are the Simulation's, as in the detailed mode (events keep their
exact times; simulator/cluster/engine.py runs both modes' loop).
tests/simulator/test_sim_fluid.py holds it to the detailed mode on the one-hour traces and a short
window per preset; scripts/fluid_agreement.py runs the full matrix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

import keda_llm.simulator.cluster.fluid_kernel as k
from keda_llm.activator import core
from keda_llm.scaler.model import ReplicaSample
from keda_llm.simulator.cluster.engine import EPSILON_S, Outcome, RequestTable
from keda_llm.simulator.cluster.pods import Phase, SimReplica
from keda_llm.simulator.hardware.perf import PerfModel

if TYPE_CHECKING:
    from keda_llm.simulator.cluster.engine import BackendFactory, Simulation

DEFAULT_DT_S = 0.25
#: a preset's slice is at most this share of its full-budget iteration (see `slice_for`)
SLICE_OF_FULL_ITERATION = 0.4


def slice_for(perf: PerfModel, budget: int, longest: float = DEFAULT_DT_S) -> float:
    """The fluid mode's time slice for a replica: `longest`, or SLICE_OF_FULL_ITERATION of one iteration
    that fills the token budget with a fresh prompt (a chunked prefill's iteration), whichever is shorter.

    Why: a slice admits its arrivals at its start and spreads their prompts' chunks over its mixed
    iterations, so a short answer decoding beside them pays chunks whose prompts arrive later in the slice.
    Where one full chunk takes most of a 0.25 s slice (70B TP4: 0.63 s) that is at most the one iteration
    the detailed engine has in flight; where a slice holds several (8B H100: 0.26 s each, A100 with a 2,048
    budget: 0.15 s) TPOT came out 1.8 and 4.0 SLO points high under the 2024 week's peak. Measured against
    the detailed mode there (static, docs/simulator-results.md "Fluid vs detailed"): 0.4 of the full
    iteration holds both within 0.5 points and leaves 70B TP4 at 0.25 s."""
    from keda_llm.simulator.hardware.perf import step_time

    full = step_time(perf, float(budget), 0.0, budget * (budget + 1) / 2.0)
    return float(f"{min(longest, SLICE_OF_FULL_ITERATION * full):.3g}")


_START_ROWS = 1024
_START_SLOTS = 8


def own_prefill(perf: PerfModel, prompt: np.ndarray, budget: float) -> np.ndarray:
    """Each request's prefill alone on an idle replica, chunk by chunk as the detailed engine runs it (chunk
    k: min(budget, left) new tokens reading the k x budget already cached): the floor of its TTFT."""
    out = np.zeros(len(prompt))
    done = 0.0
    while True:
        live = prompt > done
        if not live.any():
            return out
        n = np.minimum(prompt[live] - done, budget)
        out[live] += perf.step_times(n, np.full(len(n), done), n * done + n * (n + 1) / 2)
        done += budget


class FluidBackend:
    """Time-sliced engines, all replicas stepped together by the compiled kernel; see the module docstring.

    The requests in flight are two pools of rows the compiled kernel works on: running (admission
    order) and waiting (arrival order), each row a trace index and the replica's slot; FIFO within a
    replica is the rows' order among those of its slot. Slots are reused once their replica is gone."""

    mode = "fluid"
    event_driven = False

    def __init__(self, sim: Simulation, dt_s: float = DEFAULT_DT_S) -> None:
        if not dt_s > 0:
            raise ValueError(f"fluid: dt_s must be > 0, got {dt_s}")
        config, trace = sim.config, sim.trace
        if config.degraded:
            raise ValueError("fluid: degraded replicas (SimConfig.degraded) are modelled in the detailed mode only")
        self.sim = sim
        self.loop = sim.loop
        self.dt = dt_s
        self.t = 0.0  # the start of the next slice
        n = len(trace)
        self._n = n
        self._coef = k.coefficients(config.perf)
        self._ttft = np.full(n, np.inf, dtype=np.float32)
        self._tpot = np.full(n, np.nan, dtype=np.float32)
        self._ints = np.zeros(k.N_INTS, dtype=np.int64)
        self._run_i = np.zeros((2, _START_ROWS), dtype=np.int64)
        self._run_f = np.zeros((3, _START_ROWS))
        self._gain = np.zeros(_START_ROWS)
        self._wait_i = np.zeros((2, _START_ROWS), dtype=np.int64)
        self._wait_f = np.zeros((2, _START_ROWS))  # per waiting row: tokens generated before a preemption, first token
        self._slots = np.zeros((k.N_SLOT_ROWS, _START_SLOTS))
        self._scratch = np.zeros((k.N_SCRATCH, _START_SLOTS))
        self._slot: dict[int, int] = {}  # SimReplica.index -> slot
        self._by_slot: list[SimReplica | None] = []
        self._free: list[int] = []
        self._held: list[np.ndarray] = []  # gateway queue: arrays of trace indices, oldest first
        self._held_n = 0
        self._refused = 0  # refused past the gateway's bound (queue_full)
        self._next_progress = 0
        if sim.router.rule == "least_loaded":
            raise ValueError("routing least_loaded (the activator's exporter-metrics rule) runs in the detailed "
                             "mode only: the fluid mode routes in its compiled loop by outstanding requests")
        self._rule = k.RULE_ROUND_ROBIN if sim.router.rule == "round_robin" else k.RULE_LEAST
        self._arr64 = np.ascontiguousarray(trace.arrival_s, dtype=np.float64)
        # when an engine got each request: its arrival, or its release if the gateway held it (the engine's
        # TTFT histogram counts from here, as vLLM's does; the request table's TTFT from the arrival)
        self._sub64 = self._arr64.copy()
        self._p64 = np.maximum(1, trace.prompt_tokens).astype(np.float64)
        self._o64 = np.maximum(1, trace.output_tokens).astype(np.float64)
        cfg = config.replica
        self._kv_cap = float(cfg.kv_capacity_tokens)
        # the engine allocates whole blocks: a running request holds (block - 1) / 2 tokens beyond its context
        # in the mean, which decides admission and preemption at the cache's edge (fluid_kernel._admit)
        self._kv_slack = (cfg.block_size - 1) / 2.0
        self._budget = float(cfg.max_num_batched_tokens)
        self._seqs = float(cfg.max_num_seqs)
        self._lat = config.perf.request_latency_s
        self._own_prefill = own_prefill(config.perf, self._p64, self._budget)
        self._published = config.gauges == "published"

    @staticmethod
    def slices(dt_s: float) -> BackendFactory:
        """The backend with time slices of `dt_s` seconds, for `Simulation(..., backend=...)`."""
        return lambda sim: FluidBackend(sim, dt_s)

    @property
    def running(self) -> int:
        return int(self._ints[k.N_RUN])

    @property
    def waiting(self) -> int:
        return int(self._ints[k.N_WAIT])

    @property
    def arrived(self) -> int:
        return int(self._ints[k.NEXT])

    @property
    def in_flight(self) -> int:
        return int(self._ints[k.OPEN])  # the held ones included

    # -- slots and pools ------------------------------------------------------------------------------
    def _slot_of(self, r: SimReplica) -> int:
        s = self._slot.get(r.index)
        if s is not None:
            return s
        if self._free:
            s = self._free.pop()
            self._by_slot[s] = r
        else:
            s = len(self._by_slot)
            self._by_slot.append(r)
            if s >= self._slots.shape[1]:
                grow = self._slots.shape[1]
                self._slots = np.concatenate([self._slots, np.zeros((k.N_SLOT_ROWS, grow))], axis=1)
                self._scratch = np.zeros((k.N_SCRATCH, 2 * grow))
        self._slots[:, s] = 0.0
        self._slots[k.READY_AT, s] = r.ready_at  # no first token before the pod is up (mid-slice readiness)
        self._slot[r.index] = s
        return s

    def _release_gone(self) -> None:
        for idx, s in list(self._slot.items()):
            r = self._by_slot[s]
            if r is not None and r.phase is Phase.GONE:
                del self._slot[idx]
                self._by_slot[s] = None
                self._free.append(s)

    def _room(self, more: int) -> None:
        """Grow the row pools so that `more` requests can join the waiting pool and all of it be admitted (or
        every running request be preempted back to it)."""
        need_run = int(self._ints[k.N_RUN]) + int(self._ints[k.N_WAIT]) + more
        need_wait = need_run
        if int(self._ints[k.HEAD]) + need_wait > self._wait_i.shape[1]:  # the queue's rows start at its head
            k.compact(self._ints, self._wait_i, self._wait_f)
        if need_wait > self._wait_i.shape[1]:
            cap = max(need_wait, 2 * self._wait_i.shape[1])
            self._wait_i = np.concatenate([self._wait_i, np.zeros((2, cap - self._wait_i.shape[1]), np.int64)], 1)
            self._wait_f = np.concatenate([self._wait_f, np.zeros((2, cap - self._wait_f.shape[1]))], 1)
        if need_run > self._run_i.shape[1]:
            cap = max(need_run, 2 * self._run_i.shape[1])
            extra = cap - self._run_i.shape[1]
            self._run_i = np.concatenate([self._run_i, np.zeros((2, extra), np.int64)], axis=1)
            self._run_f = np.concatenate([self._run_f, np.zeros((3, extra))], axis=1)
            self._gain = np.zeros(cap)

    def _ready_slots(self) -> np.ndarray:
        return np.array([self._slot_of(r) for r in self.sim.cluster.ready()], dtype=np.int64)

    def _sync_replicas(self) -> None:
        """Hand the kernel's per-slot outstanding counts to the pods (scale-down reads them) and the pods'
        draining state to the kernel (it reports when a draining pod empties)."""
        out = self._slots[k.OUTSTANDING].tolist()
        for s, r in enumerate(self._by_slot):
            if r is not None:
                r.outstanding = int(out[s])
                self._slots[k.DRAINING, s] = 1.0 if r.phase is Phase.DRAINING else 0.0

    # -- what the loop asks -------------------------------------------------------------------------
    def handlers(self) -> dict[int, Callable[[Any], None]]:
        return {}  # no events of its own: the kernel steps the replicas between the loop's events

    def begin(self) -> None:
        pass

    def window(self, hard_end: float) -> tuple[float, float]:
        # events due in [t, t + dt): in time order, each at its own time (state as of the slice start)
        return self.t + self.dt, self.t

    def finished(self) -> bool:
        return False  # the kernel says when every request is done (DONE)

    def advance(self, hard_end: float) -> float | None:
        sim, ints = self.sim, self._ints
        t = self.t
        sim.now = t
        self._sync_replicas()
        t_event = self.loop.next_time()
        ready = self._ready_slots()  # may add slots: before the slot arrays are handed over
        t, reason, flags, at = k.advance(
            t, self.dt, t_event, hard_end, self._held_n, ready, self._rule, self._budget,
            self._seqs, self._kv_cap, self._kv_slack, self._lat, self._coef, ints, self._run_i, self._run_f,
            self._wait_i, self._wait_f, self._gain, self._slots, self._scratch, len(self._by_slot), self._p64,
            self._o64, self._arr64, self._sub64, self._own_prefill, self._ttft, self._tpot)
        self.t = t
        self._sync_replicas()
        if sim.progress is not None and ints[k.NEXT] >= self._next_progress:
            sim.progress(int(ints[k.NEXT]), self._n)
            self._next_progress = int(ints[k.NEXT]) + max(1, self._n // 200)
        if reason == k.GROW:
            # room for the arrivals of the slice it stopped at (t, not the t_next of this pass)
            self._room(int(np.searchsorted(self._arr64, t + self.dt)) - int(ints[k.NEXT]))
            return None
        if reason == k.END:
            return hard_end
        if reason == k.AFTER_SLICE:
            sim.now = at
            if flags & k.DRAIN:
                self._finish_drains(at)
            if flags & k.HELD:
                self._hold_and_wake(np.arange(ints[k.HELD_LO], ints[k.HELD_HI], dtype=np.int64))
            if flags & k.DONE:
                return t
        return None

    def close(self, end: float) -> Outcome:
        self._ints[k.DROPPED] += self._held_n
        self._held, self._held_n = [], 0
        table = RequestTable(self._arr64, np.ones(self._n), self._ttft.astype(np.float64),
                             self._tpot.astype(np.float64))
        return Outcome(table, [], self._refused)

    def _finish_drains(self, t: float) -> None:
        slots = self._slots
        for s in np.flatnonzero(slots[k.DRAINED]).tolist():
            slots[k.DRAINED, s] = 0.0
            r = self._by_slot[s]
            if r is not None and r.phase is Phase.DRAINING and r.outstanding == 0:
                self.sim.cluster.finish_drain(r, t + float(min(slots[k.LAST_BUSY, s], self.dt)))

    # -- gateway and routing --------------------------------------------------------------------------
    def _route(self, idx: np.ndarray) -> None:
        """Route `idx` (in order) to the ready replicas; with none ready they wait at the gateway."""
        ready = self._ready_slots()
        if not len(ready):
            self._hold(idx)
            return
        self._room(len(idx))
        k.route(idx, ready, self._rule, self._ints, self._wait_i, self._wait_f, self._slots, self._p64, self._o64,
                self._kv_cap)
        self._sync_replicas()

    def _hold_and_wake(self, idx: np.ndarray) -> None:
        """Arrivals that found no ready replica: the gateway holds them and, if it held any, wakes the
        controller (the activator's signal)."""
        if self._hold(idx):
            self.sim.controller.gateway_hold(self.sim)

    def _hold(self, idx: np.ndarray) -> int:
        """Hold `idx` (arrivals in order, no ready replica) under the activator's bound: the first
        `core.room` of them are held and the rest refused (429 queue_full), as that many
        `HeldQueue.offer` calls in arrival order would. Returns how many were held."""
        router = self.sim.router
        if router.woken_at is None:
            router.woken_at = self.loop.now
        n = core.room(self._held_n, router.bound)
        if n < len(idx):
            refused = len(idx) - n
            self._refused += refused
            self._ints[k.DROPPED] += refused
            self._ints[k.OPEN] -= refused
            idx = idx[:n]
        if len(idx):
            self._held.append(idx)
            self._held_n += len(idx)
        return len(idx)

    def _drop_late(self) -> None:
        if not self._held_n:
            return
        held = np.concatenate(self._held)
        # HeldQueue.expire's rule, on the array: held since the cutoff or before
        late = self._arr64[held] <= core.expiry_cutoff(self.loop.now, self.sim.config.max_wait_s)
        if late.any():
            self._ints[k.DROPPED] += int(late.sum())
            self._ints[k.OPEN] -= int(late.sum())
            held = held[~late]
        self._held = [held] if len(held) else []
        self._held_n = len(held)

    def on_ready(self) -> None:
        if not self._held_n:
            return
        self._drop_late()
        held = np.concatenate(self._held) if self._held else np.empty(0, np.int64)
        self._held, self._held_n = [], 0
        self.sim.router.woken_at = None
        if len(held):
            self._sub64[held] = self.loop.now
            self._route(held)

    def before_observe(self) -> None:
        self._drop_late()
        self._release_gone()
        self._route_arrived()

    def _route_arrived(self) -> None:
        """Route the requests that arrived since the slice began, up to now: the loop handles an event at the
        start of the slice it falls in, before the kernel routes that slice's arrivals, and a sample taken
        there would miss them where a real engine has them in its queue (8B H100, one replica: a mean of
        2.33 waiting at the samples against the detailed engine's 2.54; 2.47 with them). Routing is in
        arrival order either way; the kernel routes the rest of the slice's arrivals when it steps it."""
        ints = self._ints
        lo = int(ints[k.NEXT])
        hi = int(np.searchsorted(self._arr64, self.loop.now, side="right"))
        if hi <= lo:
            return
        ints[k.OPEN] += hi - lo
        ints[k.ARRIVED] += hi - lo
        ints[k.NEXT] = hi
        idx = np.arange(lo, hi, dtype=np.int64)
        if len(self._ready_slots()):
            self._route(idx)
        else:
            self._hold_and_wake(idx)

    # -- what the exporters would report ---------------------------------------------------------------
    def samples(self, now: float, dt: float) -> tuple[list[ReplicaSample], list[float], int]:
        sim = self.sim
        cfg = sim.config.replica
        active = sim.cluster.active()
        for r in active:  # slots first: the totals below cover every one
            if r.phase is Phase.READY:
                self._slot_of(r)
        if self._published:
            totals = k.published_totals(len(self._by_slot), self._ints, self._run_i, self._run_f, self._slots,
                                        self._p64, self._o64, self._wait_i, self._sub64, self.t, now, self._coef,
                                        self._budget)
        else:
            totals = k.slot_totals(len(self._by_slot), self._ints, self._run_i, self._run_f, self._slots, self._p64)
        n_run, n_wait, kv = totals.tolist()
        counters = self._slots.tolist()
        samples: list[ReplicaSample] = []
        utils: list[float] = []
        for r in active:
            if r.phase is not Phase.READY:
                samples.append(ReplicaSample(pod=r.pod, timestamp=0.0, up=False))
                continue
            s = self._slot_of(r)
            busy = counters[k.BUSY][s]
            util = min(1.0, (busy - r.busy_prev) / dt) if dt > 0 else 0.0
            r.busy_prev = busy
            utils.append(max(0.0, util))
            samples.append(ReplicaSample(
                pod=r.pod, timestamp=now if now > 0 else EPSILON_S, up=True, running=n_run[s],
                waiting=n_wait[s], max_running=float(cfg.max_num_seqs),
                kv_usage_ratio=min(1.0, kv[s] / self._kv_cap), kv_capacity_tokens=self._kv_cap,
                prompt_tokens_total=counters[k.PROMPT_TOK][s], generation_tokens_total=counters[k.GEN_TOK][s],
                requests_finished_total=counters[k.FINISHED][s],
                startup_seconds=r.startup_seconds if r.startup_seconds > 0 else None,
                ttft_sum=counters[k.TTFT_SUM][s], ttft_count=counters[k.TTFT_N][s],
                itl_sum=counters[k.ITL_SUM][s], itl_count=counters[k.ITL_N][s],
            ))
        return samples, utils, self._held_n

    def engine_totals(self) -> tuple[int, float]:
        """(preemptions, prompt tokens computed, recomputation included), the detailed backend's
        `engine_totals` (preemptions over the run; prompt tokens over every slot, which a new replica starts
        afresh)."""
        return int(self._ints[k.PREEMPTED]), float(self._slots[k.PROMPT_TOK].sum())

    def row(self) -> tuple[int, int, int, int]:
        arrivals = int(self._ints[k.ARRIVED])
        self._ints[k.ARRIVED] = 0
        return arrivals, self._held_n, self.running, self.waiting


__all__ = ["DEFAULT_DT_S", "SLICE_OF_FULL_ITERATION", "FluidBackend", "own_prefill", "slice_for"]
