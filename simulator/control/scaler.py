"""The scaler itself, in process, on the simulated clock: what the backtest shows is what production does.

`ServiceScaler` answers KEDA's calls (the ExternalScaler protocol the emulator drives) through the
scaler's own protocol functions (scaler/protocol.py) -> `ScalerService` -> `decide` -> `ModelHistory`,
the very functions the gRPC servicer (scaler/servicer.py) calls: GetMetricSpec names the metric with
target 1, GetMetrics answers the decided replica count, IsActive the decision's activity; a status
error ("no usable data" is UNAVAILABLE) becomes ScalerUnavailable with the same code, which the
emulator treats like KEDA does. Only the inputs are simulated: the Observation every collection
cycle, the Deployment's /scale (spec and ready replicas) and the clock.

Upstream demand (the gateway's queue) reaches the policy as `activationQuery` would, when the trigger
sets `activationQuery`; the gateway's POST /v1/activate reaches the service's activation bus, and for
an `external-push` trigger the StreamIsActive push that follows (the servicer pushes on every activation).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from keda_llm.scaler import protocol
from keda_llm.scaler.activation import ScaledObjectKey
from keda_llm.scaler.config import ScalerConfig, parse_metadata
from keda_llm.scaler.decide import decide
from keda_llm.scaler.model import WorkloadState
from keda_llm.scaler.service import HistoryStore, NoUsableData, ScalerService
from keda_llm.simulator.cluster.engine import ObservedState, Simulation
from keda_llm.simulator.control import KedaSettings, MetricSpec, MetricValue, ScaledObjectRef, ScalerUnavailable


class SimClock:
    """The simulated time, set by the emulator before each chain of calls and by the loop on each event."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def trigger_config(settings: KedaSettings, index: int = 0) -> ScalerConfig:
    """The scaler's config from a trigger's metadata; ConfigError names the key and value."""
    if not 0 <= index < len(settings.triggers):
        raise ValueError(f"ScaledObject {settings.name} has no trigger {index}")
    return parse_metadata(settings.triggers[index].metadata)


class ServiceScaler:
    """One trigger of a ScaledObject answered by the real ScalerService (see the module docstring)."""

    def __init__(self, settings: KedaSettings, workload: Callable[[], WorkloadState], *, trigger_index: int = 0,
                 tick_s: float = 1.0, activation_hold_s: float = 300.0) -> None:
        self.settings = settings
        self.key = ScaledObjectKey(settings.namespace, settings.name)
        self.metadata: Mapping[str, str] = dict(settings.triggers[trigger_index].metadata)
        self.config = trigger_config(settings, trigger_index)  # bad metadata fails here, before any run
        self.push_trigger = settings.triggers[trigger_index].is_push
        self.clock = SimClock()
        self.store = HistoryStore(stale_after=self.config.stale_after)
        self.service = ScalerService(decide=decide, histories=self.store.get, history_lock=self.store.lock,
                                     workloads=lambda _key: workload(), clock=self.clock, tick_s=tick_s,
                                     activation_hold_s=activation_hold_s)
        self.calls = 0
        self._last_active: bool | None = None

    # -- the emulator's side (KEDA's calls) ------------------------------------------------------
    def begin(self, path: str, now: float) -> None:
        self.clock.now = now

    def _check(self, ref: ScaledObjectRef) -> None:
        if ref.namespace != self.key.namespace or ref.name != self.key.name:
            raise ScalerUnavailable("NOT_FOUND", f"unknown ScaledObject {ref.namespace}/{ref.name}")

    def get_metric_spec(self, ref: ScaledObjectRef) -> Sequence[MetricSpec]:
        self._check(ref)
        self.calls += 1
        try:
            answer = protocol.get_metric_spec(self.service, self.key, ref.scaler_metadata)
        except protocol.StatusError as err:
            raise ScalerUnavailable(err.code, err.message) from None
        return [MetricSpec(answer.metric_name, target_size_float=float(answer.target), target_size=answer.target)]

    def get_metrics(self, ref: ScaledObjectRef, metric_name: str) -> Sequence[MetricValue]:
        self._check(ref)
        self.calls += 1
        try:
            answer = protocol.get_metrics(self.service, self.key, ref.scaler_metadata, metric_name)
        except protocol.StatusError as err:
            raise ScalerUnavailable(err.code, err.message) from None
        self._last_active = answer.active
        n = answer.replicas
        return [MetricValue(answer.metric_name, metric_value_float=float(n), metric_value=n)]

    def is_active(self, ref: ScaledObjectRef) -> bool:
        self._check(ref)
        self.calls += 1
        try:
            active = protocol.is_active(self.service, self.key, ref.scaler_metadata)
        except protocol.StatusError as err:
            raise ScalerUnavailable(err.code, err.message) from None
        self._last_active = active
        return active

    # -- the simulator's side ------------------------------------------------------------------------
    def observe(self, state: ObservedState, sim: Simulation) -> bool:
        """One collection cycle into the history. Upstream demand counts only with `activationQuery` set.

        Like the service's demand watcher, a push is wanted when demand appears while the last answer
        was inactive (an `external-push` trigger then wakes at once instead of at the next poll).
        """
        self.clock.now = sim.now
        obs = replace(state.observation, namespace=self.key.namespace, model=self.config.model,
                      upstream_demand=state.observation.upstream_demand if self.config.activation_query else None)
        self.store.ingest(obs)
        if not (self.push_trigger and self._last_active is False and (obs.upstream_demand or 0) > 0):
            return False
        try:
            if self.service.answer(self.key, self.metadata).active:
                self.service.activate(self.key, source="demand")
                self._last_active = True
                return True
        except NoUsableData:
            pass
        return False

    def activate(self, now: float) -> bool:
        """The gateway's POST /v1/activate: recorded on the bus; the push follows for external-push triggers."""
        self.clock.now = now
        self.service.activate(self.key, source="http")
        self._last_active = True
        return self.push_trigger


def workload_state(settings: KedaSettings, sim: Simulation) -> WorkloadState:
    """The Deployment's /scale as the scaler's Kubernetes reader sees it: spec replicas and ready pods."""
    ready = len(sim.cluster.ready())
    return WorkloadState(current_replicas=sim.desired, ready_replicas=ready, min_replicas=settings.min_replicas,
                         max_replicas=settings.max_replicas, polling_interval_s=float(settings.polling_interval_s),
                         cooldown_period_s=float(settings.cooldown_period_s))
