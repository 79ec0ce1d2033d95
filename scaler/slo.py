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

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from keda_llm.scaler.config import ScalerConfig
from keda_llm.scaler.history import Load, ReplicaWindow

MIN_COMPLETED = 5.0  # fewer requests completed in the window: a mean of a handful is noise, no signal
SHORT_OUTPUT_FLOOR = 0.25  # the short-output tightening never asks for less than this share of the ITL target
TTFT_STEP = 0.5  # a TTFT over its target asks for ready x (observed / target) ** this (see latency_desired)
PANIC_STEP = 0.5  # in the panic window the ITL over its target counts as this power too (see from_window)
FLOOR_HEADROOM = 1.1  # the ITL target is judged at no less than this x the fitted ITL floor (floor_raised_factor)
QUEUE_SHARE = 0.1  # the TTFT is judged only while queueing (Little: waiting / first tokens per s) is this share of it


@dataclass(frozen=True)
class LatencyDesired:
    """The latency term for one window; `desired` is replicas, not rounded (the KPA step rounds and bounds)."""

    desired: float
    ratio: float  # max(observed TTFT / target, observed ITL / target) over the targets set
    ttft: float | None  # observed mean TTFT, seconds (None: not reported)
    itl: float | None  # observed mean ITL, seconds
    completed: float  # requests that got their first token in the window
    queue_wait: float | None = None  # mean wait in the queue, seconds (Little's law; None: not known)


def latency_desired(ttft: float | None, itl: float | None, completed: float, ready: float,
                    target_ttft: float | None, target_itl: float | None,
                    min_completed: float = MIN_COMPLETED, queued: float | None = None,
                    queue_wait: float | None = None, itl_step: float = 1.0,
                    itl_floor: float | None = None) -> LatencyDesired | None:
    """ready x max(observed / target) over the latency targets that are set and observed.

    None (no latency signal) when no target is set, no replica is ready, fewer than `min_completed`
    requests completed in the window, or no target has an observation.

    TTFT is judged only while requests queue (`queued` > 0, or unknown): without a queue a long TTFT is
    the request's own prefill, which no added replica shortens (one prompt runs on one replica), and
    chasing it would add replicas without end. ITL is judged always: it grows with each replica's batch.
    With `queue_wait` (the mean wait in the queue, by Little's law the queue over the rate of first tokens)
    the queue must also be QUEUE_SHARE of the TTFT: on long prompts a small queue is always there, the TTFT
    sits at the prompts' own prefill whatever the count, and a term judging it held every replica it had
    and added one whenever the mean crossed its target (mooncake-conv: 35 replicas held for 15 minutes
    where 23 met the SLO as well).

    Over its target the TTFT ratio counts as its square root (TTFT_STEP): the excess is queueing, and a
    queue's wait falls much faster than the capacity added (a queue served at twice its arrival rate waits
    a fraction of one served at 1.1x), so ready x ratio overshot: on mooncake-conv each rise while long
    prompts queued (1.2-1.6x) took the count that much higher, and the scale-down delay held it. The
    pending guard still lets the term step again a cold start later if the TTFT stays over. `itl_step` is
    the same power for the ITL over its target (1: proportional; the panic window's: `from_window`). With
    `itl_floor` (`itlScaling: busy`), an ITL at or under its target also counts as its busy share over the
    target's (`busy_ratio`), where that is the larger.
    """
    if (target_ttft is None and target_itl is None) or ready <= 0 or completed < min_completed:
        return None
    if queued is not None and queued <= 0:
        ttft = None
    if ttft is not None and queue_wait is not None and queue_wait < QUEUE_SHARE * ttft:
        ttft = None
    steps = {"ttft": TTFT_STEP, "itl": itl_step}
    ratios = [(obs / target) ** (steps[kind] if obs > target else 1.0)
              for kind, obs, target in (("ttft", ttft, target_ttft), ("itl", itl, target_itl))
              if obs is not None and target is not None and target > 0]
    if itl_floor is not None and itl is not None and target_itl is not None and 0 < itl <= target_itl:
        ratios.append(busy_ratio(itl, target_itl, itl_floor))  # itlScaling: busy (from_window)
    if not ratios:
        return None
    ratio = max(ratios)
    return LatencyDesired(ready * ratio, ratio, ttft, itl, completed, queue_wait)


def busy_ratio(itl: float, target: float, floor: float) -> float:
    """The replicas' busy share over the share the target holds, read on ITL = floor / (1 - busy): a replica's
    ITL is its one-request decode step (`floor`, scaler/itl_floor.py) stretched by the other work its iterations
    carry, mostly other prompts' prefill chunks (docs/design.md, "itlScaling: busy").

    Why beside observed / target: that ratio assumes the ITL falls in proportion to each replica's load, and
    near the floor it falls less. Two 8B A100 replicas at 19 ms against a 56 ms target read 0.34 each, so the
    term let one go; their busy share (1 - 11.2 / 19 = 0.41) over the target's (0.80) is 0.51, and one replica
    carrying both is past its target. 0 where the ITL is at the floor or the target is not above it."""
    if not (0 < floor < target) or not itl > floor:
        return 0.0
    return (1.0 - floor / itl) / (1.0 - floor / target)


def latency_basis(ready: int, window_replicas: float | None) -> float:
    """The replicas a window's latency reflects: the window's mean of reporting replicas (at least 1), at
    most those `ready` now; `ready` when the window has no count.

    Why: the latency of the requests served in a window was made by the replicas that served them. Right
    after replicas come up, the window still holds the queue and slow steps of the fewer replicas before
    them, and `ready` x that ratio counted the new ones as if they had been loaded as much: one 70B replica
    at 1.85x its ITL target asked for 3 x 1.85 -> 6 replicas the moment two more came up (azure2023-conv,
    targetInterTokenLatency 0.055 s), where 2 served the load, and the scale-down delay held 6 for 9 minutes
    (10.16 GPU-h against 7.53 with this basis). The basis is never above `ready` (after a release the term
    judges the replicas left, as before) and the two agree once the window holds only the replicas now up."""
    if window_replicas is None or not math.isfinite(window_replicas):
        return float(ready)
    return min(float(ready), max(window_replicas, 1.0))


def floor_raised_factor(target_itl: float, factor: float, floor: float) -> float:
    """The factor on `target_itl` the term judges by: `factor` (the short-output tightening), raised so the
    target is at least FLOOR_HEADROOM x `floor`, the replicas' ITL at a batch of one (scaler/itl_floor.py).

    Why: the ITL does not fall below its floor whatever the count, so a target under it (8B on an L4, ~70 ms
    a token, with a 50 ms target) made ready x observed / target grow with every replica added, up to
    `maxReplicaCount`. FLOOR_HEADROOM above the floor is a batch the replicas can hold (77 ms on that L4:
    about 7 requests each); 1.25x held more and missed the SLO (docs/design.md, "A target under the ITL
    floor"). A target the floor leaves room under is judged as set."""
    if not (target_itl > 0 and floor > 0 and math.isfinite(floor)):
        return factor
    return max(factor, FLOOR_HEADROOM * floor / target_itl)


def mean_output_tokens(load: Load) -> float | None:
    """Output tokens per finished request in the window: Σ generated tokens/s / Σ requests finished/s (a ratio
    of sums). None when nothing finished or the engines report no token counter."""
    if load.generation_rate is None or not load.finished_rate or load.finished_rate <= 0:
        return None
    return load.generation_rate / load.finished_rate


def short_output_factor(mean_output: float | None, reference: float) -> float:
    """The share of `targetInterTokenLatency` the term holds for traffic whose answers average `mean_output`
    tokens: min(1, mean_output / reference), at least SHORT_OUTPUT_FLOOR; 1 when unknown or `reference` is 0.

    Why: the SLO is on each request's mean ITL (TPOT), the signal is the mean over all tokens. With chunked
    prefill a decode iteration that carries another request's prompt chunk takes the chunk's time (0.63 s for
    8,192 tokens on 70B TP4 against ~20 ms for a decode step), so a request's TPOT is its decode steps plus
    K x that excess / its n output tokens, K the chunks it decoded beside (about Poisson, mean λn for λ
    chunks per decoded token). The token mean is t_d + λΔ; a request's quantile is t_d + Δ q(λn)/n, whose
    spread over the mean, z·sqrt(Δ·(mean - t_d)/n), dominates when n is small: keeping it within the SLO
    then bounds the interference budget (mean - t_d) by a constant x n. So below `reference` output tokens
    per request the mean the term may hold shrinks in proportion to n; above it the tail is near the mean and
    the target stands. Long answers (chat, 100-350 tokens) keep the target; code completions (13-16 tokens
    median, a third at 10 or fewer) get about half of it."""
    if mean_output is None or not reference > 0:
        return 1.0
    return max(SHORT_OUTPUT_FLOOR, min(1.0, mean_output / reference))


PINNED_FACTOR = 8.0  # a replica's backlog this many times the median replica's (at least 1) is pinned to it


@dataclass(frozen=True)
class Unpinned:
    """The latency signals over the replicas whose backlog is not pinned (see `without_pinned`)."""

    ttft: float | None  # mean TTFT of their requests, seconds (None: no first token in the window)
    itl: float | None  # their mean inter-token gap, seconds
    waiting: float  # requests waiting in their engines
    pinned: int  # replicas left out


def _outstanding(w: ReplicaWindow) -> float | None:
    """Requests the replica holds, running and waiting (None: it reports neither)."""
    if w.running is None and w.waiting is None:
        return None
    return (w.running or 0.0) + (w.waiting or 0.0)


def without_pinned(windows: Sequence[ReplicaWindow], target_ttft: float | None = None) -> Unpinned | None:
    """The window's mean TTFT, mean ITL and queue over the replicas whose backlog is not pinned to them;
    None when no replica's is (the model's own means then stand).

    Why: the engines queue per replica, and a backlog one replica took (a burst while it was alone, a
    restart) stays pinned to it while the gateway sends new requests elsewhere. Its requests' TTFT
    (minutes) and its overfull batch's slow steps then dominate the model's means although every other
    replica serves within the targets, and the proportional term asked for ready x hundreds: the maximum
    for as long as the pinned backlog took to drain (mooncake-conv's lead-in: 64 replicas for 50 minutes
    behind one replica's 719 queued requests). More replicas do not drain a backlog pinned to one.

    A replica's backlog is pinned when the requests it holds (running and waiting) are PINNED_FACTOR times
    the median replica's (at least 1 request), or its mean TTFT is PINNED_FACTOR times both the median
    replica's and `target_ttft` (a TTFT is reported at the first token, so a backlog just worked off keeps
    reporting its minutes of queueing for as long again). A model short of capacity loads every replica
    alike (least-loaded routing evens them), and is judged as before."""
    held = [v for w in windows if (v := _outstanding(w)) is not None]
    ttfts = [w.ttft for w in windows if w.ttft is not None]
    held_bar = PINNED_FACTOR * max(1.0, statistics.median(held)) if held else math.inf
    ttft_bar = PINNED_FACTOR * max(statistics.median(ttfts), target_ttft or 0.0) if ttfts else math.inf

    rest: list[ReplicaWindow] = []
    pinned = 0
    for w in windows:
        v = _outstanding(w)
        if (v is not None and v > held_bar) or (w.ttft is not None and w.ttft > ttft_bar):
            pinned += 1
        else:
            rest.append(w)
    if not pinned:
        return None
    ttft_n = sum(w.ttft_count for w in rest if w.ttft is not None)
    itl_n = sum(w.itl_count for w in rest if w.itl is not None)
    ttft = sum(w.ttft * w.ttft_count for w in rest if w.ttft is not None) / ttft_n if ttft_n > 0 else None
    itl = sum(w.itl * w.itl_count for w in rest if w.itl is not None) / itl_n if itl_n > 0 else None
    return Unpinned(ttft, itl, sum(w.waiting or 0.0 for w in rest), pinned)


def from_window(load: Load, window_s: float, ready: float, config: ScalerConfig,
                itl_factor: float = 1.0, unpinned: Unpinned | None = None, panic: bool = False,
                itl_floor: float | None = None) -> LatencyDesired | None:
    """The term over one window of history: means are rate(_sum) / rate(_count); the requests completed
    are the TTFT count's rate (else requests finished) x the window. With `unpinned` (some replica's queue
    is pinned to it: `without_pinned`) the means and the queue are the other replicas'. (Spreading the ratio
    over the other replicas only, the pinned ones counted as they are, was tried: within the seeds' spread
    of this, on mooncake-conv 4 seeds 186 GPU-h mean against 176.) `itl_factor` scales the ITL target
    (`short_output_factor`, read by the caller over the last 10 minutes so the panic window's few finished
    requests do not move it).

    `itl_floor`: the replicas' fitted ITL floor, read only with `itlScaling: busy`.

    `panic`: the window is the panic window, whose ITL over its target counts as its square root
    (PANIC_STEP). Its few seconds hold a handful of decode steps, and a burst of prompts stalls them while
    their chunks prefill: on azure2023-code the panic window's mean ITL read 6.7x its target for one poll,
    2.3x the next and under it 30 s later, on the same four replicas, and ready x 6.7 asked for 27 that
    Knative's panic mode and the scale-down delay then held for ten minutes (47.8 GPU-h where the same SLO
    took 34.6 with the square root). Replicas asked for now come a cold start later, after such a stall;
    an excess that lasts shows in the stable window too, which still steps in proportion."""
    per_s = load.ttft_count_rate if load.ttft_count_rate is not None else load.finished_rate
    completed = (per_s or 0.0) * window_s
    waiting = load.waiting if unpinned is None else unpinned.waiting
    queued = None if waiting is None and load.upstream is None else (waiting or 0.0) + (load.upstream or 0.0)
    target_itl = None if config.target_itl is None else config.target_itl * itl_factor
    ttft, itl = (load.mean_ttft, load.mean_itl) if unpinned is None else (unpinned.ttft, unpinned.itl)
    wait = queued / per_s if queued is not None and per_s else None
    return latency_desired(ttft, itl, completed, ready, config.target_ttft, target_itl, queued=queued,
                           queue_wait=wait, itl_step=PANIC_STEP if panic else 1.0,
                           itl_floor=itl_floor if config.itl_scaling == "busy" else None)
