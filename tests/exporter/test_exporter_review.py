"""Regressions found in a review of the exporter: one test per defect, each failing before its fix."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakeengine import refused_url

from keda_llm.exporter.collect import Collector
from keda_llm.exporter.config import parse_config
from keda_llm.exporter.degraded import replica_reasons
from keda_llm.exporter.discovery import Discovery, KubeClient
from keda_llm.exporter.engines import normalize
from keda_llm.exporter.fake_nvml import FakeNvml, fake_gpus
from keda_llm.exporter.model import without_userinfo
from keda_llm.exporter.nvml import NvmlCollector
from keda_llm.exporter.parse import parse
from keda_llm.exporter.render import render
from keda_llm.exporter.server import create_server


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- NVML: a GPU that goes down after a critical XID -----------------------------------------------------


def test_a_gpu_down_after_a_critical_xid_keeps_its_xid_count_and_hold() -> None:
    # An XID 48 (double-bit ECC) is read, then NVML answers GpuIsLost for the GPU: while it is down, its
    # XID counter and last code stay, and the replica on it stays `gpu_xid` for the hold time (before:
    # every XID field went to None, so llm_replica_degraded{reason="gpu_xid"} fell to 0 the moment the
    # GPU became unreadable, and the counter series vanished).
    gpus = fake_gpus(2)
    clock = Clock()
    collector = NvmlCollector(FakeNvml(gpus), clock=clock, xid_hold_s=600.0)
    collector.collect()
    gpus[1].xid_events.append(48)
    clock.now += 5
    assert collector.collect()[1].xid_active == 1.0
    gpus[1].lost = True
    for _ in range(2):  # the cycle that finds it lost, and the next (re-enumerated, unreachable)
        clock.now += 5
        down = collector.collect()[1]
        assert not down.up and down.memory_used_bytes is None
        assert (down.xid_errors_total, down.last_xid, down.xid_active) == (1.0, 48.0, 1.0)
        down.attribution = {"namespace": "llm", "pod": "llama-1", "container": "vllm"}
        assert replica_reasons([down])[("llm", "llama-1")]["gpu_xid"] is True
    clock.now += 600  # past the hold: released, the count stays
    down = collector.collect()[1]
    assert (down.up, down.xid_errors_total, down.last_xid, down.xid_active) == (False, 1.0, 48.0, 0.0)


def test_the_xid_pending_as_a_gpu_falls_off_the_bus_is_read_on_the_cycle_it_is_lost() -> None:
    # XID 79 is raised as the GPU falls off the bus, so the cycle that finds the GPU lost is the one with it
    # pending: before, a down GPU's event set was never read, and the XID that says why went unseen
    gpus = fake_gpus(2)
    clock = Clock()
    collector = NvmlCollector(FakeNvml(gpus), clock=clock, xid_hold_s=600.0)
    collector.collect()
    gpus[1].xid_events.append(79)
    gpus[1].lost = True
    clock.now += 5
    down = collector.collect()[1]
    assert not down.up
    assert (down.xid_errors_total, down.last_xid, down.xid_active) == (1.0, 79.0, 1.0)
    clock.now += 5  # the next cycle: nothing pending, the set answers GpuIsLost; the XID and its hold stay
    down = collector.collect()[1]
    assert (down.up, down.xid_errors_total, down.last_xid, down.xid_active) == (False, 1.0, 79.0, 1.0)


def test_a_gpu_lost_without_an_event_set_still_has_no_xid_series() -> None:
    gpus = fake_gpus(1)
    gpus[0].unsupported.add("nvmlDeviceRegisterEvents")  # no critical XID events on this GPU
    collector = NvmlCollector(FakeNvml(gpus), clock=Clock())
    collector.collect()
    gpus[0].lost = True
    down = collector.collect()[0]
    assert (down.up, down.xid_errors_total, down.last_xid, down.xid_active) == (False, None, None, None)


# -- Kubernetes discovery: an API server that closes mid-body ------------------------------------------


@pytest.fixture
def cut_short_api_server() -> Iterator[str]:
    """An API server that promises 1000 bytes of PodList and closes after 30."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                             b'{"kind": "PodList", "items": [')

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    server.close()
    thread.join(2.0)


def test_a_pod_list_cut_short_is_a_counted_discovery_error(cut_short_api_server: str, tmp_path: Path) -> None:
    # Before: http.client.IncompleteRead escaped list_pods and refresh(): not counted in
    # llm_exporter_discovery_errors_total, a traceback in the loop, and Collector.start() (which refreshes
    # once before the loops) raised, so the exporter did not start.
    token = tmp_path / "token"
    token.write_text("t")
    client = KubeClient(cut_short_api_server, str(token), str(tmp_path / "no-ca.crt"), timeout=2.0)
    cfg = parse_config({"node_name": "n", "kubernetes": {"enabled": True}}, env={})
    discovery = Discovery(cfg, client.list_pods)
    discovery.refresh()
    assert discovery.errors == 1
    assert "listing pods on n" in discovery.last_error


# -- the parser: a blank between the metric name and its label set ----------------------------------


@pytest.mark.parametrize("line", [
    'vllm:num_requests_running {engine="0",model_name="m"} 3',
    'vllm:num_requests_running {engine="0",model_name="m"} 3 1700000000000',
    'vllm:num_requests_running\t{engine="0",model_name="m"} 3',
])
def test_a_blank_before_the_label_set_is_read_as_the_tolerant_reader_reads_it(line: str) -> None:
    # The text format allows blanks between the tokens (Go's expfmt and Prometheus skip them before '{'),
    # and the module promises the tolerant reader for them. Before: the fast regex took `{...}` as the
    # value and refused the line ("bad value").
    for wanted in (None, {"vllm:num_requests_running"}.__contains__):
        samples = parse(line + "\n", wanted)
        assert [(s.name, s.labels, s.value) for s in samples] == [
            ("vllm:num_requests_running", {"engine": "0", "model_name": "m"}, 3.0)]


# -- credentials in a target URL -------------------------------------------------------------------------


def test_credentials_in_a_target_url_stay_out_of_labels_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    # The fetch sends `user:password@` as Basic auth (keda_llm.common.httpget). Before: the `pod` label
    # defaulted to the URL's netloc, credentials included, on every llm_* series of the target; the
    # `target` label of the health series and the scrape-failure log carried the whole URL.
    url = refused_url().replace("://", "://scraper:s3cret@")
    cfg = parse_config({"node_name": "n", "targets": [url]}, env={})
    (target,) = cfg.targets
    assert target.pod == url.split("@", 1)[1].split("/", 1)[0]  # host:port, as documented
    collector = Collector(cfg, Discovery(cfg), normalize, render, clock=Clock())
    with caplog.at_level(logging.WARNING, logger="keda_llm.exporter.collect"):
        collector.run_cycle()
    text = collector.exposition().decode()
    assert 'llm_engine_up{' in text and "llm_exporter_scrape_errors_total{" in text
    assert "s3cret" not in text and "scraper" not in text
    assert caplog.records and "s3cret" not in caplog.text
    collector.stop()


@pytest.mark.parametrize(("url", "shown"), [
    ("http://u:p@10.0.0.5:8000/metrics", "http://10.0.0.5:8000/metrics"),
    ("https://token@[fd00::5]:8443/m?x=a@b", "https://[fd00::5]:8443/m?x=a@b"),
    ("http://10.0.0.5:8000/metrics?next=a@b", "http://10.0.0.5:8000/metrics?next=a@b"),
    ("http://10.0.0.5:8000/metrics", "http://10.0.0.5:8000/metrics"),
])
def test_without_userinfo(url: str, shown: str) -> None:
    assert without_userinfo(url) == shown


# -- the exporter's HTTP edge: a POST with a Content-Length that is not a length ------------------------


class _Source:
    def exposition(self, gzipped: bool = False) -> bytes:
        return b"llm_x 1\n"

    def healthy(self) -> bool:
        return True


@pytest.mark.parametrize(("length", "status"), [("-1", 400), ("abc", 400), ("1e3", 400), (" 5x", 400),
                                                ("9" * 5000, 413)])
def test_a_post_with_a_malformed_content_length_is_answered_at_once(length: str, status: int) -> None:
    # Before: `-1` read the socket to its end (the connection stays open: the handler waited out the
    # 120 s idle timeout, and the client with it); `abc`, and a length of more digits than int() takes
    # (4,300), raised ValueError in the handler (a logged traceback, the connection dropped without an answer).
    server, port = create_server(("127.0.0.1", 0), _Source())
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5.0) as conn:
            conn.sendall(f"POST /v1/warm HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode())
            answer = conn.recv(4096)
        assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer
        # the exporter still serves /metrics afterwards
        with socket.create_connection(("127.0.0.1", port), timeout=5.0) as conn:
            conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert conn.recv(4096).startswith(b"HTTP/1.1 200 ")
    finally:
        server.stop()


@pytest.mark.parametrize(("accept", "gzipped"), [("gzip;q=0", False), ("gzip", True), ("br", False)])
def test_metrics_are_gzipped_only_for_a_client_that_accepts_gzip(accept: str, gzipped: bool) -> None:
    # `gzip;q=0` says "not gzip"; the substring test answered it with gzip, which such a client cannot read
    server, port = create_server(("127.0.0.1", 0), _GzipSource())
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5.0) as conn:
            conn.sendall(f"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: {accept}\r\n"
                         "Connection: close\r\n\r\n".encode())
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ")
        assert (b"Content-Encoding: gzip" in head) is gzipped
        assert b"Vary: Accept-Encoding" in head  # a cache keys the answer on the header that chose it
        assert body == (b"gz" if gzipped else b"llm_x 1\n")
    finally:
        server.stop()


class _GzipSource(_Source):
    def exposition(self, gzipped: bool = False) -> bytes:
        return b"gz" if gzipped else b"llm_x 1\n"


def test_a_config_whose_top_level_is_not_a_mapping_says_so() -> None:
    # was "exporter config: : ['a', 'b']: expected a mapping": an empty key name
    from keda_llm.exporter.config import ConfigError, parse_config

    with pytest.raises(ConfigError, match=r"^exporter config: \(top level\): \['a', 'b'\]: expected a mapping$"):
        parse_config(["a", "b"])
