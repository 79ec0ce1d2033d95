"""AIBrix's PodAutoscaler, strategies KPA and APA (vllm-project/aibrix at e3e10f9, the commit read).

Paths below are under pkg/controller/podautoscaler/ at that commit.

The metric is the one AIBrix's samples and docs use for vLLM pods, `kv_cache_usage_perc` (formerly
`gpu_cache_usage_perc`), a 0-1 fraction; target 0.5 as in the APA sample (samples/autoscaling/apa.yaml:
`kv_cache_usage_perc`, targetValue 0.5). Pods are scraped directly, no Prometheus
(docs/source/features/autoscaling/metric-based-autoscaling.rst). The target is the knob.

Defaults (context/context.go `NewBaseScalingContext`; metrics/client.go): resync 10 s
(podautoscaler_controller.go `DefaultResyncInterval`); stable window 180 s, panic window 60 s; panic
threshold 2; tolerances 0.1 up and down; max scale-up rate 2, max scale-down rate 2; scale-up window 0 s,
scale-down window 300 s.

What one reconcile does, as modelled:
- Current count: `spec.replicas` of the scale subresource (reconcileCustomPA ->
  workload_scale.go `GetCurrentReplicasFromScale`); both algorithms size from it, ready pods play no
  part. While new pods load, each reconcile multiplies a count that has not served yet.
- Metric (metrics/collector.go `collectFromPods`, metrics/client.go `UpdateMetrics`, types/metrics.go
  `TimeWindow`): the pods that answer (ready ones) are averaged into one value, recorded in the stable and
  panic windows (1 s buckets, those older than the window dropped when a value is recorded; the value read
  is the plain mean of the buckets kept, 0 when none). No pod answering fails the reconcile: no change.
- KPA (algorithm/kpa.go, see `kpa_desired`): panic is judged afresh each reconcile, no hold. The base
  context's max-panic-pods is always 0 and its setter does nothing, so the "no decrease while panicking"
  step never holds anything. The count is ceil(window value / target) with no factor of the pod count,
  as in Knative, whose value is a total; here it is the per-pod mean, so at a 0.5 target on a 0-1 fraction
  the KPA asks for at most about 2 pods. That is the real path, modelled as it is.
- APA (algorithm/apa.go, see `apa_desired`): ceil(current x stable / target) outside the tolerance band.
- Then (podautoscaler_controller.go `computeScaleDecision`): min/max bounds (a count already outside them
  goes straight to the bound; at 0 replicas with min > 0 nothing scales), the algorithm's result clamped to
  them (algorithm.go `applyConstraints`), then `stabilizeRecommendation` (see `RecommendationHistory`),
  clamped again.

Simplified: metric values are instantaneous gauges at each resync; reconciles only on the 10 s resync
(the PA watch also reconciles on the PA's own status writes); no `spec.schedules`; activation scale 1 (the
base context's); min 1 by default (AIBrix's scale-to-zero annotation has no activator, aibrix#476).
"""

from __future__ import annotations

import math
from typing import Literal

from keda_llm.simulator.cluster.engine import Simulation
from keda_llm.simulator.control.anchors.base import OwnLoopController, Signals

RESYNC_S = 10.0
STABLE_WINDOW_S = 180.0
PANIC_WINDOW_S = 60.0
BUCKET_S = 1.0  # the metric windows' granularity (autoscaler.go `NewMetricsClient(time.Second)`)
PANIC_THRESHOLD = 2.0
UP_TOLERANCE = 0.1
DOWN_TOLERANCE = 0.1
MAX_SCALE_UP_RATE = 2.0
MAX_SCALE_DOWN_RATE = 2.0
SCALE_UP_WINDOW_S = 0.0
SCALE_DOWN_WINDOW_S = 300.0
KV_TARGET = 0.5


def apa_desired(current: int, use: float, target: float, *, up_tolerance: float = UP_TOLERANCE,
                down_tolerance: float = DOWN_TOLERANCE, up_rate: float = MAX_SCALE_UP_RATE,
                down_rate: float = MAX_SCALE_DOWN_RATE) -> int:
    """algorithm/apa.go `computeTargetReplicas`: `current` (spec) pods at per-pod value `use`; no change
    unless use / target leaves [1 - down, 1 + up]; up at most current x up_rate, down at least
    current / down_rate (floored)."""
    r = use / target
    if r > 1.0 + up_tolerance:
        return min(math.ceil(up_rate * current), math.ceil(current * r))
    if r < 1.0 - down_tolerance:
        return max(math.floor(current / down_rate), math.ceil(current * r))
    return current


def kpa_desired(current: int, stable: float, panic: float, target: float, *,
                panic_threshold: float = PANIC_THRESHOLD, up_tolerance: float = UP_TOLERANCE,
                down_tolerance: float = DOWN_TOLERANCE, up_rate: float = MAX_SCALE_UP_RATE,
                down_rate: float = MAX_SCALE_DOWN_RATE) -> tuple[int, bool]:
    """algorithm/kpa.go `ComputeRecommendation`: (count, panicking) for `current` (spec) pods. Stateless:
    panic is panic / stable > threshold (or stable <= 0) on this call alone, and while panicking the count is
    the larger of the stable and panic counts, which may be below `current` (nothing is held)."""
    panicking = stable <= 0 or panic / stable > panic_threshold
    n = float(max(0, current))
    most = max(1.0, math.ceil(up_rate * n))
    least = float(math.floor(n / down_rate))
    up_at, down_at = target * (1 + up_tolerance), target * (1 - down_tolerance)

    def count(value: float) -> int:
        want = float(math.ceil(value / target)) if (value > up_at or value < down_at) else n
        return int(min(max(want, least), most))

    stable_n, panic_n = count(stable), count(panic)
    return (max(stable_n, panic_n) if panicking else stable_n), panicking


class MetricWindow:
    """types/metrics.go `TimeWindow`: one value per `bucket_s` bucket (a later one in the same bucket
    replaces it); buckets before floor((t - window) / bucket) are dropped only when a value is recorded."""

    def __init__(self, window_s: float, bucket_s: float = BUCKET_S) -> None:
        self.window_s, self.bucket_s = window_s, bucket_s
        self._buckets: dict[int, float] = {}

    def record(self, at: float, value: float) -> None:
        self._buckets[math.floor(at / self.bucket_s)] = value
        cutoff = math.floor((at - self.window_s) / self.bucket_s)
        self._buckets = {b: v for b, v in self._buckets.items() if b >= cutoff}

    def average(self) -> float:
        """The mean of the buckets kept; 0 when there are none (as `Avg` returns)."""
        return sum(self._buckets.values()) / len(self._buckets) if self._buckets else 0.0


class RecommendationHistory:
    """podautoscaler_controller.go `stabilizeRecommendation`: every reconcile's recommendation is kept.
    Above the current count the result is the highest kept within the scale-up window, below it the lowest
    within the scale-down window (the newest counts only if strictly inside, so a 0 s window passes the
    recommendation through); nothing is ever blocked."""

    def __init__(self, up_window_s: float = SCALE_UP_WINDOW_S, down_window_s: float = SCALE_DOWN_WINDOW_S) -> None:
        self.up_window_s, self.down_window_s = up_window_s, down_window_s
        self._recs: list[tuple[float, int]] = []

    def stabilize(self, now: float, recommendation: int, current: int) -> int:
        keep = max(self.up_window_s, self.down_window_s)
        self._recs = [(t, r) for t, r in [*self._recs, (now, recommendation)] if t > now - keep]
        if recommendation == current:
            return current
        up = recommendation > current
        window = self.up_window_s if up else self.down_window_s
        inside = [r for t, r in self._recs if t > now - window]
        if not inside:
            return recommendation
        return max(inside) if up else min(inside)


class AibrixAutoscaler(OwnLoopController):
    """AIBrix KPA or APA on KV-cache usage (see the module doc); `target` is the knob."""

    def __init__(self, strategy: Literal["kpa", "apa"], *, target: float = KV_TARGET, max_replicas: int = 64,
                 min_replicas: int = 1, resync_s: float = RESYNC_S, stable_window_s: float = STABLE_WINDOW_S,
                 panic_window_s: float = PANIC_WINDOW_S, scale_up_window_s: float = SCALE_UP_WINDOW_S,
                 scale_down_window_s: float = SCALE_DOWN_WINDOW_S) -> None:
        if strategy not in ("kpa", "apa"):
            raise ValueError(f"AIBrix strategy must be kpa or apa, got {strategy!r}")
        if not target > 0:
            raise ValueError(f"AIBrix target must be > 0, got {target}")
        super().__init__(f"aibrix-{strategy}", scrape_s=resync_s, tick_s=resync_s,
                         initial_replicas=max(1, min_replicas), min_replicas=min_replicas, max_replicas=max_replicas)
        self.strategy = strategy
        self.target = target
        self.stable = MetricWindow(stable_window_s)
        self.panic = MetricWindow(panic_window_s)
        self.history = RecommendationHistory(scale_up_window_s, scale_down_window_s)
        self._answered = False

    def sample(self, sim: Simulation, sig: Signals) -> None:
        """The per-pod mean over the pods that answered, into both windows (metrics/client.go `UpdateMetrics`)."""
        self._answered = sig.ready > 0
        if self._answered:
            self.stable.record(sig.at, sig.kv_mean)
            self.panic.record(sig.at, sig.kv_mean)

    def decide(self, sim: Simulation) -> int | None:
        if not self._answered:
            return None  # every pod's scrape failed: the reconcile errs before deciding
        spec, _ = self.counts(sim)
        if spec == 0 and self.min_replicas != 0:
            return None  # scaling is off at zero replicas (computeScaleDecision)
        if spec > self.max_replicas:
            return self.max_replicas
        if spec < self.min_replicas:
            return self.min_replicas
        stable = self.stable.average()
        if self.strategy == "kpa":
            want, panicking = kpa_desired(spec, stable, self.panic.average(), self.target)
            self.reason = "panic" if panicking else "stable"
        else:
            want = apa_desired(spec, stable, self.target)
            self.reason = f"ratio {stable / self.target:.2f}"
        want = max(self.min_replicas, min(self.max_replicas, want))
        return self.history.stabilize(sim.now, want, spec)
