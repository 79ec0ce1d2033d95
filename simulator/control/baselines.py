"""Baselines under the same KEDA+HPA rules, and the metrics they read.

Each baseline is what people deploy today, expressed as the scaler KEDA would call:

- `queue`: KEDA's Prometheus scaler on `sum(vllm:num_requests_waiting)` with threshold 5 (vLLM
  production-stack's Helm example, docs/source/use_cases/autoscaling-keda.rst: threshold 5, polling 15 s,
  cooldown 360 s, minReplicaCount 1). The Prometheus scaler reports the query's value with the
  threshold as an AverageValue target and is active while the value exceeds activationThreshold (0).
- `gpu`: the HPA on GPU utilization (DCGM_FI_DEV_GPU_UTIL through a metrics adapter), target 80% per pod.
- `concurrency`: a request-concurrency target per pod (Knative's containerConcurrency / BentoML's
  `concurrency`), running + waiting requests in the engines plus those held at the gateway.

Static provisioning and the oracle do not poll anything; they are schedules (simulator.report.oracle).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from keda_llm.simulator.cluster.engine import ObservedState, Simulation
from keda_llm.simulator.control import KedaSettings, MetricSpec, MetricValue, ScaledObjectRef, Trigger

#: vLLM production-stack's KEDA example (anchors: vllm-project/production-stack autoscaling-keda.rst)
PROD_STACK_THRESHOLD = 5.0
PROD_STACK_POLLING_S = 15
PROD_STACK_COOLDOWN_S = 360
GPU_UTIL_TARGET_PERCENT = 80.0


@dataclass
class MetricScaler:
    """A KEDA scaler computing one metric from the latest collection (what Prometheus would answer).

    `kind`: `queue` (Σ waiting), `gpu` (Σ GPU utilization, percent), `concurrency` (Σ running + waiting +
    gateway queue). `target` is the per-pod AverageValue target; active while the value is > 0.
    """

    kind: str
    target: float
    latest: ObservedState | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("queue", "gpu", "concurrency"):
            raise ValueError(f"baseline metric must be queue, gpu or concurrency, got {self.kind!r}")
        if not self.target > 0:
            raise ValueError(f"baseline {self.kind}: target must be > 0, got {self.target}")

    @property
    def metric_name(self) -> str:
        return {"queue": "vllm-num-requests-waiting", "gpu": "dcgm-fi-dev-gpu-util",
                "concurrency": "requests-in-flight"}[self.kind]

    def value(self) -> float:
        s = self.latest
        if s is None:
            return 0.0  # the Prometheus scaler's ignoreNullValues: an empty result is 0
        reps = [r for r in s.observation.replicas if r.up]
        if self.kind == "queue":
            return sum(r.waiting or 0.0 for r in reps)
        if self.kind == "gpu":
            return 100.0 * sum(s.gpu_utilization)
        return sum((r.running or 0.0) + (r.waiting or 0.0) for r in reps) + s.gateway_pending

    def get_metric_spec(self, ref: ScaledObjectRef) -> Sequence[MetricSpec]:
        return [MetricSpec(self.metric_name, target_size_float=self.target)]

    def get_metrics(self, ref: ScaledObjectRef, metric_name: str) -> Sequence[MetricValue]:
        v = self.value()
        return [MetricValue(self.metric_name, metric_value_float=v, metric_value=int(v))]

    def is_active(self, ref: ScaledObjectRef) -> bool:
        return self.value() > 0

    def observe(self, state: ObservedState, sim: Simulation) -> bool:
        self.latest = state
        return False


def baseline_settings(name: str, *, max_replicas: int, min_replicas: int = 1, polling_s: int = 30,
                      cooldown_s: int = 300) -> KedaSettings:
    """A ScaledObject for a baseline: one trigger, KEDA's defaults unless given, no HPA behavior."""
    return KedaSettings(name=name, namespace="default", target_name=name,
                        triggers=(Trigger("external", {"baseline": name}),), polling_interval_s=polling_s,
                        cooldown_period_s=cooldown_s, min_replicas=min_replicas, max_replicas=max_replicas)


def queue_baseline(max_replicas: int) -> tuple[KedaSettings, MetricScaler]:
    """KEDA Prometheus scaler, `vllm:num_requests_waiting` > 5 (production-stack's example settings)."""
    return (baseline_settings("queue", max_replicas=max_replicas, polling_s=PROD_STACK_POLLING_S,
                              cooldown_s=PROD_STACK_COOLDOWN_S),
            MetricScaler("queue", PROD_STACK_THRESHOLD))


def gpu_baseline(max_replicas: int) -> tuple[KedaSettings, MetricScaler]:
    """HPA on GPU utilization, 80% per pod, KEDA/HPA defaults."""
    return baseline_settings("gpu", max_replicas=max_replicas), MetricScaler("gpu", GPU_UTIL_TARGET_PERCENT)


def concurrency_baseline(max_replicas: int, target: float) -> tuple[KedaSettings, MetricScaler]:
    """A request-concurrency target per pod (Knative/BentoML style)."""
    return baseline_settings("concurrency", max_replicas=max_replicas), MetricScaler("concurrency", target)
