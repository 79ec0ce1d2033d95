"""decide() with `mode: hybrid` / `proactive` against `reactive` on the same timelines.

The fleet reports every second from t = 10 (bucket [10, 20) is the history's first full 10 s bucket),
policy `concurrency` with targetConcurrency 10, so a bucket's desired replicas = its mean running / 10.
coldStart 120s and KEDA's default pollingInterval 30s give the horizon 120 + 30 + 15 = 165 s.

The ramp running(t) = 20 + 0.1 t, hand-derived:
- bucket k (t = 10k..10k+9) has desired 2 + 0.01 (10k + 4.5) = 2.045 + 0.1 k: an exact line, which
  Holt's linear trend follows exactly (level = the bucket's value, trend 0.1 per bucket);
- at a poll `now` = 10 m the newest complete bucket is m - 1, its middle 10 m - 5, so the lead is
  (165 + 5) / 10 = 17 buckets and the forecast is 2.045 + 0.1 (m - 1) + 1.7 = 3.645 + 0.01 now;
- reactive (stable window 60 s): mean running over t = now-59..now is 20 + 0.1 (now - 29.5), so
  desired = 1.705 + 0.01 now. The forecast is ahead by the horizon plus the window's half (194 s).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

from keda_llm.scaler.config import parse_metadata
from keda_llm.scaler.decide import decide
from keda_llm.scaler.history import ModelHistory
from keda_llm.scaler.model import Decision, Observation, PolicyState, ReplicaSample, WorkloadState

BASE = {"model": "m", "policy": "concurrency", "targetConcurrency": "10", "coldStart": "120s"}
START = 10


@dataclass
class Run:
    decisions: dict[int, Decision] = field(default_factory=dict)

    def replicas(self) -> dict[int, int]:
        return {t: d.replicas for t, d in self.decisions.items()}

    def first_at(self, replicas: int) -> int:
        return min(t for t, d in self.decisions.items() if d.replicas >= replicas)


def run(mode: str, running: Callable[[int], float], polls: list[int], ready0: int = 3,
        metadata: dict[str, str] | None = None) -> Run:
    """The fleet follows each decision at once (no load time: the pending guard stays out of the way)."""
    config = parse_metadata({**BASE, "mode": mode, **(metadata or {})})
    history = ModelHistory("ns", "m", stale_after=config.stale_after)
    state = PolicyState(initialized=True)
    pods = ready0
    out = Run()
    for t in range(START, max(polls) + 1):
        total = running(t)
        share, waiting = (total / pods, 0.0) if math.isfinite(total) else (math.nan, math.nan)
        samples = tuple(ReplicaSample(f"p{i}", float(t), running=share, waiting=waiting) for i in range(pods))
        history.ingest(Observation("ns", "m", float(t), samples))
        if t in polls:
            decision, state = decide(history, config, state, WorkloadState(pods, pods), float(t))
            out.decisions[t] = decision
            pods = decision.replicas
    return out


def ramp(t: int) -> float:
    return 20.0 + 0.1 * t


POLLS = list(range(120, 461, 10))


def test_ramp_is_anticipated_by_the_horizon() -> None:
    reactive, hybrid = run("reactive", ramp, POLLS), run("hybrid", ramp, POLLS)
    # Reactive: ceil(1.705 + 0.01 now) reaches 6 once now > 329.5, 7 once now > 429.5.
    assert reactive.first_at(6) == 330
    assert reactive.first_at(7) == 430
    # Hybrid: ceil(3.645 + 0.01 now) reaches 6 once now > 135.5, 7 once now > 235.5.
    assert hybrid.first_at(6) == 140
    assert hybrid.first_at(7) == 240
    d = hybrid.decisions[140]
    assert (d.replicas, d.reason) == (6, "forecast_up")
    assert d.details["forecast_horizon_s"] == 165.0
    assert d.details["forecast_desired_raw"] == pytest.approx(5.045, abs=1e-9)
    assert d.details["forecast_trend_per_s"] == pytest.approx(0.01, abs=1e-12)
    assert d.details["forecast_points"] == 13  # buckets 1..13
    assert d.details["would_be_replicas"] == 4  # what the windows asked: ceil(1.705 + 1.4)
    assert d.details["forecast_demand"] == pytest.approx(50.45, abs=1e-7)  # 5.045 replicas x 10 requests
    # Hybrid never asks for fewer than reactive would at the same poll.
    for t in POLLS:
        assert hybrid.decisions[t].replicas >= math.ceil(1.705 + 0.01 * t - 1e-9), t


def test_too_little_history_is_reactive_only() -> None:
    """At 120 only buckets 1..11 are complete (fewer than 12): no forecast, the windows decide."""
    hybrid = run("hybrid", ramp, [120])
    d = hybrid.decisions[120]
    assert (d.replicas, d.reason) == (3, "steady")  # ceil(1.705 + 1.2) = 3, as many as run
    assert d.details["forecast_available"] == 0.0
    assert "forecast_desired" not in d.details


def test_flat_load_is_reactive() -> None:
    """Running 34 throughout: every bucket 3.4, the trend 0, the forecast 3.4 -> 4, as reactive."""
    polls = list(range(130, 601, 15))
    reactive, hybrid = run("reactive", lambda t: 34.0, polls, 4), run("hybrid", lambda t: 34.0, polls, 4)
    assert hybrid.replicas() == reactive.replicas() == {t: 4 for t in polls}
    assert {d.reason for d in hybrid.decisions.values()} == {"steady"}
    assert hybrid.decisions[595].details["forecast_desired_raw"] == pytest.approx(3.4, abs=1e-9)


def test_reactive_mode_does_not_forecast() -> None:
    d = run("reactive", ramp, [200]).decisions[200]
    assert not any(k.startswith("forecast") for k in d.details)


def test_nan_buckets_are_skipped() -> None:
    """Running and waiting NaN for t = 200..209 (an engine's gauges): bucket 20 is a gap, not a zero. Holt steps over it
    and stays on the line, so the forecast at 260 is the gap-free one: 3.645 + 2.6 = 6.245."""
    def gappy(t: int) -> float:
        return math.nan if 200 <= t <= 209 else ramp(t)

    d = run("hybrid", gappy, [150, 260]).decisions[260]
    assert d.details["forecast_points"] == 24  # buckets 1..25 without 20
    assert d.details["forecast_desired_raw"] == pytest.approx(6.245, abs=1e-9)
    assert d.replicas == 7


def spike(t: int) -> float:
    return 100.0 if 300 <= t <= 309 else 40.0


def test_spike_that_vanishes_leaves_with_its_decay() -> None:
    """Running 40 (4 replicas) with one 10 s bucket (30, middle 305) at 100. Reactive: the stable window
    asks for ceil(4.1) = 5 at 300, and at 310 the panic window's 9 is under 2 x 5 ready: no panic, 5.
    Hybrid is the larger of
    - Holt, from bucket 30 (see test_forecast): level 0.3 x 10 + 0.7 x 4 = 5.8, trend 0.18, so
      5.8 + 0.18 x 17 = 8.86, held while bucket 30 is in the 60 s hold (310..360); at 370 the largest
      is bucket 31's: level 0.3 x 4 + 0.7 x 5.98 = 5.386, trend 0.1 x (5.386 - 5.8) + 0.9 x 0.18 =
      0.1206, 5.386 + 0.1206 x 17 = 7.4362;
    - the peak guard, 10 x 2^(-(now - 305) / 165) while now - 305 <= 165:
      310: 9.79 -> 10, 320: 9.39 -> 10, 330: 9.003 -> 10, 340..360: 8.63, 8.28, 7.94 < 8.86 -> 9,
      370: 7.61 > 7.4362 -> 8, 470: exactly 5 -> 5.
    From 480 the spike is older than the horizon: back to reactive's count, and it stays there.
    scaleDownDelay 0s isolates the forecast's own decay (the delay would hold 10 for a cold start)."""
    polls = list(range(130, 721, 10))
    no_delay = {"scaleDownDelay": "0s"}
    reactive, hybrid = run("reactive", spike, polls, 4, no_delay), run("hybrid", spike, polls, 4, no_delay)
    assert [reactive.decisions[t].replicas for t in (290, 300, 310, 360)] == [4, 5, 5, 5]
    assert [hybrid.decisions[t].replicas for t in range(310, 371, 10)] == [10, 10, 10, 9, 9, 9, 8]
    assert hybrid.decisions[470].replicas == 5
    d310, d370 = hybrid.decisions[310].details, hybrid.decisions[370].details
    assert d310["forecast_holt"] == pytest.approx(8.86, abs=1e-9)
    assert d310["forecast_peak"] == pytest.approx(10 * 2 ** (-5 / 165), abs=1e-9)
    assert d370["forecast_desired_raw"] == pytest.approx(10 * 2 ** (-65 / 165), abs=1e-9)
    for t in polls:
        assert hybrid.decisions[t].replicas >= reactive.decisions[t].replicas, t
        if t >= 480:
            assert hybrid.decisions[t].replicas == reactive.decisions[t].replicas, t
    assert hybrid.decisions[720].replicas == 4


def changes(r: Run) -> int:
    counts = [r.decisions[t].replicas for t in sorted(r.decisions)]
    return sum(1 for a, b in itertools.pairwise(counts) if a != b)


def test_noise_does_not_flap() -> None:
    """Running 45 +- 10 (uniform, per second, fixed seed) for 30 minutes, a poll every 15 s: the
    forecast's hold keeps hybrid's count from changing more often than reactive's, and within one
    replica above it."""
    noise = np.random.default_rng(7).uniform(-10.0, 10.0, 2000)
    polls = list(range(130, 1800, 15))

    def noisy(t: int) -> float:
        return 45.0 + float(noise[t])

    reactive, hybrid = run("reactive", noisy, polls, 5), run("hybrid", noisy, polls, 5)
    assert changes(hybrid) <= changes(reactive)
    for t in polls:
        assert 0 <= hybrid.decisions[t].replicas - reactive.decisions[t].replicas <= 1, t


def falling(t: int) -> float:
    return 80.0 - 0.1 * t


def test_proactive_scales_down_ahead_of_a_falling_ramp() -> None:
    """running 80 - 0.1 t: bucket k's desired is 7.955 - 0.1 k, so the forecast at now is
    8.005 - 0.01 now - 1.65; reactive's stable desired is 8 - 0.01 (now - 29.5).
    130: forecast 5.055 -> 6, windows ceil(6.995) = 7, ready 8 allows down to 4: 6, forecast_down.
    200: forecast 4.355 -> 5, windows ceil(6.295) = 7, ready 6 allows down to 3: 5, forecast_down.
    Hybrid keeps the windows' count: the forecast never removes a replica."""
    proactive = run("proactive", falling, [130, 200], 8)
    assert [(d.replicas, d.reason) for d in proactive.decisions.values()] == [(6, "forecast_down"),
                                                                               (5, "forecast_down")]
    hybrid = run("hybrid", falling, [130, 200], 8)
    assert [(d.replicas, d.reason) for d in hybrid.decisions.values()] == [(7, "scale_down"), (7, "steady")]


def test_forecast_horizon_override_and_cap() -> None:
    """forecastHorizon 600s: the ramp forecast at 140 is 1.995 + 1.4 + 6.0 = 9.395; forecastMaxRatio 2
    caps it at 2 x the current desired, max(stable 3.105, panic 20 + 0.1 x 137.5 -> 3.375) = 6.75 -> 7."""
    d = run("hybrid", ramp, [140], metadata={"forecastHorizon": "600s", "forecastMaxRatio": "2"}).decisions[140]
    assert d.details["forecast_horizon_s"] == 600.0
    assert d.details["forecast_cap"] == pytest.approx(6.75, abs=1e-9)
    assert (d.replicas, d.reason) == (7, "forecast_up")
