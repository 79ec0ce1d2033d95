"""Knative KPA stable/panic decision, as a pure step: (windowed desired pods, ready, panic state, now) -> result.

Follows knative/serving `pkg/autoscaler/scaling/autoscaler.go` `Scale()` (commit 15413ab), with its
defaults (`pkg/autoscaler/config/config.go`, summarized in the project's anchors.md section 4):

- ready = max(1, ready pods) ("Use 1 if there are zero current pods");
- maxScaleUp = ceil(maxScaleUpRate x ready), maxScaleDown = floor(ready / maxScaleDownRate);
- dspc = ceil(stable / target), dppc = ceil(panic / target), each clamped to [maxScaleDown, maxScaleUp];
- panic starts when dppc / ready >= panicThreshold; every tick over the threshold moves panicTime to
  now; panic ends only when a tick is under the threshold and panicTime + stableWindow is before now;
- in panic, desired = max(stable, panic) and never below maxPanicPods (the most panic asked for).

Here the windowed inputs arrive already divided by the per-replica target (a float number of
replicas), because the policies measure demand and capacity in their own units.

`scale_down_delay` is Knative's `scale-down-delay` (the max of the desired count over a trailing window).
One departure: Knative's default is 0 s because its pods start in seconds; an LLM replica starts in
minutes, so scaler.decide defaults the delay to the cold start (see `_delay` there for why).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Window averages are float sums: 3.0000000000000004 replicas must not become 4.
_EPS = 1e-9


def ceil_replicas(x: float) -> int:
    """ceil() that forgives float noise in the last bits."""
    return max(0, math.ceil(x - _EPS))


@dataclass(frozen=True)
class KpaResult:
    desired: int  # the count Knative would set
    stable: int  # dspc clamped to the rate limits
    panic: int  # dppc clamped to the rate limits
    dspc: int  # ceil(stable window desired), before the rate limits
    dppc: int
    max_scale_up: int
    max_scale_down: int
    panicking: bool
    panic_since: float | None  # the new Knative panicTime
    max_panic_pods: int

    @property
    def rate_limited_up(self) -> bool:
        return max(self.dspc, self.dppc if self.panicking else 0) > self.max_scale_up

    @property
    def rate_limited_down(self) -> bool:
        return not self.panicking and self.dspc < self.max_scale_down


def initial_panic(ready: int, now: float) -> tuple[float | None, int]:
    """Knative `newAutoscaler`: a fresh autoscaler with more than one ready pod starts in panic, holding the
    current count until it has a stable window of data (it lost its history; so did we on restart)."""
    return (now, ready) if ready > 1 else (None, ready)


def kpa_step(stable_desired: float, panic_desired: float, ready: int, panic_since: float | None,
             max_panic_pods: int, now: float, *, stable_window: float, panic_threshold: float,
             max_scale_up_rate: float, max_scale_down_rate: float) -> KpaResult:
    """One Knative decision. `*_desired` are window averages already divided by the per-replica target."""
    ready_f = max(1.0, float(ready))
    max_up = math.ceil(max_scale_up_rate * ready_f)
    max_down = math.floor(ready_f / max_scale_down_rate)  # Knative: only when Reachable; ours always is
    dspc = ceil_replicas(stable_desired)
    dppc = ceil_replicas(panic_desired)
    stable = min(max(dspc, max_down), max_up)
    panic = min(max(dppc, max_down), max_up)
    over = dppc / ready_f >= panic_threshold
    if over:
        panic_since = now  # start panicking, or extend the panic
    elif panic_since is not None and panic_since + stable_window < now:
        panic_since, max_panic_pods = None, 0  # the surge made its way into the stable window
    desired = stable
    if panic_since is not None:
        desired = max(desired, panic)
        max_panic_pods = max(max_panic_pods, desired)  # never scale down while panicking
        desired = max_panic_pods
    return KpaResult(desired, stable, panic, dspc, dppc, max_up, max_down, panic_since is not None,
                     panic_since, max_panic_pods)


DelayWindow = tuple[tuple[float, int], ...]  # (decided at, count), counts strictly decreasing: a max-queue


def scale_down_delay(window: DelayWindow, desired: int, now: float, delay: float) -> tuple[int, DelayWindow]:
    """Knative `scale-down-delay` (autoscaler.go `delayWindow`): record `desired` at `now` and answer the
    largest count recorded within the last `delay` seconds, so a scale-down happens only once the lower
    count has been asked for over a whole delay. A count recorded at t holds while now - t < delay.

    The window is a max-queue: a newer count evicts every older one it is not below (they can never be the
    maximum again), so it holds one entry per step down, not one per decision.
    """
    kept = tuple((t, n) for t, n in window if now - t < delay and n > desired)
    kept += ((now, desired),)
    return kept[0][1], kept
