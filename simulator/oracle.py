"""The oracle: it knows the future, so it runs the fewest replicas that meet the SLO, each started one cold
start ahead of when it is needed. Every policy's GPU-hours are compared to it.

How the schedule is found (a lower bound has to be checked, not assumed):
1. a first count per time bucket from the work its arrivals bring (prefill seconds + decode slot-seconds
   at the largest batch whose iteration fits the ITL target), with no headroom, so it starts low;
2. the schedule is run through the simulator. Only requests that can meet the SLO at all count (an idle
   replica's prefill alone within the TTFT target, a lone decode step within the ITL target). Until
   their attainment reaches the target (or `max_rounds`), every bucket below the target gets more
   replicas (one, or an eighth of its count) and it runs again;
3. pods: replica slot k is needed in the buckets whose count exceeds k; a gap shorter than a cold start
   is bridged (restarting would hold the GPU as long); each pod's own cold start (drawn, known to the
   oracle) is how early it is created. Removed pods drain like any other.
The returned result is the final schedule's own simulation: the test suite checks it meets the SLO.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from keda_llm.simulator.coldstart import ColdStartModel
from keda_llm.simulator.controllers import PodPlan, ScheduleController
from keda_llm.simulator.engine import SimResult
from keda_llm.simulator.perf import PerfModel
from keda_llm.simulator.replica import ReplicaConfig
from keda_llm.simulator.report import Slo, met_mask
from keda_llm.simulator.traces import Trace

RunFn = Callable[[ScheduleController], SimResult]


@dataclass(frozen=True)
class OraclePlan:
    counts: np.ndarray  # ready replicas needed per bucket
    bucket_s: float
    pods: list[PodPlan]
    result: SimResult
    rounds: int
    met_target: bool
    feasible: np.ndarray  # per request: can meet the SLO at all (see step 2)


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


def pods_from_counts(counts: np.ndarray, bucket_s: float, cold_start: ColdStartModel,
                     rng: np.random.Generator) -> list[PodPlan]:
    """Pod lifetimes covering `counts` (see the module docstring, step 3)."""
    pods: list[PodPlan] = []
    gap_limit = cold_start.median_sum_s
    top = int(counts.max()) if len(counts) else 0
    for k in range(top):
        need = counts > k
        runs: list[list[float]] = []
        i = 0
        while i < len(need):
            if not need[i]:
                i += 1
                continue
            j = i
            while j < len(need) and need[j]:
                j += 1
            s, e = i * bucket_s, j * bucket_s
            if runs and s - runs[-1][1] < gap_limit:
                runs[-1][1] = e
            else:
                runs.append([s, e])
            i = j
        for s, e in runs:
            cold = 0.0 if s <= 0 else float(cold_start.sample(rng, 1)[0])
            pods.append(PodPlan(ready_at=s, remove_at=e, cold_start_s=cold))
    return pods


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


def plan_oracle(trace: Trace, run: RunFn, perf: PerfModel, config: ReplicaConfig, cold_start: ColdStartModel,
                slo: Slo, *, bucket_s: float = 60.0, target: float = 0.99, max_rounds: int = 12,
                seed: int = 0, max_replicas: int = 1000) -> OraclePlan:
    """Find the oracle's schedule for `trace` (see the module docstring); `run` simulates a schedule."""
    if not 0 < target <= 1:
        raise ValueError(f"oracle: target attainment must be in (0, 1], got {target}")
    n_buckets = max(1, math.ceil((trace.duration_s + 1e-9) / bucket_s))
    counts = np.minimum(first_counts(trace, perf, config, slo, bucket_s, n_buckets), max_replicas)
    arrivals = np.bincount(np.minimum((trace.arrival_s // bucket_s).astype(np.int64), n_buckets - 1),
                           minlength=n_buckets)
    counts[(arrivals > 0) & (counts < 1)] = 1
    ctx = (trace.prompt_tokens + np.maximum(1, trace.output_tokens)).astype(np.float64)
    alone_itl = perf.step_times(np.ones(len(ctx)), ctx, ctx + 1)  # the last decode step of a lone request
    feasible = (idle_ttft(perf, config, trace.prompt_tokens) <= slo.ttft_s) & (alone_itl <= slo.itl_s)
    result: SimResult | None = None
    pods: list[PodPlan] = []
    rounds = 0
    ok = False
    while rounds < max_rounds:
        rounds += 1
        pods = pods_from_counts(counts, bucket_s, cold_start, np.random.default_rng(seed + 7919))
        result = run(ScheduleController("oracle", pods))
        met, counted = bucket_attainment(result, slo, feasible, bucket_s, n_buckets)
        if met.sum() >= target * counted.sum() - 1e-9:
            ok = True
            break
        short = (counted > 0) & (met < target * counted - 1e-9)
        counts = np.minimum(counts + short.astype(np.int64) * np.maximum(1, counts // 8), max_replicas)
    assert result is not None
    return OraclePlan(counts, bucket_s, pods, result, rounds, ok, feasible)
