"""Backlog as work (scaler/policy.py `backlog_replicas`, history's `saturated_prefill_rate`): a queue of
long prompts asks for the replicas that drain it within a cold start, not for KV to hold it all at once."""

from __future__ import annotations

import pytest

from keda_llm.scaler.config import parse_metadata
from keda_llm.scaler.history import Load, ModelHistory, Snapshot
from keda_llm.scaler.model import Observation, ReplicaSample
from keda_llm.scaler.policy import backlog_replicas, demand


def _feed(h: ModelHistory, seconds: int, rate_a: float, rate_b: float, waiting_a: float, waiting_b: float) -> None:
    """Two replicas scraped every 5 s with prompt counters growing at the given rates."""
    for i in range(seconds // 5 + 1):
        t = 100.0 + 5 * i
        h.ingest(Observation("ns", "m", t, (
            ReplicaSample("a", t, running=4, waiting=waiting_a, prompt_tokens_total=rate_a * t),
            ReplicaSample("b", t, running=1, waiting=waiting_b, prompt_tokens_total=rate_b * t))))


def test_prefill_rate_is_read_from_the_replicas_that_queue_only() -> None:
    h = ModelHistory("ns", "m")
    _feed(h, 60, rate_a=12000.0, rate_b=300.0, waiting_a=30, waiting_b=0)
    # b never queued: its 300 tokens/s is what it was asked, not what it can do
    assert h.saturated_prefill_rate() == pytest.approx(12000.0)
    snap = h.snapshot(160.0)
    assert snap is not None and snap.prefill_rate == pytest.approx(12000.0)


def test_no_queue_no_measured_rate() -> None:
    h = ModelHistory("ns", "m")
    _feed(h, 60, rate_a=12000.0, rate_b=300.0, waiting_a=0, waiting_b=0)
    assert h.saturated_prefill_rate() is None


def test_backlog_drains_within_a_cold_start() -> None:
    cfg = parse_metadata({"model": "m", "coldStart": "200s"})
    snap = Snapshot(0.0, 2, 0, 0, 0.0, Load(), None, None, prefill_rate=10000.0)
    # 300 queued prompts x 10,000 tokens = 3e6 tokens; one replica prefills 10,000/s x 200 s = 2e6 per cold start
    assert backlog_replicas(3e6, cfg, snap) == pytest.approx(1.5)
    assert backlog_replicas(3e6, cfg, Snapshot(0.0, 2, 0, 0, 0.0, Load(), None, None)) is None


def test_tokens_policy_counts_the_queue_as_work_once_a_rate_is_measured() -> None:
    cfg = parse_metadata({"model": "m", "coldStart": "200s"})
    # 2 replicas of 400,000 KV tokens, 300,000 held; 300 waiting of 10,000-token prompts (from the rates)
    load = Load(replicas=2, running=8, waiting=300, kv_used=300000, kv_capacity=800000, kv_replicas=2,
                prompt_rate=20000, finished_rate=2)
    as_kv = demand(load, cfg, Snapshot(0.0, 2, 0, 0, 0.0, load, None, None))
    # held 300,000 + queued 3,000,000 over 400,000 x 0.8 per replica
    assert as_kv.desired == pytest.approx(3.3e6 / 320000)
    as_work = demand(load, cfg, Snapshot(0.0, 2, 0, 0, 0.0, load, None, None, prefill_rate=10000.0))
    # held 300,000 / 320,000 + 3,000,000 / (10,000 x 200)
    assert as_work.desired == pytest.approx(300000 / 320000 + 1.5)
    assert as_work.parts["backlog_desired"] == pytest.approx(1.5)
