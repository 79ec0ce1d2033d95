"""Helpers for the scaler's gRPC tests: a server on a background event loop, a fake clock, fakes.

The server is the real one (ScalerServer: grpc.aio + HTTP) on loopback port 0; tests talk to it with
clients generated from proto/externalscaler.proto, as KEDA does. Only the core's inputs are faked
where a test needs exact control: the history lookup and, for some tests, `decide`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import queue
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import grpc

from keda_llm.scaler import cli as scaler_cli
from keda_llm.scaler.activation import ActivationBus
from keda_llm.scaler.config import ConfigError, ScalerConfig
from keda_llm.scaler.externalscaler import externalscaler_pb2 as pb
from keda_llm.scaler.externalscaler import externalscaler_pb2_grpc as pb_grpc
from keda_llm.scaler.model import Decision, NoData, PolicyState, WorkloadState
from keda_llm.scaler.server import ScalerServer
from keda_llm.scaler.service import HistoryStore, ScalerService

T = TypeVar("T")


@dataclass
class FakeClock:
    now: float = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeHistory:
    """Stands for a model's history: the desired count a fake decide reads off it, or no data."""

    desired: int | None  # None: nothing usable (decide says NoData)
    active: bool = True
    details: dict[str, float] = field(default_factory=dict)


def fake_decide(history: FakeHistory, config: ScalerConfig, state: PolicyState, workload: WorkloadState,
                now: float) -> tuple[Decision, PolicyState]:
    """Counts its calls in the state (last_replicas), so tests can see the policy runs once per tick."""
    if history.desired is None:
        raise NoData("fake: no samples")
    calls = (state.last_replicas or 0) + 1
    return Decision(history.desired, "steady", history.active, dict(history.details)), replace(
        state, last_replicas=calls)


class ServerThread:
    """A ScalerServer on its own event loop thread (the gRPC side needs a running loop)."""

    def __init__(self, service: ScalerService, **kwargs: Any) -> None:
        self.service = service
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="test-scaler-loop", daemon=True)
        self._thread.start()
        kwargs.setdefault("http_address", ("127.0.0.1", 0))
        kwargs.setdefault("grpc_address", "127.0.0.1:0")
        kwargs.setdefault("config_error", ConfigError)
        kwargs.setdefault("demand_watch_s", None)

        async def make() -> ScalerServer:
            server = ScalerServer(service, **kwargs)
            await server.start()
            return server

        self.server = self.call(make())
        self.target = f"127.0.0.1:{self.server.grpc_port}"
        self.http = f"http://127.0.0.1:{self.server.http_port}"

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self, grace: float = 0.1) -> None:
        try:
            self.call(self.server.stop(grace))
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()


def make_service(histories: Mapping[tuple[str, str], Any], clock: FakeClock,
                 decide: Callable[..., Any] = fake_decide, **kwargs: Any) -> ScalerService:
    return ScalerService(decide=decide, histories=lambda ns, model: histories.get((ns, model)),
                         bus=ActivationBus(clock=clock), clock=clock, **kwargs)


@contextlib.contextmanager
def real_scaler(t0: float) -> Iterator[tuple[FakeClock, HistoryStore, ServerThread]]:
    """The real history store and decide behind the real server, on a fake clock at `t0`: tests ingest
    observations into the store and ask over gRPC as KEDA does."""
    from keda_llm.scaler.decide import decide

    clock, store = FakeClock(t0), HistoryStore()
    service = ScalerService(decide=decide, histories=store.get, history_lock=store.lock,
                            bus=ActivationBus(clock=clock), clock=clock)
    server = ServerThread(service)
    try:
        yield clock, store, server
    finally:
        server.stop()


def ref(name: str = "llama", namespace: str = "llm", **metadata: str) -> pb.ScaledObjectRef:
    md = {"scalerAddress": "keda-llm-scaler.keda-llm:9090", **metadata}
    return pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=md)


def stub(channel: grpc.Channel) -> Any:
    return pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]  # generated, untyped


@dataclass(frozen=True)
class Poll:
    """One KEDA poll's answers: GetMetricSpec, then GetMetrics + IsActive for each metric."""

    specs: list[tuple[str, int, float]]
    values: list[tuple[str, int, float]]
    active: bool


def keda_poll(client: Any, so: pb.ScaledObjectRef, timeout: float | None = None) -> Poll:
    """Replays KEDA's call pattern for one trigger (kedacore/keda pkg/scaling/cache/scalers_cache.go)."""
    spec = client.GetMetricSpec(so, timeout=timeout)
    specs = [(s.metricName, s.targetSize, s.targetSizeFloat) for s in spec.metricSpecs]
    values: list[tuple[str, int, float]] = []
    active = False
    for name, _, _ in specs:
        got = client.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=so, metricName=name), timeout=timeout)
        values += [(v.metricName, v.metricValue, v.metricValueFloat) for v in got.metricValues]
        active = client.IsActive(so, timeout=timeout).result or active
    return Poll(specs, values, active)


def post(url: str, headers: Mapping[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url, data=b"", method="POST", headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def metric_value(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample in Prometheus text, or None."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        if head.startswith(name + "{") and ",".join(sorted(head[len(name) + 1:-1].split(","))) == want:
            return float(value)
        if head == name and not want:
            return float(value)
    return None


class StreamReader:
    """Reads a server stream on a thread, so a test can wait for messages with a deadline."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self.messages: queue.Queue[Any] = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for msg in self.call:
                self.messages.put(msg.result)
            self.messages.put("ended")
        except grpc.RpcError as err:
            self.messages.put(err.code())

    def next(self, timeout: float = 10.0) -> Any:
        return self.messages.get(timeout=timeout)


def wait_for_streams(server: ServerThread, n: int) -> None:
    async def until() -> None:
        while server.service.bus.streams() < n:
            await asyncio.sleep(0.01)

    server.call(until(), timeout=30)


class ScalerPod:
    """`scaler.cli.build` on its own event loop thread, collection left to `collect()`."""

    def __init__(self, clock: FakeClock, *flags: str, demand_watch_s: float | None = None) -> None:
        parser = argparse.ArgumentParser()
        scaler_cli.add_arguments(parser)
        args = parser.parse_args(["--grpc-address", "127.0.0.1:0", "--http-address", "127.0.0.1:0", "--no-kube",
                                  "--exporters", "", *flags])
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="scaler-pod", daemon=True)
        self._thread.start()

        async def make() -> tuple[ScalerServer, scaler_cli.Sources]:
            server, sources, _ = scaler_cli.build(args, clock=clock, background=False, demand_watch_s=demand_watch_s)
            await server.start()
            return server, sources

        self.server, self.sources = asyncio.run_coroutine_threadsafe(make(), self.loop).result(30)
        self.target = f"127.0.0.1:{self.server.grpc_port}"
        self.http = f"http://127.0.0.1:{self.server.http_port}"
        self.channel = grpc.insecure_channel(self.target)

    def collect(self) -> None:
        """One collection cycle, then the decisions on it, as the scaler's background threads do them."""
        self.sources.collect_once()
        self.server.service.refresh()

    def metric(self, name: str, so: str, model: str, namespace: str = "llm") -> float | None:
        status, text = get(self.http + "/metrics")
        assert status == 200
        return metric_value(text, name, namespace=namespace, scaledobject=so, model=model)

    def stop(self) -> None:
        self.channel.close()
        asyncio.run_coroutine_threadsafe(self.server.stop(0.1), self.loop).result(30)
        self.sources.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()
