"""The cold-start levers around the pure `decide`: measured horizon, the `warmCapacity` answer, warm triggers.

`LeverDecide` wraps scaler.decide.decide with the same signature, so scaler/service.py runs it unchanged:

- Horizon: where the ScaledObject sets no `coldStart`, the p90 of its pods' measured cold starts
  (scaler/phases.py, creation to Ready) stands in for it: the forecast horizon, the pending guard and
  the default scale-down delay then follow what this cluster's cold starts take.
- `answer: warmCapacity`: the count is the placeholder replicas to keep, i.e. the model's decided
  replicas (the forecast included: `hybrid` is the larger of the windows and the forecast) beyond
  those it runs, at most `warmCapacityMax`, 0 (and inactive) when the model is idle. The model's
  replicas come from collection, not from this ScaledObject's target (the placeholders).
- `warmPath`: a decision above the target's current count (a scale-up, a wake from zero) queues a
  warm on the WarmPlanner (non-blocking; scaler/warm.py). Activations (POST /v1/activate) do too,
  through `WarmingBus`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence

from keda_llm.scaler.activation import ActivationBus, ScaledObjectKey
from keda_llm.scaler.config import ScalerConfig
from keda_llm.scaler.history import HistoryView
from keda_llm.scaler.model import Decision, PolicyState, WorkloadState
from keda_llm.scaler.phases import PhaseTracker
from keda_llm.scaler.policy import DEFAULT_COLD_START
from keda_llm.scaler.warm import WarmPlanner, WarmRequest

log = logging.getLogger(__name__)

DecideFn = Callable[[HistoryView, ScalerConfig, PolicyState, WorkloadState, float], tuple[Decision, PolicyState]]
Resolver = Callable[[ScalerConfig], Callable[[], Sequence[str]] | None]


def warm_capacity(decision: Decision, running: int, cap: int) -> int:
    """Placeholders to keep: the decided replicas (or the forecast's, if larger) beyond those running,
    at most `cap`; 0 when the decision is inactive (the model idle)."""
    if not decision.active:
        return 0
    forecast = decision.details.get("forecast_desired")
    wanted = max(decision.replicas, int(forecast) if forecast is not None else 0)
    return max(0, min(cap, wanted - running))


def model_workload(history: HistoryView, workload: WorkloadState, now: float) -> WorkloadState:
    """The model's own replicas as collection sees them (ready = up, fresh or stale; current adds those
    loading), with the ScaledObject's KEDA settings: the warmCapacity ScaledObject's target is the
    placeholders, whose count says nothing of the model's."""
    snapshot = getattr(history, "snapshot", None)
    snap = snapshot(now) if snapshot is not None else None
    ready = 0 if snap is None else snap.fresh + snap.stale
    current = ready + (0 if snap is None else snap.loading)
    return dataclasses.replace(workload, current_replicas=current, ready_replicas=ready)


class LeverDecide:
    """`decide` with the levers (module docstring). Thread-safe as `decide` is: the service serializes it."""

    def __init__(self, decide: DecideFn, *, phases: PhaseTracker | None = None, planner: WarmPlanner | None = None,
                 resolver: Resolver | None = None) -> None:
        self._decide = decide
        self.phases = phases
        self.planner = planner
        self._resolver = resolver
        self._lock = threading.Lock()
        self._measured: dict[tuple[ScalerConfig, float], ScalerConfig] = {}

    def config_for(self, namespace: str | None, cfg: ScalerConfig) -> ScalerConfig:
        """`cfg`, with the measured p90 cold start as `coldStart` where it sets none."""
        if cfg.cold_start is not None or self.phases is None or namespace is None:
            return cfg
        p90 = self.phases.p90(namespace, cfg.model)
        if p90 is None or not p90 > 0:
            return cfg
        with self._lock:
            out = self._measured.get((cfg, p90))
            if out is None:
                if len(self._measured) > 4096:
                    self._measured.clear()
                out = self._measured[(cfg, p90)] = dataclasses.replace(cfg, cold_start=min(p90, 86400.0))
        return out

    def __call__(self, history: HistoryView, cfg: ScalerConfig, state: PolicyState, workload: WorkloadState,
                 now: float) -> tuple[Decision, PolicyState]:
        namespace = getattr(history, "namespace", None)
        used = self.config_for(namespace, cfg)
        if cfg.answer == "warmCapacity":
            model = model_workload(history, workload, now)
            decision, new_state = self._decide(history, used, state, model, now)
            n = warm_capacity(decision, model.current_replicas, cfg.warm_capacity_max)
            details = {**decision.details, "warm_capacity": float(n), "model_replicas": float(model.current_replicas)}
            return Decision(n, decision.reason, n > 0, details), new_state
        decision, new_state = self._decide(history, used, state, workload, now)
        if cfg.warm_path and namespace is not None and decision.replicas > workload.current_replicas:
            reason = "wake" if workload.current_replicas == 0 else "scale_up"
            self.warm(namespace, cfg, reason, used.cold_start or DEFAULT_COLD_START)
        return decision, new_state

    def warm(self, namespace: str, cfg: ScalerConfig, reason: str, cold_start_s: float) -> bool:
        """Queue a warm for this model (deduplicated within its cold start); False when not queued."""
        if self.planner is None or self._resolver is None or not cfg.warm_path:
            return False
        resolve = self._resolver(cfg)
        if resolve is None:
            return False
        return self.planner.request(WarmRequest((namespace, cfg.model), cfg.warm_path, cfg.warm_nodes,
                                                cfg.warm_gpu_model, resolve, reason), cold_start_s)


class WarmingBus(ActivationBus):
    """An ActivationBus that also warms the woken model's weights (its ScaledObjects with `warmPath`)."""

    def __init__(self, levers: LeverDecide, clock: Callable[[], float] = time.time) -> None:
        super().__init__(clock=clock)
        self._levers = levers
        self._configs: dict[ScaledObjectKey, ScalerConfig] = {}
        self._configs_lock = threading.Lock()

    def track(self, key: ScaledObjectKey, cfg: ScalerConfig) -> None:
        with self._configs_lock:
            self._configs[key] = cfg

    def untrack(self, key: ScaledObjectKey) -> None:
        with self._configs_lock:
            self._configs.pop(key, None)

    def config(self, key: ScaledObjectKey) -> ScalerConfig | None:
        with self._configs_lock:
            return self._configs.get(key)

    def activate(self, key: ScaledObjectKey, at: float | None = None) -> int:
        woken = super().activate(key, at)
        cfg = self.config(key)
        if cfg is not None and cfg.warm_path:
            try:
                used = self._levers.config_for(key.namespace, cfg)
                self._levers.warm(key.namespace, cfg, "wake", used.cold_start or DEFAULT_COLD_START)
            except Exception:  # warming must never fail an activation
                log.exception("warm on activation of %s", key)
        return woken
