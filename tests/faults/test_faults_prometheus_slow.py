"""Prometheus slow (hung): a REAL Prometheus, frozen with SIGSTOP, behind the scaler's `prometheus` source.

A stopped Prometheus still accepts connections (the kernel's backlog) and never answers: the slowest a
Prometheus can be. The source's queries must time out (bounded cycle), the scaler must keep answering KEDA
from memory at once with its last decision while the cycle hangs, hold with UNAVAILABLE once the data is
past staleAfter (never a lower count, never a zero), and follow the data again once Prometheus answers.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from pathlib import Path

import grpc
from prometheus_server import BodyServer, Job, running_prometheus
from scaler_harness import FakeClock, ServerThread, keda_poll, stub
from sources_bodies import HEADER, MODEL, NOW, pod_a, pod_b

from keda_llm.scaler.activation import ActivationBus
from keda_llm.scaler.decide import decide
from keda_llm.scaler.externalscaler import externalscaler_pb2 as pb
from keda_llm.scaler.service import HistoryStore, ScalerService
from keda_llm.scaler.sources.prometheus import PrometheusSource, signal_queries
from keda_llm.scaler.sources.promql import PrometheusClient

TIMEOUT_S = 0.5
WORKERS = 4  # PrometheusSource's default pool


def child_pid(port: int) -> int:
    """The pid of the Prometheus this test started (a child of this process listening on `port`)."""
    me = str(os.getpid())
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == me and f"127.0.0.1:{port}" in cmdline:
            return int(entry)
    raise AssertionError(f"no child Prometheus on port {port}")


def body(ts: float) -> str:
    return HEADER + pod_a(ts=ts - 1) + pod_b(ts=ts - 2)


def test_a_hung_prometheus_times_out_keda_is_answered_from_memory_then_held(tmp_path: Path) -> None:
    exporter = BodyServer(body(NOW))
    clock = FakeClock(NOW)
    so = pb.ScaledObjectRef(name="chat", namespace="llm", scalerMetadata={
        "scalerAddress": "keda-llm-scaler.keda-llm:9090", "model": MODEL, "policy": "concurrency",
        "targetConcurrency": "4", "mode": "reactive"})
    try:
        with running_prometheus(tmp_path / "prom", [Job("keda-llm-exporter", [exporter.address])]) as prom:
            prom.wait_for("count(llm_engine_up)", lambda r: len(r) == 1 and r[0]["value"][1] == "2")
            source = PrometheusSource(PrometheusClient(prom.url, timeout_s=TIMEOUT_S), clock=clock)
            store = HistoryStore()
            source.subscribe(store.ingest)
            source.watch("llm", MODEL)
            server = ServerThread(ScalerService(decide=decide, histories=store.get, bus=ActivationBus(clock=clock),
                                                clock=clock))
            try:
                with grpc.insecure_channel(server.target) as channel:
                    client = stub(channel)
                    assert source.collect_once() != []
                    # 7 + 2 + 3 + 0 = 12 requests against 4 per replica: 3 replicas.
                    assert keda_poll(client, so).values[0][1] == 3

                    port = int(prom.url.rsplit(":", 1)[1])
                    pid = child_pid(port)
                    os.kill(pid, signal.SIGSTOP)
                    try:
                        clock.now += 2.0
                        took: list[float] = []
                        got: list[object] = []

                        def collect() -> None:
                            t0 = time.monotonic()
                            got.append(source.collect_once())
                            took.append(time.monotonic() - t0)

                        cycle = threading.Thread(target=collect)
                        cycle.start()
                        time.sleep(0.1)
                        # While the cycle hangs on Prometheus, KEDA is answered at once from memory.
                        t0 = time.monotonic()
                        assert keda_poll(client, so, timeout=3).values[0][1] == 3
                        assert time.monotonic() - t0 < 0.5
                        cycle.join(30)
                        assert not cycle.is_alive()
                        # The cycle is bounded: every query times out, WORKERS at a time.
                        bound = math.ceil(len(signal_queries()) / WORKERS) * TIMEOUT_S
                        assert took[0] < bound + 1.0, (took, bound)
                        assert got == [[]]  # nothing published: no made-up zero
                        status = source.status()
                        assert not status.ok and set(status.errors) == {"timeout"}
                        assert keda_poll(client, so).values[0][1] == 3  # within staleAfter: the same answer

                        clock.now += 31.0  # past staleAfter (30 s) since the last sample: hold
                        try:
                            keda_poll(client, so)
                            raise AssertionError("expected UNAVAILABLE on stale data")
                        except grpc.RpcError as err:
                            assert err.code() == grpc.StatusCode.UNAVAILABLE
                            assert "staleAfter" in (err.details() or "")
                    finally:
                        os.kill(pid, signal.SIGCONT)

                    # Prometheus answers again (and has scraped the exporter's newer samples): follow the data.
                    exporter.set(body(clock.now))
                    prom.wait_for("max(llm_engine_last_success_timestamp_seconds)",
                                  lambda r: len(r) == 1 and float(r[0]["value"][1]) >= clock.now - 2)
                    clock.now += 1.0
                    assert source.collect_once() != []
                    assert keda_poll(client, so).values[0][1] == 3
            finally:
                server.stop()
                source.stop()
    finally:
        exporter.close()
