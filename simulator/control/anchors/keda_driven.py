"""Anchors that act through KEDA and the HPA: the HPA on vLLM's KV-cache usage, and llm-d's WVA.

Both are scalers for the project's KEDA+HPA emulator (simulator.control via KedaController): they read
the simulator's observations at the anchor's own scrape interval (Prometheus scraping the pods) and answer
KEDA's GetMetrics; the HPA does the rest with its defaults (15 s sync, 10% tolerance, scale-down
stabilization 300 s, scale-up x2 or +4 per 15 s: kubernetes pkg/apis/autoscaling/v2/defaults.go).

`hpa-kv`, the HPA on KV-cache usage (GKE's guidance for vLLM: "Best practices for autoscaling LLM inference
workloads with GPUs on GKE", cloud.google.com/kubernetes-engine/docs/best-practices/machine-learning/
inference/autoscaling, which names the server's KV-cache usage / batch size as the signals to scale on; the
how-to page scrapes the server every 15 s with a PodMonitoring). It reads `vllm:gpu_cache_usage_perc` per
pod and targets an average per pod. The GKE page gives no number: the default 0.8 is the KV-cache threshold
at which the Gateway API Inference Extension's saturation detector (which GKE Inference Gateway runs) calls
a pod saturated (`kvCacheUtilThreshold` 0.8, the same default as llm-d's WVA). The target is the knob.

`llmd-wva` / `llmd-wva-tokens`, llm-d's Workload Variant Autoscaler (llm-d/llm-d-workload-variant-autoscaler
at b08b1c7). WVA computes a desired count and exports `wva_desired_replicas`; the HPA/KEDA acts on it
(README; docs/integrations/keda-integration.md), here as an AverageValue target of 1 per pod. It reconciles
every 60 s (docs/saturation-analyzer.md, "Query frequency") and reads, per pod, the peak over the last
minute (`max_over_time(...[1m])`) of `vllm:kv_cache_usage_perc` and `vllm:num_requests_waiting`.

- saturation V1 (docs/saturation-analyzer.md; docs/capacity-scaling-config.md defaults): a pod is
  saturated if KV >= kvCacheThreshold 0.80 or queue >= queueLengthThreshold 5. Over non-saturated pods,
  average spare KV (0.80 - KV) and spare queue (5 - queue); scale up by one (ready + 1) if spare KV <
  kvSpareTrigger 0.10 or spare queue < queueSpareTrigger 3 (or if every pod is saturated). Scale down by one
  only if the total KV and queue of the non-saturated pods, spread over one pod fewer, keep spare >= the
  triggers, and there are >= 2 of them. No step while pods are starting (the pending-replica guard,
  docs/CHANGELOG-v0.5.0.md). Knob: kvCacheThreshold.
- saturation V2, token-based (internal/engines/analyzers/saturation_v2/analyzer.go, per the project's
  anchors notes): demand = tokens held in KV + queued requests x mean input tokens (the gateway's queue
  counts as the upstream scheduler queue); capacity per pod k1 = KV tokens x kvThreshold (0.8);
  required = demand / 0.85 - anticipated supply (pending pods included) -> add ceil(required / k1) pods;
  spare = supply - demand / 0.70 -> remove one pod when spare >= k1 and >= 2 pods. Knob: kvThreshold.

Simplified: single variant (no cost-aware choice across accelerators); WVA V2's learned compute bound k2 is
left out (capacity is the KV bound k1), as is its 7-day capacity store (no scale to zero here); the
mean input tokens come from the engines' prompt-token and finished-request counters.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from keda_llm.simulator.cluster.engine import ObservedState, Simulation
from keda_llm.simulator.control import KedaSettings, MetricSpec, MetricValue, ScaledObjectRef
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


def wva_v2_target(tokens_in_use: float, queued: float, mean_input_tokens: float, spec: int,
                  capacity_per_pod: float) -> int:
    """Saturation V2 (token-based): the target count from token demand against per-pod KV capacity."""
    demand = tokens_in_use + queued * mean_input_tokens
    supply = spec * capacity_per_pod
    required = demand / V2_SCALE_UP_UTILIZATION - supply
    if required > 0:
        return spec + math.ceil(required / capacity_per_pod - 1e-12)
    spare = supply - demand / V2_SPARE_UTILIZATION
    if spare >= capacity_per_pod and spec >= 2:
        return spec - 1
    return spec


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
        self._counters: dict[str, tuple[float, float]] = {}
        self._mean_input = 0.0

    def get_metric_spec(self, ref: ScaledObjectRef) -> Sequence[MetricSpec]:
        return [MetricSpec("wva-desired-replicas", target_size_float=1.0)]

    def get_metrics(self, ref: ScaledObjectRef, metric_name: str) -> Sequence[MetricValue]:
        v = float(self.desired or 0)
        return [MetricValue("wva-desired-replicas", metric_value_float=v, metric_value=int(v))]

    def is_active(self, ref: ScaledObjectRef) -> bool:
        return (self.desired or 0) > 0

    def _input_tokens(self, state: ObservedState) -> None:
        """Mean prompt tokens per finished request, from the engines' counters since the last reconcile."""
        d_tok = d_req = 0.0
        now: dict[str, tuple[float, float]] = {}
        for r in state.observation.replicas:
            if not r.up or r.prompt_tokens_total is None or r.requests_finished_total is None:
                continue
            now[r.pod] = (r.prompt_tokens_total, r.requests_finished_total)
            t0, q0 = self._counters.get(r.pod, (0.0, 0.0))
            d_tok += max(0.0, r.prompt_tokens_total - t0)
            d_req += max(0.0, r.requests_finished_total - q0)
        self._counters = now
        if d_req > 0:
            self._mean_input = d_tok / d_req

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
        self._input_tokens(state)
        spec = sim.desired
        ready = sum(1 for r in state.observation.replicas if r.up)
        if self.desired is None:
            self.desired = spec
        if not self.history:
            return False
        if spec > ready:  # pending-replica guard: no step while pods are starting
            self.reasons.append((now, self.desired, "pending"))
            return False
        latest = self.history[-1][1]
        if self.mode == "saturation":
            peak_kv: dict[str, float] = {}
            peak_q: dict[str, float] = {}
            for _, s in self.history:
                for pod, k, w in zip(s.pods, s.kv, s.waiting, strict=True):
                    peak_kv[pod] = max(peak_kv.get(pod, 0.0), k)
                    peak_q[pod] = max(peak_q.get(pod, 0.0), w)
            kv = [peak_kv[p] for p in latest.pods]
            q = [peak_q[p] for p in latest.pods]
            target = wva_v1_target(kv, q, len(kv), kv_threshold=self.kv_threshold)
            if not ready and latest.gateway_pending > 0:
                target = 1
        else:
            cap = latest.kv_capacity_tokens * self.kv_threshold
            if cap <= 0:
                return False
            tokens = max(s.kv_sum for _, s in self.history) * latest.kv_capacity_tokens
            queued = max(sum(s.waiting) + s.gateway_pending for _, s in self.history)
            target = wva_v2_target(tokens, queued, self._mean_input, spec, cap)
        self.desired = max(1, target)
        self.reasons.append((now, self.desired, self.mode))
        return False


def hpa_kv_anchor(max_replicas: int, target: float = HPA_KV_TARGET) -> tuple[KedaSettings, KvUsageScaler]:
    """The HPA on KV-cache usage per pod (min 1, HPA defaults), Prometheus scraping every 15 s."""
    return baseline_settings("hpa-kv", max_replicas=max_replicas, polling_s=15), KvUsageScaler(target)


def wva_anchor(max_replicas: int, mode: Literal["saturation", "tokens"] = "saturation",
               kv_threshold: float = KV_CACHE_THRESHOLD) -> tuple[KedaSettings, WvaScaler]:
    """WVA's desired count through KEDA (default polling 30 s) and the HPA (defaults), min 1."""
    name = "llmd-wva" if mode == "saturation" else "llmd-wva-tokens"
    return baseline_settings(name, max_replicas=max_replicas), WvaScaler(mode, kv_threshold)
