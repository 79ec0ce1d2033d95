"""What decides the replica count in a simulation: KEDA+HPA over an external scaler, or a fixed schedule.

`KedaController` runs the one KEDA+HPA emulator (simulator.control.KedaHpaLoop) over any
ExternalScaler: the scaler's own service (simulator.control.scaler) or a baseline (simulator.control.baselines).
It tells the loop what the cluster has (pods and ready pods), carries out the count the loop writes
to /scale, and turns gateway activations into StreamIsActive pushes for `external-push` triggers.
`ScheduleController` replays a plan of pod lifetimes (static provisioning, the oracle).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from keda_llm.simulator.cluster.engine import ObservedState, Simulation
from keda_llm.simulator.cluster.pods import SimReplica
from keda_llm.simulator.control import ControlEvent, ExternalScaler, KedaHpaLoop, KedaSettings, WorkloadStatus
from keda_llm.simulator.control.hpa import HPAConfig


@runtime_checkable
class Observing(Protocol):
    """A scaler that reads the simulated metrics (every collection cycle)."""

    def observe(self, state: ObservedState, sim: Simulation) -> bool:
        """Take one collection cycle; True when it wants a StreamIsActive push now."""
        ...


@runtime_checkable
class Activatable(Protocol):
    """A scaler the gateway can wake (POST /v1/activate)."""

    def activate(self, now: float) -> bool:
        """Record an activation at `now`; True when it wants a StreamIsActive push now."""
        ...


class KedaController:
    """One ScaledObject under the KEDA+HPA emulator; `initial_replicas` pods exist (ready) at time 0."""

    def __init__(self, name: str, settings: KedaSettings, scaler: ExternalScaler | Sequence[ExternalScaler], *,
                 initial_replicas: int = 1, hpa: HPAConfig | None = None, hpa_phase_s: float = 0.0,
                 gateway_activation_interval_s: float = 1.0) -> None:
        if initial_replicas < 0:
            raise ValueError(f"initial_replicas must be >= 0, got {initial_replicas}")
        self.name = name
        self.settings = settings
        self.scalers = tuple(scaler) if isinstance(scaler, Sequence) else (scaler,)
        # which optional protocols each scaler speaks, checked once: a runtime protocol check walks the
        # protocol's members every time, and observe() runs every collection cycle
        self._observing = tuple(s for s in self.scalers if isinstance(s, Observing))
        self._activatable = tuple(s for s in self.scalers if isinstance(s, Activatable))
        self._scaler_arg = scaler
        self.initial_replicas = initial_replicas
        self.hpa = hpa
        self.hpa_phase_s = hpa_phase_s
        self.loop: KedaHpaLoop | None = None
        self.events: list[ControlEvent] = []
        self._activation_interval = gateway_activation_interval_s
        self._last_activation = -math.inf
        self._push = any(t.is_push for t in settings.triggers)

    def start(self, sim: Simulation) -> None:
        for _ in range(self.initial_replicas):
            sim.add_replica(warm=True)
        sim.desired = self.initial_replicas
        self.loop = KedaHpaLoop(self.settings, self._scaler_arg, start=sim.now, initial_replicas=self.initial_replicas,
                                hpa=self.hpa, hpa_phase_s=self.hpa_phase_s)

    def next_time(self) -> float | None:
        return None if self.loop is None else self.loop.next_tick()

    def tick(self, sim: Simulation) -> None:
        assert self.loop is not None, "start() first"
        active = sim.cluster.active()
        ready = sum(1 for r in active if r.phase.value == "ready")
        out = self.loop.advance_to(sim.now, WorkloadStatus(len(active), ready))
        self.events.extend(out)
        if self.loop.spec_replicas != sim.desired:
            sim.scale_to(self.loop.spec_replicas)

    def _push_now(self, sim: Simulation) -> None:
        assert self.loop is not None
        self.loop.push(sim.now, True)
        self.tick(sim)

    def observe(self, sim: Simulation, state: ObservedState) -> None:
        want = False
        for s in self._observing:
            want |= s.observe(state, sim)
        if want and self._push:
            self._push_now(sim)

    def gateway_hold(self, sim: Simulation) -> None:
        if sim.now - self._last_activation < self._activation_interval:
            return
        self._last_activation = sim.now
        want = False
        for s in self._activatable:
            want |= s.activate(sim.now)
        if want and self._push:
            self._push_now(sim)


@dataclass(frozen=True)
class PodPlan:
    """One pod of a schedule: ready by `ready_at` (created one cold start earlier), removed at `remove_at`."""

    ready_at: float
    remove_at: float
    cold_start_s: float

    @property
    def create_at(self) -> float:
        return self.ready_at - self.cold_start_s


class ScheduleController:
    """Replays pod lifetimes decided in advance. Pods whose creation falls before time 0 exist, ready, at 0
    (provisioned before the trace starts, as any policy's initial pods are)."""

    def __init__(self, name: str, plan: Sequence[PodPlan]) -> None:
        self.name = name
        self.plan = sorted(plan, key=lambda p: (p.create_at, p.ready_at))
        self._actions: list[tuple[float, int, int]] = []  # (time, 0 create | 1 remove, plan index)
        self._pods: dict[int, SimReplica] = {}
        self.events: list[tuple[float, str, int]] = []

    def start(self, sim: Simulation) -> None:
        acts: list[tuple[float, int, int]] = []
        for i, p in enumerate(self.plan):
            if p.create_at <= sim.now:
                self._pods[i] = sim.add_replica(warm=True)
            else:
                acts.append((p.create_at, 0, i))
            if math.isfinite(p.remove_at):
                acts.append((p.remove_at, 1, i))
        self._actions = sorted(acts, reverse=True)
        sim.desired = len(self._pods)

    def next_time(self) -> float | None:
        return self._actions[-1][0] if self._actions else None

    def tick(self, sim: Simulation) -> None:
        while self._actions and self._actions[-1][0] <= sim.now:
            _, kind, i = self._actions.pop()
            if kind == 0:
                self._pods[i] = sim.add_replica(self.plan[i].cold_start_s)
                sim.desired += 1
            elif i in self._pods:
                sim.remove_replica(self._pods.pop(i))
                sim.desired -= 1
            sim.scale_events += 1
            self.events.append((sim.now, "create" if kind == 0 else "remove", i))

    def observe(self, sim: Simulation, state: ObservedState) -> None:
        return None

    def gateway_hold(self, sim: Simulation) -> None:
        return None
