"""The ITL floor: the inter-token latency a replica shows with (almost) nothing else in its batch.

Why: the latency term (scaler/slo.py) sizes the count as ready x observed ITL / target, which assumes
the ITL falls in proportion as each replica's batch does. It does not fall below the time one decode
step takes at a batch of one (the weights read once per token: an 8B model on an L4 is about 70 ms), so
a `targetInterTokenLatency` under that floor is met by no count, and the proportional term asked for
more replicas every poll up to `maxReplicaCount` (8B on L4, the shipped ScaledObject's 50 ms target on
a 100 ms SLO, an hour of azure2023-conv: 3.32x the oracle's GPU-hours, static provisioning 1.40x).
The engines do not report the floor, so it is read from how their ITL moves with their batch: per
replica and collection, (requests running, mean ITL over the interval), fitted as ITL = floor + slope x
running by least squares weighted by the tokens each mean covers. Decode is memory-bound at the batches
served, so the line is close where decode makes the ITL; where prefill does (a replica taking a burst
alone, or prefilling a backlog), the guards in `estimate` keep the fit from reading prefill as a floor.
A floor read low only leaves the target as set. Pure: arrays in, a number out.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

MIN_SAMPLES = 8  # replica-collections with tokens and a batch: fewer fit noise
MIN_SPREAD = 2.0  # the batch's 90th percentile over its 10th: the fit needs the batch to have moved this much
MIN_SPREAD_REQUESTS = 2.0  # ... and by this many requests
NEAR_BATCH = 16.0  # ... and its 10th percentile at most this: the line is read near one request, not far past it


def estimate(running: npt.NDArray[np.float64], itl_sum_rate: npt.NDArray[np.float64],
             itl_count_rate: npt.NDArray[np.float64]) -> float | None:
    """The fitted ITL at a batch of one request, seconds, from samples of (running, ITL _sum rate, ITL
    _count rate); None when the samples cannot say: too few, a batch that did not move enough
    (MIN_SPREAD) or never came near one request (NEAR_BATCH: a replica alone under a burst, 65-140
    running and its ITL all prefill, fitted 62 ms where the 70B's floor is 18), or an ITL that does not
    grow with the batch. At most the lowest ITL a sample showed (a step is never faster than the floor:
    the cap bounds a fit that prefill bent upward) and at least 0."""
    b = np.asarray(running, dtype=np.float64).ravel()
    s = np.asarray(itl_sum_rate, dtype=np.float64).ravel()
    w = np.asarray(itl_count_rate, dtype=np.float64).ravel()
    ok = np.isfinite(b) & np.isfinite(s) & np.isfinite(w) & (w > 0) & (s >= 0) & (b >= 1)
    if int(ok.sum()) < MIN_SAMPLES:
        return None
    b, w = b[ok], w[ok]
    with np.errstate(all="ignore"):  # absurd magnitudes overflow to inf and end as None below
        y = s[ok] / w
        order = np.argsort(b)  # the batch's weighted 10th and 90th percentiles, from one sort
        sorted_b, cum = b[order], np.cumsum(w[order])
        lo, hi = (float(sorted_b[min(int(np.searchsorted(cum, q * cum[-1])), b.size - 1)]) for q in (0.1, 0.9))
        if hi < MIN_SPREAD * lo or hi - lo < MIN_SPREAD_REQUESTS or lo > NEAR_BATCH:
            return None
        total = float(w.sum())
        mb, my = float(w @ b) / total, float(w @ y) / total
        var = float(w @ (b - mb) ** 2)
        slope = float(w @ ((b - mb) * (y - my))) / var if var > 0 else math.nan
        floor = my + slope * (1.0 - mb)  # at a batch of one
    if not (slope > 0 and math.isfinite(slope) and math.isfinite(floor)):
        return None
    return min(max(floor, 0.0), float(y.min()))

