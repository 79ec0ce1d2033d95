"""One bounded HTTP GET, shared by the exporter (engine scrapes) and the scaler (exporters, Prometheus).

Both sides need the same guarantee: the whole answer (connect, headers and body) arrives within
`timeout` seconds and holds at most `max_bytes`, or the call gives up with a reason. A socket
timeout alone bounds each read, not the answer: a server dripping a byte a second keeps every read
short and the answer endless. So every read here waits at most until the deadline (`_DeadlineReader`),
the status line and headers included, and the body is read as it arrives (`read1`), never by
waiting for a fixed-size chunk to fill.

Deliberately small: plain http.client, one connection per call, closed at the end. A small GET this
way costs about a third of the CPU of the keep-alive requests.Session the scaler used before
(bench/results/httpget.md); pooling could take off another ~0.15 ms per GET, which only a scaler
running a thousand activation queries per cycle would notice. Proxy environment variables and
redirects are not followed: every address fetched here is in-cluster and exact.
"""

from __future__ import annotations

import base64
import http.client
import io
import socket
import ssl
import time
import zlib
from collections.abc import Callable, Container, Mapping
from typing import TYPE_CHECKING, Literal, get_args
from urllib.parse import SplitResult, unquote, urlencode, urlsplit

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

FetchReason = Literal[
    "timeout",  # no complete answer (connect, headers, body) within the deadline
    "connection",  # refused, reset, DNS, TLS, a malformed answer or URL
    "http_status",  # a status the caller did not accept
    "too_large",  # the body passed max_bytes (or its Content-Length says it would)
]
FETCH_REASONS: tuple[FetchReason, ...] = get_args(FetchReason)

#: How much of a refused answer's body goes into the error: enough for an API's error text.
ERROR_PREFIX_BYTES = 200
_CHUNK = 256 * 1024
_PIECE = 64 * 1024
_tls: ssl.SSLContext | None = None


class FetchError(Exception):
    """The GET failed; `reason` says which way. `status` and `body_prefix` (at most ERROR_PREFIX_BYTES of
    the refused answer, for a caller that shows what the peer said) are set for http_status."""

    def __init__(self, reason: FetchReason, message: str, status: int | None = None,
                 body_prefix: bytes = b"") -> None:
        super().__init__(f"{reason}: {message}")
        self.reason: FetchReason = reason
        self.message = message
        self.status = status
        self.body_prefix = body_prefix


def fetch(
    url: str,
    *,
    timeout: float,
    max_bytes: int,
    headers: Mapping[str, str] | None = None,
    params: Mapping[str, str] | None = None,
    ok_statuses: Container[int] = (200,),
    clock: Callable[[], float] = time.monotonic,
    accept_gzip: bool = False,
    tls: ssl.SSLContext | None = None,
    on_headers: Callable[[Callable[[str], str | None]], None] | None = None,
) -> tuple[int, bytes]:
    """GET `url` (plus `params`, URL-encoded); return (status, body) when status is in `ok_statuses`.

    Raises FetchError. A refused status's body is not read beyond its first ERROR_PREFIX_BYTES.
    `accept_gzip`: ask for gzip and return the body decompressed; `max_bytes` then bounds both the
    bytes received and the bytes they expand to (a small body can inflate a thousandfold).
    `tls`: the context for an https URL (default: the system's CAs, hostname checked).
    `on_headers`: called with the answer's header lookup once its headers are in (the `Date`, for one).
    """
    deadline = clock() + timeout
    try:
        parts = urlsplit(url)
        conn = _connection(parts, timeout, tls)
    except ValueError as e:  # a bad port, an unencodable host
        raise FetchError("connection", f"bad URL {url!r}: {e}") from e
    try:
        conn.request("GET", _target(parts, params), headers=_headers(parts, headers, accept_gzip))
        assert conn.sock is not None
        resp = _Response(conn.sock, _DeadlineReader(conn.sock, deadline, clock))
        resp.begin()
        if on_headers is not None:
            on_headers(resp.getheader)
        if resp.status not in ok_statuses:
            said = _prefix(resp)
            raise FetchError("http_status", f"HTTP {resp.status}: {said!r}", resp.status, said)
        length = resp.getheader("Content-Length")
        if length is not None and length.isdigit() and int(length) > max_bytes:
            raise FetchError("too_large", f"Content-Length {length} > {max_bytes} bytes")
        gzipped = accept_gzip and (resp.getheader("Content-Encoding") or "").strip().lower() == "gzip"
        return resp.status, _body(resp, max_bytes, zlib.decompressobj(16 + zlib.MAX_WBITS) if gzipped else None)
    except TimeoutError as e:
        raise FetchError("timeout", f"no complete answer within {timeout:g}s") from e
    except (OSError, http.client.HTTPException) as e:
        raise FetchError("connection", f"{type(e).__name__}: {e}") from e
    finally:
        conn.close()


def _connection(parts: SplitResult, timeout: float, tls: ssl.SSLContext | None = None) -> http.client.HTTPConnection:
    """A not yet connected connection; `timeout` bounds the connect (the deadline bounds the reads)."""
    host = parts.hostname
    if parts.scheme not in ("http", "https") or not host:
        raise ValueError("not an http:// or https:// URL with a host")
    port = parts.port  # ValueError when not a number
    if parts.scheme == "https":
        return http.client.HTTPSConnection(host, port or 443, timeout=timeout, context=tls or _tls_context())
    return http.client.HTTPConnection(host, port or 80, timeout=timeout)


def _tls_context() -> ssl.SSLContext:
    global _tls
    if _tls is None:  # built once: loading the CA bundle costs milliseconds
        _tls = ssl.create_default_context()
    return _tls


def _target(parts: SplitResult, params: Mapping[str, str] | None) -> str:
    query = "&".join(q for q in (parts.query, urlencode(params or {})) if q)
    return (parts.path or "/") + (f"?{query}" if query else "")


def _headers(parts: SplitResult, headers: Mapping[str, str] | None, accept_gzip: bool) -> dict[str, str]:
    """The caller's headers, plus Basic auth from `user:password@` in the URL unless they set one."""
    out = dict(headers or {})
    if accept_gzip:
        out["Accept-Encoding"] = "gzip"
    if parts.username is not None and not any(k.lower() == "authorization" for k in out):
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        out["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
    return out


def _body(resp: http.client.HTTPResponse, max_bytes: int, gunzip: zlib._Decompress | None) -> bytes:
    """The body as it arrives, at most `max_bytes` received and (when `gunzip` is given) decompressed."""
    chunks: list[bytes] = []
    received = total = 0
    while chunk := resp.read1(_CHUNK):
        received += len(chunk)
        if received > max_bytes:
            raise FetchError("too_large", f"body passed {max_bytes} bytes")
        if gunzip is None:
            chunks.append(chunk)
        else:
            total = _inflate(gunzip, chunk, chunks, total, max_bytes)
    if gunzip is not None and not gunzip.eof:
        raise FetchError("connection", "gzip body ends before its end")
    return b"".join(chunks)


def _inflate(gunzip: zlib._Decompress, data: bytes, into: list[bytes], total: int, max_bytes: int) -> int:
    """Decompress `data` onto `into` (holding `total` bytes) in _PIECE-sized pieces; returns the new total.

    Fails as soon as the whole passes `max_bytes`: bounded pieces stop a gzip bomb at the cap, not in
    memory. Pieces that stay in the CPU cache also inflate a 4.7 MB exporter body in ~40% less CPU
    than one piece of megabytes does (bench/results/httpget.md).
    """
    while True:
        try:
            piece = gunzip.decompress(data, _PIECE)
        except zlib.error as e:
            raise FetchError("connection", f"gzip body does not decompress: {e}") from e
        total += len(piece)
        if total > max_bytes:
            raise FetchError("too_large", f"body passed {max_bytes} bytes")
        into.append(piece)
        data = gunzip.unconsumed_tail
        if not data and len(piece) < _PIECE:  # a full piece may leave output inside zlib: ask again
            return total


def _prefix(resp: http.client.HTTPResponse) -> bytes:
    """The start of a refused answer's body: what arrives before the deadline, at most ERROR_PREFIX_BYTES."""
    got = b""
    try:
        while len(got) < ERROR_PREFIX_BYTES and (chunk := resp.read1(ERROR_PREFIX_BYTES - len(got))):
            got += chunk
    except (OSError, http.client.HTTPException):
        pass  # the status is the error; a body cut short only shortens its description
    return got


class _DeadlineReader(io.RawIOBase):
    """A socket's read side where every read waits at most until `deadline` (TimeoutError after)."""

    def __init__(self, sock: socket.socket, deadline: float, clock: Callable[[], float]) -> None:
        self._sock, self._deadline, self._clock = sock, deadline, clock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        left = self._deadline - self._clock()
        if left <= 0:
            raise TimeoutError
        self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


class _Response(http.client.HTTPResponse):
    """An HTTPResponse whose status line, headers and body all come through a _DeadlineReader."""

    def __init__(self, sock: socket.socket, reader: _DeadlineReader) -> None:
        super().__init__(sock, method="GET")
        self.fp.close()  # the plain reader the base class opened; this one reads the same socket
        self.fp = io.BufferedReader(reader)
