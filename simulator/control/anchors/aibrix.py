"""AIBrix's PodAutoscaler, strategies KPA and APA (vllm-project/aibrix at e3e10f9).

Sources: pkg/controller/podautoscaler/context/context.go and metrics/client.go (defaults, windows),
algorithm/kpa.go and algorithm/apa.go (the rules), podautoscaler_controller.go (10 s resync),
docs/source/features/autoscaling/metric-based-autoscaling.rst (pods scraped directly, no Prometheus).
The metric is the one AIBrix's samples and docs use for vLLM pods, `kv_cache_usage_perc` (formerly
`gpu_cache_usage_perc`), a 0-1 fraction; target 0.5 as in the APA sample
(samples/autoscaling/apa.yaml: `kv_cache_usage_perc`, targetValue 0.5). The target is the knob.

Defaults (context.go): resync 10 s; stable window (`observeWindowSeconds`) 180 s, panic window 60 s;
panic threshold 2.0; scale-up/down tolerance 0.1; max scale-up rate 2, max scale-down rate 2; scale-up
cooldown 0 s, scale-down cooldown 300 s (no scale-down within 300 s of the last change).

- KPA: Knative's decider (anchors/knative.py `KpaDecider`) with these windows and rates. It is given the
  total over ready pods, Knative's semantics and what AIBrix's KPA unit tests assume; the controller path
  averages per-pod samples first (metrics/client.go `UpdateMetrics`), which would size from the per-pod
  mean. `aggregate="mean"` reproduces that path.
- APA: ratio r = (stable-window mean of the per-pod mean) / target; no change while
  1 - down tolerance <= r <= 1 + up tolerance; else ceil(ready x r), limited to
  [floor(ready / down rate), ceil(ready x up rate)].

Simplified: metric values are instantaneous gauges at each resync; no `spec.schedules`; min 1 (AIBrix's
scale-to-zero annotation has no activator, aibrix#476).
"""

from __future__ import annotations

import math
from typing import Literal

from keda_llm.simulator.cluster.engine import Simulation
from keda_llm.simulator.control.anchors.base import OwnLoopController, Signals, TimeWindow
from keda_llm.simulator.control.anchors.knative import KpaDecider

RESYNC_S = 10.0
STABLE_WINDOW_S = 180.0
PANIC_WINDOW_S = 60.0
PANIC_THRESHOLD = 2.0
UP_TOLERANCE = 0.1
DOWN_TOLERANCE = 0.1
MAX_SCALE_UP_RATE = 2.0
MAX_SCALE_DOWN_RATE = 2.0
SCALE_UP_COOLDOWN_S = 0.0
SCALE_DOWN_COOLDOWN_S = 300.0
KV_TARGET = 0.5


def apa_desired(ready: int, use: float, target: float, *, up_tolerance: float = UP_TOLERANCE,
                down_tolerance: float = DOWN_TOLERANCE, up_rate: float = MAX_SCALE_UP_RATE,
                down_rate: float = MAX_SCALE_DOWN_RATE) -> int:
    """algorithm/apa.go: the APA's count for `ready` pods at per-pod value `use` (no change inside the band)."""
    current = max(1, ready)
    r = use / target
    if 1.0 - down_tolerance <= r <= 1.0 + up_tolerance:
        return ready
    want = math.ceil(current * r - 1e-12)
    return max(math.floor(current / down_rate), min(math.ceil(current * up_rate), want))


class AibrixAutoscaler(OwnLoopController):
    """AIBrix KPA or APA on KV-cache usage (see the module doc); `target` is the knob."""

    def __init__(self, strategy: Literal["kpa", "apa"], *, target: float = KV_TARGET, max_replicas: int = 64,
                 min_replicas: int = 1, aggregate: Literal["sum", "mean"] = "sum", resync_s: float = RESYNC_S,
                 stable_window_s: float = STABLE_WINDOW_S, panic_window_s: float = PANIC_WINDOW_S,
                 scale_down_cooldown_s: float = SCALE_DOWN_COOLDOWN_S) -> None:
        if strategy not in ("kpa", "apa"):
            raise ValueError(f"AIBrix strategy must be kpa or apa, got {strategy!r}")
        if not target > 0:
            raise ValueError(f"AIBrix target must be > 0, got {target}")
        super().__init__(f"aibrix-{strategy}", scrape_s=resync_s, tick_s=resync_s,
                         initial_replicas=max(1, min_replicas), min_replicas=min_replicas, max_replicas=max_replicas)
        self.strategy = strategy
        self.target = target
        self.aggregate = aggregate
        self.stable_s, self.panic_s = stable_window_s, panic_window_s
        self.window = TimeWindow(stable_window_s)
        self.decider = KpaDecider(target, stable_window_s, PANIC_THRESHOLD, MAX_SCALE_UP_RATE, MAX_SCALE_DOWN_RATE)
        self.down_cooldown_s = scale_down_cooldown_s
        self._last_change = -math.inf

    def sample(self, sim: Simulation, sig: Signals) -> None:
        value = sig.kv_mean if (self.strategy == "apa" or self.aggregate == "mean") else sig.kv_sum
        if sig.ready:
            self.window.add(sig.at, value)

    def decide(self, sim: Simulation) -> int | None:
        now = sim.now
        stable = self.window.average(now, self.stable_s)
        if stable is None:
            return None
        spec, ready = self.counts(sim)
        if self.strategy == "kpa":
            panic = self.window.average(now, self.panic_s)
            want = self.decider.desired(now, stable, stable if panic is None else panic, ready)
            self.reason = "panic" if self.decider.panicking else "stable"
        else:
            want = apa_desired(ready, stable, self.target)
            self.reason = f"ratio {stable / self.target:.2f}"
        if want < spec and now - self._last_change < self.down_cooldown_s:
            return None  # scale-down cooldown
        if want != spec:
            self._last_change = now
        return want
