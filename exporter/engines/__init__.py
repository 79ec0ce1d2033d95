"""Engine adapters: recognize an engine's /metrics body and turn it into the engine-neutral signals.

`normalize(body, target)` parses only the families the adapters read (a `wanted` filter on the sample
name, see exporter.parse), detects the engine from the names present unless the target forces one, and
hands the samples to that engine's adapter. Each adapter module names the metrics it reads as data
(`WANTED`), so the filter, the detection and the docs come from one place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from keda_llm.exporter.engines import llamacpp, sglang, tgi, trtllm, vllm
from keda_llm.exporter.engines.ranks import check_unique
from keda_llm.exporter.errors import ScrapeError
from keda_llm.exporter.model import EngineMetrics, Sample, Target
from keda_llm.exporter.parse import parse


@dataclass(frozen=True)
class Adapter:
    name: str
    prefixes: tuple[str, ...]  # a sample name starting with one of these identifies the engine
    wanted: frozenset[str]  # the sample names the adapter reads
    normalize: Callable[[list[Sample], Target], list[EngineMetrics]]
    #: a sample that identifies the engine without a prefix (an adapter module's `unprefixed`)
    unprefixed: Callable[[Sample], bool]
    #: why a body with the engine's names is still not one replica's, or None (a module's `pool_level`)
    pool_level: Callable[[list[Sample]], str | None]
    #: the signals of a body with none of the engine's series, where that means idle (a module's `idle`)
    idle: Callable[[Target], list[EngineMetrics]] | None


def _never(_: Sample) -> bool:
    return False


def _replica(_: list[Sample]) -> str | None:
    return None


ADAPTERS: dict[str, Adapter] = {
    m.NAME: Adapter(m.NAME, m.PREFIXES, m.WANTED, m.normalize, getattr(m, "unprefixed", _never),
                    getattr(m, "pool_level", _replica), getattr(m, "idle", None))
    for m in (vllm, sglang, tgi, trtllm, llamacpp)
}
#: The engine types, as the `engine` label and the `engine:` config key spell them.
ENGINE_NAMES: tuple[str, ...] = tuple(ADAPTERS)

_ALL_WANTED = frozenset().union(*(a.wanted for a in ADAPTERS.values()))
_PREFIXES = tuple((prefix, a.name) for a in ADAPTERS.values() for prefix in a.prefixes)


def detect(samples: Sequence[Sample]) -> str | None:
    """The engine whose metric prefix the first recognizable sample carries; else the engine of the first
    sample that identifies one without a prefix (TensorRT-LLM <= 1.1.x); None if no sample does."""
    for s in samples:
        for prefix, name in _PREFIXES:
            if s.name.startswith(prefix):
                return name
    for s in samples:
        for adapter in ADAPTERS.values():
            if adapter.unprefixed(s):
                return adapter.name
    return None


def normalize(body: str, target: Target) -> list[EngineMetrics]:
    """The normalized signals of one engine body: one EngineMetrics per model and role.

    Raises ScrapeError: "parse" (malformed text), "unknown_engine" (no adapter recognizes the body, the
    forced engine's metrics are absent, or the body is a pool's, not a replica's), "duplicate" (a series we
    read appears twice), "invalid_value" (NaN or +-Inf in a value we use).
    """
    if target.engine is not None:
        adapter = ADAPTERS.get(target.engine)
        if adapter is None:
            raise ScrapeError("unknown_engine", f"engine {target.engine!r} is not one of {', '.join(ENGINE_NAMES)}")
        samples = parse(body, adapter.wanted.__contains__)
        if not any(s.name.startswith(adapter.prefixes) or adapter.unprefixed(s) for s in samples):
            if adapter.idle is not None and not parse(body, _load_series(adapter.name)):
                return adapter.idle(target)
            raise ScrapeError("unknown_engine", f"no {adapter.name} metrics ("
                              + ", ".join(p + "*" for p in adapter.prefixes) + ") in the body" + _forced_hint(body))
    else:
        samples = parse(body, _ALL_WANTED.__contains__)
        name = detect(samples)
        if name is None:
            raise ScrapeError("unknown_engine", _unknown(body))
        adapter = ADAPTERS[name]
        samples = [s for s in samples if s.name in adapter.wanted]
    pool = adapter.pool_level(samples)
    if pool is not None:
        raise ScrapeError("unknown_engine", pool)
    check_unique(samples)
    return adapter.normalize(samples, target)


#: Series every Python server exports whatever it serves (prometheus_client's default collectors): a body of
#: only these has no engine series.
_RUNTIME = ("process_", "python_")


def _engine_series(name: str) -> bool:
    return not name.startswith(_RUNTIME)


def _trtllm_config(name: str) -> bool:
    """trtllm-serve's startup configuration series (`trtllm_model_config_info`, ...: `log_config_info`),
    written before any request: they say nothing of its load."""
    return name.startswith(("trtllm_", "trtllm:")) and name.endswith("_config_info")


def _load_series(engine: str) -> Callable[[str], bool]:
    """Whether a series in a body forced to `engine` may speak of its load: not the runtime's, and for trtllm
    not its configuration (under another engine those are a mislabelled trtllm-serve, never an idle body)."""
    if engine == trtllm.NAME:
        return lambda name: _engine_series(name) and not _trtllm_config(name)
    return _engine_series


#: Bodies that are not an engine's, and what to scrape instead: a metrics name prefix (at a line's start)
#: and the reason. NVIDIA Dynamo's frontend (lib/runtime/src/metrics/prometheus_names.rs) counts a whole
#: pool's requests, not one replica's; Triton's own `nv_inference_*` series alone are a backend that
#: registers no engine metrics (TensorRT-LLM's LLM-API Python model, for one).
_NOT_ENGINES = (
    ("dynamo_frontend_", "a Dynamo frontend's metrics (dynamo_frontend_*) count the whole pool: scrape its "
                         "workers (vLLM, SGLang, TensorRT-LLM) for per-replica signals"),
    ("nv_inference_", "Triton's own metrics (nv_inference_*) with no engine's: its backend registers none "
                      "(the TensorRT-LLM C++ backend's nv_trt_llm_*, or vLLM's vllm:*, are read)"),
)


#: A Python engine with its engine metrics off still serves its server's: prometheus_client's `python_info` and
#: the HTTP middleware's `http_requests_total` (vLLM --disable-log-stats builds no stat logger; SGLang registers
#: its collectors only with --enable-metrics).
_SERVER_ONLY = ("http_requests_total", "python_info")
_STATS_OFF = ("is stats logging disabled (vLLM --disable-log-stats) or metrics not enabled "
              "(SGLang --enable-metrics)?")
_EMPTY = ("empty body: an idle TGI before v2.3.1, or trtllm-serve, serves an empty body until its first request; "
          "the annotation `keda-llm.io/engine: tgi` or `trtllm` (a target's `engine:`) reads it as idle")
#: trtllm-serve's prefix on series that are all configuration: its load series come with the first request.
_TRTLLM_INFO_ONLY = ("trtllm-serve with no load series yet (only its `*_info` series): they appear from its first "
                     "request; the annotation `keda-llm.io/engine: trtllm` (a target's `engine: trtllm`) reads it "
                     "as idle")


def _has(body: str, prefix: str) -> bool:
    """Whether a line of the body starts with `prefix` (a text search: the body was parsed for other names)."""
    return body.startswith(prefix) or f"\n{prefix}" in body


def _server_only(body: str) -> bool:
    """Whether the body has its Python server's own series (_SERVER_ONLY): the engine's metrics are off."""
    return any(_has(body, name) for name in _SERVER_ONLY)


def _unknown(body: str) -> str:
    """Why no adapter recognizes a body, naming what it is where that is known."""
    for prefix, why in _NOT_ENGINES:
        if _has(body, prefix):
            return why
    if not any(line.strip() and not line.lstrip().startswith("#") for line in body.splitlines()):
        return _EMPTY
    if (_has(body, "trtllm_") or _has(body, "trtllm:")) and not parse(body, _load_series(trtllm.NAME)):
        return _TRTLLM_INFO_ONLY
    if _server_only(body):
        return "no engine series: " + _STATS_OFF
    return "no metric of a known engine (" + ", ".join(p + "*" for p, _ in _PREFIXES) + ") in the body"


def _forced_hint(body: str) -> str:
    """The likely cause when the forced engine's series are missing from a body that has its server's."""
    return ": " + _STATS_OFF if _server_only(body) else ""
