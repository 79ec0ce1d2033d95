"""TLS on the exporter's HTTP port (:9400): /metrics, /healthz and POST /v1/warm over https, the
certificate re-read when its files change, plaintext and wrong-CA clients refused without stopping the
server, and the config keys and flags that turn it on.

Certificates are made at test time with openssl (tests/certs.py). As cert-manager's would, the server
certificate names the exporters' Service only, never 127.0.0.1: a client that checks the hostname is
told the name; the scaler, which dials exporters by pod IP, checks the chain (common/tls.py).
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from certs import OPENSSL, Pair, install, make_ca, make_leaf

from keda_llm.common.tls import ca_client_context, server_context
from keda_llm.exporter import cli as exporter_cli
from keda_llm.exporter.config import ConfigError, parse_config
from keda_llm.exporter.server import MetricsServer, create_server
from keda_llm.exporter.warm import WarmConfig, Warmer

pytestmark = pytest.mark.skipif(OPENSSL is None, reason="needs the openssl command to make test certificates")

SERVICE_DNS = "keda-llm-exporter.keda-llm-exporter.svc"
TOKEN = "warm-s3cret"
BODY = b"# TYPE llm_engine_up gauge\nllm_engine_up{model=\"m\"} 1\n"


class _Source:
    def exposition(self, gzipped: bool = False) -> bytes:
        return BODY

    def healthy(self) -> bool:
        return True


class PKI:
    def __init__(self, folder: Path) -> None:
        self.ca = make_ca(folder, "ca")
        self.server = make_leaf(folder, "server", self.ca, server=True, san=f"DNS:{SERVICE_DNS}")
        self.renewed = make_leaf(folder, "renewed", self.ca, server=True, san=f"DNS:{SERVICE_DNS}")
        self.rogue_ca = make_ca(folder, "rogue-ca")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return PKI(tmp_path_factory.mktemp("pki"))



class Running:
    def __init__(self, server: MetricsServer, port: int, files: Pair, models: Path) -> None:
        self.server, self.port, self.files, self.models = server, port, files, models


@pytest.fixture
def tls_exporter(pki: PKI, tmp_path: Path) -> Iterator[Running]:
    files = install(pki.server, tmp_path / "tls")
    models = tmp_path / "models"
    (models / "m").mkdir(parents=True)
    (models / "m" / "w.bin").write_bytes(b"x" * 4096)
    token = tmp_path / "token"
    token.write_text(TOKEN)
    warmer = Warmer(WarmConfig(directories=(str(models),), token_file=str(token)))
    server, port = create_server(("127.0.0.1", 0), _Source(), warmer,
                                 tls=server_context(str(files.cert), str(files.key)))
    server.start()
    yield Running(server, port, files, models)
    server.stop()


def client_context(ca: Path, *, hostname: bool = True) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.check_hostname = hostname
    return ctx


def https(port: int, ctx: ssl.SSLContext, method: str = "GET", path: str = "/metrics",
          headers: dict[str, str] | None = None, body: bytes | None = None) -> tuple[int, bytes, bytes]:
    """(status, body, the server certificate DER) over a fresh connection to 127.0.0.1 named SERVICE_DNS."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname=SERVICE_DNS) as tls:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.sock = tls
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        der = tls.getpeercert(binary_form=True)
        assert der is not None
        return resp.status, resp.read(), der


def der_of(pair: Pair) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pair.cert.read_text())


def test_metrics_healthz_and_warm_over_https_verified_against_the_ca(pki: PKI, tls_exporter: Running) -> None:
    ctx = client_context(pki.ca.cert)
    status, body, der = https(tls_exporter.port, ctx)
    assert (status, body, der) == (200, BODY, der_of(pki.server))
    assert https(tls_exporter.port, ctx, path="/healthz")[:2] == (200, b"ok\n")
    warm = json.dumps({"path": str(tls_exporter.models / "m")}).encode()
    status, body, _ = https(tls_exporter.port, ctx, "POST", "/v1/warm", {"Authorization": f"Bearer {TOKEN}"}, warm)
    assert status == 202 and json.loads(body)["bytes"] == 4096
    status, _, _ = https(tls_exporter.port, ctx, "POST", "/v1/warm", {}, warm)
    assert status == 401  # TLS does not replace the token


def test_the_scalers_ca_context_accepts_the_chain_by_pod_ip(pki: PKI, tls_exporter: Running) -> None:
    """The scaler dials exporters by pod IP: the chain is verified, the name (not in the cert) is not."""
    ctx = ca_client_context(str(pki.ca.cert)).get()
    with socket.create_connection(("127.0.0.1", tls_exporter.port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        assert tls.getpeercert(binary_form=True) == der_of(pki.server)
    named = client_context(pki.ca.cert)
    with socket.create_connection(("127.0.0.1", tls_exporter.port), timeout=10) as raw, \
            pytest.raises(ssl.SSLCertVerificationError):
        named.wrap_socket(raw, server_hostname="127.0.0.1")  # a hostname check would refuse the IP


def test_a_client_trusting_another_ca_refuses_the_exporter(pki: PKI, tls_exporter: Running) -> None:
    with pytest.raises(ssl.SSLCertVerificationError):
        https(tls_exporter.port, client_context(pki.rogue_ca.cert))


def test_tls_1_2_and_1_3_are_served_and_nothing_older_is_allowed(pki: PKI, tls_exporter: Running) -> None:
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        ctx = client_context(pki.ca.cert)
        ctx.minimum_version = ctx.maximum_version = version
        with socket.create_connection(("127.0.0.1", tls_exporter.port), timeout=10) as raw, \
                ctx.wrap_socket(raw, server_hostname=SERVICE_DNS) as tls:
            assert tls.version() == {ssl.TLSVersion.TLSv1_2: "TLSv1.2", ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]
    assert server_context(str(pki.server.cert), str(pki.server.key)).get().minimum_version == ssl.TLSVersion.TLSv1_2


def test_a_plaintext_client_gets_no_metrics_and_the_exporter_keeps_serving(pki: PKI, tls_exporter: Running) -> None:
    with socket.create_connection(("127.0.0.1", tls_exporter.port), timeout=10) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        try:
            while chunk := s.recv(4096):
                got += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    assert b"llm_engine_up" not in got and not got.startswith(b"HTTP/")
    assert https(tls_exporter.port, client_context(pki.ca.cert))[0] == 200


def test_a_renewed_certificate_is_served_to_the_next_connection_without_a_restart(pki: PKI,
                                                                               tls_exporter: Running) -> None:
    ctx = client_context(pki.ca.cert)
    assert https(tls_exporter.port, ctx)[2] == der_of(pki.server)
    install(pki.renewed, tls_exporter.files.cert.parent)
    assert https(tls_exporter.port, ctx)[2] == der_of(pki.renewed)


def test_the_tls_block_and_the_flags_parse_and_go_together(pki: PKI, tmp_path: Path) -> None:
    cfg = parse_config({"tls": {"cert_file": "/etc/tls/tls.crt", "key_file": "/etc/tls/tls.key"}}, {})
    assert cfg.tls.enabled and (cfg.tls.cert_file, cfg.tls.key_file) == ("/etc/tls/tls.crt", "/etc/tls/tls.key")
    assert not parse_config({}, {}).tls.enabled
    with pytest.raises(ConfigError, match=r"tls\.key_file"):
        parse_config({"tls": {"cert_file": "/etc/tls/tls.crt"}}, {})
    with pytest.raises(ConfigError, match=r"tls\.ca_file"):
        parse_config({"tls": {"cert_file": "a", "key_file": "b", "ca_file": "c"}}, {})
    parser = argparse.ArgumentParser()
    exporter_cli.add_arguments(parser)
    args = parser.parse_args(["--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key)])
    cfg = exporter_cli.build_config(args, {})
    assert (cfg.tls.cert_file, cfg.tls.key_file) == (str(pki.server.cert), str(pki.server.key))
    with pytest.raises(ConfigError, match=r"tls\.cert_file"):
        exporter_cli.build_config(parser.parse_args(["--tls-key", "k"]), {})


def test_the_command_refuses_unloadable_files_in_one_line(pki: PKI, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    exporter_cli.add_arguments(parser)
    for cert, key in ((tmp_path / "nope.crt", pki.server.key), (pki.server.cert, pki.renewed.key)):
        args = parser.parse_args(["--listen", "127.0.0.1:0", "--no-nvml", "--tls-cert", str(cert),
                                  "--tls-key", str(key)])
        assert exporter_cli.run(args) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and err.startswith("keda-llm exporter: tls: cannot load"), err
        assert "; hint: " in err
