"""A scaler pod killed (SIGKILL) while KEDA holds StreamIsActive streams on it.

Two `keda-llm scaler` processes are the two peer pods (each lists the other with --peers), behind a
loopback ClusterIP Service (tests/faults/keda_client.py). KEDA holds one stream per `external-push`
trigger through the Service, all on pod A. Then:

- `chat` is activated on A before the kill (A pushes, and relays to B);
- A is killed with SIGKILL: no graceful stop, the streams just break;
- `code` is activated on B while KEDA waits out its backoff, when no pod holds a stream for it;
- KEDA reconnects through the Service, which now reaches B only;
- A comes back (the Deployment restarts it) and `idle` is activated on A: A relays it to B, which
  holds the stream now.

Every activation must reach KEDA as a `true` on the stream (nothing lost), and no stream may ever carry
a `false` (KEDA before v2.18 deactivated the workload on it).
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from httpstub import free_port
from keda_client import PushHolder, Service
from prometheus_server import BodyServer
from scaler_harness import get, metric_value, post

from keda_llm.scaler.externalscaler import externalscaler_pb2 as pb
from keda_llm.scaler.externalscaler import externalscaler_pb2_grpc as pb_grpc

NS = "llm"


class ScalerProcess:
    """`keda-llm scaler` as a subprocess on fixed loopback ports; stderr drained on a thread."""

    def __init__(self, grpc_port: int, http_port: int, peer_http_port: int, exporters: str) -> None:
        self.grpc_port, self.http_port = grpc_port, http_port
        self.http = f"http://127.0.0.1:{http_port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "keda_llm.cli", "scaler", "--no-kube", "--exporters", exporters,
             "--grpc-address", f"127.0.0.1:{grpc_port}", "--http-address", f"127.0.0.1:{http_port}",
             "--peers", f"127.0.0.1:{peer_http_port}", "--grace", "0.5"],
            stderr=subprocess.PIPE, text=True)
        self.log: list[str] = []
        self._serving = threading.Event()
        threading.Thread(target=self._drain, daemon=True).start()
        if not self._serving.wait(30):
            self.kill()
            raise AssertionError("scaler never said it was serving:\n" + "".join(self.log))

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)
            if re.search(r"scaler serving gRPC on :\d+", line):
                self._serving.set()

    def streams_open(self) -> float | None:
        status, text = get(self.http + "/metrics")
        assert status == 200
        return metric_value(text, "keda_llm_scaler_streams_open")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def trigger(name: str) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name=name, namespace=NS, scalerMetadata={
        "scalerAddress": "keda-llm-scaler.keda-llm:9090", "model": f"{name}-model", "scaleToZero": "true"})


def wait_until(what: str, check: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def two_pods() -> Iterator[dict[str, object]]:
    # The exporter answers and lists no engine (every model at zero): no model has a replica in sight, so each
    # ScaledObject is idle at zero and only an activation makes it active. (An exporter that does not answer
    # is missing data, not idleness: UNAVAILABLE, tests/scaler/test_zero_without_data.py.)
    exporter = BodyServer('llm_exporter_targets{node="gpu-1",state="all"} 0\n'
                          'llm_exporter_targets{node="gpu-1",state="up"} 0\n')
    exporters = exporter.address
    ports = {k: free_port() for k in ("a_grpc", "a_http", "b_grpc", "b_http")}
    a = ScalerProcess(ports["a_grpc"], ports["a_http"], ports["b_http"], exporters)
    b = ScalerProcess(ports["b_grpc"], ports["b_http"], ports["a_http"], exporters)
    pods: dict[str, object] = {"a": a, "b": b, "ports": ports, "exporters": exporters}
    try:
        yield pods
    finally:
        for key in ("a", "b", "a2"):
            proc = pods.get(key)
            if isinstance(proc, ScalerProcess):
                proc.kill()
        exporter.close()


def test_keda_reconnects_to_the_peer_and_no_activation_is_lost_nor_any_false_pushed(
        two_pods: dict[str, object]) -> None:
    a, b, ports = two_pods["a"], two_pods["b"], two_pods["ports"]
    assert isinstance(a, ScalerProcess) and isinstance(b, ScalerProcess) and isinstance(ports, dict)
    service = Service([("127.0.0.1", a.grpc_port), ("127.0.0.1", b.grpc_port)])  # pins new connections to A
    names = ("chat", "code", "idle")
    keda = PushHolder(service.address, [trigger(n) for n in names])
    try:
        wait_until("KEDA's three streams on A", lambda: a.streams_open() == 3)
        assert b.streams_open() == 0
        assert all(keda.logs[n].messages == [] for n in names)  # idle at zero: nothing pushed on open

        # `chat` activated on A: pushed at once on A's stream, and relayed to B.
        status, body = post(f"{a.http}/v1/activate/{NS}/chat")
        assert status == 200 and body["streams"] == 1
        assert body["peers"] == {f"127.0.0.1:{ports['b_http']}": "ok"}
        keda.wait("chat", lambda log: log.messages == [True])

        a.kill()  # SIGKILL: the streams break, no NOT_SERVING, no drain
        for n in names:
            keda.wait(n, lambda log: log.ends == ["UNAVAILABLE"])
        # While KEDA waits out its 2 s backoff no pod holds a stream for `code`; it is activated on B
        # (the gateway's POST goes through the Service's HTTP port, which now reaches B only).
        status, body = post(f"{b.http}/v1/activate/{NS}/code")
        assert status == 200 and body["streams"] == 0
        assert body["peers"][f"127.0.0.1:{ports['a_http']}"].startswith("error: ")  # A is gone: B still accepts

        # KEDA reconnects through the Service: to B. B answers each stream's first message from what it
        # knows: `chat` (relayed by A before it died) and `code` (activated on B) are active: `true` at once.
        wait_until("KEDA's streams on B", lambda: b.streams_open() == 3, timeout=15)
        keda.wait("chat", lambda log: log.messages == [True, True])
        keda.wait("code", lambda log: log.messages == [True])
        assert keda.logs["idle"].messages == []
        assert all(keda.logs[n].opened == 2 for n in names)

        # The polled path through the Service agrees (KEDA's next poll, the HPA's GetMetrics): the
        # activations hold both awake at 1 replica; `idle` stays at 0. Until B's first collection for these
        # ScaledObjects it has no data (UNAVAILABLE: KEDA holds); KEDA polls again, and so does this.
        with grpc.insecure_channel(service.address) as channel:
            client = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]

            def collected() -> bool:
                try:
                    client.IsActive(trigger("idle"), timeout=5)
                    return True
                except grpc.RpcError as err:
                    assert err.code() == grpc.StatusCode.UNAVAILABLE, err
                    return False

            wait_until("B's first collection", collected, timeout=15)
            for name, active in (("chat", True), ("code", True), ("idle", False)):
                so = trigger(name)
                assert client.IsActive(so, timeout=5).result is active, name
                metric = client.GetMetricSpec(so, timeout=5).metricSpecs[0].metricName
                value = client.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=so, metricName=metric), timeout=5)
                assert value.metricValues[0].metricValue == (1 if active else 0), name

        # A restarts on its ports and `idle` is activated there: A relays to B, B pushes on KEDA's stream.
        a2 = ScalerProcess(ports["a_grpc"], ports["a_http"], ports["b_http"], str(two_pods["exporters"]))
        two_pods["a2"] = a2
        status, body = post(f"{a2.http}/v1/activate/{NS}/idle")
        assert status == 200 and body["streams"] == 0
        assert body["peers"] == {f"127.0.0.1:{ports['b_http']}": "ok"}
        keda.wait("idle", lambda log: log.messages == [True])
        assert a2.streams_open() == 0 and b.streams_open() == 3  # the streams stayed where they were

        # Nothing lost, nothing false: every activation reached KEDA as `true`, and only as `true`.
        time.sleep(0.3)  # a late message would show here
        seen = {n: keda.logs[n].messages for n in names}
        assert seen == {"chat": [True, True], "code": [True], "idle": [True]}
        assert all(keda.logs[n].ends == ["UNAVAILABLE"] for n in names)  # B never ended a stream
    finally:
        keda.close()
        service.close()
