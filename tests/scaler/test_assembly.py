"""scaler.assembly: the one place the command, the demo and the benchmark build the scaler."""

from __future__ import annotations

import pytest

from keda_llm.scaler.assembly import ScalerSettings, Sources, build, start_in_thread
from keda_llm.scaler.config import ConfigError, parse_metadata
from keda_llm.scaler.externalscaler import externalscaler_pb2 as pb
from keda_llm.scaler.externalscaler import externalscaler_pb2_grpc as pb_grpc
from keda_llm.scaler.model import Observation, ReplicaSample, WorkloadState
from keda_llm.scaler.sources.exporters import ExportersSource

NS = "llm"


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeReader:
    """A WorkloadSource: the Deployment as a test states it; records what it was asked to track."""

    def __init__(self, state: WorkloadState) -> None:
        self.value = state
        self.tracked: list[tuple[str, str]] = []
        self.started = self.stopped = False

    def start(self) -> None:
        self.started = True

    def stop(self) -> None:
        self.stopped = True

    def track(self, namespace: str, name: str) -> None:
        self.tracked.append((namespace, name))

    def untrack(self, namespace: str, name: str) -> None:
        self.tracked.remove((namespace, name))

    def state(self, namespace: str, name: str) -> WorkloadState | None:
        return self.value


def test_sources_one_per_address_falling_back_to_the_settings() -> None:
    sources = Sources(ScalerSettings(exporters=("10.0.0.1:9400",)), background=False)
    default = parse_metadata({"model": "m"})
    own = parse_metadata({"model": "m", "exporters": "10.0.0.2:9400"})
    src, store = sources.open(default)
    assert isinstance(src, ExportersSource)
    assert sources.open(parse_metadata({"model": "other"})) == (src, store)  # same address, same source
    assert sources.open(own)[1] is not store  # its own exporters: its own store, never a mix
    assert sources.key(own) == ("exporters-static", "10.0.0.2:9400", "")
    with pytest.raises(ConfigError, match="no exporters"):
        Sources(ScalerSettings(), background=False).key(default)
    with pytest.raises(ConfigError, match="prometheusAddress"):
        sources.key(parse_metadata({"model": "m", "metricsSource": "prometheus"}))
    sources.stop()


def test_built_scaler_answers_keda_from_its_source_and_the_workload_reader() -> None:
    clock = FakeClock()
    reader = FakeReader(WorkloadState(current_replicas=1, ready_replicas=1, max_replicas=8))
    settings = ScalerSettings(grpc_address="127.0.0.1:0", http_address=("127.0.0.1", 0),
                              exporters=("127.0.0.1:9",), refresh_s=None, demand_watch_s=None)
    running = start_in_thread(settings, reader=reader, clock=clock, background=False)
    try:
        import grpc

        scaler = running.scaler
        assert reader.started
        assert running.grpc_target == f"127.0.0.1:{scaler.server.grpc_port}"
        meta = {"model": "m", "policy": "concurrency", "targetConcurrency": "4", "scalerAddress": "x:9090"}
        ref = pb.ScaledObjectRef(name="so", namespace=NS, scalerMetadata=meta)
        with grpc.insecure_channel(running.grpc_target) as channel:
            stub = pb_grpc.ExternalScalerStub(channel)
            (spec,) = stub.GetMetricSpec(ref, timeout=10).metricSpecs
            assert reader.tracked == [(NS, "so")]  # a new ScaledObject: its Deployment is read from now on
            # its source was made on first use (not started: background=False); feed it as a scrape would
            _, store = scaler.sources.open(parse_metadata(meta))
            for _ in range(3):
                store.ingest(Observation(NS, "m", clock.now, (
                    ReplicaSample("p0", clock.now, running=12.0, waiting=0.0, max_running=16.0),)))
                clock.now += 1.0
            got = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref, metricName=spec.metricName), timeout=10)
            assert got.metricValues[0].metricValue == 3  # 12 running / 4 per replica
            assert stub.IsActive(ref, timeout=10).result
    finally:
        running.stop()
    assert reader.stopped


def test_build_needs_a_running_loop_only_to_serve() -> None:
    import asyncio

    async def main() -> None:
        scaler = build(ScalerSettings(grpc_address="127.0.0.1:0", http_address=None, refresh_s=None))
        assert scaler.reader is None and scaler.server.http is None
        await scaler.start()
        await scaler.stop(0.1)

    asyncio.run(main())
