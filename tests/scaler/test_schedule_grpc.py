"""A warm window over real gRPC: the real server, HistoryStore and decide, on an injected clock.

The model sits at zero (`scaleToZero`, nothing reports). A window opens Monday 6 July 2026 09:00-10:00
Europe/Berlin (CEST, UTC+2: 07:00Z-08:00Z) with leadTime 10m and desiredReplicas 3. Expected, by hand:
- before 06:50Z: GetMetrics 0, IsActive false, and KEDA's open StreamIsActive stays silent;
- at 06:50Z (the lead): the decision refresh wakes it, the stream pushes `true`, GetMetrics answers 3;
- three replicas then report, idle: held at 3 up to 07:59:59Z although nothing runs;
- at 08:00Z the window is over and no demand was ever seen: GetMetrics 0, IsActive false, no push.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from datetime import datetime, timezone

import grpc
import pytest
from prometheus_server import refused_address
from scaler_harness import (
    FakeClock,
    ScalerPod,
    ServerThread,
    StreamReader,
    get,
    keda_poll,
    metric_value,
    ref,
    stub,
    wait_for_streams,
)

from keda_llm.scaler.activation import ActivationBus, ScaledObjectKey
from keda_llm.scaler.decide import decide
from keda_llm.scaler.model import Observation, ReplicaSample
from keda_llm.scaler.service import HistoryStore, ScalerService

MODEL = "launch-8b"
START = datetime(2026, 7, 6, 7, tzinfo=timezone.utc).timestamp()
OPENS, END = START - 600.0, START + 3600.0
KEY = ScaledObjectKey("llm", "launch")
META = {"model": MODEL, "policy": "concurrency", "targetConcurrency": "10", "mode": "reactive",
        "scaleToZero": "true", "idleTimeout": "60s",
        "warmWindows": "- start: '0 9 * * MON'\n  end: '0 10 * * MON'\n  timezone: Europe/Berlin\n"
                       "  desiredReplicas: 3\n  leadTime: 10m\n"}


class World:
    def __init__(self) -> None:
        self.clock = FakeClock(OPENS - 120.0)
        self.store = HistoryStore()
        self.service = ScalerService(decide=decide, histories=self.store.get, history_lock=self.store.lock,
                                     bus=ActivationBus(clock=self.clock), clock=self.clock)
        self.server = ServerThread(self.service)
        self.replicas = 0

    def step_to(self, until: float) -> None:
        """One collection every 5 s (the replicas running report idle), then the decision refresh."""
        while self.clock.now < until:
            self.clock.now = min(until, self.clock.now + 5.0)
            samples = tuple(ReplicaSample(f"{MODEL}-{i}", self.clock.now, running=0.0, waiting=0.0)
                            for i in range(self.replicas))
            self.store.ingest(Observation("llm", MODEL, self.clock.now, samples))
            self.service.refresh()


@pytest.fixture
def world() -> Iterator[World]:
    w = World()
    yield w
    w.server.stop()


def test_a_window_wakes_a_model_at_zero_holds_the_floor_and_releases_it(world: World) -> None:
    so = ref("launch", **META)
    with grpc.insecure_channel(world.server.target) as channel:
        client = stub(channel)
        world.step_to(OPENS - 60.0)
        poll = keda_poll(client, so)
        assert poll.active is False and poll.values[0][1:] == (0, 0.0)
        stream = StreamReader(client.StreamIsActive(so))
        wait_for_streams(world.server, 1)
        world.step_to(OPENS - 1.0)
        with pytest.raises(queue.Empty):
            stream.next(timeout=0.2)  # idle at zero: nothing pushed

        world.step_to(OPENS)
        assert stream.next() is True  # the refresh that first saw the window open pushed at once
        poll = keda_poll(client, so)
        assert poll.active is True and poll.values[0][1:] == (3, 3.0)
        d = world.service.last_decision(KEY, so.scalerMetadata)
        assert d is not None and (d.replicas, d.reason) == (3, "warm_window")
        assert (d.details["warm_window_starts_at"], d.details["warm_window_ends_at"]) == (START, END)
        status, text = get(world.server.http + "/metrics")
        assert status == 200
        assert metric_value(text, "keda_llm_scaler_decision_reason", namespace="llm", scaledobject="launch",
                            model=MODEL, reason="warm_window") == 1

        world.replicas = 3  # KEDA and the HPA brought them up; they serve nothing yet
        world.step_to(START + 1800.0)
        poll = keda_poll(client, so)
        assert poll.active is True and poll.values[0][1:] == (3, 3.0)
        world.step_to(END - 1.0)
        poll = keda_poll(client, so)
        assert poll.active is True and poll.values[0][1:] == (3, 3.0)

        world.step_to(END)
        poll = keda_poll(client, so)
        assert poll.active is False and poll.values[0][1:] == (0, 0.0)
        d = world.service.last_decision(KEY, so.scalerMetadata)
        assert d is not None and d.reason == "idle_zero" and "warm_window" not in d.details
        with pytest.raises(queue.Empty):
            stream.next(timeout=0.2)  # only the one push, at the window's opening
        stream.call.cancel()


def test_a_window_wakes_a_model_no_exporter_reports_for() -> None:
    """The scaler as `keda-llm scaler` builds it (ScalerPod), for a model whose GPU node pool is at zero: no
    exporter answers, so nothing is ever collected and there is nothing to decide on. An open window must
    still wake it (GetMetrics answers the floor, 2, and the open stream gets `true`). Before the window, and
    after it, nothing says whether the model runs (no Kubernetes view here, no source answering): that is
    missing data, UNAVAILABLE, which KEDA answers by holding the count (zero stays zero), never by scaling a
    running model to zero."""
    clock = FakeClock(OPENS - 30.0)
    pod = ScalerPod(clock)
    so = ref("cold", model="cold-70b", exporters=refused_address(), scaleToZero="true",
             warmWindows="[{start: '0 9 * * MON', duration: 1h, timezone: Europe/Berlin, desiredReplicas: 2, "
                         "leadTime: 10m}]")
    try:
        client = stub(pod.channel)
        with pytest.raises(grpc.RpcError) as err:
            keda_poll(client, so)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        stream = StreamReader(client.StreamIsActive(so))
        wait_for_streams_of(pod, 1)
        for _ in range(29):
            clock.now += 1.0
            pod.collect()
        with pytest.raises(queue.Empty):
            stream.next(timeout=0.2)
        clock.now = OPENS  # 08:50 CEST, the lead before 09:00
        pod.collect()
        assert stream.next() is True
        poll = keda_poll(client, so)
        assert poll.active is True and poll.values[0][1:] == (2, 2.0)
        _, text = get(pod.http + "/metrics")
        assert metric_value(text, "keda_llm_scaler_decision_reason", namespace="llm", scaledobject="cold",
                            model="cold-70b", reason="warm_window") == 1
        clock.now = START + 3600.0  # the window is over: no data again
        pod.collect()
        with pytest.raises(grpc.RpcError) as err:
            keda_poll(client, so)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        stream.call.cancel()
    finally:
        pod.stop()


def wait_for_streams_of(pod: ScalerPod, n: int) -> None:
    import asyncio

    async def until() -> None:
        while pod.server.service.bus.streams() < n:
            await asyncio.sleep(0.01)

    asyncio.run_coroutine_threadsafe(until(), pod.loop).result(30)
