"""Demand forecast one cold start ahead: pure functions of a model's history and `now`.

Why: a reactive scaler adds a replica when demand is already there, and the replica serves minutes
later (an LLM replica's cold start). A forecast of demand at `now + horizon`, with horizon = cold start
+ KEDA poll + HPA sync, asks for the replica in time.

Method (and why):

- The signal is the policy's own desired-replica series (`desired_series`): the configured policy
  (tokens, concurrency, kvCache, queue) applied to each complete 10 s bucket of the history. It is
  unit-free, so one forecaster serves every policy, and it is what the reactive path sizes from.
- Holt's linear trend (double exponential smoothing, `holt`): a level and a per-bucket trend, updated
  on each bucket. Cheap (one pass over ~60 points), no fitting, and it extrapolates a ramp exactly,
  which is the case that hurts a reactive scaler most. Gaps (NaN buckets) are skipped and the trend
  is stepped over them. ARIMA/Prophet (Dynamo Planner's choices) need more data than the ~15 min of
  10 s buckets the history keeps and cost far more per poll.
- Hold (`hold`, the stable window): the answer is the largest forecast made over the last stable window
  (the HPA's scale-down stabilization, applied to the forecast), so bucket-to-bucket noise in the trend
  does not flap the count; a spike leaves the forecast after the hold plus Holt's geometric decay.
- Bounds: never below 0, never above `max_ratio` x the current desired (a noisy trend x a 10-minute
  horizon must not run away), None when fewer than `min_points` buckets hold data.
- Peak guard: at least the largest bucket of the last horizon, halved for each horizon of its age.
  A replica released now takes a cold start to come back, so capacity that demand used within one
  cold start is let go over that time scale, not within a stable window. In backtests this is what
  stops the reactive loop's cycle (queue builds during a cold start -> burst of replicas -> queue
  drains -> released within a minute -> queue builds again); see bench/results/forecast.md.
- No seasonality here: the 10 s tier keeps minutes. The daily and weekly cycle is
  `scaler.seasonal`'s, read from the long (minute, 14-day) tier; `decide` takes the larger of the two.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from keda_llm.scaler.config import ScalerConfig
from keda_llm.scaler.history import FIELDS, HistoryView, Load, Snapshot
from keda_llm.scaler.policy import NoSignal, demand

BUCKET = 10.0  # seconds: the history's 10 s tier
LOOKBACK = 400.0  # seconds the forecaster reads: the 10 s tier (over 300 s); Holt forgets the older ones
MIN_POINTS = 12  # buckets with data (2 minutes) before a forecast is made
HPA_SYNC = 15.0  # the HPA controller's sync period (kube-controller-manager default)
ALPHA = 0.3  # level smoothing
BETA = 0.1  # trend smoothing: at 10 s buckets, ~85% of a new ramp's slope after 150 s
MAX_RATIO = 3.0  # default cap: forecast <= MAX_RATIO x the current desired
# A bucket holds demand data when one of these is reported; the policies read a missing one as 0.
_DEMAND_COLUMNS = [FIELDS.index(name) for name in ("running", "waiting", "kv_used", "upstream")]


@dataclass(frozen=True)
class HoltPoint:
    """Holt's state after one bucket: level (replicas) and trend (replicas per bucket)."""

    at: float  # the bucket's start time
    level: float
    trend: float


@dataclass(frozen=True)
class Forecast:
    """Forecast desired replicas (not rounded) at `now + horizon`, and the numbers behind it."""

    desired: float  # bounded: in [0, cap]
    horizon: float  # seconds ahead of now
    level: float  # Holt's level at the newest bucket
    trend_per_s: float  # Holt's trend at the newest bucket, replicas per second
    raw: float  # the newest bucket's projection, before the hold and the bounds
    held: float  # the largest projection over the hold window, before the bounds
    cap: float  # max_ratio x current
    points: int  # buckets with data that went in
    peak: float  # the peak guard: recent demand, decayed


def horizon_seconds(cold_start: float, polling_interval: float, override: float | None = None) -> float:
    """How far ahead to forecast: a replica asked for now serves after KEDA's poll, the HPA's sync and
    its cold start. `override` (the `forecastHorizon` key) replaces the sum."""
    if override is not None:
        return override
    return cold_start + polling_interval + HPA_SYNC


def _robust_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(value at xs[0], slope) by Theil-Sen: the median pairwise slope, then the median intercept. The
    forecaster re-runs over a sliding window, so a spike in its first buckets must not set the trend."""
    slopes = [(ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs))
              if xs[j] != xs[i]]
    slope = statistics.median(slopes) if slopes else 0.0
    return statistics.median(y - slope * (x - xs[0]) for x, y in zip(xs, ys, strict=True)), slope


def holt(times: npt.ArrayLike, values: npt.ArrayLike, *, alpha: float = ALPHA, beta: float = BETA,
         bucket: float = BUCKET, init_points: int = 6) -> list[HoltPoint]:
    """Holt's linear trend over (time, value) buckets, oldest first; NaN/inf values are skipped.

    Starts from a robust line through the first `init_points` values (exact on an exact ramp, so a
    ramp is followed exactly from the start); a gap of g buckets steps the trend g times.
    """
    ts = np.asarray(times, dtype=np.float64)
    vs = np.asarray(values, dtype=np.float64)
    ok = np.isfinite(vs) & np.isfinite(ts)
    t_list: list[float] = (ts[ok] / bucket).tolist()
    v_list: list[float] = vs[ok].tolist()
    if not v_list:
        return []
    k = min(init_points, len(v_list))
    level, trend = _robust_line(t_list[:k], v_list[:k])
    out = [HoltPoint(t_list[0] * bucket, level, trend)]
    for i in range(1, len(v_list)):
        gap = t_list[i] - t_list[i - 1]
        if gap <= 0:
            continue
        new_level = alpha * v_list[i] + (1 - alpha) * (level + gap * trend)
        trend = beta * (new_level - level) / gap + (1 - beta) * trend
        level = new_level
        out.append(HoltPoint(t_list[i] * bucket, level, trend))
    return out


def forecast(times: npt.ArrayLike, values: npt.ArrayLike, now: float, horizon: float, current: float | None, *,
             hold: float = 60.0, max_ratio: float = MAX_RATIO, min_points: int = MIN_POINTS,
             peak_half_life: float | None = None, alpha: float = ALPHA, beta: float = BETA,
             bucket: float = BUCKET) -> Forecast | None:
    """Desired replicas at `now + horizon` from complete buckets (start times `times`, means `values`).

    Each bucket's value stands for its middle; the projection from bucket i is level_i + trend_i x the
    lead of the newest bucket's middle to now + horizon. The answer is the largest projection from the
    buckets that ended within `hold` seconds of now, bounded to [0, max_ratio x current]; then at
    least the peak guard: the largest bucket of the last `horizon` seconds, halved every
    `peak_half_life` seconds of age (None: the horizon; 0: no guard). The guard is not capped: it is
    demand that was seen, and what it keeps is capacity that could not come back within a cold start.
    `current` (the reactive desired now) None or not finite: the newest value stands for it. None:
    fewer than `min_points` buckets with data.
    """
    states = holt(times, values, alpha=alpha, beta=beta, bucket=bucket)
    if len(states) < min_points:
        return None
    last = states[-1]
    lead = (now + horizon - (last.at + bucket / 2)) / bucket  # in buckets
    projections = [s.level + s.trend * lead for s in states if s.at + bucket > now - hold] or [
        last.level + last.trend * lead]
    raw = last.level + last.trend * lead
    held = max(projections)
    ts, vs = np.asarray(times, dtype=np.float64), np.asarray(values, dtype=np.float64)
    seen = np.isfinite(vs)
    if current is None or not math.isfinite(current):
        current = float(vs[seen][-1])
    cap = max_ratio * max(0.0, current)
    half_life = horizon if peak_half_life is None else peak_half_life
    age = now - (ts + bucket / 2)
    recent = seen & (age <= horizon)
    peak = 0.0
    if half_life > 0 and recent.any():
        peak = float(np.max(np.maximum(vs[recent], 0.0) * 0.5 ** (age[recent] / half_life)))
    desired = max(min(max(held, 0.0), cap), peak)
    return Forecast(desired, horizon, last.level, last.trend / bucket, raw, held, cap, len(states), peak)


def desired_series(history: HistoryView, config: ScalerConfig, snap: Snapshot | None, now: float,
                   lookback: float = LOOKBACK, bucket: float = BUCKET) -> tuple[npt.NDArray[np.float64],
                                                                                npt.NDArray[np.float64]]:
    """(bucket start times, the configured policy's desired replicas per bucket) over the complete
    buckets of the last `lookback` seconds (in (300, 900]: the history's 10 s tier). A bucket where no
    demand signal was reported, or that the policy cannot size (NoSignal), is NaN."""
    columns = [history.series(name, now, lookback) for name in FIELDS]
    times = columns[0][0]
    complete = times + bucket <= now
    rows = np.column_stack([c[1] for c in columns])[complete]
    out = np.full(rows.shape[0], math.nan)
    has_demand = np.asarray((~np.isnan(rows[:, _DEMAND_COLUMNS])).any(axis=1), dtype=bool)  # else a gap, not 0
    for i, row in enumerate(rows.tolist()):
        if has_demand[i]:
            with contextlib.suppress(NoSignal):  # stays NaN: skipped by the forecaster
                out[i] = demand(Load(*[None if v != v else v for v in row]), config, snap).desired  # v != v: NaN
    return times[complete], out
