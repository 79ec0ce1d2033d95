"""The HTTP listener on IPv6: `--http-address=[::1]:0` binds (it once failed with "Address family for
hostname not supported": the server was IPv4 only) and answers /healthz and POST /v1/activate there."""

from __future__ import annotations

import argparse
import socket

import pytest
from scaler_harness import FakeClock, ServerThread, get, make_service, post

from keda_llm.scaler import cli as scaler_cli
from keda_llm.scaler.server import address_family


def _has_ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


needs_ipv6 = pytest.mark.skipif(not _has_ipv6_loopback(), reason="this machine has no IPv6 loopback")


@pytest.mark.parametrize(("host", "family"), [
    ("::", socket.AF_INET6), ("[::1]", socket.AF_INET6), ("fd00::7", socket.AF_INET6),
    ("0.0.0.0", socket.AF_INET), ("127.0.0.1", socket.AF_INET), ("", socket.AF_INET),
])
def test_the_family_follows_the_host(host: str, family: socket.AddressFamily) -> None:
    assert address_family(host) == family


@needs_ipv6
def test_http_address_flag_binds_ipv6_loopback() -> None:
    parser = argparse.ArgumentParser()
    scaler_cli.add_arguments(parser)
    args = parser.parse_args(["--http-address", "[::1]:0"])
    host, port = scaler_cli._host_port(args.http_address, 9091)
    assert (host, port) == ("::1", 0)
    server = ServerThread(make_service({}, FakeClock()), http_address=(host, port))
    try:
        base = f"http://[::1]:{server.server.http_port}"
        assert get(base + "/healthz") == (200, '{"status": "ok"}\n')
        status, body = post(base + "/v1/activate/llm/llama")
        assert status == 200 and body["scaledObject"] == "llm/llama"
    finally:
        server.stop()


@needs_ipv6
def test_the_ipv6_wildcard_binds() -> None:
    server = ServerThread(make_service({}, FakeClock()), http_address=("::", 0))
    try:
        assert get(f"http://[::1]:{server.server.http_port}/healthz")[0] == 200
    finally:
        server.stop()
