"""KEDA + HPA on one simulated clock: the control loop the scaler's tests, the simulator and the demo share.

The caller owns the clock and the workload: it calls `advance_to(t, status)` with the pods that exist
and are ready (pods take minutes to start, which only the caller models) and reads back
`spec_replicas`, the count KEDA and the HPA wrote to the target's /scale, plus the events of the
interval. Inside, three kinds of tick run in time order, each at its own instant:
  push   - StreamIsActive messages (`push()` or a scaler implementing PushSource), first at a tie;
  poll   - KEDA's scale loop: at the start, then every pollingInterval;
  hpa    - the HPA sync: every sync period (15 s), from `start + hpa_phase_s`.
Ties are broken by that order, then by insertion, so a run is deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from keda_llm.simulator.control.hpa import HPAConfig, HPAResult, HPAState, ScaleSubresource, hpa_sync
from keda_llm.simulator.control.keda import ControlEvent, ExternalScaler, KedaOperator, PushSource
from keda_llm.simulator.control.scaledobject import KedaSettings

_PUSH, _POLL, _HPA = 0, 1, 2


@dataclass(frozen=True)
class WorkloadStatus:
    """The scale target's pods as the caller models them: all that exist (starting or ready), and ready."""

    replicas: int
    ready_replicas: int

    def __post_init__(self) -> None:
        if not 0 <= self.ready_replicas <= self.replicas:
            raise ValueError(f"need 0 <= ready_replicas ({self.ready_replicas}) <= replicas ({self.replicas})")


class KedaHpaLoop:
    """One ScaledObject under KEDA and its HPA.

    `scaler`: the external scaler (one for all triggers, or one per trigger). `hpa`: the HPA config;
    default `settings.hpa_config()` (the cluster defaults named in scaler/scaledobject.py).
    `initial_replicas`: the target's spec.replicas when the ScaledObject is created at `start`.
    """

    def __init__(self, settings: KedaSettings, scaler: ExternalScaler | Sequence[ExternalScaler], *,
                 start: float = 0.0, initial_replicas: int = 0, hpa: HPAConfig | None = None,
                 hpa_phase_s: float = 0.0, fallback_counts_on_poll: bool = True) -> None:
        if initial_replicas < 0:
            raise ValueError(f"initial_replicas must be >= 0, got {initial_replicas}")
        self.settings = settings
        self.hpa_config = hpa if hpa is not None else settings.hpa_config()
        self.keda = KedaOperator(settings, scaler, created_at=start, fallback_counts_on_poll=fallback_counts_on_poll)
        scalers = tuple(scaler) if isinstance(scaler, Sequence) else (scaler,)
        # the scalers that push, checked once (a runtime protocol check walks its members on every call)
        self._push_sources = tuple(s for s in scalers if isinstance(s, PushSource))
        self.hpa_state = HPAState()
        self.spec_replicas = initial_replicas
        self.now = start
        self.events: list[ControlEvent] = []
        self.last_hpa: HPAResult | None = None
        self._next_poll = start
        self._next_hpa = start + hpa_phase_s
        self._pushes: list[tuple[float, int, bool]] = []
        self._seq = 0
        self._status: WorkloadStatus | None = None

    # ------------------------------------------------------------------------------------- inputs

    def push(self, at: float, result: bool = True) -> None:
        """Queue a StreamIsActive message arriving at `at` (not before the loop's current time)."""
        if at < self.now:
            raise ValueError(f"push at {at} is before the loop's current time {self.now}")
        self._seq += 1
        self._pushes.append((at, self._seq, result))

    def set_spec_replicas(self, replicas: int) -> None:
        """Someone else (kubectl scale, a rollout) changed the target's spec.replicas."""
        if replicas < 0:
            raise ValueError(f"replicas must be >= 0, got {replicas}")
        self.spec_replicas = replicas

    def next_tick(self) -> float:
        """When the next poll, HPA sync or queued push happens."""
        candidates = [self._next_poll, self._next_hpa, *(p[0] for p in self._pushes)]
        return min(candidates)

    # -------------------------------------------------------------------------------------- run

    def advance_to(self, now: float, status: WorkloadStatus | None = None) -> list[ControlEvent]:
        """Run every tick due up to and including `now`; `status` holds for the whole interval
        (None: every spec replica exists and is ready). Returns the events of the interval."""
        if now < self.now:
            raise ValueError(f"time goes forward only: {now} < {self.now}")
        self._status = status
        for scaler in self._push_sources:
            for result in scaler.take_pushes():
                self.push(self.now, result)
        out: list[ControlEvent] = []
        while True:
            due = self._next_due(now)
            if due is None:
                break
            at, kind = due
            self.now = at
            out.extend(self._run(kind, at))
        self.now = now
        self.events.extend(out)
        return out

    def _next_due(self, until: float) -> tuple[float, int] | None:
        keys: list[tuple[float, int, int]] = [(self._next_poll, _POLL, 0), (self._next_hpa, _HPA, 0)]
        if self._pushes:
            first = min(self._pushes)
            keys.append((first[0], _PUSH, first[1]))
        at, kind, _ = min(keys)
        return (at, kind) if at <= until else None

    def _scale(self) -> ScaleSubresource:
        s = self._status
        if s is None:
            return ScaleSubresource(self.spec_replicas, self.spec_replicas, self.spec_replicas)
        return ScaleSubresource(self.spec_replicas, s.replicas, s.ready_replicas)

    def _run(self, kind: int, at: float) -> list[ControlEvent]:
        if kind == _PUSH:
            first = min(self._pushes)
            self._pushes.remove(first)
            self.spec_replicas, events = self.keda.push(at, self.spec_replicas, first[2])
            return events
        if kind == _POLL:
            self._next_poll = at + self.settings.polling_interval_s
            self.spec_replicas, events = self.keda.poll(at, self.spec_replicas)
            return events
        self._next_hpa = at + self.hpa_config.sync_period_s
        return self._hpa_sync(at)

    def _hpa_sync(self, at: float) -> list[ControlEvent]:
        if self.keda.hpa_metrics is None or self.spec_replicas == 0:
            return []  # no HPA yet, or ScalingDisabled at zero: the HPA queries no metrics
        metrics, events = self.keda.hpa_query(at, self.spec_replicas)
        result, self.hpa_state = hpa_sync(self.hpa_config, self.hpa_state, at, self._scale(), metrics)
        self.last_hpa = result
        if result.rescale:
            up = result.desired_replicas > self.spec_replicas
            events.append(ControlEvent(at, "hpa_scale_up" if up else "hpa_scale_down", self.spec_replicas,
                                       result.desired_replicas, result.reason))
            self.spec_replicas = result.desired_replicas
        return events
