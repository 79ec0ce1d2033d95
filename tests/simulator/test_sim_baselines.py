"""Baselines through the same KEDA+HPA emulator, replica counts worked out by hand."""

from __future__ import annotations

import pytest
from sim_helpers import config, run, trace

from keda_llm.scaler.model import Observation, ReplicaSample
from keda_llm.simulator.cluster.engine import ObservedState
from keda_llm.simulator.control.baselines import MetricScaler, concurrency_baseline, gpu_baseline, queue_baseline
from keda_llm.simulator.control.controllers import KedaController
from keda_llm.simulator.control.policies import build_controller


def _ups(ctl: KedaController) -> list[tuple[float, int, int]]:
    return [(e.at, e.replicas_before, e.replicas_after) for e in ctl.events if e.kind == "hpa_scale_up"]


def test_metric_values_from_one_collection() -> None:
    obs = Observation("default", "m", 10.0, (
        ReplicaSample("a", 10.0, running=4, waiting=3), ReplicaSample("b", 10.0, running=2, waiting=6),
        ReplicaSample("c", 0.0, up=False),
    ))
    state = ObservedState(obs, (0.5, 0.25), gateway_pending=5)
    q, g, c = MetricScaler("queue", 5), MetricScaler("gpu", 80), MetricScaler("concurrency", 8)
    for s in (q, g, c):
        s.latest = state
    assert q.value() == 9.0  # waiting 3 + 6 (the loading pod reports nothing)
    assert g.value() == 75.0  # 100 x (0.5 + 0.25)
    assert c.value() == 4 + 3 + 2 + 6 + 5  # running + waiting + held at the gateway
    assert MetricScaler("queue", 5).value() == 0.0  # no data yet: Prometheus' empty result reads 0


def test_queue_baseline_scales_on_waiting_requests() -> None:
    # batch limit 1, 12 requests at t=0: one runs, 11 wait. KEDA polls at 0 (pollingInterval 15), the HPA
    # syncs at 0: AverageValue 11 / (threshold 5 x 1 pod) = 2.2 -> ceil(11 / 5) = 3 (cap max(2 x 1, 4) = 4).
    settings, scaler = queue_baseline(max_replicas=10)
    ctl = KedaController("queue", settings, scaler)
    run(trace([0] * 12, output=100), config(max_num_seqs=1), ctl)
    assert _ups(ctl)[0] == (0.0, 1, 3)


def test_gpu_baseline_needs_a_busy_interval() -> None:
    # At 0 no interval has passed (utilization 0): no change. At 15 the pod was busy all of (10, 15]: 100%
    # against 80% per pod -> ceil(100 / 80) = 2.
    settings, scaler = gpu_baseline(max_replicas=10)
    ctl = KedaController("gpu", settings, scaler)
    run(trace([0] * 4, output=100), config(max_num_seqs=1), ctl)
    assert _ups(ctl)[0] == (15.0, 1, 2)


def test_concurrency_baseline() -> None:
    # running 1 + waiting 11 = 12 in flight, target 4 per pod -> 3 at the first sync (t=0)
    settings, scaler = concurrency_baseline(max_replicas=10, target=4)
    ctl = KedaController("concurrency", settings, scaler)
    run(trace([0] * 12, output=100), config(max_num_seqs=1), ctl)
    assert _ups(ctl)[0] == (0.0, 1, 3)


def test_unknown_policy_and_bad_target() -> None:
    with pytest.raises(ValueError, match="unknown policy 'hpa'"):
        build_controller("hpa", model="m", max_replicas=4, concurrency_target=8, static_replicas=1)
    with pytest.raises(ValueError, match="target must be > 0, got 0"):
        MetricScaler("queue", 0)
