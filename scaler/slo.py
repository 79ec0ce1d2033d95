"""The latency (SLO) term: observed mean TTFT / ITL against the ScaledObject's targets -> replicas.

Why: KV-token demand is not always the binding constraint. On prefill-heavy traffic a replica runs out
of compute (prefill) or of decode-step time long before its KV cache fills, and the only signal that
says so is latency. The engines already report it (TTFT and ITL histograms); the operator knows the
SLO. llm-d's WVA and NVIDIA Dynamo's planner both size against TTFT/ITL targets (anchors: WVA's
"PredictiveSLOAnalyzer" combined by max for scale-up; Dynamo's load-based loop that adds a replica
while the estimated TTFT/ITL exceed the SLA). This term is the simplest reactive form of that idea:
proportional, because decode step time and queueing grow roughly with each replica's load, so
spreading the same load over ready x observed/target replicas brings the mean back to the target.

It only ever raises the count (decide takes the max with the policy's count), and goes through the
same Knative windows, rate limits, pending guard and scale-down delay as the policy. Pure: no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from keda_llm.scaler.config import ScalerConfig
from keda_llm.scaler.history import Load

MIN_COMPLETED = 5.0  # fewer requests completed in the window: a mean of a handful is noise, no signal


@dataclass(frozen=True)
class LatencyDesired:
    """The latency term for one window; `desired` is replicas, not rounded (the KPA step rounds and bounds)."""

    desired: float
    ratio: float  # max(observed TTFT / target, observed ITL / target) over the targets set
    ttft: float | None  # observed mean TTFT, seconds (None: not reported)
    itl: float | None  # observed mean ITL, seconds
    completed: float  # requests that got their first token in the window


def latency_desired(ttft: float | None, itl: float | None, completed: float, ready: int,
                    target_ttft: float | None, target_itl: float | None,
                    min_completed: float = MIN_COMPLETED, queued: float | None = None) -> LatencyDesired | None:
    """ready x max(observed / target) over the latency targets that are set and observed.

    None (no latency signal) when no target is set, no replica is ready, fewer than `min_completed`
    requests completed in the window, or no target has an observation.

    TTFT is judged only while requests queue (`queued` > 0, or unknown): without a queue a long TTFT is
    the request's own prefill, which no added replica shortens (one prompt runs on one replica), and
    chasing it would add replicas without end. ITL is judged always: it grows with each replica's batch.
    """
    if (target_ttft is None and target_itl is None) or ready <= 0 or completed < min_completed:
        return None
    if queued is not None and queued <= 0:
        ttft = None
    ratios = [obs / target for obs, target in ((ttft, target_ttft), (itl, target_itl))
              if obs is not None and target is not None and target > 0]
    if not ratios:
        return None
    ratio = max(ratios)
    return LatencyDesired(ready * ratio, ratio, ttft, itl, completed)


def from_window(load: Load, window_s: float, ready: int, config: ScalerConfig) -> LatencyDesired | None:
    """The term over one window of history: means are rate(_sum) / rate(_count); the requests completed
    are the TTFT count's rate (else requests finished) x the window."""
    per_s = load.ttft_count_rate if load.ttft_count_rate is not None else load.finished_rate
    completed = (per_s or 0.0) * window_s
    queued = None if load.waiting is None and load.upstream is None else (load.waiting or 0.0) + (load.upstream or 0.0)
    return latency_desired(load.mean_ttft, load.mean_itl, completed, ready, config.target_ttft, config.target_itl,
                           queued=queued)
