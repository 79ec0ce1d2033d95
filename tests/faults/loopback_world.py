"""One engine -> the real exporter -> the real scaler (`scaler.cli.build`) on loopback, on a clock the test owns.

The shape of tests/scaler/test_scaler_e2e.py, cut to what the fault tests need: the test moves the clock
and runs one collection per step (exporter cycle, scaler collection, the scaler's decision refresh), and
asks the scaler over real gRPC with KEDA's call pattern.
"""

from __future__ import annotations

import grpc
from conftest import engine_body
from fakeengine import FakeEngine
from scaler_harness import FakeClock, ScalerPod, keda_poll, stub

from keda_llm.exporter.cli import build_collector
from keda_llm.exporter.config import parse_config
from keda_llm.exporter.server import create_server
from keda_llm.scaler.externalscaler import externalscaler_pb2 as pb

T0 = 1_800_000_000.0
NS = "llm"
MODEL = "SmolLM2-135M-GGUF"
LOAD = "llamacpp-b11434-load.prom"  # 4 processing + 12 deferred: 16 requests
IDLE = "llamacpp-b11434-idle.prom"


class LoopbackWorld:
    def __init__(self, *flags: str, timeout: str = "2s") -> None:
        self.clock = FakeClock(T0)
        self.engine = FakeEngine(engine_body(LOAD))
        cfg = parse_config({"listen": "127.0.0.1:0", "interval": "5s", "timeout": timeout, "node_name": "node-f",
                            "gpu": {"nvml": False}, "targets": [
                                {"url": self.engine.url, "namespace": NS, "pod": "llama-0", "model": MODEL,
                                 "max_running": 4}]}, env={})
        self.collector = build_collector(cfg, clock=self.clock)
        self.exporter, port = create_server(cfg.listen_address, self.collector)
        self.exporter.start()
        self.exporter_address = f"127.0.0.1:{port}"
        self.pod = ScalerPod(self.clock, *flags, demand_watch_s=None)
        self.server, self.sources, self.http, self.channel = (self.pod.server, self.pod.sources, self.pod.http,
                                                              self.pod.channel)
        self.client = stub(self.channel)

    def ref(self, name: str = "chat", **metadata: str) -> pb.ScaledObjectRef:
        md = {"scalerAddress": "keda-llm-scaler.keda-llm:9090", "model": MODEL, "exporters": self.exporter_address,
              "policy": "concurrency", "targetConcurrency": "1", "mode": "reactive", **metadata}
        return pb.ScaledObjectRef(name=name, namespace=NS, scalerMetadata=md)

    def serve(self, body: str) -> None:
        self.engine.body = engine_body(body).encode()

    def step(self, seconds: int = 1) -> None:
        """`seconds` simulated seconds, one collection each (as the background threads would run them)."""
        for _ in range(seconds):
            self.clock.now += 1.0
            self.collector.run_cycle()
            self.sources.collect_once()
            self.server.service.refresh()

    def poll(self, so: pb.ScaledObjectRef) -> tuple[int, bool] | grpc.StatusCode:
        """KEDA's poll: (replicas answered, IsActive), or the status code it failed with."""
        try:
            p = keda_poll(self.client, so, timeout=5)
        except grpc.RpcError as err:
            return err.code()
        return p.values[0][1], p.active

    def close(self) -> None:
        self.pod.stop()
        self.exporter.stop()
        self.collector.stop()
        self.engine.stop()
