"""Pools over the real path: engines -> the real exporter -> two real scaler pods -> gRPC -> KEDA+HPA emulator.

Each pool (a prefill and a decode Deployment; or two GPU variants) has its own ScaledObject, polled by
KEDA through its own HPA, and here each through a DIFFERENT scaler pod: the counts they converge to,
and every answer on the way, come from one split per model and tick (scaler/pools.py).

The engines are loopback HTTP servers speaking vLLM's format, their counters advanced each simulated
second; the exporter labels their series with the `role` its target config gives (as for vLLM with a
KV connector, where the role is deployment config). The Kubernetes API of the variant test is the
fake API server (tests/fakekube.py): the scaler's real reader lists the pods and sees them Pending.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from fakeengine import FakeEngine
from fakekube import FakeKube, pod
from scaler_harness import FakeClock, ScalerPod, keda_poll, stub

from keda_llm.exporter.cli import build_collector
from keda_llm.exporter.config import parse_config
from keda_llm.exporter.server import MetricsServer, create_server
from keda_llm.scaler.assembly import ScalerSettings, ScalerThread, start_in_thread
from keda_llm.scaler.externalscaler import externalscaler_pb2 as pb
from keda_llm.scaler.kube import KubeClient, KubeConfig, WorkloadReader
from keda_llm.simulator.control import KedaHpaLoop, KedaSettings, Trigger
from keda_llm.simulator.control.grpc_scaler import GrpcExternalScaler

T0 = 1_800_000_000.0
NS = "llm"
MODEL = "llama"
KV_TOKENS = 100_000  # each engine's KV cache (vLLM's cache_config_info kv_cache_size_tokens)


@dataclass
class Engine:
    """One vLLM replica's state, rendered as its /metrics body each second."""

    role: str
    prompt_tps: float = 0.0  # prompt tokens computed per second
    requests_ps: float = 0.0  # requests finished per second
    kv_usage: float = 0.0
    kv_tokens: int = KV_TOKENS
    prompt_total: float = 0.0
    finished_total: float = 0.0
    server: FakeEngine = field(default_factory=FakeEngine)

    def tick(self) -> None:
        self.prompt_total += self.prompt_tps
        self.finished_total += self.requests_ps
        m = f'engine="0",model_name="{MODEL}"'
        self.server.body = (
            f"vllm:num_requests_running{{{m}}} 4.0\n"
            f"vllm:num_requests_waiting{{{m}}} 0.0\n"
            f"vllm:kv_cache_usage_perc{{{m}}} {self.kv_usage}\n"
            f"vllm:prompt_tokens_total{{{m}}} {self.prompt_total}\n"
            f"vllm:generation_tokens_total{{{m}}} 0.0\n"
            f'vllm:request_success_total{{{m},finished_reason="stop"}} {self.finished_total}\n'
            f'vllm:cache_config_info{{block_size="16",engine="0",kv_cache_size_tokens="{self.kv_tokens}",'
            f'num_gpu_blocks="{self.kv_tokens // 16}"}} 1.0\n'
        ).encode()


class World:
    """The engines, the real exporter over them, scaler pods and KEDA loops, on one fake clock."""

    def __init__(self, engines: Mapping[str, Engine]) -> None:
        self.clock = FakeClock(T0)
        self.engines = dict(engines)
        for e in self.engines.values():
            e.tick()
        cfg = parse_config({"listen": "127.0.0.1:0", "interval": "1s", "timeout": "1s", "node_name": "n1",
                            "gpu": {"nvml": False},
                            "targets": [{"url": e.server.url, "namespace": NS, "pod": name, "role": e.role}
                                        for name, e in self.engines.items()]}, env={})
        self.collector = build_collector(cfg, clock=self.clock)
        self.exporter: MetricsServer
        self.exporter, port = create_server(cfg.listen_address, self.collector)
        self.exporter.start()
        self.address = f"127.0.0.1:{port}"
        self.pods: list[ScalerPod] = []
        self.threads: list[ScalerThread] = []

    def step(self, until: float, loops: tuple[KedaHpaLoop, ...] = (), after: Any = None) -> None:
        while self.clock.now < until:
            self.clock.now += 1.0
            for e in self.engines.values():
                e.tick()
            self.collector.run_cycle()
            for p in self.pods:
                p.collect()
            for t in self.threads:
                t.scaler.sources.collect_once()
                t.scaler.service.refresh()
            for loop in loops:
                loop.advance_to(self.clock.now)
            if after is not None:
                after(self.clock.now)

    def stop(self) -> None:
        for p in self.pods:
            p.stop()
        for t in self.threads:
            t.stop()
        self.exporter.stop()
        self.collector.stop()
        for e in self.engines.values():
            e.server.stop()


@pytest.fixture
def pd_world() -> Iterator[World]:
    # 2 prefill replicas, 3 requests/s of 2000 prompt tokens each; 2 decode replicas, half their KV in use
    w = World({"prefill-0": Engine("prefill", 6000.0, 3.0), "prefill-1": Engine("prefill", 6000.0, 3.0),
               "decode-0": Engine("decode", kv_usage=0.5), "decode-1": Engine("decode", kv_usage=0.5)})
    yield w
    w.stop()


def keda(name: str, metadata: Mapping[str, str]) -> KedaSettings:
    md = {"scalerAddress": "keda-llm-scaler.keda-llm:9090", **metadata}
    return KedaSettings(name=name, namespace=NS, triggers=(Trigger("external", md),), polling_interval_s=15,
                        max_replicas=20)


def answer(client: Any, name: str, metadata: Mapping[str, str]) -> int:
    so = pb.ScaledObjectRef(name=name, namespace=NS, scalerMetadata=dict(metadata))
    poll = keda_poll(client, so)
    assert len(poll.values) == 1
    return int(poll.values[0][1])


def test_a_fixed_pd_ratio_is_kept_through_a_scale_up_with_the_pools_on_different_scaler_pods(
        pd_world: World) -> None:
    w = pd_world
    a, b = ScalerPod(w.clock), ScalerPod(w.clock)
    w.pods += [a, b]
    common = {"model": MODEL, "exporters": w.address, "prefillTokensPerSecond": "10000", "ratio": "fixed",
              "prefillDecodeRatio": "1:2"}
    md = {"llama-prefill": {**common, "role": "prefill"}, "llama-decode": {**common, "role": "decode"}}

    def setter(now: float) -> None:
        w.clock.now = now

    # KEDA polls the prefill ScaledObject through pod a, the decode one through pod b
    prefill = KedaHpaLoop(keda("llama-prefill", md["llama-prefill"]), GrpcExternalScaler(a.channel, clock=setter),
                          start=T0, initial_replicas=2)
    decode = KedaHpaLoop(keda("llama-decode", md["llama-decode"]), GrpcExternalScaler(b.channel, clock=setter),
                         start=T0, initial_replicas=2)
    clients = [stub(a.channel), stub(b.channel)]
    pairs: list[tuple[int, int]] = []

    def both_pods_agree(now: float) -> None:
        if now - T0 < 5:  # the first seconds: counters have no rate yet
            return
        got = [(answer(c, "llama-prefill", md["llama-prefill"]), answer(c, "llama-decode", md["llama-decode"]))
               for c in clients]
        assert got[0] == got[1], now - T0  # the same pair from either pod
        p, d = got[0]
        assert p == math.ceil(d / 2), (now - T0, p, d)  # and always 1:2
        pairs.append(got[0])

    w.step(T0 + 120, (prefill, decode), both_pods_agree)
    # prefill: 12000 tok/s / (10000 x 0.8) = 1.5; decode: 100000 tokens held / 80000 = 1.25
    # fixed 1:2: decode = ceil(max(1.25, 1.5 / 0.5)) = 3, prefill = ceil(3 / 2) = 2
    assert (prefill.spec_replicas, decode.spec_replicas) == (2, 3)
    assert pairs[-1] == (2, 3)

    # the same workload, grown: twice the prompts, 90% of decode KV in use
    for name in ("prefill-0", "prefill-1"):
        w.engines[name].prompt_tps, w.engines[name].requests_ps = 12000.0, 6.0
    for name in ("decode-0", "decode-1"):
        w.engines[name].kv_usage = 0.9
    w.step(T0 + 300, (prefill, decode), both_pods_agree)
    # prefill: 24000 / 8000 = 3; decode: 180000 / 80000 = 2.25; decode = ceil(max(2.25, 6)) = 6, prefill 3
    assert (prefill.spec_replicas, decode.spec_replicas) == (3, 6)
    assert pairs[-1] == (3, 6)
    ups = [(e.replicas_before, e.replicas_after) for e in decode.events if e.kind == "hpa_scale_up"]
    assert ups[0] == (2, 3) and ups[-1][1] == 6


def test_independent_pools_each_follow_their_own_signal(pd_world: World) -> None:
    w = pd_world
    a = ScalerPod(w.clock)
    w.pods.append(a)
    # a 20 s cold start: each pool stands ready for what the last 60 s asked (three cold starts), so by T0+200
    # the shift's new level is all either pool remembers
    common = {"model": MODEL, "exporters": w.address, "prefillTokensPerSecond": "10000", "coldStart": "20s"}
    client = stub(a.channel)
    for name, role in (("p", "prefill"), ("d", "decode")):  # KEDA's first call: the scaler starts collecting
        client.GetMetricSpec(pb.ScaledObjectRef(name=name, namespace=NS, scalerMetadata={**common, "role": role}))
    w.step(T0 + 90)
    assert answer(client, "p", {**common, "role": "prefill"}) == 2  # ceil(1.5)
    assert answer(client, "d", {**common, "role": "decode"}) == 2  # ceil(1.25)
    # a shift to long prompts with short answers: prefill grows, decode shrinks, each on its own
    for name in ("prefill-0", "prefill-1"):
        w.engines[name].prompt_tps = 20000.0  # 40000 / 8000 = 5
    for name in ("decode-0", "decode-1"):
        w.engines[name].kv_usage = 0.3  # 60000 / 80000 = 0.75 -> 1
    w.step(T0 + 200)
    assert answer(client, "p", {**common, "role": "prefill"}) == 5
    assert answer(client, "d", {**common, "role": "decode"}) == 1
    # bounded at most 1:2: prefill 5 > 0.5 x 1 -> decode = ceil(5 / 0.5) = 10
    bounded = {**common, "ratio": "bounded", "maxPrefillDecodeRatio": "1:2"}
    assert answer(client, "d", {**bounded, "role": "decode"}) == 10


# ---- variants: a spill to the second variant when the first stays Pending ----------------------

VARIANTS = "llama-l4 pricePerHour=0.8 capacity=75000 maxReplicas=4; llama-h100 pricePerHour=4.1 capacity=600000"


def iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def scaled_object_spec(name: str) -> dict[str, Any]:
    return {"scaleTargetRef": {"name": name}, "minReplicaCount": 0, "maxReplicaCount": 8,
            "triggers": [{"type": "external", "metadata": {"scalerAddress": "keda-llm-scaler.keda-llm:9090"}}]}


def l4_pods(scheduled: int, pending: int, pending_since: float) -> list[dict[str, Any]]:
    out = []
    for i in range(scheduled):
        p = pod(f"llama-l4-{i}", namespace=NS, started_at={"engine": iso(T0 - 900)})
        p["metadata"]["creationTimestamp"] = iso(T0 - 1000)
        p["status"]["conditions"].append({"type": "PodScheduled", "status": "True",
                                          "lastTransitionTime": iso(T0 - 1000)})
        out.append(p)
    for i in range(scheduled, scheduled + pending):
        p = pod(f"llama-l4-{i}", namespace=NS, phase="Pending", ip=None)
        p["spec"].pop("nodeName")
        p["metadata"]["creationTimestamp"] = iso(pending_since)
        p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                      "lastTransitionTime": iso(pending_since)}]
        out.append(p)
    return out


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[tuple[FakeKube, Path]]:
    token = tmp_path / "token"
    token.write_text("test-token\n")
    with FakeKube() as k:
        for name in ("llama-l4", "llama-h100"):
            k.put_scaled_object(NS, name, scaled_object_spec(name))
        k.put_workload("deployments", NS, "llama-l4", replicas=4, status_replicas=4, ready=4)
        k.put_workload("deployments", NS, "llama-h100", replicas=0, status_replicas=0, ready=None)
        k.objects[f"/api/v1/namespaces/{NS}/events"] = {"kind": "EventList", "apiVersion": "v1", "items": []}
        k.pods = l4_pods(4, 0, T0)
        yield k, token


def test_demand_spills_to_the_second_variant_while_the_first_stays_pending(kube: tuple[FakeKube, Path]) -> None:
    api, token = kube
    # two replicas hold 200000 KV tokens in all (half of 200000 each); at targetKVUtilization 0.8 an L4
    # (75000) carries 60000, an H100 (600000) 480000: the cheapest mix is 4 L4 (3.2/h) over 1 H100 (4.1/h)
    w = World({"r-0": Engine("unified", kv_usage=0.5, kv_tokens=200_000),
               "r-1": Engine("unified", kv_usage=0.5, kv_tokens=200_000)})
    try:
        readers = [WorkloadReader(KubeClient(KubeConfig(base_url=api.url, token_path=str(token), ca_path=None)),
                                  clock=w.clock) for _ in range(2)]
        for r in readers:
            w.threads.append(start_in_thread(ScalerSettings(grpc_address="127.0.0.1:0",
                                                            http_address=("127.0.0.1", 0), refresh_s=None,
                                                            demand_watch_s=None),
                                             reader=r, clock=w.clock, background=False))
        md = {"model": MODEL, "exporters": w.address, "variants": VARIANTS, "pendingTimeout": "5m"}
        channels = [grpc.insecure_channel(t.grpc_target) for t in w.threads]
        clients = [stub(c) for c in channels]

        def answers() -> list[dict[str, int]]:
            """Each pod's answer for both ScaledObjects (the L4's asked first on pod 0, the H100's on pod 1)."""
            out = []
            for c in (clients[0], clients[1]):
                out.append({v: answer(c, v, {**md, "variant": v}) for v in ("llama-l4", "llama-h100")})
            return out

        def refresh_kube() -> None:
            for r in readers:
                r.refresh_once()

        for c in clients:  # KEDA's first calls: the scaler starts collecting, and reading both Deployments
            for v in ("llama-l4", "llama-h100"):
                c.GetMetricSpec(pb.ScaledObjectRef(name=v, namespace=NS, scalerMetadata={**md, "variant": v}))
        refresh_kube()
        w.step(T0 + 60)
        assert answers() == [{"llama-l4": 4, "llama-h100": 0}] * 2

        # the L4 pool lost two GPUs: 2 of its 4 pods Pending (Unschedulable) since T0 + 60
        api.put_workload("deployments", NS, "llama-l4", replicas=4, status_replicas=4, ready=2)
        api.pods = l4_pods(2, 2, T0 + 60)
        refresh_kube()
        w.step(T0 + 300)
        assert answers() == [{"llama-l4": 4, "llama-h100": 0}] * 2  # 240 s: within pendingTimeout
        w.step(T0 + 360)
        refresh_kube()
        # 300 s Pending: the L4s count as the 2 scheduled (120000 tokens), the rest (80000) spills to one
        # H100; the L4 ScaledObject keeps its 4 (the 2 Pending pods stay, not asked for more)
        assert answers() == [{"llama-l4": 4, "llama-h100": 1}] * 2
        # capacity came back: the pods were scheduled, and the H100 is released
        api.put_workload("deployments", NS, "llama-l4", replicas=4, status_replicas=4, ready=4)
        api.pods = l4_pods(4, 0, T0)
        refresh_kube()
        w.step(T0 + 362)
        assert answers() == [{"llama-l4": 4, "llama-h100": 0}] * 2
        for c in channels:
            c.close()
    finally:
        w.stop()
