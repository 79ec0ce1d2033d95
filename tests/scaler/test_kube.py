"""scaler/kube.py against a fake API server on loopback speaking the real JSON (tests/fakekube.py)."""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakekube import FakeKube
from httpstub import HttpStub, Response

from keda_llm.scaler.kube import (
    KubeClient,
    KubeConfig,
    KubeError,
    Scale,
    ScaleTarget,
    WorkloadReader,
    scale_target_from_json,
    scaled_object_from_json,
)
from keda_llm.scaler.model import WorkloadState
from keda_llm.scaler.scaledobject import Behavior, Fallback, ScalingPolicy, ScalingRules

NS, SO = "llm", "llama"
SO_PATH = f"/apis/keda.sh/v1alpha1/namespaces/{NS}/scaledobjects/{SO}"
DEPLOY_PATH = f"/apis/apps/v1/namespaces/{NS}/deployments/llama-8b"
BEHAVIOR = {"scaleUp": {"stabilizationWindowSeconds": 0, "tolerance": "0",
                        "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15}]},
            "scaleDown": {"stabilizationWindowSeconds": 60,
                          "policies": [{"type": "Percent", "value": 50, "periodSeconds": 30}]}}
SPEC = {
    "scaleTargetRef": {"name": "llama-8b"},
    "pollingInterval": 10,
    "cooldownPeriod": 120,
    "minReplicaCount": 0,
    "maxReplicaCount": 8,
    "advanced": {"horizontalPodAutoscalerConfig": {"behavior": BEHAVIOR}},
    "fallback": {"failureThreshold": 3, "replicas": 2},
    "triggers": [{"type": "external-push", "metadata": {"scalerAddress": "keda-llm-scaler.keda-llm:9090",
                                                        "model": "meta-llama/Llama-3.1-8B-Instruct"}}],
}


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("sa-token-1\n")
    return path


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    server = FakeKube(token="sa-token-1")
    server.put_scaled_object(NS, SO, SPEC)
    server.put_workload("deployments", NS, "llama-8b", replicas=3, status_replicas=3, ready=2)
    yield server
    server.close()


def reader(kube: FakeKube, token_file: Path, clock: Clock | None = None) -> WorkloadReader:
    config = KubeConfig(base_url=kube.url, token_path=str(token_file), ca_path=None, timeout_s=2.0)
    return WorkloadReader(KubeClient(config), clock=clock or Clock())


def test_reads_scaledobject_scale_and_readiness_with_the_token(kube: FakeKube, token_file: Path) -> None:
    r = reader(kube, token_file)
    try:
        reading = r.read(NS, SO)
        assert reading.state == WorkloadState(current_replicas=3, ready_replicas=2, min_replicas=0, max_replicas=8,
                                              polling_interval_s=10.0, cooldown_period_s=120.0)
        so = reading.scaled_object
        assert so is not None
        assert reading.target == ScaleTarget(api_version="apps/v1", kind="Deployment", resource="deployments",
                                             name="llama-8b")
        assert (so.target_api_version, so.target_kind, so.target_name) == ("apps/v1", "Deployment", "llama-8b")
        assert so.behavior == Behavior(
            scale_up=ScalingRules(0, None, (ScalingPolicy("Pods", 4, 15),), 0.0),
            scale_down=ScalingRules(60, None, (ScalingPolicy("Percent", 50, 30),), None))
        assert so.triggers[0].is_push and so.triggers[0].metadata["model"] == "meta-llama/Llama-3.1-8B-Instruct"
        assert so.fallback == Fallback(failure_threshold=3, replicas=2, behavior="static")
        assert reading.scale == Scale(spec_replicas=3, status_replicas=3, selector="app=llama-8b")
        assert (reading.read_at, reading.error, reading.errors) == (1000.0, None, 0)
        assert kube.requests == [(SO_PATH, "Bearer sa-token-1"), (DEPLOY_PATH + "/scale", "Bearer sa-token-1"),
                                 (DEPLOY_PATH, "Bearer sa-token-1")]
        assert r.get(NS, SO) == reading and r.state(NS, SO) == reading.state
    finally:
        r.stop()


def test_statefulset_target_and_keda_defaults(kube: FakeKube, token_file: Path) -> None:
    kube.put_scaled_object(NS, "sts", {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "StatefulSet",
                                                          "name": "sglang"}, "triggers": []})
    kube.put_workload("statefulsets", NS, "sglang", replicas=0, status_replicas=0, ready=None)
    r = reader(kube, token_file)
    try:
        reading = r.read(NS, "sts")
        # KEDA's defaults: polling 30 s, cooldown 300 s, min 0, max 100; readyReplicas left out = 0
        assert reading.state == WorkloadState(current_replicas=0, ready_replicas=0, min_replicas=0, max_replicas=100,
                                              polling_interval_s=30.0, cooldown_period_s=300.0)
        assert reading.scaled_object is not None and reading.scaled_object.behavior is None
        assert reading.scaled_object.fallback is None
        assert kube.paths()[1:] == [f"/apis/apps/v1/namespaces/{NS}/statefulsets/sglang/scale",
                                    f"/apis/apps/v1/namespaces/{NS}/statefulsets/sglang"]
    finally:
        r.stop()


def test_other_kinds_use_the_status_gvkr_or_the_kind_table() -> None:
    doc = {"metadata": {"name": "x", "namespace": "ns"},
           "spec": {"scaleTargetRef": {"apiVersion": "example.com/v1", "kind": "InferencePool", "name": "pool"}},
           "status": {"scaleTargetGVKR": {"group": "example.com", "version": "v1", "kind": "InferencePool",
                                          "resource": "inferencepools"}}}
    so = scaled_object_from_json(doc)
    assert scale_target_from_json(doc, so).path("ns") == "/apis/example.com/v1/namespaces/ns/inferencepools/pool"
    doc_lws = {"metadata": {"name": "x", "namespace": "ns"}, "spec": {"scaleTargetRef": {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "lws"}}}
    assert scale_target_from_json(doc_lws).resource == "leaderworkersets"
    doc_unknown = {"metadata": {"name": "x", "namespace": "ns"},
                   "spec": {"scaleTargetRef": {"apiVersion": "example.com/v1", "kind": "Thing", "name": "t"}}}
    with pytest.raises(KubeError, match=r"no resource known for scaleTargetRef\.kind 'Thing'"):
        scale_target_from_json(doc_unknown)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"scaleTargetRef": {}}, "ScaledObject ns/x spec.scaleTargetRef.name is None, expected a name"),
        ({"scaleTargetRef": {"name": "d"}, "maxReplicaCount": "8"}, "spec.maxReplicaCount is '8', expected an integer"),
        ({"scaleTargetRef": {"name": "d"}, "fallback": {"replicas": 1}},
         "spec.fallback.failureThreshold is None, expected an integer"),
        ({"scaleTargetRef": "d"}, "spec.scaleTargetRef is 'd', expected an object"),
    ],
)
def test_malformed_scaledobject_names_the_field(spec: dict[str, object], message: str) -> None:
    with pytest.raises(KubeError, match=message.replace(".", r"\.").replace("(", r"\(")):
        scaled_object_from_json({"metadata": {"name": "x", "namespace": "ns"}, "spec": spec})


def test_api_errors_keep_the_last_known_value_with_its_age(kube: FakeKube, token_file: Path) -> None:
    clock = Clock()
    r = reader(kube, token_file, clock)
    try:
        good = r.read(NS, SO)
        kube.fail[DEPLOY_PATH + "/scale"] = 500
        clock.t = 1030.0
        after = r.read(NS, SO)
        assert after.state == good.state and after.read_at == 1000.0 and after.age(clock.t) == 30.0
        assert after.errors == 1
        assert after.error == (f"GET {DEPLOY_PATH}/scale: HTTP 500: etcdserver: request timed out "
                               f"({DEPLOY_PATH}/scale)")
        del kube.fail[DEPLOY_PATH + "/scale"]
        kube.put_workload("deployments", NS, "llama-8b", replicas=4, status_replicas=4, ready=4)
        clock.t = 1045.0
        fresh = r.read(NS, SO)
        assert fresh.state is not None and (fresh.state.current_replicas, fresh.state.ready_replicas) == (4, 4)
        assert (fresh.read_at, fresh.error, fresh.errors) == (1045.0, None, 1)
    finally:
        r.stop()


def test_missing_scaledobject_and_wrong_token_are_errors_not_crashes(kube: FakeKube, token_file: Path) -> None:
    r = reader(kube, token_file)
    try:
        missing = r.read(NS, "nope")
        assert missing.state is None and missing.read_at is None
        assert missing.error == (f"GET /apis/keda.sh/v1alpha1/namespaces/{NS}/scaledobjects/nope: HTTP 404: "
                                 'scaledobjects "nope" not found')
        kube.token = "rotated"
        denied = r.read(NS, SO)
        assert denied.error is not None and "HTTP 401: Unauthorized" in denied.error
    finally:
        r.stop()


def test_api_server_down_is_an_error_state(token_file: Path) -> None:
    server = FakeKube()
    url = server.url
    server.close()
    r = WorkloadReader(KubeClient(KubeConfig(base_url=url, token_path=str(token_file), ca_path=None, timeout_s=2.0)))
    try:
        reading = r.read(NS, SO)
        assert reading.state is None and reading.errors == 1
        assert reading.error is not None and reading.error.startswith(f"GET {SO_PATH}: ConnectionError")
    finally:
        r.stop()


def test_an_answer_over_the_bound_is_refused_unread_and_the_last_value_stands(kube: FakeKube,
                                                                            token_file: Path) -> None:
    # a misbehaving server or proxy answering megabytes must not hold the scaler's memory hostage: the
    # client reads at most max_bytes (+ one chunk) and keeps the last good reading
    config = KubeConfig(base_url=kube.url, token_path=str(token_file), ca_path=None, timeout_s=2.0)
    r = WorkloadReader(KubeClient(config, max_bytes=16 << 10), clock=Clock())
    try:
        good = r.read(NS, SO)
        assert good.error is None and good.state is not None
        kube.put_scaled_object(NS, SO, {**SPEC, "note": "x" * (64 << 10)})  # 64 KiB: past the 16 KiB bound
        after = r.read(NS, SO)
        assert after.error == f"GET {SO_PATH}: the answer is over 16384 bytes; not read (the last good value stands)"
        assert after.state == good.state and after.errors == 1
        # an error answer is bounded the same way
        kube.fail[SO_PATH] = 500
        assert r.read(NS, SO).error == f"GET {SO_PATH}: HTTP 500: etcdserver: request timed out ({SO_PATH})"
    finally:
        r.stop()


@pytest.mark.parametrize("body, length, says", [
    (b"[" * 200_000, None, "the answer nests too deep to be an API object"),  # past the JSON parser's depth
    (b'{"kind": "ScaledObject", "spec": {', 4096, "ChunkedEncodingError"),  # cut short of its Content-Length
    (b"<html>proxy error</html>", None, "answer is not JSON: '<html>proxy error</html>'"),
    (b"[1, 2]", None, "answer is not a JSON object"),
])
def test_a_malformed_answer_is_a_kube_error_naming_what_is_wrong(body: bytes, length: int | None, says: str,
                                                                  token_file: Path) -> None:
    stub = HttpStub(lambda req: Response(200, [body] if length else body, "application/json", length=length))
    client = KubeClient(KubeConfig(base_url=stub.url, token_path=str(token_file), ca_path=None, timeout_s=2.0))
    try:
        with pytest.raises(KubeError) as err:
            client.get(SO_PATH)
        assert says in str(err.value) and str(err.value).startswith(f"GET {SO_PATH}: ")
    finally:
        client.close()
        stub.close()


def test_missing_token_file_is_an_error_state(kube: FakeKube, tmp_path: Path) -> None:
    r = reader(kube, tmp_path / "no-token")
    try:
        reading = r.read(NS, SO)
        assert reading.error is not None and reading.error.startswith(f"service-account token {tmp_path}/no-token")
        assert kube.requests == []
    finally:
        r.stop()


def test_background_refresh_reads_tracked_scaledobjects(kube: FakeKube, token_file: Path) -> None:
    config = KubeConfig(base_url=kube.url, token_path=str(token_file), ca_path=None)
    r = WorkloadReader(KubeClient(config), refresh_s=0.05)
    r.track(NS, SO)
    assert r.get(NS, SO) is not None and r.state(NS, SO) is None  # tracked, not read yet
    done = threading.Event()
    original = r.read

    def read(namespace: str, name: str):  # type: ignore[no-untyped-def]
        result = original(namespace, name)
        done.set()
        return result

    r.read = read  # type: ignore[method-assign]
    r.start()
    try:
        assert done.wait(10)
    finally:
        r.stop()
    state = r.state(NS, SO)
    assert state is not None and state.current_replicas == 3
    r.untrack(NS, SO)
    assert r.get(NS, SO) is None


def test_in_cluster_config_from_the_environment() -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    config = KubeConfig.in_cluster(env, token_path="/t", ca_path="/c")
    assert config == KubeConfig(base_url="https://10.96.0.1:443", token_path="/t", ca_path="/c")
    v6 = KubeConfig.in_cluster({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"})
    assert v6.base_url == "https://[fd00::1]:6443"
    with pytest.raises(KubeError, match="not in a cluster"):
        KubeConfig.in_cluster({})


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = tmp_path / "apiserver.crt", tmp_path / "apiserver.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=kubernetes", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    return cert, key


def test_tls_with_the_service_account_ca(certificate: tuple[Path, Path], token_file: Path, tmp_path: Path) -> None:
    cert, key = certificate
    server = FakeKube(token="sa-token-1", tls=(cert, key))
    server.put_scaled_object(NS, SO, SPEC)
    server.put_workload("deployments", NS, "llama-8b", replicas=1, status_replicas=1, ready=1)
    trusted = WorkloadReader(KubeClient(KubeConfig(base_url=server.url, token_path=str(token_file),
                                                   ca_path=str(cert))))
    other_ca = tmp_path / "other-ca.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(tmp_path / "o.key"),
                    "-out", str(other_ca), "-days", "1", "-subj", "/CN=other"], check=True, capture_output=True)
    untrusted = WorkloadReader(KubeClient(KubeConfig(base_url=server.url, token_path=str(token_file),
                                                     ca_path=str(other_ca))))
    try:
        assert server.url.startswith("https://")
        reading = trusted.read(NS, SO)
        assert reading.error is None and reading.state is not None and reading.state.ready_replicas == 1
        refused = untrusted.read(NS, SO)
        assert refused.state is None and refused.error is not None and "SSLError" in refused.error
    finally:
        trusted.stop()
        untrusted.stop()
        server.close()
