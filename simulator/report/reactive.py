"""A perfectly informed reactive schedule: the oracle's own count for each bucket, known the moment the bucket
starts, ready one cold start later, held for a while.

Why: the oracle meets its target by having each minute's replicas ready as the minute begins, which takes
knowing the future. A reactive policy sees a burst only once it lands, and what it asks for serves a cold
start later. This schedule is what any reactive policy could at best do with a perfect signal: it reads
exactly the count the oracle found each bucket needs (no estimate, no noise), asks for it at once, and keeps
the largest count of the last `hold` buckets (a scale-down delay). Where it cannot meet the oracle's target
near the oracle's cost, no policy that reacts can, and only capacity placed ahead of a burst (a forecast
that sees it coming, a floor) meets the trace. Used by scripts/reactive_reference.py.
"""

from __future__ import annotations

import math

import numpy as np

from keda_llm.simulator.control.controllers import PodPlan
from keda_llm.simulator.hardware.coldstart import ColdStartModel
from keda_llm.simulator.report.oracle import COLD_TABLE_SEED, OraclePlan, cold_start_table, pods_from_counts


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


def reactive_pods(plan: OraclePlan, cold_start: ColdStartModel, hold: int, headroom: float = 1.0,
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


__all__ = ["delay_buckets", "reactive_counts", "reactive_pods"]
