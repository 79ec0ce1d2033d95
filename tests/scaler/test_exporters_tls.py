"""The scaler reading exporters that serve TLS (--exporters-tls-ca): real exporter HTTP servers with TLS
on loopback (keda_llm.exporter.server), the scaler's exporters source and warm planner as the assembly
builds them.

As in the cluster, the exporter's certificate names the exporters' Service, never the address the
scaler dials (pod IPs, here 127.0.0.1): the scaler checks the chain against the CA, not the name.
"""

from __future__ import annotations

import argparse
import gzip
from collections.abc import Iterator
from pathlib import Path

import pytest
from certs import OPENSSL, make_ca, make_leaf
from sources_bodies import MODEL, NOW, pod_a

from keda_llm.common.tls import ca_client_context, server_context
from keda_llm.exporter.server import MetricsServer, create_server
from keda_llm.exporter.warm import WarmConfig, Warmer
from keda_llm.scaler import cli as scaler_cli
from keda_llm.scaler.assembly import ScalerSettings, Sources
from keda_llm.scaler.config import parse_metadata
from keda_llm.scaler.sources.exporters import ExportersSource, dns_targets
from keda_llm.scaler.sources.exposition import observations_from_exposition
from keda_llm.scaler.warm import NodeView, WarmPlanner

pytestmark = pytest.mark.skipif(OPENSSL is None, reason="needs the openssl command to make test certificates")

SERVICE_DNS = "keda-llm-exporter.keda-llm-exporter.svc"
TOKEN = "warm-s3cret"


class _Body:
    def exposition(self, gzipped: bool = False) -> bytes:
        body = pod_a().encode()
        return gzip.compress(body) if gzipped else body

    def healthy(self) -> bool:
        return True


class World:
    def __init__(self, folder: Path) -> None:
        self.ca = make_ca(folder, "ca")
        self.rogue_ca = make_ca(folder, "rogue-ca")
        leaf = make_leaf(folder, "exporter", self.ca, server=True, san=f"DNS:{SERVICE_DNS}")
        rogue = make_leaf(folder, "rogue", self.rogue_ca, server=True, san=f"DNS:{SERVICE_DNS}")
        self.models = folder / "models"
        (self.models / "m").mkdir(parents=True)
        (self.models / "m" / "w.bin").write_bytes(b"w" * 1024)
        self.token = folder / "token"
        self.token.write_text(TOKEN)
        warmer = Warmer(WarmConfig(directories=(str(self.models),), token_file=str(self.token)))
        self.servers: list[MetricsServer] = []
        self.port = self._start(server_context(str(leaf.cert), str(leaf.key)), warmer)
        self.rogue_port = self._start(server_context(str(rogue.cert), str(rogue.key)), None)

    def _start(self, tls: object, warmer: Warmer | None) -> int:
        server, port = create_server(("127.0.0.1", 0), _Body(), warmer, tls=tls)  # type: ignore[arg-type]
        server.start()
        self.servers.append(server)
        return port


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    w = World(tmp_path_factory.mktemp("exporters-tls"))
    yield w
    for s in w.servers:
        s.stop()


def exporters_source(settings: ScalerSettings) -> ExportersSource:
    sources = Sources(settings, clock=lambda: NOW, background=False)
    source, _ = sources.open(parse_metadata({"model": MODEL}))
    assert isinstance(source, ExportersSource)
    return source


def test_with_the_ca_the_scaler_reads_tls_exporters_over_https(world: World) -> None:
    src = exporters_source(ScalerSettings(exporters=(f"127.0.0.1:{world.port}",), exporters_tls_ca=str(world.ca.cert)))
    try:
        (obs,) = src.collect_once()
        assert obs == observations_from_exposition(pod_a(), now=NOW)[0]
        assert src.status().targets == {f"https://127.0.0.1:{world.port}/metrics": None}
    finally:
        src.stop()


def test_without_the_ca_or_with_another_the_exporter_is_an_error_not_data(world: World) -> None:
    for settings in (ScalerSettings(exporters=(f"127.0.0.1:{world.port}",)),  # plain http to a TLS port
                     ScalerSettings(exporters=(f"127.0.0.1:{world.rogue_port}",), exporters_tls_ca=str(world.ca.cert))):
        src = exporters_source(settings)
        try:
            assert src.collect_once() == []
            ((url, error),) = src.status().targets.items()
            assert error is not None and "connection" in error, (url, error)
        finally:
            src.stop()


def test_the_headless_service_resolves_to_https_urls_by_pod_ip() -> None:
    def getaddrinfo(*_: object, **__: object) -> list[tuple[object, object, object, object, tuple[object, ...]]]:
        return [(0, 0, 0, "", ("10.0.0.7", 9400)), (0, 0, 0, "", ("fd00::8", 9400, 0, 0))]

    resolve = dns_targets(SERVICE_DNS, 9400, getaddrinfo=getaddrinfo, scheme="https")
    assert resolve() == ["https://10.0.0.7:9400/metrics", "https://[fd00::8]:9400/metrics"]


def test_the_warm_planner_posts_over_https_with_the_token(world: World) -> None:
    planner = WarmPlanner(token_file=str(world.token), background=False, tls=ca_client_context(str(world.ca.cert)).get)
    view = NodeView("node-1", f"https://127.0.0.1:{world.port}")
    assert planner._post(view, str(world.models / "m"), TOKEN) == "accepted"
    assert planner._post(view, str(world.models / "m"), "wrong") == "http_401"
    system_cas = WarmPlanner(token_file=str(world.token), background=False)  # no CA: the system's, name checked
    assert system_cas._post(view, str(world.models / "m"), TOKEN) == "connection"
    plain = NodeView("node-1", f"http://127.0.0.1:{world.port}")
    assert planner._post(plain, str(world.models / "m"), TOKEN) == "connection"


def test_a_missing_ca_file_is_one_start_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    scaler_cli.add_arguments(parser)
    args = parser.parse_args(["--no-kube", "--http-address=127.0.0.1:0", "--grpc-address=127.0.0.1:0",
                              "--exporters=127.0.0.1:1", f"--exporters-tls-ca={tmp_path / 'nope.crt'}"])
    assert scaler_cli.run(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "nope.crt" in err and "--exporters-tls-ca" in err, err
