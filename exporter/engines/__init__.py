"""Engine adapters: recognize an engine's /metrics body and turn it into the engine-neutral signals.

`normalize(body, target)` parses only the families the adapters read (a `wanted` filter on the sample
name, see exporter.parse), detects the engine from the names present unless the target forces one, and
hands the samples to that engine's adapter. Each adapter module names the metrics it reads as data
(`WANTED`), so the filter, the detection and the docs come from one place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
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


ADAPTERS: dict[str, Adapter] = {
    m.NAME: Adapter(m.NAME, m.PREFIXES, m.WANTED, m.normalize)
    for m in (vllm, sglang, tgi, trtllm, llamacpp)
}
#: The engine types, as the `engine` label and the `engine:` config key spell them.
ENGINE_NAMES: tuple[str, ...] = tuple(ADAPTERS)

_ALL_WANTED = frozenset().union(*(a.wanted for a in ADAPTERS.values()))
_PREFIXES = tuple((prefix, a.name) for a in ADAPTERS.values() for prefix in a.prefixes)


def detect(samples: Iterable[Sample]) -> str | None:
    """The engine whose metric prefix the first recognizable sample carries; None if no sample has one."""
    for s in samples:
        for prefix, name in _PREFIXES:
            if s.name.startswith(prefix):
                return name
    return None


def normalize(body: str, target: Target) -> list[EngineMetrics]:
    """The normalized signals of one engine body: one EngineMetrics per model and role.

    Raises ScrapeError: "parse" (malformed text), "unknown_engine" (no adapter recognizes the body, or
    the forced engine's metrics are absent), "duplicate" (a series we read appears twice),
    "invalid_value" (NaN or +-Inf in a value we use).
    """
    if target.engine is not None:
        adapter = ADAPTERS.get(target.engine)
        if adapter is None:
            raise ScrapeError("unknown_engine", f"engine {target.engine!r} is not one of {', '.join(ENGINE_NAMES)}")
        samples = parse(body, adapter.wanted.__contains__)
        if not any(s.name.startswith(adapter.prefixes) for s in samples):
            raise ScrapeError("unknown_engine", f"no {adapter.name} metrics ("
                              + ", ".join(p + "*" for p in adapter.prefixes) + ") in the body")
    else:
        samples = parse(body, _ALL_WANTED.__contains__)
        name = detect(samples)
        if name is None:
            raise ScrapeError("unknown_engine", _unknown(body))
        adapter = ADAPTERS[name]
        samples = [s for s in samples if s.name in adapter.wanted]
    check_unique(samples)
    return adapter.normalize(samples, target)


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


def _unknown(body: str) -> str:
    """Why no adapter recognizes a body, naming what it is where that is known."""
    for prefix, why in _NOT_ENGINES:
        if body.startswith(prefix) or f"\n{prefix}" in body:
            return why
    return "no metric of a known engine (" + ", ".join(p + "*" for p, _ in _PREFIXES) + ") in the body"
