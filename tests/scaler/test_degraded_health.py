"""scaler/health.py's two rules, the deficit, and how the sources read `llm_replica_degraded`."""

from __future__ import annotations

import pytest

from keda_llm.scaler.health import Health, ReplicaHealth, assess
from keda_llm.scaler.history import ReplicaWindow
from keda_llm.scaler.policy import Demand
from keda_llm.scaler.sources.exposition import observations_from_exposition
from keda_llm.scaler.sources.prometheus import observations_from_vectors
from keda_llm.scaler.sources.promql import VectorSample


def w(pod: str, running: float | None = 8.0, rate: float | None = 320.0, *degraded: str) -> ReplicaWindow:
    return ReplicaWindow(pod, tuple(degraded), running, rate)


def fractions(health: Health) -> dict[str, tuple[float, str]]:
    return {r.pod: (round(r.fraction, 9), r.reason) for r in health.replicas}


def test_gpu_reasons_count_as_the_degraded_fraction() -> None:
    got = assess([w("a"), w("b", 8.0, 320.0, "gpu_ecc", "gpu_xid"), w("c", 8.0, 320.0, "gpu_throttled")], 0.5, 0.7)
    # two reasons on one replica: the first in DEGRADED_REASONS order (gpu_throttled, gpu_xid, gpu_ecc) names it
    assert fractions(got) == {"a": (1.0, "healthy"), "b": (0.5, "gpu_xid"), "c": (0.5, "gpu_throttled")}
    assert got.deficit == 1.0
    assert fractions(assess([w("b", 8.0, 320.0, "gpu_xid")], 1.0, 0.7)) == {"b": (1.0, "healthy")}  # 1: off


def test_slow_is_judged_per_running_request_against_the_peers_median() -> None:
    # per running request: a 40, b 40, c 10 (80 / 8), d 20 (80 / 4): d got less work, it is not slower
    got = assess([w("a"), w("b"), w("c", 8.0, 80.0), w("d", 4.0, 160.0)], 0.5, 0.7)
    # c: peers a, b, d -> 40, 40, 40 -> median 40; 10 / 40 = 0.25 < 0.7 -> 0.25
    assert fractions(got) == {"a": (1.0, "healthy"), "b": (1.0, "healthy"), "c": (0.25, "slow"),
                              "d": (1.0, "healthy")}
    assert got.deficit == 0.75


def test_idle_and_unreported_replicas_are_not_judged_slow() -> None:
    got = assess([w("a"), w("b", 0.5, 1.0), w("c", None, None), w("d", 8.0, None)], 0.5, 0.7)
    assert {p: f for p, (f, _) in fractions(got).items()} == {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0}
    assert fractions(assess([w("a", 8.0, 80.0)], 0.5, 0.7)) == {"a": (1.0, "healthy")}  # no peer: no judgement


def test_two_replicas_the_slow_one_against_the_other() -> None:
    got = assess([w("a", 8.0, 320.0), w("b", 8.0, 192.0)], 0.5, 0.7)  # 24 vs 40 per request: 0.6
    assert fractions(got) == {"a": (1.0, "healthy"), "b": (0.6, "slow")}
    assert fractions(assess([w("a", 8.0, 320.0), w("b", 8.0, 192.0)], 0.5, 0.0))["b"] == (1.0, "healthy")  # off


def test_the_smaller_fraction_wins() -> None:
    got = assess([w("a"), w("b"), w("c", 8.0, 64.0, "gpu_throttled"), w("d", 8.0, 224.0, "gpu_xid")], 0.5, 0.8)
    # c: throttled 0.5, slow 8 / 40 = 0.2 -> 0.2 slow; d: xid 0.5, slow 28 / 40 = 0.7 -> 0.5 gpu_xid
    assert fractions(got)["c"] == (0.2, "slow") and fractions(got)["d"] == (0.5, "gpu_xid")


def test_apply_adds_the_deficit_only_with_demand() -> None:
    health = Health((ReplicaHealth("a", 0.5, "gpu_xid"), ReplicaHealth("b", 1.0, "healthy")))
    d = health.apply(Demand(30.0, 10.0, 3.0, {"x": 1.0}))
    assert (d.desired, d.parts) == (3.5, {"x": 1.0, "desired_whole_replicas": 3.0})
    assert health.apply(Demand(0.0, 10.0, 0.0)).desired == 0.0
    assert Health().apply(Demand(30.0, 10.0, 3.0)).desired == 3.0
    assert health.details() == {"capacity_fractions": 1.5, "capacity_deficit": 0.5, "degraded_gpu_throttled": 0.0,
                                "degraded_gpu_xid": 1.0, "degraded_gpu_ecc": 0.0, "degraded_slow": 0.0,
                                "replica_fraction:gpu_xid:a": 0.5}


LABELS = 'model="m",engine="vllm",role="unified",namespace="llm",pod="{pod}",node="n"'


def test_the_exporters_source_reads_the_reasons() -> None:
    body = "\n".join([
        f'llm_engine_up{{{LABELS.format(pod="p0")}}} 1',
        f'llm_engine_last_success_timestamp_seconds{{{LABELS.format(pod="p0")}}} 99',
        f'llm_replica_degraded{{{LABELS.format(pod="p0")}, reason="gpu_throttled"}} 1',
        f'llm_replica_degraded{{{LABELS.format(pod="p0")},reason="gpu_xid"}} 0',
        f'llm_replica_degraded{{{LABELS.format(pod="p0")},reason="gpu_ecc"}} 1',
        f'llm_lora_adapters_running{{{LABELS.format(pod="p0")}}} 3',
        f'llm_lora_adapters_waiting{{{LABELS.format(pod="p0")}}} 1',
        f'llm_lora_adapters_max{{{LABELS.format(pod="p0")}}} 4',
        f'llm_engine_up{{{LABELS.format(pod="p1")}}} 1',
        f'llm_engine_last_success_timestamp_seconds{{{LABELS.format(pod="p1")}}} 99',
    ])
    (obs,) = observations_from_exposition(body, 100.0)
    p0, p1 = obs.replicas
    assert (p0.degraded, p0.lora_running, p0.lora_waiting, p0.lora_max) == (("gpu_ecc", "gpu_throttled"), 3, 1, 4)
    assert (p1.degraded, p1.lora_max) == ((), None)


def test_the_prometheus_source_reads_the_reasons() -> None:
    base = {"namespace": "llm", "model": "m", "pod": "p0"}
    (obs,), invalid = observations_from_vectors({
        "timestamp": [VectorSample(base, 99.0)],
        "degraded": [VectorSample({**base, "reason": "gpu_xid"}, 1.0),
                     VectorSample({**base, "reason": "gpu_ecc"}, 0.0)],
    }, 100.0)
    assert invalid == 0 and obs.replicas[0].degraded == ("gpu_xid",)


@pytest.mark.parametrize("key", ["degradedFraction", "slowReplicaRatio"])
def test_the_knobs_refuse_values_out_of_range(key: str) -> None:
    from keda_llm.scaler.config import ConfigError, parse_metadata

    with pytest.raises(ConfigError, match=key):
        parse_metadata({"model": "m", key: "1.5"})
    assert getattr(parse_metadata({"model": "m", key: "0"}), {"degradedFraction": "degraded_fraction",
                                                            "slowReplicaRatio": "slow_replica_ratio"}[key]) == 0.0
