"""The glue between KEDA's questions and the pure core: ScaledObject -> config -> history -> decide -> Decision.

Every gRPC handler asks this service and nothing else. It answers from memory: the history is filled
by background collection (scaler/sources), the workload state by a background Kubernetes reader
(scaler/kube.py); `decide` (scaler/decide.py) is pure and runs here on the caller's thread.

Why decisions are evaluated on a clock grid: KEDA asks GetMetrics then IsActive for one poll, and the
HPA path asks the same again; all of them must see one decision, and two scaler pods asked at the same
moment with the same inputs must give the same answer. So `now` is floored to `tick_s`, the policy runs
at most once per ScaledObject per tick, and every question within a tick reads that one result.

Why decisions can be made off the RPC path: `decide` costs about as much as a gRPC call itself
(0.1-0.3 ms against a 1 h history), and its inputs only change when collection lands (every couple
of seconds) or an activation arrives. With `reuse_s` > 0 and a `DecisionRefresher` running, a
background thread re-decides each ScaledObject when its inputs change (or its answer is `reuse_s`/2
old), on the same tick grid, and RPCs read the answer: an answer younger than `reuse_s` is served as
it is, an older one is decided on the spot as before. The policy state then moves with the data, not
with who asked when, so two pods fed the same collections step their policies at the same ticks.
With `reuse_s` = 0 (the default) every tick is decided on the first question in it. An UNAVAILABLE
answer (no usable data) moved no policy state, so it is not held to its tick: the next question after
its inputs change (a collection lands, the source answers, an activation) is decided again at once.

Rules this module owns (DESIGN.md "Decision semantics"):
- No usable data -> `NoUsableData` (the servicer answers UNAVAILABLE: KEDA and the HPA hold).
- A ScaledObject whose model has no replica in sight (never seen, or the scale target is at 0) with
  `scaleToZero` on is idle, not broken: desired 0, inactive. Raising UNAVAILABLE there would be wrong:
  KEDA calls GetMetrics before IsActive, and a GetMetrics error makes the poll an error, which blocks the
  poll path from ever activating the model (kedacore/keda pkg/scalers/external_scaler.go
  GetMetricsAndActivity). Without `scaleToZero` and with no replica ever seen -> UNAVAILABLE.
- An activation (POST /v1/activate, or demand seen by the watcher) holds IsActive true for
  `activation_hold_s` and lifts a desired 0 to 1.
- An edited ScaledObject (same name, new metadata): the old metadata's entry stops being decided in the
  background (the refresher, the demand watch) once the new one has been asked for three of the old one's
  poll gaps, a minute at least; it is still answered when asked, and forgotten after `forget_after_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from keda_llm.common.periodic import Periodic
from keda_llm.scaler.activation import ActivationBus, ScaledObjectKey
from keda_llm.scaler.config import ConfigCache, ScalerConfig
from keda_llm.scaler.decide import activate as record_activation
from keda_llm.scaler.decide import warm_at_zero
from keda_llm.scaler.history import HistoryView, ModelHistory
from keda_llm.scaler.longhistory import DEFAULT_DAYS
from keda_llm.scaler.model import Decision, NoData, Observation, PolicyState, Reason, WorkloadState
from keda_llm.scaler.names import metric_name
from keda_llm.scaler.pools import with_peers

log = logging.getLogger(__name__)

MetadataKey = tuple[tuple[str, str], ...]


#: decide(history, config, state, workload, now) -> (Decision, new state); NoData returned or raised
DecideFn = Callable[[HistoryView, ScalerConfig, PolicyState, WorkloadState, float], tuple[Decision, PolicyState]]
#: (namespace, model) -> the model's history, or None when collection has never seen the model.
HistoryLookup = Callable[[str, str], HistoryView | None]
#: (ScaledObject, its config) -> the model's history as its own metric source collected it, or None.
ConfigHistoryLookup = Callable[[ScaledObjectKey, ScalerConfig], HistoryView | None]
#: ScaledObject -> what Kubernetes says of it and its scale target, or None when not (yet) known.
WorkloadLookup = Callable[[ScaledObjectKey], WorkloadState | None]


class HistoryStore:
    """(namespace, model) -> ModelHistory, fed by a metric source's subscriber callback.

    Collection threads ingest while the gRPC loop decides, so both go through one lock, taken per
    observation (a collection cycle of 1,000 models never holds it for long). Models no source has
    reported for `forget_after_s` are dropped on the next ingest sweep.
    """

    def __init__(self, stale_after: float = 30.0, forget_after_s: float = 3 * 3600.0,
                 lock: threading.Lock | None = None, long_days: float = DEFAULT_DAYS) -> None:
        self.stale_after = stale_after
        self.long_days = long_days  # the long tier's span (scaler/longhistory.py)
        self.forget_after_s = forget_after_s
        self.lock = lock or threading.Lock()  # stores of several sources may share one (see scaler/cli.py)
        self._models: dict[tuple[str, str], ModelHistory] = {}
        self._last_sweep = -math.inf

    def ingest(self, obs: Observation) -> None:
        """A source Subscriber: add one observation to its model's history (any thread)."""
        with self.lock:
            history = self._models.get((obs.namespace, obs.model))
            if history is None:
                history = self._models[(obs.namespace, obs.model)] = ModelHistory(
                    obs.namespace, obs.model, stale_after=self.stale_after, long_days=self.long_days)
            history.ingest(obs)
            if obs.at - self._last_sweep > 60.0:
                self._last_sweep = obs.at
                for k, h in list(self._models.items()):
                    if h.last_at is not None and obs.at - h.last_at > self.forget_after_s:
                        del self._models[k]

    def get(self, namespace: str, model: str) -> ModelHistory | None:
        return self._models.get((namespace, model))

    def models(self) -> list[ModelHistory]:
        """Every model's history (a copy of the list: the long history restorer walks it off the lock)."""
        with self.lock:
            return list(self._models.values())

    def __len__(self) -> int:
        return len(self._models)

    def nbytes(self) -> int:
        with self.lock:
            return sum(h.nbytes() for h in self._models.values())


def assumed_workload(history: HistoryView | None, now: float) -> WorkloadState:
    """Without the Kubernetes API: the replicas collection lists stand in for the target's /scale.

    Ready = replicas that reported up at some point (fresh or gone stale); current adds those still
    loading. KEDA's own settings then take their defaults (scaler/scaledobject.py).
    """
    # getattr: a stand-in history (a test's fake that only feeds a fake decide) may have no snapshot
    snapshot = getattr(history, "snapshot", None)
    snap = snapshot(now) if snapshot is not None else None
    if snap is None:
        return WorkloadState(current_replicas=0, ready_replicas=0)
    ready = snap.fresh + snap.stale
    return WorkloadState(current_replicas=ready + snap.loading, ready_replicas=ready)


#: Why POST /v1/activate was refused (scaler/server.py): the `reason` label of the rejected counter.
ACTIVATION_REJECT_REASONS = ("unauthorized", "bad_name", "bad_path", "unknown")


class NoUsableData(Exception):
    """Nothing to decide on: KEDA must hold (gRPC UNAVAILABLE).

    `known_replicas`: the target's replica count as the Kubernetes API gave it (None: not known). While
    an activation holds, the answer is then that count, at least 1: it wakes a target at zero and
    holds a running one. Without it the activation floor must not stand in for a count."""

    def __init__(self, message: str, *, known_replicas: int | None = None) -> None:
        super().__init__(message)
        self.known_replicas = known_replicas


@dataclass(frozen=True)
class Answer:
    """One ScaledObject's answer for one tick: the decision and whether IsActive is true."""

    metric_name: str
    decision: Decision
    active: bool
    activated: bool = False  # an activation overlaid the policy's decision


#: See ScalerService._current: an entry not asked for this many of its poll gaps (and at least this long) while
#: a newer metadata of its ScaledObject is asked is left to the RPC path
SUPERSEDED_POLLS = 3
SUPERSEDED_MIN_S = 60.0


@dataclass
class _Entry:
    """Per (ScaledObject, metadata): the policy state carried between ticks and the tick's answer."""

    key: ScaledObjectKey
    config: ScalerConfig
    metric_name: str
    state: PolicyState = field(default_factory=PolicyState)
    tick: float = -math.inf
    result: Answer | NoUsableData | None = None
    last_used: float = 0.0
    first_used: float = 0.0
    poll_gap: float = 0.0  # the longest time between two questions about this metadata (KEDA's poll)
    last_decision: Decision | None = None
    # (history's last collection, last activation, source's last answer)
    inputs: tuple[float | None, float | None, float | None] | None = None
    at_zero: bool = False  # the target ran no replica at the last decision (known, or as collection saw it)


#: the `window` label of keda_llm_scaler_latency_ratio -> the decision detail it reads
LATENCY_WINDOWS = {"stable": "latency_ratio", "panic": "latency_ratio_panic"}


@dataclass
class ServiceMetrics:
    """The scaler's own Prometheus metrics, per ScaledObject (namespace, scaledobject, model)."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        labels = ["namespace", "scaledobject", "model"]
        r = self.registry
        self.desired = Gauge("keda_llm_scaler_desired_replicas", "Replica count the scaler answers KEDA with",
                             labels, registry=r)
        self.active = Gauge("keda_llm_scaler_active", "1 if IsActive answers true", labels, registry=r)
        self.demand = Gauge("keda_llm_scaler_demand", "Demand the policy saw (policy units: tokens, requests)",
                            labels, registry=r)
        self.capacity = Gauge("keda_llm_scaler_capacity", "Capacity per replica the policy saw (policy units)",
                              labels, registry=r)
        self.panic = Gauge("keda_llm_scaler_panic", "1 while the panic window rules", labels, registry=r)
        self.data_age = Gauge("keda_llm_scaler_data_age_seconds", "Age of the newest usable sample",
                              labels, registry=r)
        self.reason = Gauge("keda_llm_scaler_decision_reason", "1 for the reason of the current decision",
                            [*labels, "reason"], registry=r)
        self.unavailable = Counter("keda_llm_scaler_unavailable_total",
                                   "Evaluations that had no usable data (answered UNAVAILABLE)", labels, registry=r)
        self.activations = Counter("keda_llm_scaler_activations_total", "Activations received",
                                   ["namespace", "scaledobject", "source"], registry=r)
        # by reason only: the namespace and name come from the URL, and anyone who can reach the port sends them
        self.activations_rejected = Counter("keda_llm_scaler_activations_rejected", "POST /v1/activate refused",
                                            ["reason"], registry=r)
        # every reason exported at 0 from the start: a first refusal is then a rise Prometheus' rate() sees
        for reason in ACTIVATION_REJECT_REASONS:
            self.activations_rejected.labels(reason)
        self.rpcs = Counter("keda_llm_scaler_rpcs_total", "gRPC calls answered", ["method", "code"], registry=r)
        self.streams = Gauge("keda_llm_scaler_streams_open", "StreamIsActive streams held", registry=r)
        self.replica_fraction = Gauge(
            "keda_llm_scaler_replica_capacity_fraction",
            "Fraction of a whole replica a degraded replica counts as, by reason (scaler/health.py); healthy "
            "replicas have no series", [*labels, "pod", "reason"], registry=r)
        self.latency_ratio = Gauge(
            "keda_llm_scaler_latency_ratio",
            "The latency term's ratio per window (stable, panic): the replicas it asks for over those its window "
            "reflects (observed TTFT or ITL over the target, or with itlScaling busy the replicas' busy share over "
            "the target's); no series while the term has no signal", [*labels, "window"], registry=r)
        self.itl_floor = Gauge("keda_llm_scaler_itl_floor_seconds",
                               "The replicas' fitted ITL floor: one decode step at a batch of one "
                               "(scaler/itl_floor.py); no series until a first fit", labels, registry=r)
        self._fractions: dict[tuple[str, str, str], set[tuple[str, str]]] = {}
        self._latency: dict[tuple[str, str, str], frozenset[str]] = {}  # the latency series set: windows, "floor"
        self._reasons: dict[tuple[str, str, str], str] = {}
        self._rpc_children: dict[tuple[str, str], Any] = {}

    def rpc(self, method: str, code: str) -> None:
        """Count one answered call (the labelled child is looked up once, not per call)."""
        child = self._rpc_children.get((method, code))
        if child is None:
            child = self._rpc_children[(method, code)] = self.rpcs.labels(method, code)
        child.inc()

    def record(self, key: ScaledObjectKey, model: str, answer: Answer) -> None:
        lv = (key.namespace, key.name, model)
        d = answer.decision
        self.desired.labels(*lv).set(d.replicas)
        self.active.labels(*lv).set(1 if answer.active else 0)
        details = d.details
        for gauge, name in ((self.demand, "demand"), (self.capacity, "capacity"), (self.panic, "panic"),
                            (self.data_age, "data_age_s")):
            value = details.get(name)
            if value is not None and math.isfinite(value):
                gauge.labels(*lv).set(value)
        self._record_fractions(lv, details)
        self._record_latency(lv, details)
        old = self._reasons.get(lv)
        if old != d.reason:
            if old is not None:
                self.reason.labels(*lv, old).set(0)
            self.reason.labels(*lv, d.reason).set(1)
            self._reasons[lv] = d.reason


    def forget(self, lv: tuple[str, str, str]) -> None:
        """Drop every series of one (namespace, scaledobject, model): a forgotten ScaledObject's gauges would
        otherwise stay in /metrics at their last values for good."""
        for metric in (self.desired, self.active, self.demand, self.capacity, self.panic, self.data_age,
                       self.unavailable):
            with contextlib.suppress(KeyError):
                metric.remove(*lv)
        reason = self._reasons.pop(lv, None)
        if reason is not None:
            for old in {reason, *(r.value for r in Reason)}:
                with contextlib.suppress(KeyError):
                    self.reason.remove(*lv, old)
        for pod, why in self._fractions.pop(lv, set()):
            with contextlib.suppress(KeyError):
                self.replica_fraction.remove(*lv, pod, why)
        had = self._latency.pop(lv, frozenset())
        for window in had & LATENCY_WINDOWS.keys():
            self.latency_ratio.remove(*lv, window)
        if "floor" in had:
            self.itl_floor.remove(*lv)

    def _record_latency(self, lv: tuple[str, str, str], details: Mapping[str, float]) -> None:
        """The latency term's ratios and the fitted ITL floor; a window without a signal (or a ScaledObject with
        no latency target) has no series, rather than its last value standing for the current one. The series
        set are remembered, so a ScaledObject without latency targets costs no lookups."""
        had = self._latency.get(lv, frozenset())
        now: set[str] = set()
        for window, name in LATENCY_WINDOWS.items():
            value = details.get(name)
            if value is not None and math.isfinite(value):
                self.latency_ratio.labels(*lv, window).set(value)
                now.add(window)
            elif window in had:
                self.latency_ratio.remove(*lv, window)
        floor = details.get("itl_floor_s")
        if floor is not None and math.isfinite(floor) and floor > 0:
            self.itl_floor.labels(*lv).set(floor)
            now.add("floor")
        elif "floor" in had:
            self.itl_floor.remove(*lv)
        if now or had:
            self._latency[lv] = frozenset(now)

    def _record_fractions(self, lv: tuple[str, str, str], details: Mapping[str, float]) -> None:
        """The decision's `replica_fraction:<reason>:<pod>` details as gauge children; a pod gone or healthy
        again loses its series."""
        now: set[tuple[str, str]] = set()
        for name, value in details.items():
            if name.startswith("replica_fraction:"):
                _, reason, pod = name.split(":", 2)
                self.replica_fraction.labels(*lv, pod, reason).set(value)
                now.add((pod, reason))
        for pod, reason in self._fractions.get(lv, set()) - now:
            self.replica_fraction.remove(*lv, pod, reason)
        self._fractions[lv] = now


def metadata_key(metadata: Mapping[str, str]) -> MetadataKey:
    return tuple(sorted(metadata.items()))


class ScalerService:
    """Answers KEDA's questions for any number of ScaledObjects; see the module docstring for the rules.

    Not thread-safe by design: the gRPC side calls it from one asyncio loop. The activation bus it
    reads is thread-safe (the HTTP side writes to it from threads).
    """

    def __init__(
        self,
        *,
        decide: DecideFn,
        histories: HistoryLookup | None = None,
        history_for: ConfigHistoryLookup | None = None,
        history_lock: contextlib.AbstractContextManager[Any] | None = None,
        configs: ConfigCache | None = None,
        workloads: WorkloadLookup | None = None,
        bus: ActivationBus | None = None,
        clock: Callable[[], float] = time.time,
        tick_s: float = 1.0,
        activation_hold_s: float = 300.0,
        forget_after_s: float = 3600.0,
        metrics: ServiceMetrics | None = None,
        on_new: Callable[[ScaledObjectKey, ScalerConfig], None] | None = None,
        on_forget: Callable[[ScaledObjectKey, ScalerConfig], None] | None = None,
        reuse_s: float = 0.0,
        source_answered_at: Callable[[ScaledObjectKey, ScalerConfig], float | None] | None = None,
    ) -> None:
        if tick_s <= 0:
            raise ValueError(f"tick_s must be > 0, got {tick_s}")
        if reuse_s < 0:
            raise ValueError(f"reuse_s must be >= 0, got {reuse_s}")
        if (histories is None) == (history_for is None):
            raise ValueError("give exactly one of histories (by namespace and model) or history_for (by config)")
        self.configs = configs or ConfigCache()
        self._decide = decide
        self._histories = histories
        self._history_for = history_for
        self._history_lock = history_lock or contextlib.nullcontext()
        self._on_new = on_new
        self._on_forget = on_forget
        self._workloads = workloads
        # when a config's source last collected: within staleAfter, a model it does not list is not running;
        # without that (a source down since the start) the absence is missing data, not idleness
        self._source_answered_at = source_answered_at
        self.bus = bus or ActivationBus(clock=clock)
        self.clock = clock
        self.tick_s = tick_s
        self.activation_hold_s = activation_hold_s
        self.forget_after_s = forget_after_s
        self.reuse_s = reuse_s
        self.metrics = metrics or ServiceMetrics()
        self._entries: dict[tuple[ScaledObjectKey, MetadataKey], _Entry] = {}
        # One evaluation at a time: the RPC path (asyncio loop) and the DecisionRefresher (a thread) both
        # step an entry's policy state, which must move once per tick.
        self._eval_lock = threading.Lock()
        self._sweep_lock = threading.Lock()
        self._last_sweep = clock()

    # -- config -------------------------------------------------------------------------------------

    def _entry(self, key: ScaledObjectKey, metadata: Mapping[str, str]) -> _Entry:
        """The cached entry for this ScaledObject and metadata; parses (and caches) the config once."""
        mkey = metadata_key(metadata)
        entry = self._entries.get((key, mkey))
        if entry is None:
            config = self.configs.get(key.namespace, key.name, metadata)  # ConfigError: bad metadata
            now = self.clock()
            entry = _Entry(key=key, config=config, metric_name=metric_name(config.model), last_used=now,
                           first_used=now)
            if self._on_new is not None:
                self._on_new(key, config)  # start collecting for the model, reading the ScaledObject
            self._entries[(key, mkey)] = entry
        now = self.clock()
        entry.poll_gap = max(entry.poll_gap, min(now - entry.last_used, self.forget_after_s))
        entry.last_used = now
        return entry

    def _current(self) -> list[_Entry]:
        """The entries the background paths (the refresher, the demand watch) decide: all but superseded
        metadata. An edited ScaledObject keeps its name, so its old metadata's entry lives on until the sweep
        forgets it; decided meanwhile, it would write its old decisions into the ScaledObject's series (the
        same labels when the model is the same) and wake the model on its old activationQuery. An entry is
        superseded once another metadata of its ScaledObject, first asked after its last question, has been
        asked for SUPERSEDED_POLLS of its own poll gaps (at least SUPERSEDED_MIN_S) longer: every trigger of
        a ScaledObject is asked each poll, so a live one is asked again before that. A superseded entry is
        still answered, and decided, when KEDA asks about it."""
        entries = list(self._entries.values())
        siblings: dict[ScaledObjectKey, list[_Entry]] = {}
        for e in entries:
            siblings.setdefault(e.key, []).append(e)

        def superseded(e: _Entry) -> bool:
            grace = max(SUPERSEDED_MIN_S, SUPERSEDED_POLLS * e.poll_gap)
            return any(o.first_used > e.last_used and o.last_used - e.last_used > grace for o in siblings[e.key])
        return [e for e in entries if len(siblings[e.key]) == 1 or not superseded(e)]

    def config(self, key: ScaledObjectKey, metadata: Mapping[str, str]) -> ScalerConfig:
        """The parsed config; raises the parser's ConfigError on bad metadata."""
        return self._entry(key, metadata).config

    def metric_spec(self, key: ScaledObjectKey, metadata: Mapping[str, str]) -> str:
        """The metric name for GetMetricSpec (target 1): depends only on the metadata, never on live data."""
        return self._entry(key, metadata).metric_name

    # -- decisions ----------------------------------------------------------------------------------

    def answer(self, key: ScaledObjectKey, metadata: Mapping[str, str]) -> Answer:
        """The decision for this tick, with activations overlaid. Raises NoUsableData or ConfigError."""
        return self.answer_for(self._entry(key, metadata))

    def entry(self, key: ScaledObjectKey, metadata: Mapping[str, str]) -> _Entry:
        """The ScaledObject's cached entry (its metric name and config): for a servicer that checks the
        metric name before asking `answer_for`, with one metadata lookup per call."""
        return self._entry(key, metadata)

    def answer_for(self, entry: _Entry) -> Answer:
        """`answer` for an entry from `entry()`: the policy's decision with a recent activation overlaid.

        The activation is a floor, not an answer: without usable data it answers the count the Kubernetes
        API gives (at least 1), which never lowers it; with no count known, UNAVAILABLE (KEDA holds)."""
        now = self.clock()
        result = self._decided(entry, now)
        activated = self._activated(entry.key, now)
        if isinstance(result, NoUsableData):
            if not activated or result.known_replicas is None:
                raise result
            held = max(1, result.known_replicas)
            return self._overlay(entry, Answer(entry.metric_name, Decision(held, Reason.ACTIVATION.value), True, True))
        if activated:
            return self._overlay(entry, result)
        return result

    def _decided(self, entry: _Entry, now: float) -> Answer | NoUsableData:
        """The policy's own answer at `now` (re-decided when its tick is due), without any activation overlay."""
        tick = math.floor(now / self.tick_s) * self.tick_s
        if entry.result is None or (entry.tick != tick and not 0 <= tick - entry.tick < self.reuse_s):
            with self._eval_lock:
                if entry.tick != tick or entry.result is None:  # else: decided meanwhile, this tick
                    self._evaluate_into(entry, tick)
            self._maybe_sweep(now)
        elif isinstance(entry.result, NoUsableData) and self._inputs(entry) != entry.inputs:
            # No data is no policy step (the state did not move), so the answer is not held to its tick: the
            # collection that has just landed answers now, not a tick or a refresh later.
            with self._eval_lock:
                if isinstance(entry.result, NoUsableData) and self._inputs(entry) != entry.inputs:
                    self._evaluate_into(entry, max(tick, entry.tick))
        assert entry.result is not None
        return entry.result

    def _inputs(self, entry: _Entry) -> tuple[float | None, float | None, float | None]:
        """What a decision of this entry rests on, besides the clock: its history's last collection (None where
        the history cannot tell: then every tick counts as new), its last activation and its source's last answer."""
        history = self._lookup(entry.key, entry.config)
        answered = self._source_answered_at(entry.key, entry.config) if self._source_answered_at else None
        return getattr(history, "last_at", None), self.bus.last_activation(entry.key), answered

    def _evaluate_into(self, entry: _Entry, tick: float) -> None:
        """Decide `entry` at `tick` (caller holds the evaluation lock).

        A tick before the entry's last one is a step of the clock backwards (ticks only move forward
        otherwise): the policy state's times (windows, panic, idle and delay timers) then lie in the
        future, so it starts over, as on a restart; the history rebases itself on the next collection."""
        if tick < entry.tick:
            log.warning("clock stepped back %.0f s for %s: its policy state starts over", entry.tick - tick, entry.key)
            entry.state = PolicyState()
        inputs = self._inputs(entry)
        entry.result = self._evaluate(entry, tick)
        entry.tick = tick
        entry.inputs = inputs

    def refresh(self) -> int:
        """Re-decide, now, every entry whose inputs changed since its last decision or whose answer is
        `reuse_s`/2 old; entries already decided this tick wait for the next refresh (once per tick).
        Thread-safe; returns how many entries were decided. The DecisionRefresher's step."""
        now = self.clock()
        tick = math.floor(now / self.tick_s) * self.tick_s
        self._maybe_sweep(now)  # the refresher decides every entry, so RPCs reuse its answers and never sweep
        watched = set(self.bus.watched())
        done = 0
        for entry in self._current():
            if entry.tick == tick:
                continue
            inputs = self._inputs(entry)
            if entry.result is not None and inputs == entry.inputs and inputs[0] is not None and (
                    0 <= tick - entry.tick < self.reuse_s / 2):
                continue
            with self._eval_lock:
                if entry.tick == tick:
                    continue
                before = entry.result
                self._evaluate_into(entry, tick)
                done += 1
            # What watch_demand does for the answers it decides: demand (or a warm window) woke an idle
            # ScaledObject, or one at zero with no data, whose stream is open, so push now rather than wait
            # for KEDA's next poll.
            asleep = isinstance(before, NoUsableData) or (isinstance(before, Answer) and not before.active)
            if entry.key in watched and asleep and self._wakes(entry, now):
                self.activate(entry.key, source="demand")
        return done

    def _overlay(self, entry: _Entry, base: Answer) -> Answer:
        d = base.decision
        replicas = max(d.replicas, 1)
        decision = d
        if replicas != d.replicas or not d.active:
            decision = Decision(replicas, Reason.ACTIVATION.value, True, d.details)
        answer = Answer(entry.metric_name, decision, True, True)
        self.metrics.record(entry.key, entry.config.model, answer)
        return answer

    def _wakes(self, entry: _Entry, now: float) -> bool:
        """Whether the policy's own latest answer wakes a target at zero, so a push should tell KEDA now.

        Only demand the policy saw counts, never an activation: that one pushed already, and read as
        demand it would activate again and renew its own hold for ever. A target that runs replicas is
        not woken (KEDA's next poll sees the activity before any cooldown ends), so a model first seen
        running is not mistaken for one that demand woke."""
        result = entry.result
        return (isinstance(result, Answer) and result.active and entry.at_zero
                and not self._activated(entry.key, now))

    def _activated(self, key: ScaledObjectKey, now: float) -> bool:
        last = self.bus.last_activation(key)
        # 0 <=: an activation stamped after `now` is from before a backward clock step; holding it would
        # stretch the hold by the whole step
        return last is not None and 0 <= now - last < self.activation_hold_s

    def _evaluate(self, entry: _Entry, now: float) -> Answer | NoUsableData:
        cfg = entry.config
        key = entry.key
        known = self._workloads(key) if self._workloads is not None else None
        why = "every sample is missing or stale"
        with self._history_lock:
            history = self._lookup(key, cfg)
            workload = known or assumed_workload(history, now)
            if cfg.variants and self._workloads is not None:  # the split needs every variant's Deployment
                workload = with_peers(workload, {v.name: self._workloads(ScaledObjectKey(key.namespace, v.name))
                                                 for v in cfg.variants if v.name != key.name})
            entry.at_zero = workload.current_replicas == 0
            if history is not None:
                state = entry.state
                last = self.bus.last_activation(key)
                if last is not None and last <= now and (state.last_activation_at is None
                                                         or last > state.last_activation_at):
                    state = record_activation(state, last)
                try:
                    decision, new_state = self._decide(history, cfg, state, workload, now)
                except NoData as nd:
                    why = nd.why  # below: zero, or UNAVAILABLE with this reason
                else:
                    entry.state = new_state
                    # With scaleToZero off, IsActive is always true: KEDA's minReplicaCount defaults to 0.
                    answer = Answer(entry.metric_name, decision, decision.active or not cfg.scale_to_zero)
                    entry.last_decision = decision
                    self.metrics.record(key, cfg.model, answer)
                    return answer
        at_zero = known is not None and known.current_replicas == 0
        idle = at_zero or (history is None and self._absent_means_idle(key, cfg, known, now))
        # an open warm window (scaler/schedule.py) wakes a model nothing says runs, with no data at all
        woken = warm_at_zero(cfg, known or WorkloadState(0, 0), now) \
            if cfg.scale_to_zero and (known is None or known.current_replicas == 0) else None
        if cfg.scale_to_zero and (idle or woken is not None):
            decision = woken or Decision(0, Reason.IDLE_ZERO.value, active=False)
            answer = Answer(entry.metric_name, decision, decision.active)
            entry.last_decision = answer.decision
            self.metrics.record(key, cfg.model, answer)
            return answer
        self.metrics.unavailable.labels(key.namespace, key.name, cfg.model).inc()
        count = known.current_replicas if known is not None else None
        if history is None:
            return NoUsableData(f"no replica of model {cfg.model!r} in namespace {key.namespace!r} has been "
                                f"seen yet (collection finds replicas by their `model` label)", known_replicas=count)
        return NoUsableData(f"no usable data for model {cfg.model!r} in namespace {key.namespace!r}, holding: {why}",
                            known_replicas=count)

    def _absent_means_idle(self, key: ScaledObjectKey, cfg: ScalerConfig, known: WorkloadState | None,
                           now: float) -> bool:
        """A model the source has never listed is idle (zero) only if nothing says replicas run and the source
        has answered lately; replicas running that nothing reports, or a source that has not answered (down, or
        the scaler just started), is missing data: UNAVAILABLE, and KEDA holds the count."""
        if known is not None and known.current_replicas > 0:
            return False
        if self._source_answered_at is None:
            return True
        last = self._source_answered_at(key, cfg)
        return last is not None and now - last <= cfg.stale_after

    def _lookup(self, key: ScaledObjectKey, cfg: ScalerConfig) -> HistoryView | None:
        if self._history_for is not None:
            return self._history_for(key, cfg)
        return self._histories(key.namespace, cfg.model) if self._histories is not None else None

    def is_active(self, key: ScaledObjectKey, metadata: Mapping[str, str]) -> bool:
        """IsActive: always true without scaleToZero; else the decision (raises NoUsableData)."""
        entry = self._entry(key, metadata)
        if not entry.config.scale_to_zero:
            return True
        now = self.clock()
        result = self._decided(entry, now)
        if self._activated(entry.key, now):
            return True  # the activation hold keeps the model awake whatever the data says
        if isinstance(result, NoUsableData):
            raise result
        return result.active

    def last_decision(self, key: ScaledObjectKey, metadata: Mapping[str, str]) -> Decision | None:
        entry = self._entries.get((key, metadata_key(metadata)))
        return entry.last_decision if entry else None

    # -- activations --------------------------------------------------------------------------------

    def activate(self, key: ScaledObjectKey, source: str = "http") -> int:
        """Record an activation and wake this pod's streams for `key` (thread-safe); returns streams woken."""
        self.metrics.activations.labels(key.namespace, key.name, source).inc()
        return self.bus.activate(key)

    def watched_entries(self) -> list[tuple[ScaledObjectKey, MetadataKey]]:
        """The current entries (`_current`) of the ScaledObjects with an open stream."""
        watched = set(self.bus.watched())
        current = {id(e) for e in self._current()}
        return [k for k, e in list(self._entries.items()) if k[0] in watched and id(e) in current]

    async def watch_demand(self, interval_s: float = 1.0) -> None:
        """Push `true` when demand wakes a ScaledObject that was inactive (e.g. `activationQuery` > 0).

        Only ScaledObjects with an open stream whose last answer was inactive, or no answer for want of
        data (a model at zero that nothing reports, which a warm window still wakes), are re-evaluated, so
        1,000 busy streams cost nothing here. Runs until cancelled.
        """
        while True:
            await asyncio.sleep(interval_s)
            for key, mkey in self.watched_entries():
                entry = self._entries.get((key, mkey))
                if entry is None or entry.result is None or (isinstance(entry.result, Answer)
                                                             and entry.result.active):
                    continue
                try:
                    # The policy's own answer, never the overlaid one: an activation's hold read as demand
                    # would activate again, renew the hold and keep an idle model from zero for ever.
                    now = self.clock()
                    self._decided(entry, now)
                    if self._wakes(entry, now):
                        self.activate(key, source="demand")
                except Exception as err:  # no data / bad config: the stream just waits
                    log.debug("demand check for %s: %s", key, err)

    def _maybe_sweep(self, now: float) -> None:
        """Forget ScaledObjects KEDA stopped asking about (deleted, or metadata changed). What is shared is let
        go only with its last user: a ScaledObject re-created with new metadata keeps its Kubernetes view and
        its series. The model stays watched at its source: a paused ScaledObject is not polled either, and
        its history must be whole when it comes back."""
        if now - self._last_sweep < min(60.0, self.forget_after_s) or not self._sweep_lock.acquire(blocking=False):
            return  # not due, or the other thread (RPCs, the refresher) is sweeping
        try:
            self._last_sweep = now
            entries = list(self._entries.items())
            # An open stream keeps its ScaledObject remembered, but not metadata it has outlived: KEDA restarts
            # the stream of a re-created (or edited) ScaledObject under the same name, and polls every trigger,
            # so an entry idle while another of the same ScaledObject is in use belongs to old metadata.
            in_use = {k[0] for k, e in entries if now - e.last_used <= self.forget_after_s}
            watched = set(self.bus.watched()) - in_use
            gone = [(k, e) for k, e in entries
                    if now - e.last_used > self.forget_after_s and k[0] not in watched]
            for k, _ in gone:
                self._entries.pop(k, None)
            self._release(gone)
        finally:
            self._sweep_lock.release()

    def _release(self, gone: list[tuple[tuple[ScaledObjectKey, MetadataKey], _Entry]]) -> None:
        live = list(self._entries.values())
        for _, e in gone:
            if self._on_forget is not None and not any(o.key == e.key for o in live):
                self._on_forget(e.key, e.config)
            if not any(o.key == e.key and o.config.model == e.config.model for o in live):
                self.metrics.forget((e.key.namespace, e.key.name, e.config.model))

    def known(self) -> list[Hashable]:
        return list(self._entries)


class DecisionRefresher:
    """A thread that runs `ScalerService.refresh` every `interval_s`: decisions follow collection off the
    RPC path (see the module docstring). Give the service a `reuse_s` of a few intervals."""

    def __init__(self, service: ScalerService, interval_s: float = 1.0) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.service = service
        self.interval_s = interval_s
        # the first refresh after one interval: at start there is nothing collected to decide on yet.
        # A step that raises is logged and the next goes on (common/periodic.py); RPCs still decide.
        self._loop = Periodic("scaler-decisions", interval_s, service.refresh, first_now=False)

    def start(self) -> None:
        self._loop.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._loop.stop(timeout_s)
