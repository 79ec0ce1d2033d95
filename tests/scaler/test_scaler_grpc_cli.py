"""`keda-llm scaler` as a process: serves, answers health, and exits 0 on SIGTERM after NOT_SERVING."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def test_scaler_command_serves_and_stops_gracefully_on_sigterm() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "keda_llm.cli", "scaler", "--no-kube", "--exporters", "127.0.0.1:9",
         "--grpc-address", "127.0.0.1:0", "--http-address", "127.0.0.1:0", "--grace", "0.5"],
        stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        port = None
        for line in proc.stderr:
            m = re.search(r"scaler serving gRPC on :(\d+)", line)
            if m:
                port = int(m.group(1))
                break
        assert port is not None, "the scaler never said it was serving"
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            reply = health.Check(health_pb2.HealthCheckRequest(service="externalscaler.ExternalScaler"), timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "stopping: health NOT_SERVING" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
