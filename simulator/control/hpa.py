"""The Kubernetes HPA controller's replica algorithm, as KEDA's ScaledObjects drive it.

A pure step function: `hpa_sync(config, state, now, scale, metrics) -> (HPAResult, HPAState)`. The
caller (the KEDA+HPA loop) calls it every sync period (15 s by default); the recommendation and
scale-event history that the real controller keeps in memory lives in `HPAState`.

Source: kubernetes `pkg/controller/podautoscaler/horizontal.go` and `replica_calculator.go`
(post-1.33, with per-direction tolerances) and `pkg/apis/autoscaling/v2/defaults.go`, as summarized
in the project's KEDA reference (section 3 and the defaults table, section 2.12). Only External
metrics are modelled: KEDA creates nothing else for `external` triggers. Their pods' readiness does not
enter `AverageValue` (the HPA divides the summed value by the target), so the missing-pod and
unready-pod corrections of Pods/Resource metrics do not apply here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

# The HPA's types and defaults (the API server's and the controller's) live with the ScaledObject model
# they come from; re-exported here for the emulator's callers.
from keda_llm.scaler.scaledobject import DEFAULT_DOWNSCALE_STABILIZATION_S as DEFAULT_DOWNSCALE_STABILIZATION_S
from keda_llm.scaler.scaledobject import DEFAULT_SCALE_DOWN_POLICIES as DEFAULT_SCALE_DOWN_POLICIES
from keda_llm.scaler.scaledobject import DEFAULT_SCALE_UP_POLICIES as DEFAULT_SCALE_UP_POLICIES
from keda_llm.scaler.scaledobject import DEFAULT_SELECT_POLICY as DEFAULT_SELECT_POLICY
from keda_llm.scaler.scaledobject import DEFAULT_SYNC_PERIOD_S as DEFAULT_SYNC_PERIOD_S
from keda_llm.scaler.scaledobject import DEFAULT_TOLERANCE as DEFAULT_TOLERANCE
from keda_llm.scaler.scaledobject import DEFAULT_UPSCALE_STABILIZATION_S as DEFAULT_UPSCALE_STABILIZATION_S
from keda_llm.scaler.scaledobject import Behavior as Behavior
from keda_llm.scaler.scaledobject import HPAConfig as HPAConfig
from keda_llm.scaler.scaledobject import MetricType as MetricType
from keda_llm.scaler.scaledobject import PolicyType as PolicyType
from keda_llm.scaler.scaledobject import ScalingPolicy as ScalingPolicy
from keda_llm.scaler.scaledobject import ScalingRules as ScalingRules
from keda_llm.scaler.scaledobject import SelectPolicy as SelectPolicy

#: the no-behavior scale-up cap: max(2 x current, 4) (horizontal.go calculateScaleUpLimit)
SCALE_UP_LIMIT_FACTOR = 2.0
SCALE_UP_LIMIT_MINIMUM = 4.0


@dataclass(frozen=True)
class ResolvedRules:
    """ScalingRules after the API server's defaulting: every field set."""

    stabilization_window_seconds: int
    select_policy: SelectPolicy
    policies: tuple[ScalingPolicy, ...]
    tolerance: float | None


def resolve_rules(rules: ScalingRules | None, *, up: bool, downscale_window_s: int) -> ResolvedRules:
    """Fill unset fields one by one, as `GenerateHPAScaleUpRules/DownRules` + `copyHPAScalingRules` do."""
    rules = rules or ScalingRules()
    if up:
        given = rules.stabilization_window_seconds
        window = DEFAULT_UPSCALE_STABILIZATION_S if given is None else given
        policies = DEFAULT_SCALE_UP_POLICIES if rules.policies is None else rules.policies
    else:
        # a nil scaleDown window is filled by the controller from its flag (maybeInitScaleDownStabilizationWindow)
        given = rules.stabilization_window_seconds
        window = downscale_window_s if given is None else given
        policies = DEFAULT_SCALE_DOWN_POLICIES if rules.policies is None else rules.policies
    return ResolvedRules(window, rules.select_policy or DEFAULT_SELECT_POLICY, policies, rules.tolerance)


@dataclass(frozen=True)
class ExternalMetric:
    """One entry of the HPA's spec.metrics and what the metrics API answered for it this sync.

    `target_milli` and `values_milli` are in milli-units, as the HPA reads Quantities (MilliValue).
    `values_milli` None means the external metrics API returned an error for this metric.
    """

    name: str
    target_milli: int
    metric_type: MetricType = "AverageValue"
    values_milli: tuple[int, ...] | None = ()


@dataclass(frozen=True)
class ScaleSubresource:
    """What the HPA reads from the target's /scale and its pods: spec, status and ready counts."""

    spec_replicas: int
    status_replicas: int  # scale.status.replicas: all pods, ready or not
    ready_replicas: int  # Running and Ready pods (only the `Value` metric type uses it)


@dataclass(frozen=True)
class HPAState:
    """What the controller remembers between syncs (its in-memory maps, keyed by HPA)."""

    recommendations: tuple[tuple[float, int], ...] = ()  # (time, unstabilized recommendation)
    scale_up_events: tuple[tuple[float, int], ...] = ()  # (time, replicas added) - behavior only
    scale_down_events: tuple[tuple[float, int], ...] = ()  # (time, replicas removed) - behavior only


@dataclass(frozen=True)
class HPAResult:
    """One sync's outcome. `reason` is the controller's condition reason (AbleToScale/ScalingLimited)."""

    desired_replicas: int
    rescale: bool
    reason: str
    metric_replicas: int | None = None  # the max over metric proposals, before stabilization and limits
    proposals: dict[str, int] = field(default_factory=dict)


def _is_within(ratio: float, up_tol: float, down_tol: float) -> bool:
    # NaN (0/0: no pods and no usage) is "not within", as in Go
    return (1.0 - down_tol) <= ratio <= (1.0 + up_tol)


def metric_proposal(metric: ExternalMetric, scale: ScaleSubresource, tolerances: tuple[float, float]) -> int:
    """Replicas one External metric asks for (`GetExternalPerPodMetricReplicas` / `GetExternalMetricReplicas`).

    AverageValue: usage = sum of values; ratio = usage / (target x status.replicas); outside the
    tolerance -> ceil(usage / target), else status.replicas. Value: ratio = usage / target; outside ->
    ceil(ratio x ready pods) (with 0 current replicas: ceil(ratio)).
    """
    assert metric.values_milli is not None
    usage = sum(metric.values_milli)
    up_tol, down_tol = tolerances
    if metric.metric_type == "AverageValue":
        denominator = float(metric.target_milli) * float(scale.status_replicas)
        ratio = usage / denominator if denominator else (math.inf if usage > 0 else math.nan)
        if _is_within(ratio, up_tol, down_tol):
            return scale.status_replicas
        return math.ceil(usage / metric.target_milli)
    ratio = usage / metric.target_milli
    if scale.spec_replicas == 0:
        return math.ceil(ratio)
    if _is_within(ratio, up_tol, down_tol):
        return scale.spec_replicas
    return math.ceil(ratio * scale.ready_replicas)


def _scale_up_limit(current: int) -> int:
    return int(max(SCALE_UP_LIMIT_FACTOR * current, SCALE_UP_LIMIT_MINIMUM))


def _stabilize_default(state: HPAState, now: float, desired: int, window_s: int) -> tuple[int, HPAState]:
    """No-behavior stabilization: the max recommendation not older than the window (`Before(cutoff)` drops)."""
    cutoff = now - window_s
    kept = tuple(r for r in state.recommendations if not r[0] < cutoff)
    stabilized = max([desired, *(r[1] for r in kept)])
    return stabilized, replace(state, recommendations=(*kept, (now, desired)))


def _stabilize_with_behavior(
    state: HPAState, now: float, current: int, desired: int, up: ResolvedRules, down: ResolvedRules
) -> tuple[int, HPAState]:
    """`stabilizeRecommendationWithBehaviors`: up = min over the up window, down = max over the down window
    (samples strictly newer than the cutoff), then current is clamped into [up, down]."""
    up_cutoff = now - up.stabilization_window_seconds
    down_cutoff = now - down.stabilization_window_seconds
    up_rec = min([desired, *(r for t, r in state.recommendations if t > up_cutoff)])
    down_rec = max([desired, *(r for t, r in state.recommendations if t > down_cutoff)])
    recommendation = max(current, up_rec)
    recommendation = min(recommendation, down_rec)
    oldest_needed = min(up_cutoff, down_cutoff)
    kept = tuple(r for r in state.recommendations if r[0] >= oldest_needed)
    return recommendation, replace(state, recommendations=(*kept, (now, desired)))


def _change_in_period(events: Sequence[tuple[float, int]], now: float, period_s: int) -> int:
    cutoff = now - period_s
    return sum(change for t, change in events if t > cutoff)


def _behavior_limit(state: HPAState, now: float, current: int, rules: ResolvedRules, *, up: bool) -> int:
    """`calculateScaleUpLimitWithScalingRules` / `calculateScaleDownLimitWithBehaviors`."""
    if rules.select_policy == "Disabled":
        return current
    proposals: list[int] = []
    for policy in rules.policies:
        added = _change_in_period(state.scale_up_events, now, policy.period_seconds)
        removed = _change_in_period(state.scale_down_events, now, policy.period_seconds)
        start = current - added + removed  # the replica count at the start of the period
        if up:
            if policy.type == "Pods":
                proposals.append(start + policy.value)
            else:  # rounded up, or a small percentage could never add a pod
                proposals.append(math.ceil(start * (1 + policy.value / 100)))
        elif policy.type == "Pods":
            proposals.append(start - policy.value)
        else:  # Go's int32() conversion truncates
            proposals.append(int(start * (1 - policy.value / 100)))
    if not proposals:
        return current
    # up: Max picks the largest allowed change (max), Min the smallest (min); down is mirrored
    pick_max = (rules.select_policy == "Max") == up
    return max(proposals) if pick_max else min(proposals)


def _normalize_default(config: HPAConfig, state: HPAState, now: float, current: int, desired: int) -> tuple[
    int, str, HPAState
]:
    stabilized, state = _stabilize_default(state, now, desired, config.downscale_stabilization_s)
    reason = "ScaleDownStabilized" if stabilized != desired else "DesiredWithinRange"
    cap = _scale_up_limit(current)
    if config.max_replicas > cap:
        maximum, limit_reason = cap, "ScaleUpLimit"
    else:
        maximum, limit_reason = config.max_replicas, "TooManyReplicas"
    if stabilized < config.min_replicas:
        return config.min_replicas, "TooFewReplicas", state
    if stabilized > maximum:
        return maximum, limit_reason, state
    return stabilized, reason, state


def _normalize_with_behavior(
    config: HPAConfig, behavior: Behavior, state: HPAState, now: float, current: int, desired: int
) -> tuple[int, str, HPAState]:
    up = resolve_rules(behavior.scale_up, up=True, downscale_window_s=config.downscale_stabilization_s)
    down = resolve_rules(behavior.scale_down, up=False, downscale_window_s=config.downscale_stabilization_s)
    stabilized, state = _stabilize_with_behavior(state, now, current, desired, up, down)
    reason = "DesiredWithinRange"
    if stabilized != desired:
        reason = "ScaleUpStabilized" if stabilized < desired else "ScaleDownStabilized"
    if stabilized > current:
        limit = max(_behavior_limit(state, now, current, up, up=True), current)
        maximum, limit_reason = (limit, "ScaleUpLimit") if config.max_replicas > limit else (
            config.max_replicas, "TooManyReplicas")
        if stabilized > maximum:
            return maximum, limit_reason, state
    elif stabilized < current:
        limit = min(_behavior_limit(state, now, current, down, up=False), current)
        minimum, limit_reason = (limit, "ScaleDownLimit") if config.min_replicas < limit else (
            config.min_replicas, "TooFewReplicas")
        if stabilized < minimum:
            return minimum, limit_reason, state
    return stabilized, reason, state


def _record_scale_event(behavior: Behavior | None, state: HPAState, now: float, before: int, after: int) -> HPAState:
    """`storeScaleEvent`: only with a behavior; events older than every policy period are dropped."""
    if behavior is None or after == before:
        return state
    up = after > before
    # both directions' limits read both event lists, so keep what the longest period of either needs
    longest = max(
        (p.period_seconds for rules in (resolve_rules(behavior.scale_up, up=True, downscale_window_s=0),
                                        resolve_rules(behavior.scale_down, up=False, downscale_window_s=0))
         for p in rules.policies),
        default=0,
    )
    events = state.scale_up_events if up else state.scale_down_events
    kept = (*(e for e in events if e[0] > now - longest), (now, abs(after - before)))
    return replace(state, scale_up_events=kept) if up else replace(state, scale_down_events=kept)


def hpa_sync(
    config: HPAConfig, state: HPAState, now: float, scale: ScaleSubresource, metrics: Sequence[ExternalMetric]
) -> tuple[HPAResult, HPAState]:
    """One `reconcileAutoscaler` pass: returns the replica count the HPA writes to /scale and its new memory."""
    current = scale.spec_replicas
    if current == 0:  # minReplicas is never 0 for KEDA's HPA: autoscaling is disabled at zero
        return HPAResult(0, False, "ScalingDisabled"), state
    proposals: dict[str, int] = {}
    metric_replicas: int | None = None
    if current > config.max_replicas:
        desired, reason = config.max_replicas, "AboveMaxReplicas"
    elif current < config.min_replicas:
        desired, reason = config.min_replicas, "BelowMinReplicas"
    else:
        tolerances = config.tolerances()
        proposals = {m.name: metric_proposal(m, scale, tolerances) for m in metrics if m.values_milli is not None}
        invalid = len(metrics) - len(proposals)
        best = max(proposals.values(), default=0)
        # computeReplicasForMetrics: all metrics failed, or some failed and the rest would scale down -> hold
        if not metrics or invalid >= len(metrics) or (invalid > 0 and best < current):
            return HPAResult(current, False, "FailedGetExternalMetric", None, proposals), state
        metric_replicas = best
        if config.behavior is None:
            desired, reason, state = _normalize_default(config, state, now, current, best)
        else:
            desired, reason, state = _normalize_with_behavior(config, config.behavior, state, now, current, best)
    rescale = desired != current
    if rescale:
        state = _record_scale_event(config.behavior, state, now, current, desired)
    return HPAResult(desired, rescale, reason, metric_replicas, proposals), state
