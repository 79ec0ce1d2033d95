"""A perfectly informed reactive schedule: the oracle's own count for each bucket, known the moment the bucket
starts, ready one cold start later, held for a while.

Why: the oracle meets its target by having each minute's replicas ready as the minute begins, which takes
knowing the future. A reactive policy sees a burst only once it lands, and what it asks for serves a cold
start later. This schedule is what a reactive policy could do with a perfect signal: it reads
exactly the count the oracle found each bucket needs (no estimate, no noise), asks for it at once, and keeps
the largest count of the last `hold` buckets (a scale-down delay). Where it cannot meet the oracle's target
near the oracle's cost, reacting is not enough, and capacity placed ahead of a burst (a forecast that sees
it coming, a floor) is what meets the trace. A reference, not a strict bound: it holds and pads every
bucket alike, and a policy that sizes each burst as it reads it can come in a little under it (ours on 8B
A100 azure2023-code: 1.61x the oracle where its cheapest setting is 1.66x; docs/simulator-results.md).
Used by scripts/reactive_reference.py and, as each preset's informed reactive column, scripts/preset_table.py.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from keda_llm.simulator.control.controllers import PodPlan, ScheduleController
from keda_llm.simulator.hardware.coldstart import ColdStartModel
from keda_llm.simulator.report.oracle import COLD_TABLE_SEED, cold_start_table, pods_from_counts
from keda_llm.simulator.report.summary import summarize
from keda_llm.simulator.run import Backtest, simulate
from keda_llm.simulator.workload.traces import Trace

#: the holds (minutes) and headrooms the cheapest reactive setting is searched over: up to half an hour kept, and a
#: quarter more than the count (which doubles a count of one)
HOLDS = (0, 1, 2, 4, 6, 10, 15, 20, 30)
HEADROOMS = (1.0, 1.25)
#: a coarser set of holds, for a quick look (`keda-llm tune --quick`): 8 replays where HOLDS makes 18
QUICK_HOLDS = (0, 2, 6, 20)


class CountPlan(Protocol):
    """What the schedule reads of an oracle: its count per bucket and its target over all requests
    (an OraclePlan, or `counted`'s view of a stored schedule)."""

    @property
    def counts(self) -> np.ndarray: ...
    @property
    def bucket_s(self) -> float: ...
    @property
    def target_over_all(self) -> float: ...


@dataclass(frozen=True)
class Counted:
    """An oracle known by its pods alone (the frontier's store keeps the schedule, not the plan): `counted`."""

    counts: np.ndarray
    bucket_s: float
    target_over_all: float


def counted(pods: Sequence[PodPlan], duration_s: float, target_over_all: float, bucket_s: float = 60.0) -> Counted:
    """The count of pods ready at the middle of each `bucket_s` bucket of [0, duration_s): the oracle's count per
    minute, read off a schedule planned on from a policy's (whose pods come and go on the buckets the plan used)."""
    if not (bucket_s > 0 and math.isfinite(duration_s) and duration_s >= 0):
        raise ValueError(f"bucket_s must be > 0 and duration_s finite and >= 0, got {bucket_s} and {duration_s}")
    mid = (np.arange(math.ceil(duration_s / bucket_s)) + 0.5) * bucket_s
    ready = np.array([p.ready_at for p in pods], dtype=np.float64)
    gone = np.array([p.remove_at for p in pods], dtype=np.float64)
    counts = ((ready[None, :] <= mid[:, None]) & (gone[None, :] > mid[:, None])).sum(axis=1)
    return Counted(counts.astype(np.int64), bucket_s, target_over_all)


def reactive_counts(counts: np.ndarray, delay: int, hold: int, headroom: float = 1.0) -> np.ndarray:
    """Per bucket b: the largest of counts[b - delay - hold .. b - delay] x `headroom`, rounded up.

    The buckets wrap around: the trace is taken as one period of traffic that repeats, as the backtests'
    lead-in takes it (simulator/cluster/lead_in.py), so the first buckets see the trace's last ones."""
    if delay < 0 or hold < 0:
        raise ValueError(f"delay and hold are bucket counts >= 0, got {delay} and {hold}")
    if not (math.isfinite(headroom) and headroom > 0):
        raise ValueError(f"headroom must be a positive number, got {headroom}")
    c = np.asarray(counts, dtype=np.int64)
    n = len(c)
    if n == 0:
        return c.copy()
    idx = (np.arange(n)[:, None] - delay - np.arange(hold + 1)[None, :]) % n
    out: np.ndarray = np.ceil(c[idx].max(axis=1) * headroom - 1e-9).astype(np.int64)
    return out


def delay_buckets(cold_start: ColdStartModel, bucket_s: float) -> int:
    """Whole buckets in the median cold start, rounded down: a count asked for as bucket b starts is served
    from bucket b + this. Rounding down is generous to the schedule (its pods may be created up to a bucket
    before the need they answer is known), so what it cannot meet, a real reactive policy cannot either."""
    return int(cold_start.quantile(0.5) // bucket_s)


def reactive_pods(plan: CountPlan, cold_start: ColdStartModel, hold: int, headroom: float = 1.0,
                  seed: int = 0, max_replicas: int = 1000, resolution_s: float = 60.0) -> list[PodPlan]:
    """The pods of `reactive_counts` over the oracle's plan, its buckets cut into `resolution_s` steps where
    they are longer (the oracle plans a long trace in 5-minute buckets; known only as such a bucket starts,
    its count would be known up to 5 minutes ahead, and a median cold start rounded down to whole buckets
    would be no delay at all). `hold` is in those steps. Cold starts come from a table drawn as the oracle
    draws its own (seed + COLD_TABLE_SEED, `max_replicas` slots: pass the backtest's seed and cap), so at
    the oracle's own resolution the two schedules differ in cost only where their pods do."""
    split = max(1, int(plan.bucket_s // resolution_s)) if resolution_s > 0 else 1
    step = plan.bucket_s / split
    counts = np.repeat(np.asarray(plan.counts, dtype=np.int64), split)
    counts = np.minimum(reactive_counts(counts, delay_buckets(cold_start, step), hold, headroom), max_replicas)
    colds = cold_start_table(cold_start, seed + COLD_TABLE_SEED, max_replicas, len(counts))
    return pods_from_counts(counts, step, cold_start, np.random.default_rng(seed + COLD_TABLE_SEED), colds)


@dataclass(frozen=True)
class ReactivePoint:
    """One setting of the schedule replayed: its SLO attainment over all requests and GPU-hours."""

    hold: int  # minutes the largest count is kept
    headroom: float
    attainment: float
    gpu_hours: float
    cpu_s: float


def settings_pods(plan: CountPlan, bt: Backtest, holds: Sequence[int] = HOLDS,
                  headrooms: Sequence[float] = HEADROOMS) -> list[tuple[int, float, list[PodPlan]]]:
    """(hold, headroom, the schedule's pods) for each setting, drawn as `reactive_point` draws them: what a
    caller replays elsewhere (a worker process) without shipping the plan there."""
    cold = bt.preset.cold_start(bt.cold_start)
    return [(h, r, reactive_pods(plan, cold, h, r, bt.seed, bt.max_replicas)) for r in headrooms for h in holds]


def replay(trace: Trace, bt: Backtest, hold: int, headroom: float, pods: list[PodPlan]) -> ReactivePoint:
    """One setting's pods replayed on `trace` in the backtest's mode (a schedule planned in advance runs from
    the window's start, the lead-in unplayed, as the oracle's does)."""
    t0 = time.process_time()
    s = summarize(simulate(trace, bt, ScheduleController("reactive", pods), bt.resolved_mode(trace)), bt.slo)
    return ReactivePoint(hold, headroom, s.slo_attainment, s.gpu_hours, time.process_time() - t0)


def reactive_point(trace: Trace, bt: Backtest, plan: CountPlan, hold: int, headroom: float) -> ReactivePoint:
    """The schedule at one setting, replayed on `trace` (`replay`)."""
    ((_, _, pods),) = settings_pods(plan, bt, (hold,), (headroom,))
    return replay(trace, bt, hold, headroom, pods)


def cheapest_meeting(points: Sequence[ReactivePoint], target: float) -> ReactivePoint | None:
    """The fewest GPU-hours among the settings that meet `target` (SLO attainment over all requests); None
    where none does."""
    meeting = [p for p in points if p.attainment >= target - 1e-9]
    return min(meeting, key=lambda p: p.gpu_hours) if meeting else None


def cheapest_reactive(trace: Trace, bt: Backtest, plan: CountPlan, holds: Sequence[int] = HOLDS,
                      headrooms: Sequence[float] = HEADROOMS) -> tuple[ReactivePoint | None, ReactivePoint]:
    """(the cheapest setting meeting the oracle's target or None, the setting of best attainment) over
    `holds` x `headrooms`: what reacting on a perfect signal costs on this trace, preset and SLO."""
    points = [replay(trace, bt, h, r, pods) for h, r, pods in settings_pods(plan, bt, holds, headrooms)]
    return cheapest_meeting(points, plan.target_over_all), best_of(points)


def best_of(points: Sequence[ReactivePoint]) -> ReactivePoint:
    """The setting of best attainment (the cheaper at a tie)."""
    return min(points, key=lambda p: (-p.attainment, p.gpu_hours))


__all__ = [
    "HEADROOMS",
    "HOLDS",
    "QUICK_HOLDS",
    "CountPlan",
    "Counted",
    "ReactivePoint",
    "best_of",
    "cheapest_meeting",
    "cheapest_reactive",
    "counted",
    "delay_buckets",
    "reactive_counts",
    "reactive_pods",
    "reactive_point",
    "replay",
    "settings_pods",
]
