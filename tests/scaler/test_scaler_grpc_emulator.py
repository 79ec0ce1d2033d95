"""The real scaler server driven by the KEDA+HPA emulator (simulator/control) over gRPC on loopback.

Scale from zero by push, then the HPA following the scaler's count: what a cluster would do. KEDA's
side is the one emulator and its one gRPC adapter (simulator.control.grpc_scaler.GrpcExternalScaler).
"""

from __future__ import annotations

import grpc
from scaler_harness import FakeClock, post, wait_for_streams
from test_scaler_grpc_real import META, FakeSource, feed, scaler_pod

from keda_llm.simulator.control import KedaHpaLoop, KedaSettings
from keda_llm.simulator.control.grpc_scaler import GrpcExternalScaler
from keda_llm.simulator.control.scaledobject import Trigger


def test_push_wakes_from_zero_then_the_hpa_follows_the_scaler() -> None:
    source, clock = FakeSource(), FakeClock(0.0)
    server = scaler_pod(source, clock)
    metadata = {**META, "scalerAddress": "keda-llm-scaler.keda-llm:9090"}
    settings = KedaSettings(name="chat", namespace="llm", triggers=(Trigger("external-push", metadata),),
                            polling_interval_s=30, max_replicas=10)

    def set_clock(now: float) -> None:
        clock.now = now

    try:
        with grpc.insecure_channel(server.target) as channel:
            scaler = GrpcExternalScaler(channel, clock=set_clock)
            loop = KedaHpaLoop(settings, scaler, start=0.0, initial_replicas=0)
            # KEDA's push loop opens the stream; the model is idle at zero (no replicas ever seen).
            scaler.open_stream(loop.keda.refs[0])
            wait_for_streams(server, 1)
            loop.advance_to(10.0)
            assert loop.spec_replicas == 0
            # A gateway holds a request and activates the ScaledObject: the push wakes it before any poll.
            clock.now = 10.0
            post(server.http + "/v1/activate/llm/chat")
            assert scaler.wait_for_push(10.0)
            loop.advance_to(11.0)
            assert loop.spec_replicas == 1
            # The replica comes up and reports 25 requests in flight: 25 / targetConcurrency 10 -> 3.
            clock.now = 11.0
            feed(source, clock, 90, [(25.0, 0.0)])
            loop.advance_to(clock.now)
            assert loop.spec_replicas == 3
            assert [(e.at, e.kind) for e in loop.events if e.kind.startswith("push")] == [(10.0, "push_activate")]
            scaler.close()
            assert scaler.stream_error == "CANCELLED"
    finally:
        server.stop()
