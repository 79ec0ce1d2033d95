"""How long one engine iteration takes: the roofline of a replica, from aggregates only.

An iteration (one forward pass of a continuous-batching engine) is described by three sums over
the sequences it schedules, so a per-request simulator and a cohort/fluid one can share it:

- `new_tokens`: tokens computed this iteration (1 per decoding sequence + each prefill chunk);
- `kv_tokens`: KV-cache tokens read (each scheduled sequence's context before this iteration);
- `attn_pairs`: (query, key) pairs attention scores (a decode of a context L: L + 1; a prefill chunk
  of c tokens after p cached ones: c * p + c * (c + 1) / 2).

time = max(memory time, compute time) + fixed overhead + tensor-parallel communication, where
memory = (streamed weights + KV read) / (bandwidth x efficiency) and
compute = (2 x streamed params x new tokens + attention FLOPs) / (peak x MFU), per GPU (/ TP).
The efficiency numbers are fitted to public measurements by scripts/validate_perf.py
(docs/simulator.md, "Fitting and validation").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from keda_llm.simulator.hardware import GPU
from keda_llm.simulator.models import ModelSpec

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


def step_time(perf: PerfModel, new_tokens: float, kv_tokens: float, attn_pairs: float) -> float:
    """One iteration's duration (scalar convenience over `step_times`)."""
    out = perf.step_times(np.array([new_tokens], float), np.array([kv_tokens], float), np.array([attn_pairs], float))
    return float(out[0])


@dataclass(frozen=True)
class Efficiency:
    """What the software achieves of the datasheet, fitted (docs/simulator.md)."""

    bandwidth: float = 0.75  # fraction of HBM bandwidth reached streaming weights and KV
    mfu: float = 0.5  # fraction of tensor-core peak reached by GEMMs and attention
    step_overhead_s: float = 0.0005  # per iteration: scheduling, kernel launches, sampling
    allreduce_latency_s: float = 15e-6  # per all-reduce under tensor parallelism (2 per layer)
    frontend_latency_s: float = 0.0  # per request: HTTP, tokenization, detokenization, streaming

    def __post_init__(self) -> None:
        if not 0 < self.bandwidth <= 1:
            raise ValueError(f"efficiency.bandwidth must be in (0, 1], got {self.bandwidth}")
        if not 0 < self.mfu <= 1:
            raise ValueError(f"efficiency.mfu must be in (0, 1], got {self.mfu}")
        for key in ("step_overhead_s", "allreduce_latency_s", "frontend_latency_s"):
            if getattr(self, key) < 0:
                raise ValueError(f"efficiency.{key} must be >= 0, got {getattr(self, key)}")


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

    def memory_time(self, kv_tokens: FloatArray) -> FloatArray:
        byts = (self.model.streamed_weight_bytes + kv_tokens * self.model.kv_bytes_per_token) / self.tp
        return np.asarray(byts / (self.gpu.hbm_bandwidth * self.eff.bandwidth), dtype=np.float64)

    def compute_time(self, new_tokens: FloatArray, attn_pairs: FloatArray) -> FloatArray:
        flops = 2.0 * self.model.streamed_params * new_tokens + self.model.attention_flops_per_pair * attn_pairs
        peak = self.gpu.peak_flops(self.model.bytes_per_param)
        return np.asarray(flops / self.tp / (peak * self.eff.mfu), dtype=np.float64)

    def comm_time(self, new_tokens: FloatArray) -> FloatArray:
        """Two ring all-reduces of the activations per layer (after attention and after the MLP)."""
        if self.tp == 1:
            return np.zeros_like(new_tokens, dtype=np.float64)
        act_bytes = new_tokens * self.model.hidden * 2.0  # bf16 activations
        ring = act_bytes * 2.0 * (self.tp - 1) / self.tp / self.gpu.interconnect_bandwidth
        return np.asarray(2 * self.model.n_layers * (self.eff.allreduce_latency_s + ring), dtype=np.float64)

    def step_times(self, new_tokens: FloatArray, kv_tokens: FloatArray, attn_pairs: FloatArray) -> FloatArray:
        mem = self.memory_time(kv_tokens)
        comp = self.compute_time(new_tokens, attn_pairs)
        return np.maximum(mem, comp) + self.eff.step_overhead_s + self.comm_time(new_tokens)


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


# Fitted by scripts/validate_perf.py on the fitting set in docs/simulator.md; re-run it to refit.
FITTED = Efficiency(
    bandwidth=0.695, mfu=0.606, step_overhead_s=0.00090, allreduce_latency_s=1.30e-05, frontend_latency_s=0.0286
)
