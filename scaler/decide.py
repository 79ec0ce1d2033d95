"""The one entry point: decide(history, config, state, workload, now) -> (Decision, new PolicyState).

Pure: no clock, no I/O, no globals. The servicer and the simulator call it with their own `now`.
A decision is a pipeline of named steps, each of which may change the count and, if it does,
names the reason:

1. data check      nothing usable -> raise NoData (the servicer answers UNAVAILABLE)
2. policy + KPA    windowed demand -> Knative stable/panic decision with rate limits (windows.py)
3. pending guard   replicas still starting are supply that is coming: no scale-up past them
4. stale hold      some replica stopped reporting: never scale down on that
5. min/max clamp   config overrides, else the ScaledObject's bounds
6. zero            scaleToZero: inactive (0) after idleTimeout without demand; wake on demand/activation
7. advisory        hand back the current count, with the would-be decision attached
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from scaler.config import ScalerConfig
from scaler.history import Load, ModelHistory, Snapshot
from scaler.model import Decision, NoData, PolicyState, Reason, WorkloadState
from scaler.policy import NoSignal, demand
from scaler.windows import KpaResult, initial_panic, kpa_step

DEFAULT_COLD_START = 600.0  # pending-guard bound when coldStart is unset and no engine reported its start-up
PENDING_GUARD_FACTOR = 2.0  # the guard lets go after this many cold starts: pods stuck pending get help


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
                history: ModelHistory) -> Snapshot:
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


def decide(history: ModelHistory, config: ScalerConfig, state: PolicyState, workload: WorkloadState,
           now: float) -> tuple[Decision, PolicyState]:
    """Decide the replica count for one ScaledObject at `now`. Raises NoData when nothing is usable."""
    snap = _check_data(history.snapshot(now, config.stale_after), config, workload, now, history)
    state = _initial(state, config, workload, now)
    current, ready = workload.current_replicas, workload.ready_replicas
    missing = max(0, ready - snap.fresh - snap.stale)  # ready in Kubernetes, absent from the data
    stale_data = snap.stale > 0 or missing > 0
    pending = max(0, current - ready, snap.loading)
    details: dict[str, float] = {
        "current": current, "ready": ready, "pending": pending, "fresh": snap.fresh, "stale": snap.stale,
        "loading": snap.loading, "missing": missing, "stale_data": float(stale_data),
        "data_age_s": snap.data_age, "collection_age_s": now - snap.at,
    }

    # 2. policy + Knative windows
    kpa: KpaResult | None = None
    if snap.fresh > 0:
        try:
            stable = demand(history.window(now, config.stable_window), config, snap)
            panic = demand(history.window(now, config.panic_window), config, snap)
        except NoSignal as e:
            raise NoData(str(e)) from None
        kpa = kpa_step(stable.desired, panic.desired, ready, state.panic_since, state.max_panic_pods, now,
                       stable_window=config.stable_window, panic_threshold=config.panic_threshold,
                       max_scale_up_rate=config.max_scale_up_rate, max_scale_down_rate=config.max_scale_down_rate)
        step = _Step(kpa.desired)
        details.update(stable.parts)
        details.update({
            "demand": stable.demand, "demand_panic": panic.demand, "capacity_per_replica": stable.per_replica,
            "capacity": stable.per_replica * snap.fresh, "desired_stable_raw": stable.desired,
            "desired_panic_raw": panic.desired, "dspc": kpa.dspc, "dppc": kpa.dppc, "desired_stable": kpa.stable,
            "desired_panic": kpa.panic, "max_scale_up": kpa.max_scale_up, "max_scale_down": kpa.max_scale_down,
            "panic": float(kpa.panicking), "kpa_desired": kpa.desired,
        })
        state = replace(state, panic_since=kpa.panic_since, max_panic_pods=kpa.max_panic_pods)
    else:
        # Nobody reports and nobody is ready: scaled to zero, or every replica still loading. Hold.
        step = _Step(current, Reason.PENDING_GUARD if current > 0 else None)
        details.update({"demand": snap.latest.upstream or 0.0, "panic": float(state.panic_since is not None)})

    # 3. pending-replica guard
    pending_since = (now if state.pending_since is None else state.pending_since) if pending > 0 else None
    cold = config.cold_start or snap.max_startup_seconds or DEFAULT_COLD_START
    details["cold_start_s"] = cold
    guarding = pending_since is not None and now - pending_since < PENDING_GUARD_FACTOR * cold
    if guarding and step.replicas > current:
        step.set(current, Reason.PENDING_GUARD)
        if kpa is not None and kpa.panicking:
            # Panic must not remember a count the guard refused, or it would jump there once they are up.
            state = replace(state, max_panic_pods=min(state.max_panic_pods, step.replicas))
    state = replace(state, pending_since=pending_since)

    # 4. stale hold: never scale down on stale data (DESIGN.md "Decision semantics")
    if stale_data and step.replicas < current:
        step.set(current, Reason.STALE_HOLD)

    # 5. bounds
    lo = config.min_replicas if config.min_replicas is not None else workload.min_replicas
    hi = config.max_replicas if config.max_replicas is not None else workload.max_replicas
    if step.replicas > hi:
        step.set(hi, Reason.MAX_CLAMP)
    if step.replicas < lo:
        step.set(lo, Reason.MIN_CLAMP)

    # 6. zero and back
    latest = snap.latest
    demand_now = any((v or 0.0) > 0 for v in (latest.running, latest.waiting, latest.upstream))
    last_demand = now if demand_now else state.last_demand_at
    if history.last_demand_at is not None and history.last_demand_at <= now:
        last_demand = max(last_demand if last_demand is not None else -math.inf, history.last_demand_at)
    if state.last_activation_at is not None and state.last_activation_at <= now:
        last_demand = max(last_demand if last_demand is not None else -math.inf, state.last_activation_at)
    if not config.scale_to_zero:
        active = True
    elif stale_data:
        active = state.active or demand_now  # never deactivate on stale data
    else:
        active = last_demand is not None and now - last_demand < config.idle_timeout
    if active:
        if step.replicas < 1:
            # Active means at least one replica (KEDA wakes a zero target to max(minReplicaCount, 1)).
            step.replicas, step.override = 1, (Reason.ACTIVATION if current == 0 else step.override)
        elif current == 0 and step.replicas > 0:
            step.override = Reason.ACTIVATION
    else:
        step.set(0, Reason.IDLE_ZERO)
        step.override = Reason.IDLE_ZERO  # also when already at zero: zero because idle, not "steady"
    details["active"] = float(active)
    details["idle_s"] = math.inf if last_demand is None else now - last_demand
    if step.would_be is not None:
        details["would_be_replicas"] = step.would_be

    reason = step.override or _base_reason(kpa, step.replicas, current)
    decision = Decision(step.replicas, reason.value, active, details)
    state = replace(state, last_demand_at=last_demand, active=active, last_replicas=step.replicas)

    # 7. advisory: decided and recorded; KEDA gets the current count
    if config.advisory:
        held_active = current > 0 if config.scale_to_zero else True
        held = Decision(current, Reason.ADVISORY_HOLD.value, held_active,
                        {**details, "would_be_replicas": step.replicas}, would_be=decision)
        return held, replace(state, active=held_active, last_replicas=current)
    return decision, state
