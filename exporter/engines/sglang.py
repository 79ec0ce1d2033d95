"""SGLang (current names and the ~v0.3 ones; engine-metrics.md section 2).

Scheduler series carry `model_name`, `engine_type` (unified|prefill|decode -> our `role`), `tp_rank`,
`pp_rank`, `moe_ep_rank` and, with DP attention, `dp_rank`: tensor/pipeline/expert ranks are copies of one
scheduler's state (largest taken), `dp_rank`s are disjoint (summed). Tokenizer series (token counters,
TTFT, ITL) carry `model_name` only; they belong to the body's one `engine_type` (SGLang runs one
disaggregation mode per server), or to the target's role where none is seen.

Counters are incremented per finished request in `observe_one_finished_request`
(sgl-project/sglang python/sglang/srt/metrics/collector.py): `prompt_tokens_total` includes cached
tokens, so it is the number of prompt tokens looked up in the radix cache, and `cached_tokens_total`
(split by disjoint `cache_source`) the hits. Retractions are SGLang's preemptions for lack of KV space.

Disaggregated (`--disaggregation-mode prefill|decode`), a request also waits outside `num_queue_reqs`:
on a prefill server in the bootstrap (prealloc) queue until its decode peer is found, on a decode server
in the prealloc queue (for KV space) and the transfer queue (for its KV to arrive). Those are demand the
pool has not yet taken in, so they add to `requests_waiting` (the pools' split reads it: scaler/pools.py);
the prefill inflight queue (computed, KV being sent) is not waiting for anything of the prefill server.

With `--enable-priority-scheduling` the queue gauges (`QueueCount`: running, queued, the disaggregation
queues) carry a `priority` label: the total under `priority=""` and a breakdown under `priority="0"`,
`"1"`, ... (`_log_gauge_queue_count` in python/sglang/srt/observability/metrics_collector.py); the
breakdown is dropped where its total is present. The tokenizer's series (token counters, finished
requests, TTFT/ITL) carry `priority` too, but as each request's own: `""` is the requests that named
none (the tokenizer manager's default label, replaced by the request's priority), disjoint from the
others, so there the parts are summed. The prefill server's bootstrap queue was
`num_prefill_prealloc_queue_reqs` in earlier builds and is `num_prefill_bootstrap_queue_reqs` now (same
file). Builds of about v0.3 name the model in a `name` label (docs/references/production_metrics.md then)
rather than `model_name`.

LoRA (engine-metrics.md section 2.3; the scheduler's LoRA stats update in
python/sglang/srt/observability/scheduler_metrics_mixin.py): `sglang:lora_pool_slots_used` counts the
distinct adapters of the running batch, `sglang:lora_pool_slots_total` the adapter slots
(`--max-loras-per-batch`); SGLang reports no waiting adapters.
"""

from __future__ import annotations

from keda_llm.exporter.engines.ranks import (
    GroupKey,
    first_histogram,
    group,
    histogram_names,
    per_part,
    pick,
    plus,
    total,
    weighted_ratio,
    without_breakdown,
)
from keda_llm.exporter.model import EngineMetrics, Sample, Target

NAME = "sglang"
PREFIX = "sglang:"
PREFIXES = (PREFIX,)

RUNNING = ("sglang:num_running_reqs", "sglang:num_requests_running")
WAITING = ("sglang:num_queue_reqs", "sglang:num_requests_waiting")
GRAMMAR_WAITING = ("sglang:num_grammar_queue_reqs",)  # waiting for grammar compilation, not in the queue
# disaggregated serving: requests waiting outside num_queue_reqs (engine-metrics.md, SGLang scheduler gauges)
DISAGG_WAITING = (("sglang:num_prefill_bootstrap_queue_reqs", "sglang:num_prefill_prealloc_queue_reqs"),
                  ("sglang:num_decode_prealloc_queue_reqs",), ("sglang:num_decode_transfer_queue_reqs",))
MAX_RUNNING = ("sglang:max_running_requests",)  # old builds only
KV_USAGE = ("sglang:token_usage",)
KV_CAPACITY = ("sglang:max_total_num_tokens",)
PROMPT = ("sglang:prompt_tokens_total",)
GENERATION = ("sglang:generation_tokens_total",)
FINISHED = ("sglang:num_requests_total",)
CACHED = ("sglang:cached_tokens_total",)
PREEMPTIONS = ("sglang:num_retracted_requests_total",)
LORA_USED = ("sglang:lora_pool_slots_used",)
LORA_TOTAL = ("sglang:lora_pool_slots_total",)
TTFT = ("sglang:time_to_first_token_seconds",)
ITL = ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds")

#: The scheduler's queue gauges (QueueCount): with priority scheduling, a total under `priority=""` and a
#: breakdown beside it. Every other series' `priority` values are disjoint parts (the tokenizer's counters and
#: histograms: `""` there is the requests that named no priority), summed.
QUEUE_GAUGES = frozenset(RUNNING + WAITING + GRAMMAR_WAITING + sum(DISAGG_WAITING, ()))

WANTED = frozenset(
    RUNNING + WAITING + GRAMMAR_WAITING + sum(DISAGG_WAITING, ()) + MAX_RUNNING + KV_USAGE + KV_CAPACITY + PROMPT
    + GENERATION + FINISHED + CACHED + PREEMPTIONS + LORA_USED + LORA_TOTAL + histogram_names(*TTFT, *ITL)
)


def normalize(samples: list[Sample], target: Target) -> list[EngineMetrics]:
    """One EngineMetrics per (`model_name`, `engine_type`)."""
    samples = without_breakdown(samples, "priority", QUEUE_GAUGES)
    roles = {s.labels["engine_type"] for s in samples if "engine_type" in s.labels}
    default_role = roles.pop() if len(roles) == 1 else (target.role or "unified")

    def key(s: Sample) -> GroupKey:
        model = s.labels.get("model_name") or s.labels.get("name") or target.model or "unknown"
        return model, s.labels.get("engine_type") or default_role

    out = []
    for (model, role), series in group(samples, key).items():
        ratio, capacity = weighted_ratio(per_part(pick(series, *KV_USAGE), "dp_rank"),
                                         per_part(pick(series, *KV_CAPACITY), "dp_rank"))
        # each disaggregation queue is its own gauge, under its current name or an older one
        waiting = plus(total(pick(series, *WAITING)), total(pick(series, *GRAMMAR_WAITING)),
                       *(total(pick(series, *names)) for names in DISAGG_WAITING))
        prompt = total(pick(series, *PROMPT))
        cached = total(pick(series, *CACHED))
        max_running = total(pick(series, *MAX_RUNNING))
        lora_total = total(pick(series, *LORA_TOTAL))
        out.append(EngineMetrics(
            engine=NAME,
            model=model,
            role=role,
            requests_running=total(pick(series, *RUNNING)),
            requests_waiting=waiting,
            requests_max_running=max_running if max_running is not None else target.max_running,
            kv_cache_usage_ratio=ratio,
            kv_cache_capacity_tokens=capacity,
            prompt_tokens_total=prompt,
            generation_tokens_total=total(pick(series, *GENERATION)),
            requests_finished_total=total(pick(series, *FINISHED)),
            prefix_cache_queried_tokens_total=prompt if cached is not None else None,
            prefix_cache_hit_tokens_total=cached,
            preemptions_total=total(pick(series, *PREEMPTIONS)),
            time_to_first_token_seconds=first_histogram(series, TTFT),
            inter_token_latency_seconds=first_histogram(series, ITL),
            lora_adapters_running=total(pick(series, *LORA_USED)),
            lora_adapters_max=lora_total if lora_total else None,
        ))
    return out
