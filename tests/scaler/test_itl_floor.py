"""The ITL floor (scaler/itl_floor.py) and the latency term judging a target under it (scaler/slo.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from keda_llm.scaler import itl_floor
from keda_llm.scaler.config import parse_metadata
from keda_llm.scaler.decide import decide
from keda_llm.scaler.history import ModelHistory
from keda_llm.scaler.model import Observation, PolicyState, ReplicaSample, WorkloadState
from keda_llm.scaler.slo import FLOOR_HEADROOM, floor_raised_factor


def samples(batches: list[float], floor: float, slope: float, tokens: float = 200.0, noise: float = 0.0,
            seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    b = np.asarray(batches, dtype=float)
    itl = (floor + slope * b) * (1.0 + noise * np.abs(rng.standard_normal(b.size)))  # interference only slows
    w = np.full(b.size, tokens)
    return b, itl * w, w


def test_a_line_through_the_samples_gives_its_value_at_a_batch_of_one() -> None:
    # 8B on an L4 (simulator preset): ~69 ms at one request, ~1.1 ms more per request in the batch
    b, s, w = samples([80, 80, 40, 40, 27, 27, 13, 13, 13, 8], floor=0.0685, slope=0.0011)
    assert itl_floor.estimate(b, s, w) == pytest.approx(0.0685 + 0.0011, rel=1e-9)


def test_noise_moves_the_fit_little() -> None:
    b, s, w = samples(list(np.linspace(5, 60, 200)), floor=0.07, slope=0.001, noise=0.1, seed=3)
    out = itl_floor.estimate(b, s, w)
    assert out is not None and 0.071 <= out <= 1.1 * 0.071


@pytest.mark.parametrize("batches", [[20.0] * 30, [20, 21, 22, 23, 24, 25, 20, 21, 22, 23], [1, 2] * 5])
def test_a_batch_that_did_not_move_says_nothing(batches: list[float]) -> None:
    # the 90th percentile under twice the 10th, or under 2 requests apart: the intercept is extrapolation
    assert itl_floor.estimate(*samples(batches, floor=0.07, slope=0.001)) is None


def test_an_itl_that_does_not_grow_with_the_batch_says_nothing() -> None:
    assert itl_floor.estimate(*samples([5, 10, 20, 40] * 3, floor=0.07, slope=0.0)) is None
    assert itl_floor.estimate(*samples([5, 10, 20, 40] * 3, floor=0.09, slope=-0.0005)) is None


def test_too_few_samples_and_unusable_ones_say_nothing() -> None:
    b, s, w = samples([5, 10, 20, 40, 80, 5, 10], floor=0.07, slope=0.001)
    assert itl_floor.estimate(b, s, w) is None  # 7 < MIN_SAMPLES
    # NaN, no tokens, an idle replica (running 0) and a negative sum are left out, not fitted
    b2 = np.concatenate([b, [np.nan, 30.0, 0.0, 30.0]])
    s2 = np.concatenate([s, [1.0, 1.0, 1.0, -5.0]])
    w2 = np.concatenate([w, [200.0, 0.0, 200.0, 200.0]])
    assert itl_floor.estimate(b2, s2, w2) is None


def test_an_overloaded_fleet_whose_itl_is_its_batch_shows_a_low_floor() -> None:
    # 70B TP4 H100 under a burst: every sample far over a 50 ms target, the ITL in proportion to the batch.
    # The fit's floor stays near the real one (18 ms), so an overload never reads as an unreachable target.
    b, s, w = samples(list(np.linspace(4, 120, 40)), floor=0.018, slope=0.0009, noise=0.05, seed=1)
    floor = itl_floor.estimate(b, s, w)
    assert floor is not None and floor < 0.03


def test_a_batch_that_never_came_near_one_request_says_nothing() -> None:
    # one replica alone through a burst, 65-140 running, its ITL all prefill (86-166 ms): a line through
    # that reads 62 ms at one request where the 70B's floor is 18 ms
    b = np.array([72, 65, 80, 85, 140, 82, 97, 91, 106, 75], float)
    itl = np.array([0.134, 0.088, 0.113, 0.104, 0.167, 0.113, 0.090, 0.086, 0.120, 0.095])
    w = np.full(b.size, 800.0)
    assert itl_floor.estimate(b, itl * w, w) is None


def test_the_floor_is_never_above_the_lowest_itl_a_sample_showed() -> None:
    # prefill bends the line up at low batches (a replica prefilling a backlog decodes a few requests at
    # 600 ms a token): the fit crosses one request far above the 18 ms other samples show, and is capped there
    b = np.array([26, 42, 75, 15, 58, 29, 83, 3, 2, 2], float)
    itl = np.array([0.027, 0.608, 0.610, 0.036, 0.614, 0.272, 0.595, 0.036, 0.018, 0.019])
    w = np.full(b.size, 500.0)
    out = itl_floor.estimate(b, itl * w, w)
    assert out is not None and out <= 0.018


def test_fuzzed_samples_give_none_or_a_finite_non_negative_floor() -> None:
    rng = np.random.default_rng(20261201)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -1.0, 1e300, 1e-300])
    for _ in range(5000):
        n = int(rng.integers(0, 40))
        arrays = []
        for _col in range(3):
            a = rng.lognormal(0.0, 3.0, n) * rng.choice([1.0, -1.0], n, p=[0.9, 0.1])
            mask = rng.random(n) < 0.1
            a[mask] = rng.choice(specials, int(mask.sum()))
            arrays.append(a)
        out = itl_floor.estimate(*arrays)
        assert out is None or (math.isfinite(out) and out >= 0.0)


@pytest.mark.parametrize(("target", "factor", "floor", "want"), [
    (0.05, 1.0, 0.07, 1.54),     # 8B on an L4: judged at 1.1 x 70 ms = 77 ms
    (0.05, 1.0, 0.018, 1.0),     # 70B TP4 H100: room under the target, as set
    (0.05, 0.55, 0.018, 0.55),   # short answers' 27.5 ms is over 1.1 x 18 ms: as set
    (0.05, 0.25, 0.018, 0.396),  # the floor of the short-answer factor under it: raised to 19.8 ms
    (0.05, 1.0, math.nan, 1.0), (0.05, 1.0, 0.0, 1.0), (0.05, 1.0, math.inf, 1.0),
])
def test_floor_raised_factor_by_hand(target: float, factor: float, floor: float, want: float) -> None:
    assert floor_raised_factor(target, factor, floor) == pytest.approx(want)


# -- through decide: two 8B-on-L4-like pods, ITL = 69 ms + 1.1 ms x running, target 50 ms ------------------

BASE = {"model": "m", "policy": "concurrency", "targetConcurrency": "64", "mode": "reactive",
        "scaleDownDelay": "0s", "targetInterTokenLatency": "50ms", "shortOutputTokens": "0"}
READY2 = WorkloadState(current_replicas=2, ready_replicas=2, min_replicas=1, max_replicas=64)


def l4_fleet(*phases: tuple[float, int], polls: int = 0) -> ModelHistory:
    """Pods a and b report every second, each running `r` requests for `n` seconds per (r, n) phase, each
    request decoding 100 tokens/s at the L4's ITL for that batch (69 ms + 1.1 ms a request); every `polls`
    seconds (0: never) a decision reads it, as KEDA's polls do."""
    return fleet(phases, 0.069, 0.0011, polls)


def fleet(phases: tuple[tuple[float, int], ...], floor: float, slope: float, polls: int = 0) -> ModelHistory:
    """l4_fleet's pods at an ITL of `floor` + `slope` a request."""
    h = ModelHistory("ns", "m")
    total = {"a": [0.0, 0.0], "b": [0.0, 0.0]}  # ITL sum, count
    t = 0
    for r, n in phases:
        for _ in range(n):
            pods = []
            for p in ("a", "b"):
                total[p][0] += 100.0 * (floor + slope * r)
                total[p][1] += 100.0
                s, c = total[p]
                pods.append(ReplicaSample(p, float(t), running=r, max_running=256.0, ttft_sum=c / 100,
                                          ttft_count=c / 100, itl_sum=s, itl_count=c))
            h.ingest(Observation("ns", "m", float(t), tuple(pods)))
            if polls and t >= polls and t % polls == 0:
                decide(h, parse_metadata(BASE), PolicyState(initialized=True), READY2, float(t))
            t += 1
    return h


def test_a_target_under_the_floor_is_judged_at_the_floor_with_headroom() -> None:
    # the batch moved 30 -> 10 over the minute: floor 70.1 ms, so 50 ms is judged as 77.1 ms; the stable
    # window's ITL is 91 ms: 2 x 1.18 -> 3 replicas. As set, 50 ms asked for 2 x 91 / 50 -> 4, and again at
    # every count (the ITL never reaches 50 ms).
    h = l4_fleet((30.0, 31), (10.0, 30))
    d, _ = decide(h, parse_metadata(BASE), PolicyState(initialized=True), READY2, 60.0)
    assert d.details["itl_floor_s"] == pytest.approx(0.0701, rel=1e-3)
    assert d.details["itl_target_below_floor"] == 1.0
    assert d.details["target_itl_effective_s"] == pytest.approx(FLOOR_HEADROOM * 0.0701, rel=1e-3)
    assert d.replicas == 3


def test_the_last_fit_is_kept_while_the_batch_stands_still() -> None:
    # the same fleet, polled every 10 s, then 100 s at a steady 20 running (the rings, 64 samples, hold only
    # those): no fit now, the last one kept; a fresh history of the steady fleet has none and asks as set
    h = l4_fleet((30.0, 31), (10.0, 30), (20.0, 100), polls=10)
    d, _ = decide(h, parse_metadata(BASE), PolicyState(initialized=True), READY2, 160.0)
    assert d.details["itl_floor_s"] == pytest.approx(0.0701, rel=1e-3)
    assert d.details["itl_target_below_floor"] == 1.0 and d.replicas == 3  # 2 x 91 / 77.1 -> 3
    steady = l4_fleet((20.0, 61))
    assert steady.itl_floor() is None
    d2, _ = decide(steady, parse_metadata(BASE), PolicyState(initialized=True), READY2, 60.0)
    assert "itl_floor_s" not in d2.details and d2.replicas == 4  # 2 x 91 / 50


def test_a_target_the_floor_leaves_room_under_is_judged_as_set() -> None:
    h = l4_fleet((30.0, 31), (10.0, 30))
    d, _ = decide(h, parse_metadata({**BASE, "targetInterTokenLatency": "100ms"}), PolicyState(initialized=True),
                  READY2, 60.0)
    assert d.details["itl_target_below_floor"] == 0.0
    assert "target_itl_effective_s" not in d.details  # no short-output factor, no raise: the target is `target_itl_s`


def a100_fleet(*phases: tuple[float, int]) -> ModelHistory:
    """l4_fleet's pods at an ITL of 10 ms + 0.5 ms a request: a fast replica whose ITL sits near its floor."""
    return fleet(phases, 0.010, 0.0005)


def test_busy_scaling_keeps_the_replica_proportional_scaling_releases_near_the_floor() -> None:
    # two replicas at a mean ITL of about 21 ms against 56 ms: proportional reads 2 x 0.38 -> 1 replica; the
    # floor (10.5 ms) says each is about half busy against the 0.81 the target holds: 2 x 0.62 -> 2
    h = a100_fleet((36.0, 31), (8.0, 30))
    meta = {**BASE, "targetInterTokenLatency": "56ms"}
    prop, _ = decide(h, parse_metadata(meta), PolicyState(initialized=True), READY2, 60.0)
    busy, _ = decide(h, parse_metadata({**meta, "itlScaling": "busy"}), PolicyState(initialized=True), READY2, 60.0)
    floor, itl = busy.details["itl_floor_s"], busy.details["observed_itl_s"]
    assert floor == pytest.approx(0.0105, rel=1e-3) and itl == pytest.approx(0.021, rel=0.05)
    assert prop.details["latency_ratio"] == pytest.approx(itl / 0.056)
    assert busy.details["latency_ratio"] == pytest.approx((1 - floor / itl) / (1 - floor / 0.056))
    assert (prop.replicas, busy.replicas) == (1, 2)


def test_busy_scaling_leaves_a_target_within_twice_the_floor_as_proportional() -> None:
    # the L4 fleet, its 50 ms target raised to 1.1 x the 70 ms floor: the busy share can only exceed the
    # proportional ratio above floor x target / (target - floor), which is over the target there
    h = l4_fleet((30.0, 31), (10.0, 30))
    got = [decide(h, parse_metadata({**BASE, "itlScaling": s}), PolicyState(initialized=True), READY2, 60.0)[0]
           for s in ("proportional", "busy")]
    assert got[0].replicas == got[1].replicas == 3
    assert got[0].details["latency_ratio"] == got[1].details["latency_ratio"]
