"""`keda-llm scaler`: wire sources, history, Kubernetes reader, service and servers, then serve until SIGTERM.

Metric sources are made on demand, one per distinct address a ScaledObject asks for (its
`metricsSource`, `exportersService`/`exporters`, `prometheusAddress`, falling back to this command's
flags). Each source feeds its own HistoryStore and a ScaledObject reads the store of its own source:
two ScaledObjects of one model name in one namespace, pointed at different exporters (two node
pools, say), each see the replicas their exporters report, never a mix of both.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from keda_llm.scaler.activation import ActivationBus, PeerForwarder, Peers, ScaledObjectKey
from keda_llm.scaler.config import ConfigError, ScalerConfig
from keda_llm.scaler.decide import decide
from keda_llm.scaler.history import ModelHistory
from keda_llm.scaler.server import ScalerServer, TLSFiles
from keda_llm.scaler.service import HistoryStore, ScalerService
from keda_llm.scaler.sources.common import MetricSource
from keda_llm.scaler.sources.exporters import DEFAULT_PORT, ExportersSource, dns_targets, static_targets
from keda_llm.scaler.sources.prometheus import PrometheusSource
from keda_llm.scaler.sources.promql import PrometheusClient

log = logging.getLogger("keda_llm.scaler")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    g = parser.add_argument_group("listeners")
    g.add_argument("--grpc-address", default=env("KEDA_LLM_GRPC_ADDRESS", "[::]:9090"),
                   help="gRPC listen address for KEDA (default [::]:9090)")
    g.add_argument("--http-address", default=env("KEDA_LLM_HTTP_ADDRESS", "0.0.0.0:9091"),
                   help="HTTP listen address: /metrics, /healthz, POST /v1/activate (default 0.0.0.0:9091)")
    g.add_argument("--tls-cert", default=env("KEDA_LLM_TLS_CERT"), help="server certificate (PEM file)")
    g.add_argument("--tls-key", default=env("KEDA_LLM_TLS_KEY"), help="server private key (PEM file)")
    g.add_argument("--tls-client-ca", default=env("KEDA_LLM_TLS_CLIENT_CA"),
                   help="CA for client certificates: turns on mutual TLS")
    g.add_argument("--grace", type=float, default=5.0, help="seconds to drain on SIGTERM (default 5)")
    s = parser.add_argument_group("metric sources (defaults for ScaledObjects that do not name their own)")
    s.add_argument("--exporters-service", default=env("KEDA_LLM_EXPORTERS_SERVICE"),
                   help="headless Service DNS name of the exporters, host[:port] (port 9400 by default)")
    s.add_argument("--exporters", default=env("KEDA_LLM_EXPORTERS", ""),
                   help="static comma-separated exporters (host:port or URLs)")
    s.add_argument("--prometheus-address", default=env("KEDA_LLM_PROMETHEUS_ADDRESS"),
                   help="Prometheus base URL (metricsSource: prometheus, activationQuery)")
    s.add_argument("--interval", type=float, default=2.0, help="collection interval in seconds (default 2)")
    k = parser.add_argument_group("Kubernetes and peers")
    k.add_argument("--no-kube", action="store_true",
                   help="do not read ScaledObjects and /scale (replicas listed by the exporters stand in)")
    k.add_argument("--peers-service", default=env("KEDA_LLM_PEERS_SERVICE"),
                   help="headless Service DNS name of the scaler pods, for passing activations on")
    k.add_argument("--peers", default=env("KEDA_LLM_PEERS", ""), help="static comma-separated peers host:port")
    k.add_argument("--pod-ip", default=env("POD_IP", ""), help="this pod's IP, skipped among the peers")
    k.add_argument("--activation-token", default=env("KEDA_LLM_ACTIVATION_TOKEN"),
                   help="require `Authorization: Bearer <token>` on POST /v1/activate")
    parser.add_argument("--log-level", default=env("KEDA_LLM_LOG_LEVEL", "INFO"))


def _host_port(text: str, default_port: int) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host:
        return text, default_port
    return host.strip("[]"), int(port)


SourceKey = tuple[str, str, str]  # (kind, address, Prometheus for activationQuery)


class Sources:
    """One source per distinct address, each feeding its own HistoryStore; made on first use.

    `background=False` leaves collection to `collect_once()` (tests driving a fake clock); all stores
    share one lock, which the service holds while it decides.
    """

    def __init__(self, args: argparse.Namespace, *, clock: Callable[[], float] = time.time,
                 background: bool = True) -> None:
        self._args = args
        self._clock = clock
        self._background = background
        self.history_lock = threading.Lock()
        self._lock = threading.Lock()
        self._sources: dict[SourceKey, tuple[MetricSource, HistoryStore]] = {}

    def _prometheus(self, address: str) -> PrometheusClient:
        return PrometheusClient(address)

    def for_config(self, cfg: ScalerConfig) -> MetricSource:
        """The config's source, made and started on first use. Raises ConfigError when it names none."""
        key = self.key(cfg)
        with self._lock:
            held = self._sources.get(key)
            if held is None:
                store = HistoryStore(lock=self.history_lock)
                source = self._make(key)
                source.subscribe(store.ingest)
                if self._background:
                    source.start()
                held = self._sources[key] = (source, store)
        return held[0]

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

    def key(self, cfg: ScalerConfig) -> SourceKey:
        """Which source serves this config: its own addresses, else the command's flags."""
        a = self._args
        prom = cfg.prometheus_address or a.prometheus_address or ""
        if cfg.metrics_source == "prometheus":
            if not prom:
                raise ConfigError("prometheusAddress", None, "required for metricsSource prometheus "
                                  "(or start the scaler with --prometheus-address)")
            return ("prometheus", prom, prom)
        if cfg.activation_query and not prom:
            raise ConfigError("prometheusAddress", None, "activationQuery is PromQL: it needs a Prometheus "
                              "(set prometheusAddress, or start the scaler with --prometheus-address)")
        listed = ",".join(cfg.exporters) or ("" if cfg.exporters_service else a.exporters)
        service = cfg.exporters_service or a.exporters_service or ""
        if listed:
            return ("exporters-static", listed, prom)
        if service:
            return ("exporters-dns", service, prom)
        raise ConfigError("exportersService", None, "no exporters: set exportersService or exporters "
                          "(or start the scaler with --exporters-service)")

    def _make(self, key: SourceKey) -> MetricSource:
        kind, where, prom = key
        if kind == "prometheus":
            return PrometheusSource(self._prometheus(where), interval_s=max(self._args.interval, 1.0),
                                    clock=self._clock)
        if kind == "exporters-static":
            resolver = static_targets([u.strip() for u in where.split(",") if u.strip()])
        else:
            host, port = _host_port(where, DEFAULT_PORT)
            resolver = dns_targets(host, port)
        return ExportersSource(resolver, interval_s=self._args.interval,
                               activation=self._prometheus(prom) if prom else None, clock=self._clock)

    def stop(self) -> None:
        with self._lock:
            sources = [source for source, _ in self._sources.values()]
        for source in sources:
            source.stop()


def build(args: argparse.Namespace, *, clock: Callable[[], float] = time.time, background: bool = True,
          demand_watch_s: float | None = 1.0, refresh_s: float | None = 1.0) -> tuple[ScalerServer, Sources, Any]:
    """The whole scaler from its flags. `clock`, `background`, `demand_watch_s` and `refresh_s` are for
    tests that drive collection and time themselves (see tests/scaler/test_scaler_e2e.py).

    `refresh_s`: decisions are made by a background thread that often, after collection lands, and RPCs
    read them (scaler/service.py); an answer is served for up to two collection intervals plus two
    refreshes before an RPC decides on the spot (the refresher is behind or stopped). None: RPCs decide,
    once per tick. With `background` False no refresher thread runs either: the test calls
    `server.service.refresh()` after each `sources.collect_once()`, as the thread would."""
    sources = Sources(args, clock=clock, background=background)
    reader: Any = None
    if not args.no_kube:
        from keda_llm.scaler.kube import KubeClient, KubeConfig, WorkloadReader

        reader = WorkloadReader(KubeClient(KubeConfig.in_cluster()))

    def on_new(key: ScaledObjectKey, cfg: ScalerConfig) -> None:
        sources.for_config(cfg).watch(key.namespace, cfg.model, cfg.activation_query or None)
        if reader is not None:
            reader.track(key.namespace, key.name)

    def on_forget(key: ScaledObjectKey, cfg: ScalerConfig) -> None:
        if reader is not None:
            reader.untrack(key.namespace, key.name)

    service = ScalerService(
        decide=decide, history_for=lambda key, cfg: sources.history(key.namespace, cfg),
        history_lock=sources.history_lock,
        workloads=(lambda k: reader.state(k.namespace, k.name)) if reader is not None else None,
        bus=ActivationBus(clock=clock), clock=clock, on_new=on_new, on_forget=on_forget,
        reuse_s=2 * (args.interval + refresh_s) if refresh_s else 0.0,
    )
    peers = Peers(static=[p for p in args.peers.split(",") if p.strip()], dns_name=args.peers_service,
                  port=_host_port(args.http_address, 9091)[1], self_addresses=[args.pod_ip] if args.pod_ip else [])
    tls = None
    if args.tls_cert or args.tls_key:
        if not (args.tls_cert and args.tls_key):
            raise SystemExit("--tls-cert and --tls-key go together")
        tls = TLSFiles(args.tls_cert, args.tls_key, args.tls_client_ca)
    elif args.tls_client_ca:
        raise SystemExit("--tls-client-ca needs --tls-cert and --tls-key")
    server = ScalerServer(service, grpc_address=args.grpc_address,
                          http_address=_host_port(args.http_address, 9091), tls=tls,
                          forwarder=PeerForwarder(peers), activation_token=args.activation_token,
                          config_error=ConfigError, demand_watch_s=demand_watch_s,
                          refresh_s=refresh_s if background else None)
    return server, sources, reader


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    async def main() -> None:
        server, sources, reader = build(args)
        if reader is not None:
            reader.start()
        try:
            await server.serve(grace=args.grace)
        finally:
            sources.stop()
            if reader is not None:
                reader.stop()

    asyncio.run(main())
    return 0
