"""The replicas of one model and their lifecycle: pending -> loading -> ready -> draining -> gone.

A new pod is *pending* while it is scheduled (the cold start's scheduling phase) and *loading* while
it pulls the image, loads weights and warms up (the rest of the cold start); then it is *ready* and
the router sends it requests. A pod removed on scale-down stops receiving requests and *drains*: it
finishes what it holds (running and queued in its engine), then it is gone. GPUs count from the pod's
creation to its end, since the node's GPUs are held from scheduling on.

Which pods go on scale-down follows the ReplicaSet controller's order (kubernetes
pkg/controller/replicaset, `ActivePodsWithRanks`): pods not yet ready before ready ones, and among
equals the newest first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from keda_llm.simulator.hardware.coldstart import ColdStartModel
from keda_llm.simulator.hardware.perf import PerfModel
from keda_llm.simulator.hardware.replica import Replica, ReplicaConfig, Request


class Phase(str, Enum):
    PENDING = "pending"
    LOADING = "loading"
    READY = "ready"
    DRAINING = "draining"
    GONE = "gone"


@dataclass(eq=False)
class SimReplica:
    """One pod: its engine, its lifecycle times, and what the router has sent it."""

    index: int
    created_at: float
    scheduled_at: float  # pending -> loading
    ready_at: float  # loading -> ready (the end of its cold start)
    engine: Replica
    phase: Phase = Phase.PENDING
    outstanding: int = 0  # requests sent here and not yet finished
    stepping: bool = False  # an engine step is in flight (its end is on the event heap)
    removed_at: float | None = None  # scale-down picked it
    gone_at: float | None = None
    busy_prev: float = 0.0  # engine busy seconds at the previous observation (GPU utilization)
    step_end: float = 0.0  # when the engine step in flight ends (its time is counted busy up front)
    # the requests the step in flight finishes, and the KV blocks they free: the engine applies a step at its
    # start, a real one's gauges still count them until it ends (DetailedBackend.samples)
    finishing: int = 0
    finishing_blocks: int = 0
    # the gauges as the engine published them at its last iteration's end (SimConfig.gauges "published",
    # DetailedBackend): requests running and waiting, KV usage; the queue as the step in flight's schedule
    # left it (what its end publishes: arrivals during a step reach the scheduler after it); and a decode run
    # in flight, (start, the requests it finishes, iterations), which publishes at each iteration's end
    pub_running: int = 0
    pub_waiting: int = 0
    pub_kv: float = 0.0
    step_waiting: int = 0
    run: tuple[float, list[Request], int] | None = None

    @property
    def pod(self) -> str:
        return f"replica-{self.index}"

    @property
    def startup_seconds(self) -> float:
        return self.ready_at - self.created_at

    @property
    def starting(self) -> bool:
        return self.phase in (Phase.PENDING, Phase.LOADING)


@dataclass
class ClusterStats:
    """Totals the report needs; GPU-seconds are summed as pods end (and at the end of the run)."""

    gpu_seconds: float = 0.0
    cold_starts: int = 0
    created: int = 0
    removed: int = 0
    zero_seconds: float = 0.0
    starts: list[float] = field(default_factory=list)  # each cold start's duration


class Cluster:
    """All pods of one model. The caller moves time; this object only changes state when told to.

    `gpus_per_replica` turns pod-seconds into GPU-seconds (tensor parallelism). `count_from_s`: the
    totals (GPU-seconds, cold starts, time at zero) count from then on: a run whose first part is a
    lead-in (traffic from before the scored window) pays only for the window.
    """

    def __init__(self, config: ReplicaConfig, perf: PerfModel, cold_start: ColdStartModel,
                 rng: np.random.Generator, gpus_per_replica: int = 1, count_from_s: float = 0.0) -> None:
        if gpus_per_replica < 1:
            raise ValueError(f"cluster: gpus_per_replica must be >= 1, got {gpus_per_replica}")
        if not (math.isfinite(count_from_s) and count_from_s >= 0):
            raise ValueError(f"cluster: count_from_s must be finite and >= 0, got {count_from_s}")
        self.count_from_s = count_from_s
        self.config = config
        self.perf = perf
        self.cold_start = cold_start
        self.rng = rng
        self.gpus_per_replica = gpus_per_replica
        self.replicas: list[SimReplica] = []  # every pod not yet gone, in creation order
        self.stats = ClusterStats()
        self._next_index = 0
        self._zero_since: float | None = 0.0  # no pods when the run starts

    # -- views -----------------------------------------------------------------------------------
    def ready(self) -> list[SimReplica]:
        return [r for r in self.replicas if r.phase is Phase.READY]

    def starting(self) -> list[SimReplica]:
        return [r for r in self.replicas if r.starting]

    def draining(self) -> list[SimReplica]:
        return [r for r in self.replicas if r.phase is Phase.DRAINING]

    def active(self) -> list[SimReplica]:
        """Pods that count toward the Deployment (status.replicas): all but the draining ones."""
        return [r for r in self.replicas if r.phase is not Phase.DRAINING]

    # -- changes ---------------------------------------------------------------------------------
    def add(self, now: float, cold_start_s: float | None = None, *, warm: bool = False) -> SimReplica:
        """Create a pod at `now`. Its cold start is drawn from the model unless given; `warm`: ready at once
        (the pods that exist when the run starts)."""
        if warm:
            sched = total = 0.0
        elif cold_start_s is not None:
            if cold_start_s < 0:
                raise ValueError(f"cluster: cold start must be >= 0, got {cold_start_s}")
            medians = {ph.name: ph.median_s for ph in self.cold_start.phases}
            share = medians.get("scheduling", 0.0) / max(sum(medians.values()), 1e-12)
            sched, total = cold_start_s * share, cold_start_s
        else:
            phases = self.cold_start.sample_phases(self.rng)
            sched, total = phases.get("scheduling", 0.0), sum(phases.values())
        r = SimReplica(self._next_index, now, now + sched, now + total, Replica(self.config, self.perf))
        self._next_index += 1
        if warm:
            r.phase = Phase.READY
        else:
            if now >= self.count_from_s:
                self.stats.cold_starts += 1
            self.stats.starts.append(total)
            r.phase = Phase.PENDING if sched > 0 else Phase.LOADING
        self.stats.created += 1
        self.replicas.append(r)
        self._zero_check(now)
        return r

    def advance_phase(self, r: SimReplica, now: float) -> None:
        """The pod reached its next lifecycle time (scheduled, or ready)."""
        if r.phase is Phase.PENDING and now >= r.scheduled_at:
            r.phase = Phase.LOADING
        if r.phase is Phase.LOADING and now >= r.ready_at:
            r.phase = Phase.READY

    def pick_for_removal(self, n: int) -> list[SimReplica]:
        """The `n` pods a ReplicaSet deletes first: not ready before ready, then newest first."""
        candidates = self.active()
        ranked = sorted(candidates, key=lambda r: (r.phase is Phase.READY, -r.created_at, -r.index))
        return ranked[:n]

    def remove(self, r: SimReplica, now: float) -> bool:
        """Scale-down removes the pod: a starting one is gone at once, a ready one drains first.
        Returns True when it is gone now."""
        r.removed_at = now
        self.stats.removed += 1
        if r.starting or (r.outstanding == 0 and not r.stepping):
            self._gone(r, now)
            return True
        r.phase = Phase.DRAINING
        return False

    def finish_drain(self, r: SimReplica, now: float) -> None:
        """A draining pod finished its last request."""
        if r.phase is Phase.DRAINING and r.outstanding == 0 and not r.stepping:
            self._gone(r, now)

    def _gone(self, r: SimReplica, now: float) -> None:
        r.phase = Phase.GONE
        r.gone_at = now
        self.stats.gpu_seconds += self._counted(r.created_at, now) * self.gpus_per_replica
        self.replicas.remove(r)
        self._zero_check(now)

    def _zero_check(self, now: float) -> None:
        if not self.replicas and self._zero_since is None:
            self._zero_since = now
        elif self.replicas and self._zero_since is not None:
            self.stats.zero_seconds += self._counted(self._zero_since, now)
            self._zero_since = None

    def _counted(self, since: float, now: float) -> float:
        """The part of [since, now] that counts (from `count_from_s` on)."""
        return max(0.0, now - max(since, self.count_from_s))

    def close(self, now: float) -> None:
        """End of the run: count the GPU time of the pods still there, and time at zero so far."""
        for r in self.replicas:
            self.stats.gpu_seconds += self._counted(r.created_at, now) * self.gpus_per_replica
        if self._zero_since is not None:
            self.stats.zero_seconds += self._counted(self._zero_since, now)
            self._zero_since = now

    def route_to(self, r: SimReplica, request: Request, now: float) -> bool:
        """Hand a request to a ready pod's engine; False when it can never fit in its KV cache."""
        if not r.engine.add(request, now):
            return False
        r.outstanding += 1
        return True
