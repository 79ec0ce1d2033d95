"""One assembly of the scaler: sources -> HistoryStore -> ScalerService (decide) -> ScalerServer.

`keda-llm scaler` (scaler/cli.py), `keda-llm demo` and the scaler benchmark all build the scaler here,
so what the demo and the benchmark run is what the command runs. The inputs are plain settings
(`ScalerSettings`), the Deployment reader (`WorkloadSource`: the Kubernetes one in a cluster, the
simulated Deployment in the demo), and for tests the clock and whether threads run in the background.

Metric sources are made on demand, one per distinct address a ScaledObject asks for (its
`metricsSource`, `exportersService`/`exporters`, `prometheusAddress`, falling back to the settings).
Each source feeds its own HistoryStore and a ScaledObject reads the store of its own source: two
ScaledObjects of one model name in one namespace, pointed at different exporters (two node pools,
say), each see the replicas their exporters report, never a mix of both.

`build()` makes the parts and must run on the event loop that will serve (grpc.aio binds to it);
`Scaler.start()`/`stop()` run them. `start_in_thread()` does both on an event loop of its own, for
callers that are not asyncio programs (the demo, the benchmark, tests).
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from keda_llm.common.addresses import host_port
from keda_llm.common.periodic import Periodic
from keda_llm.common.tls import ca_client_context
from keda_llm.scaler.activation import PeerForwarder, Peers, ScaledObjectKey
from keda_llm.scaler.config import ConfigError, ScalerConfig
from keda_llm.scaler.decide import decide
from keda_llm.scaler.history import ModelHistory
from keda_llm.scaler.levers import LeverDecide, WarmingBus
from keda_llm.scaler.longhistory import DEFAULT_DAYS
from keda_llm.scaler.model import WorkloadState
from keda_llm.scaler.phases import PhaseTracker, PodTimes
from keda_llm.scaler.restore import LongHistoryRestorer, StoreRef
from keda_llm.scaler.server import HTTPTLSFiles, ScalerServer, TLSFiles
from keda_llm.scaler.service import HistoryStore, ScalerService, ServiceMetrics
from keda_llm.scaler.sources.common import MetricSource
from keda_llm.scaler.sources.exporters import DEFAULT_PORT, ExportersSource, Resolver, dns_targets, static_targets
from keda_llm.scaler.sources.prometheus import PrometheusSource
from keda_llm.scaler.sources.promql import PrometheusClient
from keda_llm.scaler.warm import WarmPlanner

if TYPE_CHECKING:
    from keda_llm.scaler.deletion_cost import DeletionCostMarker


@dataclass(frozen=True)
class ScalerSettings:
    """What `keda-llm scaler`'s flags say, as plain values (defaults: the command's).

    Sources: `exporters` (static host:port or URLs), `exporters_service` (headless Service DNS name,
    host[:port]) and `prometheus_address` are the defaults for ScaledObjects that name none; every
    source collects every `interval_s` (`scrape_timeout_s` per exporter). Decisions: `tick_s` is the
    policy's tick, `refresh_s` how often a DecisionRefresher decides off the RPC path (None: RPCs
    decide, once per tick), `demand_watch_s` how often upstream demand is checked for pushes (None: not).
    Long history (scaler/restore.py): `history_days` of minutes per model, rebuilt from Prometheus where a
    source has one, else read from and written to `history_dir` every `history_save_s` (None: not kept).
    `exporters_tls_ca`: the exporters serve TLS; they are read (and warmed) over https, their chain
    verified against this CA file (re-read when it changes), not their name: they are dialled by pod IP."""

    grpc_address: str = "[::]:9090"
    http_address: tuple[str, int] | None = ("0.0.0.0", 9091)
    exporters: tuple[str, ...] = ()
    exporters_service: str | None = None
    prometheus_address: str | None = None
    interval_s: float = 2.0
    scrape_timeout_s: float = 2.0
    tls: TLSFiles | None = None
    http_tls: HTTPTLSFiles | None = None
    peers: tuple[str, ...] = ()
    peers_service: str | None = None
    pod_ip: str = ""
    activation_token: str | None = None
    tick_s: float = 1.0
    activation_hold_s: float = 300.0
    refresh_s: float | None = 1.0
    demand_watch_s: float | None = 1.0
    warm_token_file: str | None = None
    warm_max_nodes: int = 4
    warm_scan_s: float = 60.0
    history_dir: str | None = None
    history_days: float = DEFAULT_DAYS
    history_save_s: float = 300.0
    history_restore_s: float = 5.0

    exporters_tls_ca: str | None = None


class WorkloadSource(Protocol):
    """The scale targets' /scale as the scaler reads it: `scaler.kube.WorkloadReader` in a cluster."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def track(self, namespace: str, name: str) -> None: ...

    def untrack(self, namespace: str, name: str) -> None: ...

    def state(self, namespace: str, name: str) -> WorkloadState | None: ...


SourceKey = tuple[str, str, str]  # (kind, address, Prometheus for activationQuery)


class Sources:
    """One source per distinct address, each feeding its own HistoryStore; made on first use.

    `background=False` leaves collection to `collect_once()` (tests driving a fake clock); all stores
    share one lock, which the service holds while it decides.
    """

    def __init__(self, settings: ScalerSettings, *, clock: Callable[[], float] = time.time,
                 background: bool = True) -> None:
        self._settings = settings
        self._clock = clock
        self._background = background
        self.history_lock = threading.Lock()
        self._lock = threading.Lock()
        self._sources: dict[SourceKey, tuple[MetricSource, HistoryStore]] = {}
        self._started: set[SourceKey] = set()
        self._queries: dict[tuple[SourceKey, str, str], str] = {}  # the activationQuery of each watched model
        self.restorer = LongHistoryRestorer(
            self._long_stores, self.history_lock, clock=clock, save_every_s=settings.history_save_s,
            history_dir=Path(settings.history_dir) if settings.history_dir else None)
        self._restore_loop = Periodic("scaler-long-history", settings.history_restore_s, self.restorer.step)
        tls = ca_client_context(settings.exporters_tls_ca, what="exporters CA") if settings.exporters_tls_ca else None
        #: The context for https exporters (None: they speak plain http); WarmPlanner takes it too.
        self.exporters_tls = tls.get if tls is not None else None
        self._scheme = "https" if tls is not None else "http"

    def _long_stores(self) -> list[StoreRef]:
        """(source name, its Prometheus or "", store) for the long history restorer: a source rebuilds from the
        Prometheus it reads (`prometheus`) or names for activationQuery (exporters with prometheusAddress)."""
        with self._lock:
            held = list(self._sources.items())
        return [StoreRef("|".join(key), key[2], store, functools.partial(self._query, key)) for key, (_, store) in held]

    def _query(self, key: SourceKey, namespace: str, model: str) -> str | None:
        return self._queries.get((key, namespace, model))

    def watch(self, namespace: str, cfg: ScalerConfig) -> None:
        """Collect the config's model from its source (made and started on first use), with its activationQuery
        (which the long history's rebuild reads too)."""
        source = self.for_config(cfg)
        if cfg.activation_query:
            self._queries[(self.key(cfg), namespace, cfg.model)] = cfg.activation_query
        source.watch(namespace, cfg.model, cfg.activation_query or None)

    def _prometheus(self, address: str) -> PrometheusClient:
        return PrometheusClient(address)

    def open(self, cfg: ScalerConfig) -> tuple[MetricSource, HistoryStore]:
        """The config's source and its store, made on first use but not started (see `for_config`).
        Raises ConfigError when the config names no source and the settings give none."""
        key = self.key(cfg)
        with self._lock:
            held = self._sources.get(key)
            if held is None:
                store = HistoryStore(lock=self.history_lock, long_days=self._settings.history_days)
                source = self._make(key)
                source.subscribe(store.ingest)
                held = self._sources[key] = (source, store)
        return held

    def for_config(self, cfg: ScalerConfig) -> MetricSource:
        """The config's source, made on first use and (in the background mode) started."""
        source, _ = self.open(cfg)
        key = self.key(cfg)
        with self._lock:
            start = self._background and key not in self._started
            self._started.add(key)
        if start:
            source.start()
            self._restore_loop.start()  # once: a second start does nothing
        return source

    def answered_at(self, cfg: ScalerConfig) -> float | None:
        """When the config's source last collected replica data (None: never): within its staleAfter, a model it
        does not list means "no replica runs", not "no data"."""
        try:
            key = self.key(cfg)
        except ConfigError:
            return None
        held = self._sources.get(key)
        return held[0].last_success_at if held is not None else None

    def history(self, namespace: str, cfg: ScalerConfig) -> ModelHistory | None:
        """The model's history as the config's own source collected it (None: not collected yet)."""
        try:
            key = self.key(cfg)
        except ConfigError:
            return None
        held = self._sources.get(key)
        return held[1].get(namespace, cfg.model) if held is not None else None

    def collect_once(self) -> None:
        """One collection cycle of every source, now, on this thread."""
        with self._lock:
            sources = [source for source, _ in self._sources.values()]
        for source in sources:
            source.collect_once()
        self.restorer.step()

    def key(self, cfg: ScalerConfig) -> SourceKey:
        """Which source serves this config: its own addresses, else the settings'."""
        s = self._settings
        prom = cfg.prometheus_address or s.prometheus_address or ""
        if cfg.metrics_source == "prometheus":
            if not prom:
                raise ConfigError("prometheusAddress", None, "required for metricsSource prometheus "
                                  "(or start the scaler with --prometheus-address)")
            return ("prometheus", prom, prom)
        if cfg.activation_query and not prom:
            raise ConfigError("prometheusAddress", None, "activationQuery is PromQL: it needs a Prometheus "
                              "(set prometheusAddress, or start the scaler with --prometheus-address)")
        listed = ",".join(cfg.exporters) or ("" if cfg.exporters_service else ",".join(s.exporters))
        service = cfg.exporters_service or s.exporters_service or ""
        if listed:
            return ("exporters-static", listed, prom)
        if service:
            return ("exporters-dns", service, prom)
        raise ConfigError("exportersService", None, "no exporters: set exportersService or exporters "
                          "(or start the scaler with --exporters-service)")

    def exporters(self, cfg: ScalerConfig) -> Resolver | None:
        """The exporters' /metrics URLs for this config (warming talks to them), or None: a Prometheus
        source, or no exporters to be found (warming is then off for it)."""
        try:
            kind, where, _ = self.key(cfg)
        except ConfigError:
            return None
        if kind == "prometheus":
            s = self._settings
            if s.exporters:
                return static_targets(s.exporters, self._scheme)
            if s.exporters_service:
                return self._resolver("exporters-dns", s.exporters_service)
            return None
        return self._resolver(kind, where)

    def _resolver(self, kind: str, where: str) -> Resolver:
        if kind == "exporters-static":
            return static_targets([u.strip() for u in where.split(",") if u.strip()], self._scheme)
        host, port = host_port(where, DEFAULT_PORT)
        return dns_targets(host, port, scheme=self._scheme)

    def _make(self, key: SourceKey) -> MetricSource:
        kind, where, prom = key
        s = self._settings
        if kind == "prometheus":
            return PrometheusSource(self._prometheus(where), interval_s=max(s.interval_s, 1.0), clock=self._clock)
        resolver = self._resolver(kind, where)
        return ExportersSource(resolver, interval_s=s.interval_s, timeout_s=s.scrape_timeout_s,
                               activation=self._prometheus(prom) if prom else None, clock=self._clock,
                               tls=self.exporters_tls)

    def stop(self) -> None:
        """Save the long history (with --history-dir), then stop every source at once.

        The save comes first and the sources stop side by side: each waits up to 10 s for a step in
        progress and then for its fetches, and one after another, a handful of hung sources outlasted
        Kubernetes' 30 s termination grace, so the pod was killed before its snapshot was written."""
        self.restorer.stop()
        self._restore_loop.stop()
        self.restorer.save()  # the long tiers as they are now, for the next start (with --history-dir)
        with self._lock:
            sources = [source for source, _ in self._sources.values()]
        stopping = [threading.Thread(target=source.stop, name="scaler-source-stop", daemon=True) for source in sources]
        for t in stopping:
            t.start()
        for t in stopping:
            t.join()


@dataclass
class Scaler:
    """The assembled scaler: `service` decides, `server` serves gRPC and HTTP, `sources` collect, and
    `reader` (if any) reads the Deployments' /scale."""

    service: ScalerService
    server: ScalerServer
    sources: Sources
    reader: WorkloadSource | None
    planner: WarmPlanner | None = None
    phases: PhaseTracker | None = None
    levers: LeverDecide | None = None

    @property
    def grpc_target(self) -> str:
        """Where a client on this machine reaches the gRPC side (a bound wildcard address included)."""
        return f"127.0.0.1:{self.server.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"{self.server.http_scheme}://127.0.0.1:{self.server.http_port}"

    async def start(self) -> None:
        if self.reader is not None:
            self.reader.start()
        if self.planner is not None:
            self.planner.start()
        await self.server.start()

    async def stop(self, grace: float = 5.0) -> None:
        """The server first (NOT_SERVING, drain), then collection and the reader."""
        try:
            await self.server.stop(grace)
        finally:
            self.sources.stop()
            if self.reader is not None:
                self.reader.stop()
            if self.planner is not None:
                self.planner.stop()

    async def serve(self, grace: float = 5.0) -> None:
        """Serve until SIGTERM/SIGINT, then stop gracefully (`keda-llm scaler`)."""
        if self.reader is not None:
            self.reader.start()
        if self.planner is not None:
            self.planner.start()
        try:
            await self.server.serve(grace=grace)
        finally:
            self.sources.stop()
            if self.reader is not None:
                self.reader.stop()
            if self.planner is not None:
                self.planner.stop()


def build(settings: ScalerSettings, *, reader: WorkloadSource | None = None, clock: Callable[[], float] = time.time,
          background: bool = True, extra_handlers: Sequence[Any] = (), marker: DeletionCostMarker | None = None
          ) -> Scaler:
    """The whole scaler, not yet started. Call it on the event loop that will serve.

    `reader`: where the service reads each ScaledObject's Deployment (None: the replicas the sources
    report stand in). `background=False` runs no thread of its own: the caller collects
    (`sources.collect_once()`) and decides (`service.refresh()`), as tests on a fake clock do.
    With `refresh_s` set, an answer is reused for up to two collection intervals plus two refreshes
    before an RPC decides on the spot (scaler/service.py). `extra_handlers`: more gRPC services on the
    same server (the benchmark's baseline). `marker`: --pod-deletion-cost (scaler/deletion_cost.py) sees
    every decision."""
    sources = Sources(settings, clock=clock, background=background)
    # the cold-start levers (scaler/levers.py): measured phases -> horizon, warmCapacity, weight warming
    metrics = ServiceMetrics()
    phases = PhaseTracker(metrics.registry)
    planner = WarmPlanner(token_file=settings.warm_token_file, registry=metrics.registry, clock=clock,
                          max_nodes=settings.warm_max_nodes, scan_interval_s=settings.warm_scan_s,
                          background=background, tls=sources.exporters_tls)
    levers = LeverDecide(marker.wrap(decide) if marker is not None else decide, phases=phases, planner=planner,
                         resolver=sources.exporters)
    bus = WarmingBus(levers, clock=clock)

    def on_new(key: ScaledObjectKey, cfg: ScalerConfig) -> None:
        sources.watch(key.namespace, cfg)
        bus.track(key, cfg)
        resolve = sources.exporters(cfg) if cfg.warm_path else None
        if resolve is not None:
            planner.watch((key.namespace, cfg.model), resolve)
        if reader is not None:
            reader.track(key.namespace, key.name)
            for variant in cfg.variants:  # the split reads every variant's Deployment (scaler/pools.py)
                reader.track(key.namespace, variant.name)

    def on_forget(key: ScaledObjectKey, cfg: ScalerConfig) -> None:
        """No entry of the service uses this ScaledObject any more (its model stays watched at its source)."""
        bus.untrack(key)
        if reader is not None:
            reader.untrack(key.namespace, key.name)

    def on_pods(namespace: str, name: str, pods: list[PodTimes]) -> None:
        cfg = bus.config(ScaledObjectKey(namespace, name))
        if cfg is not None and cfg.answer == "replicas":  # a warmCapacity target's pods are placeholders
            phases.observe(namespace, cfg.model, pods)

    observe = getattr(reader, "observe_pods", None)
    if observe is not None:
        observe(on_pods)

    refresh_s = settings.refresh_s
    service = ScalerService(
        decide=levers, history_for=lambda key, cfg: sources.history(key.namespace, cfg),
        history_lock=sources.history_lock, source_answered_at=lambda key, cfg: sources.answered_at(cfg),
        workloads=(lambda k: reader.state(k.namespace, k.name)) if reader is not None else None,
        bus=bus, clock=clock, on_new=on_new, on_forget=on_forget, metrics=metrics,
        tick_s=settings.tick_s, activation_hold_s=settings.activation_hold_s,
        reuse_s=2 * (settings.interval_s + refresh_s) if refresh_s else 0.0,
    )
    http_port = settings.http_address[1] if settings.http_address is not None else 9091
    peers = Peers(static=list(settings.peers), dns_name=settings.peers_service, port=http_port,
                  self_addresses=[settings.pod_ip] if settings.pod_ip else [])
    exists = getattr(reader, "exists", None)  # the Kubernetes reader can tell; another reader cannot
    server = ScalerServer(service, grpc_address=settings.grpc_address, http_address=settings.http_address,
                          tls=settings.tls, http_tls=settings.http_tls,
                          forwarder=PeerForwarder(peers, token=settings.activation_token,
                                                  ca=settings.http_tls.peer_ca if settings.http_tls else None),
                          activation_token=settings.activation_token,
                          scaled_object_exists=(lambda k: exists(k.namespace, k.name)) if exists else None,
                          config_error=ConfigError, extra_handlers=extra_handlers,
                          demand_watch_s=settings.demand_watch_s, refresh_s=refresh_s if background else None)
    return Scaler(service, server, sources, reader, planner, phases, levers)


class ScalerThread:
    """A started scaler on an event loop of its own thread; `stop()` ends both."""

    def __init__(self, scaler: Scaler, loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
        self.scaler = scaler
        self.loop = loop
        self._thread = thread

    @property
    def grpc_target(self) -> str:
        return self.scaler.grpc_target

    @property
    def http_url(self) -> str:
        return self.scaler.http_url

    def stop(self, grace: float = 0.5) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.scaler.stop(grace), self.loop).result(30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()


def start_in_thread(settings: ScalerSettings, *, reader: WorkloadSource | None = None,
                    clock: Callable[[], float] = time.time, background: bool = True,
                    extra_handlers: Sequence[Any] = (),
                    prepare: Callable[[Scaler], None] | None = None) -> ScalerThread:
    """`build` and `start` on a new event loop thread. `prepare(scaler)` runs between the two (on the loop)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="scaler-loop", daemon=True)
    thread.start()

    async def make() -> Scaler:
        scaler = build(settings, reader=reader, clock=clock, background=background, extra_handlers=extra_handlers)
        if prepare is not None:
            prepare(scaler)
        await scaler.start()
        return scaler

    try:
        scaler = asyncio.run_coroutine_threadsafe(make(), loop).result(30)
    except BaseException:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        raise
    return ScalerThread(scaler, loop, thread)
