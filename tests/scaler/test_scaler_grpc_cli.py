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


def _scaler(*flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "keda_llm.cli", "scaler", *flags], capture_output=True, text=True,
                          timeout=60, env=env)


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_outside_a_cluster_without_no_kube_is_one_line_with_the_hint() -> None:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    proc = _scaler("--grpc-address", "127.0.0.1:0", "--http-address", "127.0.0.1:0", env=env)
    assert proc.returncode == 2
    line = _one_line(proc.stderr)
    assert line.startswith("keda-llm scaler: cannot use the Kubernetes API") and "--no-kube" in line


def test_a_port_taken_is_one_line_naming_the_flag() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for flag, other in (("--grpc-address", "--http-address"), ("--http-address", "--grpc-address")):
            proc = _scaler("--no-kube", flag, f"127.0.0.1:{port}", other, "127.0.0.1:0")
            assert proc.returncode == 2, proc.stderr
            line = _one_line(proc.stderr)
            assert f"cannot listen on {flag} 127.0.0.1:{port}" in line and "hint:" in line


def test_tls_flags_that_do_not_go_together_and_a_missing_file_are_one_line(tmp_path: object) -> None:
    proc = _scaler("--no-kube", "--tls-cert", "cert.pem", "--grpc-address", "127.0.0.1:0")
    assert proc.returncode == 2 and "--tls-cert and --tls-key go together" in _one_line(proc.stderr)
    proc = _scaler("--no-kube", "--tls-cert", "/nonexistent/cert.pem", "--tls-key", "/nonexistent/key.pem",
                   "--grpc-address", "127.0.0.1:0", "--http-address", "127.0.0.1:0")
    assert proc.returncode == 2 and "cannot read /nonexistent/" in _one_line(proc.stderr)


def test_interval_and_grace_take_durations_like_the_exporter() -> None:
    import argparse

    from keda_llm.scaler.cli import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--interval", "500ms", "--grace", "10s"])
    assert (args.interval, args.grace) == (0.5, 10.0)
    assert parser.parse_args(["--interval", "3"]).interval == 3.0  # bare seconds still work
    proc = _scaler("--interval", "0s")
    assert proc.returncode == 2 and "must be greater than 0" in proc.stderr
    for flag in ("--interval", "--warm-scan-interval"):  # 1ns once made a collection loop spin
        proc = _scaler(flag, "1ns")
        assert proc.returncode == 2 and "at least 100ms" in proc.stderr
    assert parser.parse_args(["--interval", "100ms"]).interval == 0.1


def test_bad_addresses_and_levels_are_one_line_naming_the_flag(tmp_path: object) -> None:
    """Found by a review: each was a traceback at start (or, for --exporters-service, an INTERNAL error on
    every RPC later), and the documented `:PORT` form of --http-address could not bind at all."""
    import os

    for flags, said in ((("--http-address", "host:"), "--http-address 'host:'"),
                        (("--http-address", "127.0.0.1:-1"), "the port must be a number from 0 to 65535"),
                        (("--grpc-address", "[::1"), "--grpc-address '[::1'"),
                        (("--http-address", ""), "--http-address '': empty address"),  # was a traceback
                        (("--grpc-address", ""), "--grpc-address ''"),
                        # tracebacks found by a flag fuzz: a listen host that does not resolve (.invalid never
                        # does, RFC 6761), and a peer without a port where this pod's HTTP port is 0
                        (("--grpc-address", "no-such-host.invalid:0"), "cannot resolve the listen host"),
                        (("--http-address", "no-such-host.invalid:0"), "--http-address no-such-host.invalid:0"),
                        (("--peers", "peer-without-port"), "--peers 'peer-without-port'"),
                        (("--peers-service", "peers.ns.svc"), "--peers-service 'peers.ns.svc'"),
                        (("--peers", "x:abc"), "--peers 'x:abc'"),
                        (("--exporters-service", "svc:abc"), "--exporters-service 'svc:abc'"),
                        (("--prometheus-address", "ftp://x"), "--prometheus-address 'ftp://x'"),
                        (("--log-level", "FOO"), "--log-level 'FOO' is not a level")):
        args = ["--no-kube", *(("--grpc-address", "127.0.0.1:0") if flags[0] != "--grpc-address" else ()),
                *(("--http-address", "127.0.0.1:0") if flags[0] != "--http-address" else ()), *flags]
        proc = _scaler(*args)
        assert proc.returncode == 2, (flags, proc.stderr)
        line = _one_line(proc.stderr)
        assert line.startswith("keda-llm scaler: ") and said in line and "hint:" in line, line
    directory = str(tmp_path)
    proc = _scaler("--no-kube", "--grpc-address", "127.0.0.1:0", "--http-address", "127.0.0.1:0",
                   "--http-tls-cert", directory, "--http-tls-key", directory)
    assert proc.returncode == 2 and "cannot read" in _one_line(proc.stderr)
    assert os.path.isdir(directory)


def test_host_port_reads_every_listen_form() -> None:
    import pytest

    from keda_llm.common.addresses import host_port

    assert host_port(":19091", 1) == ("", 19091)  # every address, as the README writes it
    assert host_port("0.0.0.0:9091", 1) == ("0.0.0.0", 9091)
    assert host_port("[::]:9090", 1) == ("::", 9090)
    assert host_port("[::1]", 7) == ("::1", 7) and host_port("::1", 7) == ("::1", 7)
    assert host_port("scaler.local", 7) == ("scaler.local", 7)
    for bad in ("host:", ":99999", ":²", "[::1", "[::1]x", "h:" + "9" * 5000):
        with pytest.raises(ValueError):
            host_port(bad, 1)
