"""The Kubernetes API down or hanging, under the scaler (scaler/kube.py WorkloadReader).

tests/fakekube.py made to hang: every request is accepted and read, then answered only when the test lets
it go (an API server stuck on etcd). The reader's read must end at its timeout and keep the last good
values; KEDA's calls never wait on the API (they are answered from memory); and an activation on unusable
data answers the count the API gave before it hung, never the bare floor of 1.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from fakekube import FakeKube
from httpstub import Request as HttpRequest
from httpstub import Response
from scaler_harness import FakeClock, FakeHistory, ServerThread, make_service, post, ref, stub

from keda_llm.scaler.externalscaler import externalscaler_pb2 as pb
from keda_llm.scaler.kube import KubeClient, KubeConfig, WorkloadReader

NS, SO, MODEL = "llm", "chat", "llama"
TIMEOUT_S = 0.5
SPEC = {"scaleTargetRef": {"name": "llama-8b"}, "minReplicaCount": 0, "maxReplicaCount": 20,
        "triggers": [{"type": "external-push", "metadata": {"scalerAddress": "s:9090", "model": MODEL}}]}


class HangingKube(FakeKube):
    """FakeKube whose answers wait while `hang` is set (until released or closed)."""

    def __init__(self, token: str) -> None:
        self.hang = threading.Event()
        self.released = threading.Event()
        super().__init__(token=token)

    def _answer(self, req: HttpRequest) -> Response:
        if self.hang.is_set():
            self.released.wait(30)
        return super()._answer(req)

    def close(self) -> None:
        self.released.set()
        super().close()


@pytest.fixture
def kube() -> Iterator[HangingKube]:
    server = HangingKube(token="sa-token")
    server.put_scaled_object(NS, SO, SPEC)
    server.put_workload("deployments", NS, "llama-8b", replicas=12, status_replicas=12, ready=12)
    yield server
    server.close()


def test_a_hanging_api_times_out_keeps_the_last_count_and_never_delays_keda(kube: HangingKube, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("sa-token\n")
    clock = FakeClock()
    reader = WorkloadReader(KubeClient(KubeConfig(base_url=kube.url, token_path=str(token), ca_path=None,
                                                  timeout_s=TIMEOUT_S)), clock=clock)
    # No usable metrics (every source down): only the Kubernetes API's count can stand in.
    service = make_service({(NS, MODEL): FakeHistory(desired=None)}, clock,
                           workloads=lambda key: reader.state(key.namespace, key.name))
    server = ServerThread(service)
    try:
        assert reader.read(NS, SO).state is not None  # a good read: 12 replicas
        kube.hang.set()
        t0 = time.monotonic()
        hung = reader.read(NS, SO)
        assert time.monotonic() - t0 < TIMEOUT_S + 1.0  # bounded by the client's timeout
        assert hung.error is not None and "Timeout" in hung.error and hung.errors == 1
        assert hung.state is not None and hung.state.current_replicas == 12  # the last good value stays

        so = ref(SO, namespace=NS, model=MODEL, scaleToZero="true")
        with grpc.insecure_channel(server.target) as channel:
            client = stub(channel)
            name = client.GetMetricSpec(so, timeout=3).metricSpecs[0].metricName
            request = pb.GetMetricsRequest(scaledObjectRef=so, metricName=name)
            background = threading.Thread(target=reader.refresh_once)  # a refresh stuck on the API meanwhile
            background.start()
            t0 = time.monotonic()
            with pytest.raises(grpc.RpcError) as err:
                client.GetMetrics(request, timeout=3)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # no data: KEDA and the HPA hold
            assert time.monotonic() - t0 < 0.5  # answered from memory, not after the API
            assert post(f"{server.http}/v1/activate/{NS}/{SO}")[0] == 200
            got = client.GetMetrics(request, timeout=3).metricValues[0]
            assert (got.metricValue, got.metricValueFloat) == (12, 12.0)  # the API's last count, not 1
            assert client.IsActive(so, timeout=3).result is True
            background.join(10)
        kube.released.set()
        kube.hang.clear()
        kube.put_workload("deployments", NS, "llama-8b", replicas=14, status_replicas=14, ready=14)
        back = reader.read(NS, SO)
        assert back.error is None and back.state is not None and back.state.current_replicas == 14
    finally:
        server.stop()
        reader.stop()
