"""`keda-llm exporter`: wire config, discovery, collection, rendering and the HTTP server together.

    keda-llm exporter --config exporter.yaml
    keda-llm exporter --target http://127.0.0.1:8000/metrics --listen :9400
    keda-llm exporter --target http://127.0.0.1:8000/metrics --once     # print one cycle and exit

Flags override the file. SIGTERM and SIGINT stop gracefully: the HTTP server finishes the requests
it is answering, the loops stop, NVML is shut down.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from keda_llm.common.tls import server_context
from keda_llm.exporter.collect import Collector, GpuSource, Normalize
from keda_llm.exporter.config import (
    ConfigError,
    ExporterConfig,
    TLSConfig,
    check_tls,
    load_config,
    parse_config,
    parse_duration,
    parse_interval,
    parse_listen,
    parse_target,
    with_overrides,
)
from keda_llm.exporter.discovery import Discovery, DiscoveryError, KubeClient
from keda_llm.exporter.model import GpuMetrics
from keda_llm.exporter.render import render
from keda_llm.exporter.server import create_server
from keda_llm.exporter.warm import Warmer

log = logging.getLogger("exporter")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="YAML config file (see docs/exporter-config.md)")
    parser.add_argument("--target", metavar="URL", action="append", default=[],
                        help="an engine /metrics URL to scrape, in addition to the file's (repeatable)")
    parser.add_argument("--listen", metavar="HOST:PORT", help="serve /metrics and /healthz here (default :9400)")
    parser.add_argument("--interval", metavar="DURATION", help="seconds between cycles, e.g. 5s (default 5s)")
    parser.add_argument("--timeout", metavar="DURATION", help="per-target scrape timeout, e.g. 2s (default 2s)")
    parser.add_argument("--node-name", metavar="NAME", help="the node label (default $NODE_NAME)")
    parser.add_argument("--tls-cert", metavar="FILE",
                        help="serve the HTTP port over TLS with this certificate (PEM; re-read when it changes)")
    parser.add_argument("--tls-key", metavar="FILE", help="private key for --tls-cert (PEM)")
    parser.add_argument("--kubernetes", action="store_true", help="discover annotated pods on this node")
    parser.add_argument("--no-nvml", action="store_true", help="do not read GPUs through NVML")
    parser.add_argument("--once", action="store_true",
                        help="run one collection cycle, print the exposition to stdout and exit "
                             "(exit status 1 if any target failed)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="log verbosity (default INFO)")


def build_config(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> ExporterConfig:
    """The file's config (or the defaults) with the command-line flags applied on top."""
    if args.node_name:  # the flag stands for the file's node_name before the file's own rules are checked
        env = {**(os.environ if env is None else env), "NODE_NAME": args.node_name}
    # `is not None` below: an empty value (`--listen ""`, `--config "$UNSET"`) is refused by its parser, not
    # taken for "not given" (it served on the default port, or ran without the file, and said nothing)
    if args.config is not None and not args.config.strip():
        raise ConfigError("--config", args.config, "an empty file name: give the YAML file's path, or leave it out")
    cfg = load_config(args.config, env) if args.config is not None else parse_config({}, env)
    changes: dict[str, Any] = {}
    if args.node_name:
        changes["node_name"] = args.node_name
    node = changes.get("node_name", cfg.node_name)
    if args.target:
        known = {t.url for t in cfg.targets}
        extra = tuple(parse_target(url, "--target", node) for url in args.target if url not in known)
        changes["targets"] = tuple(t if t.node else replace(t, node=node) for t in cfg.targets) + extra
    if args.listen is not None:
        parse_listen(args.listen, "--listen")
        changes["listen"] = args.listen
    if args.interval is not None:
        changes["interval"] = parse_interval(args.interval, "--interval")
        if args.timeout is None and cfg.timeout > changes["interval"]:
            changes["timeout"] = changes["interval"]  # a short --interval alone should just work
    if args.timeout is not None:
        changes["timeout"] = parse_duration(args.timeout, "--timeout")
    if args.kubernetes:
        changes["kubernetes"] = replace(cfg.kubernetes, enabled=True)
        if not node:
            raise ConfigError("--node-name", "", "--kubernetes needs this node's name (or NODE_NAME)")
    if args.no_nvml:
        changes["gpu"] = replace(cfg.gpu, nvml=False)
    if args.tls_cert or args.tls_key:
        changes["tls"] = check_tls(TLSConfig(cert_file=args.tls_cert or "", key_file=args.tls_key or ""))
    return with_overrides(cfg, **changes) if changes else cfg


def load_normalize() -> Normalize:
    """The engine adapters' entry point (imported late: it is the heavy part)."""
    from keda_llm.exporter.engines import normalize

    return normalize


class _AttributedGpus:
    """NVML readings with the kubelet's GPU-to-pod assignment filled in, when that is available."""

    def __init__(self, nvml: GpuSource, attribute: Callable[[list[GpuMetrics]], list[GpuMetrics]] | None) -> None:
        self._nvml = nvml
        self._attribute = attribute

    def collect(self) -> list[GpuMetrics]:
        gpus = self._nvml.collect()
        if gpus and self._attribute is not None:
            try:
                return self._attribute(gpus)
            except Exception as e:  # attribution is a bonus: GPU series without pod labels beat none
                log.warning("GPU to pod attribution failed: %s", e)
        return gpus

    def close(self) -> None:
        close = getattr(self._nvml, "close", None)
        if close is not None:
            close()


def build_gpu_source(cfg: ExporterConfig) -> GpuSource | None:
    if not cfg.gpu.nvml:
        return None
    from keda_llm.exporter.nvml import NvmlCollector

    attribute = None
    if cfg.gpu.pod_resources_socket:
        from keda_llm.exporter.podresources import attributor

        attribute = attributor(cfg.gpu.pod_resources_socket)
    return _AttributedGpus(NvmlCollector(), attribute)


def build_collector(cfg: ExporterConfig, normalize: Normalize | None = None,
                    gpu_source: GpuSource | None = None, env: Mapping[str, str] | None = None, *,
                    list_pods: Callable[[str], Mapping[str, Any]] | None = None,
                    clock: Callable[[], float] = time.time) -> Collector:
    """The exporter's Collector for `cfg`. `list_pods` stands in for the Kubernetes API where discovery is
    on (a demo's or a test's cluster; default: the API server from `cfg.kubernetes`); `clock` for the
    wall clock (tests driving time)."""
    if list_pods is None and cfg.kubernetes.enabled:
        list_pods = KubeClient.from_config(cfg.kubernetes, env, timeout=max(cfg.timeout, 5.0)).list_pods
    return Collector(cfg, Discovery(cfg, list_pods), normalize or load_normalize(), render, gpu_source, clock=clock)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = build_config(args)
        collector = build_collector(cfg, gpu_source=build_gpu_source(cfg))
    except ConfigError as e:
        print(f"keda-llm exporter: {e}; hint: every key, its default and its form are in docs/exporter-config.md; "
              "flags: keda-llm exporter --help", file=sys.stderr)
        return 2
    except DiscoveryError as e:
        print(f"keda-llm exporter: kubernetes discovery: {e}; hint: outside a cluster set kubernetes.api_server, "
              "token_file and ca_file, or leave discovery off and give --target URLs", file=sys.stderr)
        return 2
    if not cfg.targets and not cfg.kubernetes.enabled:
        log.warning("no targets: give --target URL, targets: in --config, or enable kubernetes discovery")
    if args.once:
        return _run_once(collector)
    return _serve(cfg, collector)


def _run_once(collector: Collector) -> int:
    collector.refresh_discovery()
    snapshot = collector.run_cycle()
    sys.stdout.write(collector.exposition().decode())
    sys.stdout.flush()
    collector.stop()
    return 0 if all(st.up for st in snapshot.targets) else 1


#: what stops a serving exporter gracefully
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})


def _serve(cfg: ExporterConfig, collector: Collector) -> int:
    # SIGTERM and SIGINT are taken by sigwait() at the end, not by a handler: a handler that set a
    # threading.Event while the main thread was inside that Event's wait() (holding its lock, between two
    # bytecodes) deadlocked, and a SIGTERM just after startup on a loaded machine hung the exporter until
    # SIGKILL. Blocked before any thread starts, so every thread inherits the mask and the main thread alone
    # takes them; one that arrives during startup waits, pending, for sigwait().
    # After a graceful stop they stay blocked: a second one during it is dropped at exit, not a traceback.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    code = _serve_until_signalled(cfg, collector)
    if code != 0:  # refused before serving: the signals act as they did
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    return code


def _serve_until_signalled(cfg: ExporterConfig, collector: Collector) -> int:
    try:
        warmer = Warmer(cfg.warm) if cfg.warm.enabled else None
        tls = server_context(cfg.tls.cert_file, cfg.tls.key_file, what="exporter TLS") if cfg.tls.enabled else None
    except OSError as e:  # ssl.SSLError is an OSError: a key that does not match, a file that is not PEM
        print(f"keda-llm exporter: tls: cannot load {cfg.tls.cert_file} and {cfg.tls.key_file}: "
              f"{e.strerror or e}; hint: a PEM certificate and its own private key, both readable by the exporter",
              file=sys.stderr)
        return 2
    try:
        server, port = create_server(cfg.listen_address, collector, warmer, tls=tls)
    except OSError as e:
        print(f"keda-llm exporter: cannot listen on {cfg.listen}: {e.strerror or e}; hint: another process holds the "
              "port, or the address is not this machine's: pick another with --listen", file=sys.stderr)
        return 2
    collector.start()
    server.start()
    host = cfg.listen_address[0] or "0.0.0.0"
    log.info("serving %s://%s:%d/metrics (%d static targets, kubernetes discovery %s, every %gs)",
             "https" if tls is not None else "http", host, port, len(cfg.targets),
             "on" if cfg.kubernetes.enabled else "off", cfg.interval)
    got = signal.sigwait(STOP_SIGNALS)
    log.info("stopping (%s)", signal.Signals(got).name)
    server.stop()
    collector.stop()
    return 0
