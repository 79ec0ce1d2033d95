"""1,000 StreamIsActive streams reconnecting at once: a scaler pod stops with KEDA's 1,000 `external-push`
triggers on it, and KEDA (one connection per scaler address) opens all of them again on the peer pod.

On the real gRPC servers over loopback: pod A is stopped (NOT_SERVING, streams cancelled), and the 1,000
streams are opened on pod B all at once while KEDA's polls keep coming. Half the ScaledObjects are
activated on B during the storm, before their streams are back; the other half after. Each stream must
receive exactly one `true` (nothing lost, nothing doubled, never `false`), B must hold exactly 1,000
streams (none evicted, none leaked), and the polls must stay within the HPA path's 3 s deadline.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
from scaler_harness import FakeClock, FakeHistory, ServerThread, make_service, ref

from keda_llm.scaler.activation import ScaledObjectKey
from keda_llm.scaler.externalscaler import externalscaler_pb2 as pb
from keda_llm.scaler.externalscaler import externalscaler_pb2_grpc as pb_grpc

N = 1000
HPA_DEADLINE_S = 3.0


def so(i: int) -> pb.ScaledObjectRef:
    return ref(f"so-{i}", model=f"model-{i}", scaleToZero="true")


def test_1000_streams_reconnect_at_once_to_the_peer_with_nothing_lost() -> None:
    histories = {("llm", f"model-{i}"): FakeHistory(desired=0, active=False) for i in range(N)}
    a = ServerThread(make_service(histories, FakeClock()))
    b = ServerThread(make_service(histories, FakeClock()))
    try:
        results = asyncio.run(_storm(a, b))
    finally:
        b.stop()
    ends_on_a, messages, poll_times, streams_on_b, watched = results
    assert set(ends_on_a) <= {grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE}, set(ends_on_a)
    assert len(ends_on_a) == N  # every stream on A ended (KEDA sees the end and reconnects)
    assert messages == [[True]] * N  # exactly one `true` per ScaledObject, never a `false`
    assert streams_on_b == N  # none evicted, none leaked
    assert watched == N  # one entry per ScaledObject: the streams of A left nothing behind on B
    assert max(poll_times) < HPA_DEADLINE_S, max(poll_times)


async def _read(call: Any, into: list[Any]) -> Any:
    try:
        async for msg in call:
            into.append(msg.result)
    except grpc.aio.AioRpcError as err:
        return err.code()
    return "ended"


async def _storm(a: ServerThread, b: ServerThread) -> tuple[list[Any], list[list[bool]], list[float], int, int]:
    # KEDA's 1,000 streams on A, then A stops.
    async with grpc.aio.insecure_channel(a.target) as channel_a:
        client_a: Any = pb_grpc.ExternalScalerStub(channel_a)  # type: ignore[no-untyped-call]
        sink: list[Any] = []
        readers = [asyncio.create_task(_read(client_a.StreamIsActive(so(i)), sink)) for i in range(N)]
        while a.service.bus.streams() < N:
            await asyncio.sleep(0.02)
        await asyncio.get_running_loop().run_in_executor(None, a.stop)
        ends_on_a = await asyncio.wait_for(asyncio.gather(*readers), 30)
        assert sink == []  # idle ScaledObjects: nothing was pushed on A

    async with grpc.aio.insecure_channel(b.target) as channel_b, grpc.aio.insecure_channel(b.target) as polls:
        client_b: Any = pb_grpc.ExternalScalerStub(channel_b)  # type: ignore[no-untyped-call]
        poller: Any = pb_grpc.ExternalScalerStub(polls)  # type: ignore[no-untyped-call]
        # During the storm: half the ScaledObjects are activated on B before their stream is back.
        for i in range(0, N, 2):
            b.service.activate(ScaledObjectKey("llm", f"so-{i}"))
        messages: list[list[bool]] = [[] for _ in range(N)]
        readers = [asyncio.create_task(_read(client_b.StreamIsActive(so(i)), messages[i])) for i in range(N)]
        poll_times: list[float] = []

        async def keda_polls() -> None:
            # KEDA's polling loop keeps asking (the HPA path: GetMetrics, IsActive) during the storm.
            for round_ in range(5):
                for i in range(round_, N, 50):
                    t0 = time.monotonic()
                    await poller.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=so(i)), timeout=HPA_DEADLINE_S)
                    active = await poller.IsActive(so(i), timeout=HPA_DEADLINE_S)
                    poll_times.append(time.monotonic() - t0)
                    assert active.result is (i % 2 == 0)
                await asyncio.sleep(0.01)

        await keda_polls()
        while b.service.bus.streams() < N:
            await asyncio.sleep(0.02)
        # After the storm: the other half is activated, each pushed on its stream at once.
        for i in range(1, N, 2):
            b.service.activate(ScaledObjectKey("llm", f"so-{i}"))
        deadline = time.monotonic() + 20
        while any(not m for m in messages) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # a doubled or late `false` would show here
        streams_on_b = b.service.bus.streams()
        watched = len(b.service.bus.watched())
        for r in readers:
            r.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
    return list(ends_on_a), messages, poll_times, streams_on_b, watched
