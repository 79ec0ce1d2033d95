"""The HPA algorithm against hand-computed replica counts (Kubernetes horizontal.go / replica_calculator.go).

Every metric here is KEDA's AverageValue external metric with target 1 (what keda-llm's scaler
returns), so a metric total of N asks for N replicas; the HPA syncs every 15 s and its own output
becomes the next sync's current replica count.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from keda_llm.simulator.control.hpa import (
    Behavior,
    ExternalMetric,
    HPAConfig,
    HPAState,
    ScaleSubresource,
    ScalingPolicy,
    ScalingRules,
    hpa_sync,
    resolve_rules,
)


def metric(total: float | None, target: float = 1.0, metric_type: str = "AverageValue") -> ExternalMetric:
    values = None if total is None else (round(total * 1000),)
    return ExternalMetric("s0-m", int(target * 1000), metric_type, values)  # type: ignore[arg-type]


def run(config: HPAConfig, start: int, totals: list[float | None], period: float = 15.0) -> list[int]:
    """Sync once per total (every `period` s from t=0); the replica count after each sync."""
    state, current, out = HPAState(), start, []
    for i, total in enumerate(totals):
        scale = ScaleSubresource(current, current, current)
        result, state = hpa_sync(config, state, i * period, scale, [metric(total)])
        current = result.desired_replicas
        out.append(current)
    return out


@dataclass(frozen=True)
class Case:
    name: str
    config: HPAConfig
    start: int
    totals: list[float | None]
    want: list[int]


MAX_DEFAULT = Behavior()  # a behavior object with every field defaulted: 4 pods or 100 % per 15 s, Max
PODS_4 = Behavior(scale_up=ScalingRules(policies=(ScalingPolicy("Pods", 4, 15),)))
MIN_POLICY = Behavior(scale_up=ScalingRules(select_policy="Min"))
PODS_4_PER_60 = Behavior(scale_up=ScalingRules(policies=(ScalingPolicy("Pods", 4, 60),)))
ONE_DOWN_PER_60 = Behavior(scale_down=ScalingRules(stabilization_window_seconds=0,
                                                   policies=(ScalingPolicy("Pods", 1, 60),)))
HALF_DOWN = Behavior(scale_down=ScalingRules(stabilization_window_seconds=0,
                                             policies=(ScalingPolicy("Percent", 50, 15),)))
NO_DOWN = Behavior(scale_down=ScalingRules(select_policy="Disabled"))
FAST_DOWN = Behavior(scale_down=ScalingRules(stabilization_window_seconds=0))
UP_WINDOW_30 = Behavior(scale_up=ScalingRules(stabilization_window_seconds=30))

CASES = [
    # tolerance 0.1 on ratio = total / (target x replicas): at 10, 11 (1.1) and 9 (0.9) are dropped, 12 acts
    Case("tolerance: 11 at 10 replicas is dropped", HPAConfig(), 10, [11], [10]),
    Case("tolerance: 9 at 10 replicas is dropped", HPAConfig(), 10, [9], [10]),
    Case("tolerance: 12 at 10 replicas acts", HPAConfig(), 10, [12], [12]),
    Case("tolerance: 8 at 10 replicas acts (no history yet)", HPAConfig(), 10, [8], [8]),
    Case("tolerance: ratio just over 1.1 acts", HPAConfig(), 10, [11.001], [12]),
    # no behavior: scale-down stabilization keeps the max recommendation of the last 300 s; a sample
    # exactly 300 s old still counts (only samples *before* the cutoff drop), so 10 at t=0 holds
    # through t=300 and the drop lands at t=315
    Case("stabilization: a drop waits 300 s", HPAConfig(), 10, [10] + [5] * 21, [10] * 21 + [5]),
    Case("stabilization: the max over the window wins", HPAConfig(), 10, [10, 8] + [5] * 21,
         [10] * 21 + [8, 5]),
    Case("stabilization: a short dip is never applied", HPAConfig(), 10, [10, 5, 5, 10, 5], [10] * 5),
    # no behavior: scale-up capped at max(2 x current, 4) per sync
    Case("cap without behavior: 1 -> 4 -> 8 -> 16 -> 32 -> 40", HPAConfig(), 1, [40] * 5, [4, 8, 16, 32, 40]),
    Case("cap without behavior: 5 -> 10", HPAConfig(), 5, [40], [10]),
    Case("cap without behavior: maxReplicas below the cap", HPAConfig(max_replicas=12), 10, [40], [12]),
    # with a behavior: default policies Pods 4 / Percent 100 per 15 s, selectPolicy Max
    Case("default behavior: 1 -> 5 -> 10 -> 20 -> 40", HPAConfig(behavior=MAX_DEFAULT), 1, [40] * 4, [5, 10, 20, 40]),
    Case("Pods 4 per 15 s only: +4 per sync", HPAConfig(behavior=PODS_4), 1, [40] * 4, [5, 9, 13, 17]),
    Case("selectPolicy Min: the smaller of +4 and x2", HPAConfig(behavior=MIN_POLICY), 1, [40] * 6,
         [2, 4, 8, 12, 16, 20]),
    Case("Pods 4 per 60 s: one step per minute", HPAConfig(behavior=PODS_4_PER_60), 1, [40] * 6,
         [5, 5, 5, 5, 9, 9]),
    # with a behavior the down window drops a sample exactly 300 s old (only samples *after* the cutoff count)
    Case("default behavior: a drop waits 300 s", HPAConfig(behavior=MAX_DEFAULT), 10, [10] + [5] * 20,
         [10] * 20 + [5]),
    Case("scale-down Pods 1 per 60 s", HPAConfig(behavior=ONE_DOWN_PER_60), 10, [2] * 6, [9, 9, 9, 9, 8, 8]),
    Case("scale-down Percent 50: int(5 x 0.5) = 2", HPAConfig(behavior=HALF_DOWN), 5, [1], [2]),
    Case("scale-down Disabled never scales down", HPAConfig(behavior=NO_DOWN), 10, [2] * 30, [10] * 30),
    # up window 30 s: the 2 recorded at t=0 caps t=15; at t=30 it is out (not after the cutoff) and the
    # default policies allow max(2 + 4, 2 x 2) = 6, then 8
    Case("scale-up stabilization 30 s: min over the window", HPAConfig(behavior=UP_WINDOW_30), 2, [2, 8, 8, 8],
         [2, 2, 6, 8]),
    # min / max: the HPA never goes below 1 (KEDA's HPA minReplicas is max(minReplicaCount, 1))
    Case("never below 1", HPAConfig(behavior=FAST_DOWN), 3, [0], [1]),
    Case("never below minReplicas", HPAConfig(min_replicas=2, behavior=FAST_DOWN), 3, [0], [2]),
    Case("max clamp with behavior", HPAConfig(max_replicas=6, behavior=MAX_DEFAULT), 4, [40], [6]),
    # a metric error holds the count (FailedGetExternalMetric) and records nothing
    Case("metric error holds", HPAConfig(), 4, [None, None], [4, 4]),
    # the tolerance knob needs the feature gate
    Case("behavior tolerance ignored without the gate",
         HPAConfig(behavior=Behavior(scale_up=ScalingRules(tolerance=0.0))), 10, [11], [10]),
    Case("behavior tolerance 0 with the gate",
         HPAConfig(behavior=Behavior(scale_up=ScalingRules(tolerance=0.0)), configurable_tolerance=True),
         10, [11], [11]),
    Case("cluster-wide tolerance flag", HPAConfig(tolerance=0.0), 10, [11], [11]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hpa_timeline(case: Case) -> None:
    assert run(case.config, case.start, case.totals) == case.want


def test_current_above_max_goes_to_max_without_metrics() -> None:
    result, _ = hpa_sync(HPAConfig(max_replicas=5), HPAState(), 0.0, ScaleSubresource(8, 8, 8), [metric(20)])
    assert (result.desired_replicas, result.reason, result.metric_replicas) == (5, "AboveMaxReplicas", None)


def test_zero_replicas_disables_scaling() -> None:
    result, state = hpa_sync(HPAConfig(), HPAState(), 0.0, ScaleSubresource(0, 0, 0), [metric(20)])
    assert (result.desired_replicas, result.rescale, result.reason) == (0, False, "ScalingDisabled")
    assert state == HPAState()


def test_average_value_ratio_uses_all_pods_not_ready_ones() -> None:
    # 10 desired in spec, 8 pods exist, 1 ready: 9 / 8 = 1.125 is outside the tolerance -> ceil(9 / 1) = 9
    result, _ = hpa_sync(HPAConfig(), HPAState(), 0.0, ScaleSubresource(10, 8, 1), [metric(9)])
    assert result.proposals == {"s0-m": 9}
    assert result.desired_replicas == 9


def test_value_metric_type_scales_ready_pods() -> None:
    # Value: ratio = 30 / 10 = 3, times 2 ready pods = 6
    m = metric(30, target=10, metric_type="Value")
    result, _ = hpa_sync(HPAConfig(), HPAState(), 0.0, ScaleSubresource(4, 4, 2), [m])
    assert result.desired_replicas == 6


def test_max_over_metrics_and_partial_errors() -> None:
    ok_up, failed = metric(6), metric(None)
    up, _ = hpa_sync(HPAConfig(), HPAState(), 0.0, ScaleSubresource(3, 3, 3), [ok_up, failed])
    assert (up.desired_replicas, up.reason) == (6, "DesiredWithinRange")
    # one metric fails and the others would scale down: hold
    down, _ = hpa_sync(HPAConfig(), HPAState(), 0.0, ScaleSubresource(3, 3, 3), [metric(1), failed])
    assert (down.desired_replicas, down.rescale, down.reason) == (3, False, "FailedGetExternalMetric")


def test_fractional_values_in_milli_units() -> None:
    # 2.5 replicas' worth at target 1 -> ceil(2500 / 1000) = 3
    result, _ = hpa_sync(HPAConfig(), HPAState(), 0.0, ScaleSubresource(1, 1, 1), [metric(2.5)])
    assert result.desired_replicas == 3


def test_default_rules() -> None:
    up = resolve_rules(None, up=True, downscale_window_s=300)
    down = resolve_rules(ScalingRules(select_policy="Min"), up=False, downscale_window_s=300)
    assert (up.stabilization_window_seconds, up.select_policy, up.policies) == (
        0, "Max", (ScalingPolicy("Pods", 4, 15), ScalingPolicy("Percent", 100, 15)))
    assert (down.stabilization_window_seconds, down.select_policy, down.policies) == (
        300, "Min", (ScalingPolicy("Percent", 100, 15),))


def test_config_refuses_zero_min() -> None:
    with pytest.raises(ValueError, match="min_replicas must be >= 1"):
        HPAConfig(min_replicas=0)
