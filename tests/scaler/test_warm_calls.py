"""Cold-start levers, scaler side: weight warming over real HTTP (exporter stubs), the warmCapacity answer,
and the measured cold-start phases (pods and events from the fake API server) as the horizon."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakekube import FakeKube, pod
from httpstub import HttpStub, Request, Response, json_response

from keda_llm.scaler.activation import ScaledObjectKey
from keda_llm.scaler.assembly import Scaler, ScalerSettings, build
from keda_llm.scaler.config import parse_metadata
from keda_llm.scaler.kube import KubeClient, KubeConfig, WorkloadReader
from keda_llm.scaler.levers import LeverDecide, WarmingBus, warm_capacity
from keda_llm.scaler.model import Decision, PolicyState, WorkloadState
from keda_llm.scaler.phases import PhaseTracker, pod_times, pulled_times
from keda_llm.scaler.warm import WarmPlanner, choose_nodes, scan_body

H100 = "NVIDIA H100 80GB HBM3"
A10G = "NVIDIA A10G"


def gpu(node: str, i: int, kind: str, pod_name: str = "", up: int = 1, ns: str = "llm") -> str:
    held = ns if pod_name else ""
    container = "engine" if pod_name else ""
    return (f'llm_gpu_up{{gpu="{i}",uuid="GPU-{node}-{i}",gpu_model="{kind}",mig_profile="",node="{node}",'
            f'namespace="{held}",pod="{pod_name}",container="{container}"}} {up}\n')


def engine(node: str, pod_name: str, model: str = "llama", ns: str = "llm") -> str:
    return (f'llm_engine_up{{model="{model}",engine="vllm",role="unified",namespace="{ns}",pod="{pod_name}",'
            f'node="{node}"}} 1\n')


# node-a: 2 free H100s; node-b: 1 free H100 and 1 held by a replica of llama; node-c: 2 free A10Gs;
# node-d: 1 H100 whose NVML errors (up 0) -- not free.
BODIES = {
    "node-a": gpu("node-a", 0, H100) + gpu("node-a", 1, H100),
    "node-b": gpu("node-b", 0, H100) + gpu("node-b", 1, H100, "llama-1") + engine("node-b", "llama-1"),
    "node-c": gpu("node-c", 0, A10G) + gpu("node-c", 1, A10G),
    "node-d": gpu("node-d", 0, H100, up=0),
}


def test_scan_body_counts_free_gpus_by_kind_and_learns_the_models_kind() -> None:
    b = scan_body(BODIES["node-b"], "http://x:9400")
    assert b is not None
    assert (b.node, b.free, b.models, b.kinds) == ("node-b", {H100: 1}, {("llm", "llama")},
                                                   {("llm", "llama"): {H100}})
    d = scan_body(BODIES["node-d"], "http://y:9400")
    assert d is not None and d.free == {}
    # a MIG parent with slices is not free itself: only its unattributed slice counts
    mig = ('llm_gpu_up{gpu="0",uuid="u",gpu_model="H100",mig_profile="",node="n",namespace="",pod="",container=""} 1\n'
           'llm_gpu_up{gpu="0/1",uuid="u",gpu_model="H100",mig_profile="3g.40gb",node="n",namespace="",pod="",'
           'container=""} 1\n'
           'llm_gpu_up{gpu="0/2",uuid="u",gpu_model="H100",mig_profile="3g.40gb",node="n",namespace="llm",pod="p",'
           'container="c"} 1\n')
    m = scan_body(mig, "http://z:9400")
    assert m is not None and m.free == {"H100/3g.40gb": 1}
    assert scan_body("# nothing\n", "http://z:9400") is None


def test_choose_nodes_prefers_recent_then_most_free_then_name() -> None:
    views = [v for n, body in BODIES.items() if (v := scan_body(body, f"http://{n}:9400")) is not None]
    # H100 only: a (2 free), b (1 free); c has no H100, d's is down
    assert [v.node for v in choose_nodes(views, H100, {}, 5)] == ["node-a", "node-b"]
    # b ran the model recently: first, whatever its free count
    assert [v.node for v in choose_nodes(views, H100, {"node-b": 100.0}, 5)] == ["node-b", "node-a"]
    assert [v.node for v in choose_nodes(views, H100, {"node-b": 100.0}, 1)] == ["node-b"]
    # any kind: a and c have 2 free (by name), b 1
    assert [v.node for v in choose_nodes(views, None, {}, 3)] == ["node-a", "node-c", "node-b"]


class Exporter:
    """An exporter stub: /metrics from BODIES[node], POST /v1/warm recorded, answered with `status`."""

    def __init__(self, node: str, status: int = 202) -> None:
        self.node = node
        self.status = status
        self.warms: list[tuple[str | None, dict[str, str]]] = []
        self.stub = HttpStub(self.answer)

    def answer(self, req: Request) -> Response:
        if req.path == "/metrics":
            return Response(200, BODIES[self.node].encode())
        if req.path == "/v1/warm" and req.method == "POST":
            self.warms.append((req.header("Authorization"), json.loads(req.body)))
            return json_response(self.status, {"id": 1, "files": 2, "bytes": 1000})
        return Response(404, b"no\n")


@pytest.fixture
def exporters() -> Iterator[dict[str, Exporter]]:
    out = {n: Exporter(n, 401 if n == "node-c" else 202) for n in BODIES}
    try:
        yield out
    finally:
        for e in out.values():
            e.stub.close()


def fake_decide(replicas: int, details: dict[str, float] | None = None, active: bool = True):  # type: ignore[no-untyped-def]
    seen: list[float | None] = []

    def decide(history, cfg, state, workload, now):  # type: ignore[no-untyped-def]
        seen.append(cfg.cold_start)
        return Decision(replicas, "scale_up", active, details or {}), state

    decide.seen = seen  # type: ignore[attr-defined]
    return decide


class History:
    namespace = "llm"
    model = "llama"
    last_at = 0.0


def metadata(**extra: str) -> dict[str, str]:
    return {"model": "llama", "warmPath": "/models/llama", **extra}


def test_a_scale_up_warms_the_likely_nodes_once_per_cold_start(exporters: dict[str, Exporter], tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    now = [1000.0]
    planner = WarmPlanner(token_file=str(token), clock=lambda: now[0], background=False)
    urls = [f"{e.stub.url}/metrics" for e in exporters.values()]
    levers = LeverDecide(fake_decide(3), planner=planner, resolver=lambda cfg: lambda: urls)
    cfg = parse_metadata(metadata(warmNodes="3", coldStart="2m"))
    # node-b runs llama: the periodic scan remembers it
    planner.watch(("llm", "llama"), lambda: urls)
    planner.scan_once()
    d, _ = levers(History(), cfg, PolicyState(), WorkloadState(current_replicas=1, ready_replicas=1), now[0])
    assert d.replicas == 3
    assert planner.run_pending() == 1
    # H100 learned from node-b's attribution; b first (recent), then a; c (A10G) and d (down) never asked
    assert [(e.node, e.warms) for e in exporters.values() if e.warms] == [
        ("node-a", [("Bearer s3cret", {"path": "/models/llama"})]),
        ("node-b", [("Bearer s3cret", {"path": "/models/llama"})])]
    assert [(node, result) for _, node, result in planner.done] == [("node-b", "accepted"), ("node-a", "accepted")]
    r = planner.requests_total
    assert r.labels("node-b", "accepted")._value.get() == 1 and r.labels("node-a", "accepted")._value.get() == 1
    # within the cold start (2 min): no second warm; after it, one more
    now[0] += 119.0
    levers(History(), cfg, PolicyState(), WorkloadState(current_replicas=1, ready_replicas=1), now[0])
    assert planner.run_pending() == 0
    assert planner.triggers.labels("llm", "llama", "deduplicated")._value.get() == 1
    now[0] += 2.0
    levers(History(), cfg, PolicyState(), WorkloadState(current_replicas=1, ready_replicas=1), now[0])
    assert planner.run_pending() == 1
    assert len(exporters["node-b"].warms) == 2
    # no scale-up (3 asked, 3 there): no warm
    now[0] += 1000.0
    levers(History(), cfg, PolicyState(), WorkloadState(current_replicas=3, ready_replicas=3), now[0])
    assert planner.run_pending() == 0


def test_refusals_and_dead_exporters_are_counted_never_raised(exporters: dict[str, Exporter], tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret")
    planner = WarmPlanner(token_file=str(token), clock=lambda: 0.0, background=False, timeout_s=1.0)
    urls = [f"{exporters['node-c'].stub.url}/metrics"]
    levers = LeverDecide(fake_decide(1), planner=planner, resolver=lambda cfg: lambda: urls)
    cfg = parse_metadata(metadata(warmGpuModel=A10G))
    levers(History(), cfg, PolicyState(), WorkloadState(current_replicas=0, ready_replicas=0), 0.0)
    planner.run_pending()
    assert planner.requests_total.labels("node-c", "http_401")._value.get() == 1
    # every exporter gone: counted as no_exporters, the decision still comes back
    exporters["node-c"].stub.close()
    levers2 = LeverDecide(fake_decide(2), planner=planner, resolver=lambda cfg: lambda: urls)
    d, _ = levers2(History(), parse_metadata(metadata(model="other")), PolicyState(),
                   WorkloadState(current_replicas=0, ready_replicas=0), 0.0)
    assert d.replicas == 2
    planner.run_pending()
    assert planner.triggers.labels("llm", "other", "no_exporters")._value.get() == 1
    # no token file: nothing is posted with an empty token
    bare = WarmPlanner(token_file=None, clock=lambda: 0.0, background=False)
    urls_a = [f"{exporters['node-a'].stub.url}/metrics"]
    LeverDecide(fake_decide(1), planner=bare, resolver=lambda cfg: lambda: urls_a)(
        History(), cfg.__class__(model="llama", warm_path="/m"), PolicyState(), WorkloadState(0, 0), 0.0)
    bare.run_pending()
    assert exporters["node-a"].warms == [] and bare.requests_total.labels("node-a", "no_token")._value.get() == 1


def test_a_wake_from_zero_warms_through_the_activation(exporters: dict[str, Exporter], tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    planner = WarmPlanner(token_file=str(token), clock=lambda: 50.0, background=False)
    urls = [f"{exporters['node-a'].stub.url}/metrics"]
    levers = LeverDecide(fake_decide(1), planner=planner, resolver=lambda cfg: lambda: urls)
    bus = WarmingBus(levers, clock=lambda: 50.0)
    key = ScaledObjectKey("llm", "llama-so")
    bus.activate(key)  # not tracked yet: no config, no warm
    assert planner.run_pending() == 0
    bus.track(key, parse_metadata(metadata()))
    bus.activate(key)
    assert planner.run_pending() == 1
    assert exporters["node-a"].warms == [("Bearer t", {"path": "/models/llama"})]
    assert bus.last_activation(key) == 50.0


def test_the_assembled_scaler_warms_on_post_activate(exporters: dict[str, Exporter], tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    settings = ScalerSettings(grpc_address="127.0.0.1:0", http_address=("127.0.0.1", 0),
                              exporters=(exporters["node-b"].stub.url.removeprefix("http://"),),
                              warm_token_file=str(token), refresh_s=None, demand_watch_s=None)
    async def make() -> Scaler:
        return build(settings, background=False)  # grpc.aio binds to the loop it is built on

    loop = asyncio.new_event_loop()
    try:
        scaler = loop.run_until_complete(make())
    finally:
        loop.close()
    key = ScaledObjectKey("llm", "llama-so")
    scaler.service.entry(key, metadata(scaleToZero="true"))
    scaler.service.activate(key)
    assert scaler.planner is not None and scaler.planner.run_pending() == 1
    assert exporters["node-b"].warms == [("Bearer t", {"path": "/models/llama"})]
    samples = {(s.labels.get("node"), s.labels.get("result")): s.value
               for m in scaler.service.metrics.registry.collect() for s in m.samples
               if s.name == "keda_llm_scaler_warm_requests_total"}
    assert samples == {("node-b", "accepted"): 1.0}


# ---- warmCapacity -----------------------------------------------------------------------------------


def test_warm_capacity_is_the_decided_count_beyond_the_running_one_capped() -> None:
    assert warm_capacity(Decision(5, "forecast_up"), running=2, cap=8) == 3
    assert warm_capacity(Decision(5, "forecast_up"), running=2, cap=2) == 2
    assert warm_capacity(Decision(2, "steady", True, {"forecast_desired": 6.0}), running=2, cap=8) == 4
    assert warm_capacity(Decision(2, "steady"), running=3, cap=8) == 0
    assert warm_capacity(Decision(0, "idle_zero", False), running=0, cap=8) == 0


class SnapHistory(History):
    class _Snap:
        fresh, stale, loading = 2, 0, 1

    def snapshot(self, now: float) -> _Snap:
        return self._Snap()


def test_the_warm_capacity_answer_counts_the_models_replicas_not_the_placeholders() -> None:
    decide = fake_decide(6)
    levers = LeverDecide(decide)
    cfg = parse_metadata({"model": "llama", "answer": "warmCapacity", "warmCapacityMax": "4"})
    # the ScaledObject's own target (placeholders) runs 4: ignored; the model runs 2 up + 1 loading = 3
    d, _ = levers(SnapHistory(), cfg, PolicyState(), WorkloadState(current_replicas=4, ready_replicas=4), 0.0)
    assert (d.replicas, d.active, d.details["model_replicas"]) == (3, True, 3.0)
    idle, _ = LeverDecide(fake_decide(0, active=False))(SnapHistory(), cfg, PolicyState(), WorkloadState(4, 4), 0.0)
    assert (idle.replicas, idle.active) == (0, False)


# ---- measured phases ----------------------------------------------------------------------------------


def timed_pod(name: str, created: str, scheduled: str, started: str, ready: str | None, restarts: int = 0) -> dict:  # type: ignore[type-arg]
    p = pod(name, namespace="llm", started_at={"engine": started})
    p["metadata"]["creationTimestamp"] = created
    p["metadata"]["labels"] = {"app": "llama"}
    p["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled},
        {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": ready or started}]
    p["status"]["containerStatuses"][0]["restartCount"] = restarts
    return p


def pulled(name: str, at: str) -> dict:  # type: ignore[type-arg]
    return {"reason": "Pulled", "lastTimestamp": at, "involvedObject": {"kind": "Pod", "name": name}}


def test_pod_times_give_each_phase() -> None:
    # created 10:00:00, scheduled +95 s (a node came up), pulled +70 s, started +5 s, ready +120 s
    p = timed_pod("llama-1", "2025-06-01T10:00:00Z", "2025-06-01T10:01:35Z", "2025-06-01T10:02:50Z",
                  "2025-06-01T10:04:50Z")
    t = pod_times(p, pulled_times([pulled("llama-1", "2025-06-01T10:02:45Z"), pulled("other", "2025-06-01T11:00:00Z")]))
    assert t.phases() == {"scheduled": 95.0, "image_pulled": 70.0, "container_started": 5.0, "engine_ready": 120.0,
                          "cold_start": 290.0}
    # no Pulled event: the container phase runs from scheduling; not ready yet: nothing; restarted: skipped
    assert pod_times(p, {}).phases() == {"scheduled": 95.0, "container_started": 75.0, "engine_ready": 120.0,
                                         "cold_start": 290.0}
    assert pod_times(timed_pod("x", "2025-06-01T10:00:00Z", "2025-06-01T10:00:01Z", "2025-06-01T10:00:02Z", None),
                     {}).phases() is None
    assert pod_times(timed_pod("y", "2025-06-01T10:00:00Z", "2025-06-01T10:00:01Z", "2025-06-01T10:00:02Z",
                               "2025-06-01T10:00:03Z", restarts=1), {}).phases() is None


def test_measured_p90_becomes_the_horizon_where_coldstart_is_unset(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    tracker = PhaseTracker()
    with FakeKube(token="t") as kube:
        kube.put_scaled_object("llm", "llama-so", {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                                                      "name": "llama"}})
        kube.put_workload("deployments", "llm", "llama", replicas=3, status_replicas=3, ready=3)
        # cold starts of 100, 200, 300 s (created at :00, ready 100/200/300 s later), and one not of this target
        kube.pods = [timed_pod(f"llama-{i}", "2025-06-01T10:00:00Z", "2025-06-01T10:00:05Z",
                               "2025-06-01T10:00:40Z", f"2025-06-01T10:0{i}:{40:02d}Z") for i in (1, 2, 3)]
        for p, ready in zip(kube.pods, ("10:01:40", "10:03:20", "10:05:00"), strict=True):
            p["status"]["conditions"][1]["lastTransitionTime"] = f"2025-06-01T{ready}Z"
        other = timed_pod("web-1", "2025-06-01T10:00:00Z", "2025-06-01T10:00:01Z", "2025-06-01T10:00:02Z",
                          "2025-06-01T10:00:03Z")
        other["metadata"]["labels"] = {"app": "web"}
        kube.pods.append(other)
        kube.objects["/api/v1/namespaces/llm/events"] = {"kind": "EventList", "items": [
            pulled("llama-1", "2025-06-01T10:00:35Z")]}
        reader = WorkloadReader(KubeClient(KubeConfig(base_url=kube.url, token_path=str(token), ca_path=None)),
                                on_pods=lambda ns, name, pods: tracker.observe(ns, "llama", pods))
        try:
            reader.track("llm", "llama-so")
            reader.refresh_once()
            reader.refresh_once()  # the same pods again: measured once
        finally:
            reader.stop()
        lists = [r for r in kube.requests if r.path in ("/api/v1/namespaces/llm/pods", "/api/v1/namespaces/llm/events")]
        assert lists[0].query == {"labelSelector": ["app=llama"], "limit": ["500"]}
        assert lists[1].query == {"fieldSelector": ["involvedObject.kind=Pod,reason=Pulled"]}
    # p90 of (100, 200, 300) by nearest rank: the 3rd = 300 s
    assert tracker.p90("llm", "llama") == 300.0
    h = tracker.histogram
    assert h.labels("llm", "llama", "cold_start")._sum.get() == 600.0
    assert h.labels("llm", "llama", "image_pulled")._sum.get() == 30.0  # llama-1 only: 10:00:05 -> 10:00:35
    assert h.labels("llm", "llama", "scheduled")._sum.get() == 15.0
    decide = fake_decide(1)
    levers = LeverDecide(decide, phases=tracker)
    levers(History(), parse_metadata({"model": "llama"}), PolicyState(), WorkloadState(1, 1), 0.0)
    levers(History(), parse_metadata({"model": "llama", "coldStart": "45s"}), PolicyState(), WorkloadState(1, 1), 0.0)
    assert decide.seen == [300.0, 45.0]  # type: ignore[attr-defined]
