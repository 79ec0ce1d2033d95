"""StreamIsActive as KEDA holds it (external-push triggers), health, reflection and shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from scaler_harness import (
    FakeClock,
    FakeHistory,
    ServerThread,
    StreamReader,
    make_service,
    post,
    ref,
    stub,
    wait_for_streams,
)

from keda_llm.scaler.externalscaler import externalscaler_pb2 as pb
from keda_llm.scaler.externalscaler import externalscaler_pb2_grpc as pb_grpc

MODEL = "qwen/Qwen2.5-7B"


@pytest.fixture
def histories() -> dict[tuple[str, str], Any]:
    return {("llm", MODEL): FakeHistory(desired=0, active=False)}


@pytest.fixture
def server(histories: dict[tuple[str, str], Any]) -> Iterator[ServerThread]:
    st = ServerThread(make_service(histories, FakeClock()))
    yield st
    st.stop()


def test_idle_stream_sends_nothing_then_true_on_activation_and_stays_open(server: ServerThread) -> None:
    so = ref("qwen", model=MODEL, scaleToZero="true")
    with grpc.insecure_channel(server.target) as channel:
        client = stub(channel)
        reader = StreamReader(client.StreamIsActive(so))
        wait_for_streams(server, 1)
        assert reader.messages.empty()  # inactive: nothing is pushed (never `false`)
        assert client.IsActive(so).result is False
        status, body = post(server.http + "/v1/activate/llm/qwen")
        assert (status, body["streams"]) == (200, 1)
        assert reader.next() is True
        # The activation also holds the polled answers: active, and at least one replica.
        assert client.IsActive(so).result is True
        value = client.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=so, metricName="")).metricValues[0]
        assert (value.metricValue, value.metricValueFloat) == (1, 1.0)
        # A second activation pushes again; the stream is still open in between.
        assert reader.call.is_active()
        post(server.http + "/v1/activate/llm/qwen")
        assert reader.next() is True
        assert reader.call.is_active()
        reader.call.cancel()
        assert reader.next() == grpc.StatusCode.CANCELLED
    wait_for_streams(server, 0)


def test_active_scaled_object_gets_true_at_once_when_the_stream_opens(
        histories: dict[tuple[str, str], Any], server: ServerThread) -> None:
    histories[("llm", MODEL)] = FakeHistory(desired=2, active=True)
    with grpc.insecure_channel(server.target) as channel:
        reader = StreamReader(stub(channel).StreamIsActive(ref("qwen", model=MODEL, scaleToZero="true")))
        assert reader.next() is True
        assert reader.call.is_active()
        reader.call.cancel()


def test_a_client_opening_100_streams_for_one_scaled_object_keeps_the_newest_32(server: ServerThread) -> None:
    so = ref("qwen", model=MODEL, scaleToZero="true")
    with grpc.insecure_channel(server.target) as channel:
        client = stub(channel)
        readers = []
        for i in range(100):
            readers.append(StreamReader(client.StreamIsActive(so)))
            wait_for_streams(server, min(i + 1, 32))
        assert server.service.bus.streams() == 32
        # The 68 oldest were told why they ended; the newest 32 are still open and get the push.
        for r in readers[:68]:
            assert r.next() == grpc.StatusCode.RESOURCE_EXHAUSTED
        post(server.http + "/v1/activate/llm/qwen")
        for r in readers[68:]:
            assert r.next() is True
        assert client.IsActive(so).result is True  # unary calls unaffected
        for r in readers[68:]:
            r.call.cancel()
    wait_for_streams(server, 0)


def test_1000_open_streams_do_not_starve_unary_calls(server: ServerThread,
                                                     histories: dict[tuple[str, str], Any]) -> None:
    models = [f"org/model-{i}" for i in range(1000)]
    for i, m in enumerate(models):
        histories[("llm", m)] = FakeHistory(desired=i % 5, active=False)

    async def scenario() -> list[int]:
        async with grpc.aio.insecure_channel(server.target) as channel:
            client = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]  # generated, untyped
            calls = [client.StreamIsActive(ref(f"so-{i}", model=m, scaleToZero="true"))
                     for i, m in enumerate(models)]
            while server.service.bus.streams() < 1000:
                await asyncio.sleep(0.05)
            # Unary calls for every ScaledObject while 1,000 streams are open: all must complete.
            replies = await asyncio.gather(*[
                client.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(f"so-{i}", model=m, scaleToZero="true")),
                                  timeout=20)
                for i, m in enumerate(models)])
            for c in calls:
                c.cancel()
            return [r.metricValues[0].metricValue for r in replies]

    values = asyncio.run(scenario())
    assert values == [i % 5 for i in range(1000)]


def test_health_and_reflection(server: ServerThread) -> None:
    with grpc.insecure_channel(server.target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "externalscaler.ExternalScaler"):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        refl = reflection_pb2_grpc.ServerReflectionStub(channel)
        replies = list(refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
        names = {s.name for s in replies[0].list_services_response.service}
        assert {"externalscaler.ExternalScaler", "grpc.health.v1.Health"} <= names


def test_shutdown_turns_health_not_serving_before_the_port_closes(histories: dict[tuple[str, str], Any]) -> None:
    st = ServerThread(make_service(histories, FakeClock()))
    with grpc.insecure_channel(st.target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        watch = health.Watch(health_pb2.HealthCheckRequest(service="externalscaler.ExternalScaler"))
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        stream = StreamReader(stub(channel).StreamIsActive(ref("qwen", model=MODEL, scaleToZero="true")))
        wait_for_streams(st, 1)
        st.stop(grace=0.2)
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
        # The held stream ends with the server (KEDA reconnects to the peer pod), not before.
        assert stream.next() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
