"""Named replica presets: a model on a GPU type with vLLM's limits, KV capacity and cold starts.

Each preset's timing stands for one engine version, the one its efficiencies were fitted on
(`Preset.engine`; today vLLM 0.6.0 with multi-step scheduling, perf.FITTED); the limits are the current
vLLM serving defaults below, and the scheduler the replica models is vLLM V1's (simulator/hardware/replica.py).

KV capacity is derived the way vLLM sizes its cache: per GPU,
(GPU memory x gpu_memory_utilization - weights / TP - activation reserve) / (KV bytes per token / TP),
in blocks of 16 tokens. Impossible configurations fail here, with the numbers in the message.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from keda_llm.simulator.hardware.coldstart import ColdStartAssumptions, ColdStartModel, cold_start_model
from keda_llm.simulator.hardware.gpus import A100_SXM_80GB, GPU, H100_SXM_80GB, L4
from keda_llm.simulator.hardware.models import LLAMA_3_1_8B, LLAMA_3_1_70B, ModelSpec
from keda_llm.simulator.hardware.perf import FITTED, Efficiency, PhysicsPerf
from keda_llm.simulator.hardware.replica import ReplicaConfig


class ConfigError(ValueError):
    """A preset that cannot run (weights do not fit, no KV left, limits of zero)."""


@dataclass(frozen=True)
class Preset:
    name: str
    model: ModelSpec
    gpu: GPU
    tp: int
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float = 0.9
    activation_reserve_bytes: float = 2e9  # per GPU: activations at the token budget, CUDA graphs, NCCL
    block_size: int = 16
    kv_blocks_override: int | None = None  # a measured value (vLLM logs "GPU KV cache size"); checked against memory
    efficiency: Efficiency = FITTED
    enable_prefix_caching: bool = True
    #: the cold start's bandwidths and fixed times (None: coldstart.ColdStartAssumptions' defaults)
    cold_start_assumptions: ColdStartAssumptions | None = None
    #: every cold-start phase times this: 1, or the measured p90 over the modelled one (`tune --from-prometheus`)
    cold_start_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.tp < 1:
            raise ConfigError(f"preset {self.name}: tp must be >= 1, got {self.tp}")
        if self.max_num_seqs < 1:
            raise ConfigError(f"preset {self.name}: max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ConfigError(
                f"preset {self.name}: max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                f"max_num_seqs ({self.max_num_seqs})"
            )
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError(
                f"preset {self.name}: gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )
        if not 0 < self.cold_start_scale < 1e6:
            raise ConfigError(f"preset {self.name}: cold_start_scale must be positive and finite, got "
                              f"{self.cold_start_scale}")
        if self.block_size < 1:
            raise ConfigError(f"preset {self.name}: block_size must be >= 1, got {self.block_size}")
        self.kv_blocks  # noqa: B018 - validate memory now, not at first use

    @property
    def kv_bytes_available_per_gpu(self) -> float:
        budget = self.gpu.memory_bytes * self.gpu_memory_utilization
        weights = self.model.weight_bytes / self.tp
        left = budget - weights - self.activation_reserve_bytes
        if weights > budget:
            raise ConfigError(
                f"preset {self.name}: weights {weights / 1e9:.2f} GB per GPU do not fit in "
                f"{self.gpu.memory_bytes / 1e9:.0f} GB x {self.gpu_memory_utilization} = {budget / 1e9:.2f} GB "
                f"on {self.gpu.name} (tp={self.tp})"
            )
        if left <= 0:
            raise ConfigError(
                f"preset {self.name}: no memory left for the KV cache: {budget / 1e9:.2f} GB budget - "
                f"{weights / 1e9:.2f} GB weights - {self.activation_reserve_bytes / 1e9:.2f} GB reserve = "
                f"{left / 1e9:.2f} GB per GPU"
            )
        return left

    @property
    def max_kv_blocks(self) -> int:
        per_token = self.model.kv_bytes_per_token / self.tp
        return int(self.kv_bytes_available_per_gpu // (per_token * self.block_size))

    @property
    def kv_blocks(self) -> int:
        most = self.max_kv_blocks
        if most < 1:
            raise ConfigError(f"preset {self.name}: memory leaves 0 KV blocks")
        if self.kv_blocks_override is None:
            return most
        if self.kv_blocks_override < 1:
            raise ConfigError(f"preset {self.name}: kv_blocks_override must be >= 1, got {self.kv_blocks_override}")
        if self.kv_blocks_override > most:
            raise ConfigError(
                f"preset {self.name}: kv_blocks_override {self.kv_blocks_override} needs more KV memory than the "
                f"GPU has: at most {most} blocks of {self.block_size} tokens fit"
            )
        return self.kv_blocks_override

    @property
    def kv_capacity_tokens(self) -> int:
        return self.kv_blocks * self.block_size

    @property
    def engine(self) -> str:
        """The engine version the timing stands for (what its efficiencies were fitted on)."""
        return self.efficiency.engine

    def replica_config(self) -> ReplicaConfig:
        return ReplicaConfig(
            max_num_seqs=self.max_num_seqs, max_num_batched_tokens=self.max_num_batched_tokens,
            kv_blocks=self.kv_blocks, block_size=self.block_size, enable_prefix_caching=self.enable_prefix_caching,
        )

    def perf(self) -> PhysicsPerf:
        return PhysicsPerf(self.gpu, self.model, self.tp, self.efficiency)

    def cold_start(self, case: str = "typical") -> ColdStartModel:
        if case not in ("typical", "fast"):
            raise ConfigError(f"preset {self.name}: cold start case must be 'typical' or 'fast', got {case!r}")
        model = cold_start_model(self.model.weight_bytes / self.tp, "typical" if case == "typical" else "fast",
                                 self.cold_start_assumptions)
        return model if self.cold_start_scale == 1.0 else model.scaled(self.cold_start_scale)

    def with_changes(self, **changes: object) -> Preset:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)  # type: ignore[arg-type]


# vLLM's serving defaults (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults, API server): on GPUs
# with >= 70 GiB that are not A100, max_num_batched_tokens 8192 and max_num_seqs 1024; otherwise 2048 and 256.
PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("llama-3.1-8b/h100", LLAMA_3_1_8B, H100_SXM_80GB, 1, max_num_seqs=1024, max_num_batched_tokens=8192),
        Preset("llama-3.1-8b/a100", LLAMA_3_1_8B, A100_SXM_80GB, 1, max_num_seqs=256, max_num_batched_tokens=2048),
        Preset(
            "llama-3.1-8b/l4", LLAMA_3_1_8B, L4, 1, max_num_seqs=256, max_num_batched_tokens=2048,
            activation_reserve_bytes=1.5e9,
        ),
        Preset(
            "llama-3.1-70b/h100-tp4", LLAMA_3_1_70B, H100_SXM_80GB, 4, max_num_seqs=1024, max_num_batched_tokens=8192
        ),
    )
}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; known: {', '.join(sorted(PRESETS))}") from None
