"""The scaler's two listeners: gRPC for KEDA (:9090) and HTTP for people and gateways (:9091).

gRPC: the ExternalScaler service, grpc.health.v1 health checking and server reflection, on grpc.aio;
plain, TLS, or mutual TLS. KEDA's `enableTLS: "true"` verifies our certificate against the CA in its
TriggerAuthentication (`caCert`); with `--tls-client-ca` we also require KEDA's client certificate
(`tlsClientCert`/`tlsClientKey` there). Certificate files are re-read when they change on disk (checked
at each new TLS handshake), so cert-manager rotations need no restart; connections already open keep
the certificate they were made with.

HTTP: GET /metrics (the scaler's own Prometheus metrics), GET /healthz, and
POST /v1/activate/<namespace>/<scaledobject> (see scaler/activation.py); plain, or TLS 1.2+ with
`HTTPTLSFiles`. Its files are checked at each new connection too and re-read when they changed. No client
certificates there: the activation endpoint is authenticated by its bearer token, and /metrics and
/healthz are read by Prometheus and the kubelet. The TLS handshake runs on the connection's own
thread (with a deadline), never on the accepting one, so a client that stalls mid-handshake holds up
no one else; a failed handshake (a plaintext client, say) is closed and logged at debug level.

Shutdown (SIGTERM): health goes NOT_SERVING first, then `stop(grace)` lets unary calls finish and
cancels the streams; KEDA reconnects them to the peer pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import logging
import os
import re
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from keda_llm.common.httpserver import IDLE_TIMEOUT_S
from keda_llm.common.tls import ReloadingContext, TLSAcceptMixin, server_context
from keda_llm.scaler.activation import (
    ACTIVATE_PATH,
    FORWARDED_HEADER,
    PeerForwarder,
    ScaledObjectKey,
)
from keda_llm.scaler.service import DecisionRefresher, ScalerService
from keda_llm.scaler.servicer import SERVICE_NAME, ExternalScalerServicer, add_to_server

log = logging.getLogger(__name__)

#: Server-side keepalive: finds KEDA connections that died without a FIN (node loss), so their streams
#: are released. KEDA's client sets no keepalive of its own.
GRPC_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.max_concurrent_streams", 100_000),
)
#: The interpreter's GIL switch interval while the scaler serves. Collection, parsing and decisions run
#: in background threads and are CPU-bound; CPython lets such a thread keep the GIL for the whole switch
#: interval (5 ms by default) before a thread that woke on I/O (the gRPC loop, an activation's HTTP
#: thread) gets it, and a push crosses several such hand-overs. 0.5 ms bounds each at a tenth of that.
SWITCH_INTERVAL_S = 0.0005
# RFC 1123 names as Kubernetes allows for namespaces (label) and ScaledObjects (subdomain).
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_OBJECT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


@dataclass(frozen=True)
class TLSFiles:
    """PEM files for the gRPC port. `client_ca` set = mutual TLS (client certificates required);
    `client_sans` set = of those, only a certificate naming one of these subject alternative names
    (DNS name, URI such as a SPIFFE ID, or IP) is served: a CA shared with other workloads (a cluster
    issuer) then still does not let every certificate it signed call the scaler."""

    cert: str
    key: str
    client_ca: str | None = None
    client_sans: tuple[str, ...] = ()


@dataclass(frozen=True)
class HTTPTLSFiles:
    """PEM files for the HTTP port (`--http-tls-cert`/`--http-tls-key`). `peer_ca` (`--http-tls-ca`): the
    CA the peers' certificates must chain to, for relaying activations to them over https (the
    certificate is not checked against the peer's address: see scaler/activation.py)."""

    cert: str
    key: str
    peer_ca: str | None = None


class _ReloadingCredentials:
    """Serves the newest certificate files: checked at each new handshake, re-read when a file changed."""

    def __init__(self, files: TLSFiles) -> None:
        self.files = files
        self._stamp = self._mtimes()
        self.reloads = 0

    def _mtimes(self) -> tuple[float, ...]:
        paths = [self.files.cert, self.files.key] + ([self.files.client_ca] if self.files.client_ca else [])
        return tuple(os.stat(p).st_mtime_ns for p in paths)

    def config(self) -> Any:
        f = self.files
        with open(f.key, "rb") as k, open(f.cert, "rb") as c:
            pair = [(k.read(), c.read())]
        ca = None
        if f.client_ca:
            with open(f.client_ca, "rb") as fh:
                ca = fh.read()
        return grpc.ssl_server_certificate_configuration(pair, root_certificates=ca)

    def fetch(self) -> Any:
        """grpc's fetcher callback: a new configuration when files changed, else None (keep current)."""
        try:
            stamp = self._mtimes()
            if stamp == self._stamp:
                return None
            cfg = self.config()
        except Exception as err:  # half-written files during a rotation: keep serving the old pair
            log.warning("TLS reload failed, keeping the current certificate: %s", err)
            return None
        self._stamp = stamp
        self.reloads += 1
        log.info("TLS certificate files changed: reloaded")
        return cfg

    def credentials(self) -> Any:
        return grpc.dynamic_ssl_server_credentials(self.config(), self.fetch,
                                                   require_client_authentication=self.files.client_ca is not None)


def create_server(
    servicer: ExternalScalerServicer,
    address: str = "[::]:9090",
    *,
    tls: TLSFiles | None = None,
    extra_handlers: Sequence[Any] = (),
) -> tuple[Any, int, Any]:
    """Build (not start) the gRPC server: ExternalScaler + health + reflection on `address`.

    Returns (server, bound port, health servicer). Port 0 binds a free port (tests). `extra_handlers`
    are generic handlers added to the same server (the benchmark's no-op baseline).
    """
    server = grpc.aio.server(options=list(GRPC_OPTIONS))
    add_to_server(servicer, server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if extra_handlers:
        server.add_generic_rpc_handlers(tuple(extra_handlers))
    reflection.enable_server_reflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
        server,
    )
    if tls is None:
        port = server.add_insecure_port(address)
    else:
        port = server.add_secure_port(address, _ReloadingCredentials(tls).credentials())
    if port == 0:
        raise OSError(f"could not bind gRPC address {address}")
    return server, port, health_servicer


MAX_POST_BODY = 65536  # an activation carries no body; more than this is refused, not read


class _HTTPHandler(BaseHTTPRequestHandler):
    """GET /metrics, GET /healthz, POST /v1/activate/<namespace>/<scaledobject>."""

    server: _ScalerHTTPServer
    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT_S  # a silent connection is closed (common/httpserver.py)
    # headers and body leave in two writes: with Nagle's algorithm and the client's delayed ACK a kept-alive
    # connection waited ~40 ms per answer (gateways' pooled clients, Prometheus scrapes)
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http %s " + format, self.client_address[0], *args)

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, (json.dumps(obj, sort_keys=True) + "\n").encode())

    def _reject(self, reason: str, status: int, message: str) -> None:
        """A refused activation: counted by reason (keda_llm_scaler_activations_rejected_total), then answered."""
        self.server.owner.service.metrics.activations_rejected.labels(reason).inc()
        self._json(status, {"error": message})

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, generate_latest(self.server.owner.service.metrics.registry), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            ok = self.server.owner.serving
            self._json(200 if ok else 503, {"status": "ok" if ok else "stopping"})
        elif path.startswith(ACTIVATE_PATH + "/"):
            self._json(405, {"error": f"use POST {ACTIVATE_PATH}/<namespace>/<scaledobject>"})
        else:
            self._json(404, {"error": f"no such path {path!r}"})

    def do_POST(self) -> None:
        raw = (self.headers.get("Content-Length") or "0").strip()
        # ASCII digits only (str.isdigit() takes "²", which int() refuses), and no 5,000-digit int() (refused too)
        length = (int(raw) if len(raw) <= 20 else MAX_POST_BODY + 1) if raw.isascii() and raw.isdigit() else -1
        if length < 0 or length > MAX_POST_BODY:  # a body we cannot skip leaves the connection out of step
            self.close_connection = True
            self._json(400 if length < 0 else 413, {"error": f"Content-Length {raw[:40]!r}: expected 0 to "
                                                             f"{MAX_POST_BODY} (an activation needs no body)"})
            return
        if length:
            self.rfile.read(length)
        path = self.path.split("?", 1)[0]
        parts = path[len(ACTIVATE_PATH) + 1:].split("/") if path.startswith(ACTIVATE_PATH + "/") else []
        if len(parts) != 2:
            self._reject("bad_path", 404, f"expected POST {ACTIVATE_PATH}/<namespace>/<scaledobject>, got {path!r}")
            return
        namespace, name = parts
        if not _NAMESPACE.match(namespace):
            self._reject("bad_name", 400, f"bad namespace {namespace!r}: not a Kubernetes namespace name")
            return
        if not _OBJECT_NAME.match(name):
            self._reject("bad_name", 400, f"bad ScaledObject name {name!r}: not a Kubernetes object name")
            return
        owner = self.server.owner
        token = owner.activation_token
        given = (self.headers.get("Authorization") or "").encode()
        if token and not hmac.compare_digest(given, f"Bearer {token}".encode()):  # constant time: no timing oracle
            self._reject("unauthorized", 401, "missing or wrong bearer token for activation")
            return
        key = ScaledObjectKey(namespace, name)
        # Refused only on the API's word: without an API (--no-kube) or with the API unreachable the
        # activation is kept, since losing a wake costs more than recording one for nothing.
        if owner.scaled_object_exists is not None and owner.scaled_object_exists(key) is False:
            self._reject("unknown", 404, f"no ScaledObject {name!r} in namespace {namespace!r}")
            return
        forwarded = self.headers.get(FORWARDED_HEADER) is not None
        woken = owner.service.activate(key, source="peer" if forwarded else "http")
        peers: dict[str, str] = {}
        if not forwarded and owner.forwarder is not None:
            peers = owner.forwarder.forward(key)
        self._json(200, {"scaledObject": str(key), "streams": woken, "forwarded": forwarded, "peers": peers})


class ListenHostError(socket.gaierror):
    """A listen host that does not resolve (start-up names the flag)."""


def address_family(host: str) -> socket.AddressFamily:
    """The socket family a listen host needs: IPv6 for an IPv6 literal (`::`, `[::1]`), IPv4 for an IPv4
    literal or "" (every IPv4 interface), else what the name resolves to first."""
    host = host.strip("[]")
    if not host:
        return socket.AF_INET
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        pass
    try:
        return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][0]
    except (OSError, IndexError) as err:  # a gaierror either way: start-up reports it as one line
        raise ListenHostError(f"cannot resolve the listen host {host!r}: {err}") from None


class _ScalerHTTPServer(TLSAcceptMixin, ThreadingHTTPServer):
    """ThreadingHTTPServer on the family its host needs; `::` also takes IPv4 (dual stack) where the
    kernel allows it, as `0.0.0.0` and `[::]` both mean "everywhere" to an operator. With `tls`, each
    connection is TLS (keda_llm.common.tls.TLSAcceptMixin)."""

    daemon_threads = True
    owner: ScalerServer

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 tls: ReloadingContext | None = None) -> None:
        host, port = address
        self.address_family = address_family(host)
        self.tls = tls
        super().__init__((host.strip("[]"), port), handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-answer (a scrape cut short, Ctrl-C on a poller) is routine: one debug
        line, not socketserver's traceback on stderr. Anything else is logged with its traceback."""
        err = sys.exc_info()[1]
        if isinstance(err, ConnectionError | TimeoutError):
            log.debug("http %s: client went away: %s", client_address[0], err)
            return
        log.exception("http %s: request failed", client_address[0])

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6 and self.server_address[0] == "::":
            with contextlib.suppress(OSError, AttributeError):  # no dual stack here: IPv6 only
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


class ScalerServer:
    """Both listeners and their lifecycle. `await start()`, then `await stop(grace)` (or `serve()`)."""

    def __init__(
        self,
        service: ScalerService,
        *,
        grpc_address: str = "[::]:9090",
        http_address: tuple[str, int] | None = ("0.0.0.0", 9091),
        tls: TLSFiles | None = None,
        http_tls: HTTPTLSFiles | None = None,
        forwarder: PeerForwarder | None = None,
        activation_token: str | None = None,
        scaled_object_exists: Callable[[ScaledObjectKey], bool | None] | None = None,
        config_error: type[Exception] = ValueError,
        extra_handlers: Sequence[Any] = (),
        demand_watch_s: float | None = 1.0,
        refresh_s: float | None = None,
        switch_interval_s: float | None = SWITCH_INTERVAL_S,
    ) -> None:
        """`refresh_s`: run a DecisionRefresher that often (decisions made off the RPC path; the service
        needs a `reuse_s` then, see scaler/service.py). `switch_interval_s`: set on `start()` for the
        whole process (see SWITCH_INTERVAL_S); None leaves the interpreter's as it is. `http_tls`: serve
        the HTTP port over TLS (the forwarder is made separately: give it the peer CA)."""
        self.service = service
        self._switch_interval_s = switch_interval_s
        self.servicer = ExternalScalerServicer(service, config_error=config_error,
                                               client_sans=tls.client_sans if tls is not None else ())
        self.grpc_server, self.grpc_port, self.health = create_server(
            self.servicer, grpc_address, tls=tls, extra_handlers=extra_handlers)
        self.forwarder = forwarder
        self.activation_token = activation_token
        #: the Kubernetes API's word on a ScaledObject (None: cannot tell); None here: no API (--no-kube)
        self.scaled_object_exists = scaled_object_exists
        self.serving = False
        self._demand_watch_s = demand_watch_s
        self._tasks: list[asyncio.Task[None]] = []
        self.http: _ScalerHTTPServer | None = None
        self.http_port = 0
        #: the HTTP port's certificate, re-read when its files change (None: plain HTTP)
        self.http_tls = server_context(http_tls.cert, http_tls.key) if http_tls is not None else None
        self.http_scheme = "https" if self.http_tls is not None else "http"
        if http_address is not None:
            self.http = _ScalerHTTPServer(http_address, _HTTPHandler, tls=self.http_tls)
            self.http.owner = self
            self.http_port = int(self.http.server_address[1])
        self._http_thread: threading.Thread | None = None
        self.refresher = DecisionRefresher(service, refresh_s) if refresh_s else None

    async def start(self) -> None:
        if self._switch_interval_s is not None:
            sys.setswitchinterval(self._switch_interval_s)
        await self.grpc_server.start()
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self.serving = True
        if self._demand_watch_s:
            self._tasks.append(asyncio.create_task(self.service.watch_demand(self._demand_watch_s)))
        if self.refresher is not None:
            self.refresher.start()
        if self.http is not None:
            self._http_thread = threading.Thread(target=self.http.serve_forever, args=(0.1,), name="scaler-http",
                                                 daemon=True)
            self._http_thread.start()
        log.info("scaler serving gRPC on :%d, %s on :%d", self.grpc_port, self.http_scheme.upper(), self.http_port)

    async def stop(self, grace: float = 5.0) -> None:
        """NOT_SERVING first (so health checks and load balancers move away), then drain and close."""
        self.serving = False
        await self.health.enter_graceful_shutdown()
        for task in self._tasks:
            task.cancel()
        if self.refresher is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.refresher.stop)
        await self.grpc_server.stop(grace)
        if self.http is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.http.shutdown)
            self.http.server_close()
        if self.forwarder is not None:
            self.forwarder.close()

    async def serve(self, grace: float = 5.0, stop_event: asyncio.Event | None = None,
                    install_signals: bool = True) -> None:
        """Start, run until SIGTERM/SIGINT (or `stop_event`), then stop gracefully."""
        import signal

        stop = stop_event or asyncio.Event()
        loop = asyncio.get_running_loop()
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
        await self.start()
        await stop.wait()
        log.info("stopping: health NOT_SERVING, draining for up to %.1f s", grace)
        await self.stop(grace)

