"""Degraded replicas and LoRA adapter demand, end to end over the real gRPC path.

The exporter's own renderer writes each cycle's /metrics text (engines and GPUs with their pod
attribution, as exporter/render.py does), the scaler's exporters source parses it (scaler/sources/
exposition.py), the real history and decide run behind the real server, and KEDA's calls go over
gRPC on loopback. Expected counts are derived by hand in each test.

policy concurrency, targetConcurrency 10, mode reactive, scaleDownDelay 0s: desired = Σ in flight / 10,
plus the deficit Σ(1 - fraction) of the degraded replicas (scaler/health.py). A fresh autoscaler with
more than one ready replica starts in Knative's panic mode and holds the count for one stable window
(60 s), so every scenario polls once, feeds another 70 s, and reads the second answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import grpc
import pytest
from scaler_harness import FakeClock, ServerThread, get, keda_poll, metric_value, real_scaler, ref, stub

from keda_llm.exporter.collect import Snapshot, TargetState
from keda_llm.exporter.model import EngineMetrics, GpuMetrics, Target
from keda_llm.exporter.render import render
from keda_llm.scaler.activation import ActivationBus
from keda_llm.scaler.decide import decide
from keda_llm.scaler.service import HistoryStore, ScaledObjectKey, ScalerService
from keda_llm.scaler.sources.exposition import observations_from_exposition

MODEL = "llama-8b"
META = {"model": MODEL, "policy": "concurrency", "targetConcurrency": "10", "mode": "reactive",
        "scaleDownDelay": "0s"}
T0 = 50_000.0


@dataclass
class Pod:
    """One replica as its exporter sees it; mutate between cycles."""

    name: str
    running: float = 7.5
    tokens_per_s: float = 300.0
    clock_event_reasons: int = 0  # its GPU's NVML clock event reasons
    xid_active: float = 0.0
    lora: tuple[float, float, float] | None = None  # (running, waiting, max) adapters
    generated: float = field(default=0.0)


class Exporters:
    """Every pod's engine and GPU, rendered by the exporter and parsed by the scaler each second."""

    def __init__(self, pods: list[Pod], clock: FakeClock, ingest: Callable[..., None]) -> None:
        self.pods, self.clock, self.ingest = pods, clock, ingest

    def cycle(self) -> None:
        now = self.clock.now
        states, gpus = [], []
        for i, p in enumerate(self.pods):
            p.generated += p.tokens_per_s
            lora = p.lora or (None, None, None)
            m = EngineMetrics(engine="vllm", model=MODEL, requests_running=p.running, requests_waiting=0.0,
                              generation_tokens_total=p.generated, lora_adapters_running=lora[0],
                              lora_adapters_waiting=lora[1], lora_adapters_max=lora[2])
            t = Target(url=f"http://10.0.0.{i}:8000/metrics", namespace="llm", pod=p.name, node=f"n{i}")
            states.append(TargetState(target=t, up=True, metrics=(m,), identities=((MODEL, "vllm", "unified"),),
                                      last_success=now))
            gpus.append(GpuMetrics(index=str(i), uuid=f"GPU-{i}", gpu_model="H100",
                                   clock_event_reasons=p.clock_event_reasons, xid_active=p.xid_active,
                                   ecc_uncorrected_total=0.0,
                                   attribution={"namespace": "llm", "pod": p.name, "container": "vllm"}))
        text = render(Snapshot(node="", targets=tuple(states), gpus=tuple(gpus), cycle_seconds=0.1,
                               discovery_errors=0, at=now))
        for obs in observations_from_exposition(text, now):
            self.ingest(obs)

    def feed(self, seconds: int) -> None:
        for _ in range(seconds):
            self.clock.now += 1.0
            self.cycle()


@pytest.fixture
def scaler() -> Iterator[tuple[FakeClock, HistoryStore, ServerThread]]:
    with real_scaler(T0) as world:
        yield world


def settle(exporters: Exporters, server: ServerThread, meta: dict[str, str]) -> int:
    """Feed 70 s, poll (the panic hold starts), feed 70 s more, poll: the stable answer."""
    with grpc.insecure_channel(server.target) as channel:
        client = stub(channel)
        exporters.feed(70)
        keda_poll(client, ref("chat", **meta))
        exporters.feed(70)
        poll = keda_poll(client, ref("chat", **meta))
    return poll.values[0][1]


def details(server: ServerThread, meta: dict[str, str]) -> dict[str, float]:
    d = server.service.last_decision(ScaledObjectKey("llm", "chat"), dict(ref("chat", **meta).scalerMetadata))
    assert d is not None
    return dict(d.details)


def pods(n: int) -> list[Pod]:
    return [Pod(f"{MODEL}-{i}") for i in range(n)]


def test_healthy_replicas_give_the_plain_count(scaler: tuple[FakeClock, HistoryStore, ServerThread]) -> None:
    clock, store, server = scaler
    # 4 x 7.5 running = 30 in flight / 10 = 3.0 -> 3 (a scale-down from 4)
    assert settle(Exporters(pods(4), clock, store.ingest), server, META) == 3
    d = details(server, META)
    assert (d["capacity_deficit"], d["capacity_fractions"], d["degraded_gpu_throttled"]) == (0.0, 4.0, 0.0)


def test_a_throttled_replica_counts_as_half(scaler: tuple[FakeClock, HistoryStore, ServerThread]) -> None:
    clock, store, server = scaler
    replicas = pods(4)
    replicas[1].clock_event_reasons = 0x40 | 0x4  # HW thermal (and the power cap, which alone would not count)
    # 3.0 whole replicas of demand + (1 - 0.5) = 3.5 -> 4: the throttled replica is kept and not relied on whole
    assert settle(Exporters(replicas, clock, store.ingest), server, META) == 4
    d = details(server, META)
    assert d["capacity_deficit"] == 0.5 and d["degraded_gpu_throttled"] == 1.0
    assert d[f"replica_fraction:gpu_throttled:{MODEL}-1"] == 0.5
    assert d["desired_whole_replicas"] == 3.0 and d["desired_stable_raw"] == 3.5
    _, text = get(server.http + "/metrics")
    assert metric_value(text, "keda_llm_scaler_replica_capacity_fraction", namespace="llm", scaledobject="chat",
                        model=MODEL, pod=f"{MODEL}-1", reason="gpu_throttled") == 0.5
    assert metric_value(text, "keda_llm_scaler_replica_capacity_fraction", namespace="llm", scaledobject="chat",
                        model=MODEL, pod=f"{MODEL}-0", reason="healthy") is None  # healthy pods: no series


def test_degraded_fraction_is_configurable(scaler: tuple[FakeClock, HistoryStore, ServerThread]) -> None:
    clock, store, server = scaler
    replicas = pods(4)
    for p in replicas[:3]:
        p.clock_event_reasons = 0x8  # HW slowdown on three GPUs
    meta = {**META, "degradedFraction": "0.8"}
    # 3.0 + 3 x (1 - 0.8) = 3.6 -> 4 (at the default 0.5: 3.0 + 1.5 = 4.5 -> 5)
    assert settle(Exporters(replicas, clock, store.ingest), server, meta) == 4
    assert details(server, meta)["capacity_deficit"] == pytest.approx(0.6)


def test_throttle_xid_and_a_slow_replica_add_up(scaler: tuple[FakeClock, HistoryStore, ServerThread]) -> None:
    clock, store, server = scaler
    replicas = pods(4)
    replicas[1].clock_event_reasons = 0x80  # HW power brake
    replicas[3].xid_active = 1.0  # a critical XID within the exporter's hold time
    replicas[2].tokens_per_s = 150.0  # 150 / 7.5 = 20 tokens/s per running request; its peers' median is 40
    # fractions 1, 0.5, 0.5 (20 / 40 < 0.7), 0.5: 3.0 + 1.5 = 4.5 -> 5
    assert settle(Exporters(replicas, clock, store.ingest), server, META) == 5
    d = details(server, META)
    assert (d["degraded_gpu_throttled"], d["degraded_gpu_xid"], d["degraded_slow"]) == (1.0, 1.0, 1.0)
    assert d[f"replica_fraction:slow:{MODEL}-2"] == pytest.approx(0.5)
    assert d["capacity_deficit"] == pytest.approx(1.5)


def test_a_replica_at_three_quarters_of_its_peers_is_not_slow(
        scaler: tuple[FakeClock, HistoryStore, ServerThread]) -> None:
    clock, store, server = scaler
    replicas = pods(4)
    replicas[2].tokens_per_s = 225.0  # 30 per running request vs 40: 0.75, above slowReplicaRatio 0.7
    assert settle(Exporters(replicas, clock, store.ingest), server, META) == 3
    # ...but with slowReplicaRatio 0.8 it counts as 0.75: 3.0 + 0.25 = 3.25 -> 4
    clock2, store2 = FakeClock(T0), HistoryStore()
    service = ScalerService(decide=decide, histories=store2.get, history_lock=store2.lock,
                            bus=ActivationBus(clock=clock2), clock=clock2)
    other = ServerThread(service)
    try:
        meta = {**META, "slowReplicaRatio": "0.8"}
        again = pods(4)
        again[2].tokens_per_s = 225.0
        assert settle(Exporters(again, clock2, store2.ingest), other, meta) == 4
        assert details(other, meta)[f"replica_fraction:slow:{MODEL}-2"] == pytest.approx(0.75)
    finally:
        other.stop()


def test_lora_adapters_waiting_for_slots_raise_the_count(
        scaler: tuple[FakeClock, HistoryStore, ServerThread]) -> None:
    clock, store, server = scaler
    replicas = pods(2)
    for p in replicas:
        p.running = 5.0  # 10 in flight / 10: one replica would carry the requests
        p.lora = (4.0, 2.0, 4.0)  # 4 adapters running in 4 slots, 2 more waiting for one
    exporters = Exporters(replicas, clock, store.ingest)
    # adapter demand (4 + 2) x 2 = 12 over 4 slots per replica -> 3 replicas
    assert settle(exporters, server, META) == 3
    d = details(server, META)
    assert (d["lora_adapters_demand"], d["lora_slots_per_replica"], d["lora_desired"]) == (12.0, 4.0, 3.0)
    # the adapters fit once none waits: their number alone keeps no replica up -> back to 10 / 10 = 1
    for p in replicas:
        p.lora = (4.0, 0.0, 4.0)
    exporters.feed(70)
    with grpc.insecure_channel(server.target) as channel:
        poll = keda_poll(stub(channel), ref("chat", **META))
    assert poll.values[0][1] == 1
    assert "lora_desired" not in details(server, META)
