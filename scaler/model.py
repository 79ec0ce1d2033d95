"""Plain data shared by the scaler's stages: sources -> history -> policy -> servicer.

The simulator builds the same objects from its simulated replicas, so the policy cannot tell a
backtest from production. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from keda_llm.scaler.scaledobject import (
    DEFAULT_COOLDOWN_PERIOD_S,
    DEFAULT_MAX_REPLICAS,
    DEFAULT_MIN_REPLICAS,
    DEFAULT_POLLING_INTERVAL_S,
)
from keda_llm.scaler.seasonal import SeasonalModel


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
    # Latency histograms' _sum/_count (counters, seconds and requests/gaps): the SLO-aware term.
    ttft_sum: float | None = None  # llm_time_to_first_token_seconds_sum
    ttft_count: float | None = None  # llm_time_to_first_token_seconds_count (requests)
    itl_sum: float | None = None  # llm_inter_token_latency_seconds_sum
    itl_count: float | None = None  # llm_inter_token_latency_seconds_count (inter-token gaps)
    prefix_queried_total: float | None = None  # llm_prefix_cache_queried_tokens_total
    prefix_hit_total: float | None = None  # llm_prefix_cache_hit_tokens_total
    role: str = "unified"  # the exporter's `role` label: unified|prefill|decode (scaler/pools.py splits on it)

    # LoRA adapters (llm_lora_adapters_*): distinct running, distinct waiting and not running, slots.
    lora_running: float | None = None
    lora_waiting: float | None = None
    lora_max: float | None = None
    degraded: tuple[str, ...] = ()  # llm_replica_degraded reasons at 1 (the exporter's GPU faults), sorted


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
    """What Kubernetes says of the scale target (its /scale) and the ScaledObject's KEDA settings (KEDA's
    defaults where the ScaledObject is not known)."""

    current_replicas: int
    ready_replicas: int
    min_replicas: int = DEFAULT_MIN_REPLICAS
    max_replicas: int = DEFAULT_MAX_REPLICAS
    polling_interval_s: float = float(DEFAULT_POLLING_INTERVAL_S)
    cooldown_period_s: float = float(DEFAULT_COOLDOWN_PERIOD_S)
    # Pods of the target the scheduler has not placed (PodScheduled not True), and the creation time of
    # the oldest of them: a GPU shortfall (scaler/pools.py spills a variant stuck past pendingTimeout).
    unscheduled: int = 0
    unscheduled_since: float | None = None
    # The other pools of the model (variants by ScaledObject name), as Kubernetes says of them: filled by
    # the service for a ScaledObject with `variants` (scaler/pools.py), empty otherwise.
    peers: tuple[tuple[str, WorkloadState], ...] = ()


@dataclass(frozen=True)
class Decision:
    """A policy's answer: the replica count, a reason code, and the numbers behind it."""

    replicas: int
    reason: str
    active: bool = True
    details: Mapping[str, float] = field(default_factory=dict)
    would_be: Decision | None = None  # advisory / held decisions: what would have been returned


class Reason(str, Enum):
    """Why a Decision has its replica count: a closed set (the `reason` label on the scaler's /metrics).

    When several steps touch one decision, the last step that changed the count names it; the
    details carry every step's numbers.
    """

    STEADY = "steady"  # the windows ask for what is there
    SCALE_UP = "scale_up"
    SCALE_DOWN = "scale_down"
    PANIC = "panic"  # Knative panic mode: the panic window drives, no scale-down
    RATE_LIMITED_UP = "rate_limited_up"  # maxScaleUpRate cut the increase
    RATE_LIMITED_DOWN = "rate_limited_down"  # maxScaleDownRate cut the decrease
    PENDING_GUARD = "pending_guard"  # replicas still starting count as supply: no further scale-up
    STALE_HOLD = "stale_hold"  # stale data: a scale-down was refused
    NO_DATA = "no_data"  # nothing usable (the servicer answers UNAVAILABLE)
    IDLE_ZERO = "idle_zero"  # scaleToZero: idle past idleTimeout, inactive
    ACTIVATION = "activation"  # demand (or an activation event) while at zero: wake to at least one
    ADVISORY_HOLD = "advisory_hold"  # advisory mode: decided, recorded, current count held
    MIN_CLAMP = "min_clamp"  # raised to minReplicas
    MAX_CLAMP = "max_clamp"  # cut to maxReplicas
    FORECAST_UP = "forecast_up"  # proactive/hybrid: the demand forecast one horizon ahead asked for more
    FORECAST_DOWN = "forecast_down"  # proactive only: the forecast asked for fewer than the windows
    SCALE_DOWN_DELAY = "scale_down_delay"  # a larger count decided within scaleDownDelay holds (Knative)
    LATENCY_UP = "latency_up"  # observed TTFT/ITL over targetTimeToFirstToken/targetInterTokenLatency asked for more
    WARM_WINDOW = "warm_window"  # warmWindows: a scheduled window's desiredReplicas raised the count (or woke it)


class NoData(Exception):
    """No usable data for a decision: a named result meaning "hold", never a zero.

    The servicer answers UNAVAILABLE, so the HPA keeps its count and KEDA applies its fallback, if any.
    """

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


@dataclass(frozen=True)
class PolicyState:
    """Everything a policy remembers between two decisions for one ScaledObject: an immutable value.

    decide() takes one and returns the next; the servicer and the simulator keep it, nothing else does.
    """

    initialized: bool = False
    panic_since: float | None = None  # Knative `panicTime`: last tick over the panic threshold
    max_panic_pods: int = 0  # Knative `maxPanicPods`: the count panic mode never goes below
    active: bool = True  # the last IsActive answer
    last_demand_at: float | None = None  # last time any demand was seen (idle timer)
    last_activation_at: float | None = None  # last external activation (POST /v1/activate, a peer's)
    pending_since: float | None = None  # when replicas started to be pending (pending-guard bound)
    last_replicas: int | None = None  # the last decided count (what was handed to KEDA)
    recent_counts: tuple[tuple[float, int], ...] = ()  # scaleDownDelay's max-queue: (decided at, count)
    delay_factor: float = 1.0  # the default scaleDownDelay in cold starts: doubled on a regretted release
    delay_factor_at: float | None = None  # when delay_factor last changed (it halves after a quiet spell)
    released_at: float | None = None  # when the delayed count last went down (a release), until a regret
    last_delayed: int | None = None  # the count after the scale-down delay step at the last decision
    # the seasonal forecaster's kept models by signal (refit hourly: scaler/seasonal.py), derived data only
    seasonal: tuple[tuple[str, SeasonalModel], ...] = field(default=(), compare=False)
    seasonal_failed_at: float | None = None  # the last fit that found too little history (retried 10 min on)
