"""scaler/forecast.py: Holt's linear trend, the bounds, the hold, gaps; every number derived by hand.

Buckets are 10 s, times are bucket starts, a bucket's value stands for its middle. With 12 buckets
starting at 0..110 and now = 120, the newest middle is 115, so a 225 s horizon is a lead of
(120 + 225 - 115) / 10 = 23 buckets.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from keda_llm.scaler.forecast import Forecast, forecast, holt, horizon_seconds

T12 = np.arange(12) * 10.0


def test_horizon_is_cold_start_plus_poll_plus_hpa_sync() -> None:
    assert horizon_seconds(180.0, 30.0) == 225.0
    assert horizon_seconds(180.0, 30.0, override=300.0) == 300.0


def test_holt_follows_an_exact_ramp() -> None:
    states = holt(np.arange(8) * 10.0, 2.0 + 0.5 * np.arange(8))
    assert [s.at for s in states] == [10.0 * i for i in range(8)]
    assert [s.level for s in states] == pytest.approx([2.0 + 0.5 * i for i in range(8)], abs=1e-12)
    assert [s.trend for s in states] == pytest.approx([0.5] * 8, abs=1e-12)


def test_holt_update_by_hand() -> None:
    """alpha 0.5, beta 0.5, 2 init points: values 0, 2 -> level 0, trend 2 (their slope); then
    value 2 at bucket 2: level 0.5 x 2 + 0.5 x (2 + 2) = 3, trend 0.5 x (3 - 2) + 0.5 x 2 = 1.5."""
    states = holt([0.0, 10.0, 20.0], [0.0, 2.0, 2.0], alpha=0.5, beta=0.5, init_points=2)
    assert [(s.level, s.trend) for s in states] == [(0.0, 2.0), (2.0, 2.0), (3.0, 1.5)]


# (label, values over T12, current, kwargs, desired, raw). The peak guard (the largest bucket of the
# last horizon, halved per horizon of age; the newest middle is 5 s old) stays under these answers
# unless a case turns it off (peak_half_life 0) or is about it.
CASES = [
    ("flat", [5.0] * 12, 5.0, {}, 5.0, 5.0),
    # level 1 + 0.1 x 11 = 2.1, trend 0.1: 2.1 + 0.1 x 23 = 4.4; cap 3 x 2.1 = 6.3
    ("ramp: anticipated by the lead", [1.0 + 0.1 * i for i in range(12)], 2.1, {}, 4.4, 4.4),
    # level 12, trend 1: 12 + 23 = 35; cap 2 x 12 = 24
    ("steep ramp: capped at max_ratio x current", [1.0 + i for i in range(12)], 12.0, {"max_ratio": 2.0}, 24.0,
     35.0),
    # level 1, trend -1: 1 - 23 = -22 -> 0
    ("falling: never below 0", [12.0 - i for i in range(12)], 1.0, {"peak_half_life": 0.0}, 0.0, -22.0),
    # the guard: bucket 0 (12, middle 5, age 115) is the largest: 12 x 2^(-115/225)
    ("falling: the peak guard keeps recent demand", [12.0 - i for i in range(12)], 1.0, {},
     12 * 2 ** (-115 / 225), -22.0),
    # current None: the newest value (12) stands for it; cap 3 x 12 = 36 > 35
    ("no current: the newest value", [1.0 + i for i in range(12)], None, {}, 35.0, 35.0),
    ("current NaN: the newest value", [1.0 + i for i in range(12)], math.nan, {"max_ratio": 2.0}, 24.0, 35.0),
    ("current 0: the cap is 0", [5.0] * 12, 0.0, {"peak_half_life": 0.0}, 0.0, 5.0),
    # the guard is not capped: the newest 5, 5 s old: 5 x 2^(-5/225)
    ("current 0: the peak guard is not capped", [5.0] * 12, 0.0, {}, 5 * 2 ** (-5 / 225), 5.0),
    # 20 then flat 4: the robust start ignores the 20 (Holt stays at 4); the guard sees it only when its
    # age (115 s) is within the horizon: 120 s -> 20 x 2^(-115/120); 100 s -> the newest 4 x 2^(-5/100) < 4
    ("old peak within the horizon", [20.0] + [4.0] * 11, 4.0, {"horizon": 120.0}, 20 * 2 ** (-115 / 120), 4.0),
    ("old peak beyond the horizon", [20.0] + [4.0] * 11, 4.0, {"horizon": 100.0}, 4.0, 4.0),
]


@pytest.mark.parametrize("label,values,current,kwargs,desired,raw", CASES, ids=[c[0] for c in CASES])
def test_forecast(label: str, values: list[float], current: float | None, kwargs: dict[str, float],
                  desired: float, raw: float) -> None:
    kwargs = dict(kwargs)
    horizon = kwargs.pop("horizon", 225.0)
    f = forecast(T12, values, 120.0, horizon, current, **kwargs)  # type: ignore[arg-type]
    assert f is not None
    assert f.desired == pytest.approx(desired, abs=1e-9)
    assert f.raw == pytest.approx(raw, abs=1e-9)
    assert f.points == 12
    assert f.horizon == horizon


def test_too_little_history_is_none() -> None:
    assert forecast(T12[:11], [5.0] * 11, 120.0, 225.0, 5.0) is None
    assert forecast(T12, [5.0] * 11 + [math.nan], 120.0, 225.0, 5.0) is None  # 11 with data
    assert forecast([], [], 120.0, 225.0, 5.0) is None
    assert forecast(T12, [5.0] * 12, 120.0, 225.0, 5.0, min_points=13) is None


def test_nan_and_inf_are_skipped_and_the_trend_steps_over_the_gap() -> None:
    """An exact ramp 1 + 0.1 i over 14 buckets with buckets 5 and 9 NaN/inf: 12 points, and Holt over
    a 2-bucket gap predicts level + 2 trend, which is on the line, so the state stays exact.
    Newest bucket 13 (middle 135), now 140: lead (140 + 225 - 135) / 10 = 23; 2.3 + 2.3 = 4.6."""
    values = [1.0 + 0.1 * i for i in range(14)]
    values[5], values[9] = math.nan, math.inf
    f = forecast(np.arange(14) * 10.0, values, 140.0, 225.0, 2.3)
    assert f is not None
    assert f.points == 12
    assert f.level == pytest.approx(2.3, abs=1e-12)
    assert f.trend_per_s == pytest.approx(0.01, abs=1e-12)
    assert f.desired == pytest.approx(4.6, abs=1e-9)


def test_spike_is_held_then_decays() -> None:
    """Flat 4 for buckets 0..29, 10 in bucket 30, then 4 again (defaults alpha 0.3, beta 0.1).
    Bucket 30: level 0.3 x 10 + 0.7 x 4 = 5.8, trend 0.1 x 1.8 = 0.18; lead 23 -> 5.8 + 4.14 = 9.94.
    Bucket 31: prediction 5.98, level 0.3 x 4 + 0.7 x 5.98 = 5.386, trend 0.1 x (5.386 - 5.8) +
    0.9 x 0.18 = 0.1206 -> 5.386 + 2.7738 = 8.1598; the hold (60 s) still answers bucket 30's 9.94.
    The peak guard is 10 x 2^(-(now - 305) / 225) while now - 305 <= 225: under 9.94 while the hold
    lasts, the answer after it (Holt has decayed), and gone from now = 540: then under 4."""
    t = np.arange(60) * 10.0
    v = np.full(60, 4.0)
    v[30] = 10.0

    def at(n: int) -> Forecast:
        f = forecast(t[:n], v[:n], n * 10.0, 225.0, 4.0)
        assert f is not None
        return f

    assert [at(31).raw, at(31).desired] == pytest.approx([9.94, 9.94], abs=1e-9)
    assert [at(32).raw, at(32).desired] == pytest.approx([8.1598, 9.94], abs=1e-9)
    assert at(36).desired == pytest.approx(9.94, abs=1e-9)  # bucket 30 ended at 310 > 360 - 60
    assert at(37).desired < 9.94  # 310 is no longer > 370 - 60
    for n in range(40, 54):
        assert at(n).desired == pytest.approx(10 * 2 ** (-(10 * n - 305) / 225), abs=1e-9), n
        assert at(n).peak == at(n).desired
    for n in range(54, 61):  # the spike is older than the horizon: no lasting inflation
        assert at(n).peak < 4.0 and at(n).desired <= 4.0, n


def test_hold_takes_the_largest_recent_projection() -> None:
    """A ramp 1 + 0.1 i for 12 buckets, then flat at 2.1 for one: bucket 12's level is 0.3 x 2.1 +
    0.7 x 2.2 = 2.17, trend 0.1 x 0.07 + 0.9 x 0.1 = 0.097; lead (130 + 225 - 125) / 10 = 23:
    raw 2.17 + 2.231 = 4.401. Bucket 11 (ended at 120, inside the 60 s hold): 2.1 + 0.1 x 23 = 4.4.
    With hold 0 only the newest counts."""
    values = [1.0 + 0.1 * i for i in range(12)] + [2.1]
    times = np.arange(13) * 10.0
    f = forecast(times, values, 130.0, 225.0, 2.1)
    assert f is not None
    assert f.raw == pytest.approx(4.401, abs=1e-9)
    assert f.held == pytest.approx(4.401, abs=1e-9)
    # A dip instead: value 1.0 at bucket 12: level 0.3 + 1.54 = 1.84, trend 0.1 x -0.26 + 0.09 = 0.064
    # -> raw 1.84 + 1.472 = 3.312; the hold keeps bucket 11's 4.4; hold 0 does not.
    values[-1] = 1.0
    held = forecast(times, values, 130.0, 225.0, 2.1)
    bare = forecast(times, values, 130.0, 225.0, 2.1, hold=0.0)
    assert held is not None and bare is not None
    assert held.raw == pytest.approx(3.312, abs=1e-9)
    assert held.desired == pytest.approx(4.4, abs=1e-9)
    assert bare.desired == pytest.approx(3.312, abs=1e-9)
