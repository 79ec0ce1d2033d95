"""Seasonal demand forecast over a model's minute history: a daily (with two weeks, also weekly) profile
scaled to the current level, and an upper quantile from the model's own backtested errors.

Why: `scaler.forecast` (Holt over 10 s buckets of ~7 minutes) sees a diurnal rise only as the trend
it is at minute scale, after it has started. LLM traffic repeats daily (the Azure 2024 week: night at
a third of the afternoon), so the rate one cold start ahead is mostly "the shape of the day at that
time, at today's level". Pure numpy, arrays in and a dataclass out; the caller (the scaler, off the
RPC path) keeps the fitted `SeasonalModel` per model and refits it hourly (`seasonal_forecast`).

Method (and why):

- Profile (`fit`): the last whole days (up to 14) of minute buckets, as day windows ending at the
  last complete bucket. Each day is scaled to the typical day's level (its ratio to the per-minute
  median day, over the minutes it has), then the per-minute median across days (robust to a spike on
  one day and to gaps), smoothed over +-`smooth` minutes (circular) to take the per-minute noise out.
  Days with too few buckets (`min_coverage`) or no traffic (a model idle for days) stay out.
- Weekly: a day-of-week profile needs each weekday seen more than once, or it is one noisy day: so
  only with 14 usable days (two full weeks, the history's whole length), and then blended half and
  half with the daily profile (`weekly_weight`: each weekday has two samples, the daily profile 14).
  Below that, a weekend's lower level is the level factor's job.
- Level (`predict`): recent demand over the profile at the same minutes, exponentially weighted
  (half-life `half_life`, 5 min, over the last `level_window`, 60 buckets): 1.0 is a typical day,
  1.3 a day 30% busier than usual at this hour, which the forecast then follows. It is the trend term:
  within a day the profile's slope is the trend, across days the level. The average of several noisy
  minutes, not the last one, is what beats the last value a few minutes ahead; a longer half-life (20,
  40 min) lost to the last value when chosen on days 1-4 -> 5 of the Azure week (the held-back test
  scores days 6-7). A bucket counts for at most `CLIP` x the median ratio of the newest 5, so one
  spike moves the level by a bounded step, while traffic that resumes after an idle spell counts
  once it has lasted 3 minutes.
- Target: the bucket holding `now + horizon` (horizon = the measured cold start p90 + KEDA's poll +
  the HPA sync, see `scaler.forecast.horizon_seconds`); with `span` > 0, the largest profile value of
  the buckets overlapping [now + horizon - span, now + horizon + span], for capacity that must serve
  a whole interval. At minute buckets and a 10 s poll one bucket is the interval a decision serves.
- Upper quantile (split conformal): the forecaster is backtested over the newest `backtest_days`
  days of its own history at the same horizon, each day's forecasts from a profile that left that day
  out (`residual_source` "leave-one-day-out"; with one day only, "in-sample", which is optimistic).
  Residuals are scaled by sqrt(point + floor) (count noise grows as the rate's square root; chosen
  over proportional scaling by the pinball loss on days 1-4 -> 5), floor = `floor_fraction` x the
  mean rate; `upper = point + q x sqrt(point + floor)` with q the residuals' conformal `quantile`. A
  noisy model gets more headroom than a smooth one. The backtest's level is not clipped and uses the
  daily profile even when the weekly one serves: close to, not exactly, what `predict` does.
- None when there is not one whole day with data and traffic, or no data within the level window.

statsmodels' Holt-Winters is the reference in tests and bench (bench/README.md, "Seasonal forecast"),
not a dependency: it brings pandas and scipy, and its fit over 1,440 seasonal states costs ~0.6 s CPU
per model, where this fits in a few milliseconds (hourly) and updates in tens of microseconds.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

BUCKET = 60.0  # seconds: minute buckets
DAY = 1440  # buckets per day
WEEK = 7 * DAY
MAX_DAYS = 14  # the history's length; older buckets are ignored
HALF_LIFE = 5.0  # minutes: the level's exponential weights (chosen on days 1-4 -> 5 of the Azure week)
LEVEL_WINDOW = 60  # buckets the level reads (at a 5 min half-life the older weights are < 2^-12)
CLIP = 4.0  # a recent bucket counts for at most CLIP x the median ratio to the profile of the newest CLIP_OF
CLIP_OF = 5  # buckets with data: one spike is clipped, traffic resuming after an idle hour is not
SMOOTH = 5  # the profile's moving average: +-5 minutes
MIN_COVERAGE = 0.5  # a day window enters the profile when at least half its buckets hold data
WEEKLY_WEIGHT = 0.5
FLOOR_FRACTION = 0.05  # of the history's mean rate: keeps a quiet hour's residual scale above zero
QUANTILE = 0.9
BACKTEST_DAYS = 7  # the residuals come from the newest 7 days: each weekday once, ~10,000 forecasts
SCALE_POWER = 0.5  # residuals over (point + floor) ** 0.5: count noise grows as the rate's square root
REFIT_EVERY = 3600.0  # seconds: the profile and residuals change slowly; the level is recomputed per call
SHAPE_FLOOR = 0.01  # the profile never goes below 1% of a typical minute, so the level stays finite

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class SeasonalModel:
    """What `fit` learnt from a model's history: the per-minute profile and the backtested residuals.

    `daily` is indexed by absolute minute of day (floor(t / 60) mod 1440) and `weekly` by minute of
    week (floor(t / 60) mod 10080), both in the history's units at a typical day's level."""

    fitted_at: float  # `now` of the fit
    horizon: float  # the residuals' horizon, seconds
    days: int  # day windows that went into the profile
    daily: FloatArray
    weekly: FloatArray | None  # the blended daily+weekly profile; None below two weeks
    residuals: FloatArray  # sorted scaled residuals of the backtested forecasts
    residual_source: str  # "leave-one-day-out" or "in-sample"
    floor: float  # added to the point before the square root, history units
    half_life: float  # minutes
    level_window: int  # buckets

    @property
    def method(self) -> str:
        return "daily+weekly" if self.weekly is not None else "daily"

    def profile(self, buckets: npt.NDArray[np.int64]) -> FloatArray:
        """The profile at absolute bucket indices (floor(t / 60))."""
        if self.weekly is not None:
            return self.weekly[buckets % WEEK]
        return self.daily[buckets % DAY]


@dataclass(frozen=True)
class SeasonalForecast:
    """Demand in the bucket holding `now + horizon`: the point forecast, its upper quantile, and why."""

    point: float
    upper: float  # point + residual_q x sqrt(point + floor), never below point
    quantile: float  # the nominal level of `upper`
    horizon: float  # seconds
    target: float  # now + horizon
    method: str  # "daily" or "daily+weekly"
    days: int  # day windows in the profile
    level: float  # recent demand / the profile over the level window (1 = a typical day)
    profile: float  # the profile at the target, history units
    residual_q: float  # the scaled residuals' conformal `quantile`
    residuals: int  # how many backtested forecasts the quantile comes from
    residual_source: str
    model: SeasonalModel  # keep it and pass it back: `seasonal_forecast` refits only when it is stale


def _check(times: npt.ArrayLike, values: npt.ArrayLike, now: float, horizon: float) -> tuple[FloatArray, FloatArray]:
    ts = np.asarray(times, dtype=np.float64)
    vs = np.asarray(values, dtype=np.float64)
    if ts.ndim != 1 or vs.ndim != 1 or ts.shape != vs.shape:
        raise ValueError(f"seasonal: times and values must be 1-D and of one length, got {ts.shape} and {vs.shape}")
    if not np.all(np.isfinite(ts)):
        raise ValueError("seasonal: times must be finite (a gap is a NaN value, not a missing time)")
    if not math.isfinite(now):
        raise ValueError(f"seasonal: now must be finite, got {now}")
    if not (math.isfinite(horizon) and horizon >= 0):
        raise ValueError(f"seasonal: horizon must be a finite number of seconds >= 0, got {horizon}")
    return ts, vs


def _grid(ts: FloatArray, vs: FloatArray, end: int, length: int) -> FloatArray:
    """The buckets [end - length, end) as one array, NaN where no value (or a non-finite one) came;
    a negative value is not a demand and counts as a gap."""
    out = np.full(length, np.nan)
    idx = np.floor(ts / BUCKET).astype(np.int64) - (end - length)
    ok = (idx >= 0) & (idx < length) & np.isfinite(vs) & (vs >= 0)
    out[idx[ok]] = vs[ok]
    return out


def _smooth(shape: FloatArray, half_width: int) -> FloatArray:
    """Circular moving average of a day's (or week's) profile; NaN slots are filled from neighbours."""
    n = len(shape)
    ok = np.isfinite(shape)
    if not ok.any():
        return np.ones(n)
    k = np.ones(2 * half_width + 1)

    def pad(a: FloatArray) -> FloatArray:
        return np.concatenate([a[-half_width:], a, a[:half_width]]) if half_width else a

    num = np.convolve(pad(np.where(ok, shape, 0.0)), k, mode="valid")
    den = np.convolve(pad(ok.astype(np.float64)), k, mode="valid")
    out = np.divide(num, den, out=np.full(n, np.nan), where=den > 0)
    if not np.isfinite(out).all():  # a gap wider than the window: interpolate circularly
        good = np.flatnonzero(np.isfinite(out))
        x = np.arange(n)
        out = np.interp(x, np.concatenate([good - n, good, good + n]), np.tile(out[good], 3))
    return np.asarray(out, dtype=np.float64)


def _shape(rows: FloatArray, smooth: int) -> FloatArray:
    """Per-column median of day rows already scaled to one level, smoothed, floored; mean 1."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: filled by _smooth
        med = np.nanmedian(rows, axis=0)
    shape = _smooth(np.asarray(med, dtype=np.float64), smooth)
    mean = float(shape.mean())
    if mean <= 0:
        return np.ones(rows.shape[1])
    return np.asarray(np.maximum(shape / mean, SHAPE_FLOOR), dtype=np.float64)


def _day_scales(rows: FloatArray) -> tuple[FloatArray, float]:
    """Each day's level relative to the per-minute median day (over the minutes it has data), and that
    median day's mean rate (history units)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ref = np.nanmedian(rows, axis=0)
    ok = np.isfinite(rows) & np.isfinite(ref)[None, :]
    num = np.where(ok, rows, 0.0).sum(axis=1)
    den = np.where(ok, ref[None, :], 0.0).sum(axis=1)
    scales = np.asarray(np.divide(num, den, out=np.zeros(len(rows)), where=den > 0), dtype=np.float64)
    return scales, float(_smooth(np.asarray(ref, dtype=np.float64), 0).mean())  # a minute no day has: interpolated


def _level_series(x: FloatArray, p: FloatArray, half_life: float, window: int) -> FloatArray:
    """Causal level at every bucket: sum(w x) / sum(w p) over the finite x of the last `window` buckets."""
    ok = np.isfinite(x)
    k = 0.5 ** (np.arange(window) / half_life)
    num = np.convolve(np.where(ok, x, 0.0), k)[: len(x)]
    den = np.convolve(np.where(ok, p, 0.0), k)[: len(x)]
    return np.asarray(np.divide(num, den, out=np.full(len(x), np.nan), where=den > 0), dtype=np.float64)


def fit(times: npt.ArrayLike, values: npt.ArrayLike, now: float, horizon: float, *,
        half_life: float = HALF_LIFE, level_window: int = LEVEL_WINDOW, smooth: int = SMOOTH,
        min_coverage: float = MIN_COVERAGE, weekly_weight: float = WEEKLY_WEIGHT,
        floor_fraction: float = FLOOR_FRACTION, backtest_days: int = BACKTEST_DAYS) -> SeasonalModel | None:
    """Learn the profile and the backtested residuals from minute buckets (start `times` in seconds,
    `values` with NaN gaps) complete by `now`, for forecasts `horizon` seconds ahead.

    None when no whole day window holds data and traffic (see the module docstring)."""
    ts, vs = _check(times, values, now, horizon)
    if not (half_life > 0 and level_window >= 1 and smooth >= 0 and 0 < min_coverage <= 1
            and 0 <= weekly_weight <= 1 and floor_fraction > 0 and backtest_days >= 1):
        raise ValueError("seasonal: half_life > 0, level_window >= 1, smooth >= 0, min_coverage in (0, 1], "
                         "weekly_weight in [0, 1], floor_fraction > 0 and backtest_days >= 1 are required")
    end = math.floor(now / BUCKET)  # buckets with index < end are complete
    if len(ts) == 0:
        return None
    first = int(np.floor(ts.min() / BUCKET))
    n_days = min(MAX_DAYS, max(0, end - first) // DAY)
    if n_days < 1:
        return None
    n = n_days * DAY
    grid = _grid(ts, vs, end, n)
    rows = grid.reshape(n_days, DAY)  # oldest day first; column j is absolute minute (end + j) mod DAY
    usable = np.isfinite(rows).mean(axis=1) >= min_coverage
    if not usable.any():
        return None
    scales = np.zeros(n_days)
    scales[usable], ref_mean = _day_scales(rows[usable])
    usable &= scales > 0
    if not usable.any():
        return None
    typical = float(np.median(scales[usable]))  # a typical day's level, relative to the median day
    norm = np.where(usable[:, None], rows / np.where(usable, scales, 1.0)[:, None] * typical, np.nan)
    mean_rate = typical * ref_mean  # the profile's level: a typical day's mean rate, history units
    cols = _shape(norm[usable], smooth) * mean_rate
    daily = np.roll(cols, end % DAY)
    weekly = None
    if int(usable.sum()) >= 2 * 7:
        week_rows = norm[-2 * 7:].reshape(2, WEEK)  # the two weeks, column j = minute (end + j) mod WEEK
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            week_mean = np.nanmean(week_rows, axis=0)
        week_cols = np.maximum(_smooth(np.asarray(week_mean, dtype=np.float64), smooth), SHAPE_FLOOR * mean_rate)
        weekly = (1 - weekly_weight) * np.tile(daily, 7) + weekly_weight * np.roll(week_cols, end % WEEK)

    # Backtest: the last `backtest_days` usable days, each against a profile that left that day out
    # (the older days' buckets only feed the level at the first backtested minutes).
    floor = floor_fraction * max(float(np.nanmean(grid)), 1e-12)
    prof = np.tile(cols, (n_days, 1))
    tested = np.zeros(n_days, dtype=bool)
    tested[np.flatnonzero(usable)[-backtest_days:]] = True
    source = "in-sample"
    if int(usable.sum()) >= 2:
        source = "leave-one-day-out"
        for d in np.flatnonzero(tested):
            others = usable.copy()
            others[d] = False
            prof[d] = _shape(norm[others], smooth) * mean_rate
    p = prof.reshape(-1)
    level = _level_series(grid, p, half_life, level_window)
    lead = 1 + math.floor(horizon / BUCKET)  # origin at a bucket's end -> the bucket holding end + horizon
    origin = np.arange(level_window, n - lead)
    day_of = (origin + lead) // DAY
    keep = tested[day_of] & np.isfinite(level[origin]) & np.isfinite(grid[origin + lead])
    origin = origin[keep]
    point = level[origin] * p[origin + lead]
    resid = np.sort((grid[origin + lead] - point) / (point + floor) ** SCALE_POWER)
    return SeasonalModel(now, float(horizon), int(usable.sum()), daily, weekly, resid, source, floor,
                         float(half_life), int(level_window))


def predict(model: SeasonalModel, times: npt.ArrayLike, values: npt.ArrayLike, now: float, horizon: float, *,
            quantile: float = QUANTILE, span: float = 0.0) -> SeasonalForecast | None:
    """The forecast for the bucket holding `now + horizon` from a fitted model and the recent buckets.

    Only the buckets of the level window are read (pass the whole history or its tail). None when
    none of them holds data."""
    ts, vs = _check(times, values, now, horizon)
    if not 0 < quantile < 1:
        raise ValueError(f"seasonal: quantile must be in (0, 1), got {quantile}")
    if not (math.isfinite(span) and span >= 0):
        raise ValueError(f"seasonal: span must be a finite number of seconds >= 0, got {span}")
    end = math.floor(now / BUCKET)
    window = model.level_window
    sel = ts >= (end - window) * BUCKET - BUCKET / 2
    recent = _grid(ts[sel], vs[sel], end, window)
    ok = np.isfinite(recent)
    if not ok.any():
        return None
    buckets = np.arange(end - window, end, dtype=np.int64)
    w = 0.5 ** ((end - 1 - buckets[ok]) / model.half_life)
    prof_ok = model.profile(buckets[ok])
    x = recent[ok]
    if CLIP > 0:
        x = np.minimum(x, CLIP * float(np.median((x / prof_ok)[-CLIP_OF:])) * prof_ok)
    level = float(np.sum(w * x)) / float(np.sum(w * prof_ok))  # > 0 denominator: the profile is floored
    target = now + horizon
    if span > 0:  # the buckets overlapping [target - span, target + span]
        lo = math.floor((target - span) / BUCKET)
        hi = max(lo, math.ceil((target + span) / BUCKET) - 1)
    else:
        lo = hi = math.floor(target / BUCKET)
    prof = float(np.max(model.profile(np.arange(lo, hi + 1, dtype=np.int64))))
    point = max(0.0, level * prof)
    res = model.residuals
    if len(res):
        # The conformal rank: the ceil((n + 1) q)-th smallest residual (the largest when that is past n).
        rank = min(len(res), math.ceil((len(res) + 1) * quantile)) - 1
        q = float(res[rank])
    else:
        q = 0.0
    upper = max(point, point + q * (point + model.floor) ** SCALE_POWER)
    return SeasonalForecast(point, upper, quantile, float(horizon), target, model.method, model.days, level, prof,
                            q, len(res), model.residual_source, model)


def seasonal_forecast(times: npt.ArrayLike, values: npt.ArrayLike, now: float, horizon: float, *,
                      quantile: float = QUANTILE, span: float = 0.0, model: SeasonalModel | None = None,
                      refit_every: float = REFIT_EVERY, half_life: float = HALF_LIFE,
                      level_window: int = LEVEL_WINDOW, smooth: int = SMOOTH) -> SeasonalForecast | None:
    """Fit (when `model` is None, older than `refit_every` or made for another horizon) and predict.

    Keep `result.model` per scaled model and pass it back: a refit costs a few milliseconds, a
    prediction from a kept model tens of microseconds. None: under one whole day of history, or no
    recent data (the caller falls back to `scaler.forecast`)."""
    stale = (model is None or not (0 <= now - model.fitted_at < refit_every)
             or abs(model.horizon - horizon) >= BUCKET)
    if stale:
        model = fit(times, values, now, horizon, half_life=half_life, level_window=level_window, smooth=smooth)
        if model is None:
            return None
    assert model is not None
    return predict(model, times, values, now, horizon, quantile=quantile, span=span)
