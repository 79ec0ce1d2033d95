"""TensorRT-LLM: served by Triton Inference Server with the TensorRT-LLM backend (`nv_trt_llm_*`;
engine-metrics.md section 4.1), or by its own `trtllm-serve` (`trtllm_*`, or 1.1.x's bare names with the
collector's labels: trtllm_serve.py). A body is one or the other: Triton's where it has `nv_trt_llm_*` and no
`trtllm_*` series.

Each family is a gauge with a category label (custom_metrics_reporter.cc in NVIDIA/TensorRT-LLM
triton_backend): `nv_trt_llm_request_metrics{request_type=active|max|waiting|...}` and
`nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=max|used|free|tokens_per|fraction|...}`.
Running is `scheduled` and waiting `waiting` (or active - scheduled): `active` holds both (_running_waiting).
Capacity = `max` blocks x `tokens_per`; the usage is `fraction`, or `used` / `max` on builds without it
(inflight_batcher_llm/src/custom_metrics_reporter/custom_metrics_reporter.cc in
triton-inference-server/tensorrtllm_backend, before `fraction` was added, reports `max`, `free`, `used`
and `tokens_per` only). Token counts are the sums of the `nv_llm_input_token_len` /
`nv_llm_output_token_len` histograms (one observation per finished request), whose count is the
finished requests. No TTFT, ITL, prefix-cache or preemption series.

The model label is Triton's model name (usually `tensorrt_llm`, the repository entry, not the LLM): the
target's model replaces it when exactly one Triton model reports TRT-LLM metrics. Model `version`s are
disjoint parts (summed; the KV ratio weighted by each version's capacity).
"""

from __future__ import annotations

from keda_llm.exporter.engines import trtllm_serve
from keda_llm.exporter.engines.ranks import GroupKey, group, per_part, total, weighted_ratio, where
from keda_llm.exporter.model import EngineMetrics, Sample, Target

NAME = "trtllm"
TRITON_PREFIX = "nv_trt_llm_"
PREFIXES = (TRITON_PREFIX, trtllm_serve.PREFIX, trtllm_serve.DYNAMO_PREFIX)
#: A sample that is trtllm-serve's though it carries none of the prefixes (TensorRT-LLM <= 1.1.x).
unprefixed = trtllm_serve.unprefixed

REQUESTS = "nv_trt_llm_request_metrics"
KV_BLOCKS = "nv_trt_llm_kv_cache_block_metrics"
INPUT_TOKENS = "nv_llm_input_token_len"
OUTPUT_TOKENS = "nv_llm_output_token_len"

WANTED = frozenset({REQUESTS, KV_BLOCKS, INPUT_TOKENS + "_sum", OUTPUT_TOKENS + "_sum",
                    OUTPUT_TOKENS + "_count"}) | trtllm_serve.WANTED


def idle(target: Target) -> list[EngineMetrics]:
    """A forced trtllm target whose body holds no load series: trtllm-serve before its first request. Its
    collector's series all carry labels, and a labelled series is written from its first observation
    (tensorrt_llm/metrics/collector.py; the registry is multiprocess, so no runtime series either): the body is
    empty, or holds only the startup `*_config_info` series of newer collectors. Its finished count is then 0,
    true even while a first request is in flight; the rest stays missing: <= 1.1.x never writes running,
    waiting or token counters (a 0 now would turn to missing later), and an empty body cannot tell idle from a
    first request under way."""
    return [EngineMetrics(engine=NAME, model=target.model or "unknown", role=target.role or "unified",
                          requests_max_running=target.max_running, requests_finished_total=0.0)]


def normalize(samples: list[Sample], target: Target) -> list[EngineMetrics]:
    if trtllm_serve.ours(samples) or not any(s.name.startswith(TRITON_PREFIX) for s in samples):
        return trtllm_serve.normalize([s for s in samples if s.name in trtllm_serve.WANTED], target, NAME)
    return _triton(samples, target)


def _triton(samples: list[Sample], target: Target) -> list[EngineMetrics]:
    role = target.role or "unified"

    def key(s: Sample) -> GroupKey:
        return s.labels.get("model", ""), role

    # Triton models with only the token histograms (a BLS or ensemble wrapper) are not engines.
    groups = {k: v for k, v in group(samples, key).items() if REQUESTS in v or KV_BLOCKS in v}
    rename = target.model if target.model and len(groups) == 1 else None
    out = []
    for (model, role_), series in groups.items():
        requests = series.get(REQUESTS, [])
        blocks = series.get(KV_BLOCKS, [])
        max_blocks = per_part(where(blocks, "kv_cache_block_type", "max"), "version")
        tokens_per = per_part(where(blocks, "kv_cache_block_type", "tokens_per"), "version")
        capacities = {v: n * tokens_per[v] for v, n in max_blocks.items() if v in tokens_per}
        fractions = per_part(where(blocks, "kv_cache_block_type", "fraction"), "version")
        if not fractions:  # builds before `fraction` (used / max, as later builds compute it)
            used = per_part(where(blocks, "kv_cache_block_type", "used"), "version")
            fractions = {v: u / max_blocks[v] for v, u in used.items() if max_blocks.get(v, 0.0) > 0.0}
        ratio, capacity = weighted_ratio(fractions, capacities)
        max_running = total(where(requests, "request_type", "max"))
        running, waiting = _running_waiting(requests)
        out.append(EngineMetrics(
            engine=NAME,
            model=rename or model or target.model or "unknown",
            role=role_,
            requests_running=running,
            requests_waiting=waiting,
            requests_max_running=max_running if max_running is not None else target.max_running,
            kv_cache_usage_ratio=ratio,
            kv_cache_capacity_tokens=capacity,
            prompt_tokens_total=total(series.get(INPUT_TOKENS + "_sum", [])),
            generation_tokens_total=total(series.get(OUTPUT_TOKENS + "_sum", [])),
            requests_finished_total=total(series.get(OUTPUT_TOKENS + "_count", [])),
        ))
    return out


def _running_waiting(requests: list[Sample]) -> tuple[float | None, float | None]:
    """(in the batch, waiting) from the request gauges. `active` is every request the executor holds, the
    waiting ones included: the backend reports waiting = active - scheduled (tensorrtllm_backend
    inflight_batcher_llm/src/model_instance_state.cc, "Waiting Requests"), so `active` as running counted
    each waiting request twice. Running is `scheduled` (trtllm_serve.in_batch); builds before the `waiting`
    label (v0.7-v0.17 report active, max, scheduled, context) give waiting as active - scheduled, and without
    `scheduled` it is active - waiting."""
    active = total(where(requests, "request_type", "active"))
    scheduled = total(where(requests, "request_type", "scheduled"))
    waiting = total(where(requests, "request_type", "waiting"))
    if scheduled is None and active is not None and waiting is not None:
        scheduled = max(active - waiting, 0.0)
    running, unscheduled = trtllm_serve.in_batch(active, scheduled)
    return running, unscheduled if waiting is None else waiting
