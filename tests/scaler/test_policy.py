"""The four demand policies (scaler/policy.py): hand-derived numbers, one labelled case per behaviour."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from keda_llm.scaler.config import parse_metadata
from keda_llm.scaler.history import Load, ModelHistory
from keda_llm.scaler.model import Observation, ReplicaSample
from keda_llm.scaler.policy import NoSignal, demand, mean_prompt_tokens

# Two replicas, 10,000 KV tokens each, 50% and 30% full; 16 running, 4 waiting; batch limit 16 each;
# 2,000 prompt tokens/s over 4 finished requests/s = 500 tokens per request.
BASE = Load(replicas=2, running=16, waiting=4, kv_used=8000, kv_capacity=20000, kv_replicas=2, kv_ratio_mean=0.4,
            kv_ratio_max=0.5, max_running=32, max_running_replicas=2, prompt_rate=2000, generation_rate=900,
            finished_rate=4)
# Unequal replicas: 30,000 tokens at 90% and 10,000 at 10%: weighted 0.7, mean 0.5, max 0.9.
UNEQUAL = Load(replicas=2, running=8, waiting=0, kv_used=28000, kv_capacity=40000, kv_replicas=2, kv_ratio_mean=0.5,
               kv_ratio_max=0.9)


@dataclass(frozen=True)
class Case:
    label: str
    metadata: dict[str, str]
    load: Load
    want: dict[str, float]  # demand, per_replica, desired and any parts
    extra: dict[str, object] = field(default_factory=dict)


def L(**kw: float | None) -> Load:
    return Load(**{**BASE.__dict__, **kw})


CASES = [
    Case("tokens: held 8000 + queued 4x500 over 10000x0.8; concurrency (16+4)/(16x0.8) wins",
         {}, BASE, {"demand": 10000.0, "per_replica": 8000.0, "desired": 1.5625, "tokens_desired": 1.25,
                    "concurrency_desired": 1.5625, "tokens_queued": 2000.0, "mean_prompt_tokens": 500.0}),
    Case("tokens: without a batch limit the KV bound alone",
         {}, L(max_running=None, max_running_replicas=None),
         {"demand": 10000.0, "per_replica": 8000.0, "desired": 1.25}),
    Case("tokens: maxRunning from config overrides the reported limit: (16+4)/(40x0.8)",
         {"maxRunning": "40"}, BASE, {"desired": 1.25, "concurrency_desired": 0.625}),
    Case("tokens: upstream demand counts as queued requests: (4+6) x 500 = 5000 queued",
         {}, L(upstream=6, max_running=None, max_running_replicas=None),
         {"demand": 13000.0, "desired": 1.625, "tokens_queued": 5000.0}),
    Case("tokens: targetKVUtilization 0.5 -> 10000/5000",
         {"targetKVUtilization": "0.5"}, L(max_running=None, max_running_replicas=None),
         {"per_replica": 5000.0, "desired": 2.0}),
    Case("tokens: no KV capacity, batch limit known -> concurrency bound only",
         {}, L(kv_used=None, kv_capacity=None, kv_replicas=None), {"desired": 1.5625, "per_replica": 12.8}),
    Case("concurrency: (16+4)/8", {"policy": "concurrency", "targetConcurrency": "8"}, BASE,
         {"demand": 20.0, "per_replica": 8.0, "desired": 2.5}),
    Case("concurrency: unset target -> batch limit 16 x 0.8", {"policy": "concurrency"}, BASE,
         {"demand": 20.0, "per_replica": 12.8, "desired": 1.5625}),
    Case("kvCache weighted: 2 x 0.7 / 0.8", {"policy": "kvCache"}, UNEQUAL,
         {"demand": 1.4, "per_replica": 0.8, "desired": 1.75, "kv_usage": 0.7}),
    Case("kvCache mean: 2 x 0.5 / 0.8", {"policy": "kvCache", "aggregation": "mean"}, UNEQUAL,
         {"demand": 1.0, "desired": 1.25, "kv_usage": 0.5}),
    Case("kvCache max: 2 x 0.9 / 0.8", {"policy": "kvCache", "aggregation": "max"}, UNEQUAL,
         {"demand": 1.8, "desired": 2.25, "kv_usage": 0.9}),
    Case("queue: (4 waiting + 6 upstream)/5", {"policy": "queue"}, L(upstream=6),
         {"demand": 10.0, "per_replica": 5.0, "desired": 2.0}),
    Case("queue: targetQueueDepth 2 -> 4/2", {"policy": "queue", "targetQueueDepth": "2"}, BASE,
         {"demand": 4.0, "desired": 2.0}),
]


def diff(got: dict[str, float], want: dict[str, float]) -> None:
    picked = {k: got[k] for k in want if k in got}
    assert picked == pytest.approx(want, rel=1e-12)
    assert set(want) <= set(got), f"missing: {set(want) - set(got)}"


@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
def test_policy(case: Case) -> None:
    d = demand(case.load, parse_metadata({"model": "m", **case.metadata}))
    diff({"demand": d.demand, "per_replica": d.per_replica, "desired": d.desired, **d.parts}, case.want)


@pytest.mark.parametrize("metadata,load,needle", [
    ({"policy": "concurrency"}, L(max_running=None, max_running_replicas=None), "targetConcurrency"),
    ({}, L(kv_used=None, kv_capacity=None, kv_replicas=None, max_running=None, max_running_replicas=None),
     "llm_kv_cache_capacity_tokens"),
    ({"policy": "kvCache"}, L(kv_used=None, kv_capacity=None, kv_replicas=None), "KV usage and capacity"),
], ids=["concurrency without target or limit", "tokens without capacity or limit", "kvCache without KV"])
def test_policy_without_signal_says_what_is_missing(metadata: dict[str, str], load: Load, needle: str) -> None:
    with pytest.raises(NoSignal, match=needle):
        demand(load, parse_metadata({"model": "m", **metadata}))


def test_mean_prompt_tokens_fallbacks() -> None:
    assert mean_prompt_tokens(BASE, None) == (500.0, "rates")
    assert mean_prompt_tokens(L(finished_rate=0.0), None) == (500.0, "held_per_running")  # 8000 held / 16 running
    assert mean_prompt_tokens(L(finished_rate=None, running=0.0), None) == (None, "unknown")


def test_sum_vs_mean_from_real_samples() -> None:
    """Through history: counts and tokens summed over replicas, KV usage weighted by capacity."""
    h = ModelHistory("ns", "m")
    reps = (
        ReplicaSample("a", 100.0, running=6, waiting=0, kv_usage_ratio=0.9, kv_capacity_tokens=30000, max_running=8),
        ReplicaSample("b", 100.0, running=2, waiting=3, kv_usage_ratio=0.1, kv_capacity_tokens=10000,
                      max_running=24),
    )
    h.ingest(Observation("ns", "m", 100.0, reps))
    load = h.window(100.0, 6.0)
    assert (load.running, load.waiting, load.kv_used, load.kv_capacity) == (8.0, 3.0, 28000.0, 40000.0)
    assert (load.kv_ratio_mean, load.kv_ratio_max, load.max_running, load.max_running_replicas) == (0.5, 0.9, 32, 2)
    kv = demand(load, parse_metadata({"model": "m", "policy": "kvCache"}))
    assert kv.desired == pytest.approx(2 * 0.7 / 0.8)
    # batch limit is the mean of 8 and 24 = 16 per replica: (8 + 3) / (16 x 0.8)
    conc = demand(load, parse_metadata({"model": "m", "policy": "concurrency"}))
    assert conc.desired == pytest.approx(11 / 12.8)
