"""Which endpoints of each model are ready: a static list probed on its health path, or the model's
Service's EndpointSlices (read-only list and watch of `discovery.k8s.io/v1`; ready endpoints only).

`EndpointSet` is the table both fill; the proxy reads it and is told of changes. An endpoint that
refuses a connection is set aside for SUSPECT_S (`suspect`): a slice can still list a pod that has
just gone (the scale-down race), and a request that finds it so is held again, not lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import ssl
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp

from keda_llm.activator.config import ActivatorConfig, KubeConfig, ModelConfig, ca_context

log = logging.getLogger(__name__)

#: How long an endpoint that refused a connection is left out before it is tried again.
SUSPECT_S = 1.0
_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0)


@dataclass(frozen=True)
class Endpoint:
    url: str  # base URL, no trailing slash
    pod: str = ""  # the exporters' `pod` label, for load-aware routing


class EndpointSet:
    """Ready endpoints per model. `on_change(model)` is called whenever a model's ready set changes."""

    def __init__(self, on_change: Callable[[str], None] = lambda model: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.on_change = on_change
        self._clock = clock
        self._ready: dict[str, tuple[Endpoint, ...]] = {}
        self._suspect: dict[str, float] = {}

    def set(self, model: str, endpoints: Iterable[Endpoint]) -> None:
        new = tuple(sorted(set(endpoints), key=lambda e: e.url))
        if new != self._ready.get(model, ()):
            self._ready[model] = new
            self.on_change(model)

    def ready(self, model: str) -> tuple[Endpoint, ...]:
        eps = self._ready.get(model, ())
        if not self._suspect:
            return eps
        now = self._clock()
        for url in [u for u, until in self._suspect.items() if until <= now]:
            del self._suspect[url]
        return tuple(e for e in eps if e.url not in self._suspect)

    def suspect(self, url: str) -> None:
        self._suspect[url] = self._clock() + SUSPECT_S


# ---- static endpoints ----

async def probe_static(cfg: ActivatorConfig, table: EndpointSet, session: aiohttp.ClientSession,
                       stop: asyncio.Event) -> None:
    """Every probe_interval, GET <url><health_path> on each static endpoint; 2xx = ready."""
    models = [m for m in cfg.models if m.endpoints]
    timeout = aiohttp.ClientTimeout(total=cfg.probe_timeout)

    async def ok(url: str) -> bool:
        try:
            async with session.get(url + cfg.health_path, timeout=timeout, allow_redirects=False) as r:
                await r.read()
                return 200 <= r.status < 300
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            return False

    while not stop.is_set():
        for m in models:
            results = await asyncio.gather(*(ok(e.url) for e in m.endpoints))
            table.set(m.name, (Endpoint(e.url, e.pod) for e, up in zip(m.endpoints, results, strict=True) if up))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), cfg.probe_interval)


# ---- EndpointSlices ----

def slice_endpoints(slice_obj: Mapping[str, Any], model: ModelConfig) -> list[Endpoint]:
    """The ready endpoints of one EndpointSlice, as base URLs on the model's port.

    Ready as Kubernetes defines it for consumers: `conditions.ready` true or unset (unknown reads as
    ready), and not terminating. The port: `model.port` if set, else the port named `model.port_name`,
    else the slice's first port; a slice without that port contributes nothing."""
    if not isinstance(slice_obj, dict):
        return []
    ports = [p for p in _list(slice_obj.get("ports")) if isinstance(p, dict)]
    port: object = None
    for p in ports:
        if (model.port and p.get("port") == model.port) or (not model.port and model.port_name
                                                              and p.get("name") == model.port_name):
            port = p.get("port")
            break
    if port is None and not model.port and not model.port_name and ports:
        port = ports[0].get("port")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        return []
    v6 = slice_obj.get("addressType") == "IPv6"
    if slice_obj.get("addressType") not in ("IPv4", "IPv6"):
        return []  # FQDN slices name no pod address
    out = []
    for ep in _list(slice_obj.get("endpoints")):  # an entry of the wrong shape contributes nothing
        if not isinstance(ep, dict):
            continue
        cond = ep.get("conditions") or {}
        if not isinstance(cond, dict) or cond.get("ready") is False or cond.get("terminating") is True:
            continue
        addrs = _list(ep.get("addresses"))
        if not addrs or not isinstance(addrs[0], str) or not addrs[0]:
            continue
        host = f"[{addrs[0]}]" if v6 else addrs[0]
        ref = ep.get("targetRef") or {}
        pod = ref.get("name", "") if isinstance(ref, dict) and ref.get("kind") == "Pod" else ""
        out.append(Endpoint(f"{model.scheme}://{host}:{port}", pod if isinstance(pod, str) else ""))
    return out


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _name(obj: object) -> str:
    """An object's metadata.name; ValueError (the watcher lists again) when it has none."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        raise ValueError(f"an EndpointSlice without metadata.name: {str(obj)[:80]}")
    return name


class SliceWatcher:
    """List, then watch, the EndpointSlices of each model's Service; keep `table` current."""

    def __init__(self, kube: KubeConfig, models: Iterable[ModelConfig], table: EndpointSet,
                 env: Mapping[str, str] | None = None) -> None:
        self.kube = kube
        self.models = [m for m in models if m.service]
        self.table = table
        env = os.environ if env is None else env
        server = kube.api_server
        if not server and self.models:
            host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
            if not host:
                raise ValueError("kubernetes.api_server: empty and KUBERNETES_SERVICE_HOST is not set "
                                 "(not in a cluster): set it, or list static endpoints")
            server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
        self.server = server.rstrip("/")
        self.errors = 0
        # built here, so a CA file that holds no certificate stops the start with its key named (built in the
        # watcher's task, it ended that task without a word and no model ever got an endpoint)
        self._ssl_context = self._ssl() if self.models else False

    def _ssl(self) -> ssl.SSLContext | bool:
        if not self.server.startswith("https:"):
            return False
        if self.kube.ca_file and os.path.exists(self.kube.ca_file):
            return ca_context(self.kube.ca_file, "kubernetes.ca_file")
        return ssl.create_default_context()

    def _headers(self) -> dict[str, str]:
        try:  # re-read each time: projected service-account tokens rotate
            with open(self.kube.token_file, encoding="utf-8") as fh:
                token = fh.read().strip()
        except OSError:
            token = ""
        return {"Authorization": f"Bearer {token}", "Accept": "application/json"} if token else {}

    def _path(self, m: ModelConfig) -> str:
        return (f"/apis/discovery.k8s.io/v1/namespaces/{quote(m.namespace)}/endpointslices"
                f"?labelSelector={quote('kubernetes.io/service-name=' + m.service)}")

    async def run(self, stop: asyncio.Event) -> None:
        if not self.models:
            return
        connector = aiohttp.TCPConnector(ssl=self._ssl_context)
        async with aiohttp.ClientSession(connector=connector) as session:
            tasks = [asyncio.create_task(self._loop(session, m, stop)) for m in self.models]
            try:
                await stop.wait()
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _loop(self, session: aiohttp.ClientSession, m: ModelConfig, stop: asyncio.Event) -> None:
        failures = 0
        while not stop.is_set():
            try:
                slices, rv = await self._list(session, m)
                failures = 0
                await self._watch(session, m, slices, rv)
            except Exception as e:
                # the API's errors, a dropped connection, an answer of the wrong shape alike: list again (a
                # watcher that died on one would have kept its model's endpoints as they were, for ever)
                self.errors += 1
                delay = _BACKOFF_S[min(failures, len(_BACKOFF_S) - 1)]
                failures += 1
                log.warning("EndpointSlices of %s/%s: %s; retrying in %gs", m.namespace, m.service, e, delay)
                await asyncio.sleep(delay)  # the ready set stays as last seen: no flapping to zero

    async def _list(self, session: aiohttp.ClientSession, m: ModelConfig) -> tuple[dict[str, Any], str]:
        timeout = aiohttp.ClientTimeout(total=30)
        async with session.get(self.server + self._path(m), headers=self._headers(), timeout=timeout) as r:
            if r.status != 200:
                raise ValueError(f"list: HTTP {r.status}: {(await r.text())[:200]}")
            body = await r.json()
        if not isinstance(body, dict):
            raise ValueError(f"list: not an object: {str(body)[:80]}")
        slices = {_name(s): s for s in _list(body.get("items"))}
        self._publish(m, slices)
        return slices, str(body.get("metadata", {}).get("resourceVersion", ""))

    async def _watch(self, session: aiohttp.ClientSession, m: ModelConfig, slices: dict[str, Any],
                     rv: str) -> None:
        url = (self.server + self._path(m) + f"&watch=true&allowWatchBookmarks=true&timeoutSeconds=300"
               f"&resourceVersion={quote(rv)}")
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=330)
        async with session.get(url, headers=self._headers(), timeout=timeout) as r:
            if r.status != 200:
                raise ValueError(f"watch: HTTP {r.status}: {(await r.text())[:200]}")
            async for line in r.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                if not isinstance(event, dict) or not isinstance(event.get("object") or {}, dict):
                    raise ValueError(f"watch: an event that is not an object: {line[:80]!r}")
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":  # 410 Gone: our resourceVersion is too old; list again
                    raise ValueError(f"watch: {obj.get('code')} {obj.get('message', '')}")
                if kind == "BOOKMARK":
                    continue
                name = _name(obj)
                if kind == "DELETED":
                    slices.pop(name, None)
                else:
                    slices[name] = obj
                self._publish(m, slices)

    def _publish(self, m: ModelConfig, slices: Mapping[str, Any]) -> None:
        self.table.set(m.name, (e for s in slices.values() for e in slice_endpoints(s, m)))
