"""The KEDA operator's side of the control loop, for `external` and `external-push` triggers.

What KEDA does with an external scaler, on a simulated clock (project KEDA reference, sections 2.2-2.9):
- builds the HPA's metric list once from GetMetricSpec (names `s<trigger index>-<name>`, targets fixed
  until the ScaledObject changes; no HPA while the specs are empty, KEDA >= 2.20);
- every pollingInterval: GetMetricSpec, then GetMetrics + IsActive per metric; retries a failed call
  once at once; activity = any trigger's IsActive; then `RequestScale` (0 <-> 1, cooldown, idle, min);
- the metrics-apiserver path the HPA queries every sync: GetMetricSpec for every trigger, then
  GetMetrics + IsActive for the requested metric, fallback counting, errors passed to the HPA;
- StreamIsActive messages: `true` activates at once (scale from zero or refresh lastActiveTime);
  `false` is ignored (KEDA >= 2.18).

The scaler is reached through the `ExternalScaler` protocol, which mirrors the gRPC contract one call
per RPC, so the same emulator drives an in-process policy (simulator, demo) or a real gRPC server
(`simulator.control.grpc_scaler`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from keda_llm.simulator.control.hpa import ExternalMetric, MetricType
from keda_llm.simulator.control.scaledobject import KedaSettings

CallPath = Literal["reconcile", "poll", "hpa", "push"]
EventKind = Literal[
    "keda_activate",  # 0 -> max(min, 1) (or idle -> min) because a trigger is active
    "keda_deactivate",  # -> minReplicaCount / idleReplicaCount after the cooldown
    "keda_set_min",  # below minReplicaCount while inactive -> minReplicaCount
    "hpa_scale_up",
    "hpa_scale_down",
    "hpa_created",
    "hpa_not_created",  # GetMetricSpec empty or failed: KEDA >= 2.20 creates no HPA and retries
    "hpa_metric_error",  # the HPA got an error for a metric and holds
    "scaler_error",  # a poll saw an error from the scaler
    "fallback_active",  # failures passed fallback.failureThreshold: the HPA is fed fallback replicas
    "fallback_cleared",
    "push_activate",  # a StreamIsActive `true` woke the workload or refreshed lastActiveTime
    "push_ignored",  # a StreamIsActive `false`: ignored since KEDA 2.18
    "push_skipped",  # a push before the HPA exists (status.externalMetricNames empty)
]


class ScalerUnavailable(Exception):
    """A scaler call failed, as a gRPC error would (code name like UNAVAILABLE, and its details).

    KEDA treats it like any scaler error: it counts toward fallback, blocks scale-to-zero, and the HPA
    holds its replica count for that sync.
    """

    def __init__(self, code: str = "UNAVAILABLE", details: str = "") -> None:
        super().__init__(f"{code}: {details}" if details else code)
        self.code = code
        self.details = details


@dataclass(frozen=True)
class ScaledObjectRef:
    """The `ScaledObjectRef` KEDA sends: the ScaledObject's name and namespace and the trigger's metadata."""

    name: str
    namespace: str
    scaler_metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class MetricSpec:
    """One `MetricSpec` answer. KEDA uses `target_size_float` when > 0, else the deprecated int field."""

    metric_name: str
    target_size_float: float = 0.0
    target_size: int = 0

    def target(self) -> float:
        return self.target_size_float if self.target_size_float > 0 else float(self.target_size)


@dataclass(frozen=True)
class MetricValue:
    """One `MetricValue`. KEDA uses `metric_value_float` when > 0, else the int field (so 0.0 means "unset")."""

    metric_name: str
    metric_value_float: float = 0.0
    metric_value: int = 0

    def value(self) -> float:
        return self.metric_value_float if self.metric_value_float > 0 else float(self.metric_value)


class ExternalScaler(Protocol):
    """KEDA's four unary/server-side calls as methods; raise ScalerUnavailable for a gRPC error."""

    def get_metric_spec(self, ref: ScaledObjectRef) -> Sequence[MetricSpec]: ...

    def get_metrics(self, ref: ScaledObjectRef, metric_name: str) -> Sequence[MetricValue]: ...

    def is_active(self, ref: ScaledObjectRef) -> bool: ...


@runtime_checkable
class PushSource(Protocol):
    """Optional: a scaler that delivers StreamIsActive messages; the loop drains them on each advance."""

    def take_pushes(self) -> Sequence[bool]: ...


@runtime_checkable
class CallChainAware(Protocol):
    """Optional: told before each chain of calls which KEDA path makes it and at what simulated time.

    An in-process scaler uses `now` as its clock; the gRPC adapter puts the HPA path under its 3 s deadline.
    """

    def begin(self, path: CallPath, now: float) -> None: ...


@dataclass(frozen=True)
class ControlEvent:
    """Something KEDA or the HPA did at `at`: a replica change (before -> after) or a notable condition."""

    at: float
    kind: EventKind
    replicas_before: int
    replicas_after: int
    detail: str = ""


@dataclass(frozen=True)
class HpaMetric:
    """One entry of the HPA KEDA created: `s<idx>-<name>` with its target (fixed at creation)."""

    name: str
    trigger_index: int
    scaler_metric_name: str
    target: float
    metric_type: MetricType

    @property
    def target_milli(self) -> int:
        """`GetMetricTargetMili`: int64(target x 1000)."""
        return int(self.target * 1000)


def to_milli(value: float) -> int:
    """KEDA >= 2.20 `quantityFromFloat64`: rounded to 3 decimals; NaN, +-Inf and negatives become 0."""
    if not math.isfinite(value) or value < 0:
        return 0
    return round(float(f"{value:.3f}") * 1000)


@dataclass(frozen=True)
class ScaleDecision:
    """`RequestScale`'s outcome: the new spec.replicas (or None: unchanged) and lastActiveTime."""

    replicas: int | None
    last_active_time: float | None
    kind: EventKind | None = None
    detail: str = ""


def request_scale(
    settings: KedaSettings, now: float, created_at: float, replicas: int, last_active_time: float | None,
    *, is_active: bool, is_error: bool,
) -> ScaleDecision:
    """KEDA's `RequestScale` for a ScaledObject (pkg/scaling/executor/scale_scaledobjects.go; reference 2.8)."""
    min_r, idle = settings.min_replicas, settings.idle_replicas
    if is_active:
        if replicas == 0 or (idle is not None and replicas < min_r):
            target = max(min_r, 1)
            return ScaleDecision(target, now, "keda_activate", "trigger active: scale from zero/idle")
        if is_error:  # PartialTriggerError: lastActiveTime is not refreshed
            return ScaleDecision(None, last_active_time)
        return ScaleDecision(None, now)
    fallback = settings.fallback
    if is_error and fallback is not None and fallback.replicas != 0:
        return ScaleDecision(None, last_active_time)  # the HPA's fallback handles it
    if is_error and fallback is None:
        return ScaleDecision(None, last_active_time)  # TriggerError: never scale down on errors
    if (idle is not None and replicas > idle) or (replicas > 0 and min_r == 0):
        target = idle if idle is not None else min_r
        if last_active_time is None:
            expired = created_at + settings.initial_cooldown_period_s < now
            why = f"no activity since creation + initialCooldownPeriod {settings.initial_cooldown_period_s}s"
        else:
            expired = last_active_time + settings.cooldown_period_s < now
            why = f"inactive since {last_active_time:g}s, cooldownPeriod {settings.cooldown_period_s}s passed"
        if expired:
            return ScaleDecision(target, last_active_time, "keda_deactivate", why)
        return ScaleDecision(None, last_active_time)  # ScalerCooldown
    if idle is None and replicas < min_r:
        return ScaleDecision(min_r, last_active_time, "keda_set_min", "below minReplicaCount while inactive")
    return ScaleDecision(None, last_active_time)


@dataclass
class _Outcome:
    values_milli: tuple[int, ...] | None  # None: the call failed
    active: bool
    error: str = ""


class KedaOperator:
    """KEDA's state for one ScaledObject and the three ways it calls the scaler (reconcile, poll, HPA query).

    `scalers` has one entry per trigger (KEDA builds one scaler per trigger) or a single one for all.
    `fallback_counts_on_poll`: the project reference (KEDA main) counts fallback failures on both the poll
    and the HPA path, and a falling-back trigger is active; set False for the releases whose poll path
    only reads IsActive (e.g. kedacore/keda pkg/scaling/scale_handler.go in the v2.1x line).
    """

    def __init__(self, settings: KedaSettings, scalers: ExternalScaler | Sequence[ExternalScaler], *,
                 created_at: float = 0.0, fallback_counts_on_poll: bool = True) -> None:
        if not settings.triggers:
            raise ValueError(f"ScaledObject {settings.namespace}/{settings.name} has no triggers")
        if isinstance(scalers, Sequence):
            if len(scalers) != len(settings.triggers):
                raise ValueError(f"{len(scalers)} scalers for {len(settings.triggers)} triggers: give one per trigger")
            self._scalers: tuple[ExternalScaler, ...] = tuple(scalers)
        else:
            self._scalers = (scalers,) * len(settings.triggers)
        aware: dict[int, CallChainAware] = {}  # once per distinct scaler object (they need not be hashable)
        for s in self._scalers:
            if id(s) not in aware and isinstance(s, CallChainAware):
                aware[id(s)] = s
        self._aware = tuple(aware.values())  # checked once: a runtime protocol check walks its members
        self.settings = settings
        self.created_at = created_at
        self.fallback_counts_on_poll = fallback_counts_on_poll
        self.refs = tuple(ScaledObjectRef(settings.name, settings.namespace, dict(t.metadata))
                          for t in settings.triggers)
        self.last_active_time: float | None = None
        self.hpa_metrics: tuple[HpaMetric, ...] | None = None
        self.failures: dict[str, int] = {}  # status.health[<sX- metric>].numberOfFailures
        self.fallback_active = False
        self._cache: dict[str, _Outcome] = {}  # useCachedMetrics records written by the poll

    # ----------------------------------------------------------------------------- scaler calls

    def _begin(self, path: CallPath, now: float) -> None:
        for s in self._aware:
            s.begin(path, now)

    def _metric_specs(self, idx: int) -> tuple[Sequence[MetricSpec], str]:
        """`GetMetricSpecForScalingForScaler`: an error or empty answer is retried once ("got empty metric spec")."""
        last = ""
        for _ in range(2):
            try:
                specs = self._scalers[idx].get_metric_spec(self.refs[idx])
            except ScalerUnavailable as exc:  # KEDA logs it and sees an empty list
                specs, last = [], str(exc)
            if specs:
                return specs, ""
        return [], last or "got empty metric spec"

    def _metrics_and_activity(self, idx: int, metric_name: str) -> _Outcome:
        """`GetMetricsAndActivity` (GetMetrics then IsActive), retried once on error (`refreshScaler`)."""
        outcome = _Outcome(None, False)
        for _ in range(2):
            try:
                values = self._scalers[idx].get_metrics(self.refs[idx], metric_name)
                active = self._scalers[idx].is_active(self.refs[idx])
            except ScalerUnavailable as exc:
                outcome = _Outcome(None, False, str(exc))
                continue
            return _Outcome(tuple(to_milli(v.value()) for v in values), active)
        return outcome

    # ------------------------------------------------------------------------------- fallback

    def _fallback_enabled(self, metric_type: MetricType) -> bool:
        return self.settings.fallback is not None and metric_type == "AverageValue"

    def _count(self, metric: str, ok: bool, metric_type: MetricType) -> bool:
        """`GetMetricsWithFallback`'s health bookkeeping; True when this metric is now falling back."""
        if ok:
            self.failures[metric] = 0
            return False
        self.failures[metric] = self.failures.get(metric, 0) + 1
        fb = self.settings.fallback
        return fb is not None and self._fallback_enabled(metric_type) and self.failures[metric] > fb.failure_threshold

    def _fallback_replicas(self, replicas: int) -> int:
        fb = self.settings.fallback
        assert fb is not None
        if fb.behavior == "currentReplicas":
            return replicas
        if fb.behavior == "currentReplicasIfHigher":
            return max(replicas, fb.replicas)
        if fb.behavior == "currentReplicasIfLower":
            return min(replicas, fb.replicas)
        return fb.replicas

    def _fallback_events(self, now: float, replicas: int) -> list[ControlEvent]:
        fb = self.settings.fallback
        active = fb is not None and any(n > fb.failure_threshold for n in self.failures.values())
        if active == self.fallback_active:
            return []
        self.fallback_active = active
        if active:
            assert fb is not None
            return [ControlEvent(now, "fallback_active", replicas, replicas,
                                 f"more than {fb.failure_threshold} failures in a row: HPA fed "
                                 f"{self._fallback_replicas(replicas)} replicas ({fb.behavior})")]
        return [ControlEvent(now, "fallback_cleared", replicas, replicas, "scaler answered again")]

    # ------------------------------------------------------------------------------ the paths

    def reconcile(self, now: float, replicas: int) -> list[ControlEvent]:
        """Create the HPA's metric list from GetMetricSpec, as the ScaledObject controller does once."""
        if self.hpa_metrics is not None:
            return []
        self._begin("reconcile", now)
        metrics: list[HpaMetric] = []
        for idx, trigger in enumerate(self.settings.triggers):
            specs, err = self._metric_specs(idx)
            if err:
                return [ControlEvent(now, "hpa_not_created", replicas, replicas, f"trigger {idx}: {err}")]
            for spec in specs:
                target = spec.target()
                if not target > 0:
                    return [ControlEvent(now, "hpa_not_created", replicas, replicas,
                                         f"trigger {idx}: metric {spec.metric_name!r} has target {target}: "
                                         "the HPA API requires a positive target")]
                metrics.append(HpaMetric(f"s{idx}-{spec.metric_name}", idx, spec.metric_name, target,
                                         trigger.metric_type))
        names = [m.name.lower() for m in metrics]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            return [ControlEvent(now, "hpa_not_created", replicas, replicas,
                                 f"metricName {dupes[0]} defined multiple times in ScaledObject {self.settings.name}")]
        self.hpa_metrics = tuple(metrics)
        return [ControlEvent(now, "hpa_created", replicas, replicas, ", ".join(m.name for m in metrics))]

    def poll(self, now: float, replicas: int) -> tuple[int, list[ControlEvent]]:
        """One `checkScalers` pass; returns the new spec.replicas and what happened."""
        events = self.reconcile(now, replicas)
        self._begin("poll", now)
        any_active = any_error = False
        errors: list[str] = []
        for idx, trigger in enumerate(self.settings.triggers):
            specs, err = self._metric_specs(idx)
            if err:
                any_error = True
                errors.append(f"trigger {idx} GetMetricSpec: {err}")
            for spec in specs:
                name = f"s{idx}-{spec.metric_name}"
                outcome = self._metrics_and_activity(idx, spec.metric_name)
                if trigger.use_cached_metrics:
                    self._cache[name.lower()] = outcome
                if outcome.values_milli is not None:
                    any_active |= outcome.active
                    if self.fallback_counts_on_poll:
                        self._count(name, True, trigger.metric_type)
                    continue
                any_error = True
                errors.append(f"{name}: {outcome.error}")
                if self.fallback_counts_on_poll and self._count(name, False, trigger.metric_type):
                    any_active = True  # a trigger that falls back counts as active
        if errors:
            events.append(ControlEvent(now, "scaler_error", replicas, replicas, "; ".join(errors)))
        events.extend(self._fallback_events(now, replicas))
        decision = request_scale(self.settings, now, self.created_at, replicas, self.last_active_time,
                                 is_active=any_active, is_error=any_error)
        self.last_active_time = decision.last_active_time
        if decision.replicas is not None and decision.replicas != replicas and decision.kind is not None:
            events.append(ControlEvent(now, decision.kind, replicas, decision.replicas, decision.detail))
            return decision.replicas, events
        return replicas, events

    def push(self, now: float, replicas: int, result: bool) -> tuple[int, list[ControlEvent]]:
        """A StreamIsActive message (KEDA >= 2.18 semantics)."""
        if not result:
            return replicas, [ControlEvent(now, "push_ignored", replicas, replicas,
                                           "StreamIsActive false: deactivation is left to polling")]
        if self.hpa_metrics is None:
            return replicas, [ControlEvent(now, "push_skipped", replicas, replicas,
                                           "no externalMetricNames yet: retried on next activation")]
        decision = request_scale(self.settings, now, self.created_at, replicas, self.last_active_time,
                                 is_active=True, is_error=False)
        self.last_active_time = decision.last_active_time
        if decision.replicas is not None and decision.replicas != replicas:
            return decision.replicas, [ControlEvent(now, "push_activate", replicas, decision.replicas,
                                                    "StreamIsActive true: scale from zero")]
        return replicas, []

    def hpa_query(self, now: float, replicas: int) -> tuple[list[ExternalMetric], list[ControlEvent]]:
        """What the metrics API answers the HPA for each of its metrics (`GetScaledObjectMetrics`)."""
        if self.hpa_metrics is None:
            return [], []
        out: list[ExternalMetric] = []
        for hm in self.hpa_metrics:
            self._begin("hpa", now)
            out.append(self._query_one(hm, replicas))
        events = [ControlEvent(now, "hpa_metric_error", replicas, replicas, f"{m.name}: the HPA holds")
                  for m in out if m.values_milli is None]
        events.extend(self._fallback_events(now, replicas))
        return out, events

    def _query_one(self, hm: HpaMetric, replicas: int) -> ExternalMetric:
        scaler_error = fallback_used = False
        matching: list[int] = []
        for idx, trigger in enumerate(self.settings.triggers):
            specs, err = self._metric_specs(idx)
            if err:
                scaler_error = True
            for spec in specs:
                name = f"s{idx}-{spec.metric_name}"
                if name.lower() != hm.name.lower():  # KEDA matches names case-insensitively
                    continue
                cached = self._cache.get(name.lower()) if trigger.use_cached_metrics else None
                outcome = cached if cached is not None else self._metrics_and_activity(idx, spec.metric_name)
                if outcome.values_milli is not None:
                    self._count(name, True, trigger.metric_type)
                    matching.extend(outcome.values_milli)
                elif self._count(name, False, trigger.metric_type):
                    fallback_used = True
                    # doFallback: int64(target) x 1000 x replicas milli-units (the target is truncated to an int)
                    matching.append(int(hm.target) * 1000 * self._fallback_replicas(replicas))
                else:
                    scaler_error = True
        if scaler_error and not fallback_used:
            return ExternalMetric(hm.name, hm.target_milli, hm.metric_type, None)
        if not matching:  # "no matching metrics found"
            return ExternalMetric(hm.name, hm.target_milli, hm.metric_type, None)
        return ExternalMetric(hm.name, hm.target_milli, hm.metric_type, tuple(matching))
