"""GPU specifications the performance model needs, each from the vendor's datasheet.

Numbers are the datasheet's dense (no structured sparsity) tensor-core peaks: an engine serving a
dense model never sees the 2x "with sparsity" figure. Memory is the datasheet's GB (10^9 bytes),
slightly less than what the driver reports, so KV capacity errs small.
"""

from __future__ import annotations

from dataclasses import dataclass

TERA = 1e12
GIGA = 1e9


@dataclass(frozen=True)
class GPU:
    """One accelerator: peak math, memory bandwidth and size, interconnect."""

    name: str
    peak_bf16_flops: float  # dense tensor-core BF16, FLOP/s
    peak_fp8_flops: float | None  # dense FP8, FLOP/s; None: no FP8 math (weights are upcast to BF16)
    hbm_bandwidth: float  # bytes/s
    memory_bytes: float
    interconnect_bandwidth: float  # bytes/s per GPU, one direction (NVLink; PCIe where no NVLink)
    source: str
    arch: str = ""  # the architecture (hopper, ampere, ada): an engine's kernels reach a different share of each

    def __post_init__(self) -> None:
        for key in ("peak_bf16_flops", "hbm_bandwidth", "memory_bytes", "interconnect_bandwidth"):
            if getattr(self, key) <= 0:
                raise ValueError(f"GPU {self.name}: {key} must be positive, got {getattr(self, key)}")

    def peak_flops(self, bytes_per_param: float) -> float:
        """Math peak for weights of this width: FP8 where the GPU has FP8 tensor cores."""
        if bytes_per_param <= 1 and self.peak_fp8_flops is not None:
            return self.peak_fp8_flops
        return self.peak_bf16_flops


# NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column): BF16 1,979 TFLOPS and FP8 3,958 TFLOPS
# "with sparsity" (dense is half), GPU memory 80 GB, bandwidth 3.35 TB/s, NVLink 900 GB/s (bidirectional).
H100_SXM_80GB = GPU(
    name="H100-80GB-SXM",
    arch="hopper",
    peak_bf16_flops=989.5 * TERA,
    peak_fp8_flops=1979 * TERA,
    hbm_bandwidth=3.35 * TERA,
    memory_bytes=80 * GIGA,
    interconnect_bandwidth=450 * GIGA,
    source="https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
)

# NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM column): BF16 312 TFLOPS dense (624 sparse),
# 80 GB HBM2e at 2,039 GB/s, NVLink 600 GB/s (bidirectional). No FP8 tensor cores.
A100_SXM_80GB = GPU(
    name="A100-80GB-SXM",
    arch="ampere",
    peak_bf16_flops=312 * TERA,
    peak_fp8_flops=None,
    hbm_bandwidth=2.039 * TERA,
    memory_bytes=80 * GIGA,
    interconnect_bandwidth=300 * GIGA,
    source="https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
    "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
)

# Same datasheet, A100 40GB SXM column: 40 GB HBM2 at 1,555 GB/s. Used by the validation only.
A100_SXM_40GB = GPU(
    name="A100-40GB-SXM",
    arch="ampere",
    peak_bf16_flops=312 * TERA,
    peak_fp8_flops=None,
    hbm_bandwidth=1.555 * TERA,
    memory_bytes=40 * GIGA,
    interconnect_bandwidth=300 * GIGA,
    source=A100_SXM_80GB.source,
)

# NVIDIA L4 Tensor Core GPU datasheet: BF16 242 TFLOPS and FP8 485 TFLOPS "with sparsity" (dense is
# half), 24 GB GDDR6 at 300 GB/s, PCIe Gen4 x16 64 GB/s (bidirectional), no NVLink.
L4 = GPU(
    name="L4",
    arch="ada",
    peak_bf16_flops=121 * TERA,
    peak_fp8_flops=242.5 * TERA,
    hbm_bandwidth=300 * GIGA,
    memory_bytes=24 * GIGA,
    interconnect_bandwidth=32 * GIGA,
    source="https://www.nvidia.com/en-us/data-center/l4/ (L4 datasheet PDF)",
)

GPUS: dict[str, GPU] = {g.name: g for g in (H100_SXM_80GB, A100_SXM_80GB, A100_SXM_40GB, L4)}
