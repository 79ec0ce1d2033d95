"""The clock jumping forward and backward (an NTP step on the scaler's node), through the injected clock.

Every part takes its clock from the caller: the exporter stamps `llm_engine_last_success_timestamp_seconds`
with it, the scaler judges staleness, windows, idle timers and the activation hold with it. The test moves
that one clock for the exporter and the scaler together, as a step of the node's wall clock would.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from loopback_world import IDLE, LoopbackWorld
from scaler_harness import FakeClock, FakeHistory, ServerThread, make_service, post, ref, stub

HOUR = 3600.0


@pytest.fixture
def world() -> Iterator[LoopbackWorld]:
    w = LoopbackWorld()
    yield w
    w.close()


def test_a_forward_jump_holds_until_the_next_collection_then_answers_the_same(world: LoopbackWorld) -> None:
    so = world.ref(scaleToZero="true", idleTimeout="60s")
    world.client.GetMetricSpec(so)  # KEDA's first call starts collection for it
    world.step(30)
    assert world.poll(so) == (16, True)
    world.clock.now += HOUR
    # Before anything is collected on the new clock, the last sample is an hour old: UNAVAILABLE, so
    # KEDA and the HPA hold the count; never a lower one, never an inactive answer.
    assert world.poll(so) == grpc.StatusCode.UNAVAILABLE
    world.step(1)
    assert world.poll(so) == (16, True)  # one collection later: the same answer as before the jump
    world.step(30)
    assert world.poll(so) == (16, True)


def test_without_a_jump_an_idle_model_reaches_zero_after_its_idle_timeout(world: LoopbackWorld) -> None:
    """The timeline of the backward-jump test below, with a clock that does not jump: its expected answer."""
    so = world.ref(scaleToZero="true", idleTimeout="60s")
    world.client.GetMetricSpec(so)
    world.step(30)
    assert world.poll(so) == (16, True)
    world.serve(IDLE)
    world.step(150)
    assert world.poll(so) == (0, False)


def test_a_backward_jump_keeps_following_the_data(world: LoopbackWorld) -> None:
    so = world.ref(scaleToZero="true", idleTimeout="60s")
    world.client.GetMetricSpec(so)
    world.step(30)
    assert world.poll(so) == (16, True)
    world.clock.now -= HOUR
    world.serve(IDLE)
    world.step(150)
    assert world.poll(so) == (0, False)  # what the same timeline gives without the jump (test above)


def test_a_backward_jump_does_not_stretch_an_activation_hold() -> None:
    clock = FakeClock()
    server = ServerThread(make_service({("llm", "llama"): FakeHistory(desired=0, active=False)}, clock))
    try:
        so = ref("chat", model="llama", scaleToZero="true")
        with grpc.insecure_channel(server.target) as channel:
            client = stub(channel)
            assert client.IsActive(so).result is False
            assert post(server.http + "/v1/activate/llm/chat")[0] == 200
            assert client.IsActive(so).result is True
            clock.now -= HOUR
            clock.now += server.service.activation_hold_s + 60  # longer than the hold since the activation
            assert client.IsActive(so).result is False
    finally:
        server.stop()
