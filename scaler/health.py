"""Degraded replicas as partial capacity: each fresh replica's fraction of a whole one, and the deficit.

Pure. Every autoscaler assumes identical replicas; a replica on a throttled or faulting GPU, or one that
simply generates slower than its peers, serves less. Two rules, the smaller fraction wins:

- GPU faults (`degradedFraction`, default 0.5): the exporter's `llm_replica_degraded` reasons
  (gpu_throttled, gpu_xid, gpu_ecc; exporter/degraded.py says when each holds).
- Slow (`slowReplicaRatio`, default 0.7): a busy replica (at least one request running on average over
  the window) whose generated tokens per second per running request fall below the ratio times the
  median of its busy peers' counts as min(1, its rate / that median). Per running request, so a replica
  that the router simply gave less work is not called slow; peers only, so the replica's own rate does
  not pull the median towards itself (with two replicas the slow one is judged against the other).

This lives in the scaler, not the exporter: the peer median needs every replica of the model, and only
the scaler sees them all (an exporter sees the one or two replicas on its node). The exporter reports
facts with a reason; the fractions, being knobs of the ScaledObject, are applied here.

The deficit Σ(1 - fraction) is what the fresh replicas fall short of as many whole ones: the policy's
desired count is in whole (healthy) replicas, so the count that carries it is desired + deficit (while
any demand is there); scaler/decide.py adds it to both windows.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from keda_llm.common.vocabulary import DEGRADED_REASONS
from keda_llm.scaler.history import ReplicaWindow
from keda_llm.scaler.policy import Demand

HEALTHY = "healthy"
SLOW = "slow"
#: Every reason a replica's fraction can carry (the `reason` label of the scaler's replica metric).
REASONS = (HEALTHY, *DEGRADED_REASONS, SLOW)


@dataclass(frozen=True)
class ReplicaHealth:
    pod: str
    fraction: float  # of a whole replica, in [0, 1]
    reason: str  # one of REASONS: why it is below 1 (HEALTHY when it is 1)


@dataclass(frozen=True)
class Health:
    replicas: tuple[ReplicaHealth, ...] = ()

    @property
    def deficit(self) -> float:
        """Σ(1 - fraction): how many whole replicas the fresh ones fall short of."""
        return sum(1.0 - r.fraction for r in self.replicas)

    def apply(self, demand: Demand) -> Demand:
        """`demand` with the deficit added to its desired count (none without demand: nothing to carry)."""
        if demand.desired <= 0 or self.deficit <= 0:
            return demand
        return Demand(demand.demand, demand.per_replica, demand.desired + self.deficit,
                      {**demand.parts, "desired_whole_replicas": demand.desired})

    def details(self) -> dict[str, float]:
        """For the decision's details: the deficit, the count per reason, and each degraded pod's fraction
        under `replica_fraction:<reason>:<pod>` (the scaler's /metrics turns those into a labelled gauge)."""
        out = {"capacity_fractions": sum(r.fraction for r in self.replicas), "capacity_deficit": self.deficit}
        for reason in REASONS[1:]:
            out["degraded_" + reason] = float(sum(1 for r in self.replicas if r.reason == reason))
        for r in self.replicas:
            if r.reason != HEALTHY:
                out[f"replica_fraction:{r.reason}:{r.pod}"] = r.fraction
        return out


def assess(windows: Sequence[ReplicaWindow], degraded_fraction: float, slow_ratio: float) -> Health:
    """Each replica's fraction by the two rules of the module docstring."""
    rates = {w.pod: w.generation_rate / w.running for w in windows
             if w.running is not None and w.running >= 1.0 and w.generation_rate is not None}
    ordered = sorted(rates.values())
    out = []
    for w in windows:
        fraction, reason = 1.0, HEALTHY
        gpu = [r for r in DEGRADED_REASONS if r in w.degraded]
        if gpu and degraded_fraction < 1.0:
            fraction, reason = degraded_fraction, gpu[0]
        own = rates.get(w.pod)
        if slow_ratio > 0 and own is not None and len(ordered) > 1:
            median = _median_without(ordered, own)
            if median > 0 and own < slow_ratio * median and own / median < fraction:
                fraction, reason = own / median, SLOW
        out.append(ReplicaHealth(w.pod, fraction, reason))
    return Health(tuple(out))


def _median_without(ordered: list[float], value: float) -> float:
    """The median of the sorted `ordered` with one occurrence of `value` taken out (the replica's peers)."""
    i = bisect.bisect_left(ordered, value)
    return statistics.median(ordered[:i] + ordered[i + 1:])
