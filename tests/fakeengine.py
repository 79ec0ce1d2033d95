"""Fake inference engines for exporter tests: real HTTP servers on loopback serving /metrics bodies.

A `FakeEngine` serves a fixture body, and can be switched at any time to misbehave the ways real
engines do: hang after accepting, trickle bytes, answer 500, stream a body of many megabytes, or be
gone (connection refused). Switching in place keeps the URL, so one target can go from good to bad.
"""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

Mode = Literal["serve", "hang", "trickle", "status", "huge"]


class FakeEngine:
    def __init__(self, body: str | bytes = b"", path: str = "/metrics") -> None:
        self.body = body.encode() if isinstance(body, str) else body
        self.path = path
        self.mode: Mode = "serve"
        self.status = 500
        self.huge_bytes = 50 * 1024 * 1024
        self.huge_declares_length = False
        self.hits = 0
        self._release = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                fake.hits += 1
                if self.path.split("?")[0] != fake.path:
                    return self._plain(404, b"not found\n")
                mode = fake.mode
                try:
                    if mode == "serve":
                        self._plain(200, fake.body)
                    elif mode == "status":
                        self._plain(fake.status, b"engine error\n")
                    elif mode == "hang":  # accepted and read the request; never answers
                        fake._release.wait()
                    elif mode == "trickle":  # a complete header, then one byte at a time
                        self._head(200, len(fake.body))
                        for i in range(len(fake.body)):
                            if fake._release.wait(0.05):
                                return
                            self.wfile.write(fake.body[i:i + 1])
                            self.wfile.flush()
                    elif mode == "huge":
                        self._huge()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the exporter hung up on us, as it should

            def _huge(self) -> None:
                line = b'vllm:num_requests_running{engine="0",model_name="m"} 1.0\n'
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                if fake.huge_declares_length:
                    self.send_header("Content-Length", str(fake.huge_bytes))
                else:
                    self.send_header("Connection", "close")  # no length: the body ends when we close
                self.end_headers()
                block = line * (1024 * 1024 // len(line))
                sent = 0
                while sent < fake.huge_bytes and not fake._release.is_set():
                    chunk = block[: fake.huge_bytes - sent]
                    self.wfile.write(chunk)
                    sent += len(chunk)
                self.close_connection = True

            def _head(self, code: int, length: int) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(length))
                self.end_headers()

            def _plain(self, code: int, body: bytes) -> None:
                self._head(code, len(body))
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    def stop(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()


def refused_url() -> str:
    """A loopback URL nothing listens on (bound, then closed: the port is free right now)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}/metrics"
