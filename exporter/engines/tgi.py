"""Hugging Face TGI (`tgi_*`, text-generation-inference router; engine-metrics.md section 3).

No model label (one model per server): the model comes from the target, else "unknown". Counters are
exposed without `_total` (Rust `metrics-exporter-prometheus`); both spellings are read. TGI exports no
TTFT, no token counters and no KV usage; what it has:
- KV: `tgi_batch_current_max_tokens` (tokens reserved by the running batch) over
  `tgi_batch_max_total_tokens` (the token budget, set after warmup) -- a reservation-based upper bound.
- tokens: the sums of the `tgi_request_input_length` / `tgi_request_generated_tokens` histograms.
- ITL: `tgi_request_mean_time_per_token_duration`, one observation per request (its mean), not per token.
The batch limit (`max_concurrent_requests`) is only in `GET /info`, so it comes from the target.

A gauge is first written when it is first set (`metrics-exporter-prometheus`): a fresh server's body has
`tgi_batch_max_total_tokens` (set at warmup) and no queue or batch sample until its first request
(backends/v3/src/queue.rs, backend.rs). While no request has been counted (`tgi_request_count` absent or
0), a missing queue, batch or reservation gauge is therefore 0; once requests were counted a missing gauge
stays missing (a backend that does not write it: the trtllm, llamacpp and neuron backends write none).
Before v2.3.1 (PR #2595, which added `tgi_batch_max_total_tokens` at warmup) nothing is written before the
first request: an idle server's body is empty. Read with the engine forced to tgi, that body is such an idle
server (`idle`); detected, an empty body names no engine.
"""

from __future__ import annotations

from keda_llm.exporter.engines.ranks import by_name, first_histogram, histogram_names, pick, total
from keda_llm.exporter.model import EngineMetrics, Sample, Target

NAME = "tgi"
PREFIX = "tgi_"
PREFIXES = (PREFIX,)

RUNNING = ("tgi_batch_current_size",)
WAITING = ("tgi_queue_size",)
KV_RESERVED = ("tgi_batch_current_max_tokens",)
KV_CAPACITY = ("tgi_batch_max_total_tokens",)
PROMPT = ("tgi_request_input_length_sum",)
GENERATION = ("tgi_request_generated_tokens_sum",)
FINISHED = ("tgi_request_success", "tgi_request_success_total")
ARRIVED = ("tgi_request_count", "tgi_request_count_total")  # every request, counted at arrival
ITL = ("tgi_request_mean_time_per_token_duration",)

WANTED = frozenset(
    RUNNING + WAITING + KV_RESERVED + KV_CAPACITY + PROMPT + GENERATION + FINISHED + ARRIVED
    + histogram_names(*ITL)
)


def idle(target: Target) -> list[EngineMetrics]:
    """The signals of a server whose body holds no `tgi_*` sample: nothing requested yet, so nothing waits or runs."""
    return normalize([], target)


def normalize(samples: list[Sample], target: Target) -> list[EngineMetrics]:
    series = by_name(samples)
    fresh = not total(pick(series, *ARRIVED))  # no request yet: the gauges were never set, so they are 0

    def gauge(names: tuple[str, ...]) -> float | None:
        value = total(pick(series, *names))
        return 0.0 if value is None and fresh else value

    reserved = gauge(KV_RESERVED)
    capacity = total(pick(series, *KV_CAPACITY))
    if capacity is not None and capacity <= 0:
        capacity = None  # 0 until warmup has sized the batch
    return [EngineMetrics(
        engine=NAME,
        model=target.model or "unknown",
        role=target.role or "unified",
        requests_running=gauge(RUNNING),
        requests_waiting=gauge(WAITING),
        requests_max_running=target.max_running,
        kv_cache_usage_ratio=reserved / capacity if reserved is not None and capacity else None,
        kv_cache_capacity_tokens=capacity,
        prompt_tokens_total=total(pick(series, *PROMPT)),
        generation_tokens_total=total(pick(series, *GENERATION)),
        requests_finished_total=total(pick(series, *FINISHED)),
        inter_token_latency_seconds=first_histogram(series, ITL),
    )]
