"""`keda-llm scaler`: the command's flags -> scaler.assembly (sources, history, Kubernetes reader, service and
servers), then serve until SIGTERM. How sources are made per ScaledObject: scaler/assembly.py.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from keda_llm.scaler.assembly import Scaler, ScalerSettings, Sources, WorkloadSource, host_port
from keda_llm.scaler.assembly import build as assemble
from keda_llm.scaler.server import ScalerServer, TLSFiles

__all__ = ["Sources", "add_arguments", "build", "run", "settings_from_args"]

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
    return host_port(text, default_port)


def settings_from_args(args: argparse.Namespace, *, demand_watch_s: float | None = 1.0,
                       refresh_s: float | None = 1.0) -> ScalerSettings:
    """The command's flags as the assembly's settings."""
    tls = None
    if args.tls_cert or args.tls_key:
        if not (args.tls_cert and args.tls_key):
            raise SystemExit("--tls-cert and --tls-key go together")
        tls = TLSFiles(args.tls_cert, args.tls_key, args.tls_client_ca)
    elif args.tls_client_ca:
        raise SystemExit("--tls-client-ca needs --tls-cert and --tls-key")
    return ScalerSettings(
        grpc_address=args.grpc_address, http_address=host_port(args.http_address, 9091),
        exporters=tuple(e.strip() for e in args.exporters.split(",") if e.strip()),
        exporters_service=args.exporters_service or None, prometheus_address=args.prometheus_address or None,
        interval_s=args.interval, tls=tls, peers=tuple(p for p in args.peers.split(",") if p.strip()),
        peers_service=args.peers_service or None, pod_ip=args.pod_ip, activation_token=args.activation_token,
        refresh_s=refresh_s, demand_watch_s=demand_watch_s)


def build(args: argparse.Namespace, *, clock: Callable[[], float] = time.time, background: bool = True,
          demand_watch_s: float | None = 1.0, refresh_s: float | None = 1.0) -> tuple[ScalerServer, Sources, Any]:
    """The whole scaler from its flags (scaler.assembly.build): (server, sources, Kubernetes reader or None).
    `clock`, `background`, `demand_watch_s` and `refresh_s` are for tests that drive collection and time
    themselves (see tests/scaler/test_scaler_e2e.py): with `background` False no thread collects or
    decides; the test calls `sources.collect_once()` then `server.service.refresh()`, as the threads would."""
    scaler = _assemble(args, clock=clock, background=background, demand_watch_s=demand_watch_s, refresh_s=refresh_s)
    return scaler.server, scaler.sources, scaler.reader


def _assemble(args: argparse.Namespace, *, clock: Callable[[], float] = time.time, background: bool = True,
              demand_watch_s: float | None = 1.0, refresh_s: float | None = 1.0) -> Scaler:
    settings = settings_from_args(args, demand_watch_s=demand_watch_s, refresh_s=refresh_s)
    reader: WorkloadSource | None = None
    if not args.no_kube:
        from keda_llm.scaler.kube import KubeClient, KubeConfig, WorkloadReader

        reader = WorkloadReader(KubeClient(KubeConfig.in_cluster()))
    return assemble(settings, reader=reader, clock=clock, background=background)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    async def main() -> None:
        await _assemble(args).serve(grace=args.grace)

    asyncio.run(main())
    return 0
