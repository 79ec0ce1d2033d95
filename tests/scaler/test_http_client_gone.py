"""A client that goes away mid-answer (a scrape cut short, Ctrl-C on a poller) costs a debug line on the
scaler's and the exporter's HTTP servers, never socketserver's traceback on stderr; other errors are logged."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from scaler_harness import FakeClock, FakeHistory, ServerThread, make_service

from keda_llm.exporter.server import create_server


class _Source:
    def exposition(self, gzipped: bool = False) -> bytes:
        return b""

    def healthy(self) -> bool:
        return True


def _raise_into(handle_error: Callable[[Any, Any], None], err: Exception) -> None:
    try:
        raise err
    except Exception:
        handle_error(None, ("127.0.0.1", 5555))


@pytest.mark.parametrize("part", ["scaler", "exporter"])
def test_a_client_gone_is_a_debug_line_and_a_bug_is_logged(part: str, capsys: pytest.CaptureFixture[str],
                                                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    if part == "scaler":
        st = ServerThread(make_service({("llm", "m"): FakeHistory(desired=1)}, FakeClock()))
        assert st.server.http is not None
        handle_error, stop = st.server.http.handle_error, st.stop
    else:
        server, _ = create_server(("127.0.0.1", 0), _Source())
        server.start()
        handle_error, stop = server._httpd.handle_error, server.stop
    try:
        for gone in (ConnectionResetError(104, "Connection reset by peer"), BrokenPipeError(32, "Broken pipe")):
            _raise_into(handle_error, gone)
        assert capsys.readouterr().err == ""
        assert [r.levelno for r in caplog.records if "client went away" in r.message] == [logging.DEBUG] * 2
        _raise_into(handle_error, RuntimeError("a bug"))
        (bug,) = [r for r in caplog.records if "request failed" in r.message]
        assert bug.levelno == logging.ERROR and bug.exc_info is not None
    finally:
        stop()


@pytest.mark.parametrize(("length", "status"), [("abc", 400), ("-1", 400), ("100000", 413)])
def test_a_bad_content_length_is_answered_and_the_connection_closed(length: str, status: int) -> None:
    """`Content-Length: abc` logged a traceback and closed without an answer; `-1` read until the client
    closed, holding a thread (found by a review)."""
    import socket

    st = ServerThread(make_service({("llm", "m"): FakeHistory(desired=1)}, FakeClock()))
    try:
        assert st.server.http_port
        with socket.create_connection(("127.0.0.1", st.server.http_port), timeout=10) as sock:
            sock.sendall(f"POST /v1/activate/llm/chat HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n"
                         .encode())
            reply = b""
            while chunk := sock.recv(65536):  # the server closes the connection after its answer
                reply += chunk
        assert reply.startswith(f"HTTP/1.1 {status} ".encode()), reply[:80]
        assert b"Content-Length" in reply and b"an activation needs no body" in reply
    finally:
        st.stop()


def test_answers_leave_without_waiting_for_an_ack() -> None:
    """Headers and body are two writes: with Nagle's algorithm on, a kept-alive client waited for its delayed
    ACK, about 40 ms an answer (0.3 ms with it off, measured by the review's script)."""
    from keda_llm.scaler.server import _HTTPHandler

    assert _HTTPHandler.disable_nagle_algorithm is True


@pytest.mark.parametrize("part", ["scaler", "exporter"])
@pytest.mark.parametrize("sends", [b"", b"GET /metr", b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"],
                         ids=["nothing", "half a request line", "one request, then idles"])
def test_a_silent_connection_is_closed_and_its_thread_freed(part: str, sends: bytes,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Thread-per-connection servers: a client that connects and then says nothing (or stops mid-request, or
    keeps an answered connection open) held its thread for ever; now for IDLE_TIMEOUT_S (120 s, shortened
    here), then the server closes the connection and still serves the next client."""
    import socket
    import threading
    import time

    from keda_llm.common.httpserver import IDLE_TIMEOUT_S
    from keda_llm.exporter.server import _Handler
    from keda_llm.scaler.server import _HTTPHandler

    assert _Handler.timeout == _HTTPHandler.timeout == IDLE_TIMEOUT_S == 120.0
    monkeypatch.setattr(_Handler, "timeout", 0.5)
    monkeypatch.setattr(_HTTPHandler, "timeout", 0.5)
    if part == "scaler":
        st = ServerThread(make_service({("llm", "m"): FakeHistory(desired=1)}, FakeClock()))
        port, stop = st.server.http_port, st.stop
    else:
        server, port = create_server(("127.0.0.1", 0), _Source())
        server.start()
        stop = server.stop
    try:
        threads = threading.active_count()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(sends)
            started = time.monotonic()
            reply = b""
            while chunk := sock.recv(65536):  # until the server closes
                reply += chunk
            took = time.monotonic() - started
        assert 0.4 <= took < 5.0
        assert reply.startswith(b"HTTP/1.1 ") if sends.endswith(b"\r\n\r\n") else reply == b""
        deadline = time.monotonic() + 5
        while threading.active_count() > threads and time.monotonic() < deadline:
            time.sleep(0.05)
        assert threading.active_count() <= threads  # the connection's thread ended
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 ")
    finally:
        stop()
