"""The real scaler server driven by the KEDA+HPA emulator (simulator/control) over gRPC on loopback.

Scale from zero by push, then the HPA following the scaler's count: what a cluster would do.
"""

from __future__ import annotations

import queue
from collections.abc import Sequence
from typing import Any

import grpc
from scaler_harness import FakeClock, StreamReader, post, stub, wait_for_streams
from test_scaler_grpc_real import META, FakeSource, feed, scaler_pod

from scaler.externalscaler import externalscaler_pb2 as pb
from simulator.control import KedaHpaLoop, KedaSettings, MetricSpec, MetricValue, ScaledObjectRef, ScalerUnavailable
from simulator.control.scaledobject import Trigger


class GrpcScaler:
    """The emulator's ExternalScaler, PushSource and CallChainAware, answered by a real gRPC server."""

    def __init__(self, channel: grpc.Channel, clock: FakeClock) -> None:
        self.client = stub(channel)
        self.clock = clock
        self.timeout: float | None = None
        self.stream: StreamReader | None = None

    def begin(self, path: str, now: float) -> None:
        self.clock.now = now
        self.timeout = 3.0 if path == "hpa" else None  # the metrics apiserver's deadline

    @staticmethod
    def _ref(ref: ScaledObjectRef) -> pb.ScaledObjectRef:
        return pb.ScaledObjectRef(name=ref.name, namespace=ref.namespace, scalerMetadata=dict(ref.scaler_metadata))

    def _call(self, fn: Any, request: Any) -> Any:
        try:
            return fn(request, timeout=self.timeout)
        except grpc.RpcError as err:
            raise ScalerUnavailable(err.code().name, err.details()) from None

    def get_metric_spec(self, ref: ScaledObjectRef) -> Sequence[MetricSpec]:
        got = self._call(self.client.GetMetricSpec, self._ref(ref))
        return [MetricSpec(s.metricName, s.targetSizeFloat, s.targetSize) for s in got.metricSpecs]

    def get_metrics(self, ref: ScaledObjectRef, metric_name: str) -> Sequence[MetricValue]:
        req = pb.GetMetricsRequest(scaledObjectRef=self._ref(ref), metricName=metric_name)
        got = self._call(self.client.GetMetrics, req)
        return [MetricValue(v.metricName, v.metricValueFloat, v.metricValue) for v in got.metricValues]

    def is_active(self, ref: ScaledObjectRef) -> bool:
        return bool(self._call(self.client.IsActive, self._ref(ref)).result)

    def take_pushes(self) -> Sequence[bool]:
        out: list[bool] = []
        while self.stream is not None:
            try:
                out.append(self.stream.messages.get_nowait())
            except queue.Empty:
                break
        return out


def test_push_wakes_from_zero_then_the_hpa_follows_the_scaler() -> None:
    source, clock = FakeSource(), FakeClock(0.0)
    server = scaler_pod(source, clock)
    metadata = {**META, "scalerAddress": "keda-llm-scaler.keda-llm:9090"}
    settings = KedaSettings(name="chat", namespace="llm", triggers=(Trigger("external-push", metadata),),
                            polling_interval_s=30, max_replicas=10)
    try:
        with grpc.insecure_channel(server.target) as channel:
            scaler = GrpcScaler(channel, clock)
            loop = KedaHpaLoop(settings, scaler, start=0.0, initial_replicas=0)
            # KEDA's push loop opens the stream; the model is idle at zero (no replicas ever seen).
            scaler.stream = StreamReader(scaler.client.StreamIsActive(scaler._ref(loop.keda.refs[0])))
            wait_for_streams(server, 1)
            loop.advance_to(10.0)
            assert loop.spec_replicas == 0
            # A gateway holds a request and activates the ScaledObject: the push wakes it before any poll.
            clock.now = 10.0
            post(server.http + "/v1/activate/llm/chat")
            assert scaler.stream.messages.get(timeout=10) is True
            scaler.stream.messages.put(True)  # hand the received push to the emulator
            loop.advance_to(11.0)
            assert loop.spec_replicas == 1
            # The replica comes up and reports 25 requests in flight: 25 / targetConcurrency 10 -> 3.
            clock.now = 11.0
            feed(source, clock, 90, [(25.0, 0.0)])
            loop.advance_to(clock.now)
            assert loop.spec_replicas == 3
            kinds = [e.kind for e in loop.events]
            assert "push_activate" in kinds
            scaler.stream.call.cancel()
    finally:
        server.stop()
