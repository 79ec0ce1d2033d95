"""`keda-llm activator`: config file and flags -> Activator, serve until SIGTERM, then drain.

The event loop: uvloop when it is installed (`pip install 'keda-llm[fast]'`), else asyncio's own;
`--event-loop` pins one. The proxy relays every streamed chunk through the loop, and uvloop's cheaper
wakeups cut the activator's CPU per streamed request to about 0.8x asyncio's (bench/README.md, Activator).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
from collections.abc import Callable

from keda_llm.activator.config import ActivatorConfig, ConfigError, load, with_flags
from keda_llm.activator.proxy import Activator
from keda_llm.common.addresses import host_port

log = logging.getLogger("keda_llm.activator")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    parser.add_argument("--config", default=env("KEDA_LLM_ACTIVATOR_CONFIG"),
                        help="YAML file (docs/activator.md); flags below override it")
    parser.add_argument("--listen", help="proxy listen host:port (default :8080)")
    parser.add_argument("--admin-listen", default=env("KEDA_LLM_ACTIVATOR_ADMIN", ":9092"),
                        help="/metrics, /healthz, /admin listen host:port (default :9092)")
    parser.add_argument("--scaler", help="the scaler's HTTP base URL, for POST /v1/activate")
    parser.add_argument("--activation-token-file", help="bearer token for the scaler's activation endpoint")
    parser.add_argument("--admin-token-file", help="bearer token for /admin/* (off without one)")
    parser.add_argument("--model", help="a single model's served name (with --upstream)")
    parser.add_argument("--upstream", action="append", help="a static endpoint base URL (repeatable)")
    parser.add_argument("--scaled-object", help="namespace/name of the single model's ScaledObject to wake")
    parser.add_argument("--exporter", action="append", help="an exporter /metrics URL (repeatable)")
    parser.add_argument("--max-held", help="held requests per model before 429 (default 1000)")
    parser.add_argument("--max-wait", help="longest hold before 503, Go duration (default 5m)")
    parser.add_argument("--max-body-bytes", help="request body cap (default 1MiB)")
    parser.add_argument("--shutdown-grace", help="time in-flight requests get on SIGTERM (default 25s)")
    parser.add_argument("--event-loop", default=env("KEDA_LLM_EVENT_LOOP", "auto"),
                        choices=("auto", "uvloop", "asyncio"),
                        help="auto: uvloop if installed, else asyncio (default auto)")
    parser.add_argument("--log-level", default=env("KEDA_LLM_LOG_LEVEL", "INFO"),
                        help="DEBUG, INFO, WARNING or ERROR (default INFO)")


def _host_port(text: str, key: str) -> tuple[str, int]:
    try:
        return host_port(text)
    except ValueError as e:
        raise ConfigError(key, str(e)) from None


def run(args: argparse.Namespace) -> int:
    level = str(args.log_level).upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        print(f"keda-llm activator: --log-level: {args.log_level!r} is not a level; hint: DEBUG, INFO, WARNING or "
              "ERROR", file=sys.stderr)
        return 2
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        from_file = load(args.config)
        _check_model_flags(args, from_file)
        cfg = with_flags(from_file, vars(args))
        admin = _host_port(args.admin_listen, "--admin-listen")
        proxy = _host_port(cfg.listen, "listen")
        factory = loop_factory(args.event_loop)
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(_serve(cfg, proxy, admin))
    except ConfigError as e:
        print(f"keda-llm activator: {e}; hint: {_hint(e.key, str(e))}", file=sys.stderr)
        return 2


def _check_model_flags(args: argparse.Namespace, from_file: ActivatorConfig | None) -> None:
    """The single model's flags go together: --model alone was refused under a key no flag has (`--endpoints`),
    and --scaled-object beside a file's models was dropped without a word."""
    if args.scaled_object and not (args.model or args.upstream):
        raise ConfigError("--scaled-object", "goes with --model and --upstream (the single model it wakes); a "
                                             "config file's model names its own `scaled_object`")
    if args.model and not args.upstream and not (from_file is not None and from_file.models):
        raise ConfigError("--upstream", "required with --model: the model's endpoint base URL, e.g. --upstream "
                                        "http://llama-8b.llm:8000 (EndpointSlices: a config file's `service`)")


def _hint(key: str, message: str = "") -> str:
    """What to do about a refused key: the one line a failed start prints ends with it."""
    if key == "listen" and "cannot listen" in message:  # binding failed: the proxy's port or the admin one
        return ("another process holds one of the ports, or an address is not this machine's: pick others with "
                "--listen (the proxy) and --admin-listen")
    if key in ("listen", "--listen", "--admin-listen"):
        return "write host:port, :port for every interface, or [v6]:port"
    if key.startswith("kubernetes"):
        return "outside a cluster set kubernetes.api_server, token_file and ca_file, or give models static endpoints"
    return "every key, its default and its form are in docs/activator.md; flags: keda-llm activator --help"


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop to run on: "uvloop", "asyncio" (None: asyncio's default) or "auto" (uvloop if
    it imports). Naming uvloop without it installed is a configuration error, not a silent fallback."""
    if choice not in ("auto", "uvloop", "asyncio"):
        raise ConfigError("--event-loop", f"not auto, uvloop or asyncio: {choice!r}")
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ConfigError("--event-loop", "uvloop is not installed (pip install 'keda-llm[fast]')") from None
        return None
    new_loop: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return new_loop


def settle_heap() -> None:
    """Move everything alive once the activator serves (modules, config, the app) out of the cyclic
    collector's reach (`gc.freeze`): a full collection then walks only the objects requests create, not
    the whole heap, and holds every stream for that long. Measured on dedicated cores at 200 streams
    (bench/README.md, "Activator"): the TTFB added at p99 fell from about 15 to 9 ms (median of three
    runs); the per-chunk tail did not move beyond the runs' spread."""
    gc.collect()
    gc.freeze()


async def _serve(cfg: ActivatorConfig, proxy: tuple[str, int], admin: tuple[str, int]) -> int:
    activator = Activator(cfg)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    received: list[signal.Signals] = []

    def on_signal(sig: signal.Signals) -> None:
        received.append(sig)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await activator.start(proxy, admin)
    except ValueError as e:  # no API server for EndpointSlices
        await activator.stop()  # its client session and any listener already open
        raise ConfigError("kubernetes.api_server", str(e).split(": ", 1)[-1]) from None
    except OSError as e:  # the port is taken, or the address is not this machine's
        await activator.stop()
        raise ConfigError("listen", f"cannot listen ({proxy[0] or '*'}:{proxy[1]}, admin "
                                    f"{admin[0] or '*'}:{admin[1]}): {e.strerror or e}") from None
    settle_heap()
    log.info("activator: proxy on :%d, admin on :%d, models %s", activator.ports["proxy"],
             activator.ports.get("admin", 0), ", ".join(activator.models))
    await stop.wait()
    log.info("%s: draining", received[0].name if received else "stop")
    await activator.stop()
    return 0
