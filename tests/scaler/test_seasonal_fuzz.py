"""scaler.seasonal on arbitrary minute histories: gaps, zeros, spikes, idle days, odd epochs and lengths.

Whatever the data, a forecast is None or finite with 0 <= point <= upper, and its fields agree with
the model it came from."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from keda_llm.scaler.seasonal import BUCKET, DAY, seasonal_forecast


@st.composite
def histories(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, float, float]:
    days = draw(st.one_of(st.floats(0.5, 15.0), st.sampled_from([1.0, 2.0, 14.0, 14.5])))
    n = int(days * DAY)
    start = draw(st.integers(-10**6, 10**8))  # minutes since the epoch, before it too
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    base = 0.0 if draw(st.integers(0, 9)) == 9 else draw(st.floats(1e-6, 1e9))  # idle, or 1e-6/s and up
    m = np.arange(start, start + n)
    values = base * (1 + 0.5 * np.sin(2 * np.pi * m / DAY)) * rng.lognormal(0, draw(st.floats(0, 2)), n)
    for _ in range(draw(st.integers(0, 4))):  # idle spells, gaps, spikes, negative junk
        a = int(rng.integers(0, n))
        b = a + int(rng.integers(1, 3 * DAY))
        kind = draw(st.sampled_from(["zero", "nan", "spike", "negative", "inf"]))
        values[a:b] = {"zero": 0.0, "nan": np.nan, "spike": base * 1e3 + 1, "negative": -5.0, "inf": np.inf}[kind]
    now = (start + n) * BUCKET + draw(st.floats(0, BUCKET * 3))
    return m * BUCKET, values, now, draw(st.floats(0, 3600))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.floats(0.01, 0.99), st.floats(0, 600))
def test_any_history_gives_none_or_a_sane_forecast(h: tuple[np.ndarray, np.ndarray, float, float], quantile: float,
                                                   span: float) -> None:
    times, values, now, horizon = h
    f = seasonal_forecast(times, values, now, horizon, quantile=quantile, span=span)
    event("none" if f is None else f.method)
    if f is None:
        return
    assert math.isfinite(f.point) and math.isfinite(f.upper) and math.isfinite(f.level)
    assert 0.0 <= f.point <= f.upper
    assert 1 <= f.days <= 14
    assert f.method == ("daily+weekly" if f.days == 14 else "daily")
    assert f.target == now + horizon
    again = seasonal_forecast(times, values, now, horizon, quantile=quantile, span=span, model=f.model)
    assert again is not None and again.model is f.model and again.point == f.point
