"""TensorRT-LLM's own OpenAI server, `trtllm-serve` (`trtllm_*` at its /prometheus/metrics).

Facts (NVIDIA/TensorRT-LLM tensorrt_llm/metrics/collector.py, `MetricsCollector`): every series carries the
collector's labels (the served `model_name`, an `engine_type`); the iteration gauges come from the engine's
own stats (`enable_iter_perf_stats`): `trtllm_num_requests_running` / `_waiting` (numActiveRequests,
numQueuedRequests), `trtllm_max_num_active_requests`, `trtllm_kv_cache_utilization` (usedNumBlocks /
maxNumBlocks, a 0-1 fraction), `trtllm_kv_cache_max_blocks` x `trtllm_kv_cache_tokens_per_block` (the
capacity); the request counters and histograms come with `return_perf_metrics`. A build or a config without
a family leaves its signal missing, never 0. Series that differ in another label (a `finished_reason`) are
disjoint parts and summed. `trtllm_time_per_output_token_seconds` is observed once per finished request
(its mean time per output token, `MetricNames.TPOT`), not once per token: the ITL histogram weighs
requests, not tokens, as TGI's does.

Despite its name, `trtllm_num_requests_running` is every request the executor holds (PyExecutor's
`len(active_requests)`), the ones it did not schedule this iteration (no KV space, over the token budget)
included; newer collectors also export `trtllm_num_scheduled_requests` (inflightBatchingStats'
numScheduledRequests, context + generation requests of the batch). Where it is present the batch is the
scheduled requests and the rest of the active ones wait, as for Triton (`in_batch`). Those collectors also
count finished requests from the iteration stats (`trtllm_num_requests_completed_total`): read where the
per-request `trtllm_request_success_total` is missing (no `return_perf_metrics`).

TensorRT-LLM up to 1.1.x registers its collector's names with no prefix (tensorrt_llm/metrics/collector.py at
89fd9b74: `request_success_total`, `e2e_request_latency_seconds`, `time_to_first_token_seconds`,
`time_per_output_token_seconds`, `request_queue_time_seconds`, labels `model_name` and `engine_type`); the
`trtllm_` / `trtllm:` prefix comes from NVIDIA Dynamo's pass-through (its TensorRT-LLM metrics guide, "the
prefix is added by Dynamo") or a later collector. Those bare names are generic, so a sample under one is
trtllm-serve's only where it carries that label pair (`unprefixed`), and it is read as the prefixed name.
"""

from __future__ import annotations

from keda_llm.exporter.engines.ranks import GroupKey, first_histogram, group, histogram_names, pick, plus, total
from keda_llm.exporter.model import EngineMetrics, Sample, Target

PREFIX = "trtllm_"
#: NVIDIA Dynamo's TensorRT-LLM worker passes the collector's series through as `trtllm:<name>`
#: (`register_engine_metrics_callback(..., add_prefix="trtllm:")`, Dynamo's TensorRT-LLM metrics guide)
DYNAMO_PREFIX = "trtllm:"

# Each signal under its current name, then an earlier build's (a collector that named the executor's
# numActiveRequests `trtllm_num_active_requests` and numQueuedRequests `trtllm_server_queue_length`).
RUNNING = ("trtllm_num_requests_running", "trtllm_num_active_requests")  # every request the executor holds
SCHEDULED = ("trtllm_num_scheduled_requests",)  # the active ones in this iteration's batch
WAITING = ("trtllm_num_requests_waiting", "trtllm_server_queue_length")
MAX_RUNNING = ("trtllm_max_num_active_requests",)
KV_USAGE = ("trtllm_kv_cache_utilization",)
KV_MAX_BLOCKS = ("trtllm_kv_cache_max_blocks",)
KV_TOKENS_PER_BLOCK = ("trtllm_kv_cache_tokens_per_block",)
PROMPT = ("trtllm_prompt_tokens_total",)
GENERATION = ("trtllm_generation_tokens_total",)
FINISHED = ("trtllm_request_success_total", "trtllm_num_requests_completed_total")  # summed over finished_reason
CACHED = ("trtllm_prompt_cached_tokens_total",)  # prompt tokens served from the KV cache, within the prompt tokens
TTFT = ("trtllm_time_to_first_token_seconds",)
ITL = ("trtllm_time_per_output_token_seconds",)

#: The names read that TensorRT-LLM <= 1.1.x writes bare (module docstring); the e2e and queue-time
#: histograms are not read.
UNPREFIXED = frozenset(n.removeprefix(PREFIX) for n in FINISHED[:1] + histogram_names(*TTFT, *ITL))
#: The labels every series of that collector carries (`MetricsCollector(labels)`, openai_server.py).
COLLECTOR_LABELS = ("model_name", "engine_type")

#: `model_name` values that name no model: trtllm-serve builds its collector with
#: `MetricsCollector({"model_name": "undefined", "engine_type": "undefined"})` (tensorrt_llm/serve/
#: openai_server.py), so every series says "undefined" and the target's model must stand in.
UNNAMED = frozenset({"", "undefined"})

_NAMES = frozenset(RUNNING + SCHEDULED + WAITING + MAX_RUNNING + KV_USAGE + KV_MAX_BLOCKS + KV_TOKENS_PER_BLOCK
                   + PROMPT + GENERATION + FINISHED + CACHED + histogram_names(*TTFT, *ITL))
#: The names read, and the same under Dynamo's prefix (in place of `trtllm_`, or before it).
WANTED = (_NAMES | {DYNAMO_PREFIX + n.removeprefix(PREFIX) for n in _NAMES} | {DYNAMO_PREFIX + n for n in _NAMES}
          | UNPREFIXED)


def unprefixed(s: Sample) -> bool:
    """Whether a sample is TensorRT-LLM <= 1.1.x's bare series: one of its names with its collector's labels
    (another app's `request_success_total` lacks them)."""
    return s.name in UNPREFIXED and all(label in s.labels for label in COLLECTOR_LABELS)


def ours(samples: list[Sample]) -> bool:
    """Whether the body is trtllm-serve's (or Dynamo's pass-through of it), not Triton's."""
    return any(s.name.startswith((PREFIX, DYNAMO_PREFIX)) for s in samples)


def in_batch(active: float | None, scheduled: float | None) -> tuple[float | None, float | None]:
    """(running, held but not scheduled) from TensorRT-LLM's active count and its scheduled part: the executor
    counts as active every request it holds, the ones left out of this iteration's batch included, and those
    wait. Without a scheduled count all it holds is what it runs. The scheduled count includes the requests
    that finished in the iteration, so it can pass the active one for an iteration (nothing then waits)."""
    if scheduled is None:
        return active, None
    return scheduled, None if active is None else max(active - scheduled, 0.0)


def _prefixed(s: Sample) -> Sample:
    """The sample under its `trtllm_` name: Dynamo's `trtllm:` replaced, a bare 1.1.x name prefixed."""
    if s.name in UNPREFIXED:
        return s._replace(name=PREFIX + s.name)
    if not s.name.startswith(DYNAMO_PREFIX):
        return s
    rest = s.name.removeprefix(DYNAMO_PREFIX)
    return s._replace(name=rest if rest.startswith(PREFIX) else PREFIX + rest)


def normalize(samples: list[Sample], target: Target, engine: str) -> list[EngineMetrics]:
    """One EngineMetrics per `model_name` (the target's model where the body names none)."""
    role = target.role or "unified"
    samples = [_prefixed(s) for s in samples if s.name not in UNPREFIXED or unprefixed(s)]

    def key(s: Sample) -> GroupKey:
        named = s.labels.get("model_name")
        return (named if named not in UNNAMED else None) or target.model or "unknown", role

    out = []
    for (model, role_), series in group(samples, key).items():
        blocks, per_block = total(pick(series, *KV_MAX_BLOCKS)), total(pick(series, *KV_TOKENS_PER_BLOCK))
        capacity = blocks * per_block if blocks and per_block else None
        max_running = total(pick(series, *MAX_RUNNING))
        prompt, cached = total(pick(series, *PROMPT)), total(pick(series, *CACHED))
        running, unscheduled = in_batch(total(pick(series, *RUNNING)), total(pick(series, *SCHEDULED)))
        out.append(EngineMetrics(
            engine=engine,
            model=model,
            role=role_,
            requests_running=running,
            requests_waiting=plus(total(pick(series, *WAITING)), unscheduled),
            requests_max_running=max_running if max_running else target.max_running,
            kv_cache_usage_ratio=total(pick(series, *KV_USAGE)),
            kv_cache_capacity_tokens=capacity,
            prompt_tokens_total=prompt,
            # older collectors write the cached counter from its first hit (newer ones at 0 from the start):
            # until then no prefix-cache series, as for vLLM
            prefix_cache_queried_tokens_total=prompt if cached is not None else None,
            prefix_cache_hit_tokens_total=cached if prompt is not None else None,
            generation_tokens_total=total(pick(series, *GENERATION)),
            requests_finished_total=total(pick(series, *FINISHED)),
            time_to_first_token_seconds=first_histogram(series, TTFT),
            inter_token_latency_seconds=first_histogram(series, ITL),
        ))
    return out
