"""Bodies in the format of each engine's newest release, written from the engine's source (cited per test), read
by the adapters: what a release emits that an adapter missed, or read wrong, failed here first."""

from __future__ import annotations

import pytest

from keda_llm.exporter.engines import normalize
from keda_llm.exporter.model import EngineMetrics, Target

T = Target(url="http://engine/metrics")


def one(body: str, target: Target = T) -> EngineMetrics:
    result = normalize(body, target)
    assert len(result) == 1, result
    return result[0]


# --- TensorRT-LLM trtllm-serve ----------------------------------------------------------------------------------

# NVIDIA/TensorRT-LLM tensorrt_llm/metrics/collector.py at 050f80def8df236e326949c8bd9dee10fd896a83
# (`MetricsCollector`, prefix `trtllm_`, labels model_name and engine_type, `log_iteration_stats`):
# trtllm_num_requests_running is numActiveRequests, which the PyTorch executor sets to len(active_requests)
# (tensorrt_llm/_torch/pyexecutor/py_executor.py, `_get_init_iter_stats`): every request it holds, scheduled
# or not; trtllm_num_scheduled_requests is inflightBatchingStats.numScheduledRequests (context + generation
# requests of the iteration's batch, `_update_iter_stats`); trtllm_num_requests_waiting is numQueuedRequests
# (the request queue, not yet active); trtllm_num_requests_completed_total adds numCompletedRequests of every
# iteration. The gauges print as floats; the collector's counters have no `_created` series.
_LAB = '{model_name="nvidia/Llama-3.1-8B-Instruct-FP8",engine_type="trtllm"}'
TRTLLM_SERVE_NEWEST = f"""\
# HELP trtllm_num_requests_running Number of active requests
# TYPE trtllm_num_requests_running gauge
trtllm_num_requests_running{_LAB} 12.0
# HELP trtllm_num_requests_waiting Number of queued requests
# TYPE trtllm_num_requests_waiting gauge
trtllm_num_requests_waiting{_LAB} 2.0
# HELP trtllm_num_requests_completed_total Total number of completed requests across iterations
# TYPE trtllm_num_requests_completed_total counter
trtllm_num_requests_completed_total{_LAB} 340.0
# HELP trtllm_max_num_active_requests Maximum number of active requests
# TYPE trtllm_max_num_active_requests gauge
trtllm_max_num_active_requests{_LAB} 64.0
# HELP trtllm_kv_cache_utilization KV cache utilization
# TYPE trtllm_kv_cache_utilization gauge
trtllm_kv_cache_utilization{_LAB} 0.96
# HELP trtllm_kv_cache_max_blocks Maximum number of KV cache blocks
# TYPE trtllm_kv_cache_max_blocks gauge
trtllm_kv_cache_max_blocks{_LAB} 4096.0
# HELP trtllm_kv_cache_tokens_per_block Number of tokens per KV cache block
# TYPE trtllm_kv_cache_tokens_per_block gauge
trtllm_kv_cache_tokens_per_block{_LAB} 32.0
# HELP trtllm_num_context_requests Number of context (prefill) requests
# TYPE trtllm_num_context_requests gauge
trtllm_num_context_requests{_LAB} 1.0
# HELP trtllm_num_generation_requests Number of generation (decode) requests
# TYPE trtllm_num_generation_requests gauge
trtllm_num_generation_requests{_LAB} 8.0
# HELP trtllm_num_paused_requests Number of paused requests
# TYPE trtllm_num_paused_requests gauge
trtllm_num_paused_requests{_LAB} 0.0
# HELP trtllm_num_scheduled_requests Number of scheduled requests
# TYPE trtllm_num_scheduled_requests gauge
trtllm_num_scheduled_requests{_LAB} 9.0
"""


def test_trtllm_serve_newest_runs_the_scheduled_and_the_rest_of_the_active_wait() -> None:
    """12 active, 9 of them scheduled, 2 queued: the batch is 9, and 3 + 2 wait (the KV cache is 96% used,
    the 3 left out wait for space). Before, running was 12 and waiting 2."""
    got = one(TRTLLM_SERVE_NEWEST)
    assert (got.requests_running, got.requests_waiting, got.requests_max_running) == (9, 5, 64)
    # Dynamo's TensorRT-LLM worker passes the same series through under `trtllm:`
    dynamo = one(TRTLLM_SERVE_NEWEST.replace("trtllm_", "trtllm:"))
    assert (dynamo.requests_running, dynamo.requests_waiting) == (9, 5)


@pytest.mark.parametrize(("scheduled", "expected"), [
    (None, (12, 2)),  # a collector without trtllm_num_scheduled_requests: all active run
    (12, (12, 2)),
    (14, (14, 2)),  # scheduled counts the requests that finished in the iteration: nothing extra waits
])
def test_trtllm_serve_scheduled_count_where_present(scheduled: int | None, expected: tuple[float, float]) -> None:
    body = "\n".join(line for line in TRTLLM_SERVE_NEWEST.splitlines() if "scheduled" not in line) + "\n"
    if scheduled is not None:
        body += f"trtllm_num_scheduled_requests{_LAB} {scheduled}.0\n"
    got = one(body)
    assert (got.requests_running, got.requests_waiting) == expected


def test_trtllm_serve_newest_finished_requests_from_the_iteration_stats() -> None:
    """Without `return_perf_metrics` there is no trtllm_request_success_total, but the iteration stats count
    the finished requests (trtllm_num_requests_completed_total); where both are written the per-request
    counter is read."""
    assert one(TRTLLM_SERVE_NEWEST).requests_finished_total == 340
    success = (f'trtllm_request_success_total{_LAB[:-1]},finished_reason="stop"}} 300.0\n'
               f'trtllm_request_success_total{_LAB[:-1]},finished_reason="length"}} 38.0\n')
    assert one(TRTLLM_SERVE_NEWEST + success).requests_finished_total == 338


# --- SGLang -----------------------------------------------------------------------------------------------------

# sgl-project/sglang python/sglang/srt/observability/metrics_collector.py at
# 016d8605e45876180312e29d6988e1de06562472: the tokenizer's token and request counters and its TTFT histogram
# carry `is_streaming` ("true"/"false", `observe_one_finished_request`, `observe_time_to_first_token`) beside
# model_name and engine_type; cached tokens are split by `cache_source` (device, host, storage_<backend>).
# Each `is_streaming` value is a disjoint part of the requests.
_TOK = 'model_name="qwen",engine_type="unified"'
SGLANG_NEWEST = f"""\
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{{{_TOK},is_streaming="true"}} 7000.0
sglang:prompt_tokens_total{{{_TOK},is_streaming="false"}} 3000.0
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{{{_TOK},is_streaming="true"}} 900.0
sglang:generation_tokens_total{{{_TOK},is_streaming="false"}} 100.0
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{{{_TOK},is_streaming="true"}} 30.0
sglang:num_requests_total{{{_TOK},is_streaming="false"}} 10.0
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{{{_TOK},cache_source="device"}} 2500.0
sglang:cached_tokens_total{{{_TOK},cache_source="host"}} 500.0
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{{{_TOK},is_streaming="true",le="0.1"}} 20.0
sglang:time_to_first_token_seconds_bucket{{{_TOK},is_streaming="true",le="+Inf"}} 30.0
sglang:time_to_first_token_seconds_count{{{_TOK},is_streaming="true"}} 30.0
sglang:time_to_first_token_seconds_sum{{{_TOK},is_streaming="true"}} 4.0
sglang:time_to_first_token_seconds_bucket{{{_TOK},is_streaming="false",le="0.1"}} 5.0
sglang:time_to_first_token_seconds_bucket{{{_TOK},is_streaming="false",le="+Inf"}} 10.0
sglang:time_to_first_token_seconds_count{{{_TOK},is_streaming="false"}} 10.0
sglang:time_to_first_token_seconds_sum{{{_TOK},is_streaming="false"}} 2.0
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{{_TOK},tp_rank="0",pp_rank="0",moe_ep_rank="0"}} 6.0
"""


def test_sglang_newest_is_streaming_parts_are_summed() -> None:
    got = one(SGLANG_NEWEST)
    assert (got.prompt_tokens_total, got.generation_tokens_total, got.requests_finished_total) == (10000, 1000, 40)
    assert (got.prefix_cache_queried_tokens_total, got.prefix_cache_hit_tokens_total) == (10000, 3000)
    ttft = got.time_to_first_token_seconds
    assert ttft is not None
    assert (ttft.buckets, ttft.count, ttft.sum) == (((0.1, 25.0), (float("inf"), 40.0)), 40, 6.0)
    assert got.requests_running == 6
