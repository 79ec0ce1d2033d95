"""How long one engine iteration takes: the roofline of a replica, from aggregates only.

An iteration (one forward pass of a continuous-batching engine) is described by three sums over
the sequences it schedules, so a per-request simulator and a cohort/fluid one can share it:

- `new_tokens`: tokens computed this iteration (1 per decoding sequence + each prefill chunk);
- `kv_tokens`: KV-cache tokens read (each scheduled sequence's context before this iteration);
- `attn_pairs`: (query, key) pairs attention scores (a decode of a context L: L + 1; a prefill chunk
  of c tokens after p cached ones: c * p + c * (c + 1) / 2).

The iteration is the engine's kernels one after another (per GPU, / TP):

    time = weights + linear + attention + fixed overhead + tensor-parallel communication
    weights   = streamed weight bytes / (HBM bandwidth x bandwidth efficiency)
    linear    = 2 x streamed params x new tokens / (peak x MFU)
    attention = max(KV tokens x KV bytes / (HBM bandwidth x KV efficiency), attention FLOPs / (peak x MFU))

Streaming the weights and the GEMMs' math are added, not overlapped, so a decode step grows with the
batch well before the GEMMs turn compute-bound, and attention is its own kernel whose KV reads grow
with batch x context. A mixed (chunked-prefill) iteration pays the weights once, the linear layers for
every token it computes and attention for both kinds of sequence. The efficiencies are fitted per engine
version to public measurements by scripts/validate_perf.py (docs/simulator.md, "Fitting and validation").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from keda_llm.simulator.hardware.gpus import GPU
from keda_llm.simulator.hardware.models import ModelSpec

FloatArray = NDArray[np.float64]


class PerfModel(Protocol):
    """Answers "how long does this iteration take" (seconds); never decides what runs."""

    @property
    def request_latency_s(self) -> float:
        """Fixed latency each request sees outside the engine loop (API server, tokenization, streaming)."""
        ...

    def step_times(self, new_tokens: FloatArray, kv_tokens: FloatArray, attn_pairs: FloatArray) -> FloatArray:
        """Vectorised: element i is one iteration's duration."""
        ...

    def coefficients(self) -> FloatArray:
        """The model as `N_COEF` numbers of `coefficient_step_times`' form (what the fluid kernel compiles)."""
        ...


N_COEF = 12
"""time = max(a0 + a1 kv + a2 new + a3 pairs, b0 + b1 kv + b2 new + b3 pairs) + d0 + d1 new + d2 kv + d3 pairs,
with the coefficients in that order: two rooflines' sides and a linear remainder, which every model here fits."""


def coefficient_step_times(c: FloatArray, new_tokens: FloatArray, kv_tokens: FloatArray,
                           attn_pairs: FloatArray) -> FloatArray:
    """`coefficients()`'s form evaluated in numpy (the fluid kernel has the same arithmetic compiled)."""
    a = c[0] + c[1] * kv_tokens + c[2] * new_tokens + c[3] * attn_pairs
    b = c[4] + c[5] * kv_tokens + c[6] * new_tokens + c[7] * attn_pairs
    rest = c[8] + c[9] * new_tokens + c[10] * kv_tokens + c[11] * attn_pairs
    return np.asarray(np.maximum(a, b) + rest, dtype=np.float64)


def coefficient_step_time(c: Sequence[float] | FloatArray, new_tokens: float, kv_tokens: float,
                          attn_pairs: float) -> float:
    """One iteration of `coefficients()`'s form in scalars, term for term as `coefficient_step_times` (the
    same floats): the detailed replica times its iterations with it, the fluid kernel compiles it."""
    a = c[0] + c[1] * kv_tokens + c[2] * new_tokens + c[3] * attn_pairs
    b = c[4] + c[5] * kv_tokens + c[6] * new_tokens + c[7] * attn_pairs
    out: float = max(a, b) + (c[8] + c[9] * new_tokens + c[10] * kv_tokens + c[11] * attn_pairs)
    return out


def step_time(perf: PerfModel, new_tokens: float, kv_tokens: float, attn_pairs: float) -> float:
    """One iteration's duration (scalar convenience over `step_times`)."""
    out = perf.step_times(np.array([new_tokens], float), np.array([kv_tokens], float), np.array([attn_pairs], float))
    return float(out[0])


@dataclass(frozen=True)
class Efficiency:
    """What one engine version achieves of the datasheet, fitted (docs/simulator.md)."""

    bandwidth: float = 0.75  # fraction of HBM bandwidth reached streaming the weights
    mfu: float = 0.5  # fraction of tensor-core peak reached by GEMMs and attention
    step_overhead_s: float = 0.0005  # per iteration: scheduling, kernel launches, sampling
    allreduce_latency_s: float = 15e-6  # per all-reduce under tensor parallelism (2 per layer)
    frontend_latency_s: float = 0.0  # per request: HTTP, tokenization, detokenization, streaming
    kv_bandwidth: float = 0.75  # fraction of HBM bandwidth reached by attention reading the KV cache
    engine: str = "unfitted"  # the engine version these numbers were fitted on
    mfu_by_arch: tuple[tuple[str, float], ...] = ()  # (GPU architecture, MFU) where it differs from `mfu`

    def __post_init__(self) -> None:
        for key in ("bandwidth", "mfu", "kv_bandwidth"):
            if not 0 < getattr(self, key) <= 1:
                raise ValueError(f"efficiency.{key} must be in (0, 1], got {getattr(self, key)}")
        for arch, mfu in self.mfu_by_arch:
            if not 0 < mfu <= 1:
                raise ValueError(f"efficiency.mfu_by_arch[{arch!r}] must be in (0, 1], got {mfu}")
        for key in ("step_overhead_s", "allreduce_latency_s", "frontend_latency_s"):
            if getattr(self, key) < 0:
                raise ValueError(f"efficiency.{key} must be >= 0, got {getattr(self, key)}")

    def mfu_on(self, gpu: GPU) -> float:
        """The MFU this engine reaches on `gpu`'s architecture."""
        return dict(self.mfu_by_arch).get(gpu.arch, self.mfu)


@dataclass(frozen=True)
class PhysicsPerf:
    """Roofline of `model` on `tp` x `gpu` with fitted efficiencies."""

    gpu: GPU
    model: ModelSpec
    tp: int = 1
    eff: Efficiency = Efficiency()

    def __post_init__(self) -> None:
        if self.tp < 1:
            raise ValueError(f"tp must be >= 1, got {self.tp}")

    @property
    def request_latency_s(self) -> float:
        return self.eff.frontend_latency_s

    def coefficients(self) -> FloatArray:
        return self._coefficients.copy()

    @cached_property
    def _coefficients(self) -> FloatArray:
        m, tp, eff, gpu = self.model, self.tp, self.eff, self.gpu
        peak = gpu.peak_flops(m.bytes_per_param) * eff.mfu_on(gpu) * tp
        weights = m.streamed_weight_bytes / tp / (gpu.hbm_bandwidth * eff.bandwidth)
        kv = m.kv_bytes_per_token / tp / (gpu.hbm_bandwidth * eff.kv_bandwidth)
        fixed, per_token = eff.step_overhead_s, 0.0
        if tp > 1:  # two ring all-reduces of the bf16 activations per layer (after attention, after the MLP)
            fixed += 2 * m.n_layers * eff.allreduce_latency_s
            per_token = 2 * m.n_layers * m.hidden * 2.0 * 2.0 * (tp - 1) / tp / gpu.interconnect_bandwidth
        return np.array([0.0, kv, 0.0, 0.0,
                         0.0, 0.0, 0.0, m.attention_flops_per_pair / peak,
                         weights + fixed, 2.0 * m.streamed_params / peak + per_token, 0.0, 0.0])

    def step_times(self, new_tokens: FloatArray, kv_tokens: FloatArray, attn_pairs: FloatArray) -> FloatArray:
        return coefficient_step_times(self._coefficients, new_tokens, kv_tokens, attn_pairs)


@dataclass(frozen=True)
class ConstantPerf:
    """A trivial model for exact tests: base + per new token + per KV token read (seconds)."""

    base_s: float = 0.01
    per_token_s: float = 0.0
    per_kv_token_s: float = 0.0
    request_latency_s: float = 0.0

    def step_times(self, new_tokens: FloatArray, kv_tokens: FloatArray, attn_pairs: FloatArray) -> FloatArray:
        out = self.base_s + self.per_token_s * new_tokens + self.per_kv_token_s * kv_tokens
        return np.asarray(out, dtype=np.float64)

    def coefficients(self) -> FloatArray:
        return np.array([0.0] * 8 + [self.base_s, self.per_token_s, self.per_kv_token_s, 0.0])


VLLM_0_6_0 = "vLLM 0.6.0 (V0 engine, --num-scheduler-steps 10)"

# Fitted by scripts/validate_perf.py on the fitting set in docs/simulator.md (small-batch points and the loaded
# curves L1-L3, all vLLM 0.6.0 with multi-step scheduling); re-run it to refit.
FITTED = Efficiency(
    bandwidth=0.743, mfu=0.571, step_overhead_s=0.00113, allreduce_latency_s=1.82e-05, frontend_latency_s=0.0218,
    kv_bandwidth=0.739, engine=VLLM_0_6_0, mfu_by_arch=(("ampere", 0.745),),
)
