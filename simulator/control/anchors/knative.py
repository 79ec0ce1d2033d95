"""Knative Serving's KPA (knative/serving at 98e5ef9, pkg/autoscaler), and the decider AIBrix's KPA reuses.

Rules and defaults, each from knative/serving (pkg/autoscaler/config/config.go defaults;
pkg/autoscaler/scaling/autoscaler.go `Scale`; pkg/reconciler/autoscaling/kpa/scaler.go scale to zero;
pkg/autoscaler/metrics/collector.go the 1 s scrape; pkg/autoscaler/scaling/multiscaler.go the 2 s tick):

- reads the revision's total request concurrency: what every pod's queue-proxy has in flight (here the
  engine's running + waiting, vLLM's num_requests_running + num_requests_waiting) plus what the activator
  holds (here the gateway's queue), scraped every second (`scrapeTickInterval`, 1 s buckets);
- stable window 60 s (`stable-window`), panic window 10% of it = 6 s (`panic-window-percentage`);
  observed values are the averages of the samples in each window;
- target per pod = container-concurrency-target-default 100 x target utilization 0.7 = 70 (the knob);
- every 2 s (`tickInterval`): dspc = ceil(stable / target), dppc = ceil(panic / target), both clamped to
  [floor(ready / max-scale-down-rate 2), ceil(ready x max-scale-up-rate 1000)] with ready >= 1;
- panic starts when dppc / ready >= panic-threshold-percentage 200%; while panicking the count is
  max(dspc, dppc) and never decreases; panic ends a full stable window after the last over-threshold tick;
- scale to zero (enable-scale-to-zero true, min-scale 0): the decider reaches 0 only after a stable window
  without requests; the last pod goes scale-to-zero-grace-period 30 s later (the activator is in the path
  by then; target-burst-capacity 211 keeps it there for small revisions anyway);
- at zero the activator buffers requests and pokes the autoscaler, which decides at once (>= 1 pod).

Simplified: concurrency is sampled at the scrape instant (queue-proxy reports the time-weighted average
over the second); all pods are scraped (Knative samples at most 16 and extrapolates); the activator's
load balancing is the router's; `scale-down-delay` is 0 (its default) and not modelled otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from keda_llm.simulator.cluster.engine import Simulation
from keda_llm.simulator.control.anchors.base import OwnLoopController, Signals, TimeWindow

CONTAINER_CONCURRENCY_TARGET_DEFAULT = 100.0
TARGET_UTILIZATION = 0.7
STABLE_WINDOW_S = 60.0
PANIC_WINDOW_PERCENTAGE = 10.0
PANIC_THRESHOLD = 2.0  # panic-threshold-percentage 200
MAX_SCALE_UP_RATE = 1000.0
MAX_SCALE_DOWN_RATE = 2.0
SCALE_TO_ZERO_GRACE_S = 30.0
SCRAPE_S = 1.0
TICK_S = 2.0


@dataclass
class KpaDecider:
    """`Scale()` of pkg/autoscaler/scaling/autoscaler.go: observed stable and panic values (totals over the
    revision) and the ready pod count -> desired pods. Keeps the panic state between calls."""

    target: float
    stable_window_s: float = STABLE_WINDOW_S
    panic_threshold: float = PANIC_THRESHOLD
    max_scale_up_rate: float = MAX_SCALE_UP_RATE
    max_scale_down_rate: float = MAX_SCALE_DOWN_RATE
    panic_since: float | None = None  # Knative's panicTime (last over-threshold tick while panicking)
    max_panic_pods: int = 0

    def __post_init__(self) -> None:
        if not self.target > 0:
            raise ValueError(f"KPA target must be > 0, got {self.target}")

    @property
    def panicking(self) -> bool:
        return self.panic_since is not None

    def desired(self, now: float, stable: float, panic: float, ready: int) -> int:
        ready_f = float(max(1, ready))
        up = math.ceil(self.max_scale_up_rate * ready_f)
        down = math.floor(ready_f / self.max_scale_down_rate)
        dspc = min(max(math.ceil(stable / self.target - 1e-12), down), up)
        dppc = min(max(math.ceil(panic / self.target - 1e-12), down), up)
        over = dppc / ready_f >= self.panic_threshold
        if over:
            self.panic_since = now  # enter, or extend
        elif self.panic_since is not None and now >= self.panic_since + self.stable_window_s:
            self.panic_since, self.max_panic_pods = None, 0
        if self.panic_since is None:
            return dspc
        want = max(dspc, dppc)
        if want > self.max_panic_pods:
            self.max_panic_pods = want
        return max(want, self.max_panic_pods)


class KnativeKpa(OwnLoopController):
    """Knative's KPA on request concurrency, with the activator and scale to zero (see the module doc).
    `target`: concurrency per pod (the knob; default 100 x 0.7)."""

    def __init__(self, *, target: float = CONTAINER_CONCURRENCY_TARGET_DEFAULT * TARGET_UTILIZATION,
                 max_replicas: int = 64, min_replicas: int = 0, stable_window_s: float = STABLE_WINDOW_S,
                 panic_window_pct: float = PANIC_WINDOW_PERCENTAGE, grace_s: float = SCALE_TO_ZERO_GRACE_S,
                 scrape_s: float = SCRAPE_S, tick_s: float = TICK_S, name: str = "knative-kpa") -> None:
        super().__init__(name, scrape_s=scrape_s, tick_s=tick_s, initial_replicas=1, min_replicas=min_replicas,
                         max_replicas=max_replicas)
        self.decider = KpaDecider(target, stable_window_s)
        self.stable_s = stable_window_s
        self.panic_s = stable_window_s * panic_window_pct / 100.0
        self.grace_s = grace_s
        self.window = TimeWindow(stable_window_s)
        self._zero_since: float | None = None

    def sample(self, sim: Simulation, sig: Signals) -> None:
        self.window.add(sig.at, sig.concurrency)

    def decide(self, sim: Simulation) -> int | None:
        now = sim.now
        stable = self.window.average(now, self.stable_s)
        panic = self.window.average(now, self.panic_s)
        if stable is None or panic is None:
            return None  # no data: Knative keeps the scale
        spec, ready = self.counts(sim)
        want = self.decider.desired(now, stable, panic, ready)
        self.reason = "panic" if self.decider.panicking else "stable"
        if want == 0 and spec > 0:
            if self._zero_since is None:
                self._zero_since = now
            if now - self._zero_since < self.grace_s:
                return max(1, self.min_replicas) if spec > 0 else None
            self.reason = "scale to zero"
        else:
            self._zero_since = None
        return want

    def gateway_hold(self, sim: Simulation) -> None:
        """The activator holds the request and pokes the autoscaler: a scrape and a decision now."""
        if sim.desired > 0:
            return
        from keda_llm.simulator.control.anchors.base import signals

        self.sample(sim, signals(sim.observe()))
        want = self.decide(sim)
        self.reason = "activator"
        self.write(sim, max(1, want or 0))
