"""The four demand policies: windowed load -> demand, per-replica capacity at target, desired replicas.

Each is a pure function of a `Load` (window means from history) and the config. Units differ by
policy (tokens, requests, replica-equivalents of KV); `desired = demand / per_replica` always.
Sum vs mean across replicas was settled in `history.aggregate`: the demand terms here are sums over
the fresh replicas, capacities per replica are means over the replicas that report them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from keda_llm.scaler.config import ScalerConfig
from keda_llm.scaler.history import Load, Snapshot

DEFAULT_COLD_START = 600.0  # seconds, when coldStart is unset and no engine reported its start-up


def cold_start_of(config: ScalerConfig, snap: Snapshot | None) -> float:
    """The replica start-up time: `coldStart`, else the slowest start the engines reported, else 10 min."""
    return config.cold_start or (snap.max_startup_seconds if snap is not None else None) or DEFAULT_COLD_START


class NoSignal(Exception):
    """The policy cannot compute from what the replicas report (e.g. no KV capacity); says what is missing."""


@dataclass(frozen=True)
class Demand:
    demand: float  # in the policy's unit, summed over replicas (plus upstream where it counts)
    per_replica: float  # what one replica should carry at the target, same unit
    desired: float  # replicas (not rounded): max over the policy's bounds
    parts: dict[str, float] = field(default_factory=dict)  # the terms, for the decision's details


def _v(x: float | None) -> float:
    return 0.0 if x is None else x


def batch_limit(load: Load, config: ScalerConfig) -> float | None:
    """Per-replica batch limit: the config's `maxRunning`, else the mean the replicas report."""
    if config.max_running is not None:
        return config.max_running
    if load.max_running is not None and load.max_running_replicas:
        return load.max_running / load.max_running_replicas  # mean over the replicas that report one
    return None


def mean_prompt_tokens(load: Load, snap: Snapshot | None) -> tuple[float | None, str]:
    """Mean prompt tokens per request, the size of a queued request, best source first.

    1. window rates: Σ prompt tokens/s / Σ requests finished/s (a ratio of sums, never a mean of ratios);
    2. the engines' lifetime counters (prompt tokens total / requests finished total);
    3. tokens held per running request now (KV used / running).
    """
    if load.prompt_rate is not None and load.finished_rate:
        return load.prompt_rate / load.finished_rate, "rates"
    if snap is not None and snap.lifetime_prompt_per_request is not None:
        return snap.lifetime_prompt_per_request, "lifetime"
    if load.kv_used is not None and load.running:
        return load.kv_used / load.running, "held_per_running"
    return None, "unknown"


def concurrency_bound(load: Load, config: ScalerConfig, target: float) -> float | None:
    """Replicas to keep running+waiting within `target` of the batch limit; None when no limit is known."""
    limit = batch_limit(load, config)
    if limit is None:
        return None
    return (_v(load.running) + _v(load.waiting) + _v(load.upstream)) / (limit * target)


def backlog_replicas(queued_tokens: float, config: ScalerConfig, snap: Snapshot | None) -> float | None:
    """Replicas that drain the queued prompts within one cold start at the measured prefill rate.

    A queue is work, not KV to hold: a replica asked for now serves after a cold start, by when the
    replicas that run have prefilled what they can. So the backlog asks for the replicas that would
    finish it within a cold start (queued prompt tokens / (a queueing replica's prompt tokens/s x cold
    start)), not for KV capacity to hold every queued prompt at once, which on long prompts asked for
    the maximum for as long as a queue stood (mooncake: 64 replicas for an hour behind one replica's
    queue). None when no replica queued lately (no measured rate): the queue then counts as KV demand."""
    rate = None if snap is None else snap.prefill_rate
    if rate is None or not rate > 0:
        return None
    return queued_tokens / (rate * cold_start_of(config, snap))


def tokens(load: Load, config: ScalerConfig, snap: Snapshot | None) -> Demand:
    """KV-token demand (tokens held) against KV tokens per replica x targetKVUtilization, plus the queued
    requests (x mean prompt tokens) as work to drain within a cold start (`backlog_replicas`), or as KV
    demand when no prefill rate is measured yet; at least the concurrency bound where the batch limit is
    known."""
    target = config.target_kv_utilization
    bound = concurrency_bound(load, config, target)
    if load.kv_capacity is None or not load.kv_replicas:
        if bound is None:
            raise NoSignal("policy tokens: no replica reports KV capacity (llm_kv_cache_capacity_tokens) or a batch "
                           "limit (llm_requests_max_running, or set maxRunning)")
        limit = batch_limit(load, config) or 1.0
        return Demand(_v(load.running) + _v(load.waiting) + _v(load.upstream), limit * target, bound,
                      {"concurrency_desired": bound})
    per_token = load.kv_capacity / load.kv_replicas  # mean KV capacity of a replica, tokens
    prompt, source = mean_prompt_tokens(load, snap)
    queued_requests = _v(load.waiting) + _v(load.upstream)
    held = _v(load.kv_used)
    queued = queued_requests * _v(prompt)
    per_replica = per_token * target
    parts = {"tokens_held": held, "tokens_queued": queued, "kv_capacity_per_replica": per_token,
             "mean_prompt_tokens": _v(prompt), "mean_prompt_known": 0.0 if prompt is None else 1.0}
    backlog = backlog_replicas(queued, config, snap)
    if backlog is None:
        desired_tokens = (held + queued) / per_replica
    else:
        desired_tokens = held / per_replica + backlog
        parts["backlog_desired"] = backlog
    parts["tokens_desired"] = desired_tokens
    parts["mean_prompt_source_" + source] = 1.0
    desired = desired_tokens
    if bound is not None:
        parts["concurrency_desired"] = bound
        desired = max(desired, bound)
    return Demand(held + queued, per_replica, desired, parts)


def concurrency(load: Load, config: ScalerConfig, snap: Snapshot | None) -> Demand:
    """Running + waiting (+ upstream) requests against targetConcurrency per replica."""
    target = config.target_concurrency
    if target is None:
        limit = batch_limit(load, config)
        if limit is None:
            raise NoSignal("policy concurrency: set targetConcurrency, or maxRunning, or use an engine that reports "
                           "llm_requests_max_running")
        target = limit * config.target_kv_utilization
    demand = _v(load.running) + _v(load.waiting) + _v(load.upstream)
    return Demand(demand, target, demand / target, {"target_concurrency": target})


def kv_cache(load: Load, config: ScalerConfig, snap: Snapshot | None) -> Demand:
    """KV usage against targetKVUtilization: desired = reporting replicas x usage / target.

    usage is the capacity-weighted mean (`aggregation: weighted`, the default), the plain mean, or the max.
    """
    if load.kv_capacity is None or not load.kv_replicas:
        raise NoSignal("policy kvCache: no replica reports KV usage and capacity")
    usage = {
        "weighted": _v(load.kv_used) / load.kv_capacity,
        "mean": _v(load.kv_ratio_mean),
        "max": _v(load.kv_ratio_max),
    }[config.aggregation]
    demand = load.kv_replicas * usage  # replicas' worth of KV in use
    return Demand(demand, config.target_kv_utilization, demand / config.target_kv_utilization,
                  {"kv_usage": usage, "kv_replicas": load.kv_replicas})


def queue(load: Load, config: ScalerConfig, snap: Snapshot | None) -> Demand:
    """Waiting (+ upstream) requests against targetQueueDepth per replica: the common `num_requests_waiting`
    rule, kept as a baseline. It asks for fewer replicas whenever queues drain, so it oscillates; prefer tokens."""
    demand = _v(load.waiting) + _v(load.upstream)
    return Demand(demand, config.target_queue_depth, demand / config.target_queue_depth, {})


POLICIES: dict[str, Callable[[Load, ScalerConfig, Snapshot | None], Demand]] = {
    "tokens": tokens,
    "concurrency": concurrency,
    "kvCache": kv_cache,
    "queue": queue,
}


def lora_bound(load: Load) -> float | None:
    """Replicas to hold the LoRA adapter demand, while adapters wait for a slot: Σ(adapters running + waiting
    and not running) over the replicas reporting adapter slots / their mean slots (vLLM `max_loras`). None
    when no adapter waits: the adapters then fit, and their number alone must not keep replicas up."""
    if not load.lora_waiting or not load.lora_slots or not load.lora_replicas or load.lora_demand is None:
        return None
    return load.lora_demand / (load.lora_slots / load.lora_replicas)


def demand(load: Load, config: ScalerConfig, snap: Snapshot | None = None) -> Demand:
    """The configured policy's demand for one window; at least the LoRA bound where adapters wait for slots."""
    d = POLICIES[config.policy](load, config, snap)
    lora = lora_bound(load)
    if lora is None:
        return d
    parts = {**d.parts, "lora_adapters_demand": load.lora_demand or 0.0,
             "lora_slots_per_replica": (load.lora_slots or 0.0) / (load.lora_replicas or 1.0), "lora_desired": lora}
    return Demand(d.demand, d.per_replica, max(d.desired, lora), parts)
