"""The activator's HTTP side (aiohttp): the proxy port and the admin port, around the rules of core.py.

Proxy port: every request is forwarded to one ready endpoint of its model, the response streamed back
chunk by chunk as it arrives (SSE included; nothing is buffered whole). The request body is read whole
up to `max_body_bytes` (OpenAI request bodies are small JSON) to find its `model`. A model with no
ready endpoint (or every endpoint at `routing.max_outstanding`) holds the request in its HeldQueue,
wakes the model through the scaler (`POST {scaler}/v1/activate/{namespace}/{scaledobject}`) and
releases it when an endpoint is ready; past the bound 429, past max_wait 503, both with Retry-After.
A client that disconnects while held is removed from the queue (aiohttp cancels its handler) and never
forwarded. A connection refused by an endpoint (a pod that just went away: the scale-down race) sets it
aside and takes the request back to routing, held again if no endpoint is left; nothing was sent to
the client yet, so it sees one answer.

Admin port: /metrics (Prometheus), /healthz (200 while serving, 503 once stopping), and, with an admin
token configured, GET /admin/queues (bearer token, constant-time compare).

Shutdown (`stop`): health turns 503, held requests go to ready endpoints or are answered 503 with
Retry-After at once, requests in flight get `shutdown_grace` to finish, then the listeners close.

The hot path (what a forwarded request costs, bench/bench_activator.py): one ClientSession for the
activator's life, its pool unbounded (`limit=0`: one kept-alive connection per concurrent stream, reused
by the next request) and idle connections dropped before the engine's own keep-alive timeout would close
them under a request; no per-request lookups (loads come from a background poll), no log line on success;
each chunk is written to the client as it is read (`iter_any`, no re-buffering). Every socket has
TCP_NODELAY (asyncio and aiohttp set it on each transport), so a chunk is never held back for an ACK;
tests/activator/test_hot_path.py holds the proxy to that (lock-step chunks, pooled connections).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from multidict import CIMultiDict, CIMultiDictProxy
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from yarl import URL

from keda_llm.activator.config import ActivatorConfig, ModelConfig, ca_context, read_token
from keda_llm.activator.core import (
    REJECT_STATUS,
    Admitted,
    EndpointLoad,
    HeldQueue,
    RejectReason,
    Routing,
    Ticket,
    Waker,
    retry_after,
    route_by_body,
    route_by_path,
)
from keda_llm.activator.endpoints import EndpointSet, SliceWatcher, probe_static
from keda_llm.activator.loads import LoadTable

log = logging.getLogger(__name__)

#: Headers that belong to one connection, never forwarded (RFC 9110 7.6.1), and those aiohttp sets.
HOP_BY_HOP = frozenset(h.lower() for h in (
    "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection", "TE",
    "Trailer", "Transfer-Encoding", "Upgrade", "Host", "Content-Length",
    # the body is read whole before it is forwarded: passed on, `Expect: 100-continue` made aiohttp wait for a
    # 100 that an upstream need not send (Python's http.server never does), and the request hung
    "Expect"))
#: Idle pooled upstream connections are closed after this long: under vLLM's own keep-alive timeout
#: (VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s by default: vllm-project/vllm, vllm/envs.py), so an idle connection
#: is dropped here first rather than closed by the engine just as a request is sent on it (that request
#: would fail as a refused connection and set a healthy endpoint aside).
KEEPALIVE_S = 4.0
#: `Retry-After` for a model with ready replicas that is full (its queue, or every replica at max_outstanding)
READY_RETRY_S = 2
#: Headers aiohttp's client would add that the client did not send: forwarded as sent, or not at all (an added
#: `Content-Type: application/octet-stream` made FastAPI servers refuse a JSON body sent without one; an added
#: `Accept-Encoding` gave clients that never asked a gzip answer)
_NOT_ADDED = frozenset({"Accept-Encoding", "User-Agent", "Content-Type", "Accept"})
#: The same both ways: headers aiohttp's server adds to an answer that has none. An upstream answer without
#: `Content-Type` leaves its type to the client (RFC 9110 8.3), where an added `application/octet-stream`
#: decides it; an added `Server` names this proxy's software as the replica's. `Date` stays: a forwarder
#: with a clock appends it (RFC 9110 6.6.1).
_NOT_ADDED_ANSWER = ("Content-Type", "Server")
#: A connection closed this soon after the request went out was closed idle by the engine as it went (the one
#: close safe to send again: an in-cluster round trip is well under it); later, the engine took the request and
#: died on it. Telling a pooled connection from a fresh one (aiohttp's trace hooks) cost 50-60 us a request.
RESEND_WINDOW_S = 0.25
TICK_S = 0.1  # expiry, re-activation and set-aside endpoints coming back are checked this often
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class _Forwarded(web.StreamResponse):
    """An upstream's answer on its way back, with the default headers its upstream did not send (`_unadd`)."""

    absent: tuple[str, ...] = ()


class _Rejected(Exception):
    def __init__(self, reason: RejectReason, retry: int | None = None) -> None:
        super().__init__(reason)
        self.reason: RejectReason = reason
        self.retry = retry


class _ConnectFailed(Exception):
    """The endpoint did not answer. `sent` False: no connection was made (refused, silent, unresolved), so
    nothing reached it and another endpoint may take the request. `sent` True: the connection closed after
    the request went out; the endpoint may have begun it, so it is tried again once (an idle pooled
    connection the engine closed just then), and a second such close is the client's 502."""

    def __init__(self, message: str, *, sent: bool, at_once: bool = False) -> None:
        super().__init__(message)
        self.sent = sent
        self.at_once = at_once  # closed within RESEND_WINDOW_S of sending: an idle close, not this request


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.held = Gauge("keda_llm_activator_held_requests",
                          "Requests held for a model with no ready endpoint (the scaler's activationQuery)",
                          ["model"], registry=r)
        self.wait = Histogram("keda_llm_activator_wait_seconds", "Time requests were held, by outcome",
                              ["model", "outcome"], buckets=WAIT_BUCKETS, registry=r)
        self.rejects = Counter("keda_llm_activator_rejects_total", "Requests answered by the activator itself",
                               ["model", "reason"], registry=r)
        self.forwarded = Counter("keda_llm_activator_forwarded_total", "Requests forwarded, by endpoint",
                                 ["model", "endpoint"], registry=r)
        self.ready = Gauge("keda_llm_activator_ready_endpoints", "Ready endpoints per model", ["model"], registry=r)
        self.activations = Counter("keda_llm_activator_activations_total",
                                   "Calls to the scaler's activation endpoint, by result", ["model", "result"],
                                   registry=r)
        self.retries = Counter("keda_llm_activator_connect_retries_total",
                               "Connections an endpoint refused before answering (request routed again)",
                               ["model"], registry=r)


@dataclass
class ModelState:
    cfg: ModelConfig
    queue: HeldQueue
    waker: Waker
    woken_at: float | None = None
    outstanding: dict[str, int] = field(default_factory=dict)


class Activator:
    """The proxy and admin apps around the core rules. `await start()`, then `await stop()`."""

    def __init__(self, cfg: ActivatorConfig, *, clock: Callable[[], float] = time.monotonic,
                 endpoints: EndpointSet | None = None) -> None:
        self.cfg = cfg
        self.clock = clock
        self.metrics = Metrics()
        self.models: dict[str, ModelState] = {}
        classes = max(1, len(cfg.priority_classes) + 1)
        for m in cfg.models:
            q = HeldQueue(m.name, max_held=m.max_held, max_wait=m.max_wait, classes=classes)
            self.models[m.name] = ModelState(m, q, Waker(cfg.activation_interval))
            self.metrics.held.labels(m.name).set(0)
        self.names = {n: m.name for m in cfg.models for n in (m.name, *m.aliases)}
        self.prefixes = [(m.path_prefix, m.name) for m in cfg.models if m.path_prefix]
        self.classes = {c.lower(): i for i, c in enumerate(cfg.priority_classes)}
        self.routing = Routing(cfg.routing)
        self._uncapped = Routing(replace(cfg.routing, max_outstanding=0))  # shutdown drains past the cap
        self.endpoints = endpoints or EndpointSet(clock=clock)
        self.endpoints.on_change = self._endpoints_changed
        self.loads = LoadTable(cfg.exporters, max_age=cfg.metrics_max_age, clock=clock)
        self.activation_token = read_token(cfg.activation_token_file, "activation_token_file")
        self.admin_token = read_token(cfg.admin_token_file, "admin_token_file")
        self.stopping = False
        self.inflight = 0
        self._idle = asyncio.Event()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._runners: list[web.AppRunner] = []
        self._session: aiohttp.ClientSession | None = None
        self._upstream_timeout = aiohttp.ClientTimeout(total=None, sock_connect=cfg.connect_timeout,
                                                       sock_read=cfg.read_timeout)
        self._tls = {m.name: _tls_options(m, f"models[{i}].") for i, m in enumerate(cfg.models)
                     if m.ca_file or m.server_name}
        self._tls_warned: set[str] = set()
        self.ports: dict[str, int] = {}

    # ---- lifecycle ----

    async def start(self, proxy: tuple[str, int], admin: tuple[str, int] | None) -> None:
        watcher = SliceWatcher(self.cfg.kubernetes, self.cfg.models, self.endpoints)  # its config errors first
        self._idle.set()
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=10, keepalive_timeout=KEEPALIVE_S),
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None))
        for name, (host, port), app in (("proxy", proxy, self._proxy_app()),
                                        *((("admin", admin, self._admin_app()),) if admin else ())):
            # stop() has waited shutdown_grace for the requests in flight already: what is left then is cut
            # (given the whole grace again here, a stop took up to three times shutdown_grace)
            runner = web.AppRunner(app, handler_cancellation=True, access_log=None,
                                   shutdown_timeout=min(1.0, self.cfg.shutdown_grace / 10))
            await runner.setup()
            site = web.TCPSite(runner, host or None, port, backlog=4096)
            await site.start()
            self._runners.append(runner)
            self.ports[name] = int(runner.addresses[-1][1]) if runner.addresses else port
        self._tasks = [asyncio.create_task(self._ticker()),
                       asyncio.create_task(probe_static(self.cfg, self.endpoints, self._session, self._stop)),
                       asyncio.create_task(watcher.run(self._stop))]
        if self.cfg.exporters:
            self._tasks.append(asyncio.create_task(self.loads.run(self.cfg.exporters_interval, self._stop)))
        for task in self._tasks:
            task.add_done_callback(_said_if_died)

    async def stop(self) -> None:
        """Graceful shutdown (see the module docstring)."""
        if self.stopping:
            return
        self.stopping = True
        for st in self.models.values():
            for ticket in st.queue.take_all():  # release order: premium first onto what is ready
                ep = self._reserve(st, ignore_cap=True)
                if not self._settle(ticket, ep if ep is not None else _Rejected("shutdown", self._retry(st))) \
                        and ep is not None:
                    self._release(st, ep)
            self._gauge(st)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._idle.wait(), self.cfg.shutdown_grace)
        self._stop.set()
        for runner in self._runners:
            await runner.cleanup()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    # ---- apps ----

    def _proxy_app(self) -> web.Application:
        app = web.Application(client_max_size=self.cfg.max_body_bytes)
        app.router.add_route("*", "/{tail:.*}", self._handle, expect_handler=self._expect)
        app.on_response_prepare.append(_unadd)
        return app

    def _admin_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/admin/queues", self._queues)
        return app

    async def _metrics(self, request: web.Request) -> web.Response:
        for name, st in self.models.items():
            self.metrics.ready.labels(name).set(len(self.endpoints.ready(name)))
            self._gauge(st)
        body = generate_latest(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "stopping" if self.stopping else "ok"},
                                 status=503 if self.stopping else 200)

    async def _queues(self, request: web.Request) -> web.Response:
        if not self.admin_token:
            return web.json_response({"error": "admin endpoints are off (no admin_token_file)"}, status=404)
        # the scheme is case-insensitive (RFC 9110 11.1); a value that is not UTF-8 is compared as its bytes
        scheme, _, given = request.headers.get("Authorization", "").strip().partition(" ")
        if not (hmac.compare_digest(given.strip().encode("utf-8", "surrogateescape"), self.admin_token.encode())
                and scheme.lower() == "bearer"):
            return web.json_response({"error": "missing or wrong bearer token"}, status=401,
                                     headers={"WWW-Authenticate": "Bearer"})
        now = self.clock()
        return web.json_response({name: {
            "held": len(st.queue),
            "oldest_held_seconds": None if (o := st.queue.oldest()) is None else round(now - o, 3),
            "ready": [e.url for e in self.endpoints.ready(name)],
            "outstanding": dict(st.outstanding),
            "woken_seconds_ago": None if st.woken_at is None else round(now - st.woken_at, 3),
        } for name, st in self.models.items()})

    # ---- the proxy ----

    async def _models(self) -> web.Response:
        """`GET /v1/models` answered here, from the config: a client's model listing neither wakes a model at
        zero nor depends on which replica answers (it was a 404 unless a default model was set)."""
        return web.json_response({"object": "list", "data": [
            {"id": name, "object": "model", "owned_by": "keda-llm", "root": self.names[name]}
            for name in sorted(self.names)]})

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if (request.method in ("GET", "HEAD") and request.path == "/v1/models"
                and route_by_path(request.path, self.prefixes) is None):
            return await self._models()
        self.inflight += 1
        self._idle.clear()
        try:
            return await self._proxy(request)
        finally:
            self.inflight -= 1
            if self.inflight == 0:
                self._idle.set()

    async def _expect(self, request: web.Request) -> web.StreamResponse | None:
        """`Expect: 100-continue` with a declared body over max_body_bytes: the 413 at once, so the client never
        sends what would be refused (a 100 first had it send the body, then get the 413); else aiohttp's 100.
        The connection closes after it: the body was never read."""
        length = request.content_length
        if (length is not None and length > self.cfg.max_body_bytes and request.version >= (1, 1)
                and request.headers.get("Expect", "").lower() == "100-continue"):
            response = self._too_large()
            response.force_close()
            return response
        # aiohttp's own answer otherwise (its default handler, which is not public API): 100 to a 1.1 client
        expect = request.headers.get("Expect", "")
        if request.version >= (1, 1):
            if expect.lower() != "100-continue":
                raise web.HTTPExpectationFailed(text=f"unknown Expect: {expect}")
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0  # not part of the answer's size (the access log's)
        return None

    def _too_large(self) -> web.Response:
        return self._reject(None, _Rejected("bad_request"), status=413,
                            message=f"request body over {self.cfg.max_body_bytes} bytes")

    async def _proxy(self, request: web.Request) -> web.StreamResponse:
        try:
            # a client that trickles its body (or stops sending it) would hold a slot in `inflight`, which
            # the shutdown waits for, for ever
            async with asyncio.timeout(self.cfg.body_timeout):
                body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._too_large()
        except TimeoutError:
            response = self._reject(None, _Rejected("bad_request"), status=408,
                                    message=f"request body not received within {self.cfg.body_timeout:g} s")
            response.force_close()  # the rest of the body may still come: not on this connection
            return response
        route = route_by_path(request.path, self.prefixes) if self.prefixes else None
        if route is None:
            body_model = _body_model(body)
            route = route_by_body(request.path, body_model, self.names, self.cfg.default_model)
            if route is None and body and body_model is None:
                return self._reject(None, _Rejected("bad_request"),
                                    message="the body is not a JSON object naming its `model`")
            if route is None:
                what = f"model {body_model!r}" if body_model is not None else "a request naming no model"
                return self._reject(None, _Rejected("unknown_model"), message=f"{what} is not served here")
            if body_model is not None and body_model != route.model:
                try:
                    body = _renamed(body, route.model)  # an alias: the replicas serve the configured name
                except ValueError:
                    return self._reject(None, _Rejected("bad_request"),
                                        message="the body holds a number JSON cannot carry (NaN, Infinity or past "
                                                "a double's range)")
        st = self.models[route.model]
        priority = self._priority(request)
        path_qs = _target(request.raw_path, route.path, route.prefix)
        arrived = self.clock()
        first_held: float | None = None  # set once the request was admitted to the queue
        dropped = 0  # connections closed after the request went out
        while True:
            try:
                endpoint, first_held = await self._endpoint_for(st, priority, first_held)
            except _Rejected as rej:
                return self._reject(st, rej)
            try:
                return await self._forward(request, st, endpoint, path_qs, body)
            except _ConnectFailed as e:
                if e.sent:
                    dropped += 1
                    # a connection closed later than RESEND_WINDOW_S after the request went out, or closed twice,
                    # is no idle close: the engine took the request and died on it (a query of death), and
                    # another replica must not be given it too
                    if dropped > 1 or not e.at_once:
                        log.warning("%s closed the connection on a request for %s %s (%s): 502", endpoint,
                                    route.model, "twice" if dropped > 1 else "after taking it", e)
                        return self._reject(st, _Rejected("upstream"), status=502,
                                            message=f"upstream closed the connection without answering: {e}")
                # nothing reached the client: route it again (held again, keeping its place and its
                # first arrival for max_wait, when no other endpoint is left)
                log.info("%s %s a request for %s (%s): routing it again", endpoint,
                         "dropped" if e.sent else "refused", route.model, e)
                self.metrics.retries.labels(st.cfg.name).inc()
                if not e.sent:
                    self.endpoints.suspect(endpoint)
                if first_held is None:  # its arrival: held again, it keeps its lane's order and max_wait from then
                    first_held = arrived
            finally:
                self._release(st, endpoint)

    def _priority(self, request: web.Request) -> int:
        if not self.classes:
            return 0
        value = request.headers.get(self.cfg.priority_header, "").strip().lower()
        return self.classes.get(value, len(self.classes))

    async def _endpoint_for(self, st: ModelState, priority: int, first_held: float | None) -> tuple[str, float | None]:
        """A reserved endpoint (and when the request was first held, if it was): at once if the queue is
        empty and an endpoint can take it, else after a hold. `first_held` set: a request coming back
        from a refused connection, held again at the head of its class."""
        now = self.clock()
        if first_held is not None and now - first_held >= st.queue.max_wait:
            raise _Rejected("max_wait", self._retry(st))
        if not len(st.queue):
            ep = self._reserve(st)
            if ep is not None:
                return ep, first_held
        if self.stopping:
            raise _Rejected("shutdown", self._retry(st))
        if first_held is None:
            offer = st.queue.offer(priority, now, self._retry(st))
            if not isinstance(offer, Admitted):
                if not self.endpoints.ready(st.cfg.name):  # refused, but it is demand: a model at zero wakes
                    self._wake(st, refused=True)
                raise _Rejected(offer.reason, offer.retry_after)
            ticket = offer.ticket
        else:
            ticket = st.queue.requeue(priority, first_held)
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        ticket.handle = fut
        self._gauge(st)
        self._wake(st)
        self._dispatch(st)  # e.g. a set-aside endpoint is back: no need to wait for the tick
        outcome = "forwarded"
        try:
            return await fut, ticket.arrived
        except _Rejected as rej:
            outcome = rej.reason
            raise
        except asyncio.CancelledError:  # the client went away while held
            outcome = "disconnected"
            if not st.queue.cancel(ticket) and fut.done() and not fut.cancelled() and fut.exception() is None:
                self._release(st, fut.result())  # released to an endpoint at the same moment
            raise
        finally:
            self._gauge(st)
            self.metrics.wait.labels(st.cfg.name, outcome).observe(self.clock() - ticket.arrived)

    def _reserve(self, st: ModelState, *, ignore_cap: bool = False) -> str | None:
        ready = self.endpoints.ready(st.cfg.name)
        if not ready:
            return None
        loads = []
        for e in ready:
            pl = self.loads.get(st.cfg.name, e.pod) if self.cfg.exporters else None
            loads.append(EndpointLoad(e.url, st.outstanding.get(e.url, 0),
                                      pl.kv_usage if pl else None, pl.waiting if pl else None))
        url = self.routing.pick(loads) if not ignore_cap else self._uncapped.pick(loads)
        if url is not None:
            st.outstanding[url] = st.outstanding.get(url, 0) + 1
        return url

    def _release(self, st: ModelState, url: str) -> None:
        self._unreserve(st, url)
        if len(st.queue) and self.cfg.routing.max_outstanding:
            self._dispatch(st)

    @staticmethod
    def _unreserve(st: ModelState, url: str) -> None:
        n = st.outstanding.get(url, 0) - 1
        if n > 0:
            st.outstanding[url] = n
        else:
            st.outstanding.pop(url, None)

    def _settle(self, ticket: Ticket, result: str | _Rejected) -> bool:
        """Hand a ticket taken out of a queue its endpoint or refusal; False if its client had left
        (the reserved endpoint, if any, is then given back by the caller)."""
        fut = ticket.handle
        assert isinstance(fut, asyncio.Future)
        if fut.done():
            return False
        if isinstance(result, _Rejected):
            fut.set_exception(result)
        else:
            fut.set_result(result)
        return True

    def _dispatch(self, st: ModelState) -> None:
        """Release held requests, in priority order, while an endpoint can take them."""
        while len(st.queue):
            ep = self._reserve(st)
            if ep is None:
                return
            ticket = st.queue.pop()
            if ticket is None or not self._settle(ticket, ep):
                # its client left: the endpoint goes back and the loop goes on (through `_release`, which
                # dispatches, each such ticket was a frame deeper: ~330 clients gone together overflowed the stack)
                self._unreserve(st, ep)
        self._gauge(st)

    def _endpoints_changed(self, model: str) -> None:
        st = self.models.get(model)
        if st is None:
            return
        ready = self.endpoints.ready(model)
        self.metrics.ready.labels(model).set(len(ready))
        if ready:
            st.waker.reset()
            st.woken_at = None
            self._dispatch(st)
        for url in list(st.outstanding):  # forget counts of endpoints gone (their requests still end)
            if url not in {e.url for e in ready} and st.outstanding[url] <= 0:
                del st.outstanding[url]

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            now = self.clock()
            for st in self.models.values():
                if not len(st.queue):
                    continue
                try:
                    for ticket in st.queue.expire(now):
                        self._settle(ticket, _Rejected("max_wait", self._retry(st)))
                    self._dispatch(st)
                    self._wake(st)
                    self._gauge(st)
                except Exception:  # one model's fault must not end expiry and waking for every model
                    log.exception("the held queue of %s", st.cfg.name)

    def _gauge(self, st: ModelState) -> None:
        self.metrics.held.labels(st.cfg.name).set(len(st.queue))

    def _retry(self, st: ModelState) -> int:
        if self.endpoints.ready(st.cfg.name):  # up and busy, not starting: a slot frees as a request ends
            return READY_RETRY_S
        return retry_after(self.clock(), st.woken_at, st.cfg.cold_start)

    # ---- waking ----

    def _wake(self, st: ModelState, *, refused: bool = False) -> None:
        """Wake the model (its ScaledObject, through the scaler) while requests are held for it, or one was
        just refused for a full queue (`max_held: 0` holds none, and woke nothing)."""
        now = self.clock()
        held = max(len(st.queue), 1) if refused else len(st.queue)
        if not st.waker.due(now, held, len(self.endpoints.ready(st.cfg.name))):
            return
        st.waker.sent(now)
        if st.woken_at is None:
            st.woken_at = now
        if self.cfg.scaler and st.cfg.scaled_object:
            self._tasks.append(asyncio.create_task(self._activate(st)))
            self._tasks = [t for t in self._tasks if not t.done()]

    async def _activate(self, st: ModelState) -> None:
        m = st.cfg
        url = f"{self.cfg.scaler}/v1/activate/{m.namespace}/{m.scaled_object}"
        headers = {"Authorization": f"Bearer {self.activation_token}"} if self.activation_token else {}
        assert self._session is not None
        try:
            async with self._session.post(url, headers=headers, timeout=aiohttp.ClientTimeout(total=5)) as r:
                text = await r.text()
                if r.status != 200:
                    raise ValueError(f"HTTP {r.status}: {text[:200]}")
            self.metrics.activations.labels(m.name, "ok").inc()
            log.info("woke %s/%s for model %s", m.namespace, m.scaled_object, m.name)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, OSError) as e:
            self.metrics.activations.labels(m.name, "error").inc()
            log.warning("activation of %s/%s failed: %s (retrying)", m.namespace, m.scaled_object,
                        str(e) or type(e).__name__)
            st.waker.last = self.clock() - st.waker.interval + min(2.0, st.waker.interval)

    # ---- forwarding ----

    async def _forward(self, request: web.Request, st: ModelState, endpoint: str, path_qs: str,
                       body: bytes) -> web.StreamResponse:
        assert self._session is not None
        # a body aiohttp decoded (one coding it knows: gzip, deflate, ...) goes on as read, unlabelled; one in a
        # coding it left alone (`x-gzip`, several) goes as sent, with its label. What it decoded is on the parsed
        # message only (`Request.message`, deprecated, is the same object)
        message = getattr(request, "_message", None)  # private: without it, as before (every coding decoded)
        decoded = message is None or getattr(message, "compression", "") is not None
        headers = CIMultiDict(_end_to_end(request.headers, also=("content-encoding",) if decoded else ()))
        peer = request.remote or ""
        prior = ", ".join(request.headers.getall("X-Forwarded-For", []))  # every hop, however many lines
        headers["X-Forwarded-For"] = f"{prior}, {peer}" if prior else peer
        started = asyncio.get_running_loop().time()
        try:
            up = await self._session.request(request.method, URL(endpoint + path_qs, encoded=True),
                                             data=body or None, headers=headers, timeout=self._upstream_timeout,
                                             allow_redirects=False, skip_auto_headers=_NOT_ADDED,
                                             **self._tls.get(st.cfg.name, {}))
        except aiohttp.ClientSSLError as e:
            # not the scale-down race a refused connection is: every attempt fails alike, so holding the request
            # until max_wait only hid it (a 503 "did not become ready" minutes later, nothing logged)
            if endpoint not in self._tls_warned:
                self._tls_warned.add(endpoint)
                log.warning("%s: TLS failed (%s); set the model's ca_file and server_name to the replicas' "
                            "certificate", endpoint, e)
            return self._reject(st, _Rejected("upstream"), status=502, message=f"upstream TLS: {e}")
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as e:
            # no connection made: refused, unresolved, or silent (a vanished pod's address often is)
            raise _ConnectFailed(str(e) or type(e).__name__, sent=False) from e
        except aiohttp.ServerTimeoutError as e:  # connected and sent, no answer within read_timeout
            return self._reject(st, _Rejected("upstream"), status=504, message=f"upstream: {e}")
        except aiohttp.ClientConnectionError as e:  # reset or closed after the request went out
            at_once = asyncio.get_running_loop().time() - started < RESEND_WINDOW_S
            raise _ConnectFailed(str(e) or type(e).__name__, sent=True, at_once=at_once) from e
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            return self._reject(st, _Rejected("upstream"), status=504 if isinstance(e, asyncio.TimeoutError)
                                else 502, message=f"upstream: {type(e).__name__}")
        self.metrics.forwarded.labels(st.cfg.name, endpoint).inc()
        async with up:
            resp = _Forwarded(status=up.status, reason=up.reason)
            for k, v in _end_to_end(up.headers):
                resp.headers.add(k, v)
            resp.absent = tuple(h for h in _NOT_ADDED_ANSWER if h not in resp.headers)
            if up.content_length is not None and "chunked" not in up.headers.get("Transfer-Encoding", ""):
                resp.content_length = up.content_length
            elif request.version < (1, 1):
                # HTTP/1.0 has no chunked coding: a body of unknown length ends with the connection (RFC 9112
                # 6.3), which aiohttp left open for a keep-alive client, so the client waited for ever
                resp.force_close()
            await resp.prepare(request)
            write, read, now = resp.write, up.content.readany, asyncio.get_running_loop().time
            read_timeout, write_timeout = self.cfg.read_timeout, self.cfg.write_timeout
            writing = False
            try:
                # our own bound on each read (aiohttp's sock_read is not enough: a malformed chunked body
                # stalls its parser without an error): one timer rescheduled around each read, about 3 us a
                # chunk where wait_for per read cost 11 us (bench/README.md); a client's writes have their own
                # bound, write_timeout, so a slow client is not counted against the upstream, nor a client
                # that stopped reading left holding the replica's slot
                async with asyncio.timeout(None) as deadline:
                    while True:  # each read as it comes: no re-buffering
                        deadline.reschedule(now() + read_timeout)
                        chunk = await read()
                        writing = True
                        deadline.reschedule(now() + write_timeout)
                        if not chunk:
                            break
                        await write(chunk)
                        writing = False
                    await resp.write_eof()
            except ConnectionResetError:
                # the client left mid-answer (aiohttp's ClientConnectionResetError is also a ClientError, so
                # this comes first): nothing to tell it, and not the endpoint's fault
                log.debug("client left during an answer of %s from %s", st.cfg.name, endpoint)
                return resp
            except (aiohttp.ClientError, asyncio.TimeoutError, HttpProcessingError) as e:
                # the endpoint broke off mid-answer (or sent what does not parse), or the client left a chunk
                # unread for write_timeout: cut the client's connection (it sees a short answer)
                if writing and isinstance(e, asyncio.TimeoutError):
                    log.info("a client left an answer of %s unread for %g s: cut", st.cfg.name, write_timeout)
                else:
                    log.warning("%s broke off an answer for %s: %s", endpoint, st.cfg.name, e or type(e).__name__)
                if request.transport is not None:
                    request.transport.close()
                return resp
        return resp

    def _reject(self, st: ModelState | None, rej: _Rejected, *, status: int | None = None,
                message: str = "") -> web.Response:
        model = st.cfg.name if st else ""
        self.metrics.rejects.labels(model, rej.reason).inc()
        headers = {"Retry-After": str(rej.retry)} if rej.retry is not None else {}
        text = message or {
            "queue_full": f"model {model!r} is starting and its queue is full",
            "max_wait": f"model {model!r} did not become ready in time",
            "shutdown": "the activator is shutting down",
        }.get(rej.reason, rej.reason)
        code = status or REJECT_STATUS[rej.reason]
        err: dict[str, Any] = {"error": {"message": text, "type": rej.reason, "code": code}}
        return web.Response(status=code, headers=headers, content_type="application/json",
                            text=json.dumps(err))


async def _unadd(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare (aiohttp's hook between its default headers and the wire): a forwarded answer
    leaves without the defaults its upstream did not send (`_NOT_ADDED_ANSWER`); the activator's own answers
    keep theirs."""
    if isinstance(response, _Forwarded):
        for name in response.absent:
            response.headers.popall(name, None)


def _body_model(body: bytes) -> str | None:
    """The body's `model` field (OpenAI requests), or None when absent or not a JSON object."""
    if not body:
        return None
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested past the parser's depth
        return None
    model = obj.get("model") if isinstance(obj, dict) else None
    return model if isinstance(model, str) else None


def _said_if_died(task: asyncio.Task[None]) -> None:
    """A background task (ticker, prober, watcher, loads) that ends by an error says so: gathered at stop with
    return_exceptions, its death was silent, and what it kept up to date froze."""
    if not task.cancelled() and task.exception() is not None:
        log.error("background task %s died: %r", task.get_name(), task.exception())


def _tls_options(m: ModelConfig, key: str) -> dict[str, Any]:
    """Request options for a model's https replicas: its `ca_file` (their certificates' CA) and `server_name`
    (the name their certificate carries: a replica is addressed by its pod IP, which a certificate rarely names)."""
    out: dict[str, Any] = {}
    if m.ca_file:
        out["ssl"] = ca_context(m.ca_file, key + "ca_file")
    if m.server_name:
        out["server_hostname"] = m.server_name
    return out


def _end_to_end(headers: CIMultiDictProxy[str] | CIMultiDict[str],
                also: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """The headers a proxy passes on: less the hop-by-hop ones, and less those the `Connection` header names
    (RFC 9110 7.6.1: a proxy must remove both)."""
    named = {t.strip().lower() for v in headers.getall("Connection", []) for t in v.split(",") if t.strip()}
    drop = HOP_BY_HOP | named | set(also)
    return [(k, v) for k, v in headers.items() if k.lower() not in drop]


def _target(raw: str, path: str, prefix: str) -> str:
    """The request-target to forward: the client's own bytes (its percent-encoding kept: decoded, `%23` ended
    the query, `%2F` became a path separator, `+` a raw space), less a routing `prefix`. A prefix the client
    percent-encoded is matched decoded; the rest of such a path is encoded again."""
    if not raw.startswith("/"):  # the absolute form (RFC 9112 3.2.2): the replica gets the origin form
        rest = raw.partition("://")[2]
        cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
        raw = rest[cut:] if rest[cut:].startswith("/") else "/" + rest[cut:]
    raw_path, sep, query = raw.partition("?")
    if prefix and (raw_path == prefix or raw_path.startswith(prefix + "/")):
        raw_path = raw_path[len(prefix):] or "/"
    elif prefix:
        raw_path = URL.build(path=path).raw_path
    return raw_path + (sep + query if sep else "")


def _renamed(body: bytes, model: str) -> bytes:
    """The body with its `model` set to the configured name (the client named an alias). ValueError for a number
    JSON cannot carry (`1e400` reads as infinity, and was written on as the bare word `Infinity`)."""
    obj = json.loads(body)
    obj["model"] = model
    try:
        return json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:  # a lone surrogate escape (a string cut inside an emoji): written escaped again
        return json.dumps(obj, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode()
