"""TLS for the HTTP ports of the scaler and the exporter, in one copy: contexts re-made when their PEM
files change on disk (cert-manager rotates Secrets in place), and the server-side accept/handshake split
that keeps one slow or plaintext client from stalling the accept loop.

`ReloadingContext.get()` costs one `stat` per file, so it runs at each new connection; a rotation needs
no restart. `ca_client_context` verifies a chain against one private CA and nothing else, without a
hostname check: its callers dial pods by IP (headless Services), which a cert-manager Certificate cannot
name; a peer must still hold a key that CA signed.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger(__name__)

#: How long a new connection has to finish its TLS handshake (in its own thread).
HANDSHAKE_TIMEOUT_S = 10.0


class ReloadingContext:
    """An `ssl.SSLContext` made by `make()` from `paths`, made again when one of them changed on disk.

    `get()` costs one `stat` per file (mtime, size, inode: a Secret volume's atomic swap gives new
    inodes), so it runs at each new connection and a cert-manager rotation needs no restart. A change
    that does not load (a half-written pair mid-rotation) is logged and the current context kept; it is
    tried again at the next connection. The first load raises (a bad file at start is a start error).
    """

    def __init__(self, paths: Sequence[str], make: Callable[[], ssl.SSLContext], what: str = "TLS") -> None:
        self._paths = tuple(paths)
        self._make = make
        self._what = what
        self._lock = threading.Lock()
        self._stamp = self._stat()
        self._context = make()
        self.reloads = 0

    def _stat(self) -> tuple[tuple[int, int, int], ...]:
        out = []
        for path in self._paths:
            st = os.stat(path)
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(out)

    def get(self) -> ssl.SSLContext:
        try:
            stamp = self._stat()
        except OSError as err:  # a file briefly gone during a rotation: keep the current context
            log.warning("%s files unreadable, keeping the current ones: %s", self._what, err)
            return self._context
        if stamp == self._stamp:
            return self._context
        with self._lock:
            if stamp != self._stamp:
                try:
                    context = self._make()
                except (OSError, ValueError) as err:  # ssl.SSLError is an OSError
                    log.warning("%s reload failed, keeping the current certificate: %s", self._what, err)
                    return self._context
                self._context, self._stamp = context, stamp
                self.reloads += 1
                log.info("%s certificate files changed: reloaded", self._what)
        return self._context


def server_context(cert: str, key: str, what: str = "HTTP TLS") -> ReloadingContext:
    """An HTTP port's server side: TLS 1.2 or newer, the certificate chain and key from PEM files."""

    def make() -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(cert, key)
        ctx.set_alpn_protocols(["http/1.1"])
        return ctx

    return ReloadingContext([cert, key], make, what=what)


def ca_client_context(ca: str, what: str = "CA") -> ReloadingContext:
    """A client side whose server's chain must lead to `ca` (only that CA, not the system's); no hostname
    check, since the servers are dialled by pod IP (see the module's docstring)."""

    def make() -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(cafile=ca)
        return ctx

    return ReloadingContext([ca], make, what=what)


class TLSAcceptMixin:
    """For a socketserver TCPServer: with `self.tls` set, each accepted socket is wrapped in the newest
    context (files checked now) and its handshake done in the connection's own thread, bounded by
    HANDSHAKE_TIMEOUT_S; a failed handshake (a plaintext or wrong-CA client, a reset) drops only that
    connection. Put it before the server class in the bases."""

    tls: ReloadingContext | None = None

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = super().get_request()  # type: ignore[misc]
        if self.tls is None:
            return sock, addr
        try:
            return self.tls.get().wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr
        except (OSError, ValueError):
            sock.close()
            raise OSError("TLS wrap failed") from None  # socketserver drops the connection, keeps serving

    def finish_request(self, request: Any, client_address: Any) -> None:
        if isinstance(request, ssl.SSLSocket):
            request.settimeout(HANDSHAKE_TIMEOUT_S)
            try:
                request.do_handshake()
            except (OSError, ValueError) as err:  # plaintext or wrong-CA client, timeout, reset
                log.debug("http %s: TLS handshake failed: %s", client_address[0], err)
                return
            request.settimeout(None)
        super().finish_request(request, client_address)  # type: ignore[misc]
