"""One LLM server replica with continuous batching, stepped by the caller on an explicit clock.

The engine is modelled the way vLLM's V1 scheduler works (vllm/v1/core/sched/scheduler.py):

- An iteration schedules the running sequences first, in admission order, then admits waiting
  requests in arrival order (FIFO) while the batch (`max_num_seqs`), the token budget
  (`max_num_batched_tokens`, chunked prefill: a long prompt is split across iterations) and free
  KV blocks allow. A sequence needs ceil(tokens / block_size) blocks for what it has computed.
- A running sequence that needs a block when none is free preempts the most recently admitted
  sequence (recompute: its blocks are freed and it goes back to the head of the queue, to be
  prefilled again with what it had generated so far). An iteration that preempted admits nobody:
  the freed blocks go to the running sequences (V1 schedules waiting requests only "if not
  preempted_reqs"); re-admitting the one just preempted made a KV-bound replica thrash.
- With prefix caching, a request whose trace carries prefix block hashes (Mooncake `hash_ids`, one
  per 512 tokens) skips the leading blocks already cached on this replica (LRU, bounded by the KV
  capacity). Cached blocks are still counted in the request's KV usage (conservative).

Event API (what a discrete-event loop needs):

    accepted = replica.add(request, now)        # enqueue; False if it can never fit in KV
    if replica.has_work:
        result = replica.step(now, horizon)     # run from `now`; state is as of now + result.duration
        # schedule the next step at now + result.duration; result.finished are done

`step` runs one iteration, or, when nothing can change but decoding (no prefill pending, nobody
admissible), a run of identical decode iterations up to the first completion, the first KV block
shortage, or `horizon` (the next arrival or observation), whichever comes first. The work per call
is O(running sequences), so a trace costs O(events), not O(tokens). Timestamps recorded on
requests are exact per iteration either way.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from keda_llm.simulator.hardware.perf import PerfModel, coefficient_step_time


@dataclass(frozen=True)
class ReplicaConfig:
    """The engine limits of one replica (vLLM names)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    kv_blocks: int
    block_size: int = 16
    prefix_block_tokens: int = 512  # tokens per trace prefix hash (Mooncake FAST'25 README: 512)
    enable_prefix_caching: bool = True

    def __post_init__(self) -> None:
        for key in ("max_num_seqs", "max_num_batched_tokens", "kv_blocks", "block_size", "prefix_block_tokens"):
            if getattr(self, key) <= 0:
                raise ValueError(f"replica config: {key} must be > 0, got {getattr(self, key)}")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"replica config: max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                f"max_num_seqs ({self.max_num_seqs}), as vLLM requires"
            )

    @property
    def kv_capacity_tokens(self) -> int:
        return self.kv_blocks * self.block_size


@dataclass(eq=False)
class Request:
    """A request from the trace, and what happened to it (filled in by the replica)."""

    rid: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    prefix_hashes: tuple[int, ...] = ()
    # when the engine got it: its arrival, or later when a gateway held it while no replica was ready
    submitted_s: float | None = None
    # results
    first_token_s: float | None = None
    finish_s: float | None = None
    max_itl_s: float = 0.0
    preemptions: int = 0
    cached_tokens: int = 0
    # engine state
    _computed: int = field(default=0, repr=False)
    _context: int = field(default=0, repr=False)  # prompt + generated
    _generated: int = field(default=0, repr=False)
    _blocks: int = field(default=0, repr=False)
    _last_token_s: float = field(default=0.0, repr=False)
    _cached_once: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1:
            raise ValueError(f"request {self.rid}: prompt_tokens must be >= 1, got {self.prompt_tokens}")
        if self.output_tokens < 0:
            raise ValueError(f"request {self.rid}: output_tokens must be >= 0, got {self.output_tokens}")
        self._context = self.prompt_tokens

    @property
    def target_output(self) -> int:
        """An engine always emits at least one token."""
        return max(1, self.output_tokens)

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first (vLLM's TPOT); None for one-token outputs."""
        if self.finish_s is None or self.first_token_s is None or self.target_output < 2:
            return None
        return (self.finish_s - self.first_token_s) / (self.target_output - 1)


@dataclass(frozen=True)
class StepResult:
    duration: float  # seconds from `now` until the state reported by the replica holds
    finished: list[Request]
    iterations: int  # engine iterations this call covered


@dataclass
class ReplicaCounters:
    """Cumulative engine counters (the `llm_*_total` metrics a real engine exports)."""

    prompt_tokens: int = 0  # prefill tokens computed (recomputation included, cache hits excluded)
    generation_tokens: int = 0
    requests_finished: int = 0
    preemptions: int = 0
    prefix_queried_tokens: int = 0
    prefix_hit_tokens: int = 0
    rejected: int = 0
    iterations: int = 0
    busy_s: float = 0.0


class Replica:
    """A continuous-batching engine; see the module docstring for the event API."""

    def __init__(self, config: ReplicaConfig, perf: PerfModel) -> None:
        self.config = config
        self.perf = perf
        self.speed = 1.0  # < 1: a degraded GPU (throttled) runs every step this much slower (SimConfig.degraded)
        self._coef = tuple(float(x) for x in perf.coefficients())  # _decode_run's scalar form of the model
        self.running: list[Request] = []
        self.waiting: deque[Request] = deque()
        self.free_blocks = config.kv_blocks
        self.finished_blocks = 0  # KV blocks the last step's finished requests held (see `step`)
        self.counters = ReplicaCounters()
        cap = config.kv_capacity_tokens // config.prefix_block_tokens
        self._prefix_capacity = cap
        self._prefix_lru: OrderedDict[int, None] = OrderedDict()

    # -- observation -------------------------------------------------------------------------
    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def kv_usage(self) -> float:
        """Fraction of KV blocks in use, 0-1."""
        return 1.0 - self.free_blocks / self.config.kv_blocks

    # -- input -------------------------------------------------------------------------------
    def fits(self, request: Request) -> bool:
        """Whether the request could ever run here: its whole context must fit in the KV cache."""
        need = math.ceil((request.prompt_tokens + request.target_output) / self.config.block_size)
        return need <= self.config.kv_blocks

    def add(self, request: Request, now: float) -> bool:
        """Queue a request that arrived at `now`. False (and counted as rejected) if it can never fit."""
        if not self.fits(request):
            self.counters.rejected += 1
            return False
        request.submitted_s = now
        self.waiting.append(request)
        return True

    # -- the engine iteration ----------------------------------------------------------------
    def step(self, now: float, horizon: float = math.inf) -> StepResult:
        """Run from `now`: one iteration, or a run of pure-decode iterations ending by `horizon`. The step is
        applied at once; `finished_blocks` is then the KV blocks its finished requests held."""
        self.finished_blocks = 0
        if not self.has_work:
            return StepResult(0.0, [], 0)
        cfg = self.config
        budget = cfg.max_num_batched_tokens
        sched: list[tuple[Request, int]] = []
        # 1. running sequences, admission order
        i = 0
        preempted = self.counters.preemptions
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq._context - seq._computed, budget)
            need = self._blocks_for(seq._computed + n) - seq._blocks
            while need > self.free_blocks and self.running[-1] is not seq:
                self._preempt(self.running[-1])
            if need > self.free_blocks:  # only this one left to give back
                self._preempt(seq)
                break
            self._allocate(seq, need)
            sched.append((seq, n))
            budget -= n
            i += 1
        partial_left = any(s._context - s._computed > 0 for s in self.running[len(sched):])
        # 2. admissions, FIFO; none in an iteration that preempted (vLLM V1's scheduler admits no waiting
        # request in a step whose running requests needed a preemption: the freed blocks go to them)
        preempted_now = self.counters.preemptions > preempted
        admitted = 0
        while self.waiting and budget > 0 and len(self.running) < cfg.max_num_seqs and not preempted_now:
            seq = self.waiting[0]
            if seq._computed == 0:
                self._apply_prefix_cache(seq)
            n = min(seq._context - seq._computed, budget)
            need = self._blocks_for(seq._computed + n) - seq._blocks
            if need > self.free_blocks:
                break
            self.waiting.popleft()
            self._allocate(seq, need)
            self.running.append(seq)
            sched.append((seq, n))
            budget -= n
            admitted += 1
        if not sched:
            raise RuntimeError("replica: nothing schedulable although work is queued (a request larger than KV?)")
        all_decode = all(n == 1 and s._context - s._computed == 1 and s.first_token_s is not None for s, n in sched)
        # a run of decode iterations only where the queue could not start in any of them (after a preemption it
        # may in the next one)
        if all_decode and admitted == 0 and not partial_left and not preempted_now and len(sched) == len(self.running):
            return self._decode_run(now, horizon, [s for s, _ in sched])
        return self._one_iteration(now, sched)

    # -- internals ---------------------------------------------------------------------------
    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.config.block_size)

    def _allocate(self, seq: Request, blocks: int) -> None:
        if blocks > 0:
            self.free_blocks -= blocks
            seq._blocks += blocks

    def _release(self, seq: Request) -> None:
        self.free_blocks += seq._blocks
        seq._blocks = 0

    def _preempt(self, seq: Request) -> None:
        """Recompute preemption: drop its KV, requeue at the head with everything generated so far as prompt."""
        self.running.remove(seq)
        self._release(seq)
        seq._computed = 0
        seq.preemptions += 1
        self.counters.preemptions += 1
        self.waiting.appendleft(seq)

    def _apply_prefix_cache(self, seq: Request) -> None:
        cfg = self.config
        if not (cfg.enable_prefix_caching and seq.prefix_hashes):
            return
        hit = 0
        for h in seq.prefix_hashes:
            if h not in self._prefix_lru:
                break
            self._prefix_lru.move_to_end(h)
            hit += 1
        cached = min(hit * cfg.prefix_block_tokens, seq._context - 1)
        self.counters.prefix_queried_tokens += seq._context
        self.counters.prefix_hit_tokens += cached
        seq._computed = cached
        if not seq._cached_once:
            seq.cached_tokens = cached
            seq._cached_once = True

    def _remember_prefix(self, seq: Request) -> None:
        if not (self.config.enable_prefix_caching and seq.prefix_hashes and self._prefix_capacity > 0):
            return
        lru = self._prefix_lru
        for h in seq.prefix_hashes:
            lru[h] = None
            lru.move_to_end(h)
        while len(lru) > self._prefix_capacity:
            lru.popitem(last=False)

    def _one_iteration(self, now: float, sched: list[tuple[Request, int]]) -> StepResult:
        new = kv = pairs = 0.0
        for seq, n in sched:
            p = seq._computed
            new += n
            kv += p
            pairs += n * p + n * (n + 1) / 2
        dur = coefficient_step_time(self._coef, new, kv, pairs) / self.speed
        end = now + dur
        finished: list[Request] = []
        c = self.counters
        for seq, n in sched:
            if seq._context - seq._computed > 1 or seq.first_token_s is None:
                c.prompt_tokens += n
            seq._computed += n
            if seq._computed < seq._context:
                continue  # prefill chunk, more to come
            if seq.first_token_s is None:
                seq.first_token_s = end + self.perf.request_latency_s
                self._remember_prefix(seq)
            else:
                seq.max_itl_s = max(seq.max_itl_s, end - seq._last_token_s)
            seq._last_token_s = end
            seq._generated += 1
            seq._context += 1
            c.generation_tokens += 1
            if seq._generated >= seq.target_output:
                self._finish(seq, end, finished)
        c.iterations += 1
        c.busy_s += dur
        return StepResult(dur, finished, 1)

    def _decode_run(self, now: float, horizon: float, seqs: list[Request]) -> StepResult:
        """k identical decode iterations: each sequence gains one token per iteration.

        The iterations are timed one by one in scalars, up to the first that ends past `horizon` (at least
        one): a run is cut at the next arrival or observation after a few iterations, where timing all k
        as arrays (a numpy call per step of the formula) cost more than the rest of the detailed mode
        together. Each duration is perf.coefficient_step_time, the model's own form term for term, so each
        duration and end is the same float the arrays gave."""
        k = min(s.target_output - s._generated for s in seqs)
        k = self._fit_blocks(seqs, k)
        n = len(seqs)
        s0 = float(sum(s._computed for s in seqs))
        coef = self._coef
        new = float(n)
        speed = self.speed
        total = 0.0
        first_end = end = now
        max_gap = 0.0
        done = 0
        while done < k:
            kv = s0 + n * float(done)
            dur = coefficient_step_time(coef, new, kv, kv + n) / speed
            total += dur
            at = now + total
            if done > 0 and at > horizon:
                break  # the run ends with the last iteration by the horizon
            if done == 0:
                first_end = at
            elif dur > max_gap:
                max_gap = dur
            end = at
            done += 1
        k = done
        finished: list[Request] = []
        for seq in seqs:
            need = self._blocks_for(seq._computed + k) - seq._blocks
            self._allocate(seq, need)
            seq.max_itl_s = max(seq.max_itl_s, first_end - seq._last_token_s, max_gap)
            seq._last_token_s = end
            seq._computed += k
            seq._context += k
            seq._generated += k
            if seq._generated >= seq.target_output:
                self._finish(seq, end, finished)
        c = self.counters
        c.generation_tokens += n * k
        c.iterations += k
        dur = end - now
        c.busy_s += dur
        return StepResult(dur, finished, k)

    def decode_run_at(self, start: float, seqs: Sequence[Request], k: int, t: float) -> tuple[int, int]:
        """Of a decode run of `k` iterations that began at `start` (`seqs`, its requests, each `k` tokens on
        since): the iterations ended by `t` and the KV blocks its requests hold then, the state a real engine
        publishes at each iteration's end. Times as `_decode_run`'s, iteration by iteration."""
        n = len(seqs)
        s0 = float(sum(s._computed - k for s in seqs))
        coef, speed, new = self._coef, self.speed, float(n)
        at = start
        done = 0
        while done < k:
            kv = s0 + n * float(done)
            at += coefficient_step_time(coef, new, kv, kv + n) / speed
            if at > t:
                break
            done += 1
        return done, sum(self._blocks_for(s._computed - k + done) for s in seqs)

    def _fit_blocks(self, seqs: list[Request], k: int) -> int:
        """Largest j <= k such that j decode iterations need no more blocks than are free (at least 1)."""

        def need(j: int) -> int:
            return sum(self._blocks_for(s._computed + j) - s._blocks for s in seqs)

        if need(k) <= self.free_blocks:
            return k
        lo, hi = 1, k  # need(1) fits: the scheduler just allocated for one iteration
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if need(mid) <= self.free_blocks:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _finish(self, seq: Request, end: float, finished: list[Request]) -> None:
        seq.finish_s = end + self.perf.request_latency_s
        self.running.remove(seq)
        self.finished_blocks += seq._blocks
        self._release(seq)
        self.counters.requests_finished += 1
        finished.append(seq)
