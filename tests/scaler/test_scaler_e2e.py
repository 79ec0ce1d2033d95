"""End to end on loopback, every part real: engines -> exporter -> scaler -> KEDA + HPA.

- engines: HTTP servers serving the recorded bodies (tests/fixtures/engines);
- the exporter: `exporter.cli.build_collector` on a clock the test sets, and its HTTP server, scraping
  them;
- the scaler: `scaler.cli.build` (per-ScaledObject sources, `exporters` source scraping the exporter,
  history, the real `decide` with the DEFAULT `tokens` policy, grpc.aio and HTTP servers), with the
  same clock and collection run by the test, one cycle per simulated second;
- KEDA and the HPA: the one emulator (simulator.control.KedaHpaLoop) calling the server through
  simulator.control.grpc_scaler.GrpcExternalScaler with KEDA's call pattern.

Numbers derived by hand from the bodies and scaler/policy.py `tokens`:
- vllm-0.32.0-cpu-load.prom: running 16, waiting 0, KV usage 0.0440771349862259 of 46592 tokens
  (cache_config_info kv_cache_size_tokens), no batch limit. Tokens held = 0.0440771349862259 x 46592
  = 2053.6418732782... ; nothing waits, so nothing is queued; capacity per replica = 46592 x
  targetKVUtilization 0.8 = 37273.6; desired = 2053.64 / 37273.6 = 0.0551 -> 1 replica.
- llamacpp-b11434-load.prom: processing 4, deferred 12, no KV capacity; the exporter is told the
  batch limit (4 slots). `tokens` then takes the concurrency bound: (4 + 12) / (4 x 0.8) = 5
  replicas; from 1 ready replica that is 5 >= 2 x 1, so Knative panic mode names the reason.
- the idle bodies report 0 running, 0 waiting (and vLLM KV usage 0): no demand.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from conftest import engine_body
from fakeengine import FakeEngine
from prometheus_server import BodyServer, json_body, refused_address
from scaler_harness import FakeClock, ScalerPod, get, keda_poll, metric_value, stub

from keda_llm.exporter.cli import build_collector
from keda_llm.exporter.config import parse_config
from keda_llm.exporter.server import MetricsServer, create_server
from keda_llm.scaler.externalscaler import externalscaler_pb2 as pb
from keda_llm.simulator.control import KedaHpaLoop, KedaSettings, ScaledObjectRef, Trigger
from keda_llm.simulator.control.grpc_scaler import GrpcExternalScaler

T0 = 1_800_000_000.0
NS = "llm"
VLLM_MODEL = "smollm2"  # the vLLM body names its model
LLAMA_MODEL = "SmolLM2-135M-GGUF"  # llama.cpp names none: the exporter's target config does
TOKENS_HELD = 0.0440771349862259 * 46592  # 2053.6418732782...
CAPACITY = 46592 * 0.8  # 37273.6 tokens per replica at targetKVUtilization 0.8


# ------------------------------------------------------------------------------------------ parts

class Exporter:
    """The real exporter (Collector + HTTP server) over real engine servers, on the test's clock."""

    def __init__(self, clock: FakeClock, engines: Mapping[str, FakeEngine],
                 targets: Sequence[Mapping[str, Any]]) -> None:
        self.engines = engines
        cfg = parse_config({"listen": "127.0.0.1:0", "interval": "5s", "timeout": "2s", "node_name": "node-e2e",
                            "gpu": {"nvml": False}, "targets": list(targets)}, env={})
        self.collector = build_collector(cfg, clock=clock)
        self.server: MetricsServer
        self.server, port = create_server(cfg.listen_address, self.collector)
        self.server.start()
        self.address = f"127.0.0.1:{port}"

    def cycle(self) -> None:
        self.collector.run_cycle()

    def stop(self) -> None:
        self.server.stop()
        self.collector.stop()
        for engine in self.engines.values():
            engine.stop()


@dataclass
class World:
    clock: FakeClock
    exporters: list[Exporter]
    pods: list[ScalerPod]

    def step(self, until: float, loops: Sequence[KedaHpaLoop] = (),
             after: Callable[[float], None] | None = None) -> None:
        """Each simulated second: the exporters scrape the engines, every scaler pod scrapes the
        exporters, then KEDA and the HPA run whatever is due."""
        while self.clock.now < until:
            self.clock.now += 1.0
            for exporter in self.exporters:
                exporter.cycle()
            for pod in self.pods:
                pod.collect()
            for loop in loops:
                loop.advance_to(self.clock.now)
            if after is not None:
                after(self.clock.now)


@pytest.fixture
def world() -> Iterator[World]:
    w = World(FakeClock(T0), [], [])
    yield w
    for pod in w.pods:
        pod.stop()
    for exporter in w.exporters:
        exporter.stop()


def vllm_llama_exporter(clock: FakeClock) -> Exporter:
    engines = {"vllm": FakeEngine(engine_body("vllm-0.32.0-cpu-load.prom")),
               "llama": FakeEngine(engine_body("llamacpp-b11434-load.prom"))}
    return Exporter(clock, engines, [
        {"url": engines["vllm"].url, "namespace": NS, "pod": "vllm-0"},
        {"url": engines["llama"].url, "namespace": NS, "pod": "llama-0", "model": LLAMA_MODEL, "max_running": 4},
    ])


def settings(name: str, metadata: Mapping[str, str], **kw: Any) -> KedaSettings:
    md = {"scalerAddress": "keda-llm-scaler.keda-llm:9090", **metadata}
    kind = kw.pop("kind", "external")
    return KedaSettings(name=name, namespace=NS, triggers=(Trigger(kind, md),),
                        **{"polling_interval_s": 15, "max_replicas": 10, **kw})


def clock_setter(clock: FakeClock) -> Callable[[float], None]:
    def set_now(now: float) -> None:
        clock.now = now

    return set_now


# ------------------------------------------------------------------------------------------ tests

def test_engines_to_keda_with_the_default_tokens_policy(world: World) -> None:
    exporter = vllm_llama_exporter(world.clock)
    world.exporters.append(exporter)
    pod = ScalerPod(world.clock)
    world.pods.append(pod)
    chat = settings("chat", {"model": VLLM_MODEL, "exporters": exporter.address})
    llama = settings("llama", {"model": LLAMA_MODEL, "exporters": exporter.address})
    scalers = [GrpcExternalScaler(pod.channel, clock=clock_setter(world.clock)) for _ in range(2)]
    loops = [KedaHpaLoop(chat, scalers[0], start=T0, initial_replicas=1),
             KedaHpaLoop(llama, scalers[1], start=T0, initial_replicas=1)]

    # T0: the scaler has just started and collected nothing: UNAVAILABLE, so KEDA and the HPA hold at 1.
    world.exporters[0].cycle()
    for loop in loops:
        loop.advance_to(T0)
    for loop in loops:
        errors = [e for e in loop.events if e.kind == "scaler_error"]
        assert errors and all("UNAVAILABLE" in e.detail for e in errors)
        assert [e.kind for e in loop.events if e.kind.startswith("hpa")] == ["hpa_created", "hpa_metric_error"]
        assert loop.spec_replicas == 1

    world.step(T0 + 60, loops)

    # vLLM: 2053.64 tokens held of 37273.6 per replica -> 1, steady.
    assert loops[0].spec_replicas == 1
    assert pod.metric("keda_llm_scaler_demand", "chat", VLLM_MODEL) == pytest.approx(TOKENS_HELD, rel=1e-12)
    assert pod.metric("keda_llm_scaler_capacity", "chat", VLLM_MODEL) == pytest.approx(CAPACITY, rel=1e-12)
    assert pod.metric("keda_llm_scaler_desired_replicas", "chat", VLLM_MODEL) == 1
    status, text = get(pod.http + "/metrics")
    assert status == 200
    assert metric_value(text, "keda_llm_scaler_decision_reason", namespace=NS, scaledobject="chat",
                        model=VLLM_MODEL, reason="steady") == 1
    # llama.cpp: 16 requests against 4 slots x 0.8 -> 5, and the HPA follows KEDA's metric to 5.
    assert loops[1].spec_replicas == 5
    assert pod.metric("keda_llm_scaler_demand", "llama", LLAMA_MODEL) == 16
    assert pod.metric("keda_llm_scaler_capacity", "llama", LLAMA_MODEL) == pytest.approx(3.2, rel=1e-12)
    assert metric_value(text, "keda_llm_scaler_decision_reason", namespace=NS, scaledobject="llama",
                        model=LLAMA_MODEL, reason="panic") == 1
    scale_ups = [(e.at - T0, e.replicas_before, e.replicas_after) for e in loops[1].events
                 if e.kind == "hpa_scale_up"]
    # First HPA sync with a value at T0 + 15 (the T0 one had none). The ScaledObject sets no `behavior`,
    # so the HPA caps a scale-up at max(2 x current, 4) (kubernetes pkg/controller/podautoscaler
    # horizontal.go scaleUpLimitFactor / scaleUpLimitMinimum): 1 -> 4, then 4 -> 5 at T0 + 30.
    assert scale_ups == [(15.0, 1, 4), (30.0, 4, 5)]
    # T0's poll: the UNAVAILABLE GetMetrics was retried once at once, as KEDA does, then nothing else.
    assert scalers[0].calls[:4] == [("reconcile", "GetMetricSpec"), ("poll", "GetMetricSpec"),
                                    ("poll", "GetMetrics"), ("poll", "GetMetrics")]


def test_two_scaler_pods_on_the_same_exporter_answer_every_rpc_the_same(world: World) -> None:
    exporter = vllm_llama_exporter(world.clock)
    world.exporters.append(exporter)
    a, b = ScalerPod(world.clock), ScalerPod(world.clock)
    world.pods += [a, b]
    refs = [pb.ScaledObjectRef(name="chat", namespace=NS, scalerMetadata={
                "model": VLLM_MODEL, "exporters": exporter.address}),
            pb.ScaledObjectRef(name="llama", namespace=NS, scalerMetadata={
                "model": LLAMA_MODEL, "exporters": exporter.address, "scaleToZero": "true", "idleTimeout": "30s"})]
    clients = [stub(a.channel), stub(b.channel)]

    def answers(client: Any) -> list[Any]:
        out: list[Any] = []
        for ref in refs:
            try:
                out.append(keda_poll(client, ref))
            except grpc.RpcError as err:
                out.append((err.code(), err.details()))
        return out

    engines = exporter.engines
    script = {  # second -> what changes on the engines
        40: lambda: engines["llama"].__setattr__("body", engine_body("llamacpp-b11434-idle.prom").encode()),
        50: lambda: engines["vllm"].__setattr__("body", engine_body("vllm-0.32.0-cpu-idle.prom").encode()),
        70: lambda: engines["vllm"].__setattr__("mode", "status"),  # vLLM answers 500: its replica goes down
        80: lambda: engines["vllm"].__setattr__("mode", "serve"),
    }
    seen: list[list[Any]] = [answers(clients[0])]
    assert seen[0] == answers(clients[1])

    def poll_both(now: float) -> None:
        action = script.get(int(now - T0))
        if action is not None:
            action()
        got_a, got_b = answers(clients[0]), answers(clients[1])
        assert got_a == got_b, now - T0
        seen.append(got_a)

    world.step(T0 + 120, after=poll_both)

    # Hand-derived checkpoints (see the module docstring). Before any collection: UNAVAILABLE for both, llama's
    # scaleToZero too: a source that has not answered yet says nothing about idleness (read as idle, a scaler
    # restart took a running model to zero).
    assert seen[0][0][0] == grpc.StatusCode.UNAVAILABLE
    assert seen[0][1][0] == grpc.StatusCode.UNAVAILABLE
    assert seen[30][0].values[0][1:] == (1, 1.0)  # vLLM under load: 1
    assert seen[30][1].values[0][1:] == (5, 5.0) and seen[30][1].active is True  # llama under load: 5
    assert seen[60][1].active is True  # idle since 40 s: within idleTimeout 30 s of the last demand
    assert seen[75][0][0] == grpc.StatusCode.UNAVAILABLE  # the only vLLM replica is down: hold
    assert seen[120][1].values[0][1:] == (0, 0.0) and seen[120][1].active is False  # idle past 30 s
    assert seen[120][0].values[0][1:] == (1, 1.0)  # vLLM idle, scaleToZero off: never below 1


def test_each_scaledobject_reads_the_replicas_its_own_exporters_report(world: World) -> None:
    # One model name in one namespace on two node pools, each with its own exporter: 1 replica vs 2.
    load = engine_body("vllm-0.32.0-cpu-load.prom")
    one = {"v": FakeEngine(load)}
    two = {"a": FakeEngine(load), "b": FakeEngine(load)}
    pool1 = Exporter(world.clock, one, [{"url": one["v"].url, "namespace": NS, "pod": "pool1-vllm-0"}])
    pool2 = Exporter(world.clock, two, [{"url": two[k].url, "namespace": NS, "pod": f"pool2-vllm-{k}"}
                                        for k in ("a", "b")])
    world.exporters += [pool1, pool2]
    pod = ScalerPod(world.clock)
    world.pods.append(pod)
    client = stub(pod.channel)
    first = pb.ScaledObjectRef(name="pool-1", namespace=NS, scalerMetadata={
        "model": VLLM_MODEL, "exporters": pool1.address})
    second = pb.ScaledObjectRef(name="pool-2", namespace=NS, scalerMetadata={
        "model": VLLM_MODEL, "exporters": pool2.address})
    for ref in (first, second):
        client.GetMetricSpec(ref)  # KEDA's first call: the scaler starts collecting for it

    world.step(T0 + 30)
    keda_poll(client, first)
    keda_poll(client, second)

    assert pod.metric("keda_llm_scaler_demand", "pool-1", VLLM_MODEL) == pytest.approx(TOKENS_HELD, rel=1e-12)
    assert pod.metric("keda_llm_scaler_capacity", "pool-1", VLLM_MODEL) == pytest.approx(CAPACITY, rel=1e-12)
    assert pod.metric("keda_llm_scaler_demand", "pool-2", VLLM_MODEL) == pytest.approx(2 * TOKENS_HELD, rel=1e-12)
    assert pod.metric("keda_llm_scaler_capacity", "pool-2", VLLM_MODEL) == pytest.approx(2 * CAPACITY, rel=1e-12)
    # activationQuery is PromQL: without any Prometheus address it is refused, naming the key to set.
    bad = pb.ScaledObjectRef(name="pool-3", namespace=NS, scalerMetadata={
        "model": VLLM_MODEL, "exporters": pool1.address, "activationQuery": "sum(pending)"})
    with pytest.raises(grpc.RpcError) as err:
        client.GetMetricSpec(bad)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "prometheusAddress" in (err.value.details() or "")


def prometheus_answer(value: float) -> bytes:
    """An /api/v1/query answer for a `sum(...)`: a one-element vector, as Prometheus encodes it."""
    return json_body({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {}, "value": [T0, repr(value)]}]}})


def test_activation_query_demand_pushes_stream_is_active_from_zero(world: World) -> None:
    """No replica of the model exists; a gateway's pending requests (activationQuery) appear in
    Prometheus; the demand watcher re-evaluates the idle ScaledObject and pushes `true` on KEDA's
    stream, so KEDA scales 0 -> 1 before its next poll."""
    exporter = vllm_llama_exporter(world.clock)  # the exporters answer; none serves the woken model
    world.exporters.append(exporter)
    prometheus = BodyServer(prometheus_answer(0.0), content_type="application/json")
    pod = ScalerPod(world.clock, demand_watch_s=0.02)
    world.pods.append(pod)
    try:
        so = settings("sleepy", {"model": "sleepy-7b", "exporters": exporter.address, "scaleToZero": "true",
                                 "prometheusAddress": f"http://{prometheus.address}",
                                 "activationQuery": 'sum(gateway_pending_requests{model="sleepy-7b"})'},
                      kind="external-push")
        scaler = GrpcExternalScaler(pod.channel, clock=clock_setter(world.clock))
        loop = KedaHpaLoop(so, scaler, start=T0, initial_replicas=0)
        scaler.open_stream(ScaledObjectRef(so.name, so.namespace, so.triggers[0].metadata))
        world.step(T0 + 20, [loop])
        assert loop.spec_replicas == 0
        assert scaler.take_pushes() == []  # idle at zero: the stream stays silent

        prometheus.set(prometheus_answer(3.0), content_type="application/json")
        world.step(T0 + 21)  # one collection sees the 3 pending requests
        # Every question within one tick (1 s) reads one evaluation, and the watcher may have asked at
        # T0 + 21 before that collection landed: the next tick sees the demand whatever the timing.
        world.clock.now += 1.0
        assert scaler.wait_for_push(10.0)  # the watcher pushed, with no poll in between
        loop.advance_to(world.clock.now)
        assert loop.spec_replicas == 1
        # The emulator hands a received push to KEDA at its own current time (T0 + 20, where it was last
        # advanced): woken by the push alone, ten seconds before the next poll at T0 + 30.
        assert [(e.at - T0, e.kind) for e in loop.events if e.kind.startswith(("push", "keda"))] == [
            (20.0, "push_activate")]
        poll = keda_poll(stub(pod.channel), pb.ScaledObjectRef(name=so.name, namespace=NS,
                                                               scalerMetadata=dict(so.triggers[0].metadata)))
        assert poll.active is True and poll.values[0][1:] == (1, 1.0)
        status, text = get(pod.http + "/metrics")
        assert status == 200
        assert metric_value(text, "keda_llm_scaler_activations_total", namespace=NS, scaledobject="sleepy",
                            source="demand") == 1
        assert any("gateway_pending_requests" in p for p in prometheus.paths)
        scaler.close()
    finally:
        prometheus.close()


def test_activation_query_wakes_a_model_whose_exporters_are_all_gone(world: World) -> None:
    """A GPU node pool scaled to zero runs no exporter pod: no exporter answers, yet the gateway's
    pending requests must still wake the model (the source reads activationQuery regardless)."""
    prometheus = BodyServer(prometheus_answer(2.0), content_type="application/json")
    pod = ScalerPod(world.clock)
    world.pods.append(pod)
    try:
        ref = pb.ScaledObjectRef(name="cold", namespace=NS, scalerMetadata={
            "model": "cold-70b", "exporters": refused_address(), "scaleToZero": "true",
            "prometheusAddress": f"http://{prometheus.address}", "activationQuery": "sum(gateway_pending_requests)"})
        client = stub(pod.channel)
        client.GetMetricSpec(ref)
        world.step(T0 + 1)
        poll = keda_poll(client, ref)
        assert poll.active is True and poll.values[0][1:] == (1, 1.0)  # at zero with demand: wake to 1
        assert pod.metric("keda_llm_scaler_demand", "cold", "cold-70b") == 2
        prometheus.set(prometheus_answer(0.0), content_type="application/json")
        world.step(T0 + 2)
        poll = keda_poll(client, ref)
        assert poll.active is True  # demand 1 s ago: within idleTimeout (10m)
    finally:
        prometheus.close()


# ------------------------------------------------------------------------------- the zero path (regressions)

def idle_vllm_exporter(clock: FakeClock) -> Exporter:
    engines = {"vllm": FakeEngine(engine_body("vllm-0.32.0-cpu-idle.prom"))}
    return Exporter(clock, engines, [{"url": engines["vllm"].url, "namespace": NS, "pod": "vllm-0"}])


def test_an_idle_scaled_object_reaches_zero_with_keda_stream_open_throughout(world: World) -> None:
    """KEDA holds StreamIsActive open for an `external-push` trigger the whole time. After one activation
    the model stays idle: IsActive must turn false once the hold and idleTimeout have passed, KEDA then
    scales to zero after its cooldown, and the stream carries no `true` beyond the activation's.
    (The demand watcher used to judge the activation-overlaid answer: every hold renewed itself.)"""
    exporter = idle_vllm_exporter(world.clock)
    world.exporters.append(exporter)
    pod = ScalerPod(world.clock, demand_watch_s=0.01)
    world.pods.append(pod)
    so = settings("chat", {"model": VLLM_MODEL, "exporters": exporter.address, "scaleToZero": "true",
                           "idleTimeout": "30s"}, kind="external-push")
    scaler = GrpcExternalScaler(pod.channel, clock=clock_setter(world.clock))
    try:
        loop = KedaHpaLoop(so, scaler, start=T0, initial_replicas=1)
        scaler.open_stream(ScaledObjectRef(so.name, so.namespace, so.triggers[0].metadata))
        world.step(T0 + 5, [loop])
        status, _ = post_activate(pod, so.name)
        assert status == 200
        assert scaler.wait_for_push(10.0)
        assert scaler.take_pushes() == [True]

        def let_the_watcher_run(now: float) -> None:
            if now % 5 == 0:
                time.sleep(0.03)  # the demand watcher runs on the pod's own loop, in real time

        world.step(T0 + 1200, [loop], after=let_the_watcher_run)
        _, text = get(pod.http + "/metrics")
        # nothing but the one POST activated it: no demand was ever seen, so no push beyond the first
        assert metric_value(text, "keda_llm_scaler_activations_total", namespace=NS, scaledobject="chat",
                            source="demand") is None
        assert metric_value(text, "keda_llm_scaler_activations_total", namespace=NS, scaledobject="chat",
                            source="http") == 1
        assert scaler.take_pushes() == []
        assert loop.spec_replicas == 0
        poll = keda_poll(stub(pod.channel), pb.ScaledObjectRef(name=so.name, namespace=NS,
                                                               scalerMetadata=dict(so.triggers[0].metadata)))
        assert poll.active is False and poll.values[0][1:] == (0, 0.0)
    finally:
        scaler.close()


def test_stale_data_never_lowers_the_count_even_just_after_an_activation(world: World) -> None:
    """12 or more replicas serve; the model was activated a minute ago; then every exporter becomes
    unreachable. GetMetrics must answer UNAVAILABLE (KEDA and the HPA hold the count), not the activation
    floor of 1 (which scaled a 12-replica model down to 1 on stale data)."""
    exporter = vllm_llama_exporter(world.clock)
    world.exporters.append(exporter)
    pod = ScalerPod(world.clock, demand_watch_s=0.01)
    world.pods.append(pod)
    # llama.cpp's load body: 4 processing + 12 deferred = 16 requests, one per replica
    so = settings("chat", {"model": LLAMA_MODEL, "exporters": exporter.address, "scaleToZero": "true",
                           "policy": "concurrency", "targetConcurrency": "1", "mode": "reactive"},
                  kind="external-push", max_replicas=20)
    scaler = GrpcExternalScaler(pod.channel, clock=clock_setter(world.clock))
    try:
        ref = pb.ScaledObjectRef(name=so.name, namespace=NS, scalerMetadata=dict(so.triggers[0].metadata))
        client = stub(pod.channel)
        client.GetMetricSpec(ref)  # the scaler starts this ScaledObject's collection on first contact
        world.step(T0 + 2)  # and has data before the HPA's first sync
        loop = KedaHpaLoop(so, scaler, start=world.clock.now, initial_replicas=12)
        scaler.open_stream(ScaledObjectRef(so.name, so.namespace, so.triggers[0].metadata))
        world.step(T0 + 10, [loop])
        serving = loop.spec_replicas
        assert serving >= 12
        assert post_activate(pod, so.name)[0] == 200
        world.exporters.remove(exporter)
        exporter.stop()  # unreachable from now on: the scaler's data goes stale after staleAfter (30 s)
        world.step(T0 + 90, [loop])
        with pytest.raises(grpc.RpcError) as err:
            client.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref, metricName=client.GetMetricSpec(
                ref).metricSpecs[0].metricName))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert client.IsActive(ref).result is True  # the activation still holds the model awake
        assert loop.spec_replicas == serving  # the HPA held through the stale minute
    finally:
        scaler.close()


def post_activate(pod: ScalerPod, name: str) -> tuple[int, dict[str, Any]]:
    from scaler_harness import post

    return post(f"{pod.http}/v1/activate/{NS}/{name}")
