"""Ray Serve's default autoscaling policy (ray.serve.config.AutoscalingConfig and
ray/serve/autoscaling_policy.py `replica_queue_length_autoscaling_policy`, Ray 2.4x; docs
serve/advanced-guides/advanced-autoscaling.html).

- reads ongoing requests: each replica's running + queued requests (here vLLM's num_requests_running +
  num_requests_waiting) plus those queued at the handles (here the gateway), reported every
  `metrics_interval_s` 10 s and averaged over `look_back_period_s` 30 s;
- desired = ceil(running replicas x (1 + (total / (target_ongoing_requests x running) - 1) x
  smoothing_factor)), smoothing_factor 1.0 (so ceil(total / target)); target_ongoing_requests 2 (the knob;
  1.0 before Ray 2.32); from zero running replicas, 1 if any request is waiting;
- a decision must persist: upscale_delay_s 30 s, downscale_delay_s 600 s (the policy counts control-loop
  periods of 0.1 s; here the same delay in seconds, re-checked at every metrics report and at its expiry);
- min_replicas 1, max_replicas the backtest's cap.

Simplified: `max_ongoing_requests` (5 by default) caps what Ray's router sends one replica; it is not
modelled (the router sends everything to the engine, as Ray Serve LLM deployments raise it); upscaling_factor
and downscaling_factor are unset (their default).
"""

from __future__ import annotations

import math

from keda_llm.simulator.cluster.engine import Simulation
from keda_llm.simulator.control.anchors.base import OwnLoopController, Signals, TimeWindow

TARGET_ONGOING_REQUESTS = 2.0
METRICS_INTERVAL_S = 10.0
LOOK_BACK_PERIOD_S = 30.0
SMOOTHING_FACTOR = 1.0
UPSCALE_DELAY_S = 30.0
DOWNSCALE_DELAY_S = 600.0


def ray_desired(total: float, running: int, target: float, smoothing: float = SMOOTHING_FACTOR) -> int:
    """`_calculate_desired_num_replicas` without the min/max clamp."""
    if running == 0:
        return 1 if total > 0 else 0
    error = total / (target * running)
    return math.ceil(running * (1.0 + (error - 1.0) * smoothing) - 1e-12)


class RayServe(OwnLoopController):
    """Ray Serve's autoscaler on target ongoing requests (see the module doc)."""

    def __init__(self, *, target: float = TARGET_ONGOING_REQUESTS, max_replicas: int = 64, min_replicas: int = 1,
                 upscale_delay_s: float = UPSCALE_DELAY_S, downscale_delay_s: float = DOWNSCALE_DELAY_S,
                 metrics_interval_s: float = METRICS_INTERVAL_S, look_back_s: float = LOOK_BACK_PERIOD_S) -> None:
        if not target > 0:
            raise ValueError(f"ray-serve: target_ongoing_requests must be > 0, got {target}")
        super().__init__("ray-serve", scrape_s=metrics_interval_s, tick_s=metrics_interval_s,
                         initial_replicas=max(1, min_replicas), min_replicas=min_replicas, max_replicas=max_replicas)
        self.target = target
        self.up_delay, self.down_delay = upscale_delay_s, downscale_delay_s
        self.look_back = look_back_s
        self.window = TimeWindow(look_back_s)
        self._direction = 0
        self._since = 0.0
        self._expiry: float | None = None

    def sample(self, sim: Simulation, sig: Signals) -> None:
        self.window.add(sig.at, sig.concurrency)

    def next_time(self) -> float | None:
        base = super().next_time()
        return base if self._expiry is None or base is None else min(base, self._expiry)

    def tick(self, sim: Simulation) -> None:
        if self._expiry is not None and sim.now >= self._expiry - 1e-9:
            self._expiry = None
            want = self.decide(sim)
            if want is not None:
                self.write(sim, want)
        super().tick(sim)

    def decide(self, sim: Simulation) -> int | None:
        now = sim.now
        total = self.window.average(now, self.look_back)
        if total is None:
            return None
        spec, ready = self.counts(sim)
        want = max(self.min_replicas, min(self.max_replicas, ray_desired(total, ready, self.target)))
        direction = (want > spec) - (want < spec)
        if direction != self._direction:
            self._direction, self._since = direction, now
        if direction == 0:
            self._expiry = None
            return None
        delay = self.up_delay if direction > 0 else self.down_delay
        if spec == 0 and direction > 0:
            delay = 0.0
        if now - self._since + 1e-9 >= delay:
            self.reason = f"ongoing {total:.1f}"
            self._direction = 0
            self._expiry = None
            return want
        self._expiry = self._since + delay
        return None
