"""TLS and mutual TLS on the gRPC port, as KEDA connects with `enableTLS` and a TriggerAuthentication.

KEDA's client verifies the server against `caCert` and presents `tlsClientCert`/`tlsClientKey` when
given (kedacore/keda pkg/util/tls_config.go). Certificates are made at test time with openssl.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from certs import OPENSSL, Pair, make_ca, make_leaf
from scaler_harness import FakeClock, FakeHistory, ServerThread, make_service, ref, stub

from keda_llm.scaler.server import TLSFiles

pytestmark = pytest.mark.skipif(OPENSSL is None, reason="needs the openssl command to make test certificates")

MODEL = "m"


class PKI:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.ca = make_ca(folder, "ca")
        self.server = make_leaf(folder, "server", self.ca, server=True)
        self.client = make_leaf(folder, "client", self.ca, server=False)
        self.keda = make_leaf(folder, "keda", self.ca, server=False, san="DNS:keda-operator.keda.svc")
        self.spiffe = make_leaf(folder, "spiffe", self.ca, server=False,
                                san="URI:spiffe://cluster.local/ns/keda/sa/keda-operator")
        self.neighbour = make_leaf(folder, "neighbour", self.ca, server=False, san="DNS:some-app.default.svc")
        self.rogue_ca = make_ca(folder, "rogue-ca")
        self.rogue_client = make_leaf(folder, "rogue-client", self.rogue_ca, server=False)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return PKI(tmp_path_factory.mktemp("pki"))


def serve(tls: TLSFiles) -> ServerThread:
    return ServerThread(make_service({("llm", MODEL): FakeHistory(desired=2)}, FakeClock()), tls=tls)


def is_active(target: str, ca: Pair, client: Pair | None = None) -> Any:
    creds = grpc.ssl_channel_credentials(
        root_certificates=ca.cert.read_bytes(),
        private_key=client.key.read_bytes() if client else None,
        certificate_chain=client.cert.read_bytes() if client else None)
    with grpc.secure_channel(target.replace("127.0.0.1", "localhost"), creds) as channel:
        return stub(channel).IsActive(ref(model=MODEL), timeout=10).result


@pytest.fixture
def tls_server(pki: PKI) -> Iterator[ServerThread]:
    st = serve(TLSFiles(cert=str(pki.server.cert), key=str(pki.server.key)))
    yield st
    st.stop()


@pytest.fixture
def mtls_server(pki: PKI) -> Iterator[ServerThread]:
    st = serve(TLSFiles(cert=str(pki.server.cert), key=str(pki.server.key), client_ca=str(pki.ca.cert)))
    yield st
    st.stop()


def test_tls_client_trusting_the_ca_is_served(pki: PKI, tls_server: ServerThread) -> None:
    assert is_active(tls_server.target, pki.ca) is True


def test_tls_client_trusting_another_ca_is_refused(pki: PKI, tls_server: ServerThread) -> None:
    with pytest.raises(grpc.RpcError) as err:
        is_active(tls_server.target, pki.rogue_ca)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_plaintext_client_gets_nothing_from_a_tls_port(tls_server: ServerThread) -> None:
    with grpc.insecure_channel(tls_server.target) as channel, pytest.raises(grpc.RpcError) as err:
        stub(channel).IsActive(ref(model=MODEL), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_mtls_client_with_the_right_certificate_is_served(pki: PKI, mtls_server: ServerThread) -> None:
    assert is_active(mtls_server.target, pki.ca, pki.client) is True


@pytest.mark.parametrize("who", ["no certificate", "certificate from another CA"])
def test_mtls_client_without_the_right_certificate_is_refused(pki: PKI, mtls_server: ServerThread,
                                                              who: str) -> None:
    client = None if who == "no certificate" else pki.rogue_client
    with pytest.raises(grpc.RpcError) as err:
        is_active(mtls_server.target, pki.ca, client)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_rotated_certificate_files_are_served_to_new_connections(pki: PKI, tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(pki.server.cert.read_bytes())
    key.write_bytes(pki.server.key.read_bytes())
    st = serve(TLSFiles(cert=str(cert), key=str(key)))
    try:
        assert is_active(st.target, pki.ca) is True
        # cert-manager renews: a new CA and key land in the same files.
        new_ca = make_ca(tmp_path, "ca2")
        new_server = make_leaf(tmp_path, "server2", new_ca, server=True)
        key.write_bytes(new_server.key.read_bytes())
        cert.write_bytes(new_server.cert.read_bytes())
        stamp = os.stat(cert).st_mtime_ns + 1_000_000_000  # make the change visible to coarse mtimes
        os.utime(cert, ns=(stamp, stamp))
        assert is_active(st.target, new_ca) is True
        with pytest.raises(grpc.RpcError):
            is_active(st.target, pki.ca)
    finally:
        st.stop()


def test_pinned_client_identities_serve_only_certificates_naming_one(pki: PKI) -> None:
    """Same CA for everyone (a cluster issuer): only the pinned subject alternative names get answers."""
    st = serve(TLSFiles(cert=str(pki.server.cert), key=str(pki.server.key), client_ca=str(pki.ca.cert),
                        client_sans=("keda-operator.keda.svc", "spiffe://cluster.local/ns/keda/sa/keda-operator")))
    try:
        assert is_active(st.target, pki.ca, pki.keda) is True
        assert is_active(st.target, pki.ca, pki.spiffe) is True
        for other in (pki.neighbour, pki.client):  # signed by the same CA, naming someone else or nothing
            with pytest.raises(grpc.RpcError) as err:
                is_active(st.target, pki.ca, other)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "keda-operator.keda.svc" in (err.value.details() or "")
    finally:
        st.stop()


def test_client_san_without_client_ca_is_refused_at_start() -> None:
    import argparse

    from keda_llm.scaler.cli import StartError, add_arguments, settings_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--tls-cert", "c", "--tls-key", "k", "--tls-client-san", "keda-operator.keda.svc"])
    with pytest.raises(StartError, match="--tls-client-san needs --tls-client-ca"):
        settings_from_args(args)
    args = parser.parse_args(["--tls-cert", "c", "--tls-key", "k", "--tls-client-ca", "ca",
                              "--tls-client-san", "a.svc, b.svc"])
    assert settings_from_args(args).tls == TLSFiles("c", "k", "ca", ("a.svc", "b.svc"))
