"""The shared bounded GET (common/httpget.py) and its two callers, against real loopback servers."""

from __future__ import annotations

import gzip
import hashlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from prometheus_server import BodyServer, refused_address

from keda_llm.common.httpget import ERROR_PREFIX_BYTES, FETCH_REASONS, FetchError, fetch
from keda_llm.exporter.collect import fetch as exporter_fetch
from keda_llm.exporter.errors import REASONS, ScrapeError
from keda_llm.exporter.server import create_server
from keda_llm.scaler.sources.errors import SOURCE_REASONS, SourceError
from keda_llm.scaler.sources.exposition import parse_exposition
from keda_llm.scaler.sources.http import fetch as scaler_fetch

TIMEOUT_S = 0.5
#: A correctness bound, not a speed figure: a deadline of 0.5 s must not turn into seconds. The
#: dripping servers below keep going for 10x the deadline, so a fetch that ignores it lands far outside.
BOUND_S = 3 * TIMEOUT_S


class DripServer:
    """For each connection (on its own thread): reads the request, sends `head` at once, then drips `tail`
    `step` bytes every `every` seconds (for at most 10x TIMEOUT_S), then closes. `requests` holds
    each request as received (request line and headers)."""

    def __init__(self, head: bytes, tail: bytes, step: int = 1, every: float = 0.1) -> None:
        self.head, self.tail, self.step, self.every = head, tail, step, every
        self.requests: list[bytes] = []
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}/metrics"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer_and_close, args=(conn,), daemon=True).start()

    def _answer_and_close(self, conn: socket.socket) -> None:
        with conn:
            self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        request = b""
        while b"\r\n\r\n" not in request:
            data = conn.recv(4096)
            if not data:
                return
            request += data
        self.requests.append(request)
        try:
            conn.sendall(self.head)
            started = time.monotonic()
            for i in range(0, len(self.tail), self.step):
                if self._stop.wait(self.every) or time.monotonic() - started > 10 * TIMEOUT_S:
                    return
                conn.sendall(self.tail[i:i + self.step])
        except OSError:
            return  # the client hung up, as it should

    def close(self) -> None:
        self._stop.set()
        self._listener.close()


@pytest.fixture
def drips() -> Iterator[list[DripServer]]:
    made: list[DripServer] = []
    yield made
    for s in made:
        s.close()


def server(drips: list[DripServer], head: bytes, tail: bytes = b"", step: int = 1, every: float = 0.1) -> DripServer:
    made = DripServer(head, tail, step, every)
    drips.append(made)
    return made


def answer(status: str, body: bytes, *extra: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", "Content-Type: text/plain", f"Content-Length: {len(body)}", *extra, "", ""]
    return "\r\n".join(lines).encode() + body


def chunked(*parts: bytes) -> bytes:
    return b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in parts) + b"0\r\n\r\n"


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
BODY = b"x" * 1000
Caller = Callable[[str, float], object]
#: The shared fetch and the two callers that wrap it: the same deadline whichever side asks.
CALLERS: dict[str, Caller] = {
    "httpget": lambda url, t: fetch(url, timeout=t, max_bytes=1 << 20),
    "scaler": lambda url, t: scaler_fetch(url, timeout_s=t, max_bytes=1 << 20),
    "exporter": lambda url, t: exporter_fetch(url, t, 1 << 20),
}
ERRORS = (FetchError, SourceError, ScrapeError)


def timed_failure(call: Caller, url: str) -> tuple[str, float]:
    started = time.monotonic()
    with pytest.raises(ERRORS) as err:
        call(url, TIMEOUT_S)
    took = time.monotonic() - started
    error = err.value
    assert isinstance(error, ERRORS)
    return error.reason, took


@pytest.mark.parametrize("caller", sorted(CALLERS))
def test_the_deadline_holds_when_the_body_drips(drips: list[DripServer], caller: str) -> None:
    # headers at once, then 10 bytes/s of a 1,000-byte body: each read is quick, the whole is 100 s
    url = server(drips, b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", BODY).url
    reason, took = timed_failure(CALLERS[caller], url)
    assert reason == "timeout"
    assert took < BOUND_S, f"{caller}: fetch(timeout={TIMEOUT_S}s) held on for {took:.1f}s"


@pytest.mark.parametrize("caller", sorted(CALLERS))
def test_the_deadline_holds_when_the_status_line_and_headers_drip(drips: list[DripServer], caller: str) -> None:
    url = server(drips, b"", answer("200 OK", b"ok")).url
    reason, took = timed_failure(CALLERS[caller], url)
    assert reason == "timeout"
    assert took < BOUND_S, f"{caller}: fetch(timeout={TIMEOUT_S}s) held on for {took:.1f}s"


def test_every_read_checks_the_deadline_the_status_line_included(drips: list[DripServer]) -> None:
    """Deterministic twin of the timed tests: a clock that passes the deadline right after the
    deadline is set fails the first read, although the server answers at once."""
    url = server(drips, answer("200 OK", b"ok")).url
    ticks = iter([0.0])
    with pytest.raises(FetchError) as err:
        fetch(url, timeout=5.0, max_bytes=100, clock=lambda: next(ticks, 10.0))
    assert (err.value.reason, err.value.message) == ("timeout", "no complete answer within 5s")


def test_status_and_exact_body(drips: list[DripServer]) -> None:
    url = server(drips, answer("203 Non-Authoritative Information", b"hello\n")).url
    assert fetch(url, timeout=2.0, max_bytes=100, ok_statuses=(200, 203)) == (203, b"hello\n")
    chunks = server(drips, CHUNKED_HEAD + chunked(b"one ", b"two"), every=0.0).url
    assert fetch(chunks, timeout=2.0, max_bytes=100) == (200, b"one two")


def test_request_line_params_and_basic_auth_from_the_url(drips: list[DripServer]) -> None:
    made = server(drips, answer("200 OK", b"{}"))
    port = made.url.split(":")[2].split("/")[0]
    url = f"http://u:p@127.0.0.1:{port}/api/v1/query?a=1"
    assert fetch(url, timeout=2.0, max_bytes=100, params={"query": "sum(x) > 0"}, headers={"X-Scope": "t1"}) \
        == (200, b"{}")
    lines = made.requests[0].decode().split("\r\n")
    # urlencode: "(" -> %28, ")" -> %29, " " -> +, ">" -> %3E; base64("u:p") = "dTpw"
    assert lines[0] == "GET /api/v1/query?a=1&query=sum%28x%29+%3E+0 HTTP/1.1"
    assert {"Authorization: Basic dTpw", "X-Scope: t1", f"Host: 127.0.0.1:{port}"} <= set(lines[1:])


def test_a_refused_status_reads_only_the_start_of_its_body(drips: list[DripServer]) -> None:
    # a 500 that promises 10 MB, sends 300 bytes and stalls: the error is http_status at once, not a
    # timeout after reading (or waiting for) the rest
    head = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 10000000\r\n\r\n" + b"e" * 300
    url = server(drips, head, b"e" * 1000, every=1.0).url
    with pytest.raises(FetchError) as err:
        fetch(url, timeout=60.0, max_bytes=1 << 30)
    assert (err.value.reason, err.value.status) == ("http_status", 500)
    assert err.value.message == f"HTTP 500: {b'e' * ERROR_PREFIX_BYTES!r}"
    assert err.value.body_prefix == b"e" * ERROR_PREFIX_BYTES  # the bytes themselves, for a caller to show


def test_a_refused_status_whose_body_stalls_is_still_http_status(drips: list[DripServer]) -> None:
    head = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 100\r\n\r\nbusy"
    url = server(drips, head, b"." * 96, every=10.0).url
    with pytest.raises(SourceError) as err:
        scaler_fetch(url, timeout_s=TIMEOUT_S, max_bytes=1 << 20)
    assert str(err.value) == f"http_status: {url}: HTTP 503: b'busy'"
    with pytest.raises(ScrapeError) as exp:
        exporter_fetch(url, TIMEOUT_S, 1 << 20)
    assert str(exp.value) == "http_status: HTTP 503: busy"  # the answer's first line, as the engine said it


def test_too_large_by_length_and_by_counting(drips: list[DripServer]) -> None:
    declared = server(drips, answer("200 OK", b"y" * 101)).url
    with pytest.raises(FetchError) as err:
        fetch(declared, timeout=2.0, max_bytes=100)
    assert (err.value.reason, err.value.message) == ("too_large", "Content-Length 101 > 100 bytes")
    counted = server(drips, CHUNKED_HEAD + chunked(b"y" * 60, b"y" * 60), every=0.0).url
    with pytest.raises(FetchError) as err:
        fetch(counted, timeout=2.0, max_bytes=100)
    assert (err.value.reason, err.value.message) == ("too_large", "body passed 100 bytes")


@pytest.mark.parametrize(("url", "start"), [
    ("ftp://127.0.0.1/metrics", "bad URL 'ftp://127.0.0.1/metrics': not an http:// or https:// URL"),
    ("http://127.0.0.1:port/metrics", "bad URL 'http://127.0.0.1:port/metrics': Port could not be cast"),
    ("127.0.0.1:9400/metrics", "bad URL '127.0.0.1:9400/metrics': not an http:// or https:// URL"),
    ("http://REFUSED/metrics", "ConnectionRefusedError: "),
])
def test_connection_failures(url: str, start: str) -> None:
    url = url.replace("REFUSED", refused_address())
    with pytest.raises(FetchError) as err:
        fetch(url, timeout=2.0, max_bytes=100)
    assert err.value.reason == "connection"
    assert err.value.message.startswith(start)


def test_an_http_1_0_server_that_closes_after_the_body() -> None:
    plain = BodyServer(b"llm_requests_running 1\n")
    try:
        assert fetch(plain.url, timeout=2.0, max_bytes=100) == (200, b"llm_requests_running 1\n")
    finally:
        plain.close()


def gzipped(drips: list[DripServer], data: bytes) -> DripServer:
    head = (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: " + str(len(data)).encode()
            + b"\r\n\r\n")
    return server(drips, head + data)


def pseudo_random(n: int) -> bytes:
    """`n` incompressible bytes, the same on every run (a SHA-256 chain)."""
    out = bytearray()
    block = b"seed"
    while len(out) < n:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:n])


@pytest.mark.parametrize("text", [
    b"",
    b"a" * (3 * 65536),  # exactly three 64 KiB pieces: the last full piece may leave output inside zlib
    pseudo_random(300_001),  # incompressible: arrives in several socket reads
], ids=["empty", "whole-pieces", "incompressible"])
def test_gzip_round_trips_whatever_the_sizes(drips: list[DripServer], text: bytes) -> None:
    data = gzip.compress(text)
    url = gzipped(drips, data).url
    assert fetch(url, timeout=5.0, max_bytes=max(len(text), len(data)), accept_gzip=True) == (200, text)


def test_gzip_asked_for_and_decompressed_only_when_the_caller_wants_it(drips: list[DripServer]) -> None:
    text = b"llm_requests_running 1\n" * 100
    made = gzipped(drips, gzip.compress(text))
    assert fetch(made.url, timeout=2.0, max_bytes=len(text), accept_gzip=True) == (200, text)
    assert "Accept-Encoding: gzip" in made.requests[0].decode().split("\r\n")
    raw = fetch(made.url, timeout=2.0, max_bytes=1 << 20)[1]  # not asked: bytes as they came
    assert "Accept-Encoding: identity" in made.requests[1].decode().split("\r\n")
    assert gzip.decompress(raw) == text


@pytest.mark.parametrize(("data", "reason", "message"), [
    # 10 MB of zeros gzip to ~10 KB: the cap holds on what they expand to
    (gzip.compress(b"0" * 10_000_000), "too_large", "body passed 1048576 bytes"),
    (b"plain text, labelled gzip", "connection", "gzip body does not decompress: Error -3 while decompressing"),
    (gzip.compress(b"llm_requests_running 1\n" * 100)[:-12], "connection", "gzip body ends before its end"),
])
def test_gzip_bodies_that_are_too_large_or_broken(drips: list[DripServer], data: bytes, reason: str,
                                                   message: str) -> None:
    url = gzipped(drips, data).url
    with pytest.raises(FetchError) as err:
        fetch(url, timeout=2.0, max_bytes=1 << 20, accept_gzip=True)
    assert err.value.reason == reason
    assert err.value.message.startswith(message)


def test_the_scaler_reads_the_real_exporter_server_gzipped() -> None:
    """exporter/server.py answers gzip when asked; the scaler asks and reads the same exposition."""
    body = "".join(f'llm_requests_running{{model="m",engine="vllm",role="unified",namespace="llm",pod="p{i}",'
                   f'node="n"}} {i}\n' for i in range(50)).encode()

    class Rendered:
        def __init__(self) -> None:
            self.asked_gzip: list[bool] = []

        def exposition(self, gzipped: bool = False) -> bytes:
            self.asked_gzip.append(gzipped)
            return gzip.compress(body) if gzipped else body

        def healthy(self) -> bool:
            return True

    source = Rendered()
    http_server, port = create_server(("127.0.0.1", 0), source)
    http_server.start()
    try:
        status, got = scaler_fetch(f"http://127.0.0.1:{port}/metrics", timeout_s=2.0, max_bytes=1 << 20)
    finally:
        http_server.stop()
    assert (status, got, source.asked_gzip) == (200, body, [True])
    assert parse_exposition(got.decode()).replicas[("llm", "m", "p7")]["running"] == 7.0


def test_fetch_reasons_are_reasons_on_both_sides() -> None:
    """The exporter and the scaler pass a FetchError's reason on as their own."""
    assert set(FETCH_REASONS) == {"timeout", "connection", "http_status", "too_large"}
    assert set(FETCH_REASONS) <= set(REASONS)
    assert set(FETCH_REASONS) <= set(SOURCE_REASONS)
