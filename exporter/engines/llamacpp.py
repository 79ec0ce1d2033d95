"""llama.cpp `llama-server --metrics` (`llamacpp:*`; engine-metrics.md section 5).

No labels at all, so the model comes from the target, else "unknown". Only counters and the two request
gauges are read: the throughput gauges (`*_tokens_seconds`) are averages over a bucket that some builds
reset on every scrape, so rates must come from the counters. The KV metrics were removed in 2025
(ggml-org/llama.cpp PR #13660); older builds' `llamacpp:kv_cache_usage_ratio` is read where present, and
no capacity is reported (`kv_cache_tokens` is tokens in use, not a size). The slot count is in
`GET /props`, so the batch limit comes from the target.

`llamacpp:prompt_tokens_total` excludes prompt tokens reused from the cache; where the build also has
`llamacpp:prompt_tokens_cached_total`, our prompt counter is their sum (all prompt tokens, as vLLM and
SGLang count them), the prefix-cache lookups are that same sum and the hits are the cached tokens.
"""

from __future__ import annotations

from keda_llm.exporter.engines.ranks import by_name, pick, plus, total
from keda_llm.exporter.model import EngineMetrics, Sample, Target

NAME = "llamacpp"
PREFIX = "llamacpp:"
PREFIXES = (PREFIX,)

RUNNING = ("llamacpp:requests_processing",)
WAITING = ("llamacpp:requests_deferred",)
KV_USAGE = ("llamacpp:kv_cache_usage_ratio",)
PROMPT = ("llamacpp:prompt_tokens_total",)
PROMPT_CACHED = ("llamacpp:prompt_tokens_cached_total",)
GENERATION = ("llamacpp:tokens_predicted_total",)

WANTED = frozenset(RUNNING + WAITING + KV_USAGE + PROMPT + PROMPT_CACHED + GENERATION)


def normalize(samples: list[Sample], target: Target) -> list[EngineMetrics]:
    series = by_name(samples)
    cached = total(pick(series, *PROMPT_CACHED))
    prompt = plus(total(pick(series, *PROMPT)), cached)
    return [EngineMetrics(
        engine=NAME,
        model=target.model or "unknown",
        role=target.role or "unified",
        requests_running=total(pick(series, *RUNNING)),
        requests_waiting=total(pick(series, *WAITING)),
        requests_max_running=target.max_running,
        kv_cache_usage_ratio=total(pick(series, *KV_USAGE)),
        prompt_tokens_total=prompt,
        generation_tokens_total=total(pick(series, *GENERATION)),
        prefix_cache_queried_tokens_total=prompt if cached is not None else None,
        prefix_cache_hit_tokens_total=cached,
    )]
