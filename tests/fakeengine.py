"""Fake inference engines for exporter tests: real HTTP servers on loopback serving /metrics bodies.

A `FakeEngine` serves a fixture body, and can be switched at any time to misbehave the ways real
engines do: hang after accepting, trickle bytes, answer 500, stream a body of many megabytes, or be
gone (connection refused). Switching in place keeps the URL, so one target can go from good to bad.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from httpstub import HttpStub, Request, Response, free_port

Mode = Literal["serve", "hang", "trickle", "status", "huge"]

EXPOSITION = "text/plain; version=0.0.4; charset=utf-8"
HUGE_LINE = b'vllm:num_requests_running{engine="0",model_name="m"} 1.0\n'


class FakeEngine:
    def __init__(self, body: str | bytes = b"", path: str = "/metrics") -> None:
        self.body = body.encode() if isinstance(body, str) else body
        self.path = path
        self.mode: Mode = "serve"
        self.status = 500
        self.huge_bytes = 50 * 1024 * 1024
        self.huge_declares_length = False
        self._stub = HttpStub(self._answer)

    def _answer(self, req: Request) -> Response | None:
        if req.path != self.path:
            return Response(404, b"not found\n", EXPOSITION)
        mode = self.mode
        if mode == "status":
            return Response(self.status, b"engine error\n", EXPOSITION)
        if mode == "hang":  # accepted and read the request; never answers
            self._stub.closing.wait()
            return None
        if mode == "trickle":  # a complete header, then one byte at a time
            return Response(200, self._trickle(self.body), EXPOSITION, length=len(self.body))
        if mode == "huge":  # without a length the body ends when the connection closes
            return Response(200, self._huge(self.huge_bytes), "text/plain; version=0.0.4",
                            length=self.huge_bytes if self.huge_declares_length else None)
        return Response(200, self.body, EXPOSITION)

    def _trickle(self, body: bytes) -> Iterator[bytes]:
        for i in range(len(body)):
            if self._stub.closing.wait(0.05):
                return
            yield body[i:i + 1]

    def _huge(self, total: int) -> Iterator[bytes]:
        block = HUGE_LINE * (1024 * 1024 // len(HUGE_LINE))
        sent = 0
        while sent < total and not self._stub.closing.is_set():
            chunk = block[: total - sent]
            yield chunk
            sent += len(chunk)

    @property
    def hits(self) -> int:
        return len(self._stub.requests)

    @property
    def port(self) -> int:
        return self._stub.port

    @property
    def url(self) -> str:
        return f"{self._stub.url}{self.path}"

    def stop(self) -> None:
        self._stub.close()


def refused_url() -> str:
    """A loopback URL nothing listens on (bound, then closed: the port is free right now)."""
    return f"http://127.0.0.1:{free_port()}/metrics"
