"""An engine down, slow or answering garbage, end to end: engine -> real exporter -> real scaler -> KEDA's poll.

The exporter tests show what the exporter does with each (tests/exporter/test_exporter_badinput.py);
here the question is what reaches KEDA: the only replica of the model stops reporting, so the scaler
has no usable data and answers UNAVAILABLE (KEDA and the HPA hold the count) within the collection that
sees it, never a lower count and never `inactive`; when the engine answers again, the same answer as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import grpc
import pytest
from loopback_world import LOAD, LoopbackWorld
from scaler_harness import get


def down(w: LoopbackWorld) -> None:
    w.engine.mode = "status"  # HTTP 500: the process is up, the engine is not


def slow(w: LoopbackWorld) -> None:
    w.engine.mode = "hang"  # accepts, reads the request, never answers: past the exporter's timeout


def garbage(w: LoopbackWorld) -> None:
    w.engine.body = b"<html>upstream connect error or disconnect/reset before headers</html>\n"


@pytest.fixture
def world() -> Iterator[LoopbackWorld]:
    w = LoopbackWorld(timeout="300ms")
    yield w
    w.close()


@pytest.mark.parametrize(("fault", "reason"), [(down, "http_status"), (slow, "timeout"), (garbage, "unknown_engine")])
def test_an_engine_fault_makes_keda_hold_then_the_same_answer_comes_back(
        world: LoopbackWorld, fault: Callable[[LoopbackWorld], None], reason: str) -> None:
    so = world.ref(scaleToZero="true", idleTimeout="60s")
    world.client.GetMetricSpec(so)
    world.step(10)
    assert world.poll(so) == (16, True)
    fault(world)
    world.step(1)
    assert world.poll(so) == grpc.StatusCode.UNAVAILABLE
    status, text = get(f"http://{world.exporter_address}/metrics")
    assert status == 200
    up = [line for line in text.splitlines() if line.startswith("llm_engine_up{") and 'pod="llama-0"' in line]
    assert len(up) == 1 and float(up[0].rsplit(" ", 1)[1]) == 0, up  # the exporter says the replica is down
    assert f'reason="{reason}"' in text
    world.step(5)
    assert world.poll(so) == grpc.StatusCode.UNAVAILABLE  # held for as long as it lasts, never a zero
    world.engine.mode = "serve"
    world.serve(LOAD)
    world.step(1)
    assert world.poll(so) == (16, True)
