"""Anchors that act through KEDA and the HPA: the HPA on vLLM's KV-cache usage, and llm-d's WVA.

Both are scalers for the project's KEDA+HPA emulator (simulator.control via KedaController): they read
the simulator's observations at the anchor's own scrape interval (Prometheus scraping the pods) and answer
KEDA's GetMetrics; the HPA does the rest: `hpa-kv` with its defaults (15 s sync, 10% tolerance, scale-down
stabilization 300 s, scale-up x2 or +4 per 15 s: kubernetes pkg/apis/autoscaling/v2/defaults.go), the WVA
with the behavior its Helm chart writes on the HPA it installs (below).

`hpa-kv`, the HPA on KV-cache usage (GKE's guidance for vLLM: "Best practices for autoscaling LLM inference
workloads with GPUs on GKE", cloud.google.com/kubernetes-engine/docs/best-practices/machine-learning/
inference/autoscaling, which names the server's KV-cache usage / batch size as the signals to scale on; the
how-to page scrapes the server every 15 s with a PodMonitoring). It reads `vllm:gpu_cache_usage_perc` per
pod and targets an average per pod. The GKE page gives no number: the default 0.8 is the KV-cache threshold
at which the Gateway API Inference Extension's saturation detector (which GKE Inference Gateway runs) calls
a pod saturated (`kvCacheUtilThreshold` 0.8, the same default as llm-d's WVA). The target is the knob.

`llmd-wva` / `llmd-wva-tokens`, llm-d's Workload Variant Autoscaler (llm-d/llm-d-workload-variant-autoscaler
at b08b1c7). WVA computes a desired count and exports `wva_desired_replicas`; the HPA/KEDA acts on it
(README; docs/integrations/keda-integration.md), here as an AverageValue target of 1 per pod, with the
behavior of the chart's HPA (charts/workload-variant-autoscaler/values.yaml `hpa.behavior`: 240 s
stabilization up and down, at most 10 pods per 150 s each way). It reconciles every 60 s
(docs/saturation-analyzer.md, "Query frequency") and reads, per pod, the peak over the last minute
(`max_over_time(...[1m])`) of `vllm:kv_cache_usage_perc` and `vllm:num_requests_waiting`
(internal/collector/registration/saturation.go).

- saturation V1 (docs/saturation-analyzer.md; docs/capacity-scaling-config.md defaults): a pod is
  saturated if KV >= kvCacheThreshold 0.80 or queue >= queueLengthThreshold 5. Over non-saturated pods,
  average spare KV (0.80 - KV) and spare queue (5 - queue); scale up by one (ready + 1) if spare KV <
  kvSpareTrigger 0.10 or spare queue < queueSpareTrigger 3 (or if every pod is saturated). Scale down by one
  only if the total KV and queue of the non-saturated pods, spread over one pod fewer, keep spare >= the
  triggers, and there are >= 2 of them. No step while pods are starting (the pending-replica guard,
  docs/CHANGELOG-v0.5.0.md). Knob: kvCacheThreshold.
- saturation V2, token-based (internal/engines/analyzers/saturation_v2/analyzer.go, and the cost-aware
  optimizer, internal/engines/pipeline/cost_aware_optimizer.go). Per ready pod: tokens in use = its peak
  KV usage x its KV tokens; demand = tokens in use + its peak queue x its mean input tokens; capacity =
  min(k1, k2), k1 = KV tokens x kvThreshold (0.8), k2 the compute bound: the tokens in use of a pod whose
  queue is at the queue threshold (5) (observed, kept as a rolling mean of 10 per output-length bucket),
  else that mean, else derived from the engine's batch limits, min(B x O / (I + O), S) x (I + O / 2)
  (B max-num-batched-tokens, S max-num-seqs, I and O the mean input and output tokens). The variant's
  capacity per pod is the median over its ready pods; the gateway's queue adds its requests x (I + O)
  (estimateSchedulerQueueDemand). required = demand / 0.85 - (ready + starting) x capacity -> add
  ceil(required / capacity) pods; else spare = ready x capacity - demand / 0.70 -> remove
  floor(spare / capacity) pods at once, keeping one. No pending guard: starting pods count as supply.
  Knob: kvThreshold.

Simplified: single variant (no cost-aware choice across accelerators); no 7-day capacity store (no scale to
zero here); no prefix-cache discount on the gateway queue's input tokens; the mean input and output
tokens per pod come from the engines' prompt-token, generation-token and finished-request counters over
the last 5 minutes (the queries' `rate(...[5m])`).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from keda_llm.simulator.cluster.engine import ObservedState, Simulation
from keda_llm.simulator.control import (
    Behavior,
    KedaSettings,
    MetricSpec,
    MetricValue,
    ScaledObjectRef,
    ScalingPolicy,
    ScalingRules,
)
from keda_llm.simulator.control.anchors.base import Signals, signals
from keda_llm.simulator.control.baselines import baseline_settings

PROMETHEUS_SCRAPE_S = 15.0  # GKE how-to: PodMonitoring interval 15s
HPA_KV_TARGET = 0.8

WVA_RECONCILE_S = 60.0
WVA_LOOKBACK_S = 60.0  # max_over_time[1m]
KV_CACHE_THRESHOLD = 0.80
QUEUE_LENGTH_THRESHOLD = 5.0
KV_SPARE_TRIGGER = 0.10
QUEUE_SPARE_TRIGGER = 3.0
V2_SCALE_UP_UTILIZATION = 0.85
V2_SPARE_UTILIZATION = 0.70
V2_K2_SAMPLES = 10  # RollingAverageWindowSize
V2_SHORT_OUTPUT = 100.0  # output-length buckets of the k2 history (ShortOutputThreshold, MediumOutputThreshold)
V2_MEDIUM_OUTPUT = 500.0
WVA_RATE_WINDOW_S = 300.0  # the mean input/output tokens' rate(...[5m])
_WVA_HPA_RULES = ScalingRules(stabilization_window_seconds=240, select_policy="Max",
                              policies=(ScalingPolicy("Pods", 10, 150),))
#: the HPA the WVA chart installs (values.yaml `hpa.behavior`, the same both ways)
WVA_HPA_BEHAVIOR = Behavior(scale_up=_WVA_HPA_RULES, scale_down=_WVA_HPA_RULES)


class _Scraped:
    """Observations kept at a Prometheus scrape interval (the first collection at or after each step)."""

    def __init__(self, scrape_s: float) -> None:
        self.scrape_s = scrape_s
        self._next = 0.0

    def take(self, state: ObservedState) -> Signals | None:
        at = state.observation.at
        if at + 1e-6 < self._next:
            return None
        self._next = at + self.scrape_s - 1e-6
        return signals(state)


@dataclass
class KvUsageScaler:
    """The HPA on per-pod KV-cache usage: reports the sum over ready pods against `target` per pod."""

    target: float = HPA_KV_TARGET
    scrape_s: float = PROMETHEUS_SCRAPE_S
    latest: Signals | None = None

    def __post_init__(self) -> None:
        if not self.target > 0:
            raise ValueError(f"hpa-kv: target must be > 0, got {self.target}")
        self._scrape = _Scraped(self.scrape_s)

    def value(self) -> float:
        return 0.0 if self.latest is None else self.latest.kv_sum

    def get_metric_spec(self, ref: ScaledObjectRef) -> Sequence[MetricSpec]:
        return [MetricSpec("vllm-gpu-cache-usage-perc", target_size_float=self.target)]

    def get_metrics(self, ref: ScaledObjectRef, metric_name: str) -> Sequence[MetricValue]:
        v = self.value()
        return [MetricValue("vllm-gpu-cache-usage-perc", metric_value_float=v, metric_value=int(v))]

    def is_active(self, ref: ScaledObjectRef) -> bool:
        return self.value() > 0

    def observe(self, state: ObservedState, sim: Simulation) -> bool:
        sig = self._scrape.take(state)
        if sig is not None:
            self.latest = sig
        return False


def wva_v1_target(kv: Sequence[float], queue: Sequence[float], ready: int, *,
                  kv_threshold: float = KV_CACHE_THRESHOLD, queue_threshold: float = QUEUE_LENGTH_THRESHOLD,
                  kv_trigger: float = KV_SPARE_TRIGGER, queue_trigger: float = QUEUE_SPARE_TRIGGER) -> int:
    """Saturation V1 for one variant: per-pod (peak) KV usage and queue -> the target count (ready +- 1)."""
    free = [(k, q) for k, q in zip(kv, queue, strict=True) if k < kv_threshold and q < queue_threshold]
    if not free:
        return ready + 1 if ready else ready  # every reporting pod saturated
    n = len(free)
    spare_kv = sum(kv_threshold - k for k, _ in free) / n
    spare_q = sum(queue_threshold - q for _, q in free) / n
    if spare_kv < kv_trigger or spare_q < queue_trigger:
        return ready + 1
    if n >= 2:
        kv_after = sum(k for k, _ in free) / (n - 1)
        q_after = sum(q for _, q in free) / (n - 1)
        if kv_threshold - kv_after >= kv_trigger and queue_threshold - q_after >= queue_trigger:
            return ready - 1
    return ready


def wva_v2_target(demand: float, ready: int, starting: int, capacity_per_pod: float) -> int:
    """Saturation V2 through the cost-aware optimizer, one variant: the target count from token demand
    against the per-pod capacity; starting pods count as supply for scale-up, only ready ones for spare."""
    current = ready + starting
    required = demand / V2_SCALE_UP_UTILIZATION - current * capacity_per_pod
    if required > 0:
        return current + math.ceil(required / capacity_per_pod - 1e-12)
    spare = ready * capacity_per_pod - demand / V2_SPARE_UTILIZATION
    if spare > 0:
        return current - max(0, min(math.floor(spare / capacity_per_pod + 1e-12), current - 1))
    return current


def k2_from_engine(max_batched_tokens: float, max_seqs: float, mean_input: float, mean_output: float) -> float:
    """`estimateCapacityFromParams`: the tokens a pod holds in steady state at its batch limits, 0 if
    unknown (no output tokens seen yet)."""
    if max_batched_tokens <= 0 or mean_output <= 0:
        return 0.0
    steady = min(max_batched_tokens * mean_output / (mean_input + mean_output), max_seqs)
    return float(int(steady * (mean_input + mean_output / 2)))


def _output_bucket(mean_output: float) -> str:
    return "short" if mean_output < V2_SHORT_OUTPUT else "medium" if mean_output < V2_MEDIUM_OUTPUT else "long"


class _TokenMeans:
    """Per pod, the mean prompt and output tokens per finished request over the last 5 minutes, from the
    engines' counters (what `rate(..._sum[5m]) / rate(..._count[5m])` gives); 0 where none finished."""

    def __init__(self) -> None:
        self._seen: dict[str, deque[tuple[float, float, float, float]]] = {}

    def update(self, state: ObservedState) -> dict[str, tuple[float, float]]:
        at = state.observation.at
        means: dict[str, tuple[float, float]] = {}
        seen: dict[str, deque[tuple[float, float, float, float]]] = {}
        for r in state.observation.replicas:
            if not r.up or r.prompt_tokens_total is None or r.requests_finished_total is None:
                continue
            ring = self._seen.get(r.pod, deque())
            ring.append((at, r.prompt_tokens_total, r.generation_tokens_total or 0.0, r.requests_finished_total))
            while len(ring) > 1 and ring[1][0] <= at - WVA_RATE_WINDOW_S:
                ring.popleft()
            seen[r.pod] = ring
            _, p0, g0, f0 = ring[0]
            _, p1, g1, f1 = ring[-1]
            means[r.pod] = ((p1 - p0) / (f1 - f0), (g1 - g0) / (f1 - f0)) if f1 > f0 else (0.0, 0.0)
        self._seen = seen
        return means


@dataclass
class WvaScaler:
    """llm-d WVA (V1 `saturation` or V2 `tokens`), exporting its desired count to KEDA/the HPA."""

    mode: Literal["saturation", "tokens"] = "saturation"
    kv_threshold: float = KV_CACHE_THRESHOLD
    scrape_s: float = PROMETHEUS_SCRAPE_S
    reconcile_s: float = WVA_RECONCILE_S
    desired: int | None = None
    history: deque[tuple[float, Signals]] = field(default_factory=deque)
    reasons: list[tuple[float, int, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 0 < self.kv_threshold <= 1:
            raise ValueError(f"WVA kvCacheThreshold must be in (0, 1], got {self.kv_threshold}")
        self._scrape = _Scraped(self.scrape_s)
        self._next_reconcile = 0.0
        self._means = _TokenMeans()
        self._k2_seen: dict[str, deque[float]] = {}

    def get_metric_spec(self, ref: ScaledObjectRef) -> Sequence[MetricSpec]:
        return [MetricSpec("wva-desired-replicas", target_size_float=1.0)]

    def get_metrics(self, ref: ScaledObjectRef, metric_name: str) -> Sequence[MetricValue]:
        v = float(self.desired or 0)
        return [MetricValue("wva-desired-replicas", metric_value_float=v, metric_value=int(v))]

    def is_active(self, ref: ScaledObjectRef) -> bool:
        return (self.desired or 0) > 0

    def _peaks(self, latest: Signals) -> tuple[list[float], list[float]]:
        """Per ready pod, its peak KV usage and queue over the last minute (`max_over_time[1m]`)."""
        peak_kv: dict[str, float] = {}
        peak_q: dict[str, float] = {}
        for _, s in self.history:
            for pod, k, w in zip(s.pods, s.kv, s.waiting, strict=True):
                peak_kv[pod] = max(peak_kv.get(pod, 0.0), k)
                peak_q[pod] = max(peak_q.get(pod, 0.0), w)
        return [peak_kv[p] for p in latest.pods], [peak_q[p] for p in latest.pods]

    def _k2(self, bucket: str, tokens: float, queue: float, derived: float, k1: float) -> float:
        """`computeK2`: observed (queue at the threshold), else the bucket's rolling mean, else derived, else k1."""
        if queue >= QUEUE_LENGTH_THRESHOLD and tokens > 0:
            ring = self._k2_seen.setdefault(bucket, deque(maxlen=V2_K2_SAMPLES))
            ring.append(tokens)
            return tokens
        seen = self._k2_seen.get(bucket)
        if seen:
            return float(int(sum(seen) / len(seen)))
        return derived if derived > 0 else k1

    def _v2(self, latest: Signals, means: dict[str, tuple[float, float]], ready: int, starting: int,
            sim: Simulation) -> int | None:
        """Saturation V2's target, None while no pod reports its KV capacity."""
        cap_tokens = latest.kv_capacity_tokens
        if cap_tokens <= 0:
            return None
        engine = sim.config.replica
        kv, queue = self._peaks(latest)
        k1 = float(int(cap_tokens * self.kv_threshold))
        demand = 0.0
        caps: list[float] = []
        for pod, k, q in zip(latest.pods, kv, queue, strict=True):
            mean_in, mean_out = means.get(pod, (0.0, 0.0))
            tokens = float(round(min(1.0, k) * cap_tokens))
            demand += tokens + (q * mean_in if mean_in > 0 else 0.0)
            derived = k2_from_engine(engine.max_num_batched_tokens, engine.max_num_seqs, mean_in, mean_out)
            caps.append(min(k1, self._k2(_output_bucket(mean_out), tokens, q, derived, k1)))
        active = [m for m in means.values() if m[0] > 0 or m[1] > 0]
        if active and latest.gateway_pending > 0:
            mean_in = sum(m[0] for m in active) / len(active)
            mean_out = sum(m[1] for m in active) / len(active)
            demand += latest.gateway_pending * (mean_in + mean_out)
        capacity = float(statistics.median(caps)) if caps else 0.0
        if capacity <= 0:
            return None
        return wva_v2_target(demand, ready, starting, capacity)

    def observe(self, state: ObservedState, sim: Simulation) -> bool:
        sig = self._scrape.take(state)
        if sig is not None:
            self.history.append((sig.at, sig))
            while self.history and self.history[0][0] <= sig.at - WVA_LOOKBACK_S:
                self.history.popleft()
        now = state.observation.at
        if now + 1e-6 < self._next_reconcile:
            return False
        self._next_reconcile = now + self.reconcile_s - 1e-6
        means = self._means.update(state)
        spec = sim.desired
        ready = sum(1 for r in state.observation.replicas if r.up)
        if self.desired is None:
            self.desired = spec
        if not self.history:
            return False
        latest = self.history[-1][1]
        if self.mode == "saturation":
            if spec > ready:  # V1's pending-replica guard: no step while pods are starting
                self.reasons.append((now, self.desired, "pending"))
                return False
            kv, q = self._peaks(latest)
            target = wva_v1_target(kv, q, len(kv), kv_threshold=self.kv_threshold)
            if not ready and latest.gateway_pending > 0:
                target = 1
        else:
            v2 = self._v2(latest, means, ready, max(0, spec - ready), sim)
            if v2 is None:
                return False
            target = v2
        self.desired = max(1, target)
        self.reasons.append((now, self.desired, self.mode))
        return False


def hpa_kv_anchor(max_replicas: int, target: float = HPA_KV_TARGET) -> tuple[KedaSettings, KvUsageScaler]:
    """The HPA on KV-cache usage per pod (min 1, HPA defaults), Prometheus scraping every 15 s."""
    return baseline_settings("hpa-kv", max_replicas=max_replicas, polling_s=15), KvUsageScaler(target)


def wva_anchor(max_replicas: int, mode: Literal["saturation", "tokens"] = "saturation",
               kv_threshold: float = KV_CACHE_THRESHOLD) -> tuple[KedaSettings, WvaScaler]:
    """WVA's desired count through KEDA (default polling 30 s) and the HPA with the chart's behavior, min 1."""
    name = "llmd-wva" if mode == "saturation" else "llmd-wva-tokens"
    settings = replace(baseline_settings(name, max_replicas=max_replicas), behavior=WVA_HPA_BEHAVIOR)
    return settings, WvaScaler(mode, kv_threshold)
