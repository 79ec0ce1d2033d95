"""Kubernetes discovery: the pure PodList -> targets step, and the client against a fake API server."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from conftest import engine_body
from fakeengine import FakeEngine
from fakekube import FakeKube, pod

from keda_llm.exporter.collect import Collector
from keda_llm.exporter.config import KubernetesConfig, parse_config
from keda_llm.exporter.discovery import Discovery, DiscoveryError, KubeClient, pods_to_targets
from keda_llm.exporter.engines import normalize
from keda_llm.exporter.model import Target
from keda_llm.exporter.render import render

ON = {"keda-llm.io/scrape": "true"}
T0 = "2025-06-01T10:00:00Z"
T0_UNIX = datetime(2025, 6, 1, 10, 0, 0, tzinfo=timezone.utc).timestamp()


def podlist(*pods: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": list(pods)}


def test_opted_in_pod_becomes_a_target_with_its_start_time() -> None:
    p = pod("vllm-7d9f-abcde", namespace="llm", ip="10.1.2.3", started_at={"engine": T0},
            annotations={**ON, "keda-llm.io/model": "meta-llama/Llama-3.1-8B-Instruct",
                         "keda-llm.io/engine": "vllm", "keda-llm.io/role": "prefill",
                         "keda-llm.io/max-running": "128"})
    assert pods_to_targets(podlist(p), "node-a") == [Target(
        url="http://10.1.2.3:8000/metrics", namespace="llm", pod="vllm-7d9f-abcde", node="node-a",
        model="meta-llama/Llama-3.1-8B-Instruct", engine="vllm", role="prefill", max_running=128.0,
        container_start=T0_UNIX)]


@pytest.mark.parametrize(("annotations", "containers", "url"), [
    # no port annotation: the first containerPort of the first container
    ({}, None, "http://10.0.0.1:8000/metrics"),
    ({"keda-llm.io/port": "9000", "keda-llm.io/path": "stats/prom"}, None, "http://10.0.0.1:9000/stats/prom"),
    ({"keda-llm.io/port": "metrics"},
     [{"name": "engine",
       "ports": [{"name": "http", "containerPort": 8000}, {"name": "metrics", "containerPort": 8002}]}],
     "http://10.0.0.1:8002/metrics"),
    ({"keda-llm.io/scheme": "https"}, None, "https://10.0.0.1:8000/metrics"),
])
def test_port_path_and_scheme(annotations: dict[str, str], containers: list[dict[str, Any]] | None, url: str) -> None:
    p = pod("e-1", annotations={**ON, **annotations}, containers=containers)
    assert [t.url for t in pods_to_targets(podlist(p), "node-a")] == [url]


def test_cold_start_is_read_from_the_serving_container() -> None:
    containers = [
        {"name": "istio-proxy", "ports": [{"containerPort": 15090}]},
        {"name": "engine", "ports": [{"containerPort": 8000}]},
    ]
    started = {"istio-proxy": "2025-06-01T09:59:00Z", "engine": T0}
    by_port = pod("e-1", annotations={**ON, "keda-llm.io/port": "8000"}, containers=containers, started_at=started)
    by_name = pod("e-2", annotations={**ON, "keda-llm.io/container": "engine", "keda-llm.io/port": "8000"},
                  containers=containers, started_at=started)
    targets = pods_to_targets(podlist(by_port, by_name), "node-a")
    assert [(t.pod, t.url, t.container_start) for t in targets] == [
        ("e-1", "http://10.0.0.1:8000/metrics", T0_UNIX), ("e-2", "http://10.0.0.1:8000/metrics", T0_UNIX)]


@pytest.mark.parametrize("p", [
    pod("no-annotation"),
    pod("opted-out", annotations={"keda-llm.io/scrape": "false"}),
    pod("pending", annotations=ON, phase="Pending"),
    pod("no-ip", annotations=ON, ip=None),
    pod("no-port", annotations=ON, containers=[{"name": "engine"}]),
    pod("bad-container", annotations={**ON, "keda-llm.io/container": "nope"}),
])
def test_pods_that_cannot_be_scraped_are_left_out(p: dict[str, Any]) -> None:
    assert pods_to_targets(podlist(p), "node-a") == []


def test_not_yet_running_container_has_no_start_time() -> None:
    (t,) = pods_to_targets(podlist(pod("e-1", annotations=ON, started_at={})), "node-a")
    assert t.container_start is None


def test_bad_annotation_values_are_ignored_not_fatal() -> None:
    p = pod("e-1", annotations={**ON, "keda-llm.io/engine": "ollama", "keda-llm.io/role": "x",
                                "keda-llm.io/max-running": "many"})
    (t,) = pods_to_targets(podlist(p), "node-a")
    assert (t.engine, t.role, t.max_running) == (None, None, None)


def test_ipv6_pod_ip_is_bracketed() -> None:
    (t,) = pods_to_targets(podlist(pod("e-1", annotations=ON, ip="fd00::5")), "node-a")
    assert t.url == "http://[fd00::5]:8000/metrics"


def test_not_a_podlist_is_refused() -> None:
    with pytest.raises(DiscoveryError, match="PodList"):
        pods_to_targets({"kind": "Status", "code": 403}, "node-a")


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("test-token\n")
    return path


def client(kube: FakeKube, token_file: Path) -> KubeClient:
    return KubeClient.from_config(KubernetesConfig(enabled=True, api_server=kube.url, token_file=str(token_file),
                                                   ca_file=str(token_file.parent / "ca.crt")))


def test_lists_this_nodes_pods_with_the_bearer_token(token_file: Path) -> None:
    with FakeKube(token="test-token") as kube:
        kube.pods = [pod("here-1", node="node-a", annotations=ON, ip="10.0.0.1", started_at={"engine": T0}),
                     pod("elsewhere-1", node="node-b", annotations=ON, ip="10.0.0.2")]
        targets = pods_to_targets(client(kube, token_file).list_pods("node-a"), "node-a")
        (request,) = kube.requests
    assert [t.pod for t in targets] == ["here-1"]
    assert request.path == "/api/v1/pods"
    assert request.query == {"fieldSelector": ["spec.nodeName=node-a"], "resourceVersion": ["0"]}
    assert request.headers["Authorization"] == "Bearer test-token"


def test_rotated_token_is_read_again(token_file: Path) -> None:
    with FakeKube(token="new-token") as kube:
        c = client(kube, token_file)
        with pytest.raises(DiscoveryError, match="HTTP 401"):
            c.list_pods("node-a")
        token_file.write_text("new-token")  # the kubelet rotates the projected token in place
        assert c.list_pods("node-a")["kind"] == "PodList"


def test_in_cluster_address_from_the_service_env() -> None:
    cfg = KubernetesConfig(enabled=True)
    c = KubeClient.from_config(cfg, env={"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"})
    assert c.api_server == "https://10.96.0.1:443"
    assert (c.token_file, c.ca_file) == ("/var/run/secrets/kubernetes.io/serviceaccount/token",
                                         "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")
    v6 = KubeClient.from_config(cfg, env={"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"})
    assert v6.api_server == "https://[fd00::1]:6443"
    with pytest.raises(DiscoveryError, match="KUBERNETES_SERVICE_HOST"):
        KubeClient.from_config(cfg, env={})


def test_missing_token_is_a_clear_error(tmp_path: Path) -> None:
    with FakeKube() as kube:
        c = KubeClient(kube.url, str(tmp_path / "absent"), "", timeout=2.0)
        with pytest.raises(DiscoveryError, match="service-account token"):
            c.list_pods("node-a")


def test_discovery_keeps_the_last_good_list_when_the_api_fails(token_file: Path) -> None:
    cfg = parse_config({"node_name": "node-a", "targets": ["http://127.0.0.1:1/metrics"]}, env={})
    with FakeKube(token="test-token") as kube:
        kube.pods = [pod("e-1", annotations=ON, ip="10.0.0.1")]
        d = Discovery(cfg, client(kube, token_file).list_pods)
        d.refresh()
        assert [t.url for t in d.targets()] == ["http://127.0.0.1:1/metrics", "http://10.0.0.1:8000/metrics"]
        kube.fail_with = 500
        d.refresh()
        assert [t.url for t in d.targets()] == ["http://127.0.0.1:1/metrics", "http://10.0.0.1:8000/metrics"]
        assert d.errors == 1
        assert "HTTP 500" in d.last_error
        kube.fail_with = None
        kube.pods = []  # the pod went away
        d.refresh()
        assert [t.url for t in d.targets()] == ["http://127.0.0.1:1/metrics"]
        assert d.errors == 1


def test_discovered_pod_is_scraped_and_its_cold_start_measured(token_file: Path) -> None:
    engine = FakeEngine(engine_body("vllm-0.32.0-cpu-load.prom"))
    engine.mode = "status"  # still loading the model: 500
    now = [T0_UNIX + 30.0]
    try:
        with FakeKube(token="test-token") as kube:
            kube.pods = [pod("vllm-abc-1", namespace="llm", node="node-a", ip="127.0.0.1", started_at={"engine": T0},
                             annotations={**ON, "keda-llm.io/port": str(engine.port)})]
            cfg = parse_config({"node_name": "node-a", "gpu": {"nvml": False}}, env={})
            discovery = Discovery(cfg, client(kube, token_file).list_pods)
            collector = Collector(cfg, discovery, normalize, render, clock=lambda: now[0])
            discovery.refresh()
            (first,) = collector.run_cycle().targets
            engine.mode = "serve"
            now[0] = T0_UNIX + 95.5
            (second,) = collector.run_cycle().targets
            collector.stop()
    finally:
        engine.stop()
    assert (first.target.namespace, first.target.pod, first.up) == ("llm", "vllm-abc-1", False)
    assert (second.up, second.startup_seconds) == (True, 95.5)  # container start to first success
    text = collector.exposition().decode()
    assert ('llm_engine_startup_seconds{model="smollm2",engine="vllm",role="unified",namespace="llm",'
            'pod="vllm-abc-1",node="node-a"} 95.5\n') in text


@pytest.mark.parametrize("annotations", [
    {"keda-llm.io/port": "99999"}, {"keda-llm.io/port": "0"}, {"keda-llm.io/port": "²"},
    {"keda-llm.io/port": "٨٠٠٠"}, {"keda-llm.io/port": "9" * 5000},
    {"keda-llm.io/scheme": "ftp"}, {"keda-llm.io/scheme": ""}, {"keda-llm.io/scheme": "http://evil.com/#"},
])
def test_an_annotation_that_makes_no_scrapable_url_skips_the_pod(annotations: dict[str, str]) -> None:
    """Found by a review: each gave a URL no scrape could reach, or one pointing at another host, silently."""
    assert pods_to_targets(podlist(pod("e-1", annotations={**ON, **annotations})), "node-a") == []


def test_an_upper_case_scheme_reads_as_the_scheme() -> None:
    (t,) = pods_to_targets(podlist(pod("e-1", annotations={**ON, "keda-llm.io/scheme": "HTTPS"})), "node-a")
    assert t.url == "https://10.0.0.1:8000/metrics"


@pytest.mark.parametrize("value", ["nan", "inf", "-5", "0", "1e999"])
def test_a_max_running_that_is_not_a_positive_number_is_ignored(value: str) -> None:
    (t,) = pods_to_targets(podlist(pod("e-1", annotations={**ON, "keda-llm.io/max-running": value})), "node-a")
    assert t.max_running is None


def test_one_malformed_pod_costs_itself_not_the_node() -> None:
    """A pod the API would not serve (a bad startedAt, spec null, an annotation of the wrong type) made the whole
    listing fail, and the node kept no target at all."""
    bad_time = pod("bad-time", annotations=ON, started_at={"engine": "not a time"})
    no_spec = {**pod("no-spec", annotations=ON), "spec": None}
    typed = pod("typed", annotations={**ON, "keda-llm.io/path": 7})  # type: ignore[dict-item]
    good = pod("good", annotations=ON)
    targets = pods_to_targets(podlist(bad_time, no_spec, typed, good), "node-a")
    assert "good" in [t.pod for t in targets]


def test_a_pod_list_over_the_cap_is_refused_and_the_last_good_list_stands(token_file: Path) -> None:
    # before: the whole answer was read into memory, however large (a DaemonSet pod's memory limit is small)
    cfg = parse_config({"node_name": "node-a"}, env={})
    with FakeKube(token="test-token") as kube:
        kube.pods = [pod("e-1", annotations=ON, ip="10.0.0.1")]
        small = KubeClient(kube.url, str(token_file), "", timeout=5.0, max_bytes=100_000)
        d = Discovery(cfg, small.list_pods)
        d.refresh()
        assert [t.pod for t in d.targets()] == ["e-1"]
        kube.pods = [pod(f"e-{i}", annotations={**ON, "pad": "x" * 2000}, ip="10.0.0.1") for i in range(100)]
        with pytest.raises(DiscoveryError, match="over 100000 bytes"):
            small.list_pods("node-a")
        d.refresh()
    assert [t.pod for t in d.targets()] == ["e-1"]
    assert d.errors == 1 and "over 100000 bytes" in d.last_error


def test_a_pod_list_nested_too_deep_is_a_discovery_error(token_file: Path) -> None:
    from httpstub import HttpStub, Response

    deep = b"[" * 100_000 + b"]" * 100_000
    with HttpStub(lambda req: Response(200, deep, "application/json")) as stub:
        c = KubeClient(stub.url, str(token_file), "", timeout=5.0)
        with pytest.raises(DiscoveryError, match="nests too deep"):
            c.list_pods("node-a")
