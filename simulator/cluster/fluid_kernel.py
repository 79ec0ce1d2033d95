"""The fluid mode's inner loop, compiled: admission, routing and the time-sliced engine step of every replica.

A week of the Azure 2024 code trace is 2.4 million 0.25 s slices; as numpy over the requests in flight,
each slice cost about a hundred small array calls (~250 us whatever the load), 10 minutes in all. The
same arithmetic as loops over the rows, compiled by numba, costs microseconds a slice, and `advance` runs
slice after slice until something the Python side owns happens (an event on the heap, a request held at
the gateway, a draining pod emptied, the end of the run), so Python is entered once per event, not per
slice. The model itself is described in simulator/cluster/fluid.py.

State lives in plain arrays the caller owns (pools of rows, per-slot counters) so that Python reads
them between calls (observations, the timeline) without copies.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np

from keda_llm.simulator.hardware.perf import N_COEF, PerfModel, coefficient_step_time

_F = TypeVar("_F", bound=Callable[..., Any])


def _jit(fn: _F) -> _F:
    """numba's njit, typed for mypy; `cache=True` keeps the compiled code between processes (beside the
    module, else in NUMBA_CACHE_DIR or the user's cache). With nowhere writable (a read-only install
    under a user without a home) numba refuses to cache: then compile once per process instead."""
    try:
        return cast(_F, numba.njit(cache=True)(fn))
    except RuntimeError:
        return cast(_F, numba.njit(fn))


# ints: the run's scalar integer state
N_RUN, N_WAIT, NEXT, OPEN, DROPPED, RR, ARRIVED, HELD_LO, HELD_HI, PREEMPTED, HEAD = range(11)
N_INTS = 11
# slot rows: per replica slot, counters the observations read, and the kernel's bookkeeping
(PROMPT_TOK, GEN_TOK, FINISHED, BUSY, TTFT_SUM, TTFT_N, ITL_SUM, ITL_N,
 LAST_BUSY, OUTSTANDING, DRAINING, DRAINED, ITER_C, ITER_TAU, ITER_X, READY_AT, WAITING) = range(17)
N_SLOT_ROWS = 17
# scratch rows, per slot, for one slice
(_KV, _NRUN, _BDEC, _PEND, _CHUNK, _ROOM, _CUM, _RANK, _C, _LIVE, _NPF, _PRESUM, _TAU1, _T1, _DONE,
 _B2, _GAINSUM, _TAU2, _BUSY, _LAST, _NFIN, _FIRSTS, _GENSUM, _TTFTS, _ITLS, _ITLN, _NROWS, _R0, _BUSY_FROM,
 _TAIL, _NTOT, _GROW, _PEND0, _IDLE0, _TAUD, _E0, _NIT, _CUT, _D0, _D0K, _AMIN, _TAU0, _KMIN, _KFREE, _NFREE,
 _CRED, _REM, _BLOCK) = range(48)
N_SCRATCH = 48
# advance's reasons for returning
EVENT, END, GROW, AFTER_SLICE = 0, 1, 2, 3
# flags set by a slice (AFTER_SLICE)
HELD, DRAIN, DONE = 1, 2, 4

RULE_LEAST, RULE_ROUND_ROBIN = 0, 1


def coefficients(perf: PerfModel) -> np.ndarray:
    """The perf model's own coefficients (`PerfModel.coefficients`, the form of perf.N_COEF); the kernel
    compiles that one form and never looks at the model's type. A test holds it to the model's `step_times`."""
    get = getattr(perf, "coefficients", None)
    coef = None if get is None else np.ascontiguousarray(get(), dtype=np.float64)
    if coef is None or coef.shape != (N_COEF,):
        raise ValueError(f"the fluid mode needs a perf model with coefficients() of {N_COEF} numbers "
                         f"(simulator/hardware/perf.py), got {type(perf).__name__}")
    return coef


#: one engine iteration: `new` tokens computed, `kv` tokens of cache read, `pairs` attention pairs (the perf
#: model's own scalar form, compiled)
step_time = _jit(coefficient_step_time)


@_jit
def route(idx: np.ndarray, ready: np.ndarray, rule: int, ints: np.ndarray, wait_i: np.ndarray, wait_f: np.ndarray,
          slots: np.ndarray, p64: np.ndarray, o64: np.ndarray, kv_cap: float) -> None:
    """Queue requests `idx` (in order) at the ready replicas' slots `ready` (oldest first). Least outstanding
    sends each to the replica holding the fewest (ties to the oldest); round robin cycles. A request whose
    prompt and output exceed a replica's whole KV cache can never run: dropped."""
    n_ready = len(ready)
    for j in range(len(idx)):
        i = idx[j]
        if p64[i] + o64[i] > kv_cap:
            ints[DROPPED] += 1
            ints[OPEN] -= 1
            continue
        if rule == RULE_ROUND_ROBIN:
            k = ready[ints[RR] % n_ready]
            ints[RR] = (ints[RR] + 1) % n_ready
        else:
            k = ready[0]
            for q in range(1, n_ready):
                if slots[OUTSTANDING, ready[q]] < slots[OUTSTANDING, k]:
                    k = ready[q]
        slots[OUTSTANDING, k] += 1.0
        slots[WAITING, k] += 1.0
        w = ints[HEAD] + ints[N_WAIT]
        wait_i[0, w] = i
        wait_i[1, w] = k
        wait_f[0, w] = 0.0
        wait_f[1, w] = np.nan
        ints[N_WAIT] += 1


@_jit
def slot_totals(n_slots: int, ints: np.ndarray, run_i: np.ndarray, run_f: np.ndarray, slots: np.ndarray,
                p64: np.ndarray) -> np.ndarray:
    """Per slot: running requests, waiting requests, KV tokens held, the rows' state as of the slice's start
    and the requests routed since (the gauges in the leading timing, SimConfig.gauges)."""
    out = np.zeros((3, n_slots))
    for j in range(ints[N_RUN]):
        s = run_i[1, j]
        out[0, s] += 1.0
        out[2, s] += p64[run_i[0, j]] - run_f[0, j] + run_f[1, j]
    for s in range(n_slots):
        out[1, s] = slots[WAITING, s]
    return out


@_jit
def published_totals(n_slots: int, ints: np.ndarray, run_i: np.ndarray, run_f: np.ndarray, slots: np.ndarray,
                     p64: np.ndarray, o64: np.ndarray, wait_i: np.ndarray, sub: np.ndarray, t0: float, now: float,
                     coef: np.ndarray, budget: float) -> np.ndarray:
    """slot_totals as vLLM publishes its gauges (at each iteration's end, without the requests that arrived
    during the iteration in flight; see detailed._published), at `now` inside the slice that began at `t0`.
    The rows hold the state at `t0` plus what was routed since, so per slot:
    - under a backlog whose whole-chunk iteration was carried into the slice (ITER_X), a request that reached
      the replica after the iteration before the one in flight began is left out: the engine had not
      scheduled it when it last published. That iteration may have been a chunk's or a decode's; it is taken
      as half the one in flight (one 8B H100 replica under azure2023-code's bursts: 2.39 waiting published
      against the engine's 2.37, where a whole one read 2.25 and none 2.44);
    - a request admitted for the slice that no chunk has reached yet is in the engine's queue, not running
      (the slice admits for all its room at its start, the engine at each iteration's);
    - at an idle queue (nothing waiting from before the slice), a request that arrived in the slice shows, as
      running, once the rest of the decode iteration it arrived in (half of one, in the mean) and the
      iteration that takes its first chunk have passed, else not at all; and, on a replica with no prompt
      in its prefill, a request decoding since before the slice is gone once the slice's decode iterations up
      to `now` reach its last token;
    - elsewhere every row shows as it is."""
    out = np.zeros((3, n_slots))
    b = np.zeros(n_slots)
    kv = np.zeros(n_slots)
    pend = np.zeros(n_slots)
    n_run = ints[N_RUN]
    for j in range(n_run):
        s = run_i[1, j]
        kv[s] += p64[run_i[0, j]] - run_f[0, j] + run_f[1, j]
        if run_f[0, j] > 0.0:
            pend[s] += run_f[0, j]
        else:
            b[s] += 1.0
    el = max(now - t0, 0.0)
    cut = np.full(n_slots, np.inf)  # a request that reached the replica after this is not shown
    tau_d = np.zeros(n_slots)
    first = t0  # the earliest time a waiting row's classification depends on
    for s in range(n_slots):
        tau_d[s] = step_time(coef, b[s], kv[s], kv[s] + b[s]) if b[s] > 0.0 else 0.0
        x = slots[ITER_X, s]
        if x > 0.0 and pend[s] > 0.0:
            tau0 = slots[ITER_TAU, s]
            start = t0 - x / slots[ITER_C, s] * tau0  # of the iteration in flight at t0
            if now >= start + tau0:  # a later one is in flight now, each planned whole at tau0
                start += tau0 * math.floor((now - start) / tau0)
            cut[s] = start - 0.5 * tau0  # the iteration before, taken as half this one (the docstring)
            first = min(first, cut[s])
    # The queue's rows are in the order they reached a replica (a preempted one, back at the head, reached it
    # earlier still), so the ones after `first` are its tail: only those are read one by one (a runaway queue
    # holds 10^5 rows and more); the rest show as waiting, counted from WAITING.
    head = ints[HEAD]
    q0 = head + ints[N_WAIT]
    while q0 > head and sub[wait_i[0, q0 - 1]] >= first:
        q0 -= 1
    tail = np.zeros(n_slots)
    young = np.zeros(n_slots)  # arrived in the slice
    for q in range(q0, head + ints[N_WAIT]):
        s = wait_i[1, q]
        tail[s] += 1.0
        if sub[wait_i[0, q]] >= t0:
            young[s] += 1.0
    idle = np.zeros(n_slots)
    for s in range(n_slots):
        out[1, s] = slots[WAITING, s] - tail[s]
        if cut[s] == np.inf and slots[WAITING, s] - young[s] == 0.0:
            idle[s] = 1.0  # nothing waiting from before the slice
    for j in range(n_run):
        s = run_i[1, j]
        i = run_i[0, j]
        held = p64[i] - run_f[0, j] + run_f[1, j]
        if sub[i] > cut[s]:
            continue
        if (idle[s] > 0.0 and pend[s] == 0.0 and run_f[0, j] <= 0.0 and tau_d[s] > 0.0
                and math.floor(el / tau_d[s] + 1e-9) >= o64[i] - 1.0 - run_f[1, j]):
            continue  # its last token's iteration has ended: the engine published it gone
        if run_f[0, j] > 0.0 and held <= 1e-9:
            out[1, s] += 1.0  # admitted for the slice, no chunk of it computed yet: still in the engine's queue
            continue
        out[0, s] += 1.0
        out[2, s] += held
    for q in range(q0, head + ints[N_WAIT]):
        i = wait_i[0, q]
        s = wait_i[1, q]
        if sub[i] > cut[s]:
            continue
        if idle[s] > 0.0:
            c = min(p64[i], max(budget - b[s], 1.0))
            tau1 = step_time(coef, b[s] + c, kv[s], kv[s] + b[s] + c * (c + 1.0) / 2.0)
            if now - sub[i] >= 0.5 * tau_d[s] + tau1:
                out[0, s] += 1.0
                out[2, s] += c
            continue
        out[1, s] += 1.0
    return out


@_jit
def _move_row(wait_i: np.ndarray, wait_f: np.ndarray, to: int, frm: int) -> None:
    """One waiting row from column `frm` to column `to`."""
    wait_i[0, to] = wait_i[0, frm]
    wait_i[1, to] = wait_i[1, frm]
    wait_f[0, to] = wait_f[0, frm]
    wait_f[1, to] = wait_f[1, frm]


@_jit
def compact(ints: np.ndarray, wait_i: np.ndarray, wait_f: np.ndarray) -> None:
    """Move the waiting rows to the pool's start (the head drifts up as the queue's front is admitted)."""
    head = ints[HEAD]
    if head == 0:
        return
    for q in range(ints[N_WAIT]):
        _move_row(wait_i, wait_f, q, head + q)
    ints[HEAD] = 0


@_jit
def _preempt(dt: float, budget: float, kv_cap: float, slack: float, coef: np.ndarray, ints: np.ndarray,
             run_i: np.ndarray, run_f: np.ndarray, wait_i: np.ndarray, wait_f: np.ndarray, gain: np.ndarray,
             p64: np.ndarray, slots: np.ndarray, sc: np.ndarray, n_slots: int) -> None:
    """vLLM's recompute preemption, at the slice's start: a replica whose KV held, plus what of its pending
    prompts the slice computes and one slice of decoding (at least one iteration), would outgrow its cache
    gives back its most recently admitted requests (keeping one) until the rest fit; a prompt part-way
    through its prefill is one of them, as vLLM V1 allocates a prompt's blocks chunk by chunk. Each goes to
    the head of its queue, keeping its first token and what it generated; admitted again, it prefills its
    prompt and those tokens once more. V1 schedules waiting requests only in a step that preempted none:
    the replica admits after one decode iteration where the preemptions left nothing to prefill, else in
    the next slice (_admit). Without this the fluid mode held up to 9% more KV than
    the cache and ran an overloaded replica ~8% faster than the detailed engine; holding a whole prompt's KV
    from its admission (vLLM V0's rule) put an overloaded L4 replica's TPOT 21% under the detailed engine's
    (6-16% with these rules while a replica that preempted admitted nobody for a whole slice, 1-4% since it
    admits after one decode iteration; docs/simulator-results.md, "Found and fixed (the step that
    preempted)")."""
    over = False
    for s in range(n_slots):
        b = sc[_BDEC, s]
        kv = sc[_KV, s]
        grow = 0.0
        if b > 0.0:
            grow = b * max(1.0, dt / step_time(coef, b, kv, kv + b))
        sc[_GROW, s] = grow
        sc[_ROOM, s] = sc[_PEND, s]  # what the slice can prefill is at most what is pending: exact only if needed
        if kv + sc[_PEND, s] + grow > kv_cap and sc[_NRUN, s] > 1.0:
            sc[_ROOM, s] = _prefill_room(dt, budget, coef, slots, sc, s)
            if kv + min(sc[_PEND, s], sc[_ROOM, s]) + grow > kv_cap:
                over = True
    if not over:
        return
    n_run = ints[N_RUN]
    m = 0
    for j in range(n_run - 1, -1, -1):
        gain[j] = 0.0
        s = run_i[1, j]
        if sc[_NRUN, s] <= 1.0 or sc[_KV, s] + min(sc[_PEND, s], sc[_ROOM, s]) + sc[_GROW, s] <= kv_cap:
            continue
        pre = run_f[0, j]
        i = run_i[0, j]
        sc[_KV, s] -= p64[i] - pre + run_f[1, j] + slack
        sc[_PEND, s] -= pre
        sc[_NRUN, s] -= 1.0
        sc[_CUT, s] = 1.0
        if pre <= 0.0:
            sc[_GROW, s] *= (sc[_BDEC, s] - 1.0) / sc[_BDEC, s]
            sc[_BDEC, s] -= 1.0
        gain[j] = 1.0
        m += 1
    if m == 0:
        return
    n_wait = ints[N_WAIT]
    head = ints[HEAD]
    if head < m:  # the queue moves back to make room in front of it (else the room is there already)
        for w in range(n_wait - 1, -1, -1):
            _move_row(wait_i, wait_f, w + m, head + w)
        head = m
    head -= m
    ints[HEAD] = head
    q = head  # the preempted go first, in admission order
    kept = 0
    for j in range(n_run):
        if gain[j] > 0.0:
            gain[j] = 0.0
            wait_i[0, q] = run_i[0, j]
            wait_i[1, q] = run_i[1, j]
            first = run_f[2, j]
            wait_f[0, q] = 0.0 if np.isnan(first) else run_f[1, j]  # a prompt cut short restarts from zero
            wait_f[1, q] = first
            slots[WAITING, run_i[1, j]] += 1.0
            q += 1
            continue
        run_i[0, kept] = run_i[0, j]
        run_i[1, kept] = run_i[1, j]
        run_f[0, kept] = run_f[0, j]
        run_f[1, kept] = run_f[1, j]
        run_f[2, kept] = run_f[2, j]
        kept += 1
    ints[N_RUN] = kept
    ints[N_WAIT] = n_wait + m
    ints[PREEMPTED] += m


@_jit
def _carried(slots: np.ndarray, sc: np.ndarray, s: int, pend: float) -> tuple[float, float, float, float, float]:
    """The iteration a previous slice started on slot s, scheduled whole (step_slice): (x of its c0 tokens
    done, c0, its duration tau0, rem0 tokens left, e0 when it ends into this slice); zeros when there is none.
    After a preemption that left nothing to prefill it is the decode iteration that preempted (_admit: no
    prompt tokens, its duration _D0). Admission and the slice's step both plan around it, from this one reading."""
    x = slots[ITER_X, s]
    if x > 0.0 and pend > 0.0:
        c0 = slots[ITER_C, s]
        tau0 = slots[ITER_TAU, s]
        rem0 = min(c0 - x, pend)
        return x, c0, tau0, rem0, rem0 / c0 * tau0
    d0 = sc[_D0, s]
    if d0 > 0.0:  # before any prompt is admitted too: admission's room starts after it
        return 0.0, 0.0, d0, 0.0, d0 * max(sc[_D0K, s], 1.0)
    return 0.0, 0.0, 0.0, 0.0, 0.0


@_jit
def _prefill_room(dt: float, budget: float, coef: np.ndarray, slots: np.ndarray, sc: np.ndarray, s: int) -> float:
    """Prompt tokens slot s can compute in this slice, and at least the next iteration's chunk: vLLM fills
    every iteration from the queue up to the token budget the decoding requests leave, however long the
    iteration. An iteration carried from the previous slice (step_slice) was scheduled whole: what is left
    of it ends at e0, and the fresh iterations after it each take a whole chunk (counting its remainder
    against them planned the next one short, so fast for the decodes beside it: 17% under a 70B prefill
    backlog)."""
    chunk = max(budget - sc[_BDEC, s], 0.0)
    kv = sc[_KV, s]
    b = sc[_BDEC, s]
    tau = step_time(coef, b + chunk, kv, kv + b + chunk * chunk / 2)
    _, _, _, rem0, e0 = _carried(slots, sc, s, sc[_PEND, s])
    fresh = max((dt - e0) / tau, 1.0) if e0 < dt else 0.0
    room: float = rem0 + fresh * chunk
    return room


@_jit
def _admit(t: float, dt: float, budget: float, seqs: float, kv_cap: float, slack: float, coef: np.ndarray,
           ints: np.ndarray, run_i: np.ndarray, run_f: np.ndarray, wait_i: np.ndarray, wait_f: np.ndarray,
           gain: np.ndarray, p64: np.ndarray, o64: np.ndarray, arr: np.ndarray, slots: np.ndarray, sc: np.ndarray,
           n_slots: int) -> None:
    """Per-slot sums over the running rows, preemption where the KV cache would overflow (_preempt), then
    FIFO admission from each replica's queue of what it can start prefilling in this slice (vLLM admits a
    request only in an iteration with token budget left for it, so under a prefill backlog requests stay
    *waiting*, which is what num_requests_waiting shows) and whose first chunk the KV cache holds now
    beside a slice of its neighbours' decoding (vLLM V1 allocates the blocks of what an iteration computes,
    so a replica at the edge of its cache admits a long prompt, then preempts; _preempt). A preempted request is
    admitted again with its prompt and generated tokens to prefill, its first token kept.

    Two admissions start inside the slice, after some decode iterations (D0 x D0K, which _carried gives the
    slice's step as the lead before its prefill): prompts that all arrived inside the slice on a replica
    that was only decoding start in the iteration after the first arrives (the engine's order; from its
    start they had the decoding requests pay for a chunk before it came), and the queue's head, blocked by
    the cache or the batch limit on such a replica, is admitted on the credit of the requests that finish
    first in the slice and starts in the iteration after them (the engine admits it there; waiting for the
    next slice left the replica decoding alone meanwhile)."""
    sc[:, :n_slots] = 0.0  # every per-slot sum of the slice starts here (step_slice relies on it too)
    sc[_BUSY_FROM, :n_slots] = t
    sc[_LAST, :n_slots] = -np.inf
    n_run = ints[N_RUN]
    for j in range(n_run):
        s = run_i[1, j]
        pre = run_f[0, j]
        sc[_KV, s] += p64[run_i[0, j]] - pre + run_f[1, j] + slack
        sc[_NRUN, s] += 1.0
        if pre <= 0.0:
            sc[_BDEC, s] += 1.0
        sc[_PEND, s] += pre
    _preempt(dt, budget, kv_cap, slack, coef, ints, run_i, run_f, wait_i, wait_f, gain, p64, slots, sc, n_slots)
    for s in range(n_slots):
        if sc[_PEND, s] == 0.0:  # nothing left to prefill (done, or preempted): no iteration is carried on
            slots[ITER_X, s] = 0.0
            b = sc[_BDEC, s]
            if sc[_CUT, s] > 0.0 and b > 0.0:
                # V1 admits nobody in the step that preempted, one decode iteration here: the queue is
                # admitted after it (a whole slice without admission halved a KV-bound replica's churn)
                sc[_D0, s] = step_time(coef, b, sc[_KV, s], sc[_KV, s] + b)
                sc[_CUT, s] = 0.0
    n_run = ints[N_RUN]
    n_wait = ints[N_WAIT]
    if n_wait == 0:
        return
    for s in range(n_slots):
        sc[_IDLE0, s] = 1.0 if sc[_NRUN, s] == 0.0 else 0.0
        sc[_CHUNK, s] = max(budget - sc[_BDEC, s], 0.0)
        pend = sc[_PEND, s]
        room = _prefill_room(dt, budget, coef, slots, sc, s)
        sc[_ROOM, s] = room - pend
        sc[_PEND0, s] = min(pend, room)  # what of the pending prompts the slice computes
        sc[_CUM, s] = 0.0
        sc[_RANK, s] = 0.0
        sc[_KMIN, s] = np.inf
    # the decoding requests that finish first in the slice (in whole decode iterations) and the KV and
    # sequences they free: the engine admits its queue's head in the iteration after, not at the next slice
    for j in range(n_run):
        if run_f[0, j] <= 0.0:
            s = run_i[1, j]
            i = run_i[0, j]
            kk = max(1.0, math.ceil(o64[i] - 1.0 - run_f[1, j] - 1e-9))
            if kk < sc[_KMIN, s]:  # an earlier finisher: what it frees replaces the sums so far
                sc[_KMIN, s] = kk
                sc[_KFREE, s] = 0.0
                sc[_NFREE, s] = 0.0
            if kk == sc[_KMIN, s]:
                sc[_KFREE, s] += p64[i] + o64[i] - 1.0
                sc[_NFREE, s] += 1.0
    # A replica's queue is admitted FIFO, and every test below only tightens along it (the prompts ahead of a
    # request and its rank only grow): once one of its requests stays waiting, all after it do. Those are
    # not examined (_BLOCK), and once every replica with requests left is blocked the scan stops; the rows
    # it passed close up toward the rest, whose start (the head) moves. Scanning and moving the whole queue
    # each slice made a runaway queue (one replica, 10^5 waiting) cost ~1 ms a slice.
    active = 0
    for s in range(n_slots):
        sc[_REM, s] = slots[WAITING, s]
        if sc[_REM, s] > 0.0:
            active += 1
    head = ints[HEAD]
    end = head + n_wait
    j = head
    while j < end and active > 0:
        i = wait_i[0, j]
        s = wait_i[1, j]
        g = wait_f[0, j]
        sc[_REM, s] -= 1.0
        if sc[_BLOCK, s] > 0.0:
            j += 1
            continue
        p = p64[i] + g  # a preempted request recomputes what it generated too
        before = sc[_CUM, s]
        cum = before + p
        # the KV cache must hold its first chunk beside what the slice computes of the prompts before it and
        # one slice of decoding (what _preempt holds room for: admitting into that room only churned, a
        # 70B replica under 500-token prompts preempting twice as often as the detailed engine)
        room_kv = kv_cap - sc[_KV, s] - sc[_GROW, s] - sc[_PEND0, s]
        ok = (sc[_CUT, s] == 0.0 and min(cum, before + sc[_CHUNK, s]) <= room_kv and sc[_RANK, s] < seqs - sc[_NRUN, s]
              and before < sc[_ROOM, s] and sc[_CHUNK, s] > 0.0)
        plain = ok
        if (not ok and before == 0.0 and sc[_PEND, s] == 0.0 and sc[_PEND0, s] == 0.0
                and sc[_CUT, s] == 0.0 and sc[_D0, s] == 0.0 and sc[_BDEC, s] > 0.0 and sc[_CHUNK, s] > 0.0
                and sc[_KMIN, s] < np.inf):
            # the queue's head, blocked by the cache or the batch limit, fits once the first finishers go:
            # admitted to start after them (the slice decodes until then, as for the arrival lead)
            kv = sc[_KV, s]
            taud = step_time(coef, sc[_BDEC, s], kv, kv + sc[_BDEC, s])
            lead = sc[_KMIN, s] * taud
            if (lead < dt and min(p, sc[_CHUNK, s]) <= room_kv + sc[_KFREE, s]
                    and sc[_RANK, s] < seqs - sc[_NRUN, s] + sc[_NFREE, s]):
                ok = True
                sc[_D0, s] = taud
                sc[_D0K, s] = sc[_KMIN, s]
                sc[_CRED, s] = 1.0
        sc[_CUM, s] = cum
        sc[_RANK, s] += 1.0
        if ok:  # admitted rows have computed nothing yet: KV and decoding counts unchanged, pending grows
            run_i[0, n_run] = i
            run_i[1, n_run] = s
            run_f[0, n_run] = p
            run_f[1, n_run] = g
            run_f[2, n_run] = wait_f[1, j]
            n_run += 1
            if sc[_NRUN, s] == 0.0 and sc[_PEND, s] == 0.0:
                # idle at the slice's start: busy from its first request's arrival (FIFO: the earliest), or
                # from its own readiness when it came up inside the slice
                sc[_BUSY_FROM, s] = max(t, arr[i], slots[READY_AT, s])
            sc[_PEND, s] += p
            a = arr[i]
            if sc[_AMIN, s] == 0.0 or a < sc[_AMIN, s]:
                sc[_AMIN, s] = a
            slots[WAITING, s] -= 1.0
            wait_i[0, j] = -1  # a hole, closed below
        j += 1
        if not plain and cum > 0.0:  # the credit admits only at the queue's head (before == 0): blocked for good
            sc[_BLOCK, s] = 1.0
        if sc[_BLOCK, s] > 0.0 or sc[_REM, s] == 0.0:
            active -= 1
    # close the holes of [head, j): the rows kept there move up against the unscanned rest, in order
    w = j
    for q in range(j - 1, head - 1, -1):
        if wait_i[0, q] >= 0:
            w -= 1
            if w != q:
                _move_row(wait_i, wait_f, w, q)
    ints[N_WAIT] = end - w
    ints[HEAD] = w
    ints[N_RUN] = n_run
    for s in range(n_slots):
        # prompts that all arrived inside the slice on a decoding replica with nothing else to prefill: the
        # engine decodes until the iteration boundary after the first one arrives, then takes its chunk
        b = sc[_BDEC, s]
        a = sc[_AMIN, s]
        if a > t and b > 0.0 and sc[_PEND0, s] == 0.0 and sc[_D0, s] == 0.0:
            kv = sc[_KV, s]
            taud = step_time(coef, b, kv, kv + b)
            sc[_D0, s] = taud
            sc[_D0K, s] = math.ceil((a - t) / taud - 1e-9)
        elif a > t and sc[_CRED, s] > 0.0:
            sc[_D0K, s] = max(sc[_D0K, s], math.ceil((a - t) / sc[_D0, s] - 1e-9))


@_jit
def _first_floor(i: int, s: int, tau1: float, budget: float, coef: np.ndarray, arr: np.ndarray, p64: np.ndarray,
                 own_prefill: np.ndarray, slots: np.ndarray, sc: np.ndarray) -> float:
    """The earliest first token of request i on slot s: its own prefill from its arrival (or the pod's
    readiness) on an idle replica; on a busy one, as in the detailed engine, it first waits for the iteration
    in flight (on the grid of the slice's iterations, decode ones where requests were decoding, from the
    slice's start or its replica's first arrival) and its first chunk shares an iteration with the decoding
    batch. (Without this a request arriving mid-slice was prefilled as if alone and at once: TTFT 10-90 ms
    short on 70B TP4, tests/simulator/test_sim_fluid.py.)"""
    st = max(arr[i], slots[READY_AT, s])
    fl: float = st + own_prefill[i]
    origin = sc[_BUSY_FROM, s]
    if st > origin or sc[_IDLE0, s] == 0.0:
        b = sc[_BDEC, s]
        if st > origin:
            tg = sc[_TAUD, s] if b > 0.0 else tau1
            a = st - origin
            fl += tg * math.ceil(a / tg - 1e-9) - a
        if b > 0.0:
            n1 = min(p64[i], max(budget - b, 1.0))
            pr = n1 * (n1 + 1.0) / 2.0
            kv = sc[_KV, s]
            fl += step_time(coef, b + n1, kv, kv + b + pr) - step_time(coef, n1, 0.0, pr)
    return fl


@_jit
def step_slice(t: float, dt: float, budget: float, seqs: float, kv_cap: float, slack: float, lat: float,
               coef: np.ndarray,
               ints: np.ndarray, run_i: np.ndarray, run_f: np.ndarray, wait_i: np.ndarray, wait_f: np.ndarray,
               gain: np.ndarray, slots: np.ndarray, sc: np.ndarray, n_slots: int, p64: np.ndarray, o64: np.ndarray,
               arr: np.ndarray, sub: np.ndarray, own_prefill: np.ndarray, ttft: np.ndarray, tpot: np.ndarray) -> bool:
    """Advance every replica by one slice [t, t + dt); True when a draining replica emptied.

    Within the slice: mixed iterations (every decoding request + a chunk of `budget - decoding` prompt
    tokens, FIFO) until the admitted prompts are prefilled, then pure decode iterations, each phase's
    iteration time from the perf model at the slice's batch and KV; first tokens and completions are
    placed inside the slice where their token counts are reached."""
    _admit(t, dt, budget, seqs, kv_cap, slack, coef, ints, run_i, run_f, wait_i, wait_f, gain, p64, o64, arr, slots, sc,
           n_slots)
    n_run = ints[N_RUN]
    if n_run == 0:
        return False
    any_pending = False
    for s in range(n_slots):
        if sc[_PEND, s] != 0.0:
            any_pending = True
    for j in range(n_run):
        gain[j] = 0.0
    if any_pending:
        # prefill phase: chunks of the budget left by the decoding requests, FIFO over the prompts
        for j in range(n_run):
            if run_f[0, j] > 0.0:
                s = run_i[1, j]
                sc[_NPF, s] += 1.0
                sc[_PRESUM, s] += p64[run_i[0, j]] + run_f[1, j]  # a preempted one recomputes its output too
        for s in range(n_slots):
            pend = sc[_PEND, s]
            b = sc[_BDEC, s]
            # an iteration is scheduled whole: one that a previous slice started (slices shorter than a long
            # prefill iteration) keeps its chunk and duration until it ends (e0: rem0 of its c0 tokens left);
            # the iterations after it are planned afresh, at this slice's batch, KV and prompts
            x, c0, tau0, rem0, e0 = _carried(slots, sc, s, pend)
            rest = pend - rem0
            c = min(max(budget - b, 0.0), rest)
            sc[_C, s] = c
            sc[_R0, s] = rem0
            sc[_E0, s] = e0
            sc[_TAU0, s] = tau0
            live = pend > 0.0 and (rem0 > 0.0 or c > 0.0)
            sc[_LIVE, s] = 1.0 if live else 0.0
            sc[_CUM, s] = 0.0
            slots[ITER_X, s] = 0.0
            if live:
                kv = sc[_KV, s]
                sc[_TAUD, s] = step_time(coef, b, kv, kv + b) if b > 0.0 else 0.0
                pre_mean = sc[_PRESUM, s] / max(sc[_NPF, s], 1.0)
                # a chunk's tokens attend, on average, to half of their own prompt
                tau1 = step_time(coef, b + c, kv, kv + b + c * (pre_mean + 1) / 2) if c > 0.0 else tau0
                t1 = min(dt, e0 + (rest / c * tau1 if c > 0.0 else 0.0))
                done = t1 / tau0 * c0 if t1 <= e0 else rem0 + (t1 - e0) / tau1 * c
                # iterations in the phase (each gives every decoding request a token), fractions included
                sc[_NIT, s] = (min(t1, e0) / tau0 if e0 > 0.0 else 0.0) + max(0.0, t1 - e0) / tau1
                # the fresh iterations that end prompts: chunks of c, the last holding only the remainder at
                # its own, shorter time: its prompts' first tokens come then (the phase's length stays pro
                # rata: in a stream of arrivals the remainder's room goes to the next prompts)
                n_tot = max(1.0, math.ceil((rest - 1e-5) / c)) if c > 0.0 else 0.0
                r = rest - (n_tot - 1.0) * c
                tail = tau1
                if n_tot > 1.0 and r < c - 1e-5:
                    tail = step_time(coef, b + r, kv, kv + b + r * (pre_mean + 1) / 2)
                sc[_NTOT, s] = n_tot
                sc[_TAIL, s] = tail
                sc[_TAU1, s] = tau1
                sc[_T1, s] = t1
                sc[_DONE, s] = done
                if done < pend - 1e-6:  # prefill goes on in the next slice: where the iteration in flight is
                    if t1 <= e0:  # still the carried one
                        slots[ITER_X, s] = x + done
                        slots[ITER_C, s] = c0
                        slots[ITER_TAU, s] = tau0
                    else:
                        into = (done - rem0) / c
                        into -= math.floor(into + 1e-9)
                        if into > 1e-9:
                            slots[ITER_X, s] = into * c
                            slots[ITER_C, s] = c
                            slots[ITER_TAU, s] = tau1
        for j in range(n_run):
            s = run_i[1, j]
            pre = run_f[0, j]
            if pre <= 0.0:  # decoding already: decodes through the prefill phase too
                if sc[_LIVE, s] > 0.0:
                    gain[j] += sc[_NIT, s]
                continue
            cum = sc[_CUM, s] + pre
            sc[_CUM, s] = cum
            done = sc[_DONE, s]
            if sc[_LIVE, s] > 0.0 and cum <= done + 1e-6:
                tau1 = sc[_TAU1, s]
                i = run_i[0, j]
                # the carried iteration ends at e0, then fresh ones every tau1 (the last at its own time)
                rem0 = sc[_R0, s]
                end = sc[_E0, s]
                if cum > rem0 + 1e-6:
                    n_tot = sc[_NTOT, s]
                    k = min(max(1.0, math.ceil((cum - rem0 - 1e-5) / sc[_C, s])), n_tot)
                    end += k * tau1 if k < n_tot else (k - 1.0) * tau1 + sc[_TAIL, s]
                run_f[0, j] = 0.0
                if not np.isnan(run_f[2, j]):  # preempted and recomputed: its next token, the first kept
                    gain[j] += 1.0 + max(0.0, sc[_T1, s] - end) / tau1
                    continue
                t_first = max(t + end, _first_floor(i, s, tau1, budget, coef, arr, p64, own_prefill, slots, sc))
                run_f[2, j] = t_first + lat
                sc[_FIRSTS, s] += 1.0
                gain[j] += max(0.0, (t + sc[_T1, s]) - t_first) / tau1
            else:  # the one straddling the slice's end keeps what is left of its prompt; those after, all of it
                run_f[0, j] = min(pre, max(cum - done, 0.0))
        for s in range(n_slots):
            slots[PROMPT_TOK, s] += sc[_DONE, s]
            slots[GEN_TOK, s] += sc[_FIRSTS, s]
    # decode phase: the rest of the slice, every request with its first token
    for j in range(n_run):
        s = run_i[1, j]
        if run_f[0, j] <= 0.0:
            sc[_B2, s] += 1.0
        sc[_GAINSUM, s] += gain[j]
        sc[_NROWS, s] += 1.0
    for s in range(n_slots):
        b2 = sc[_B2, s]
        kv2 = sc[_KV, s] + sc[_GAINSUM, s]
        sc[_TAU2, s] = step_time(coef, max(b2, 1.0), kv2, kv2 + b2) if b2 > 0.0 else 0.0
        sc[_BUSY, s] = sc[_T1, s] + (dt - sc[_T1, s] if b2 > 0.0 else 0.0)
    kept = 0
    any_fin = False
    for j in range(n_run):
        s = run_i[1, j]
        i = run_i[0, j]
        out = o64[i]
        gen = run_f[1, j]
        g = gain[j]
        decoding = run_f[0, j] <= 0.0
        g_dec = 0.0
        if decoding and sc[_B2, s] > 0.0:
            first = run_f[2, j]
            start = t + sc[_T1, s] if np.isnan(first) else max(first - lat, t + sc[_T1, s])
            g_dec = max(0.0, t + dt - start) / sc[_TAU2, s]
            g += g_dec
        need = out - 1.0 - gen
        gen += g
        if decoding and gen >= out - 1.0 - 1e-9:
            any_fin = True
            first = run_f[2, j]
            # the last token: back from the slice's end over the tokens past the output, at the decode phase's
            # pace, then (a request done before it) at the prefill phase's, back from that phase's end
            over = gen - (out - 1.0)
            in_dec = over <= g_dec
            if in_dec:
                t_last = t + dt - over * sc[_TAU2, s]
            else:  # back from the prefill phase's end: its fresh iterations, then what came before them
                back = over - g_dec
                e0 = sc[_E0, s]
                fresh = max(0.0, sc[_T1, s] - e0) / sc[_TAU1, s]
                if back <= fresh or sc[_TAU0, s] <= 0.0:
                    t_last = t + sc[_T1, s] - back * sc[_TAU1, s]
                else:
                    t_last = t + min(e0, sc[_T1, s]) - (back - fresh) * sc[_TAU0, s]
            t_fin = max(t_last, first - lat) + lat
            ttft[i] = first - arr[i]
            tpot[i] = (t_fin - first) / (out - 1.0) if out >= 2.0 else np.nan
            sc[_TTFTS, s] += first - sub[i]  # the engine's TTFT: from when it got the request (sub)
            if out >= 2.0:  # sum of gaps = finish - first token, over output - 1 gaps (vLLM's ITL histogram)
                sc[_ITLS, s] += t_fin - first
                sc[_ITLN, s] += out - 1.0
            sc[_GENSUM, s] += min(g, need)
            sc[_NFIN, s] += 1.0
            sc[_LAST, s] = max(sc[_LAST, s], t_fin - lat - t)
            slots[OUTSTANDING, s] -= 1.0
            continue
        sc[_GENSUM, s] += g
        run_i[0, kept] = i
        run_i[1, kept] = s
        run_f[0, kept] = run_f[0, j]
        run_f[1, kept] = gen
        run_f[2, kept] = run_f[2, j]
        kept += 1
    ints[N_RUN] = kept
    ints[OPEN] -= n_run - kept
    drained = False
    for s in range(n_slots):
        busy = sc[_BUSY, s]
        slots[GEN_TOK, s] += sc[_GENSUM, s]
        if any_fin:
            slots[TTFT_SUM, s] += sc[_TTFTS, s]
            slots[TTFT_N, s] += sc[_NFIN, s]
            slots[ITL_SUM, s] += sc[_ITLS, s]
            slots[ITL_N, s] += sc[_ITLN, s]
            slots[FINISHED, s] += sc[_NFIN, s]
            # a replica whose requests all finished in this slice, nothing queued, was idle after the last
            if sc[_NROWS, s] - sc[_NFIN, s] + slots[WAITING, s] == 0.0 and sc[_LAST, s] > -np.inf:
                busy = min(busy, sc[_LAST, s])
        busy = max(0.0, busy - (sc[_BUSY_FROM, s] - t))  # an idle replica's first request arrived into the slice
        slots[BUSY, s] += busy
        slots[LAST_BUSY, s] = busy
        if slots[DRAINING, s] > 0.0 and slots[OUTSTANDING, s] == 0.0:
            slots[DRAINED, s] = 1.0
            slots[DRAINING, s] = 0.0
            drained = True
    return drained


@_jit
def advance(t: float, dt: float, t_event: float, hard_end: float, held_n: int, ready: np.ndarray, rule: int,
            budget: float, seqs: float, kv_cap: float, slack: float, lat: float, coef: np.ndarray, ints: np.ndarray,
            run_i: np.ndarray, run_f: np.ndarray, wait_i: np.ndarray, wait_f: np.ndarray, gain: np.ndarray,
            slots: np.ndarray, sc: np.ndarray, n_slots: int, p64: np.ndarray, o64: np.ndarray, arr: np.ndarray,
            sub: np.ndarray, own_prefill: np.ndarray, ttft: np.ndarray,
            tpot: np.ndarray) -> tuple[float, int, int, float]:
    """Run slices from `t` (whose events the caller has handled) until one the caller must see.

    Returns (t, reason, flags, slice start): reason EVENT (an event is due in the slice starting at t),
    END (past `hard_end`), GROW (the row pools need room for the slice at t) or AFTER_SLICE with flags: HELD
    (arrivals found no ready replica: ints[HELD_LO:HELD_HI] for the gateway), DRAIN (slots[DRAINED] marks
    draining replicas now empty), DONE (every request arrived and finished; the run ends at t)."""
    n = len(arr)
    first_slice = True
    while t <= hard_end:
        t_next = t + dt
        if not first_slice and t_event < t_next:
            return t, EVENT, 0, t
        first_slice = False
        flags = 0
        lo = ints[NEXT]
        hi = lo
        if lo < n and arr[lo] < t_next:
            hi = lo + int(np.searchsorted(arr[lo:], t_next))
        if hi > lo:
            k = hi - lo
            # every request may wait at once (the preempted too), behind the head
            if ints[HEAD] + ints[N_RUN] + ints[N_WAIT] + k > wait_i.shape[1]:
                compact(ints, wait_i, wait_f)
            if ints[N_RUN] + ints[N_WAIT] + k > min(wait_i.shape[1], run_i.shape[1]):
                return t, GROW, 0, t
            ints[OPEN] += k
            ints[ARRIVED] += k
            ints[NEXT] = hi
            if len(ready) == 0:
                ints[HELD_LO] = lo
                ints[HELD_HI] = hi
                flags |= HELD
            else:
                route(np.arange(lo, hi), ready, rule, ints, wait_i, wait_f, slots, p64, o64, kv_cap)
        busy = ints[N_RUN] > 0 or ints[N_WAIT] > 0
        if busy and step_slice(t, dt, budget, seqs, kv_cap, slack, lat, coef, ints, run_i, run_f, wait_i, wait_f, gain,
                               slots, sc, n_slots, p64, o64, arr, sub, own_prefill, ttft, tpot):
            flags |= DRAIN
        if ints[NEXT] >= n and ints[OPEN] == 0:
            return t_next, AFTER_SLICE, flags | DONE, t
        start = t
        t = t_next
        if not busy and held_n == 0 and (flags & HELD) == 0 and ints[NEXT] < n:
            # nothing runs and nobody waits: skip whole slices up to the next arrival or event
            nxt = min(arr[ints[NEXT]], t_event)
            if nxt > t + dt:
                t = t + math.floor((nxt - t) / dt) * dt
        if flags:
            return t, AFTER_SLICE, flags, start
    return t, END, 0, t
