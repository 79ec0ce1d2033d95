"""The seasonal forecast in decide (scaler/decide.py `_seasonal`): a daily ramp seen on past days is provisioned
one horizon before it comes back, and only in the modes and with the history that allow it."""

from __future__ import annotations

import pytest

from keda_llm.scaler.config import parse_metadata
from keda_llm.scaler.decide import decide
from keda_llm.scaler.history import ModelHistory
from keda_llm.scaler.longhistory import decode, unpack
from keda_llm.scaler.model import Observation, PolicyState, ReplicaSample, WorkloadState

DAY = 86400.0
BUSY_FROM, BUSY_TO = 8 * 3600.0, 20 * 3600.0  # 08:00-20:00 UTC: 5x the night's rate


def rate(t: float) -> float:
    """Requests per second: 2 at night, 10 in the day."""
    return 10.0 if BUSY_FROM <= t % DAY < BUSY_TO else 2.0


def _observations(until: float, step: float = 30.0) -> list[Observation]:
    """Two replicas scraped every `step` seconds; counters grow at the day's rate, 500 prompt and 100 output tokens
    a request; running requests follow the rate (Little: 2 s in the system), KV 1,000 tokens a running request."""
    out = []
    done = 0.0
    t = 0.0
    while t <= until:
        done += rate(t) * step
        running = rate(t) * 2.0 / 2
        out.append(Observation("ns", "m", t, tuple(
            ReplicaSample(pod, t, running=running, waiting=0.0, kv_usage_ratio=running * 1000 / 100_000,
                          kv_capacity_tokens=100_000.0, prompt_tokens_total=500 * done / 2,
                          generation_tokens_total=100 * done / 2, requests_finished_total=done / 2)
            for pod in ("a", "b"))))
        t += step
    return out


def feed(h: ModelHistory, until: float, step: float = 30.0) -> None:
    for obs in _observations(until, step):
        h.ingest(obs)


def run(meta: dict[str, str], now: float, h: ModelHistory) -> dict[str, float]:
    cfg = parse_metadata({"model": "m", "coldStart": "10m", "policy": "concurrency", "targetConcurrency": "2",
                          "mode": "hybrid", **meta})
    d, state = decide(h, cfg, PolicyState(initialized=True), WorkloadState(2, 2, polling_interval_s=10.0), now)
    return {**d.details, "replicas": float(d.replicas), "kept": float(len(state.seasonal))}


@pytest.fixture(scope="module")
def three_days() -> ModelHistory:
    h = ModelHistory("ns", "m")
    feed(h, 3 * DAY + BUSY_FROM - 5 * 60)  # to 07:55 on day 4, five minutes before the morning rise
    return h


def test_the_morning_rise_is_provisioned_one_horizon_ahead(three_days: ModelHistory) -> None:
    now = 3 * DAY + BUSY_FROM - 5 * 60
    hybrid = run({}, now, three_days)
    reactive = run({"mode": "reactive"}, now, three_days)
    # reactive: 2 requests/s x 2 s in the system = 4 running over targetConcurrency 2 = 2 replicas
    assert reactive["replicas"] == 2 and "seasonal_growth" not in reactive
    # horizon 600 + 10 + 15 = 625 s: 08:05:25 is in the busy day (past the profile's +-5 minute smoothing of
    # the 08:00 step), 5x the recent night rate; the upper quantile adds headroom on top (the history is
    # noise-free, so little)
    assert hybrid["forecast_horizon_s"] == pytest.approx(625.0)
    assert hybrid["seasonal_available"] == 1.0
    assert hybrid["seasonal_finished_rate_recent"] == pytest.approx(2.0, rel=0.01)
    assert hybrid["seasonal_growth"] == pytest.approx(5.0, rel=0.05)
    assert hybrid["seasonal_desired_raw"] == pytest.approx(2 * 5.0, rel=0.05)
    assert hybrid["replicas"] == 10
    assert hybrid["kept"] == 3  # the three signals' fitted models, reused for an hour


def test_a_quiet_horizon_adds_nothing() -> None:
    now = 3 * DAY + BUSY_FROM - 3600  # 07:00: the horizon ends at 07:10, still night
    h = ModelHistory("ns", "m")
    feed(h, now)
    d = run({}, now, h)
    assert d["seasonal_growth"] == pytest.approx(1.0, abs=0.05)
    assert d["replicas"] == run({"mode": "reactive"}, now, h)["replicas"] == 2


def test_seasonality_off_and_too_little_history() -> None:
    h = ModelHistory("ns", "m")
    feed(h, 0.4 * DAY)
    # under half a day: no day window holds enough minutes (scaler/seasonal.py MIN_COVERAGE): the trend alone
    d = run({}, 0.4 * DAY, h)
    assert d["seasonal_available"] == 0.0 and "seasonal_growth" not in d
    off = run({"seasonality": "off"}, 0.4 * DAY, h)
    assert "seasonal_available" not in off


def test_a_restarted_pod_forecasts_as_the_one_that_ran_through() -> None:
    """A pod restarted ten minutes before the rise gets its long tier back (the restorer merges minutes from
    Prometheus or its snapshot: `LongTier.merge`, what both paths end in; tests/scaler/test_history_long*.py
    hold those minutes equal to the live ones) and then the same live feed: it decides as the pod that ran
    through, seasonal forecast included."""
    now = 3 * DAY + BUSY_FROM - 5 * 60
    restart = now - 600
    through = ModelHistory("ns", "m")
    feed(through, now)
    before = ModelHistory("ns", "m")
    feed(before, restart)
    minutes, words = before.long.export()
    restarted = ModelHistory("ns", "m")
    restarted.long.merge(minutes, decode(unpack(words)))
    # the live feed after the restart (the same scrapes the other pod took)
    for obs in [o for o in _observations(now) if o.at > restart]:
        restarted.ingest(obs)
    a, b = run({}, now, through), run({}, now, restarted)
    seasonal = {k: v for k, v in a.items() if k.startswith("seasonal")}
    assert seasonal and seasonal == pytest.approx({k: b[k] for k in seasonal}, rel=0.01)
    assert a["replicas"] == b["replicas"] == 10
