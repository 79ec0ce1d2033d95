"""Plain data shared by the scaler's stages: sources -> history -> policy -> servicer.

The simulator builds the same objects from its simulated replicas, so the policy cannot tell a
backtest from production. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ReplicaSample:
    """One replica (pod) of a model, as its exporter last saw it. None = not reported."""

    pod: str
    timestamp: float  # the engine's last successful scrape (llm_engine_last_success_timestamp_seconds)
    up: bool = True
    running: float | None = None
    waiting: float | None = None
    max_running: float | None = None
    kv_usage_ratio: float | None = None
    kv_capacity_tokens: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    requests_finished_total: float | None = None
    startup_seconds: float | None = None


@dataclass(frozen=True)
class Observation:
    """Everything collection saw of one model at time `at` (one collection cycle)."""

    namespace: str
    model: str
    at: float
    replicas: tuple[ReplicaSample, ...] = ()
    upstream_demand: float | None = None  # activationQuery: demand seen while no replica may exist


@dataclass(frozen=True)
class WorkloadState:
    """What Kubernetes says of the scale target (its /scale) and the ScaledObject's KEDA settings."""

    current_replicas: int
    ready_replicas: int
    min_replicas: int = 0
    max_replicas: int = 100
    polling_interval_s: float = 30.0
    cooldown_period_s: float = 300.0


@dataclass(frozen=True)
class Decision:
    """A policy's answer: the replica count, a reason code, and the numbers behind it."""

    replicas: int
    reason: str
    active: bool = True
    details: Mapping[str, float] = field(default_factory=dict)
