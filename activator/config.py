"""The activator's configuration: a YAML file, then flags over it. Every bad value is one ConfigError
whose message names the key (`models[1].max_wait: ...`). Durations are Go's (`90s`, `5m`, `500ms`)."""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypeVar
from urllib.parse import urlsplit

from keda_llm.activator.core import RoutingRules
from keda_llm.common import yamltext
from keda_llm.common.addresses import host_port
from keda_llm.common.durations import check_interval, parse_duration

T = TypeVar("T")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_HEADER = re.compile(r"^[A-Za-z0-9-]{1,64}$")
_SIZE_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "kib": 1024, "mib": 1024**2}


class ConfigError(ValueError):
    """One bad value: `key: message`."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


@dataclass(frozen=True)
class StaticEndpoint:
    """A fixed upstream base URL; `pod` matches the exporters' `pod` label for load-aware routing."""

    url: str
    pod: str = ""


@dataclass(frozen=True)
class ModelConfig:
    name: str  # the served model name, as in the body's `model` field
    aliases: tuple[str, ...] = ()
    path_prefix: str = ""  # route by path: /<prefix>/v1/... goes to this model, prefix stripped
    namespace: str = ""
    scaled_object: str = ""  # the ScaledObject to wake; empty: the model is never woken by us
    endpoints: tuple[StaticEndpoint, ...] = ()  # static upstreams (probed on health_path)
    service: str = ""  # or: the Service whose EndpointSlices list the replicas (in `namespace`)
    port: int = 0  # EndpointSlice port number to use (0: port_name, else the slice's first port)
    port_name: str = ""
    scheme: str = "http"
    ca_file: str = ""  # https: the CA bundle the replicas' certificates are verified against (else the system's)
    server_name: str = ""  # https: the name checked in their certificate (else the address: the pod IP)
    max_held: int = 1000
    max_wait: float = 300.0
    cold_start: float = 120.0  # expected cold start: the Retry-After told while the model wakes


@dataclass(frozen=True)
class KubeConfig:
    api_server: str = ""  # empty: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
    token_file: str = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    ca_file: str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"


@dataclass(frozen=True)
class ActivatorConfig:
    listen: str = ":8080"
    models: tuple[ModelConfig, ...] = ()
    default_model: str = ""  # the model for a body that names none
    scaler: str = ""  # the scaler's HTTP base URL (POST /v1/activate); empty: never wake
    activation_token_file: str = ""  # bearer token for the scaler's activation endpoint
    activation_interval: float = 30.0  # repeat the activation this often while requests stay held
    admin_token_file: str = ""  # bearer token for /admin/*; empty: admin endpoints are off
    max_body_bytes: int = 1024 * 1024  # request bodies are read whole (to find `model`) up to this
    body_timeout: float = 30.0  # a client's request body must arrive whole within this (else 408)
    priority_header: str = "X-Priority"
    priority_classes: tuple[str, ...] = ()  # first leaves first; a missing/unknown value is the last class
    health_path: str = "/health"  # static endpoints are ready while this answers 2xx
    probe_interval: float = 1.0
    probe_timeout: float = 1.0
    connect_timeout: float = 5.0
    read_timeout: float = 600.0  # longest silence from an upstream between two chunks
    #: longest a client may leave one chunk of its answer unread: past it the client is cut, freeing the
    #: replica's slot (a hung consumer, or a peer gone without a reset, held it for as long as its socket lived)
    write_timeout: float = 120.0
    exporters: tuple[str, ...] = ()  # exporter /metrics URLs for load-aware routing
    exporters_interval: float = 2.0
    metrics_max_age: float = 10.0  # older exporter samples are ignored (routing falls back)
    routing: RoutingRules = field(default_factory=RoutingRules)
    shutdown_grace: float = 25.0  # on SIGTERM: how long in-flight requests get to finish
    kubernetes: KubeConfig = field(default_factory=KubeConfig)

    def model(self, name: str) -> ModelConfig:
        return next(m for m in self.models if m.name == name)


# ---- value parsers: each raises ValueError with a plain message; _get wraps it with the key ----

def _duration(v: Any) -> float:
    if isinstance(v, bool):
        raise ValueError("not a duration")
    s = parse_duration(str(v))
    if s <= 0:
        raise ValueError("must be > 0")
    return s


def _interval(v: Any) -> float:
    return check_interval(_duration(v))


def _int(lo: int, hi: int) -> Callable[[Any], int]:
    def parse(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int | str) or not str(v).strip().lstrip("-").isdigit():
            raise ValueError(f"not an integer: {v!r}")
        n = int(v)
        if not lo <= n <= hi:
            raise ValueError(f"{n} is out of range [{lo}, {hi}]")
        return n
    return parse


def _ratio(v: Any) -> float:
    x = _float(v)
    if not 0 <= x <= 1:
        raise ValueError(f"{x} is not within [0, 1]")
    return x


def _float(v: Any) -> float:
    if isinstance(v, bool):
        raise ValueError("not a number")
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer past any float
        raise ValueError(f"not a number: {str(v)[:40]!r}") from None
    if not (x == x and abs(x) < 1e12) or x < 0:
        raise ValueError(f"{v!r} is not a finite number >= 0")
    return x


def _size(v: Any) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(v))
    if isinstance(v, bool) or m is None or m.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"not a size: {v!r} (e.g. 1048576, 512KiB, 1MiB)")
    n = int(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
    if not 1024 <= n <= 64 * 1024**2:
        raise ValueError(f"{n} bytes is out of range [1KiB, 64MiB]")
    return n


def _text(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError(f"not a string: {v!r}")
    return v.strip()


def _url(v: Any) -> str:
    s = _text(v).rstrip("/")
    parts = urlsplit(s)
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as e:
        raise ValueError(f"bad URL {s!r}: {e}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"not an http(s) base URL: {s!r}")
    return s


def _name(v: Any) -> str:
    s = _text(v)
    if s and not _NAME.match(s):
        raise ValueError(f"{s!r} is not a Kubernetes object name")
    return s


def _listen(v: Any) -> str:
    s = _text(v)
    host_port(s)  # the one address grammar; its ValueError names what is wrong
    return s


def _list(item: Callable[[Any], T]) -> Callable[[Any], tuple[T, ...]]:
    def parse(v: Any) -> tuple[T, ...]:
        if isinstance(v, str):
            v = [p for p in v.split(",") if p.strip()]
        if not isinstance(v, list):
            raise ValueError(f"not a list: {v!r}")
        out = []
        for i, x in enumerate(v):
            try:
                out.append(item(x))
            except ValueError as e:
                raise ValueError(f"item {i}: {e}") from None
        return tuple(out)
    return parse


def _mapping(v: Any, key: str) -> Mapping[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ConfigError(key, f"expected a mapping, got {type(v).__name__}")
    return v


def _take(raw: Mapping[str, Any], key: str, prefix: str, parse: Callable[[Any], T], default: T) -> T:
    if key not in raw or raw[key] is None:
        return default
    try:
        return parse(raw[key])
    except ValueError as e:
        raise ConfigError(prefix + key, str(e)) from None


def _unknown(raw: Mapping[str, Any], known: set[str], prefix: str) -> None:
    for k in raw:
        if k not in known:
            raise ConfigError(prefix + str(k), f"unknown key (known: {', '.join(sorted(known))})")


def _endpoint(v: Any) -> StaticEndpoint:
    if isinstance(v, str):
        return StaticEndpoint(_url(v))
    if isinstance(v, dict) and set(v) <= {"url", "pod"} and "url" in v:
        return StaticEndpoint(_url(v["url"]), _text(v.get("pod", "")))
    raise ValueError(f"expected a URL or {{url, pod}}, got {v!r}")


def _model(raw: Any, prefix: str, max_held: int, max_wait: float) -> ModelConfig:
    raw = _mapping(raw, prefix.rstrip("."))
    d = ModelConfig(name="")
    _unknown(raw, {f.name for f in fields(ModelConfig)}, prefix)
    name = _take(raw, "name", prefix, _text, "")
    if not name:
        raise ConfigError(prefix + "name", "required: the served model name")
    m = ModelConfig(
        name=name,
        aliases=_take(raw, "aliases", prefix, _list(_text), ()),
        path_prefix=_take(raw, "path_prefix", prefix, _text, ""),
        namespace=_take(raw, "namespace", prefix, _name, ""),
        scaled_object=_take(raw, "scaled_object", prefix, _name, ""),
        endpoints=_take(raw, "endpoints", prefix, _list(_endpoint), ()),
        service=_take(raw, "service", prefix, _name, ""),
        port=_take(raw, "port", prefix, _int(0, 65535), 0),
        port_name=_take(raw, "port_name", prefix, _text, ""),
        scheme=_take(raw, "scheme", prefix, _text, "http"),
        ca_file=_take(raw, "ca_file", prefix, _text, ""),
        server_name=_take(raw, "server_name", prefix, _text, ""),
        max_held=_take(raw, "max_held", prefix, _int(0, 10_000_000), max_held),
        max_wait=_take(raw, "max_wait", prefix, _duration, max_wait),
        cold_start=_take(raw, "cold_start", prefix, _duration, d.cold_start),
    )
    _check_model(m, prefix)
    return m


def _check_model(m: ModelConfig, prefix: str) -> None:
    if m.path_prefix and not m.path_prefix.startswith("/"):
        raise ConfigError(prefix + "path_prefix", f"must start with '/': {m.path_prefix!r}")
    if m.scheme not in ("http", "https"):
        raise ConfigError(prefix + "scheme", f"http or https, not {m.scheme!r}")
    https = m.scheme == "https" or any(e.url.startswith("https://") for e in m.endpoints)
    for key in ("ca_file", "server_name"):
        if getattr(m, key) and not https:
            raise ConfigError(prefix + key, "only for https replicas (scheme: https, or https:// endpoints)")
    if bool(m.endpoints) == bool(m.service):
        raise ConfigError(prefix + "endpoints", "give exactly one of `endpoints` (static) and `service` "
                          "(EndpointSlices)")
    if (m.service or m.scaled_object) and not m.namespace:
        raise ConfigError(prefix + "namespace", "required with `service` or `scaled_object`")


def parse(raw: Any) -> ActivatorConfig:
    """An ActivatorConfig from the YAML's top-level mapping (None: all defaults, no models)."""
    raw = _mapping(raw, "(top level)")
    d = ActivatorConfig()
    _unknown(raw, {f.name for f in fields(ActivatorConfig)} | {"max_held", "max_wait"}, "")
    max_held = _take(raw, "max_held", "", _int(0, 10_000_000), 1000)
    max_wait = _take(raw, "max_wait", "", _duration, 300.0)
    models_raw = raw.get("models") or []
    if not isinstance(models_raw, list):
        raise ConfigError("models", "expected a list of models")
    models = tuple(_model(m, f"models[{i}].", max_held, max_wait) for i, m in enumerate(models_raw))
    r = _mapping(raw.get("routing"), "routing")
    _unknown(r, {f.name for f in fields(RoutingRules)}, "routing.")
    rd = RoutingRules()
    routing = RoutingRules(
        kv_saturation=_take(r, "kv_saturation", "routing.", _ratio, rd.kv_saturation),
        waiting_weight=_take(r, "waiting_weight", "routing.", _float, rd.waiting_weight),
        outstanding_weight=_take(r, "outstanding_weight", "routing.", _float, rd.outstanding_weight),
        max_outstanding=_take(r, "max_outstanding", "routing.", _int(0, 1_000_000), rd.max_outstanding),
    )
    k = _mapping(raw.get("kubernetes"), "kubernetes")
    _unknown(k, {f.name for f in fields(KubeConfig)}, "kubernetes.")
    kd = KubeConfig()
    kube = KubeConfig(
        api_server=_take(k, "api_server", "kubernetes.", _url, kd.api_server),
        token_file=_take(k, "token_file", "kubernetes.", _text, kd.token_file),
        ca_file=_take(k, "ca_file", "kubernetes.", _text, kd.ca_file),
    )
    cfg = ActivatorConfig(
        listen=_take(raw, "listen", "", _listen, d.listen),
        models=models,
        default_model=_take(raw, "default_model", "", _text, d.default_model),
        scaler=_take(raw, "scaler", "", _url, d.scaler),
        activation_token_file=_take(raw, "activation_token_file", "", _text, d.activation_token_file),
        activation_interval=_take(raw, "activation_interval", "", _interval, d.activation_interval),
        admin_token_file=_take(raw, "admin_token_file", "", _text, d.admin_token_file),
        max_body_bytes=_take(raw, "max_body_bytes", "", _size, d.max_body_bytes),
        body_timeout=_take(raw, "body_timeout", "", _duration, d.body_timeout),
        priority_header=_take(raw, "priority_header", "", _header, d.priority_header),
        priority_classes=_take(raw, "priority_classes", "", _list(_text), d.priority_classes),
        health_path=_take(raw, "health_path", "", _path, d.health_path),
        probe_interval=_take(raw, "probe_interval", "", _interval, d.probe_interval),
        probe_timeout=_take(raw, "probe_timeout", "", _duration, d.probe_timeout),
        connect_timeout=_take(raw, "connect_timeout", "", _duration, d.connect_timeout),
        read_timeout=_take(raw, "read_timeout", "", _duration, d.read_timeout),
        write_timeout=_take(raw, "write_timeout", "", _duration, d.write_timeout),
        exporters=_take(raw, "exporters", "", _list(_url), d.exporters),
        exporters_interval=_take(raw, "exporters_interval", "", _interval, d.exporters_interval),
        metrics_max_age=_take(raw, "metrics_max_age", "", _duration, d.metrics_max_age),
        routing=routing,
        shutdown_grace=_take(raw, "shutdown_grace", "", _duration, d.shutdown_grace),
        kubernetes=kube,
    )
    return check(cfg)


def _header(v: Any) -> str:
    s = _text(v)
    if not _HEADER.match(s):
        raise ValueError(f"not an HTTP header name: {s!r}")
    return s


def _path(v: Any) -> str:
    s = _text(v)
    if not s.startswith("/"):
        raise ValueError(f"must start with '/': {s!r}")
    return s


def check(cfg: ActivatorConfig) -> ActivatorConfig:
    """Rules across keys: unique names, aliases and prefixes; a default model that exists."""
    if not cfg.models:
        raise ConfigError("models", "at least one model is required (or --model with --upstream)")
    seen: dict[str, str] = {}
    prefixes: set[str] = set()
    for i, m in enumerate(cfg.models):
        for n in (m.name, *m.aliases):
            if n in seen:
                raise ConfigError(f"models[{i}].name", f"{n!r} is also served by model {seen[n]!r}")
            seen[n] = m.name
        if m.path_prefix:
            p = m.path_prefix.rstrip("/")
            if p in prefixes:
                raise ConfigError(f"models[{i}].path_prefix", f"{m.path_prefix!r} is used twice")
            prefixes.add(p)
    if cfg.default_model and cfg.default_model not in seen:
        raise ConfigError("default_model", f"{cfg.default_model!r} is not a configured model name")
    if cfg.default_model and seen[cfg.default_model] != cfg.default_model:  # an alias: routed by its model's name
        cfg = replace(cfg, default_model=seen[cfg.default_model])
    if cfg.probe_timeout > cfg.probe_interval * 10:
        raise ConfigError("probe_timeout", "at most 10 x probe_interval")
    return cfg


def ca_context(ca_file: str, key: str) -> ssl.SSLContext:
    """A client TLS context that verifies against `ca_file`; ConfigError naming `key` when it cannot be loaded
    (a file that holds no certificate included)."""
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as e:
        why = getattr(e, "strerror", None) or e
        raise ConfigError(key, f"cannot load {ca_file}: {why}") from None


def load(path: str | None) -> ActivatorConfig | None:
    """Parse a YAML file (None: no file, None back). Raises ConfigError naming the key or the file."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            raw = yamltext.load(fh.read())
    except OSError as e:
        raise ConfigError("--config", f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError("--config", f"{path} is not UTF-8 text") from None
    except yamltext.YAMLTextError as e:
        raise ConfigError("--config", f"{path} is not YAML: {e}") from None
    return parse(raw)


def with_flags(cfg: ActivatorConfig | None, flags: Mapping[str, Any]) -> ActivatorConfig:
    """`cfg` (or defaults) with the flags that were given over it. Flag keys are config keys; a
    single model from flags: `model`, `upstream` (list), `scaled_object` (`namespace/name`)."""
    base = cfg or ActivatorConfig()
    updates: dict[str, Any] = {}
    scalars: dict[str, Callable[[Any], Any]] = {
        "listen": _listen, "scaler": _url, "activation_token_file": _text, "admin_token_file": _text,
        "max_body_bytes": _size, "shutdown_grace": _duration, "activation_interval": _interval,
    }
    for key, parse_value in scalars.items():
        if flags.get(key) is not None:
            updates[key] = _flag(key, flags[key], parse_value)
    if flags.get("exporter"):
        updates["exporters"] = tuple(_flag("--exporter", u, _url) for u in flags["exporter"])
    models = base.models
    if flags.get("model") or flags.get("upstream"):
        if models:
            raise ConfigError("--model", "the config file lists models already: give models in one place")
        name = _flag("--model", flags.get("model") or "", _text)
        if not name:
            raise ConfigError("--model", "required with --upstream")
        ups = tuple(StaticEndpoint(_flag("--upstream", u, _url)) for u in flags.get("upstream") or ())
        ns = so = ""
        if flags.get("scaled_object"):
            ns, _, so = str(flags["scaled_object"]).partition("/")
            if not (_NAME.match(ns) and _NAME.match(so)):
                raise ConfigError("--scaled-object", f"expected namespace/name, got {flags['scaled_object']!r}")
        m = ModelConfig(name=name, endpoints=ups, namespace=ns, scaled_object=so)
        _check_model(m, "--")
        models = (m,)
        updates["default_model"] = name
    if flags.get("max_held") is not None:
        held = _flag("--max-held", flags["max_held"], _int(0, 10_000_000))
        models = tuple(replace(m, max_held=held) for m in models)
    if flags.get("max_wait") is not None:
        wait = _flag("--max-wait", flags["max_wait"], _duration)
        models = tuple(replace(m, max_wait=wait) for m in models)
    return check(replace(base, models=models, **updates))


def _flag(key: str, value: Any, parse_value: Callable[[Any], T]) -> T:
    try:
        return parse_value(value)
    except ValueError as e:
        name = key if key.startswith("--") else "--" + key.replace("_", "-")
        raise ConfigError(name, str(e)) from None


def read_token(path: str, key: str) -> str:
    """A bearer token from a file (a mounted Secret), stripped; ConfigError naming `key` if unreadable."""
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8") as fh:
            token = fh.read().strip()
    except OSError as e:
        raise ConfigError(key, f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(key, f"{path} is not a text token (not UTF-8)") from None
    if not token:
        raise ConfigError(key, f"{path} is empty")
    return token
