"""The real core behind the real server: HistoryStore + decide, fed observations as a source would.

Two scaler pods fed the same inputs must give KEDA the same answers, whichever pod it asks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from scaler_harness import FakeClock, ServerThread, keda_poll, post, ref, stub

from keda_llm.scaler.activation import ActivationBus
from keda_llm.scaler.decide import decide
from keda_llm.scaler.model import Observation, ReplicaSample
from keda_llm.scaler.service import HistoryStore, ScalerService

MODEL = "llama-8b"
# concurrency policy: desired = ceil((running + waiting) / targetConcurrency), summed over replicas.
# mode reactive: the hand-derived counts are the Knative windows' (the default mode, hybrid, adds the forecast).
META = {"model": MODEL, "policy": "concurrency", "targetConcurrency": "10", "scaleToZero": "true",
        "idleTimeout": "60s", "mode": "reactive"}
T0 = 10_000.0


class FakeSource:
    """Publishes the same observations to every subscriber, as one collection cycle would."""

    def __init__(self) -> None:
        self.subscribers: list[Callable[[Observation], None]] = []

    def subscribe(self, callback: Callable[[Observation], None]) -> None:
        self.subscribers.append(callback)

    def publish(self, at: float, per_replica: list[tuple[float, float]]) -> None:
        obs = Observation("llm", MODEL, at, tuple(
            ReplicaSample(f"{MODEL}-{i}", at, running=r, waiting=w) for i, (r, w) in enumerate(per_replica)))
        for cb in self.subscribers:
            cb(obs)


def scaler_pod(source: FakeSource, clock: FakeClock) -> ServerThread:
    store = HistoryStore()
    source.subscribe(store.ingest)
    service = ScalerService(decide=decide, histories=store.get, history_lock=store.lock,
                            bus=ActivationBus(clock=clock), clock=clock)
    return ServerThread(service)


@pytest.fixture
def world() -> Iterator[tuple[FakeSource, FakeClock, ServerThread, ServerThread]]:
    source, clock = FakeSource(), FakeClock(T0)
    a, b = scaler_pod(source, clock), scaler_pod(source, clock)
    yield source, clock, a, b
    a.stop()
    b.stop()


def feed(source: FakeSource, clock: FakeClock, seconds: int, per_replica: list[tuple[float, float]]) -> None:
    for _ in range(seconds):
        clock.now += 1.0
        source.publish(clock.now, per_replica)


def answers(client: Any) -> Any:
    so = ref("chat", **META)
    try:
        return keda_poll(client, so)
    except grpc.RpcError as err:
        return err.code(), err.details()


def test_two_pods_fed_the_same_inputs_answer_every_rpc_the_same(
        world: tuple[FakeSource, FakeClock, ServerThread, ServerThread]) -> None:
    source, clock, a, b = world
    with grpc.insecure_channel(a.target) as ca, grpc.insecure_channel(b.target) as cb:
        client_a, client_b = stub(ca), stub(cb)
        seen = []
        phases = [
            (120, [(15.0, 0.0), (15.0, 0.0)]),  # steady: 30 in flight / 10 -> 3
            (10, [(40.0, 10.0), (40.0, 10.0)]),  # spike: 100 -> 10 (panic)
            (70, [(5.0, 0.0), (5.0, 0.0)]),  # drop: 10 -> 1, but no scale-down during panic
            (70, [(0.0, 0.0), (0.0, 0.0)]),  # no demand past idleTimeout (60 s): inactive, 0
        ]
        for seconds, load in phases:
            for _ in range(seconds // 10):
                feed(source, clock, 10, load)
                got_a, got_b = answers(client_a), answers(client_b)
                assert got_a == got_b, clock.now - T0
                seen.append(got_a)
        # Hand-derived checkpoints: the steady phase lands on 3; the idle phase ends inactive at 0.
        name = seen[0].specs[0][0]
        assert seen[11].values == [(name, 3, 3.0)] and seen[11].active is True
        assert seen[-1].values == [(name, 0, 0.0)] and seen[-1].active is False
        assert max(p.values[0][1] for p in seen) == 10
        # An activation posted to A is passed nowhere (no peers here) yet both agree once B gets it too.
        post(a.http + "/v1/activate/llm/chat")
        post(b.http + "/v1/activate/llm/chat")
        got_a, got_b = answers(client_a), answers(client_b)
        assert got_a == got_b and got_a.active is True and got_a.values[0][1] == 1


def test_nan_in_samples_counts_as_not_reported(world: tuple[FakeSource, FakeClock, ServerThread, ServerThread]) -> None:
    source, clock, a, _ = world
    # Replica 1 reports NaN running: only replica 0's 15 in flight count -> ceil(15 / 10) = 2.
    feed(source, clock, 120, [(15.0, 0.0), (math.nan, 0.0)])
    with grpc.insecure_channel(a.target) as channel:
        poll = keda_poll(stub(channel), ref("chat", **META))
    assert [v[1:] for v in poll.values] == [(2, 2.0)]


def test_sources_down_past_stale_after_is_unavailable(
        world: tuple[FakeSource, FakeClock, ServerThread, ServerThread]) -> None:
    source, clock, a, _ = world
    feed(source, clock, 120, [(15.0, 0.0), (15.0, 0.0)])
    clock.now += 31.0  # staleAfter defaults to 30 s: the last collection is now too old
    with grpc.insecure_channel(a.target) as channel:
        client = stub(channel)
        with pytest.raises(grpc.RpcError) as err:
            keda_poll(client, ref("chat", **META))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "staleAfter" in err.value.details()
