"""Cold start of a replica as a distribution: node (scheduling) + image pull + weight load + engine init (warm-up).

Each phase is lognormal, given by its median and 90th percentile (sigma = ln(p90/median) / z90),
because start-up times are positive and right-skewed (a slow registry or a busy node makes a long
tail, never a negative one). Two cases per preset:

- `typical`: a node with a free GPU exists, the image is pulled from a registry, weights come from
  network storage, the engine compiles and captures CUDA graphs: minutes.
- `fast`: image and weights already on the node (or a memory snapshot), compile cache warm: seconds.

Phase medians scale with what is moved (image bytes, weight bytes per GPU) at an assumed
bandwidth; every number is a documented, overridable assumption (docs/simulator.md, "Cold starts").

The four phases are the four levers of docs/design.md, each named as the pod goes through it:
`scheduling` is the node phase (the pod is Pending until a node with a free GPU takes it: seconds on a
free node, plus node provisioning when the cluster autoscaler must add one), `image_pull` the image,
`weight_load` the weights, `warmup` the engine init. Two levers change the distribution
(`cold_start_model(..., node_free=, weights_warm=)`), with the published numbers behind them
(the calibration reference's "Cold-start phases", P1-P4):

- nodes: without a free GPU node a cold start first waits for one, "45 s to minutes"; placeholder
  capacity (the scaler's `warmCapacity` answer) keeps that node up ahead of the forecast, so the pod
  preempts a placeholder and skips provisioning (`node_free=True`, today's `typical`).
- weights: read from network storage at ~1 GiB/s (P1, run-ai/runai-model-streamer
  docs/src/benchmarks.md: 15 GB Llama-3-8B in 47-48 s from GP3/IO2 with plain safetensors) or,
  warmed into the page cache by the exporter's `POST /v1/warm`, at page-cache speed (P2, vllm PR
  #17122: 14.99 GiB in 2.95 s, ~5 GiB/s) (`weights_warm=True`).
Engine init stays (P1: ~20 s besides loading for 8B; P4, llm-d/llm-d PR #1902: ~195 s on an L4), as does
the image (P4: ~214 s pull): their levers (snapshots, streamed images) are not modelled here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

Z90 = 1.2815515655446004  # standard normal 90th percentile

Case = Literal["typical", "fast"]


@dataclass(frozen=True)
class Phase:
    name: str
    median_s: float
    p90_s: float

    def __post_init__(self) -> None:
        if self.median_s < 0:
            raise ValueError(f"cold start phase {self.name}: median_s must be >= 0, got {self.median_s}")
        if self.p90_s < self.median_s:
            raise ValueError(
                f"cold start phase {self.name}: p90_s ({self.p90_s}) must be >= median_s ({self.median_s})"
            )

    @property
    def sigma(self) -> float:
        if self.median_s == 0 or self.p90_s == self.median_s:
            return 0.0
        return math.log(self.p90_s / self.median_s) / Z90

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.median_s == 0:
            return np.zeros(n)
        return np.asarray(self.median_s * np.exp(self.sigma * rng.standard_normal(n)), dtype=np.float64)


@dataclass(frozen=True)
class ColdStartModel:
    """A sum of independent lognormal phases; sample with a seeded generator."""

    case: str
    phases: tuple[Phase, ...]

    def sample(self, rng: np.random.Generator, n: int = 1) -> np.ndarray:
        """n cold-start durations (seconds)."""
        if n < 0:
            raise ValueError(f"cold start: n must be >= 0, got {n}")
        total = np.zeros(n)
        for ph in self.phases:
            total += ph.sample(rng, n)
        return total

    def sample_phases(self, rng: np.random.Generator) -> dict[str, float]:
        """One cold start broken down by phase."""
        return {ph.name: float(ph.sample(rng, 1)[0]) for ph in self.phases}

    @property
    def median_sum_s(self) -> float:
        """Sum of the phase medians (close to, not exactly, the median of the sum)."""
        return sum(ph.median_s for ph in self.phases)

    def quantile(self, q: float, seed: int = 0, n: int = 20000) -> float:
        """Monte Carlo quantile of the total, seeded (for docs and the scaler's `coldStart` setting)."""
        if not 0 <= q <= 1:
            raise ValueError(f"cold start: quantile must be in [0, 1], got {q}")
        return float(np.quantile(self.sample(np.random.default_rng(seed), n), q))

    def scaled(self, factor: float) -> ColdStartModel:
        """Every phase times `factor` (what-if: slower registry, faster storage)."""
        if factor <= 0:
            raise ValueError(f"cold start: scale factor must be > 0, got {factor}")
        return replace(
            self, phases=tuple(Phase(p.name, p.median_s * factor, p.p90_s * factor) for p in self.phases)
        )


@dataclass(frozen=True)
class ColdStartAssumptions:
    """The bandwidths and fixed times behind the two cases (all overridable)."""

    image_bytes: float = 10e9  # vllm/vllm-openai image, compressed layers, order of 10 GB
    registry_bandwidth: float = 150e6  # bytes/s pulling from a registry
    storage_bandwidth: float = 500e6  # bytes/s reading weights from network storage, per GPU
    local_bandwidth: float = 5e9  # bytes/s from node-local NVMe / page cache / snapshot, per GPU
    schedule_s: float = 5.0  # pod scheduled on a node that has a free GPU, container created
    warmup_s: float = 45.0  # engine init: profiling, torch.compile, CUDA graph capture
    fast_schedule_s: float = 1.0
    fast_warmup_s: float = 4.0  # compile cache hit / snapshot restore
    tail: float = 1.6  # p90 / median of each phase
    # no free GPU node: the cluster autoscaler adds one ("45 s to minutes", the calibration reference)
    node_provision_s: float = 120.0
    # weights warmed into the page cache: P2 reads 14.99 GiB in 2.95 s (5.46e9 B/s), vllm PR #17122
    page_cache_bandwidth: float = 5.4e9


#: The lever each phase answers to (docs/design.md): node, image, weights, engine init.
LEVER_OF_PHASE = {"scheduling": "node", "image_pull": "image", "weight_load": "weights", "warmup": "init"}


def cold_start_model(weight_bytes_per_gpu: float, case: Case, a: ColdStartAssumptions | None = None, *,
                     node_free: bool = True, weights_warm: bool = False) -> ColdStartModel:
    """The cold-start distribution of a replica whose GPUs each load `weight_bytes_per_gpu`.

    `node_free=False`: no free GPU node, the node phase adds `node_provision_s` (placeholder capacity is
    what makes it True). `weights_warm=True`: the weights are in the node's page cache (the exporter's
    warm), read at `page_cache_bandwidth`. The defaults are the cases as they were: `typical` assumes a
    free node and cold weights."""
    a = a or ColdStartAssumptions()
    if weight_bytes_per_gpu <= 0:
        raise ValueError(f"cold start: weight_bytes_per_gpu must be > 0, got {weight_bytes_per_gpu}")

    def ph(name: str, median: float) -> Phase:
        return Phase(name, median, median * a.tail)

    provision = 0.0 if node_free else a.node_provision_s
    if case == "typical":
        weights_bw = a.page_cache_bandwidth if weights_warm else a.storage_bandwidth
        phases = (
            ph("scheduling", a.schedule_s + provision),
            ph("image_pull", a.image_bytes / a.registry_bandwidth),
            ph("weight_load", weight_bytes_per_gpu / weights_bw),
            ph("warmup", a.warmup_s),
        )
    elif case == "fast":
        weights_bw = max(a.local_bandwidth, a.page_cache_bandwidth) if weights_warm else a.local_bandwidth
        phases = (
            ph("scheduling", a.fast_schedule_s + provision),
            Phase("image_pull", 0.0, 0.0),
            ph("weight_load", weight_bytes_per_gpu / weights_bw),
            ph("warmup", a.fast_warmup_s),
        )
    else:
        raise ValueError(f"cold start: case must be 'typical' or 'fast', got {case!r}")
    name = case + ("" if node_free else "+provision") + ("+warm-weights" if weights_warm else "")
    return ColdStartModel(name, phases)
