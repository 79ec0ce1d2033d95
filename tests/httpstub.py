"""One loopback HTTP server for tests, whose answers are a function of the request.

    def answer(req: Request) -> Response | None:
        return json_response(200, {"ok": True}) if req.path == "/x" else Response(404, b"no\\n")

    with HttpStub(answer) as stub:          # serving on 127.0.0.1:<free port> until the block ends
        get(stub.url + "/x?a=1")
        assert [(r.method, r.path, r.query) for r in stub.requests] == [("GET", "/x", {"a": ["1"]})]

The function sees method, path, query, headers and body, and returns status, headers and body.
A body may be an iterable of byte chunks, written (and flushed) one at a time as the iterable
yields them: that is how a handler streams, stalls between chunks, sends megabytes, or stops
short of the Content-Length it declared. Returning None sends nothing: the connection closes
without an answer. A handler that must stall until the test ends waits on `stub.closing`, which
close() sets before it stops the server. close() also cuts every open connection, so a closed
stub answers nothing, not even on a kept-alive connection. Optional TLS from a cert/key pair.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

HOST = "127.0.0.1"


@dataclass(frozen=True)
class Request:
    """One request as the stub received it. `target` is the request line's path with its query."""

    method: str
    target: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # names as the client spelled them; header() looks up by any case
    body: bytes

    def header(self, name: str) -> str | None:
        lowered = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == lowered), None)


@dataclass
class Response:
    """status, Content-Type (None: no such header), other headers, body.

    A bytes body goes out with its Content-Length. An iterable body is streamed chunk by chunk,
    with Content-Length `length` if given; without one the answer says `Connection: close` and
    the body ends when the connection does.
    """

    status: int = 200
    body: bytes | Iterable[bytes] = b""
    content_type: str | None = "text/plain; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)
    length: int | None = None


Handler = Callable[[Request], Response | None]


def json_response(status: int, doc: Any, content_type: str = "application/json") -> Response:
    return Response(status, json.dumps(doc).encode(), content_type)


def free_port() -> int:
    """A loopback port nothing listens on right now (bound, then closed)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class HttpStub:
    """An HTTP server on 127.0.0.1:<free port>, serving from construction until close().

    `requests` holds every request received, in order; `errors` every exception the handler
    raised (each answered 500). `protocol` is the HTTP version spoken: "HTTP/1.1" keeps connections
    alive, "HTTP/1.0" closes each after its answer.
    """

    def __init__(self, handler: Handler, *, tls: tuple[str | Path, str | Path] | None = None,
                 protocol: str = "HTTP/1.1") -> None:
        self.handler = handler
        self.requests: list[Request] = []
        self.errors: list[BaseException] = []
        self.closing = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._tls: ssl.SSLContext | None = None
        if tls is not None:
            self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self._tls.load_cert_chain(str(tls[0]), str(tls[1]))
        self.protocol = protocol
        self._server = _Server(self)
        self.host = HOST
        self.port = int(self._server.server_address[1])
        self.address = f"{HOST}:{self.port}"
        self.url = f"{'https' if tls else 'http'}://{self.address}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop: release stalled handlers, stop accepting, cut open connections. Idempotent."""
        if self.closing.is_set():
            return
        self.closing.set()
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            conns = list(self._open)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> HttpStub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def _track(self, conn: socket.socket, live: bool) -> None:
        with self._lock:
            if live:
                self._open.add(conn)
            else:
                self._open.discard(conn)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, stub: HttpStub) -> None:
        self.stub = stub
        super().__init__((HOST, 0), _StubHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client hanging up or failing the TLS handshake is what many tests do on purpose


class _StubHandler(BaseHTTPRequestHandler):
    server: _Server

    def setup(self) -> None:
        stub = self.server.stub
        self.protocol_version = stub.protocol
        if stub._tls is not None:
            self.request = stub._tls.wrap_socket(self.request, server_side=True)
        stub._track(self.request, True)
        super().setup()

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.stub._track(self.connection, False)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        stub = self.server.stub
        length = int(self.headers.get("Content-Length") or 0)
        parts = urlsplit(self.path)
        request = Request(method=self.command, target=self.path, path=parts.path, query=parse_qs(parts.query),
                          headers=dict(self.headers.items()), body=self.rfile.read(length) if length else b"")
        stub._record(request)
        try:
            response = stub.handler(request)
        except Exception as exc:
            with stub._lock:
                stub.errors.append(exc)
            response = Response(500, f"stub handler failed: {type(exc).__name__}: {exc}\n".encode())
        if response is None:
            self.close_connection = True
            return
        try:
            self._send(response)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True  # the client hung up on us, as it may

    def _send(self, response: Response) -> None:
        self.send_response(response.status)
        if response.content_type is not None:
            self.send_header("Content-Type", response.content_type)
        for name, value in response.headers.items():
            self.send_header(name, value)
        body = response.body
        declared = len(body) if isinstance(body, bytes) else response.length
        if declared is not None:
            self.send_header("Content-Length", str(declared))
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command == "HEAD":
            return
        if isinstance(body, bytes):
            self.wfile.write(body)
            return
        sent = 0
        for chunk in body:
            self.wfile.write(chunk)
            self.wfile.flush()
            sent += len(chunk)
        if sent != declared:
            self.close_connection = True  # a body shorter (or longer) than declared ends the connection

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _serve
