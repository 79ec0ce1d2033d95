"""The oracle: it knows the future, so it runs the fewest replicas that meet the SLO, each started one cold
start ahead of when it is needed. Every policy's GPU-hours are compared to it, and to a lower bound that no
schedule can beat.

Its target: `target` (99%) of the requests that can meet the SLO at all (an idle replica's prefill alone
within the TTFT target, a lone decode step within the ITL target). When fewer than `target` of all requests
can, the target over all requests is thereby lowered to `target` x that share, and the plan says so.

How the schedule is found (per time bucket, a replica count; every candidate is simulated, never estimated):
1. start: the work each bucket's arrivals bring (prefill seconds + decode slot-seconds at the largest batch
   whose iteration fits the ITL target), with no headroom; at least one replica where requests arrive and
   at least the lower bound's KV floor (below). Or, given `start`, an earlier schedule's counts
   (`counts_from_pods`): the trim below freezes buckets after a failed trial, so where a plan starts decides
   where it stops, and a plan continued from the cheapest schedule known to meet the target can only end
   at or below it;
2. raise: run the schedule; every bucket whose counted requests fall short of the target gets more
   replicas, and it runs again, until the target is met. A bucket's k-th raise adds ceil(count x 2^k / 8)
   (at least one): an eighth, a quarter, a half, then doubling, so a bucket reaches `max_replicas` within
   a few raises. The raise stops short only when every short bucket is at `max_replicas` (the target is
   then infeasible under that cap: the plan reports the best attainment it reached) or when `max_runs`
   simulations are spent (reported as such);
3. trim: from the schedule that met the target, one trial lowers every bucket that may still go lower (by
   a quarter of its count, then an eighth, then one replica); a trial is kept only if its own simulation
   still meets the target. After a failed trial, the buckets that fell short in it (else the bucket before
   one that did, else all of them) keep their count at this step size. Never below step 1's floor;
4. pods: replica slot k is needed in the buckets whose count exceeds k; a gap shorter than a cold start
   is bridged (restarting would hold the GPU as long); each pod's own cold start (drawn, known to the
   oracle) is how early it is created. Removed pods drain like any other.
The returned result is the kept schedule's own simulation: the test suite checks it meets the target.

The lower bound (`lower_bound`): GPU-hours no schedule can go below while serving `target` of the requests
that can meet the SLO within it, ignoring cold starts. Each counted request brings work: its prompt tokens
not in a perfect, unbounded prefix cache plus its decode tokens, at the replica's peak per-token time (the
best of `step_times(n, 0, 0) / n` over iteration sizes up to the token budget: no KV read, no attention).
The work must be done between its arrival and its SLO deadline (arrival + TTFT target + (output - 1) x ITL
target). It holds its prompt's KV at least from the latest first token the SLO allows to the earliest
finish its decode steps allow, so at every second the replicas up are at least that KV over one replica's
KV capacity (rounded up). Per one-second slot: the KV floor's capacity works off the released work earliest
deadline first, and any work still due at its deadline adds exactly the capacity it lacks (fractional
replicas, packed without overlap). The `1 - target` share of counted requests with the most work is left
out, as a schedule meeting the target may miss them. Not counted: preemption (a preempted request frees its
KV), cold starts, idle replicas, iterations' KV reads and attention.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from keda_llm.simulator.cluster.engine import SimResult
from keda_llm.simulator.control.controllers import PodPlan, ScheduleController
from keda_llm.simulator.hardware.coldstart import ColdStartModel
from keda_llm.simulator.hardware.perf import PerfModel
from keda_llm.simulator.hardware.replica import ReplicaConfig
from keda_llm.simulator.report.summary import Slo, met_mask
from keda_llm.simulator.workload.traces import Trace

RunFn = Callable[[ScheduleController], SimResult]
#: simulations the oracle may run (raise and trim together) unless told otherwise
DEFAULT_MAX_RUNS = 48
#: added to the backtest's seed for the table of drawn cold starts a schedule's pods take theirs from
#: (`cold_start_table`): the oracle's, and any schedule compared with it at its cost (report/reactive.py)
COLD_TABLE_SEED = 7919
#: the trim's step sizes, as fractions of a bucket's count (0: one replica)
TRIM_STEPS = (0.25, 0.125, 0.0)


@dataclass(frozen=True)
class LowerBound:
    """GPU-hours no schedule can beat (see the module docstring); per bucket for plots and floors."""

    gpu_hours: float
    replica_seconds: float
    work_replica_s: float  # the counted requests' work at peak throughput
    kv_floor_replica_s: float  # the integral of the KV floor (replicas the KV held needs)
    per_bucket: np.ndarray  # replica-seconds of the bound per bucket / bucket length: mean replicas
    kv_floor: np.ndarray  # per bucket: the most replicas the KV floor needs at any second in it
    seconds_per_token: float  # the peak per-token time
    counted: int  # requests the bound serves
    bucket_s: float


@dataclass(frozen=True)
class OraclePlan:
    counts: np.ndarray  # ready replicas needed per bucket
    bucket_s: float
    pods: list[PodPlan]
    result: SimResult
    rounds: int  # simulations run (raise + trim)
    met_target: bool  # the kept schedule meets `target` of the feasible requests
    feasible: np.ndarray  # per request: can meet the SLO at all (see the module docstring)
    target: float = 0.99  # share of the feasible requests
    attainment: float = math.nan  # achieved, over the feasible requests
    reason: str = ""  # why the target was lowered (few feasible requests) or not met; "" when neither
    raise_runs: int = 0
    trim_runs: int = 0
    trim_complete: bool = True  # False: the budget ended the trim early (GPU-hours may not be minimal)
    bound: LowerBound | None = None

    @property
    def feasible_share(self) -> float:
        return float(self.feasible.mean()) if len(self.feasible) else 1.0

    @property
    def target_over_all(self) -> float:
        """The target as a share of all requests: `target` x the share that can meet the SLO at all."""
        return self.target * self.feasible_share

    def status(self) -> str:
        """One line for tables: met or why not, and what the target is."""
        share = self.feasible_share
        head = (f"target {'met' if self.met_target else 'NOT met'}: {100 * self.attainment:.1f}% of the "
                f"requests that can meet the SLO at all did (target {100 * self.target:g}%)")
        if share < self.target:
            head += (f"; only {100 * share:.1f}% of requests can meet it at all, so the target over all requests "
                     f"is {100 * self.target_over_all:.1f}% ({100 * self.target:g}% of those)")
        else:
            head += f"; {100 * share:.1f}% of requests can meet it at all"
        if not self.met_target and self.reason:
            head += f"; {self.reason}"
        trim = "" if self.trim_complete else ", trim cut short by the run budget"
        return head + f". {self.rounds} simulation(s): {self.raise_runs} raising, {self.trim_runs} trimming{trim}."


def idle_ttft(perf: PerfModel, config: ReplicaConfig, prompt: np.ndarray) -> np.ndarray:
    """TTFT of each prompt alone on an idle replica: its prefill in chunks of the token budget, each chunk
    reading the KV of the ones before (the floor no schedule can beat)."""
    budget = float(config.max_num_batched_tokens)
    p = prompt.astype(np.float64)
    total = np.zeros(len(p))
    chunks = int(np.ceil(p.max() / budget)) if len(p) else 0
    for j in range(chunks):
        off = j * budget
        n = np.clip(p - off, 0.0, budget)
        live = n > 0
        t = perf.step_times(n[live], np.full(int(live.sum()), off), n[live] * off + n[live] * (n[live] + 1) / 2)
        total[live] += t
    return np.asarray(total + perf.request_latency_s, dtype=np.float64)


def sustainable_batch(perf: PerfModel, config: ReplicaConfig, mean_context: float, itl_s: float) -> int:
    """The largest decode batch whose iteration stays within the ITL target and whose KV fits."""
    b = np.arange(1, config.max_num_seqs + 1, dtype=np.float64)
    kv = b * mean_context
    t = perf.step_times(b, kv, kv + b)
    ok = (t <= itl_s) & (kv <= config.kv_capacity_tokens)
    return int(b[ok].max()) if ok.any() else 1


def first_counts(trace: Trace, perf: PerfModel, config: ReplicaConfig, slo: Slo, bucket_s: float,
                 n_buckets: int) -> np.ndarray:
    """Replica-seconds of work per bucket / bucket length, rounded up: the starting point (no headroom)."""
    prompt = trace.prompt_tokens.astype(np.float64)
    out = np.maximum(1, trace.output_tokens).astype(np.float64)
    mean_ctx = float(np.mean(prompt + out / 2)) if len(trace) else 1.0
    batch = sustainable_batch(perf, config, mean_ctx, slo.itl_s)
    kv = batch * mean_ctx
    step = float(perf.step_times(np.array([float(batch)]), np.array([kv]), np.array([kv + batch]))[0])
    budget = float(config.max_num_batched_tokens)
    per_token_prefill = float(perf.step_times(np.array([budget]), np.array([0.0]),
                                              np.array([budget * (budget + 1) / 2]))[0]) / budget
    work = prompt * per_token_prefill + out * step / batch
    b = np.minimum((trace.arrival_s // bucket_s).astype(np.int64), n_buckets - 1)
    per_bucket = np.bincount(b, weights=work, minlength=n_buckets)
    return np.asarray(np.ceil(per_bucket / bucket_s - 1e-9), dtype=np.int64)


def _slot_runs(need: np.ndarray, bucket_s: float, gap_limit: float) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) bucket indices (end exclusive) of one replica slot's pods: the runs of `need`, with gaps
    shorter than `gap_limit` seconds bridged."""
    d = np.diff(np.concatenate([[0], need.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
    if len(starts) > 1:
        keep = np.concatenate([[True], (starts[1:] - ends[:-1]) * bucket_s >= gap_limit])
        last = np.concatenate([np.flatnonzero(keep)[1:] - 1, [len(starts) - 1]])
        starts, ends = starts[keep], ends[last]
    return starts, ends


def cold_start_table(cold_start: ColdStartModel, seed: int, slots: int, n_buckets: int) -> np.ndarray:
    """A drawn cold start per (replica slot, bucket a pod of that slot becomes ready in): a schedule's pods
    take theirs from it, so two schedules differ in cost only where their pods differ."""
    rng = np.random.default_rng(seed)
    return np.asarray(cold_start.sample(rng, slots * n_buckets).reshape(slots, n_buckets), dtype=np.float64)


def pods_from_counts(counts: np.ndarray, bucket_s: float, cold_start: ColdStartModel,
                     rng: np.random.Generator, cold_table: np.ndarray | None = None) -> list[PodPlan]:
    """Pod lifetimes covering `counts` (see the module docstring, step 4); cold starts from `cold_table`
    when given, else drawn from `rng` in order."""
    pods: list[PodPlan] = []
    top = int(counts.max()) if len(counts) else 0
    for k in range(top):
        starts, ends = _slot_runs(counts > k, bucket_s, cold_start.median_sum_s)
        for i, j in zip(starts.tolist(), ends.tolist(), strict=True):
            if i == 0:
                cold = 0.0
            elif cold_table is not None:
                cold = float(cold_table[k, i])
            else:
                cold = float(cold_start.sample(rng, 1)[0])
            pods.append(PodPlan(ready_at=i * bucket_s, remove_at=j * bucket_s, cold_start_s=cold))
    return pods


def planned_replica_seconds(counts: np.ndarray, bucket_s: float, cold_start: ColdStartModel,
                            cold_table: np.ndarray) -> float:
    """Replica-seconds the pods of `counts` hold from creation to removal (drains aside), without simulating."""
    total = 0.0
    top = int(counts.max()) if len(counts) else 0
    for k in range(top):
        starts, ends = _slot_runs(counts > k, bucket_s, cold_start.median_sum_s)
        total += float((ends - starts).sum()) * bucket_s + float(cold_table[k, starts[starts > 0]].sum())
    return total


def bucket_attainment(result: SimResult, slo: Slo, feasible: np.ndarray, bucket_s: float,
                      n_buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """(met, counted) per bucket of arrival, over the feasible requests (result order = trace order)."""
    tab = result.request_table()
    b = np.minimum((tab.arrival_s // bucket_s).astype(np.int64), n_buckets - 1)
    ok = met_mask(tab.ttft_s, tab.tpot_s, slo)
    f = feasible[: len(b)] if len(feasible) >= len(b) else np.ones(len(b), dtype=bool)
    met = np.bincount(b, weights=(ok & f) * tab.weight, minlength=n_buckets)
    counted = np.bincount(b, weights=f * tab.weight, minlength=n_buckets)
    return met, counted


def feasible_requests(trace: Trace, perf: PerfModel, config: ReplicaConfig, slo: Slo) -> np.ndarray:
    """Per request: can it meet the SLO at all (prefill alone on an idle replica within the TTFT target, its
    last decode step alone within the ITL target)."""
    ctx = (trace.prompt_tokens + np.maximum(1, trace.output_tokens)).astype(np.float64)
    alone_itl = perf.step_times(np.ones(len(ctx)), ctx, ctx + 1)  # the last decode step of a lone request
    out: np.ndarray = (idle_ttft(perf, config, trace.prompt_tokens) <= slo.ttft_s) & (alone_itl <= slo.itl_s)
    return out


def infeasible_reason(trace: Trace, perf: PerfModel, config: ReplicaConfig, slo: Slo) -> str:
    """Why requests cannot meet the SLO at all, counted by cause ("" when all can)."""
    if not len(trace):
        return ""
    ctx = (trace.prompt_tokens + np.maximum(1, trace.output_tokens)).astype(np.float64)
    slow_prefill = int((idle_ttft(perf, config, trace.prompt_tokens) > slo.ttft_s).sum())
    slow_decode = int((perf.step_times(np.ones(len(ctx)), ctx, ctx + 1) > slo.itl_s).sum())
    parts = []
    if slow_prefill:
        parts.append(f"{slow_prefill} prompts whose prefill alone on an idle replica exceeds the TTFT target")
    if slow_decode:
        parts.append(f"{slow_decode} requests whose lone decode step exceeds the ITL target")
    return "; ".join(parts)


def peak_seconds_per_token(perf: PerfModel, config: ReplicaConfig) -> float:
    """The least time per new token any iteration can take: min over n <= the token budget of
    step_times(n, no KV, no attention) / n."""
    n = np.arange(1, config.max_num_batched_tokens + 1, dtype=np.float64)
    zero = np.zeros(len(n))
    return float(np.min(perf.step_times(n, zero, zero) / n))


def uncached_prompt_tokens(trace: Trace, config: ReplicaConfig) -> np.ndarray:
    """Prompt tokens a perfect, unbounded prefix cache shared by every replica would still compute: the
    leading blocks whose hash an earlier request already had are skipped (the last token always runs)."""
    prompt = trace.prompt_tokens.astype(np.int64)
    if not config.enable_prefix_caching or trace.hash_offsets is None or trace.hash_values is None:
        return prompt
    seen: set[int] = set()
    offs, vals = trace.hash_offsets, trace.hash_values
    hits = np.zeros(len(prompt), dtype=np.int64)
    for i in range(len(prompt)):
        hs = vals[offs[i]:offs[i + 1]].tolist()
        k = 0
        while k < len(hs) and hs[k] in seen:
            k += 1
        hits[i] = k
        seen.update(hs)
    cached = np.minimum(hits * config.prefix_block_tokens, np.maximum(prompt - 1, 0))
    out: np.ndarray = prompt - cached
    return out


def lower_bound(trace: Trace, perf: PerfModel, config: ReplicaConfig, slo: Slo, *, target: float = 0.99,
                feasible: np.ndarray | None = None, gpus_per_replica: int = 1, bucket_s: float = 60.0,
                slot_s: float = 1.0) -> LowerBound:
    """The GPU-hours no schedule can go below (see the module docstring)."""
    n_buckets = max(1, math.ceil((trace.duration_s + 1e-9) / bucket_s))
    if feasible is None:
        feasible = feasible_requests(trace, perf, config, slo)
    per_tok = peak_seconds_per_token(perf, config)
    out_tok = np.maximum(0, trace.output_tokens.astype(np.int64) - 1)  # decode steps after the first token
    new_prefill = uncached_prompt_tokens(trace, config)
    work = (new_prefill + out_tok).astype(np.float64) * per_tok
    idx = np.flatnonzero(feasible)
    drop = math.floor((1.0 - target) * len(idx) + 1e-9)
    if drop > 0:
        idx = np.sort(idx[np.argsort(-work[idx], kind="stable")[drop:]])
    a = trace.arrival_s[idx]
    w = work[idx]
    deadline = a + slo.ttft_s + out_tok[idx] * slo.itl_s
    # KV held for sure: from the latest engine first token the TTFT target allows to the earliest finish
    prompt = trace.prompt_tokens[idx].astype(np.float64)
    lone_step = perf.step_times(np.ones(len(idx)), prompt, prompt + 1)
    hold_from = a + max(0.0, slo.ttft_s - perf.request_latency_s)
    hold_to = a + new_prefill[idx] * per_tok + out_tok[idx] * lone_step
    end = float(max(deadline.max() if len(idx) else 0.0, hold_to.max() if len(idx) else 0.0, trace.duration_s))
    n_slots = math.ceil(end / slot_s) + 2
    first_full = np.ceil(hold_from / slot_s).astype(np.int64)
    last_full = np.floor(hold_to / slot_s).astype(np.int64)  # exclusive: slots [first_full, last_full)
    held = last_full > first_full
    kv = np.zeros(n_slots + 1)
    np.add.at(kv, first_full[held], prompt[held])
    np.add.at(kv, last_full[held], -prompt[held])
    kv_tokens = np.cumsum(kv)[:n_slots]
    floor = np.ceil(np.maximum(kv_tokens, 0.0) / config.kv_capacity_tokens - 1e-9)
    # earliest deadline first over slots: the floor's capacity works; what is due and undone adds capacity
    rel = np.floor(a / slot_s).astype(np.int64)
    due = np.maximum(rel, np.floor(deadline / slot_s).astype(np.int64))
    extra = np.zeros(n_slots)
    order = np.lexsort((due, rel))
    rel_s, due_s, w_s = rel[order], due[order], w[order]
    events = np.unique(np.concatenate([rel, due, np.flatnonzero(floor > 0)]))
    pending: dict[int, float] = {}
    heap: list[int] = []
    j = 0
    for s in events.tolist():
        while j < len(rel_s) and rel_s[j] == s:
            d = int(due_s[j])
            if d not in pending:
                pending[d] = 0.0
                heapq.heappush(heap, d)
            pending[d] += float(w_s[j])
            j += 1
        cap = float(floor[s]) * slot_s
        while heap and cap > 0:
            d = heap[0]
            take = min(cap, pending[d])
            pending[d] -= take
            cap -= take
            if pending[d] <= 1e-12:
                heapq.heappop(heap)
                del pending[d]
        if heap and heap[0] == s:
            extra[s] += pending.pop(s)
            heapq.heappop(heap)
    per_slot = floor * slot_s + extra
    slot_bucket = np.minimum((np.arange(n_slots) * slot_s // bucket_s).astype(np.int64), n_buckets - 1)
    per_bucket = np.bincount(slot_bucket, weights=per_slot, minlength=n_buckets) / bucket_s
    kv_floor = np.zeros(n_buckets)
    np.maximum.at(kv_floor, slot_bucket, floor)
    total = float(per_slot.sum())
    return LowerBound(gpu_hours=total * gpus_per_replica / 3600.0, replica_seconds=total,
                      work_replica_s=float(w.sum()), kv_floor_replica_s=float(floor.sum() * slot_s),
                      per_bucket=per_bucket, kv_floor=kv_floor.astype(np.int64), seconds_per_token=per_tok,
                      counted=len(idx), bucket_s=bucket_s)


def counts_from_pods(pods: Sequence[PodPlan], bucket_s: float, n_buckets: int) -> np.ndarray:
    """Replicas ready per bucket under `pods`, a pod counted from the bucket it becomes ready in to the one it is
    removed at: for a schedule of `pods_from_counts`, counts whose pods are that schedule again (a bridged gap
    counts as held), so a stored schedule can be the `start` of a new plan."""
    edges = np.zeros(n_buckets + 1, dtype=np.int64)
    for p in pods:
        i = min(n_buckets, max(0, math.floor(p.ready_at / bucket_s + 1e-9)))
        end = p.remove_at / bucket_s
        j = n_buckets if not math.isfinite(end) else min(n_buckets, max(i, math.ceil(end - 1e-9)))
        edges[i] += 1
        edges[j] -= 1
    return np.cumsum(edges)[:n_buckets]


def meets_target(met: np.ndarray, counted: np.ndarray, target: float) -> bool:
    """Whether (met, counted) of `bucket_attainment` meet `target` over all buckets together: the one test of a
    schedule, for the plan's own runs and for any schedule weighed against it."""
    return bool(met.sum() >= target * counted.sum() - 1e-9)


def attained_share(met: np.ndarray, counted: np.ndarray) -> float:
    """The share of the counted (feasible) requests that met the SLO; 1 where none is counted."""
    return float(met.sum() / counted.sum()) if counted.sum() > 0 else 1.0


def _short(met: np.ndarray, counted: np.ndarray, target: float) -> np.ndarray:
    out: np.ndarray = (counted > 0) & (met < target * counted - 1e-9)
    return out


def plan_oracle(trace: Trace, run: RunFn, perf: PerfModel, config: ReplicaConfig, cold_start: ColdStartModel,
                slo: Slo, *, bucket_s: float = 60.0, target: float = 0.99, max_runs: int = DEFAULT_MAX_RUNS,
                seed: int = 0, max_replicas: int = 1000, gpus_per_replica: int = 1,
                start: Sequence[PodPlan] | None = None, trim_steps: Sequence[float] = TRIM_STEPS) -> OraclePlan:
    """Find the oracle's schedule for `trace` (see the module docstring); `run` simulates a schedule. `start`: an
    earlier schedule to begin from instead of step 1's work count (its counts, still raised to the floor);
    `trim_steps`: the trim's step sizes (a plan continued from a trimmed schedule need not spend runs on the
    coarse ones)."""
    if not 0 < target <= 1:
        raise ValueError(f"oracle: target attainment must be in (0, 1], got {target}")
    if max_runs < 1:
        raise ValueError(f"oracle: max_runs must be >= 1, got {max_runs}")
    if not trim_steps or any(not 0 <= f < 1 for f in trim_steps):
        raise ValueError(f"oracle: trim steps must be fractions in [0, 1), got {list(trim_steps)}")
    n_buckets = max(1, math.ceil((trace.duration_s + 1e-9) / bucket_s))
    feasible = feasible_requests(trace, perf, config, slo)
    bound = lower_bound(trace, perf, config, slo, target=target, feasible=feasible,
                        gpus_per_replica=gpus_per_replica, bucket_s=bucket_s)
    arrivals = np.bincount(np.minimum((trace.arrival_s // bucket_s).astype(np.int64), n_buckets - 1),
                           minlength=n_buckets)
    floor = np.minimum(np.maximum((arrivals > 0).astype(np.int64), bound.kv_floor), max_replicas)
    begin = (first_counts(trace, perf, config, slo, bucket_s, n_buckets) if start is None
             else counts_from_pods(start, bucket_s, n_buckets))
    counts = np.minimum(np.maximum(begin, floor), max_replicas)
    colds = cold_start_table(cold_start, seed + COLD_TABLE_SEED, max_replicas, n_buckets)

    def simulate(c: np.ndarray) -> tuple[list[PodPlan], SimResult, np.ndarray, np.ndarray]:
        pods = pods_from_counts(c, bucket_s, cold_start, np.random.default_rng(seed + COLD_TABLE_SEED), colds)
        result = run(ScheduleController("oracle", pods))
        met, counted = bucket_attainment(result, slo, feasible, bucket_s, n_buckets)
        return pods, result, met, counted

    def meets(met: np.ndarray, counted: np.ndarray) -> bool:
        return meets_target(met, counted, target)

    share = attained_share

    # 2. raise until the target is met
    raises = np.zeros(n_buckets, dtype=np.int64)
    runs = 0
    best: tuple[float, np.ndarray, list[PodPlan], SimResult] | None = None
    reason = ""
    ok = False
    while True:
        pods, result, met, counted = simulate(counts)
        runs += 1
        if best is None or share(met, counted) > best[0] or meets(met, counted):
            best = (share(met, counted), counts.copy(), pods, result)
        if meets(met, counted):
            ok = True
            break
        short = _short(met, counted, target)
        room = short & (counts < max_replicas)
        if not room.any():
            reason = (f"every bucket still short of it has {max_replicas} replicas (max_replicas), so the target "
                      f"is infeasible under that cap")
            break
        if runs >= max_runs:
            reason = f"the budget of {max_runs} simulations ended the search"
            break
        step = np.maximum(1, np.ceil(counts * np.power(2.0, raises) / 8.0)).astype(np.int64)
        counts = np.where(room, np.minimum(counts + step, max_replicas), counts)
        raises += room
    raise_runs = runs
    assert best is not None
    attained, counts, pods, result = best
    # 3. trim while the target still holds, where a lower count frees GPU time (a bucket inside a bridged gap
    # frees none: lowering it would only spend the target's slack)
    def planned(c: np.ndarray) -> float:
        return planned_replica_seconds(c, bucket_s, cold_start, colds)

    def saving_only(trial: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, float]:
        cost = planned(trial)
        for b in np.flatnonzero(trial < c).tolist():
            back = trial.copy()
            back[b] = c[b]
            cost_back = planned(back)
            if cost_back <= cost + 1e-6:
                trial, cost = back, cost_back
        return trial, cost

    trim_complete = True
    if ok:
        for frac in trim_steps:
            frozen = np.zeros(n_buckets, dtype=bool)
            while True:
                cand = ~frozen & (counts > floor)
                if not cand.any():
                    break
                dec = np.maximum(1, np.floor(counts * frac)).astype(np.int64)
                trial, cost = saving_only(np.where(cand, np.maximum(counts - dec, floor), counts), counts)
                if cost >= planned(counts) - 1e-6:
                    break  # nothing left at this step size frees GPU time
                if runs >= max_runs:
                    trim_complete = False
                    break
                t_pods, t_result, met, counted = simulate(trial)
                runs += 1
                if meets(met, counted):
                    counts, pods, result, attained = trial, t_pods, t_result, share(met, counted)
                    continue
                lowered = trial < counts
                short = _short(met, counted, target)
                bad = lowered & short
                if not bad.any():
                    bad = lowered & np.concatenate([short[1:], [False]])
                if not bad.any():
                    bad = lowered
                frozen |= bad
            if not trim_complete:
                break
    return OraclePlan(counts, bucket_s, pods, result, runs, ok, feasible, target=target, attainment=attained,
                      reason=reason, raise_runs=raise_runs, trim_runs=runs - raise_runs,
                      trim_complete=trim_complete, bound=bound)
