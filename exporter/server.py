"""HTTP edge: `/metrics` (the last rendered cycle), `/healthz` and, when configured, `POST /v1/warm`
(exporter/warm.py), on a threaded server; with `tls` (config `tls:`, flags --tls-cert/--tls-key) every
connection is TLS, its certificate re-read when the files change (keda_llm.common.tls).

Handlers only read what the collector already rendered, so a scrape costs a memory copy no matter
how many engines are slow. `create_server` binds (port 0 in tests) apart from serving, and
`MetricsServer.stop` shuts down gracefully: in-flight requests finish, then the socket closes.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from keda_llm.common.httpserver import IDLE_TIMEOUT_S, accepts_gzip
from keda_llm.common.tls import ReloadingContext, TLSAcceptMixin
from keda_llm.exporter.warm import Warmer, WarmError

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Source(Protocol):
    """What the server reads: satisfied by exporter.collect.Collector."""

    def exposition(self, gzipped: bool = False) -> bytes: ...

    def healthy(self) -> bool: ...


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive: Prometheus reuses connections
    timeout = IDLE_TIMEOUT_S  # a silent connection is closed (common/httpserver.py)
    # Headers and body go out in two writes; with Nagle on, a kept-alive scrape waits ~40 ms for the
    # peer's delayed ACK before the body leaves (measured 43-48 ms per scrape vs 0.3-0.5 ms).
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        source = self.server.source
        if path == "/metrics":
            gzipped = accepts_gzip(self.headers.get("Accept-Encoding"))
            self._send(200, source.exposition(gzipped), CONTENT_TYPE, gzipped)
        elif path in ("/healthz", "/readyz", "/livez"):
            ok = source.healthy()
            self._send(200 if ok else 503, b"ok\n" if ok else b"no collection cycle completed recently\n")
        elif path == WARM_PATH:
            warmer = self.server.warmer
            if warmer is None or not warmer.config.enabled:
                self._json(404, {"error": "warm is not configured on this exporter"})
                return
            try:
                warmer.authorize(self.headers.get("Authorization"))
            except WarmError as err:
                self._json(err.status, {"error": str(err)})
                return
            self._json(200, {"jobs": warmer.jobs()})
        elif path == "/":
            self._send(200, b'<html><body><a href="/metrics">/metrics</a> <a href="/healthz">/healthz</a>'
                       b"</body></html>\n", "text/html; charset=utf-8")
        else:
            self._send(404, b"not found\n")

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        declared = (self.headers.get("Content-Length") or "0").strip()
        if not (declared.isascii() and declared.isdigit()):  # `-1` would read until the client hangs up
            self.close_connection = True
            self._json(400, {"error": f"Content-Length {declared!r} is not a length"})
            return
        length = int(declared) if len(declared) <= 20 else MAX_REQUEST_BYTES + 1  # int() refuses 4,300+ digits
        if length > MAX_REQUEST_BYTES:
            self.close_connection = True
            self._json(413, {"error": f"request body over {MAX_REQUEST_BYTES} bytes"})
            return
        body = self.rfile.read(length) if length else b""
        if path != WARM_PATH:
            self._json(404, {"error": f"no such path {path!r}"})
            return
        warmer = self.server.warmer
        try:
            if warmer is None:
                raise WarmError(404, "warm is not configured on this exporter (warm.directories)")
            try:
                request = json.loads(body or b"{}")
            except ValueError:
                request = None
            requested = request.get("path") if isinstance(request, dict) else None
            job = warmer.submit(self.headers.get("Authorization"), requested)
        except WarmError as err:
            self._json(err.status, {"error": str(err)})
            return
        self._json(202, job.as_json())

    def _json(self, code: int, obj: Any) -> None:
        self._send(code, (json.dumps(obj, sort_keys=True) + "\n").encode(), "application/json")

    def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8", gzipped: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if gzipped:
            self.send_header("Content-Encoding", "gzip")
        if ctype == CONTENT_TYPE:  # the same URL answers gzip or not by this header: caches must key on it
            self.send_header("Vary", "Accept-Encoding")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s " + format, self.address_string(), *args)


WARM_PATH = "/v1/warm"
MAX_REQUEST_BYTES = 64 * 1024


class _Server(TLSAcceptMixin, ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A scraper that went away mid-answer is routine: a debug line, not a traceback on stderr."""
        err = sys.exc_info()[1]
        if isinstance(err, ConnectionError | TimeoutError):
            log.debug("http %s: client went away: %s", client_address[0], err)
            return
        log.exception("http %s: request failed", client_address[0])

    def __init__(self, address: tuple[str, int], source: Source, warmer: Warmer | None = None,
                 tls: ReloadingContext | None = None) -> None:
        self.source = source
        self.warmer = warmer
        self.tls = tls
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)


class MetricsServer:
    """A bound server; `start()` serves in a thread, `stop()` shuts it down."""

    def __init__(self, address: tuple[str, int], source: Source, warmer: Warmer | None = None,
                 tls: ReloadingContext | None = None) -> None:
        self._httpd = _Server(address, source, warmer, tls)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:  # shutdown() waits for serve_forever: never started, it waited for ever
            self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(5.0)


def create_server(address: tuple[str, int], source: Source, warmer: Warmer | None = None, *,
                  tls: ReloadingContext | None = None) -> tuple[MetricsServer, int]:
    """Bind `address` (port 0 picks a free one); returns the server and its port. `tls`: serve https."""
    server = MetricsServer(address, source, warmer, tls)
    return server, server.port

