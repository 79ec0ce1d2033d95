"""The activation bus: "wake this ScaledObject now", delivered to whichever scaler pod holds KEDA's stream.

KEDA keeps one `StreamIsActive` stream per `external-push` trigger, on one scaler pod (a ClusterIP
Service pins its connection). A gateway's `POST /v1/activate/<namespace>/<scaledobject>` may land on
any pod, so each pod (1) records the activation and wakes its own streams for that ScaledObject, and
(2) passes it to its peers with the FORWARDED_HEADER set, so a peer delivers it locally and never
forwards again (no loops, no storms).

Thread model: the HTTP side runs in threads and the gRPC side on an asyncio loop, so `activate()` is
thread-safe and wakes stream waiters with `loop.call_soon_threadsafe`.

TLS on the HTTP port (`--http-tls-cert`/`--http-tls-key`): relays go to the peers over https, verified
against `--http-tls-ca` and nothing else (not the system's CAs), without a hostname check: peers are
dialled by pod IP from the headless Service, which a cert-manager Certificate cannot name (it does not
know pod IPs). That is acceptable because the CA is our own private one, so a peer must hold a key it
signed, and the relay carries the activation token, which a peer checks in turn.
`ReloadingContext` (keda_llm.common.tls) serves both ends: an `ssl.SSLContext` re-made when its files
change on disk.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from keda_llm.common.addresses import host_port
from keda_llm.common.tls import ReloadingContext, ca_client_context

log = logging.getLogger(__name__)

#: Set on activations a pod passes to its peers; a request carrying it is delivered locally only.
FORWARDED_HEADER = "X-Keda-Llm-Forwarded"
ACTIVATE_PATH = "/v1/activate"


@dataclass(frozen=True, order=True)
class ScaledObjectKey:
    """A ScaledObject's identity as KEDA names it in ScaledObjectRef."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class Subscription:
    """One open stream's interest in one ScaledObject. `wait()` returns when an activation arrives."""

    def __init__(self, bus: ActivationBus, key: ScaledObjectKey, loop: asyncio.AbstractEventLoop) -> None:
        self.key = key
        self._bus = bus
        self._loop = loop
        self._event = asyncio.Event()
        self.evicted = False

    def _wake(self) -> None:  # runs on the subscription's loop
        self._event.set()

    def notify(self) -> None:
        """Thread-safe: wake the waiter from any thread (a no-op once its loop has closed)."""
        with contextlib.suppress(RuntimeError):  # loop closed: the stream is gone
            self._loop.call_soon_threadsafe(self._wake)

    def evict(self) -> None:
        """Thread-safe: end this subscription (a newer stream for the same ScaledObject replaced it)."""
        self.evicted = True
        self.notify()

    async def wait(self, timeout: float | None = None) -> bool:
        """True if woken by an activation (or eviction) within `timeout`; False on timeout."""
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        self._event.clear()
        return True

    def close(self) -> None:
        self._bus.unsubscribe(self)


class ActivationBus:
    """Activations per ScaledObject: the last time each was activated, and the streams waiting for one.

    `max_streams_per_key` bounds the streams held for one ScaledObject: KEDA opens one per trigger, so
    more means a misbehaving client or dead half-open connections; the oldest is evicted, since the
    newest stream is the one most likely still read by a live client.
    """

    def __init__(self, clock: Callable[[], float] = time.time, max_streams_per_key: int = 32,
                 max_keys: int = 10_000) -> None:
        if max_streams_per_key < 1:
            raise ValueError(f"max_streams_per_key must be >= 1, got {max_streams_per_key}")
        if max_keys < 1:
            raise ValueError(f"max_keys must be >= 1, got {max_keys}")
        self._clock = clock
        self._max = max_streams_per_key
        self._max_keys = max_keys
        self._lock = threading.Lock()
        self._subs: dict[ScaledObjectKey, collections.OrderedDict[int, Subscription]] = {}
        # the last activation per ScaledObject, least recently activated first: bounded, since without a
        # Kubernetes view any name is accepted (2,000 POSTs for names no ScaledObject has stayed for good)
        self._last: collections.OrderedDict[ScaledObjectKey, float] = collections.OrderedDict()

    def subscribe(self, key: ScaledObjectKey) -> Subscription:
        """Register the calling stream (must run on the asyncio loop that will wait)."""
        sub = Subscription(self, key, asyncio.get_running_loop())
        evicted: list[Subscription] = []
        with self._lock:
            subs = self._subs.setdefault(key, collections.OrderedDict())
            subs[id(sub)] = sub
            while len(subs) > self._max:
                evicted.append(subs.popitem(last=False)[1])
        for old in evicted:
            log.warning("stream for %s evicted: more than %d streams open for it", key, self._max)
            old.evict()
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            subs = self._subs.get(sub.key)
            if subs is not None:
                subs.pop(id(sub), None)
                if not subs:
                    del self._subs[sub.key]

    def activate(self, key: ScaledObjectKey, at: float | None = None) -> int:
        """Record an activation and wake every local stream for `key`; returns how many were woken."""
        when = self._clock() if at is None else at
        with self._lock:
            self._last[key] = max(when, self._last.get(key, when))
            self._last.move_to_end(key)
            while len(self._last) > self._max_keys:
                self._last.popitem(last=False)
            subs = list(self._subs.get(key, {}).values())
        for sub in subs:
            sub.notify()
        return len(subs)

    def last_activation(self, key: ScaledObjectKey) -> float | None:
        with self._lock:
            return self._last.get(key)

    def streams(self, key: ScaledObjectKey | None = None) -> int:
        """Open streams for `key`, or for all ScaledObjects."""
        with self._lock:
            if key is not None:
                return len(self._subs.get(key, ()))
            return sum(len(s) for s in self._subs.values())

    def watched(self) -> list[ScaledObjectKey]:
        """ScaledObjects with at least one open stream."""
        with self._lock:
            return list(self._subs)


def parse_peer(peer: str, default_port: int) -> tuple[str, int]:
    """`host`, `host:port` or `[v6]:port` -> (host, port), by the one address grammar (common/addresses.py)."""
    try:
        host, port = host_port(peer, default_port)
    except ValueError as err:
        raise ValueError(f"bad peer address {peer!r}: {err}") from None
    if not host or port == 0:
        raise ValueError(f"bad peer address {peer!r}: expected host or host:port, a port from 1 to 65535")
    return host, port


class Peers:
    """Where this pod's peers' HTTP sides are: a static list and/or a headless Service's DNS name.

    The DNS name is resolved on every call (a headless Service's A records are the ready pods), and
    addresses in `self_addresses` (this pod's own IPs, e.g. from POD_IP) are skipped.
    """

    def __init__(self, static: Sequence[str] = (), dns_name: str | None = None, port: int = 9091,
                 self_addresses: Iterable[str] = (),
                 resolve: Callable[[str, int], list[str]] | None = None) -> None:
        self._static = [parse_peer(p, port) for p in static]
        self._dns = parse_peer(dns_name, port) if dns_name else None
        self._self = set(self_addresses)
        self._resolve = resolve or _resolve_all

    def addresses(self) -> list[tuple[str, int]]:
        found = list(self._static)
        if self._dns is not None:
            host, port = self._dns
            try:
                found.extend((ip, port) for ip in self._resolve(host, port))
            except OSError as err:
                log.warning("peer lookup of %s failed: %s", host, err)
        seen: set[tuple[str, int]] = set()
        out = []
        for addr in found:
            if addr[0] in self._self or addr in seen:
                continue
            seen.add(addr)
            out.append(addr)
        return out


def _resolve_all(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


def _url(host: str, port: int, key: ScaledObjectKey, scheme: str = "http") -> str:
    hostpart = f"[{host}]" if ":" in host else host
    ns = urllib.parse.quote(key.namespace, safe="")
    name = urllib.parse.quote(key.name, safe="")
    return f"{scheme}://{hostpart}:{port}{ACTIVATE_PATH}/{ns}/{name}"


def peer_client_context(ca: str) -> ReloadingContext:
    """The relays' client side: a peer's chain must lead to `ca` (only that CA, not the system's);
    no hostname check, since peers are dialled by pod IP (see the module's docstring)."""
    return ca_client_context(ca, what="peer CA")


class PeerForwarder:
    """Passes an activation to every peer at once (one thread each), waiting at most `timeout` s.

    `ca`: the peers' HTTP ports speak TLS; relays go over https, verified against this CA file (re-read
    when it changes). None: plain http."""

    def __init__(self, peers: Peers, timeout: float = 1.0, max_workers: int = 8, token: str | None = None,
                 ca: str | None = None) -> None:
        self._peers = peers
        self._timeout = timeout
        self._token = token  # the pods share one activation token: a peer refuses a relay without it
        self._tls = peer_client_context(ca) if ca else None
        self.scheme = "https" if ca else "http"
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max_workers,
                                                           thread_name_prefix="activation-peer")

    def forward(self, key: ScaledObjectKey) -> dict[str, str]:
        """{peer: "ok" | error text} for each peer."""
        addresses = self._peers.addresses()
        futures = {f"{h}:{p}": self._pool.submit(self._post, _url(h, p, key, self.scheme)) for h, p in addresses}
        results: dict[str, str] = {}
        for peer, fut in futures.items():
            try:
                results[peer] = fut.result(timeout=self._timeout + 0.5)
            except Exception as err:  # a peer down must not fail the local activation
                results[peer] = f"error: {err}"
        return results

    def _post(self, url: str) -> str:
        headers = {FORWARDED_HEADER: "1"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        req = urllib.request.Request(url, data=b"", method="POST", headers=headers)
        try:
            context = self._tls.get() if self._tls is not None else None
            with urllib.request.urlopen(req, timeout=self._timeout, context=context) as resp:
                return "ok" if 200 <= resp.status < 300 else f"error: HTTP {resp.status}"
        except urllib.error.HTTPError as err:
            return f"error: HTTP {err.code}"
        except (urllib.error.URLError, OSError) as err:
            return f"error: {getattr(err, 'reason', err)}"

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
