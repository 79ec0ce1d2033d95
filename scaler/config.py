"""ScaledObject trigger metadata -> a typed, frozen ScalerConfig.

Every key is declared once, as a field of ScalerConfig carrying its metadata key, parser, default,
meaning and example; the parser, the validation messages and the README reference
(`render_reference()`) all read that one declaration. Errors name the key and the value, because
KEDA shows the message to whoever wrote the ScaledObject.
"""

from __future__ import annotations

import dataclasses
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from keda_llm.common.addresses import host_port
from keda_llm.common.durations import parse_duration as parse_duration  # the one Go duration grammar (exporter too)
from keda_llm.scaler.schedule import MAX_WINDOWS, WarmWindow, parse_windows

# Keys KEDA itself puts into the metadata map (keda-contract.md 2.1): never ours to refuse.
KEDA_KEYS = frozenset({"scalerAddress", "enableTLS", "unsafeSsl"})
KEDA_KEY_SUFFIX = "FromEnv"

POLICIES = ("tokens", "concurrency", "kvCache", "queue")
METRICS_SOURCES = ("exporters", "prometheus")
AGGREGATIONS = ("weighted", "mean", "max")
MODES = ("reactive", "proactive", "hybrid")
SEASONALITY = ("auto", "off")
ANSWERS = ("replicas", "warmCapacity")
ITL_SCALINGS = ("proportional", "busy")
POOL_ROLES = ("unified", "prefill", "decode")  # the exporter's `role` label (common/vocabulary.py ROLES)
RATIO_MODES = ("fixed", "independent", "bounded")
MAX_RATIO = 1000.0  # prefill replicas per decode replica, or the inverse: far beyond any real P:D mix
MAX_VARIANTS = 16
MAX_PRICE = 1e6  # per replica-hour, in any currency
MAX_WARM_NODES = 64  # warm calls per cold start: the scaler caps it again (--warm-max-nodes)
MAX_PATH = 4096  # PATH_MAX on Linux


#: the longest value an error message quotes whole: a 20 KB value echoed into grpc-message passed gRPC's 16 KB
#: metadata limit (the client got RESOURCE_EXHAUSTED instead of INVALID_ARGUMENT)
SHOWN_VALUE = 200


def shown(value: str) -> str:
    """A metadata value as an error message quotes it: repr, cut to SHOWN_VALUE characters."""
    if len(value) <= SHOWN_VALUE:
        return repr(value)
    return f"{value[:SHOWN_VALUE]!r}... ({len(value)} characters)"


class ConfigError(ValueError):
    """Malformed trigger metadata. The servicer maps it to INVALID_ARGUMENT."""

    def __init__(self, key: str, value: str | None, problem: str) -> None:
        shown_value = "(missing)" if value is None else shown(value)
        super().__init__(f"metadata key {key!r} = {shown_value}: {problem}")
        self.key = key
        self.value = value
        self.problem = problem


# ---- value parsers: each turns the string into a typed value or raises ValueError(why) ----

Parser = Callable[[str], Any]

def format_duration(seconds: float) -> str:
    """Seconds -> the shortest Go-style spelling (`60s`, `10m`, `1h30m`): for the rendered reference."""
    if seconds < 1 and seconds > 0:
        return f"{seconds * 1000:g}ms"
    whole = int(seconds)
    if whole != seconds or whole < 120:
        return f"{seconds:g}s"
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    out = (f"{h}h" if h else "") + (f"{m}m" if m else "") + (f"{s}s" if s else "")
    return out or "0s"


def parse_float(text: str) -> float:
    try:
        v = float(text.strip())
    except ValueError:
        raise ValueError("not a number") from None
    if not math.isfinite(v):
        raise ValueError("must be a finite number")
    return v


def parse_int(text: str) -> int:
    s = text.strip()
    if not re.fullmatch(r"[+-]?\d+", s):
        raise ValueError("not a whole number")
    return int(s)


_TRUE = {"1", "t", "T", "TRUE", "true", "True"}  # Go strconv.ParseBool, as KEDA's own scalers parse
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def parse_bool(text: str) -> bool:
    s = text.strip()
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    raise ValueError("not a boolean: use true or false")


def parse_text(text: str) -> str:
    s = text.strip()
    if not s:
        raise ValueError("must not be empty")
    return s


def parse_name(text: str) -> str:
    """A name matched to a label value (the model): text without control characters."""
    s = parse_text(text)
    if any(ord(c) < 32 or ord(c) == 127 for c in s):
        raise ValueError("must not contain control characters")
    return s


def _endpoint(text: str, *, scheme: bool) -> str:
    """`host`, `host:port`, `[v6]:port` or (`scheme`) an http(s) URL, its port 1-65535: what the scaler can
    dial. Accepted unchecked, a bad port failed on every collection (UNAVAILABLE for ever) or as an
    internal error."""
    s = text.strip()
    if not s or any(c.isspace() or ord(c) < 32 for c in s):
        raise ValueError("must not be empty or contain spaces")
    has_scheme = "://" in s
    if has_scheme and not scheme:
        raise ValueError("host[:port], without a scheme")
    if not has_scheme:  # the one address grammar (common/addresses.py), the one the sources dial with
        try:
            host, number = host_port(s, default_port=1)
        except ValueError as err:
            raise ValueError(f"not host[:port]{' or an http(s) URL' if scheme else ''}: {err}") from None
        if not host:
            raise ValueError("no host")
        if number == 0:
            raise ValueError("port 0")
        return s
    try:
        parts = urlsplit(s)
        port = parts.port
    except ValueError as err:
        raise ValueError(f"not host[:port]{' or an http(s) URL' if scheme else ''}: {err}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError("not an http:// or https:// URL")
    if not parts.hostname:
        raise ValueError("no host")
    if port == 0:
        raise ValueError("port 0")
    return s


def parse_host_port(text: str) -> str:
    return _endpoint(text, scheme=False)


def parse_list(text: str) -> tuple[str, ...]:
    items = tuple(part.strip() for part in text.split(","))
    if not items or any(not item or any(c.isspace() for c in item) for item in items):
        raise ValueError("a comma-separated list of host:port or URLs, with no empty items")
    return tuple(_endpoint(item, scheme=True) for item in items)


def parse_url(text: str) -> str:
    s = text.strip()
    if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", s):
        raise ValueError("not an http:// or https:// URL")
    _endpoint(s, scheme=True)
    return s.rstrip("/")


def parse_abs_path(text: str) -> str:
    s = text.strip()
    if not s.startswith("/") or any(c.isspace() or c == "\x00" for c in s) or len(s) > MAX_PATH:
        raise ValueError(f"an absolute path (starting with /, no spaces, at most {MAX_PATH} characters)")
    if ".." in s.split("/"):
        raise ValueError("must not contain a .. component")
    return s


def parse_label(text: str) -> str:
    s = parse_text(text)
    if len(s) > 128:
        raise ValueError("at most 128 characters")
    return s


def one_of(*choices: str) -> Parser:
    def parse(text: str) -> str:
        s = text.strip()
        if s not in choices:
            raise ValueError("must be one of " + ", ".join(choices))
        return s

    return parse


def parse_ratio(text: str) -> float:
    """A P:D ratio, prefill replicas per decode replica: `1:3` or a number (`0.333`)."""
    s = text.strip()
    if ":" in s:
        p, _, d = s.partition(":")
        num, den = parse_float(p), parse_float(d)
        if num <= 0 or den <= 0:
            raise ValueError("both sides of P:D must be greater than 0")
        return num / den
    return parse_float(s)


@dataclass(frozen=True)
class Variant:
    """One Deployment of the model on one GPU type (`variants`): its ScaledObject's name, what a replica
    costs per hour, the KV-cache tokens one replica holds, at most how many replicas it may have, the
    prompt tokens per second one replica computes and the tokens per second it generates within the
    ITL target."""

    name: str
    price_per_hour: float
    capacity: float
    max_replicas: int | None = None
    prefill_tps: float | None = None  # prompt tokens/s one replica computes (None: not a constraint)
    decode_tps: float | None = None  # tokens/s one replica generates within the ITL target (None: likewise)


_VARIANT_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")  # a Kubernetes object name


def parse_variants(text: str) -> tuple[Variant, ...]:
    """`name pricePerHour=P capacity=C [maxReplicas=N] [prefillTokensPerSecond=T] [decodeTokensPerSecond=G];
    name ...`, most preferred first."""
    out: list[Variant] = []
    for n, entry in enumerate(text.split(";"), 1):
        words = entry.split()
        if not words:
            raise ValueError(f"entry {n} is empty (entries: `name pricePerHour=P capacity=C [maxReplicas=N]`, "
                             "separated by ;)")
        name, fields = words[0], dict(w.partition("=")[::2] for w in words[1:])
        if not _VARIANT_NAME.fullmatch(name):
            raise ValueError(f"entry {n}: {name!r} is not a ScaledObject name")
        if any(v.name == name for v in out):
            raise ValueError(f"entry {n}: variant {name!r} is listed twice")
        known = ("pricePerHour", "capacity", "maxReplicas", "prefillTokensPerSecond", "decodeTokensPerSecond")
        unknown = sorted(set(fields) - set(known))
        if unknown or len(fields) != len(words) - 1:
            raise ValueError(f"entry {n} ({name}): unknown or repeated field {', '.join(unknown) or '(repeated)'} "
                             f"(known: {', '.join(known)})")
        for req in ("pricePerHour", "capacity"):
            if req not in fields:
                raise ValueError(f"entry {n} ({name}): {req}= is required")
        try:
            price, capacity = parse_float(fields["pricePerHour"]), parse_float(fields["capacity"])
            most = parse_int(fields["maxReplicas"]) if "maxReplicas" in fields else None
            tps = parse_float(fields["prefillTokensPerSecond"]) if "prefillTokensPerSecond" in fields else None
            gen = parse_float(fields["decodeTokensPerSecond"]) if "decodeTokensPerSecond" in fields else None
        except ValueError as e:
            raise ValueError(f"entry {n} ({name}): {e}") from None
        if not 0 <= price <= MAX_PRICE:
            raise ValueError(f"entry {n} ({name}): pricePerHour must be in [0, {MAX_PRICE:g}]")
        if not 0 < capacity <= 1e12:
            raise ValueError(f"entry {n} ({name}): capacity must be in (0, 1e12] KV tokens")
        if most is not None and not 0 <= most <= MAX_REPLICAS:
            raise ValueError(f"entry {n} ({name}): maxReplicas must be in [0, {MAX_REPLICAS}]")
        for key, rate in (("prefillTokensPerSecond", tps), ("decodeTokensPerSecond", gen)):
            if rate is not None and not 0 < rate <= 1e9:
                raise ValueError(f"entry {n} ({name}): {key} must be in (0, 1e9]")
        out.append(Variant(name, price, capacity, most, tps, gen))
    if len(out) > MAX_VARIANTS:
        raise ValueError(f"at most {MAX_VARIANTS} variants")
    return tuple(out)


# ---- range checks, applied after parsing ----
# Every key has an upper bound too: a value that parses is finite and sane, so no later arithmetic (a
# ceil, an int conversion, a window length in samples) meets an infinity or a 400-digit number.

HOUR, DAY = 3600.0, 86400.0
WEEK, YEAR = 7 * DAY, 365 * DAY
MAX_REPLICAS = 2**31 - 1  # KEDA's min/maxReplicaCount are int32
MAX_PER_REPLICA = 1e6  # requests or batch slots per replica: far above any engine's batch limit
MAX_RATE = 1e6  # Knative's max-scale-up-rate default is 1000

Check = Callable[[Any], str | None]  # None = fine, else the problem


def positive(v: Any) -> str | None:
    return None if v > 0 else "must be greater than 0"


def non_negative(v: Any) -> str | None:
    return None if v >= 0 else "must not be negative"


def in_range(lo: float, hi: float, lo_open: bool = False) -> Check:
    def check(v: Any) -> str | None:
        ok = (v > lo if lo_open else v >= lo) and v <= hi
        return None if ok else f"must be in {'(' if lo_open else '['}{lo:g}, {hi:g}]"

    return check


def bounded(lo: float, hi: float, *, lo_open: bool = False, duration: bool = False) -> Check:
    """A lower bound with the messages the open checks give, and an upper bound (`at most 1h`)."""
    lower = positive if lo_open and lo == 0 else greater_than(lo) if lo_open else non_negative if lo == 0 else None
    shown = format_duration(hi) if duration else f"{hi:g}"

    def check(v: Any) -> str | None:
        problem = lower(v) if lower is not None else (None if v >= lo else f"must be at least {lo:g}")
        return problem or (None if v <= hi else f"must be at most {shown}")

    return check


def greater_than(lo: float) -> Check:
    def check(v: Any) -> str | None:
        return None if v > lo else f"must be greater than {lo:g}"

    return check


@dataclass(frozen=True)
class KeySpec:
    """One metadata key: how to parse it, what it means, an example value."""

    key: str
    parse: Parser
    doc: str
    example: str
    check: Check | None = None
    required: bool = False
    shown_default: str | None = None  # how the default reads in the reference, where not the plain value


def _key(default: Any, key: str, parse: Parser, doc: str, example: str, check: Check | None = None,
         required: bool = False, shown_default: str | None = None) -> Any:
    """A ScalerConfig field with its metadata key: the one place a key, its default and its meaning live."""
    spec = KeySpec(key, parse, doc, example, check, required, shown_default)
    return dataclasses.field(default=default, metadata={"spec": spec})


@dataclass(frozen=True)
class ScalerConfig:
    """One trigger's parsed metadata. Durations are seconds; None = not set (the scaler measures or derives it)."""

    model: str = _key("", "model", parse_name, "Served model name, matched to the `model` label of the replicas' "
                      "metrics within the ScaledObject's namespace.", "meta-llama/Llama-3.1-8B-Instruct",
                      required=True)
    metrics_source: str = _key("exporters", "metricsSource", one_of(*METRICS_SOURCES),
                               "`exporters`: the scaler scrapes the exporters itself (lowest lag); `prometheus`: "
                               "PromQL over HTTP at `prometheusAddress`.", "prometheus")
    exporters_service: str = _key("", "exportersService", parse_host_port,
                                  "Headless Service whose DNS names the exporters (`host[:port]`, port 9400 when "
                                  "omitted); empty: the scaler's own default (command line).",
                                  "keda-llm-exporter.keda-llm-exporter.svc:9400", shown_default="(scaler default)")
    exporters: tuple[str, ...] = _key((), "exporters", parse_list,
                                      "Static comma-separated list of exporters (`host:port` or URLs), instead of "
                                      "`exportersService`.", "10.0.0.5:9400,10.0.0.6:9400", shown_default="(none)")
    prometheus_address: str = _key("", "prometheusAddress", parse_url,
                                   "Prometheus base URL for `metricsSource: prometheus` and `activationQuery`; "
                                   "empty: the scaler's own default.", "http://prometheus.monitoring:9090",
                                   shown_default="(scaler default)")
    policy: str = _key("tokens", "policy", one_of(*POLICIES),
                       "`tokens`: KV-token demand against KV-token capacity (and batch slots where known); "
                       "`concurrency`: running+waiting against `targetConcurrency`; `kvCache`: mean KV usage "
                       "against `targetKVUtilization`; `queue`: waiting against `targetQueueDepth`.", "concurrency")
    target_kv_utilization: float = _key(0.8, "targetKVUtilization", parse_float,
                                        "Fraction of each replica's KV cache (and of its batch slots) to fill at "
                                        "the desired count.", "0.7", check=in_range(0.0, 1.0, lo_open=True))
    target_concurrency: float | None = _key(None, "targetConcurrency", parse_float,
                                            "Running+waiting requests per replica (`concurrency` policy); unset: "
                                            "`targetKVUtilization` x the batch limit the engine reports.", "24",
                                            check=bounded(0.0, MAX_PER_REPLICA, lo_open=True),
                                            shown_default="(batch limit x targetKVUtilization)")
    target_queue_depth: float = _key(5.0, "targetQueueDepth", parse_float,
                                     "Waiting requests per replica (`queue` policy, the usual "
                                     "`num_requests_waiting` rule).", "10",
                                     check=bounded(0.0, MAX_PER_REPLICA, lo_open=True))
    aggregation: str = _key("weighted", "aggregation", one_of(*AGGREGATIONS),
                            "How the `kvCache` policy combines replicas' KV usage: `weighted` (by KV capacity), "
                            "`mean` (each replica alike) or `max` (the fullest replica).", "max")
    stable_window: float = _key(60.0, "stableWindow", parse_duration,
                                "Knative stable window: the averaging window of the normal mode (Knative range "
                                "6s-1h).", "2m", check=in_range(6.0, 3600.0))
    panic_window: float = _key(6.0, "panicWindow", parse_duration,
                               "Knative panic window: the short window that detects bursts (at most "
                               "`stableWindow`).", "10s", check=positive)
    panic_threshold: float = _key(2.0, "panicThreshold", parse_float,
                                  "Panic when the panic window asks for this many times the ready replicas "
                                  "(Knative 200%, range 1.1-10).", "3", check=in_range(1.1, 10.0))
    max_scale_up_rate: float = _key(1000.0, "maxScaleUpRate", parse_float,
                                    "At most ceil(ready x rate) replicas per decision (Knative default).", "10",
                                    check=bounded(1.0, MAX_RATE, lo_open=True))
    max_scale_down_rate: float = _key(2.0, "maxScaleDownRate", parse_float,
                                      "At least floor(ready / rate) replicas per decision (Knative default).", "4",
                                      check=bounded(1.0, MAX_RATE, lo_open=True))
    scale_to_zero: bool = _key(False, "scaleToZero", parse_bool,
                               "Allow zero: `IsActive` turns false after `idleTimeout` without demand. When false "
                               "`IsActive` is always true (KEDA's `minReplicaCount` defaults to 0).", "true")
    idle_timeout: float = _key(600.0, "idleTimeout", parse_duration,
                               "Time without demand (nothing running, waiting or upstream) before `IsActive` turns "
                               "false; KEDA adds its `cooldownPeriod`.", "30m", check=bounded(0.0, YEAR, duration=True))
    activation_query: str = _key("", "activationQuery", parse_text,
                                 "PromQL for demand that exists while no replica does (e.g. a gateway's pending "
                                 "requests); counted as waiting requests.",
                                 'sum(gateway_pending_requests{model="llama-8b"})', shown_default="(none)")
    cold_start: float | None = _key(None, "coldStart", parse_duration,
                                    "Replica start-up time (bounds the pending-replica guard, sets the forecast "
                                    "horizon); unset: the p90 of the target's pods' measured cold starts (creation "
                                    "to Ready), else the largest `llm_engine_startup_seconds` seen, else 10m.", "3m",
                                    check=bounded(0.0, DAY, lo_open=True, duration=True),
                                    shown_default="(measured)")
    scale_down_delay: float | None = _key(None, "scaleDownDelay", parse_duration,
                                          "Scale down only to the largest count decided within this window "
                                          "(Knative `scale-down-delay`). Unset: the cold start (`coldStart`, "
                                          "else measured, else 10m), since a replica released now takes that "
                                          "long to come back, doubled (up to 4 cold starts) each time a "
                                          "released replica is asked for again within the delay and halved "
                                          "after 8 cold starts without that, and no release below the count "
                                          "the panic window asks for; 0 in `proactive` mode (the "
                                          "forecast looks that far ahead). Set: fixed. `0s`: Knative's "
                                          "default, no delay.", "5m",
                                          check=in_range(0.0, 3600.0), shown_default="(coldStart)")
    mode: str = _key("reactive", "mode", one_of(*MODES),
                     "`reactive`: the Knative windows alone; `hybrid`: the larger of the windows' count and the "
                     "demand forecast one `forecastHorizon` ahead (the forecast only adds replicas ahead of "
                     "demand, it never removes one sooner than reactive would); `proactive`: the forecast alone. "
                     "Reactive by default: on the backtests hybrid reached 99% of the SLO at no lower cost "
                     "(docs/design.md, \"Hybrid or reactive by default\").", "hybrid")
    forecast_horizon: float | None = _key(None, "forecastHorizon", parse_duration,
                                          "How far ahead `proactive`/`hybrid` forecast; unset: `coldStart` + "
                                          "KEDA's `pollingInterval` + the HPA's 15s sync.", "5m",
                                          check=bounded(0.0, WEEK, lo_open=True, duration=True),
                                          shown_default="(coldStart + poll + 15s)")
    forecast_max_ratio: float = _key(3.0, "forecastMaxRatio", parse_float,
                                     "Cap on the forecast: at most this many times the current reactive "
                                     "desired count (a noisy trend must not run away).", "2",
                                     check=in_range(1.0, 100.0))
    seasonality: str = _key("auto", "seasonality", one_of(*SEASONALITY),
                            "`auto`: with a day or more of the model's minute history, `hybrid`/`proactive` also "
                            "size for the seasonal forecast (daily profile, weekly with two weeks, at the current "
                            "level; scaler/seasonal.py) of request rate and prompt and output tokens/s one "
                            "`forecastHorizon` ahead, at its `forecastQuantile`; `off`: the short-range trend "
                            "alone.", "off")
    forecast_quantile: float = _key(0.5, "forecastQuantile", parse_float,
                                    "The seasonal forecast's quantile that is provisioned for: its point plus this "
                                    "quantile of its own past errors at the horizon (higher: more headroom, fewer "
                                    "misses on a ramp, more GPU-hours). 0.5: the scale-down delay already holds "
                                    "the largest count for a cold start; on the 2024 code week 0.9 on top cost "
                                    "1.59x the oracle's GPU-hours for 99.35% where 0.5 cost 1.00x for 99.11%.",
                                    "0.9", check=in_range(0.5, 0.999))
    advisory: bool = _key(False, "advisory", parse_bool,
                          "Decide and record, but hand KEDA the current replica count.", "true")
    stale_after: float = _key(30.0, "staleAfter", parse_duration,
                              "A replica whose last successful scrape is older is excluded, and the data counts as "
                              "stale (no scale-down). Raise it for slow Prometheus scrapes.", "1m",
                              check=bounded(0.0, DAY, lo_open=True, duration=True))
    min_replicas: int | None = _key(None, "minReplicas", parse_int,
                                    "Lower bound on the decided count; unset: the ScaledObject's `minReplicaCount`.",
                                    "1", check=bounded(0, MAX_REPLICAS), shown_default="(ScaledObject's)")
    max_replicas: int | None = _key(None, "maxReplicas", parse_int,
                                    "Upper bound on the decided count; unset: the ScaledObject's `maxReplicaCount`.",
                                    "8", check=bounded(0, MAX_REPLICAS, lo_open=True), shown_default="(ScaledObject's)")
    max_running: float | None = _key(None, "maxRunning", parse_float,
                                     "Batch limit per replica (max_num_seqs, slots) where the engine does not "
                                     "report `llm_requests_max_running`, or to override it.", "256",
                                     check=bounded(0.0, MAX_PER_REPLICA, lo_open=True),
                                     shown_default="(reported)")
    target_ttft: float | None = _key(None, "targetTimeToFirstToken", parse_duration,
                                     "Latency SLO: mean time to first token to keep (the engines' TTFT histogram). "
                                     "Set, while requests queue, the count is at least ready x sqrt(observed / "
                                     "target) over the windows; unset: off.", "2s",
                                     check=bounded(0.0, HOUR, lo_open=True, duration=True),
                                     shown_default="(off)")
    target_itl: float | None = _key(None, "targetInterTokenLatency", parse_duration,
                                    "Latency SLO: mean inter-token latency to keep (the engines' ITL histogram). "
                                    "Set, the count is at least ready x observed / target over the windows; "
                                    "unset: off.", "100ms",
                                    check=bounded(0.0, HOUR, lo_open=True, duration=True),
                                    shown_default="(off)")
    short_output_tokens: float = _key(50.0, "shortOutputTokens", parse_float,
                                      "With `targetInterTokenLatency`: traffic whose answers average fewer output "
                                      "tokens per request (last 10 minutes) holds the mean ITL at that share of the "
                                      "target (at least a quarter): a short answer's per-request ITL is its few "
                                      "decode steps beside other prompts' prefill chunks, so its tail sits further "
                                      "above the mean (scaler/slo.py `short_output_factor`). 0: off.", "60",
                                      check=bounded(0.0, 1e6))
    itl_scaling: str = _key("proportional", "itlScaling", one_of(*ITL_SCALINGS),
                            "With `targetInterTokenLatency`: how an ITL under its target counts. `proportional`: "
                            "ready x observed / target; `busy`: the larger of that and ready x the replicas' "
                            "busy share over the target's, on ITL = floor / (1 - busy) with the fitted ITL "
                            "floor, which keeps a replica that proportional scaling releases where the target "
                            "is several times the floor (8B on one GPU; docs/design.md, \"itlScaling: busy\").",
                            "busy")
    answer: str = _key("replicas", "answer", one_of(*ANSWERS),
                       "`replicas`: the model's replica count; `warmCapacity`: placeholder replicas to keep for "
                       "the model (the decided count beyond the replicas running, at most `warmCapacityMax`, 0 "
                       "when idle), for a second ScaledObject on a placeholder Deployment so the cluster "
                       "autoscaler brings nodes ahead of the forecast (deploy/examples/warm-capacity.yaml).",
                       "warmCapacity")
    warm_capacity_max: int = _key(2, "warmCapacityMax", parse_int,
                                  "`answer: warmCapacity`: at most this many placeholder replicas.", "4",
                                  check=bounded(0, 1024))
    warm_path: str = _key("", "warmPath", parse_abs_path,
                          "Weights to warm: on a forecast scale-up or a wake from zero the scaler asks the "
                          "exporters of the nodes likely to get the pod (`POST /v1/warm`) to read this path into "
                          "their page cache; empty: off.", "/models/llama-3.1-8b", shown_default="(off)")
    warm_nodes: int = _key(2, "warmNodes", parse_int,
                           "`warmPath`: at most this many nodes per cold start, those that ran the model most "
                           "recently first, then those with the most free GPUs.", "3",
                           check=bounded(1.0, MAX_WARM_NODES))
    warm_gpu_model: str = _key("", "warmGpuModel", parse_label,
                               "`warmPath`: the GPU kind the model requests, as the exporters' `gpu_model` label "
                               "says it; unset: the kind its replicas were seen on (any kind before that).",
                               "NVIDIA H100 80GB HBM3", shown_default="(learned)")
    warm_windows: tuple[WarmWindow, ...] = _key((), "warmWindows", parse_windows,
                                                "Scheduled floors for known events: a YAML list of windows, each "
                                                "`start` (a 5-field cron: minute hour day-of-month month "
                                                "day-of-week) until `end` (a cron) or for `duration`, in "
                                                "`timezone` (IANA), holding at least `desiredReplicas` (KEDA's "
                                                "`cron` scaler's keys). The floor begins `leadTime` before the "
                                                "start (default: a cold start + KEDA's poll + the HPA's 15s "
                                                "sync, so replicas serve when the event begins), wakes a model "
                                                f"at zero, and ends with the window. At most {MAX_WINDOWS} "
                                                "windows; DST rules in docs/design.md.",
                                                '[{start: "0 9 * * MON-FRI", duration: 9h, timezone: '
                                                'Europe/Berlin, desiredReplicas: 2}]', shown_default="(none)")

    role: str = _key("", "role", one_of(*POOL_ROLES),
                     "Disaggregated serving: the pool this ScaledObject scales, as the replicas' `role` label says "
                     "(`prefill`, `decode`, or `unified`); its answer is its share of one decision for the "
                     "model's pools (docs/pools.md). Unset: the model is one pool.", "prefill",
                     shown_default="(one pool)")
    ratio: str = _key("independent", "ratio", one_of(*RATIO_MODES),
                      "With `role`: `fixed` keeps `prefillDecodeRatio`; `independent` sizes each pool on its own "
                      "signal; `bounded` does too, then raises the smaller pool until the P:D ratio is within "
                      "`minPrefillDecodeRatio`..`maxPrefillDecodeRatio`.", "fixed")
    prefill_decode_ratio: float | None = _key(None, "prefillDecodeRatio", parse_ratio,
                                              "`ratio: fixed`: prefill replicas per decode replica (`1:3` or "
                                              "`0.333`).", "1:3", check=bounded(0.0, MAX_RATIO, lo_open=True),
                                              shown_default="(none)")
    min_prefill_decode_ratio: float | None = _key(None, "minPrefillDecodeRatio", parse_ratio,
                                                  "`ratio: bounded`: the fewest prefill replicas per decode "
                                                  "replica.", "1:4", check=bounded(0.0, MAX_RATIO, lo_open=True),
                                                  shown_default="(none)")
    max_prefill_decode_ratio: float | None = _key(None, "maxPrefillDecodeRatio", parse_ratio,
                                                  "`ratio: bounded`: the most prefill replicas per decode "
                                                  "replica.", "1:1", check=bounded(0.0, MAX_RATIO, lo_open=True),
                                                  shown_default="(none)")
    prefill_tokens_per_second: float | None = _key(None, "prefillTokensPerSecond", parse_float,
                                                   "Prompt tokens per second one prefill replica computes "
                                                   "(measured with a benchmark); unset: the most the prefill "
                                                   "replicas computed per replica within the last hour while "
                                                   "requests queued.", "12000",
                                                   check=bounded(0.0, 1e9, lo_open=True), shown_default="(measured)")
    variant: str = _key("", "variant", parse_label,
                        "GPU variants by cost: this ScaledObject's own entry in `variants` (its name).",
                        "llama-8b-l4", shown_default="(off)")
    variants: tuple[Variant, ...] = _key((), "variants", parse_variants,
                                         "GPU variants of the model, one ScaledObject each, most preferred first: "
                                         "`name pricePerHour=P capacity=C [maxReplicas=N] "
                                         "[prefillTokensPerSecond=T] [decodeTokensPerSecond=G]` separated by `;`, "
                                         "where `name` is the variant's ScaledObject, `capacity` the KV-cache "
                                         "tokens of one replica, and the optional rates the prompt tokens/s it "
                                         "computes and the tokens/s it generates within the ITL target (with "
                                         "them, the mix covers those too). Every variant's ScaledObject lists "
                                         "the same table.",
                                         "llama-8b-l4 pricePerHour=0.8 capacity=60000 maxReplicas=6; "
                                         "llama-8b-h100 pricePerHour=4.1 capacity=480000", shown_default="(none)")
    pending_timeout: float = _key(300.0, "pendingTimeout", parse_duration,
                                  "`variants`: a variant whose pods stay unscheduled (Pending) this long is full: "
                                  "demand spills to the next variant, and it is asked for no more until its "
                                  "pending pods are scheduled.", "3m", check=bounded(0.0, DAY, lo_open=True,
                                                                                      duration=True))

    degraded_fraction: float = _key(0.5, "degradedFraction", parse_float,
                                    "A replica whose GPU the exporter reports throttled (HW slowdown, thermal, power "
                                    "brake), with a recent critical XID or uncorrectable ECC errors "
                                    "(`llm_replica_degraded`) counts as this fraction of a replica; 1: as a whole "
                                    "one.", "0.6", check=in_range(0.0, 1.0))
    slow_replica_ratio: float = _key(0.7, "slowReplicaRatio", parse_float,
                                     "A busy replica generating fewer tokens per running request than this times "
                                     "the median of its peers' over `stableWindow` counts as min(1, its rate / "
                                     "that median) of a replica; 0: off.", "0.5", check=in_range(0.0, 1.0))

    def __post_init__(self) -> None:
        """Rules between keys: the messages name both keys and both values."""
        self._pool_rules()
        if self.panic_window > self.stable_window:
            raise ConfigError("panicWindow", format_duration(self.panic_window),
                              f"must not exceed stableWindow ({format_duration(self.stable_window)})")
        if self.min_replicas is not None and self.max_replicas is not None and self.min_replicas > self.max_replicas:
            raise ConfigError("minReplicas", str(self.min_replicas),
                              f"must not exceed maxReplicas ({self.max_replicas})")

    def _pool_rules(self) -> None:
        """`role`/`ratio` and `variant`/`variants` go together (scaler/pools.py)."""
        split = self.role in ("prefill", "decode")
        if self.ratio != "independent" and not split:
            raise ConfigError("ratio", self.ratio, "needs role: prefill or role: decode")
        if self.ratio == "fixed" and self.prefill_decode_ratio is None:
            raise ConfigError("ratio", self.ratio, "needs prefillDecodeRatio")
        if self.ratio == "bounded" and self.min_prefill_decode_ratio is None and self.max_prefill_decode_ratio is None:
            raise ConfigError("ratio", self.ratio, "needs minPrefillDecodeRatio or maxPrefillDecodeRatio")
        lo, hi = self.min_prefill_decode_ratio, self.max_prefill_decode_ratio
        if lo is not None and hi is not None and lo > hi:
            raise ConfigError("minPrefillDecodeRatio", f"{lo:g}", f"must not exceed maxPrefillDecodeRatio ({hi:g})")
        if self.variant and not self.variants:
            raise ConfigError("variant", self.variant, "needs variants")
        if self.variants and not self.variant:
            raise ConfigError("variants", ",".join(v.name for v in self.variants), "needs variant")
        if self.variant and self.variant not in [v.name for v in self.variants]:
            raise ConfigError("variant", self.variant, "is not one of variants (" +
                              ", ".join(v.name for v in self.variants) + ")")
        if self.variant and self.role:
            raise ConfigError("variant", self.variant, f"cannot be combined with role ({self.role})")


def key_specs() -> list[tuple[str, KeySpec, Any]]:
    """(attribute, spec, default) for every key, in declaration order."""
    return [(f.name, f.metadata["spec"], f.default) for f in dataclasses.fields(ScalerConfig)]


def _is_keda_key(key: str) -> bool:
    return key in KEDA_KEYS or key.endswith(KEDA_KEY_SUFFIX)


def parse_metadata(metadata: Mapping[str, str]) -> ScalerConfig:
    """Parse and validate a trigger's metadata; ConfigError names the first bad key and its value."""
    specs = {spec.key: (attr, spec) for attr, spec, _ in key_specs()}
    for key in sorted(metadata):
        if key not in specs and not _is_keda_key(key):
            raise ConfigError(key, metadata[key], "unknown key (known: " + ", ".join(specs) + ")")
    values: dict[str, Any] = {}
    for key, (attr, spec) in specs.items():
        if key not in metadata:
            if spec.required:
                raise ConfigError(key, None, "required")
            continue
        raw = metadata[key]
        try:
            value = spec.parse(raw)
        except ValueError as e:
            raise ConfigError(key, raw, str(e)) from None
        problem = spec.check(value) if spec.check else None
        if problem:
            raise ConfigError(key, raw, problem)
        values[attr] = value
    try:
        return ScalerConfig(**values)
    except ConfigError as e:  # a rule between keys: show the value as written
        raise ConfigError(e.key, metadata.get(e.key, e.value), e.problem) from None


def _shown_default(spec: KeySpec, default: Any) -> str:
    if spec.required:
        return "(required)"
    if spec.shown_default is not None:
        return spec.shown_default
    if spec.parse is parse_duration:
        return f"`{format_duration(default)}`"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, float):
        return f"`{default:g}`"
    return f"`{default}`"


def render_reference() -> str:
    """The ScaledObject metadata reference as a Markdown table, generated from ScalerConfig's fields."""
    rows = ["| key | default | example | meaning |", "|---|---|---|---|"]
    for _, spec, default in key_specs():
        rows.append(f"| `{spec.key}` | {_shown_default(spec, default)} | `{spec.example}` | {spec.doc} |")
    return "\n".join(rows) + "\n"


class ConfigCache:
    """Parsed configs by ScaledObject identity and metadata: KEDA sends the metadata on every RPC.

    Bounded (least recently used goes first) and thread-safe. A ConfigError is cached too, so a bad
    ScaledObject costs one parse, not one per poll (each call raises a copy of it).
    """

    def __init__(self, max_entries: int = 4096) -> None:
        self._max = max_entries
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str, frozenset[tuple[str, str]]], ScalerConfig | ConfigError] = (
            OrderedDict()
        )

    def get(self, namespace: str, name: str, metadata: Mapping[str, str]) -> ScalerConfig:
        key = (namespace, name, frozenset(metadata.items()))
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
        if hit is None:
            try:
                hit = parse_metadata(metadata)
            except ConfigError as e:
                hit = e
            with self._lock:
                self._entries[key] = hit
                while len(self._entries) > self._max:
                    self._entries.popitem(last=False)
        if isinstance(hit, ConfigError):
            # a fresh copy: raising the cached one again grew its traceback by every call's frames (and kept
            # them alive), for as long as KEDA polls the rejected ScaledObject
            raise ConfigError(hit.key, hit.value, hit.problem)
        return hit

    def __len__(self) -> int:
        return len(self._entries)


if __name__ == "__main__":  # python -m keda_llm.scaler.config: print the reference for the README
    print(render_reference(), end="")
