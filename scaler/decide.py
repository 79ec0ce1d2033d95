"""The one entry point: decide(history, config, state, workload, now) -> (Decision, new PolicyState).

Pure: no clock, no I/O, no globals. The servicer and the simulator call it with their own `now`.
A decision is a pipeline of named steps, each of which may change the count and, if it does,
names the reason:

1. data check      nothing usable -> raise NoData (the servicer answers UNAVAILABLE)
2. policy + KPA    windowed demand -> Knative stable/panic decision with rate limits (windows.py)
2b. forecast       mode proactive/hybrid: desired one horizon ahead (forecast.py); hybrid only adds
3. pending guard   replicas still starting are supply that is coming: no scale-up past them
3b. scale-down delay  the largest count decided within scaleDownDelay (default: the cold start) holds
4. stale hold      some replica stopped reporting: never scale down on that
5a. warm window   warmWindows: at least the open window's desiredReplicas (schedule.py), then clamped
5. min/max clamp   config overrides, else the ScaledObject's bounds
6. zero            scaleToZero: inactive (0) after idleTimeout without demand; wake on demand/activation
7. advisory        hand back the current count, with the would-be decision attached
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from keda_llm.scaler.config import ScalerConfig
from keda_llm.scaler.forecast import desired_series, forecast, horizon_seconds
from keda_llm.scaler.health import assess
from keda_llm.scaler.history import HistoryView, Load, ReplicaWindow, Snapshot
from keda_llm.scaler.model import Decision, NoData, PolicyState, Reason, WorkloadState
from keda_llm.scaler.policy import DEFAULT_COLD_START, NoSignal, cold_start_of, demand
from keda_llm.scaler.pools import decide_pool, pooled
from keda_llm.scaler.schedule import warm_floor
from keda_llm.scaler.seasonal import BUCKET as MINUTE
from keda_llm.scaler.seasonal import LEVEL_WINDOW, MAX_DAYS, REFIT_EVERY, SeasonalModel, seasonal_forecast
from keda_llm.scaler.slo import (
    LatencyDesired,
    floor_raised_factor,
    from_window,
    latency_basis,
    mean_output_tokens,
    short_output_factor,
    without_pinned,
)
from keda_llm.scaler.windows import KpaResult, ceil_replicas, initial_panic, kpa_step, scale_down_delay

PENDING_GUARD_FACTOR = 2.0  # the guard lets go after this many cold starts: pods stuck pending get help
DELAY_FACTOR_MAX = 4.0  # the default scale-down delay grows to at most this many cold starts
DELAY_FACTOR_QUIET = 8.0  # cold starts without a regretted release before the delay halves again
MIX_WINDOW = 600.0  # seconds: the traffic's mix (output tokens per request) is read over this, not a minute


def activate(state: PolicyState, at: float) -> PolicyState:
    """Record an external activation (POST /v1/activate, a peer's relay) at time `at`: demand, as of then."""
    last = at if state.last_activation_at is None else max(state.last_activation_at, at)
    return replace(state, last_activation_at=last, active=True)


@dataclass
class _Step:
    """The count as it moves through the steps, and the last step that changed it."""

    replicas: int
    override: Reason | None = None
    would_be: int | None = None

    def set(self, replicas: int, reason: Reason) -> None:
        if replicas != self.replicas:
            if self.would_be is None:
                self.would_be = self.replicas
            self.replicas = replicas
            self.override = reason


def _check_data(snap: Snapshot | None, config: ScalerConfig, workload: WorkloadState, now: float,
                history: HistoryView) -> Snapshot:
    at_zero = workload.current_replicas == 0 and workload.ready_replicas == 0
    if at_zero and (snap is None or now - snap.at > config.stale_after):
        # Nothing runs, so nothing reports: that is a fact, not missing data. Only activations wake it.
        return Snapshot(now, 0, 0, 0, math.inf, Load(), None, None)
    if snap is None:
        raise NoData(f"no observation of model {history.model!r} in {history.namespace!r} yet")
    if now - snap.at > config.stale_after:
        raise NoData(f"last collection for model {history.model!r} was {now - snap.at:.1f}s ago "
                     f"(staleAfter {config.stale_after:g}s)")
    if snap.fresh == 0 and workload.ready_replicas > 0:
        raise NoData(f"none of the {workload.ready_replicas} ready replicas of model {history.model!r} reported "
                     f"within staleAfter {config.stale_after:g}s ({snap.stale} stale, {snap.loading} loading)")
    return snap


def _initial(state: PolicyState, config: ScalerConfig, workload: WorkloadState, now: float) -> PolicyState:
    if state.initialized:
        return state
    panic_since, max_panic = initial_panic(workload.ready_replicas, now)
    running = workload.current_replicas > 0
    return replace(state, initialized=True, panic_since=panic_since, max_panic_pods=max_panic,
                   last_demand_at=now if running else None, active=running or not config.scale_to_zero)


def _base_reason(kpa: KpaResult | None, replicas: int, current: int) -> Reason:
    if kpa is not None and kpa.panicking:
        return Reason.PANIC
    if kpa is not None and kpa.rate_limited_up and replicas == kpa.max_scale_up:
        return Reason.RATE_LIMITED_UP
    if kpa is not None and kpa.rate_limited_down and replicas == kpa.max_scale_down:
        return Reason.RATE_LIMITED_DOWN
    if replicas > current:
        return Reason.SCALE_UP
    if replicas < current:
        return Reason.SCALE_DOWN
    return Reason.STEADY


@dataclass(frozen=True)
class _Inputs:
    """What every step reads: the data as judged at `now`."""

    history: HistoryView
    config: ScalerConfig
    workload: WorkloadState
    snap: Snapshot
    now: float

    @property
    def current(self) -> int:
        return self.workload.current_replicas

    @property
    def missing(self) -> int:
        """Ready in Kubernetes, absent from the data."""
        return max(0, self.workload.ready_replicas - self.snap.fresh - self.snap.stale)

    @property
    def stale_data(self) -> bool:
        return self.snap.stale > 0 or self.missing > 0

    @property
    def pending(self) -> int:
        """Replicas starting: created but not ready, or listed but never up."""
        return max(0, self.current - self.workload.ready_replicas, self.snap.loading)


def _windows(x: _Inputs, state: PolicyState, details: dict[str, float]) -> tuple[_Step, KpaResult | None,
                                                                                  PolicyState]:
    """Step 2: the policy's demand over the stable and panic windows, then Knative's decision."""
    if x.snap.fresh == 0:
        # Nobody reports and nobody is ready: scaled to zero, or every replica still loading. Hold.
        details.update({"demand": x.snap.latest.upstream or 0.0, "panic": float(state.panic_since is not None)})
        return _Step(x.current, Reason.PENDING_GUARD if x.current > 0 else None), None, state
    c = x.config
    try:
        stable = demand(x.history.window(x.now, c.stable_window), c, x.snap)
        panic = demand(x.history.window(x.now, c.panic_window), c, x.snap)
    except NoSignal as e:
        raise NoData(str(e)) from None
    # Degraded replicas count as their fraction of one (scaler/health.py): the windows ask for the deficit more.
    off = c.degraded_fraction >= 1.0 and c.slow_replica_ratio <= 0.0  # both rules off: no per-replica reads
    latency_on = c.target_ttft is not None or c.target_itl is not None
    # the stable window's per-replica means, read once for the health rules and the latency term
    replicas = x.history.replica_windows(x.now, c.stable_window, c.stale_after) if latency_on or not off else []
    health = assess([] if off else replicas,
                    c.degraded_fraction, c.slow_replica_ratio)
    stable, panic = health.apply(stable), health.apply(panic)
    details.update(health.details())
    lat_stable, lat_panic = _latency(x, details, replicas)
    stable_desired = max(stable.desired, lat_stable.desired if lat_stable else 0.0)
    panic_desired = max(panic.desired, lat_panic.desired if lat_panic else 0.0)
    kpa = kpa_step(stable_desired, panic_desired, x.workload.ready_replicas, state.panic_since, state.max_panic_pods,
                   x.now, stable_window=c.stable_window, panic_threshold=c.panic_threshold,
                   max_scale_up_rate=c.max_scale_up_rate, max_scale_down_rate=c.max_scale_down_rate)
    details.update(stable.parts)
    details.update({
        "demand": stable.demand, "demand_panic": panic.demand, "capacity_per_replica": stable.per_replica,
        "capacity": stable.per_replica * x.snap.fresh, "desired_stable_raw": stable.desired,
        "desired_panic_raw": panic.desired, "dspc": kpa.dspc, "dppc": kpa.dppc, "desired_stable": kpa.stable,
        "desired_panic": kpa.panic, "max_scale_up": kpa.max_scale_up, "max_scale_down": kpa.max_scale_down,
        "panic": float(kpa.panicking), "kpa_desired": kpa.desired,
        "desired_windows_raw": max(stable_desired, panic_desired),
    })
    by_latency = any(t is not None and t.desired > d for t, d in ((lat_stable, stable.desired),
                                                                  (lat_panic, panic.desired)))
    if by_latency:
        details["latency_desired"] = min(ceil_replicas(max(stable_desired, panic_desired)), kpa.max_scale_up)
    up = by_latency and kpa.desired > x.current
    step = _Step(kpa.desired, Reason.LATENCY_UP if up else None)
    return step, kpa, replace(state, panic_since=kpa.panic_since, max_panic_pods=kpa.max_panic_pods)


def _latency(x: _Inputs, details: dict[str, float], replicas: list[ReplicaWindow]
             ) -> tuple[LatencyDesired | None, LatencyDesired | None]:
    """Step 2 (with targetTimeToFirstToken/targetInterTokenLatency): the latency term over both windows
    (scaler/slo.py); the windows then take the larger of it and the policy's count. Both windows' ratios
    multiply the replicas the stable window's signal reflects (`latency_basis`), not those ready now. The
    ITL target is judged at no less than FLOOR_HEADROOM x the replicas' ITL floor (seconds, the history's
    last fit: scaler/itl_floor.py), where no count brings the ITL lower; with `itlScaling: busy` an ITL under
    its target is also read against that floor (scaler/slo.py `busy_ratio`)."""
    c = x.config
    if c.target_ttft is None and c.target_itl is None:
        return None, None
    stable = x.history.window(x.now, c.stable_window)
    basis = latency_basis(x.workload.ready_replicas, stable.replicas)
    details["latency_replicas_basis"] = basis
    factor = 1.0 if c.target_itl is None else _itl_factor(x, c.target_itl, details)
    # replicas whose queue is pinned to them are left out of the means (scaler/slo.py `without_pinned`)
    unpinned = [without_pinned(replicas, c.target_ttft),
                without_pinned(x.history.replica_windows(x.now, c.panic_window, c.stale_after), c.target_ttft)]
    floor = x.history.itl_floor() if c.target_itl is not None and c.itl_scaling == "busy" else None
    out = (from_window(stable, c.stable_window, basis, c, factor, unpinned[0], itl_floor=floor),
           from_window(x.history.window(x.now, c.panic_window), c.panic_window, basis, c, factor, unpinned[1],
                       panic=True, itl_floor=floor))
    for name, u in zip(("", "_panic"), unpinned, strict=True):
        if u is not None:
            details["latency_pinned_replicas" + name] = float(u.pinned)
    for name, t in zip(("", "_panic"), out, strict=True):
        details["latency_signal" + name] = float(t is not None)
        if t is not None:
            details.update({"latency_ratio" + name: t.ratio, "latency_desired_raw" + name: t.desired,
                            "latency_completed" + name: t.completed})
            if t.ttft is not None:
                details["observed_ttft_s" + name] = t.ttft
            if t.itl is not None:
                details["observed_itl_s" + name] = t.itl
            if t.queue_wait is not None:  # under QUEUE_SHARE of the TTFT, the TTFT is not judged (slo.py)
                details["queue_wait_s" + name] = t.queue_wait
    if c.target_ttft is not None:
        details["target_ttft_s"] = c.target_ttft
    if c.target_itl is not None:
        details["target_itl_s"] = c.target_itl
    return out


def _itl_factor(x: _Inputs, target_itl: float, details: dict[str, float]) -> float:
    """What the ITL target is multiplied by: the short-output allowance (scaler/slo.py), raised where the
    target sits below FLOOR_HEADROOM x the replicas' fitted ITL floor."""
    c = x.config
    factor = 1.0
    if c.short_output_tokens > 0:
        n = mean_output_tokens(x.history.window(x.now, max(c.stable_window, MIX_WINDOW)))
        factor = short_output_factor(n, c.short_output_tokens)
        details.update({"itl_short_output_factor": factor, "target_itl_effective_s": target_itl * factor})
        if n is not None:
            details["mean_output_tokens"] = n
    floor = x.history.itl_floor()
    if floor is not None:
        raised = floor_raised_factor(target_itl, factor, floor)
        details.update({"itl_floor_s": floor, "itl_target_below_floor": float(raised > factor)})
        if raised > factor:
            factor = raised
            details["target_itl_effective_s"] = target_itl * factor
    return factor


SEASONAL_SIGNALS = ("finished_rate", "prompt_rate", "generation_rate")  # requests/s, prompt and output tokens/s
SEASONAL_RECENT = 5  # minutes: the current rate a seasonal forecast is compared with (the level's half-life)
SEASONAL_RETRY = 600.0  # seconds between fits while the history is too short for one


def _seasonal(x: _Inputs, horizon: float, current: float, state: PolicyState,
              details: dict[str, float]) -> tuple[float | None, PolicyState]:
    """Step 2b, seasonal part: the current desired count (the windows', latency term included) x the growth
    the seasonal forecasts expect one horizon ahead (their upper `forecastQuantile` over the mean of the last
    SEASONAL_RECENT minutes), the median over request rate and prompt and output tokens/s. Replica counts
    scale with the rates for a given mix, so the current count times the growth is the count then, and the
    upper quantile is headroom sized by the model's own past errors. The median, not the largest: each
    ratio carries minute-scale noise, and the largest of three noisy ratios is biased upward (on the 2024
    code week the largest ran 1.3-1.9 through quiet nights and, through the scale-down delay, cost 2.8x the
    oracle's GPU-hours).
    None under a day of minute history or with no recent traffic (the trend forecast alone then). The
    fitted models are kept in the state (refit hourly): a decision reads the last hour of minutes, a refit
    the whole history."""
    c = x.config
    if c.seasonality == "off":
        return None, state
    failed = state.seasonal_failed_at
    if not state.seasonal and failed is not None and 0 <= x.now - failed < SEASONAL_RETRY:
        details["seasonal_available"] = 0.0  # under a day of history: a fit reads 14 days, so not every decision
        return None, state
    kept: dict[str, SeasonalModel] = dict(state.seasonal)
    ratios: list[float] = []
    for name in SEASONAL_SIGNALS:
        model = kept.get(name)
        fresh = (model is not None and 0 <= x.now - model.fitted_at < REFIT_EVERY
                 and abs(model.horizon - horizon) < MINUTE)
        lookback = (LEVEL_WINDOW + SEASONAL_RECENT) * MINUTE if fresh else MAX_DAYS * 86400.0
        times, values = x.history.minutes(name, x.now, lookback)
        fc = seasonal_forecast(times, values, x.now, horizon, quantile=c.forecast_quantile,
                               model=model if fresh else None)
        if fc is None:
            kept.pop(name, None)
            continue
        kept[name] = fc.model
        recent_values = values[-SEASONAL_RECENT:]
        seen = recent_values[np.isfinite(recent_values)]
        recent = float(seen.mean()) if seen.size else math.nan
        if not recent > 0:
            continue
        ratios.append(fc.upper / recent)
        details.update({f"seasonal_{name}_upper": fc.upper, f"seasonal_{name}_point": fc.point,
                        f"seasonal_{name}_recent": recent, f"seasonal_{name}_ratio": fc.upper / recent,
                        "seasonal_days": float(fc.days), "seasonal_level": fc.level})
    state = replace(state, seasonal=tuple(sorted(kept.items())), seasonal_failed_at=None if kept else x.now)
    if not ratios:
        details["seasonal_available"] = 0.0
        return None, state
    growth = float(np.median(ratios))
    details.update({"seasonal_available": 1.0, "seasonal_growth": growth, "seasonal_desired_raw": current * growth})
    return current * growth, state


def _forecast(x: _Inputs, step: _Step, kpa: KpaResult | None, state: PolicyState,
              details: dict[str, float]) -> PolicyState:
    """Step 2b: `proactive` sizes for the demand forecast one horizon ahead; `hybrid` takes the larger of
    that (with the peak guard: recent demand, decayed over a horizon) and the windows' count, so the
    forecast only adds replicas ahead of demand and keeps them for about a cold start. The forecast is the
    larger of the short-range trend (Holt over 10 s buckets) and, with a day or more of minute history, the
    seasonal one (`_seasonal`). Both within the KPA rate limits; the pending guard after this step applies
    to forecast scale-ups too (no cascade while replicas load). No forecast (too little history, no data):
    the windows' count stands."""
    c = x.config
    if c.mode == "reactive" or kpa is None:
        return state
    cold = _cold_start(x)
    horizon = horizon_seconds(cold, x.workload.polling_interval_s, c.forecast_horizon)
    current = max(details["desired_stable_raw"], details["desired_panic_raw"])
    times, values = desired_series(x.history, c, x.snap, x.now)
    # The peak guard keeps capacity used within a cold start (hybrid); proactive is the forecast alone.
    fc = forecast(times, values, x.now, horizon, current, hold=c.stable_window, max_ratio=c.forecast_max_ratio,
                  peak_half_life=0.0 if c.mode == "proactive" else None)
    # the seasonal growth scales the count the windows sized, latency term included
    seasonal, state = _seasonal(x, horizon, details.get("desired_windows_raw", current), state, details)
    details["forecast_horizon_s"] = horizon
    details["forecast_available"] = float(fc is not None or seasonal is not None)
    if fc is None and seasonal is None:
        return state
    desired = max(fc.desired if fc is not None else 0.0, seasonal or 0.0)
    wanted = min(max(ceil_replicas(desired), kpa.max_scale_down), kpa.max_scale_up)
    details.update({"forecast_desired_raw": desired, "forecast_desired": wanted,
                    "forecast_demand": desired * details["capacity_per_replica"]})
    if fc is not None:
        details.update({"forecast_level": fc.level, "forecast_trend_per_s": fc.trend_per_s, "forecast_cap": fc.cap,
                        "forecast_points": fc.points, "forecast_holt": fc.raw, "forecast_peak": fc.peak})
    if wanted > step.replicas:
        step.set(wanted, Reason.FORECAST_UP)
    elif c.mode == "proactive" and wanted < step.replicas:
        step.set(wanted, Reason.FORECAST_DOWN)
    return state


def _pending_guard(x: _Inputs, step: _Step, kpa: KpaResult | None, state: PolicyState,
                   details: dict[str, float]) -> PolicyState:
    """Step 3: replicas still starting are supply that is coming. While they load (up to
    PENDING_GUARD_FACTOR cold starts), no scale-up past the current count: the queue that builds
    meanwhile is what they will serve, not a reason for more."""
    pending_since = (x.now if state.pending_since is None else state.pending_since) if x.pending > 0 else None
    cold = _cold_start(x)
    details["cold_start_s"] = cold
    guarding = pending_since is not None and x.now - pending_since < PENDING_GUARD_FACTOR * cold
    if guarding and step.replicas > x.current:
        step.set(x.current, Reason.PENDING_GUARD)
        if kpa is not None and kpa.panicking:
            # Panic must not remember a count the guard refused, or it would jump there once they are up.
            state = replace(state, max_panic_pods=min(state.max_panic_pods, step.replicas))
    return replace(state, pending_since=pending_since)


def _cold_start(x: _Inputs) -> float:
    """The replica start-up time: `coldStart`, else the slowest start the engines reported, else 10 min."""
    return cold_start_of(x.config, x.snap)


def _default_delay(x: _Inputs) -> bool:
    return x.config.scale_down_delay is None and x.config.mode != "proactive"


def _delay(x: _Inputs, step: _Step, state: PolicyState, details: dict[str, float]) -> PolicyState:
    """Step 3b: Knative's scale-down delay, the count is the largest decided within the delay. Its default
    is the cold start, where Knative's is 0: a Knative pod starts in seconds, an LLM replica in minutes,
    and a replica released now that demand needs again within a cold start costs a cold start of queueing
    (and a cold start of GPU time loading). Holding it idle for at most that long costs at most as much:
    the ski-rental break-even. Recorded after the pending guard, so a count it refused is not replayed.
    Unset in `proactive` mode it is 0: that forecast already sizes for demand one cold start ahead. It
    never holds the last replica: going from 1 to 0 is idleTimeout's decision (step 6).

    The default also adapts (`_regret`): when a released replica is asked for again within the delay,
    the release was a mistake the delay was too short to avoid, so the delay doubles (up to 4 cold
    starts); after 8 cold starts without such a regret it halves. Bursty traffic whose peaks recur every
    few minutes (the Azure code traces) stops paying a cold start per burst; smooth traffic keeps one."""
    if _default_delay(x):
        _release_guard(x, step, details)
    delay = x.config.scale_down_delay
    if delay is None:
        if x.config.mode == "proactive":
            delay = 0.0
        else:
            cold = _cold_start(x)
            factor, at = state.delay_factor, state.delay_factor_at
            if factor > 1.0 and at is not None and x.now - at >= DELAY_FACTOR_QUIET * cold:
                factor, at = max(1.0, factor / 2.0), x.now
                state = replace(state, delay_factor=factor, delay_factor_at=at)
            delay = cold * factor
            details["scale_down_delay_factor"] = factor
    held, window = scale_down_delay(state.recent_counts, step.replicas, x.now, delay)
    details["scale_down_delay_s"] = delay
    details["scale_down_delay_held"] = held
    if held > max(step.replicas, 1):
        step.set(held, Reason.SCALE_DOWN_DELAY)
    return replace(state, recent_counts=window)


def _release_guard(x: _Inputs, step: _Step, details: dict[str, float]) -> None:
    """Step 3b, with the default delay: no release below what the panic window asks for. Out of panic mode
    Knative sizes by the stable window alone, so a count the last minute allows is released even while the
    last seconds (the panic window, the policy's and the latency term's) ask for more: load that is rising
    as the replica goes. On azure2023-conv two such releases in one run were asked back 90 and 100 s later,
    each a cold start of one replica serving the rise (98.5% of requests in the SLO where the other seeds
    of the same point met 99.9%). The floor is at most the replicas ready; idleTimeout's 1 -> 0 is step 6's."""
    ready = x.workload.ready_replicas
    if step.replicas >= ready:
        return
    panic = max(details.get("desired_panic_raw", 0.0), details.get("latency_desired_raw_panic", 0.0))
    floor = min(ready, ceil_replicas(panic))
    if floor > step.replicas:
        details["release_guard_replicas"] = float(floor)
        step.set(floor, Reason.SCALE_DOWN_DELAY)


def _regret(x: _Inputs, state: PolicyState, delayed: int, details: dict[str, float]) -> PolicyState:
    """Right after the delay step: remember a release (the delayed count went down, not to zero), and call
    a rise within the delay of the last release a regret, which doubles the default delay (see `_delay`).
    The count compared is the policy's own after the delay, before the holds and bounds that follow (a
    stale hold or an advisory answer returning the current count is not demand coming back)."""
    last = state.last_delayed
    state = replace(state, last_delayed=delayed)
    if not _default_delay(x) or last is None or last == 0 or delayed == 0:
        return state
    if delayed < last:
        return replace(state, released_at=x.now)
    delay = details.get("scale_down_delay_s", 0.0)
    if delayed > last and state.released_at is not None and x.now - state.released_at < delay:
        factor = min(DELAY_FACTOR_MAX, state.delay_factor * 2.0)
        details["scale_down_delay_regret"] = 1.0
        return replace(state, delay_factor=factor, delay_factor_at=x.now, released_at=None)
    return state


def _stale_hold(x: _Inputs, step: _Step) -> None:
    """Step 4: never scale down on stale data (DESIGN.md "Decision semantics"); scale-up stays allowed."""
    if x.stale_data and step.replicas < x.current:
        step.set(x.current, Reason.STALE_HOLD)


def _bounds(x: _Inputs, step: _Step) -> None:
    """Step 5: the config's minReplicas/maxReplicas, else the ScaledObject's."""
    c, w = x.config, x.workload
    lo = c.min_replicas if c.min_replicas is not None else w.min_replicas
    hi = c.max_replicas if c.max_replicas is not None else w.max_replicas
    if step.replicas > hi:
        step.set(hi, Reason.MAX_CLAMP)
    if step.replicas < lo:
        step.set(lo, Reason.MIN_CLAMP)


def _warm_window(x: _Inputs, step: _Step, details: dict[str, float]) -> bool:
    """Step 5a: a scheduled window (`warmWindows`) holds at least its floor from one horizon before its start
    (a cold start + poll + sync: serving when the event begins) to its end; maxReplicas still caps it.
    Not recorded as a decided count (the scale-down delay ran before), so the floor ends with the window."""
    lead = horizon_seconds(_cold_start(x), x.workload.polling_interval_s)
    floor = warm_floor(x.config.warm_windows, x.now, lead, details)
    if floor > step.replicas:
        step.set(floor, Reason.WARM_WINDOW)
    return floor > 0


def _latest_of(*times: float | None) -> float | None:
    known = [t for t in times if t is not None]
    return max(known) if known else None


def _zero(x: _Inputs, step: _Step, state: PolicyState, details: dict[str, float],
          warm: bool = False) -> tuple[bool, float | None]:
    """Step 6: active or not, and the last demand time. Inactive -> 0; active -> at least 1. An open warm
    window (`warm`) is active, but not demand: the idle timer runs on."""
    latest = x.snap.latest
    demand_now = any((v or 0.0) > 0 for v in (latest.running, latest.waiting, latest.upstream))
    seen = [t for t in (x.history.last_demand_at, state.last_activation_at) if t is not None and t <= x.now]
    last_demand = _latest_of(x.now if demand_now else None, state.last_demand_at, *seen)
    if not x.config.scale_to_zero or warm:
        active = True
    elif x.stale_data:
        active = state.active or demand_now  # never deactivate on stale data
    else:
        active = last_demand is not None and x.now - last_demand < x.config.idle_timeout
    if not active:
        step.set(0, Reason.IDLE_ZERO)
        step.override = Reason.IDLE_ZERO  # also when already at zero: zero because idle, not "steady"
    elif step.replicas < 1:
        # Active means at least one replica (KEDA wakes a zero target to max(minReplicaCount, 1)).
        step.replicas, step.override = 1, (Reason.ACTIVATION if x.current == 0 else step.override)
    elif x.current == 0 and step.override is not Reason.WARM_WINDOW:
        step.override = Reason.ACTIVATION
    details["active"] = float(active)
    details["idle_s"] = math.inf if last_demand is None else x.now - last_demand
    return active, last_demand


def decide(history: HistoryView, config: ScalerConfig, state: PolicyState, workload: WorkloadState,
           now: float) -> tuple[Decision, PolicyState]:
    """Decide the replica count for one ScaledObject at `now`. Raises NoData when nothing is usable."""
    snap = _check_data(history.snapshot(now, config.stale_after), config, workload, now, history)
    if pooled(config):  # one of several pools of the model: its share of one split (scaler/pools.py)
        return decide_pool(history, config, state, workload, now)
    x = _Inputs(history, config, workload, snap, now)
    state = _initial(state, config, workload, now)
    details: dict[str, float] = {
        "current": x.current, "ready": workload.ready_replicas, "pending": x.pending, "fresh": x.snap.fresh,
        "stale": x.snap.stale, "loading": x.snap.loading, "missing": x.missing, "stale_data": float(x.stale_data),
        "data_age_s": x.snap.data_age, "collection_age_s": now - x.snap.at,
    }
    step, kpa, state = _windows(x, state, details)
    state = _forecast(x, step, kpa, state, details)
    state = _pending_guard(x, step, kpa, state, details)
    state = _delay(x, step, state, details)
    state = _regret(x, state, step.replicas, details)
    _stale_hold(x, step)
    warm = _warm_window(x, step, details)
    _bounds(x, step)
    active, last_demand = _zero(x, step, state, details, warm)
    if step.would_be is not None:
        details["would_be_replicas"] = step.would_be
    reason = step.override or _base_reason(kpa, step.replicas, x.current)
    decision = Decision(step.replicas, reason.value, active, details)
    state = replace(state, last_demand_at=last_demand, active=active, last_replicas=step.replicas)
    if not active:
        # asleep: no count from before the idle period comes back, and no release before it is regretted
        state = replace(state, recent_counts=(), released_at=None, last_delayed=None)
    if config.advisory:
        # Step 7: decided and recorded; KEDA gets the current count.
        held_active = x.current > 0 if config.scale_to_zero else True
        held = Decision(x.current, Reason.ADVISORY_HOLD.value, held_active,
                        {**details, "would_be_replicas": step.replicas}, would_be=decision)
        return held, replace(state, active=held_active, last_replicas=x.current)
    return decision, state


def warm_at_zero(config: ScalerConfig, workload: WorkloadState, now: float) -> Decision | None:
    """A model at zero that the scaler has nothing to decide on (no collection yet, or no exporter reachable:
    a GPU node pool scaled to zero runs none) is idle, except while a warm window is open: then step 5a's
    floor, within step 5's bounds, wakes it. None when no window is open. The lead's cold start is
    `coldStart`, else the 10-minute default (no engine has reported one). With no data the count never
    drops below the replicas Kubernetes says run."""
    details: dict[str, float] = {}
    lead = horizon_seconds(config.cold_start or DEFAULT_COLD_START, workload.polling_interval_s)
    floor = warm_floor(config.warm_windows, now, lead, details)
    if floor == 0:
        return None
    hi = config.max_replicas if config.max_replicas is not None else workload.max_replicas
    lo = config.min_replicas if config.min_replicas is not None else workload.min_replicas
    return Decision(max(min(max(floor, workload.current_replicas), hi), lo, 1), Reason.WARM_WINDOW.value, True,
                    details)
