"""The llm_* metric vocabulary: the exporter's public API, defined once as data.

Dashboards, alerts and the scaler depend on these names; an engine adapter fills the fields of
`EngineMetrics` (exporter.model) and rendering maps each field to the metric named here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricType = Literal["gauge", "counter", "histogram", "info"]

ENGINES = ("vllm", "sglang", "tgi", "trtllm", "llamacpp")
ROLES = ("unified", "prefill", "decode")

#: Labels on every engine series, in this order.
ENGINE_LABELS = ("model", "engine", "role", "namespace", "pod", "node")
#: Labels on every GPU series, in this order (attribution labels are empty when unattributed).
GPU_LABELS = ("gpu", "uuid", "gpu_model", "mig_profile", "node", "namespace", "pod", "container")


@dataclass(frozen=True)
class Metric:
    name: str
    type: MetricType
    help: str
    field: str  # attribute of EngineMetrics / GpuMetrics that carries the value


ENGINE_METRICS: tuple[Metric, ...] = (
    Metric("llm_requests_running", "gauge", "Requests in the running batch (summed over ranks).", "requests_running"),
    Metric("llm_requests_waiting", "gauge", "Requests queued in the engine.", "requests_waiting"),
    Metric("llm_requests_max_running", "gauge", "The engine's batch limit (max_num_seqs, slots).",
           "requests_max_running"),
    Metric("llm_kv_cache_usage_ratio", "gauge", "KV cache in use, 0-1 (weighted by capacity over ranks).",
           "kv_cache_usage_ratio"),
    Metric("llm_kv_cache_capacity_tokens", "gauge", "KV cache size in tokens.", "kv_cache_capacity_tokens"),
    Metric("llm_prompt_tokens_total", "counter", "Prompt tokens processed.", "prompt_tokens_total"),
    Metric("llm_generation_tokens_total", "counter", "Tokens generated.", "generation_tokens_total"),
    Metric("llm_requests_finished_total", "counter", "Requests finished.", "requests_finished_total"),
    Metric("llm_prefix_cache_queried_tokens_total", "counter", "Prompt tokens looked up in the prefix cache.",
           "prefix_cache_queried_tokens_total"),
    Metric("llm_prefix_cache_hit_tokens_total", "counter", "Prompt tokens found in the prefix cache.",
           "prefix_cache_hit_tokens_total"),
    Metric("llm_preemptions_total", "counter", "Requests preempted for lack of KV space.", "preemptions_total"),
    Metric("llm_time_to_first_token_seconds", "histogram", "Time to first token, as the engine reports it.",
           "time_to_first_token_seconds"),
    Metric("llm_inter_token_latency_seconds", "histogram", "Time between output tokens, as the engine reports it.",
           "inter_token_latency_seconds"),
    Metric("llm_lora_adapters_running", "gauge", "Distinct LoRA adapters in the running batch.",
           "lora_adapters_running"),
    Metric("llm_lora_adapters_waiting", "gauge", "Distinct LoRA adapters of waiting requests that are not running.",
           "lora_adapters_waiting"),
    Metric("llm_lora_adapters_max", "gauge", "LoRA adapter slots in the batch (vLLM max_loras).",
           "lora_adapters_max"),
)

ENGINE_UP = "llm_engine_up"
ENGINE_LAST_SUCCESS = "llm_engine_last_success_timestamp_seconds"
ENGINE_INFO = "llm_engine_info"
ENGINE_STARTUP = "llm_engine_startup_seconds"

GPU_METRICS: tuple[Metric, ...] = (
    Metric("llm_gpu_memory_used_bytes", "gauge", "GPU memory in use.", "memory_used_bytes"),
    Metric("llm_gpu_memory_total_bytes", "gauge", "GPU memory in all.", "memory_total_bytes"),
    Metric("llm_gpu_utilization_ratio", "gauge", "Fraction of time a kernel ran over the last sample period.",
           "utilization_ratio"),
    Metric("llm_gpu_power_watts", "gauge", "Power draw.", "power_watts"),
    Metric("llm_gpu_power_limit_watts", "gauge", "Enforced power limit.", "power_limit_watts"),
    Metric("llm_gpu_energy_joules_total", "counter", "Energy consumed since the driver loaded.",
           "energy_joules_total"),
    Metric("llm_gpu_temperature_celsius", "gauge", "GPU die temperature.", "temperature_celsius"),
    Metric("llm_gpu_sm_clock_hertz", "gauge", "SM clock.", "sm_clock_hertz"),
    Metric("llm_gpu_throttled", "gauge", "1 if the clocks are held down by power, thermal or other limits.",
           "throttled"),
)
GPU_UP = "llm_gpu_up"
#: Per-GPU: the counters of NVML faults and the last critical XID (same GPU labels).
GPU_FAULT_METRICS: tuple[Metric, ...] = (
    Metric("llm_gpu_ecc_uncorrected_errors_total", "counter",
           "Uncorrectable ECC errors since the driver loaded (NVML volatile count).", "ecc_uncorrected_total"),
    Metric("llm_gpu_xid_errors_total", "counter", "Critical XID events seen by this exporter.", "xid_errors_total"),
    Metric("llm_gpu_last_xid", "gauge", "Code of the last critical XID event seen.", "last_xid"),
)
#: Per GPU and `reason`: 1 while NVML says this clock event reason holds the clocks down, else 0.
GPU_CLOCK_EVENT = "llm_gpu_clock_event_active"
#: `reason` label values of GPU_CLOCK_EVENT -> the nvmlClocksEventReason* bit (nvml.h).
CLOCK_EVENT_REASONS: tuple[tuple[str, int], ...] = (
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sw_thermal", 0x20),
    ("hw_thermal", 0x40),
    ("hw_power_brake", 0x80),
)
#: Per replica (engine labels + `reason`): 1 while a GPU the pod holds has this fault, else 0; only for
#: replicas the exporter can attribute GPUs to.
REPLICA_DEGRADED = "llm_replica_degraded"
#: `reason` values of REPLICA_DEGRADED.
DEGRADED_REASONS = ("gpu_throttled", "gpu_xid", "gpu_ecc")

EXPORTER_SCRAPE_DURATION = "llm_exporter_scrape_duration_seconds"
EXPORTER_SCRAPE_ERRORS = "llm_exporter_scrape_errors_total"
EXPORTER_TARGETS = "llm_exporter_targets"
EXPORTER_CYCLE_DURATION = "llm_exporter_cycle_duration_seconds"
EXPORTER_DISCOVERY_ERRORS = "llm_exporter_discovery_errors_total"
