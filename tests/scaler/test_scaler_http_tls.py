"""TLS on the scaler's HTTP port (:9091): /metrics, /healthz and POST /v1/activate over https, the
certificate re-read when its files change, and activations relayed between two TLS pods.

Certificates are made at test time with openssl (tests/certs.py). The server certificates here name
only the Service's DNS name, never 127.0.0.1, as cert-manager's do in the cluster: a client that checks
the hostname must be told the name, and the peer relay (which dials pod IPs) must work without it.
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from certs import OPENSSL, Pair, install, make_ca, make_leaf
from scaler_harness import FakeClock, FakeHistory, ServerThread, StreamReader, make_service, ref, stub, wait_for_streams

from keda_llm.scaler import cli as scaler_cli
from keda_llm.scaler.activation import PeerForwarder, Peers, ReloadingContext, peer_client_context
from keda_llm.scaler.server import HTTPTLSFiles

pytestmark = pytest.mark.skipif(OPENSSL is None, reason="needs the openssl command to make test certificates")

MODEL = "llama"
SERVICE_DNS = "keda-llm-scaler.keda-llm.svc"
TOKEN = "s3cret"


class PKI:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.ca = make_ca(folder, "ca")
        self.server = make_leaf(folder, "server", self.ca, server=True, san=f"DNS:{SERVICE_DNS}")
        self.renewed = make_leaf(folder, "renewed", self.ca, server=True, san=f"DNS:{SERVICE_DNS}")
        self.rogue_ca = make_ca(folder, "rogue-ca")
        self.rogue = make_leaf(folder, "rogue", self.rogue_ca, server=True, san=f"DNS:{SERVICE_DNS}")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return PKI(tmp_path_factory.mktemp("pki"))



def client_context(ca: Pair) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca.cert))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def https_get(port: int, path: str, ca: Pair) -> tuple[int, str]:
    """GET over https, verifying the certificate and the Service's name, as Prometheus with its tlsConfig
    (`ca`, `serverName`) does."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=client_context(ca))
    # dial loopback, verify the name the certificate carries (SNI and hostname check)
    conn.sock = client_context(ca).wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                               server_hostname=SERVICE_DNS)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def served_certificate(port: int) -> bytes:
    """The DER certificate a new connection is served (no verification: the test compares it)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname=SERVICE_DNS) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def der(pair: Pair) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pair.cert.read_text())


def serve(files: Pair, *, peer_ca: Pair | None = None, **kwargs: Any) -> ServerThread:
    tls = HTTPTLSFiles(str(files.cert), str(files.key), str(peer_ca.cert) if peer_ca else None)
    service = make_service({("llm", MODEL): FakeHistory(desired=0, active=False)}, FakeClock(1000.0))
    return ServerThread(service, http_tls=tls, **kwargs)


@pytest.fixture
def tls_server(pki: PKI, tmp_path: Path) -> Iterator[ServerThread]:
    st = serve(install(pki.server, tmp_path / "tls"))
    yield st
    st.stop()


# ---- serving ----

def test_metrics_and_healthz_over_https_verified_against_the_ca(pki: PKI, tls_server: ServerThread) -> None:
    assert tls_server.server.http_scheme == "https"
    status, body = https_get(tls_server.server.http_port, "/healthz", pki.ca)
    assert (status, body.strip()) == (200, '{"status": "ok"}')
    status, body = https_get(tls_server.server.http_port, "/metrics", pki.ca)
    assert status == 200 and "keda_llm_scaler_" in body


def test_only_tls_1_2_and_newer_is_served(pki: PKI, tls_server: ServerThread) -> None:
    assert tls_server.server.http_tls is not None
    assert tls_server.server.http_tls.get().minimum_version == ssl.TLSVersion.TLSv1_2
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):  # both offered, both served
        ctx = client_context(pki.ca)
        ctx.minimum_version = ctx.maximum_version = version
        with socket.create_connection(("127.0.0.1", tls_server.server.http_port), timeout=10) as raw, \
                ctx.wrap_socket(raw, server_hostname=SERVICE_DNS) as tls:
            assert tls.version() == {ssl.TLSVersion.TLSv1_2: "TLSv1.2", ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]


def test_a_client_trusting_another_ca_refuses_the_server(pki: PKI, tls_server: ServerThread) -> None:
    with pytest.raises(ssl.SSLCertVerificationError):
        https_get(tls_server.server.http_port, "/healthz", pki.rogue_ca)


def test_a_plaintext_client_gets_nothing_usable_and_the_server_keeps_serving(pki: PKI,
                                                                             tls_server: ServerThread) -> None:
    port = tls_server.server.http_port
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        with pytest.raises((http.client.HTTPException, OSError)):  # no HTTP status line comes back
            conn.request("GET", "/metrics")
            conn.getresponse()
    finally:
        conn.close()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:  # a raw POST: no JSON, no 200
        raw.sendall(b"POST /v1/activate/llm/chat HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        raw.settimeout(10)
        got = b""
        try:
            while chunk := raw.recv(4096):
                got += chunk
        except ConnectionError:  # a reset is as good as an empty answer
            pass
        assert b"HTTP/1.1 200" not in got and b"scaledObject" not in got
    assert tls_server.service.bus.last_activation(_key()) is None
    assert https_get(port, "/healthz", pki.ca)[0] == 200


def _key() -> Any:
    from keda_llm.scaler.activation import ScaledObjectKey

    return ScaledObjectKey("llm", "chat")


def test_a_client_that_stalls_mid_handshake_does_not_block_others(pki: PKI, tls_server: ServerThread) -> None:
    port = tls_server.server.http_port
    with socket.create_connection(("127.0.0.1", port), timeout=10):  # connects, never says hello
        assert https_get(port, "/healthz", pki.ca)[0] == 200


# ---- rotation ----

def test_replaced_files_are_served_to_the_next_connection_without_a_restart(pki: PKI, tmp_path: Path) -> None:
    files = install(pki.server, tmp_path / "tls")
    st = serve(files)
    try:
        port = st.server.http_port
        assert served_certificate(port) == der(pki.server)
        # a connection open across the rotation keeps its certificate; the next one sees the new
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=client_context(pki.ca))
        conn.sock = client_context(pki.ca).wrap_socket(socket.create_connection(("127.0.0.1", port)),
                                                       server_hostname=SERVICE_DNS)
        install(pki.renewed, tmp_path / "tls")
        assert served_certificate(port) == der(pki.renewed)
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200
        assert conn.sock.getpeercert(binary_form=True) == der(pki.server)  # type: ignore[union-attr]
        conn.close()
        assert https_get(port, "/metrics", pki.ca)[0] == 200
        assert st.server.http_tls is not None and st.server.http_tls.reloads == 1
    finally:
        st.stop()


def test_a_half_written_rotation_keeps_the_current_certificate_until_the_files_match(pki: PKI,
                                                                                  tmp_path: Path) -> None:
    files = install(pki.server, tmp_path / "tls")
    st = serve(files)
    try:
        port = st.server.http_port
        shutil.copyfile(pki.renewed.cert, tmp_path / "tls" / "tls.new")  # the new cert, the old key
        os.replace(tmp_path / "tls" / "tls.new", files.cert)
        assert served_certificate(port) == der(pki.server)
        assert https_get(port, "/healthz", pki.ca)[0] == 200
        install(pki.renewed, tmp_path / "tls")  # the key follows
        assert served_certificate(port) == der(pki.renewed)
    finally:
        st.stop()


def test_the_reloading_context_stats_files_and_rebuilds_only_on_change(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_text("1")
    made: list[int] = []

    def make() -> ssl.SSLContext:
        made.append(1)
        return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)

    ctx = ReloadingContext([str(path)], make)
    first = ctx.get()
    assert ctx.get() is first and len(made) == 1
    tmp = tmp_path / "f.new"
    tmp.write_text("22")
    os.replace(tmp, path)
    assert ctx.get() is not first and len(made) == 2 and ctx.reloads == 1
    path.unlink()  # gone mid-rotation: keep serving what we have
    assert ctx.get() is not None and len(made) == 2


# ---- two pods relaying activations over https ----

@pytest.fixture
def tls_pods(pki: PKI, tmp_path: Path) -> Iterator[tuple[ServerThread, ServerThread]]:
    a = serve(install(pki.server, tmp_path / "a"), peer_ca=pki.ca, activation_token=TOKEN)
    b = serve(install(pki.renewed, tmp_path / "b"), peer_ca=pki.ca, activation_token=TOKEN)
    # as the assembly wires them from --http-tls-ca: https, the CA, the shared token; peers by IP
    a.server.forwarder = PeerForwarder(Peers(static=[f"127.0.0.1:{b.server.http_port}"]), token=TOKEN,
                                       ca=str(pki.ca.cert))
    b.server.forwarder = PeerForwarder(Peers(static=[f"127.0.0.1:{a.server.http_port}"]), token=TOKEN,
                                       ca=str(pki.ca.cert))
    yield a, b
    a.stop()
    b.stop()


def https_post(port: int, path: str, ca: Pair, token: str | None) -> tuple[int, dict[str, Any]]:
    import json

    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10)
    conn.sock = client_context(ca).wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                               server_hostname=SERVICE_DNS)
    try:
        conn.request("POST", path, body=b"", headers={"Authorization": f"Bearer {token}"} if token else {})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def test_an_activation_posted_to_a_reaches_the_stream_held_by_b_over_https(
        pki: PKI, tls_pods: tuple[ServerThread, ServerThread]) -> None:
    a, b = tls_pods
    assert a.server.forwarder is not None and a.server.forwarder.scheme == "https"
    so = ref("chat", model=MODEL, scaleToZero="true")
    with grpc.insecure_channel(b.target) as channel:  # KEDA's stream lives on b
        client = stub(channel)
        reader = StreamReader(client.StreamIsActive(so))
        wait_for_streams(b, 1)
        assert client.IsActive(so).result is False
        # the token is still what authenticates an activation, TLS or not
        assert https_post(a.server.http_port, "/v1/activate/llm/chat", pki.ca, None)[0] == 401
        status, body = https_post(a.server.http_port, "/v1/activate/llm/chat", pki.ca, TOKEN)
        assert status == 200, body
        assert body["peers"] == {f"127.0.0.1:{b.server.http_port}": "ok"}
        assert reader.next() is True  # b pushed
        assert client.IsActive(so).result is True
        reader.call.cancel()
    assert b.service.bus.last_activation(_key()) is not None


def test_the_relay_refuses_a_peer_whose_certificate_another_ca_signed(pki: PKI, tmp_path: Path) -> None:
    impostor = serve(install(pki.rogue, tmp_path / "rogue"), peer_ca=pki.rogue_ca)
    try:
        forwarder = PeerForwarder(Peers(static=[f"127.0.0.1:{impostor.server.http_port}"]), token=TOKEN,
                                  ca=str(pki.ca.cert))
        try:
            (result,) = forwarder.forward(_key()).values()
        finally:
            forwarder.close()
        assert result.startswith("error: ") and "CERTIFICATE_VERIFY_FAILED" in result
        assert impostor.service.bus.last_activation(_key()) is None
    finally:
        impostor.stop()


def test_a_plain_http_relay_to_a_tls_peer_fails_without_delivering(pki: PKI, tls_server: ServerThread) -> None:
    forwarder = PeerForwarder(Peers(static=[f"127.0.0.1:{tls_server.server.http_port}"]), token=TOKEN)
    try:
        (result,) = forwarder.forward(_key()).values()
    finally:
        forwarder.close()
    assert result.startswith("error: ")
    assert tls_server.service.bus.last_activation(_key()) is None


def test_the_peer_ca_context_verifies_the_chain_but_not_the_name(pki: PKI) -> None:
    ctx = peer_client_context(str(pki.ca.cert)).get()
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname is False
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert len(ctx.get_ca_certs()) == 1  # our CA only, not the system's


# ---- the command's flags ----

def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    scaler_cli.add_arguments(parser)
    return parser.parse_args(["--no-kube", *argv])


def test_flags_become_http_tls_files_and_the_assembly_serves_https(pki: PKI, tmp_path: Path) -> None:
    files = install(pki.server, tmp_path / "tls")
    args = parse(f"--http-tls-cert={files.cert}", f"--http-tls-key={files.key}", f"--http-tls-ca={pki.ca.cert}",
                 "--peers=127.0.0.1:1", "--http-address=127.0.0.1:0", "--grpc-address=127.0.0.1:0",
                 "--exporters=127.0.0.1:1")
    settings = scaler_cli.settings_from_args(args)
    assert settings.http_tls == HTTPTLSFiles(str(files.cert), str(files.key), str(pki.ca.cert))
    from keda_llm.scaler.assembly import start_in_thread

    st = start_in_thread(settings, background=False)
    try:
        assert st.http_url.startswith("https://")
        assert https_get(st.scaler.server.http_port, "/healthz", pki.ca)[0] == 200
        assert st.scaler.server.forwarder is not None and st.scaler.server.forwarder.scheme == "https"
    finally:
        st.stop()
    assert scaler_cli.settings_from_args(parse()).http_tls is None


@pytest.mark.parametrize(("argv", "message"), [
    (["--http-tls-cert=/c"], "--http-tls-cert and --http-tls-key go together; hint: pass both"),
    (["--http-tls-key=/k"], "--http-tls-cert and --http-tls-key go together; hint: pass both"),
    (["--http-tls-ca=/ca"], "--http-tls-ca needs --http-tls-cert and --http-tls-key; hint: "),
    (["--http-tls-cert=/c", "--http-tls-key=/k", "--peers-service=peers.svc"],
     "need --http-tls-ca; hint: pass the CA that signs the peers' certificates"),
])
def test_a_bad_flag_combination_is_one_start_error_line(argv: list[str], message: str) -> None:
    with pytest.raises(scaler_cli.StartError) as err:
        scaler_cli.settings_from_args(parse(*argv))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_command_refuses_bad_files_in_one_line(pki: PKI, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    common = ["--http-address=127.0.0.1:0", "--grpc-address=127.0.0.1:0", "--exporters=127.0.0.1:1"]
    missing = parse(f"--http-tls-cert={tmp_path / 'nope.crt'}", f"--http-tls-key={pki.server.key}", *common)
    assert scaler_cli.run(missing) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "nope.crt" in err and "--http-tls-*" in err
    mismatched = parse(f"--http-tls-cert={pki.server.cert}", f"--http-tls-key={pki.renewed.key}", *common)
    assert scaler_cli.run(mismatched) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("keda-llm scaler: cannot load the HTTP TLS certificate")

