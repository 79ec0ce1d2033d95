"""vLLM (V1 engine; also the names older builds still running in clusters expose).

Facts (engine-metrics.md section 1, vLLM `vllm/v1/metrics/loggers.py`): every family carries
`model_name` and the data-parallel rank `engine`; ranks are summed. `max_num_seqs` is not exported, so
the batch limit comes from the target's config. The KV capacity of a rank is read from the labels of
`vllm:cache_config_info{engine=...}` by name: `kv_cache_size_tokens` where the build has it (right for
hybrid models), else `num_gpu_blocks` x `block_size`. The body carries no vLLM version.

With data parallelism the two labels mean different things. The front end writes its one CacheConfig
under every `engine` label (`log_metrics_info`, vllm/v1/metrics/loggers.py), and at startup it adds each
engine's `num_gpu_blocks` into that config ("Sum values from all engines in DP case": the READY
handshake in vllm/v1/engine/utils.py, later `_apply_ready_response` in core_client.py), while it keeps
`kv_cache_size_tokens` as one engine's ("do not sum across DP"). So `kv_cache_size_tokens` is each
engine's capacity, and `num_gpu_blocks` x `block_size` is the capacity of all the body's engines
together, shared equally among them.

Served by Triton's vLLM backend (triton-inference-server/vllm_backend, src/utils/metrics.py and
src/model.py), the same `vllm:` names carry Triton's `model` and `version` labels instead of
`model_name`: the model is read from `model` there. That backend's main branch (src/utils/metrics.py,
2024-08 to 2025-12) exports vLLM's token counters and latency histograms only: no running, waiting or KV
gauges, so those signals are missing for it, never 0 (a build that adds them under vLLM's names is read
as vLLM's own).

LoRA (vLLM `vllm/v1/metrics/loggers.py`, `PrometheusStatLogger`: the "LoRA metrics" gauge and its update
at the end of `record`): `vllm:lora_requests_info{max_lora, running_lora_adapters,
waiting_lora_adapters}` is set to the wall-clock time of each update, under a label set that names the
adapters comma-joined, and a label set once used stays in the body. So the newest series (largest
value) is the current one. It carries no `model_name` (vLLM refuses LoRA with data parallelism), so it
belongs to every model of the body (one).

The vLLM production-stack router (vllm-project/production-stack, src/vllm_router/services/metrics_service/
__init__.py) re-exports its backends' stats under vLLM's names, one series per backend in a `server` label
and no `model_name` (`vllm:num_requests_running{server=...}`), next to its own `vllm:current_qps` and
`vllm:healthy_pods_total`. Read as an engine it would be one replica carrying the whole pool's load: such a
body is refused (`pool_level`), as a Dynamo frontend's is.
"""

from __future__ import annotations

from keda_llm.exporter.engines.ranks import (
    GroupKey,
    finite,
    first_histogram,
    group,
    histogram_names,
    per_part,
    pick,
    plus,
    total,
    weighted_ratio,
)
from keda_llm.exporter.model import EngineMetrics, Sample, Target

NAME = "vllm"
PREFIX = "vllm:"
PREFIXES = (PREFIX,)

RUNNING = ("vllm:num_requests_running",)
WAITING = ("vllm:num_requests_waiting",)
# V0 (to 0.10): requests preempted to CPU, waiting to be swapped back in; in neither
# running nor waiting (vllm/engine/metrics.py "Number of requests swapped to CPU"), so they add to waiting
SWAPPED = ("vllm:num_requests_swapped",)
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # renamed in 0.9, old gone in 0.12
CACHE_CONFIG = "vllm:cache_config_info"
LORA_INFO = "vllm:lora_requests_info"
PROMPT = ("vllm:prompt_tokens_total",)
GENERATION = ("vllm:generation_tokens_total",)
FINISHED = ("vllm:request_success_total",)  # summed over finished_reason
PREFIX_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
PREFIX_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
PREEMPTIONS = ("vllm:num_preemptions_total",)
TTFT = ("vllm:time_to_first_token_seconds",)
ITL = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")  # renamed in 0.11

#: Series only the production-stack router writes (module docstring): read to refuse its body.
ROUTER_ONLY = ("vllm:current_qps", "vllm:healthy_pods_total")

WANTED = frozenset(
    RUNNING + WAITING + SWAPPED + KV_USAGE + (CACHE_CONFIG, LORA_INFO) + PROMPT + GENERATION + FINISHED + PREFIX_QUERIES
    + PREFIX_HITS + PREEMPTIONS + histogram_names(*TTFT, *ITL) + ROUTER_ONLY
)

ROUTER = ("a vLLM production-stack router's metrics (vllm:* per backend `server`, vllm:current_qps, "
          "vllm:healthy_pods_total) count the whole pool: scrape the vLLM engine pods behind it, not the router")


def pool_level(samples: list[Sample]) -> str | None:
    """Why the body is a router's, not one replica's (the module docstring); None for an engine's."""
    for s in samples:
        if s.name in ROUTER_ONLY or ("server" in s.labels and "model_name" not in s.labels):
            return ROUTER
    return None


def normalize(samples: list[Sample], target: Target) -> list[EngineMetrics]:
    """One EngineMetrics per `model_name`, summed over the data-parallel `engine` ranks."""
    capacities = _capacities([s for s in samples if s.name == CACHE_CONFIG])
    lora = lora_adapters([s for s in samples if s.name == LORA_INFO])
    role = target.role or "unified"
    info = (CACHE_CONFIG, LORA_INFO, *ROUTER_ONLY)

    def key(s: Sample) -> GroupKey:
        return s.labels.get("model_name") or s.labels.get("model") or target.model or "unknown", role

    out = []
    for (model, role_), series in group((s for s in samples if s.name not in info), key).items():
        ratio, capacity = weighted_ratio(per_part(pick(series, *KV_USAGE), "engine"), capacities)
        out.append(EngineMetrics(
            engine=NAME,
            model=model,
            role=role_,
            requests_running=total(pick(series, *RUNNING)),
            requests_waiting=plus(total(pick(series, *WAITING)), total(pick(series, *SWAPPED))),
            requests_max_running=target.max_running,
            kv_cache_usage_ratio=ratio,
            kv_cache_capacity_tokens=capacity,
            prompt_tokens_total=total(pick(series, *PROMPT)),
            generation_tokens_total=total(pick(series, *GENERATION)),
            requests_finished_total=total(pick(series, *FINISHED)),
            prefix_cache_queried_tokens_total=total(pick(series, *PREFIX_QUERIES)),
            prefix_cache_hit_tokens_total=total(pick(series, *PREFIX_HITS)),
            preemptions_total=total(pick(series, *PREEMPTIONS)),
            time_to_first_token_seconds=first_histogram(series, TTFT),
            inter_token_latency_seconds=first_histogram(series, ITL),
            lora_adapters_running=lora[0],
            lora_adapters_waiting=lora[1],
            lora_adapters_max=lora[2],
        ))
    return out


def lora_adapters(infos: list[Sample]) -> tuple[float | None, float | None, float | None]:
    """(running, waiting, max) adapters from `vllm:lora_requests_info`: the newest series' labels.

    running: distinct adapter names in `running_lora_adapters`; waiting: distinct names in
    `waiting_lora_adapters` that are not running (those need a free slot); max: `max_lora`. All None
    without the series (LoRA off). A `max_lora` that is not a positive number leaves max None.
    """
    newest = max(infos, key=lambda s: finite(s), default=None)
    if newest is None:
        return None, None, None
    running = _names(newest.labels.get("running_lora_adapters", ""))
    waiting = _names(newest.labels.get("waiting_lora_adapters", "")) - running
    slots = _number(newest.labels.get("max_lora"))
    return float(len(running)), float(len(waiting)), (slots if slots is not None and slots > 0 else None)


def _names(joined: str) -> set[str]:
    return {name.strip() for name in joined.split(",") if name.strip()}


def _capacities(infos: list[Sample]) -> dict[str, float]:
    """KV capacity in tokens per `engine` rank, from the cache config labels; ranks lacking it are left out.

    `kv_cache_size_tokens` is the rank's own; `num_gpu_blocks` x `block_size` is the front end's sum over
    all its ranks (module docstring), so each rank gets an equal share of it."""
    out: dict[str, float] = {}
    summed: dict[str, float] = {}
    for s in infos:
        engine = s.labels.get("engine", "")
        tokens = _number(s.labels.get("kv_cache_size_tokens"))
        if tokens is not None and tokens > 0:
            out[engine] = tokens
            continue
        blocks = _number(s.labels.get("num_gpu_blocks"))
        size = _number(s.labels.get("block_size"))
        if blocks is not None and size is not None and blocks * size > 0:
            summed[engine] = blocks * size
    if summed:
        share = max(summed.values()) / len({s.labels.get("engine", "") for s in infos})
        out.update((engine, share) for engine in summed if engine not in out)
    return out


def _number(text: str | None) -> float | None:
    """A config label as a number; None for absent, "None" (not yet profiled) or garbage."""
    if not text:
        return None
    try:
        v = float(text)
    except ValueError:
        return None
    return v if v - v == 0.0 else None
