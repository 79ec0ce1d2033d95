"""The exporter's configuration: one frozen, typed tree with every default in one place.

`load_config(path)` reads YAML; `parse_config(data)` validates a plain mapping. Every error names
the key (as a dotted path) and the bad value, so a typo in a DaemonSet ConfigMap is found from the
pod's log line alone. Unknown keys are refused: a misspelled key silently falling back to a default
is the worse failure.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from keda_llm.common import yamltext
from keda_llm.common.addresses import host_port
from keda_llm.common.durations import MAX_SECONDS, check_interval
from keda_llm.common.durations import parse_duration as _go_duration
from keda_llm.common.vocabulary import ENGINES, ROLES
from keda_llm.exporter.model import Target
from keda_llm.exporter.warm import WarmConfig

#: Where Kubernetes mounts a pod's service-account credentials.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: The kubelet's pod-resources socket (DCGM exporter reads the same one).
POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"


class ConfigError(ValueError):
    """A config value was refused; the message names the key and the value."""

    def __init__(self, key: str, value: object, why: str) -> None:
        super().__init__(f"exporter config: {key}: {yamltext.show(value, 200)}: {why}")
        self.key = key
        self.value = value


@dataclass(frozen=True)
class KubernetesConfig:
    """Discovery of annotated pods on this node through the Kubernetes API."""

    enabled: bool = False
    #: How often the pod list is re-read; new pods wait at most this long to be scraped.
    refresh_interval: float = 15.0
    #: API server URL; empty = https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT (in-cluster).
    api_server: str = ""
    token_file: str = f"{SERVICE_ACCOUNT_DIR}/token"
    ca_file: str = f"{SERVICE_ACCOUNT_DIR}/ca.crt"


@dataclass(frozen=True)
class GpuConfig:
    """NVML collection and GPU-to-pod attribution."""

    nvml: bool = True
    #: kubelet pod-resources socket; empty turns attribution off.
    pod_resources_socket: str = POD_RESOURCES_SOCKET


@dataclass(frozen=True)
class TLSConfig:
    """TLS (1.2+) on the HTTP port: `/metrics`, `/healthz` and `POST /v1/warm` are then https only. The PEM
    files are re-read when they change (a cert-manager Secret rotated in place). No client certificates:
    /metrics holds nothing secret and /v1/warm has its bearer token."""

    cert_file: str = ""
    key_file: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.cert_file)


@dataclass(frozen=True)
class ExporterConfig:
    """Everything the exporter runtime needs; build it with `parse_config` / `load_config`."""

    #: host:port to serve /metrics and /healthz on; ":9400" = all interfaces.
    listen: str = ":9400"
    #: Seconds between collection cycles.
    interval: float = 5.0
    #: Per-target limit in seconds for connect + the whole answer (a trickling engine times out too);
    #: at most `interval`, and the default shrinks to a shorter interval.
    timeout: float = 2.0
    #: A body past this many bytes is dropped (reason too_large) without reading the rest.
    max_body_bytes: int = 8 * 1024 * 1024
    #: This node's name, the `node` label; empty = $NODE_NAME (downward API).
    node_name: str = ""
    targets: tuple[Target, ...] = ()
    kubernetes: KubernetesConfig = field(default_factory=KubernetesConfig)
    gpu: GpuConfig = field(default_factory=GpuConfig)
    warm: WarmConfig = field(default_factory=WarmConfig)
    tls: TLSConfig = field(default_factory=TLSConfig)

    @property
    def listen_address(self) -> tuple[str, int]:
        return parse_listen(self.listen, "listen")


_SIZE = re.compile(r"^\s*(\d+)\s*(B|KB|KiB|MB|MiB|GB|GiB|TB|TiB)?\s*$")
_SIZE_UNIT = {None: 1, "B": 1, "KB": 1000, "KiB": 1024, "MB": 1000**2, "MiB": 1024**2, "GB": 1000**3, "GiB": 1024**3,
              "TB": 1000**4, "TiB": 1024**4}


def parse_duration(value: object, key: str) -> float:
    """Seconds from a number or a Go duration string ("500ms", "5s", "1m30s"), the grammar the scaler's
    ScaledObject metadata uses too (keda_llm.common.durations)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_SECONDS:
        seconds = math.inf if value > 0 else -math.inf  # an integer past any float: refused below, not converted
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        try:
            seconds = _go_duration(value)
        except ValueError as e:
            raise ConfigError(key, value, str(e)) from None
    else:
        raise ConfigError(key, value, "expected a duration such as 5s or 500ms")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(key, value, "must be a positive duration")
    if seconds > MAX_SECONDS:  # a YAML number, as a string is: past it a timer's deadline overflowed and killed
        raise ConfigError(key, value, "at most 2562047h47m16.854775807s (Go's limit)")  # the collection loop
    return seconds


def parse_interval(value: object, key: str) -> float:
    """A loop's period: a duration (parse_duration) no shorter than the common floor."""
    seconds = parse_duration(value, key)
    try:
        return check_interval(seconds)
    except ValueError as e:
        raise ConfigError(key, value, str(e)) from None


def parse_size(value: object, key: str) -> int:
    """Bytes from an integer or a string such as "8MiB"."""
    if isinstance(value, bool):
        raise ConfigError(key, value, "expected a size in bytes such as 8388608 or 8MiB")
    if isinstance(value, int):
        size = value
    elif isinstance(value, str) and (m := _SIZE.match(value)):
        size = int(m.group(1)) * _SIZE_UNIT[m.group(2)]
    else:
        raise ConfigError(key, value, "expected a size in bytes such as 8388608 or 8MiB")
    if size < 1024:
        raise ConfigError(key, value, "must be at least 1024 bytes")
    return size


def parse_listen(value: object, key: str) -> tuple[str, int]:
    """(host, port) from "host:port", ":port" or "[v6]:port"; host "" means all interfaces."""
    if not isinstance(value, str):
        raise ConfigError(key, value, "expected host:port, e.g. :9400 or 127.0.0.1:9400")
    try:
        return host_port(value)
    except ValueError as e:  # the message starts with the value, which ConfigError shows already
        raise ConfigError(key, value, str(e).removeprefix(f"{value.strip()!r}: ")) from None


def _bool(value: object, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(key, value, "expected true or false")
    return value


def _str(value: object, key: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(key, value, "expected a string")
    return value


def _mapping(value: object, key: str, allowed: set[str]) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(key or "(top level)", value, "expected a mapping")
    for k in value:
        if k not in allowed:
            where = f"{key}.{k}" if key else str(k)
            raise ConfigError(where, value[k], f"unknown key (known: {', '.join(sorted(allowed))})")
    return value


def parse_target(value: object, key: str, node: str) -> Target:
    """One static target. The `pod` label defaults to the URL's host:port so that two static targets
    serving the same model still give distinct series."""
    allowed = {"url", "model", "namespace", "pod", "engine", "role", "max_running"}
    if isinstance(value, str):
        value = {"url": value}
    m = _mapping(value, key, allowed)
    if "url" not in m:
        raise ConfigError(f"{key}.url", None, "required")
    url = _str(m["url"], f"{key}.url")
    try:
        parts = urlsplit(url)
        _ = parts.port  # a port that is not a number, or past 65535
    except ValueError as e:  # `http://[::1` (an unclosed IPv6 bracket)
        raise ConfigError(f"{key}.url", url, f"not a URL: {e}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{key}.url", url, "expected an http:// or https:// URL with a host")
    # An empty string means the default, as the README's commented config shows it (`engine: ""` detects,
    # `pod: ""` takes the URL's host:port): YAML templates leave optional keys empty.
    engine = m.get("engine") or None
    if engine is not None and engine not in ENGINES:
        raise ConfigError(f"{key}.engine", engine, f"expected one of {', '.join(ENGINES)}")
    role = m.get("role") or None
    if role is not None and role not in ROLES:
        raise ConfigError(f"{key}.role", role, f"expected one of {', '.join(ROLES)}")
    max_running = m.get("max_running")
    if max_running is not None and (
        isinstance(max_running, bool) or not isinstance(max_running, int | float) or not 0 < max_running < 1e12
    ):  # a batch limit past 10^12 is a typo, and an integer past any float would fail when rendered
        raise ConfigError(f"{key}.max_running", max_running, "expected a positive number below 10^12")
    model = m.get("model")
    return Target(
        url=url,
        namespace=_str(m.get("namespace", ""), f"{key}.namespace"),
        pod=_str(m.get("pod") or parts.netloc.rpartition("@")[2], f"{key}.pod"),  # host:port, no credentials
        node=node,
        model=None if model is None else _str(model, f"{key}.model"),
        engine=engine,
        role=role,
        max_running=None if max_running is None else float(max_running),
    )


def parse_config(data: object, env: Mapping[str, str] | None = None) -> ExporterConfig:
    """Validate a mapping (parsed YAML) into an ExporterConfig; `env` supplies NODE_NAME."""
    env = os.environ if env is None else env
    d = ExporterConfig()
    top = _mapping(data, "", {"listen", "interval", "timeout", "max_body_bytes", "node_name", "targets",
                              "kubernetes", "gpu", "warm", "tls"})
    listen = _str(top.get("listen", d.listen), "listen")
    parse_listen(listen, "listen")
    interval = parse_interval(top.get("interval", d.interval), "interval")
    # the default timeout shrinks to a shorter interval; an explicit one must fit in it
    timeout = parse_duration(top.get("timeout", min(d.timeout, interval)), "timeout")
    if timeout > interval:
        raise ConfigError("timeout", top.get("timeout", d.timeout),
                          f"must not exceed interval ({interval:g}s): a cycle would overrun the next")
    node = _str(top.get("node_name", "") or env.get("NODE_NAME", ""), "node_name")
    targets = _targets(top.get("targets") or [], node)
    kube = _kubernetes(top.get("kubernetes"))
    if kube.enabled and not node:
        raise ConfigError("node_name", "", "kubernetes discovery needs this node's name (set NODE_NAME from "
                          "spec.nodeName through the downward API, or node_name)")
    return ExporterConfig(
        listen=listen,
        interval=interval,
        timeout=timeout,
        max_body_bytes=parse_size(top.get("max_body_bytes", d.max_body_bytes), "max_body_bytes"),
        node_name=node,
        targets=targets,
        kubernetes=kube,
        gpu=_gpu(top.get("gpu")),
        warm=_warm(top.get("warm")),
        tls=_tls(top.get("tls")),
    )


def _targets(value: object, node: str) -> tuple[Target, ...]:
    """The static targets; a URL listed twice is refused (it would be scraped and exported twice)."""
    if not isinstance(value, list):
        raise ConfigError("targets", value, "expected a list")
    targets = tuple(parse_target(t, f"targets[{i}]", node) for i, t in enumerate(value))
    seen: set[str] = set()
    for i, t in enumerate(targets):
        if t.url in seen:
            raise ConfigError(f"targets[{i}].url", t.url, "listed twice")
        seen.add(t.url)
    return targets


def _kubernetes(value: object) -> KubernetesConfig:
    d = KubernetesConfig()
    k = _mapping(value, "kubernetes", {"enabled", "refresh_interval", "api_server", "token_file", "ca_file"})
    return KubernetesConfig(
        enabled=_bool(k.get("enabled", d.enabled), "kubernetes.enabled"),
        refresh_interval=parse_interval(k.get("refresh_interval", d.refresh_interval), "kubernetes.refresh_interval"),
        api_server=_str(k.get("api_server", d.api_server), "kubernetes.api_server"),
        token_file=_str(k.get("token_file", d.token_file), "kubernetes.token_file"),
        ca_file=_str(k.get("ca_file", d.ca_file), "kubernetes.ca_file"),
    )


def _gpu(value: object) -> GpuConfig:
    d = GpuConfig()
    g = _mapping(value, "gpu", {"nvml", "pod_resources_socket"})
    return GpuConfig(
        nvml=_bool(g.get("nvml", d.nvml), "gpu.nvml"),
        pod_resources_socket=_str(g.get("pod_resources_socket", d.pod_resources_socket), "gpu.pod_resources_socket"),
    )


def _warm(value: object) -> WarmConfig:
    d = WarmConfig()
    w = _mapping(value, "warm", {"directories", "token_file", "max_bytes", "max_concurrent"})
    dirs = w.get("directories", [])
    if not isinstance(dirs, list) or not all(isinstance(x, str) and x.startswith("/") for x in dirs):
        raise ConfigError("warm.directories", dirs, "expected a list of absolute paths")
    token_file = _str(w.get("token_file", d.token_file), "warm.token_file")
    if dirs and not token_file:
        raise ConfigError("warm.token_file", token_file, "required with warm.directories: /v1/warm reads files on "
                          "request and must not be open to any pod (mount the token from a Secret)")
    concurrent = w.get("max_concurrent", d.max_concurrent)
    if isinstance(concurrent, bool) or not isinstance(concurrent, int) or not 1 <= concurrent <= 64:
        raise ConfigError("warm.max_concurrent", concurrent, "expected a whole number from 1 to 64")
    return WarmConfig(directories=tuple(dirs), token_file=token_file,
                      max_bytes=parse_size(w.get("max_bytes", d.max_bytes), "warm.max_bytes"),
                      max_concurrent=concurrent)


def _tls(value: object) -> TLSConfig:
    t = _mapping(value, "tls", {"cert_file", "key_file"})
    return check_tls(TLSConfig(cert_file=_str(t.get("cert_file", ""), "tls.cert_file"),
                               key_file=_str(t.get("key_file", ""), "tls.key_file")))


def check_tls(tls: TLSConfig) -> TLSConfig:
    """Both files or neither (the file and the flags go through here)."""
    if bool(tls.cert_file) != bool(tls.key_file):
        missing = "tls.key_file" if tls.cert_file else "tls.cert_file"
        raise ConfigError(missing, "", "tls.cert_file and tls.key_file go together: give both, or neither for "
                          "plain http")
    return tls


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> ExporterConfig:
    """Read and validate a YAML config file; errors name the file too."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError("--config", str(path), f"cannot read: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise ConfigError("--config", str(path), f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    try:
        data = yamltext.load(text)
    except yamltext.YAMLTextError as e:
        raise ConfigError("--config", str(path), f"not valid YAML: {e}") from None
    return parse_config(data, env)


def with_overrides(cfg: ExporterConfig, **changes: Any) -> ExporterConfig:
    """A copy with command-line overrides applied, re-checking the rules that tie values together."""
    out = replace(cfg, **changes)
    parse_listen(out.listen, "listen")
    if out.timeout > out.interval:
        raise ConfigError("timeout", out.timeout, f"must not exceed interval ({out.interval:g}s)")
    return out
