"""`keda-llm scaler`: the command's flags -> scaler.assembly (sources, history, Kubernetes reader, service and
servers), then serve until SIGTERM. How sources are made per ScaledObject: scaler/assembly.py.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import os
import socket
import ssl
import sys
import time
from collections.abc import Callable
from typing import Any

from keda_llm.common.addresses import host_port
from keda_llm.common.durations import check_interval, parse_duration
from keda_llm.scaler.assembly import Scaler, ScalerSettings, Sources, WorkloadSource
from keda_llm.scaler.assembly import build as assemble
from keda_llm.scaler.server import HTTPTLSFiles, ListenHostError, ScalerServer, TLSFiles, address_family

__all__ = ["Sources", "add_arguments", "build", "run", "settings_from_args"]

log = logging.getLogger("keda_llm.scaler")


def duration(text: str) -> float:
    """A flag's duration, Go syntax or bare seconds (`2s`, `500ms`, `2`), as the exporter's config takes it."""
    try:
        seconds = parse_duration(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: {err}") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be greater than 0")
    return seconds


def interval(text: str) -> float:
    """A loop's period: a duration no shorter than the common floor (100ms)."""
    seconds = duration(text)
    try:
        return check_interval(seconds)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: {err}") from None


def days(text: str) -> float:
    """--history-days: a number of days in (0, 366]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not a number of days") from None
    if not 0 < value <= 366:
        raise argparse.ArgumentTypeError(f"{text!r}: must be in (0, 366] days")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not a whole number") from None
    if not 1 <= value <= 1024:
        raise argparse.ArgumentTypeError(f"{text!r}: must be in [1, 1024]")
    return value


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
    g.add_argument("--tls-client-san", default=env("KEDA_LLM_TLS_CLIENT_SAN", ""),
                   help="with --tls-client-ca: serve only client certificates naming one of these subject "
                        "alternative names (comma-separated DNS names, URIs or IPs), e.g. "
                        "keda-operator.keda.svc")
    g.add_argument("--http-tls-cert", default=env("KEDA_LLM_HTTP_TLS_CERT"),
                   help="serve the HTTP port over TLS (1.2+) with this certificate (PEM file; re-read when it "
                        "changes); may be the gRPC side's --tls-cert. No client certificates: POST /v1/activate "
                        "is authenticated by --activation-token")
    g.add_argument("--http-tls-key", default=env("KEDA_LLM_HTTP_TLS_KEY"),
                   help="private key for --http-tls-cert (PEM file)")
    g.add_argument("--http-tls-ca", default=env("KEDA_LLM_HTTP_TLS_CA"),
                   help="with --http-tls-cert: CA that signs the peers' certificates; activations are relayed "
                        "to peers over https verified against it (chain only, as peers are dialled by pod IP)")
    g.add_argument("--grace", type=duration, default=5.0,
                   help="how long to drain on SIGTERM, a duration such as 5s (default 5s)")
    s = parser.add_argument_group("metric sources (defaults for ScaledObjects that do not name their own)")
    s.add_argument("--exporters-service", default=env("KEDA_LLM_EXPORTERS_SERVICE"),
                   help="headless Service DNS name of the exporters, host[:port] (port 9400 by default)")
    s.add_argument("--exporters", default=env("KEDA_LLM_EXPORTERS", ""),
                   help="static comma-separated exporters (host:port or URLs)")
    s.add_argument("--exporters-tls-ca", default=env("KEDA_LLM_EXPORTERS_TLS_CA"),
                   help="the exporters serve TLS: read them (and call their /v1/warm) over https, verified "
                        "against this CA (PEM file, re-read when it changes; the chain, not the name, as "
                        "exporters are dialled by pod IP)")
    s.add_argument("--prometheus-address", default=env("KEDA_LLM_PROMETHEUS_ADDRESS"),
                   help="Prometheus base URL (metricsSource: prometheus, activationQuery)")
    s.add_argument("--interval", type=interval, default=2.0,
                   help="collection interval, a duration such as 2s or 500ms, at least 100ms (default 2s)")
    h = parser.add_argument_group("long history (per-minute rates and demand for seasonal forecasts)")
    h.add_argument("--history-dir", default=env("KEDA_LLM_HISTORY_DIR"),
                   help="directory where the long history of models read WITHOUT a Prometheus is saved every 5 "
                        "minutes and at shutdown, and read back at start (one file, at most 256 MiB). Each pod keeps "
                        "its own: pods started at different times may then differ. With a Prometheus "
                        "(--prometheus-address, prometheusAddress or metricsSource: prometheus) the history is "
                        "rebuilt from it instead, the same on every pod. Unset: not saved")
    h.add_argument("--history-days", type=days, default=14.0,
                   help="days of per-minute history kept per model (default 14; 121 KB a model)")
    k = parser.add_argument_group("Kubernetes and peers")
    k.add_argument("--no-kube", action="store_true",
                   help="do not read ScaledObjects and /scale (replicas listed by the exporters stand in)")
    k.add_argument("--peers-service", default=env("KEDA_LLM_PEERS_SERVICE"),
                   help="headless Service DNS name of the scaler pods, for passing activations on")
    k.add_argument("--peers", default=env("KEDA_LLM_PEERS", ""), help="static comma-separated peers host:port")
    k.add_argument("--pod-ip", default=env("POD_IP", ""), help="this pod's IP, skipped among the peers")
    k.add_argument("--pod-deletion-cost", action="store_true",
                   help="annotate each model's most degraded replica with controller.kubernetes.io/"
                        "pod-deletion-cost so a scale-down removes it first (needs `patch` on pods: "
                        "deploy/overlays/pod-deletion-cost; not with --no-kube)")
    k.add_argument("--activation-token", default=env("KEDA_LLM_ACTIVATION_TOKEN"),
                   help="require `Authorization: Bearer <token>` on POST /v1/activate [$KEDA_LLM_ACTIVATION_TOKEN]")
    w = parser.add_argument_group("cold-start warming (ScaledObjects with warmPath)")
    w.add_argument("--warm-token-file", default=env("KEDA_LLM_WARM_TOKEN_FILE"),
                   help="file holding the exporters' POST /v1/warm bearer token (a mounted Secret; re-read when "
                        "it changes); unset: no warm call is made (counted as result no_token)")
    w.add_argument("--warm-max-nodes", type=positive_int, default=4,
                   help="at most this many nodes warmed per cold start, whatever warmNodes says (default 4)")
    w.add_argument("--warm-scan-interval", type=interval, default=60.0,
                   help="how often the exporters are scanned for the nodes each warmed model runs on, so a "
                        "wake from zero prefers them (default 60s)")
    parser.add_argument("--log-level", default=env("KEDA_LLM_LOG_LEVEL", "INFO"),
                        help="DEBUG, INFO, WARNING or ERROR (default INFO)")


def _host_port(text: str, default_port: int) -> tuple[str, int]:
    return host_port(text, default_port)


def settings_from_args(args: argparse.Namespace, *, demand_watch_s: float | None = 1.0,
                       refresh_s: float | None = 1.0) -> ScalerSettings:
    """The command's flags as the assembly's settings."""
    tls = None
    if args.tls_cert or args.tls_key:
        if not (args.tls_cert and args.tls_key):
            raise StartError("--tls-cert and --tls-key go together", "pass both, or neither for plaintext")
        sans = tuple(n.strip() for n in (args.tls_client_san or "").split(",") if n.strip())
        if sans and not args.tls_client_ca:
            raise StartError("--tls-client-san needs --tls-client-ca", "client identities come from client "
                             "certificates: pass the CA that signs them")
        tls = TLSFiles(args.tls_cert, args.tls_key, args.tls_client_ca, sans)
    elif args.tls_client_ca or args.tls_client_san:
        raise StartError("--tls-client-ca needs --tls-cert and --tls-key", "mutual TLS is TLS first: pass all three")
    _check_addresses(args)
    if args.history_dir:
        _check_history_dir(args.history_dir)
    return ScalerSettings(
        grpc_address=_grpc_address(args.grpc_address), http_address=host_port(args.http_address, 9091),
        http_tls=http_tls_from_args(args),
        exporters=tuple(e.strip() for e in args.exporters.split(",") if e.strip()),
        exporters_service=args.exporters_service or None, prometheus_address=args.prometheus_address or None,
        interval_s=args.interval, tls=tls, peers=tuple(p for p in args.peers.split(",") if p.strip()),
        peers_service=args.peers_service or None, pod_ip=args.pod_ip, activation_token=args.activation_token,
        refresh_s=refresh_s, demand_watch_s=demand_watch_s, warm_token_file=args.warm_token_file or None,
        warm_max_nodes=args.warm_max_nodes, warm_scan_s=args.warm_scan_interval,
        history_dir=args.history_dir or None, history_days=args.history_days,
        exporters_tls_ca=args.exporters_tls_ca or None)


def http_tls_from_args(args: argparse.Namespace) -> HTTPTLSFiles | None:
    """--http-tls-cert/--http-tls-key/--http-tls-ca as HTTPTLSFiles, or a StartError for a combination
    that cannot work."""
    cert, key, ca = args.http_tls_cert, args.http_tls_key, args.http_tls_ca
    if not (cert or key):
        if ca:
            raise StartError("--http-tls-ca needs --http-tls-cert and --http-tls-key",
                             "the CA verifies peers' HTTPS ports: turn on TLS for this pod's HTTP port too, or "
                             "drop --http-tls-ca")
        return None
    if not (cert and key):
        raise StartError("--http-tls-cert and --http-tls-key go together", "pass both, or neither for plain HTTP")
    if not ca and (args.peers.strip() or args.peers_service):
        raise StartError("with --http-tls-cert, activations are relayed to peers over https and need "
                         "--http-tls-ca", "pass the CA that signs the peers' certificates (the cert-manager "
                         "secret's ca.crt)")
    return HTTPTLSFiles(cert, key, ca or None)


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
    marker = None
    if getattr(args, "pod_deletion_cost", False) and args.no_kube:
        raise StartError("--pod-deletion-cost writes pod annotations through the Kubernetes API",
                         "drop --no-kube, or drop --pod-deletion-cost")
    if not args.no_kube:
        from keda_llm.scaler.kube import KubeClient, KubeConfig, WorkloadReader

        client = KubeClient(KubeConfig.in_cluster())
        reader = WorkloadReader(client)
        if getattr(args, "pod_deletion_cost", False):
            from keda_llm.scaler.deletion_cost import DeletionCostMarker

            marker = DeletionCostMarker(client.merge_patch, background=background)
    return assemble(settings, reader=reader, clock=clock, background=background, marker=marker)


def _check_addresses(args: argparse.Namespace) -> None:
    """Every address flag parsed before anything starts: a bad one is one line naming the flag, not a traceback
    at bind time, nor an INTERNAL error on every RPC later (a bad --exporters-service)."""
    from keda_llm.scaler.activation import parse_peer
    from keda_llm.scaler.config import parse_host_port, parse_list, parse_url

    try:  # a peer without a port is at this pod's own HTTP port (the assembly's rule)
        peer_port = host_port(args.http_address, 9091)[1]
    except ValueError:
        peer_port = 9091  # --http-address is reported below
    checks: list[tuple[str, str | None, Callable[[str], object]]] = [
        ("--grpc-address", args.grpc_address, lambda v: host_port(v, 9090)),
        ("--http-address", args.http_address, lambda v: host_port(v, 9091)),
        ("--exporters-service", args.exporters_service, parse_host_port),
        ("--exporters", args.exporters, parse_list),
        ("--prometheus-address", args.prometheus_address, parse_url),
        ("--peers-service", args.peers_service, lambda v: parse_peer(v, peer_port)),
        *(("--peers", p, lambda v: parse_peer(v, peer_port)) for p in args.peers.split(",") if p.strip()),
    ]
    for flag, value, parse in checks:
        if value or flag in ("--grpc-address", "--http-address"):  # listeners have no "unset": "" is an error
            try:
                parse(value or "")
            except ValueError as err:
                raise StartError(f"{flag} {value!r}: {err}", "host:port ([v6]:port for IPv6), or :port for every "
                                 "address; URLs where the flag takes one (--help)") from None


def _check_history_dir(name: str) -> None:
    """--history-dir is a folder the scaler can write, made if missing: a file there, or a read-only mount, was
    a warning at start and another every 5 minutes, and the history was never kept."""
    from keda_llm.common.folders import writable_folder_problem

    problem = writable_folder_problem(name)
    if problem is not None:
        raise StartError(f"--history-dir {name}: {problem}", "a writable folder (a volume mount) where the scaler "
                         "keeps its long history, or leave it unset")


def _grpc_address(text: str) -> str:
    """`:port` (every address, as for --http-address) in the form gRPC binds: `[::]:port`."""
    return f"[::]{text.strip()}" if text.strip().startswith(":") else text


class StartError(Exception):
    """An expected reason the scaler cannot start: one line and a hint for the user, never a traceback."""

    def __init__(self, problem: str, hint: str) -> None:
        super().__init__(f"{problem}; hint: {hint}")


LISTEN_HINT = "a listen address is an IP of this machine, or :port for every address"


def start_error(err: BaseException, args: argparse.Namespace) -> StartError | None:
    """The StartError an exception from start-up stands for, or None for a real bug (keep its traceback)."""
    from keda_llm.scaler.kube import KubeError

    if isinstance(err, StartError):
        return err
    if isinstance(err, ssl.SSLError):  # an OSError: before the errno checks below, whose numbers it may share
        return StartError(f"cannot load the HTTP TLS certificate: {err}",
                          "--http-tls-cert and --http-tls-key must be a matching PEM certificate and key, and "
                          "--http-tls-ca and --exporters-tls-ca PEM CA certificates")
    if isinstance(err, KubeError):
        return StartError(f"cannot use the Kubernetes API: {err}",
                          "run it in a cluster with its ServiceAccount, or pass --no-kube (the exporters' "
                          "replica lists then stand in for /scale)")
    if isinstance(err, RuntimeError) and "Failed to bind" in str(err):
        return StartError(f"cannot listen on --grpc-address {args.grpc_address}: address in use or not available",
                          "choose another --grpc-address, or stop what holds the port")
    if isinstance(err, OSError) and err.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
        return StartError(f"cannot listen on --http-address {args.http_address}: {err.strerror}",
                          "choose another --http-address, or stop what holds the port")
    if isinstance(err, OSError) and (err.filename is not None or isinstance(err, IsADirectoryError)):
        return StartError(f"cannot read {err.filename or 'a TLS file'}: {err.strerror or err}",
                          "check the path given to the --tls-*, --http-tls-* and --exporters-tls-ca flags")
    if isinstance(err, ListenHostError):  # the gRPC listener's is caught before the start (probe_grpc_port)
        return StartError(f"cannot listen on --http-address {args.http_address}: {err}",
                          LISTEN_HINT)
    if isinstance(err, OSError) and isinstance(err, socket.gaierror):
        return StartError(f"cannot listen: {err}", LISTEN_HINT)
    return None


def probe_grpc_port(args: argparse.Namespace) -> None:
    """Refuse a taken gRPC port up front: gRPC's core would first log its own multi-line error."""
    try:
        host, port = host_port(args.grpc_address, 9090)
    except ValueError:
        raise StartError(f"--grpc-address {args.grpc_address!r} is not host:port", "for example [::]:9090") from None
    try:  # a host that does not resolve, whatever the port (gRPC's core would log its own lines first)
        family = address_family(host)
    except socket.gaierror as err:
        raise StartError(f"cannot listen on --grpc-address {args.grpc_address}: {err}",
                         LISTEN_HINT) from None
    if port == 0:
        return
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host.strip("[]") or "0.0.0.0", port))
        except OSError as err:
            raise StartError(f"cannot listen on --grpc-address {args.grpc_address}: {err.strerror}",
                             "choose another --grpc-address, or stop what holds the port") from None


def run(args: argparse.Namespace) -> int:
    level = str(args.log_level).upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        print(f"keda-llm scaler: --log-level {args.log_level!r} is not a level; hint: DEBUG, INFO, WARNING or "
              "ERROR", file=sys.stderr)
        return 2
    logging.basicConfig(level=getattr(logging, level), format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    async def main() -> None:
        await _assemble(args).serve(grace=args.grace)

    try:
        probe_grpc_port(args)
        asyncio.run(main())
    except Exception as err:
        known = start_error(err, args)
        if known is None:
            raise
        print(f"keda-llm scaler: {known}", file=sys.stderr)
        return 2
    return 0
