"""The latency (SLO) term: scaler/slo.py by hand, and decide() with and without the latency targets."""

from __future__ import annotations

import pytest

from keda_llm.scaler.config import parse_metadata
from keda_llm.scaler.decide import decide
from keda_llm.scaler.history import Load, ModelHistory
from keda_llm.scaler.model import Observation, PolicyState, ReplicaSample, WorkloadState
from keda_llm.scaler.slo import (
    QUEUE_SHARE,
    LatencyDesired,
    busy_ratio,
    from_window,
    latency_basis,
    latency_desired,
    mean_output_tokens,
    short_output_factor,
)


@pytest.mark.parametrize("queued,want", [
    # Requests queue: the TTFT excess is queueing, more replicas cut it: 2 x sqrt(8 / 2) = 4.
    (4.0, LatencyDesired(4.0, 2.0, 8.0, 0.05, 10.0)),
    # Nothing queues: the 8 s TTFT is the prompts' own prefill; only ITL is judged: 2 x 0.05 / 0.1 = 1.
    (0.0, LatencyDesired(1.0, 0.5, None, 0.05, 10.0)),
    # Queue not reported: TTFT judged as before.
    (None, LatencyDesired(4.0, 2.0, 8.0, 0.05, 10.0)),
])
def test_ttft_is_judged_only_while_requests_queue(queued: float | None, want: LatencyDesired) -> None:
    assert latency_desired(8.0, 0.05, 10.0, 2, 2.0, 0.1, queued=queued) == want


@pytest.mark.parametrize("wait,judged", [
    (0.5, False),  # 0.5 s of an 8 s TTFT queued: the rest is the prompts' own prefill, no replica shortens it
    (QUEUE_SHARE * 8.0, True),  # at the share: the queue is a cost more replicas cut
    (3.0, True),
    (None, True),  # no wait known: judged while anything queues, as before
])
def test_ttft_is_judged_only_while_queueing_is_a_share_of_it(wait: float | None, judged: bool) -> None:
    got = latency_desired(8.0, 0.05, 10.0, 2, 2.0, 0.1, queued=4.0, queue_wait=wait)
    want = (LatencyDesired(4.0, 2.0, 8.0, 0.05, 10.0, wait) if judged
            else LatencyDesired(1.0, 0.5, None, 0.05, 10.0, wait))
    assert got == want


def test_the_queue_wait_is_littles_law_over_first_tokens() -> None:
    """Long prompts (mooncake-like): a mean TTFT just over its target, a small queue always there. The wait
    is the queue over the rate of first tokens: 0.15 waiting / 3 first tokens/s = 0.05 s, under a tenth of
    the 1.02 s TTFT, so the TTFT is the prompts' own prefill and does not ask for a 24th replica (the ratchet
    that held 35 replicas where 23 served); a queue of 0.6 (0.2 s) is judged."""
    config = parse_metadata({"model": "m", "targetTimeToFirstToken": "1s"})
    def load(waiting: float) -> Load:
        return Load(waiting=waiting, ttft_sum_rate=3.0 * 1.02, ttft_count_rate=3.0, finished_rate=3.0)
    assert QUEUE_SHARE == 0.1  # the figures above
    assert from_window(load(0.15), 30.0, 23.0, config) is None  # no ITL target, TTFT not judged: no signal
    judged = from_window(load(0.6), 30.0, 23.0, config)
    assert judged is not None and judged.ttft == pytest.approx(1.02) and judged.desired > 23.0
    assert judged.queue_wait == pytest.approx(0.2)  # the decision's details carry it (`queue_wait_s`)


@pytest.mark.parametrize("ttft,want_ratio", [
    (8.0, 2.0),  # 4x over: a queue's wait falls faster than the capacity added, so sqrt(4) = 2
    (4.5, 1.5),  # sqrt(2.25)
    (2.0, 1.0),  # at the target
    (1.0, 0.5),  # under it: not damped (the term only adds replicas; decide takes the max)
])
def test_a_ttft_over_target_steps_by_its_square_root(ttft: float, want_ratio: float) -> None:
    got = latency_desired(ttft, None, 10.0, 4, 2.0, None)
    assert got is not None and got.ratio == pytest.approx(want_ratio) and got.desired == pytest.approx(4 * want_ratio)
    # ITL is not damped: its step time grows with each replica's batch, about in proportion
    itl = latency_desired(None, 0.4, 10.0, 4, None, 0.1)
    assert itl is not None and itl.ratio == pytest.approx(4.0) and itl.desired == pytest.approx(16.0)


@pytest.mark.parametrize("ttft,itl,completed,ready,t_ttft,t_itl,want", [
    # TTFT 8 s against 2 s on 2 replicas: 2 x sqrt(4) = 4.
    (8.0, 0.05, 10.0, 2, 2.0, 0.1, LatencyDesired(4.0, 2.0, 8.0, 0.05, 10.0)),
    # ITL binds: 0.25 / 0.1 = 2.5 beats TTFT 1 / 2 = 0.5; 4 replicas -> 10.
    (1.0, 0.25, 50.0, 4, 2.0, 0.1, LatencyDesired(10.0, 2.5, 1.0, 0.25, 50.0)),
    # Under target: 3 x max(0.5 / 2, 0.02 / 0.1) = 3 x 0.25 = 0.75 (a floor only: decide takes the max).
    (0.5, 0.02, 5.0, 3, 2.0, 0.1, LatencyDesired(0.75, 0.25, 0.5, 0.02, 5.0)),
    # Only the ITL target is set: the TTFT (10 s) is not judged; 0.2 / 0.1 x 1 = 2.
    (10.0, 0.2, 6.0, 1, None, 0.1, LatencyDesired(2.0, 2.0, 10.0, 0.2, 6.0)),
    # ITL target set but the engines do not report ITL: TTFT alone, sqrt(8 / 2) x 1 = 2.
    (8.0, None, 6.0, 1, 2.0, 0.1, LatencyDesired(2.0, 2.0, 8.0, None, 6.0)),
    # No signal: too few requests (4.9 < 5), no target, nobody ready, nothing observed for the target set.
    (3.0, 0.05, 4.9, 2, 2.0, 0.1, None),
    (3.0, 0.05, 10.0, 2, None, None, None),
    (3.0, 0.05, 10.0, 0, 2.0, 0.1, None),
    (None, 0.3, 10.0, 2, 2.0, None, None),
])
def test_latency_desired_by_hand(ttft: float | None, itl: float | None, completed: float, ready: int,
                                 t_ttft: float | None, t_itl: float | None, want: LatencyDesired | None) -> None:
    assert latency_desired(ttft, itl, completed, ready, t_ttft, t_itl) == want


def fleet(ttft_s: float, itl_s: float, finished_per_s: float, seconds: int = 61) -> ModelHistory:
    """Two ready pods, 10 running each, reporting every second for `seconds` s; each finishes
    `finished_per_s` requests/s, every one with TTFT `ttft_s`, and 100 gaps of `itl_s` per request."""
    h = ModelHistory("ns", "m")
    for t in range(seconds):
        n = finished_per_s * t
        pods = tuple(ReplicaSample(p, float(t), running=10.0, max_running=256.0, ttft_sum=n * ttft_s, ttft_count=n,
                                   itl_sum=n * 100 * itl_s, itl_count=n * 100) for p in ("a", "b"))
        h.ingest(Observation("ns", "m", float(t), pods))
    return h


# concurrency policy, target 10: 20 running over 2 ready -> the policy alone asks for 2 (steady).
BASE = {"model": "m", "policy": "concurrency", "targetConcurrency": "10", "mode": "reactive",
        "scaleDownDelay": "0s"}
SLO = {"targetTimeToFirstToken": "2s", "targetInterTokenLatency": "100ms"}
READY2 = WorkloadState(current_replicas=2, ready_replicas=2, min_replicas=1)


def run(h: ModelHistory, metadata: dict[str, str]) -> tuple[int, str, dict[str, float]]:
    d, _ = decide(h, parse_metadata(metadata), PolicyState(initialized=True), READY2, 60.0)
    return d.replicas, d.reason, dict(d.details)


def test_ttft_over_target_raises_the_count() -> None:
    # 2 requests/s per pod at TTFT 8 s against 2 s: 2 x sqrt(4) = 4 replicas (stable and panic windows alike).
    replicas, reason, details = run(fleet(8.0, 0.05, 2.0), {**BASE, **SLO})
    assert (replicas, reason) == (4, "latency_up")
    assert details["observed_ttft_s"] == pytest.approx(8.0)
    assert details["observed_itl_s"] == pytest.approx(0.05)
    assert (details["target_ttft_s"], details["target_itl_s"]) == (2.0, 0.1)
    assert details["latency_desired"] == 4
    assert details["latency_ratio"] == pytest.approx(2.0)
    assert details["latency_completed"] == pytest.approx(240.0)  # 2 pods x 2/s x 60 s


def test_itl_over_target_panics_up_by_latency() -> None:
    # ITL 0.25 s against 0.1 s: 2 x 2.5 = 5; the panic window asks 5 / 2 = 2.5 x ready > 2: panic, still latency's.
    replicas, reason, details = run(fleet(1.0, 0.25, 2.0), {**BASE, **SLO})
    assert (replicas, reason) == (5, "latency_up")
    assert details["panic"] == 1.0 and details["latency_desired"] == 5


def spiked(seconds: int = 61, spike_from: int = 55) -> ModelHistory:
    """Four ready pods, 10 running each, 2 requests/s each at TTFT 0.5 s and ITL 0.05 s, then ITL 0.5 s (a
    burst of prompts stalling the decodes while their chunks prefill) in the panic window's last 6 s alone."""
    h = ModelHistory("ns", "m")
    n = itl_sum = 0.0
    for t in range(seconds):
        if t > 0:
            n += 2.0
            itl_sum += 2.0 * 100 * (0.5 if t >= spike_from else 0.05)
        pods = tuple(ReplicaSample(p, float(t), running=10.0, max_running=256.0, ttft_sum=n * 0.5, ttft_count=n,
                                   itl_sum=itl_sum, itl_count=n * 100) for p in "abcd")
        h.ingest(Observation("ns", "m", float(t), pods))
    return h


def test_a_spike_in_the_panic_window_steps_by_its_square_root() -> None:
    """The panic window reads 5x the ITL target for 6 s: 4 x sqrt(5) = 8.9 -> 9 replicas, where 4 x 5 asked
    for 20 (on azure2023-code such a stall asked for 27 that panic mode and the scale-down delay held ten
    minutes). The stable window, 0.095 s over the minute, asks 3.8: the panic window still rules, sooner."""
    ready4 = WorkloadState(current_replicas=4, ready_replicas=4, min_replicas=1)
    d, _ = decide(spiked(), parse_metadata({**BASE, **SLO}), PolicyState(initialized=True), ready4, 60.0)
    assert d.details["observed_itl_s_panic"] == pytest.approx(0.5)
    assert d.details["latency_ratio_panic"] == pytest.approx(5 ** 0.5)
    assert d.details["latency_desired_raw"] == pytest.approx(3.8)
    assert (d.replicas, d.reason, d.details["panic"]) == (9, "latency_up", 1.0)


@pytest.mark.parametrize("itl,stable,panic", [
    (0.4, 16.0, 8.0),  # 4x over: the stable window in proportion, the panic window by sqrt(4)
    (0.1, 4.0, 4.0),  # at the target: the same
    (0.05, 2.0, 2.0),  # under it: not damped either way (decide takes the max with the policy's count)
])
def test_only_the_panic_window_damps_the_itl(itl: float, stable: float, panic: float) -> None:
    config = parse_metadata({"model": "m", "targetInterTokenLatency": "100ms"})
    load = Load(itl_sum_rate=itl * 100.0, itl_count_rate=100.0, finished_rate=1.0)
    got = [from_window(load, 60.0, 4.0, config, panic=p) for p in (False, True)]
    assert [g.desired if g is not None else None for g in got] == [pytest.approx(stable), pytest.approx(panic)]


def test_targets_unset_change_nothing() -> None:
    h = fleet(3.0, 0.25, 2.0)
    replicas, reason, details = run(h, BASE)
    assert (replicas, reason) == (2, "steady")
    assert not any(k.startswith(("latency", "observed", "target_ttft", "target_itl")) for k in details)


def test_latency_under_target_is_no_reason_to_scale_down_below_the_policy() -> None:
    assert run(fleet(0.5, 0.02, 2.0), {**BASE, **SLO})[:2] == (2, "steady")


def test_too_few_completed_requests_is_no_latency_signal() -> None:
    # 0.03/s per pod: 2 x 0.03 x 60 = 3.6 requests in the stable window (< 5): no signal despite TTFT 30 s.
    replicas, reason, details = run(fleet(30.0, 0.05, 0.03), {**BASE, **SLO})
    assert (replicas, reason) == (2, "steady")
    assert details["latency_signal"] == 0.0 and "latency_desired" not in details


def joined(itl_s: float, join_at: int, seconds: int = 61) -> ModelHistory:
    """Pod a alone, 10 running and 2 requests/s finished at ITL `itl_s`; pods b and c up from `join_at` s,
    5 running each and nothing finished on them yet (a cold start just ended)."""
    h = ModelHistory("ns", "m")
    for t in range(seconds):
        n = 2.0 * t
        pods = [ReplicaSample("a", float(t), running=10.0, max_running=256.0, ttft_sum=n * 0.5, ttft_count=n,
                              itl_sum=n * 100 * itl_s, itl_count=n * 100)]
        if t >= join_at:
            pods += [ReplicaSample(p, float(t), running=5.0, max_running=256.0, ttft_sum=0.0, ttft_count=0.0,
                                   itl_sum=0.0, itl_count=0.0) for p in ("b", "c")]
        h.ingest(Observation("ns", "m", float(t), tuple(pods)))
    return h


@pytest.mark.parametrize("join_at,want_replicas,want_basis", [
    # b and c came up 10 s ago: the stable window (0, 60] held 1 replica for 49 samples and 3 for 11, mean
    # 82 / 60; its ITL (2.5x the target) was one replica's, so 1.37 x 2.5 = 3.4 -> 4, not 3 x 2.5 -> 8
    (50, 4, 82 / 60),
    # b and c up for the whole window and still 2.5x: the window reflects all three, 3 x 2.5 -> 8
    (0, 8, 3.0),
])
def test_the_latency_term_counts_the_replicas_its_window_reflects(join_at: int, want_replicas: int,
                                                                  want_basis: float) -> None:
    ready3 = WorkloadState(current_replicas=3, ready_replicas=3, min_replicas=1)
    d, _ = decide(joined(0.25, join_at), parse_metadata({**BASE, **SLO}), PolicyState(initialized=True), ready3, 60.0)
    assert d.details["latency_replicas_basis"] == pytest.approx(want_basis)
    assert d.details["latency_ratio"] == pytest.approx(2.5)
    assert (d.replicas, d.reason) == (want_replicas, "latency_up")


@pytest.mark.parametrize("ready,window,want", [
    (3, 82 / 60, 82 / 60),  # replicas came up in the window: its mean
    (2, 2.0, 2.0),  # steady: the same
    (1, 1.5, 1.0),  # a release in the window: never above those ready now
    (1, 0.2, 1.0),  # the first replica up from zero: its own signal, at least 1
    (2, None, 2.0), (2, float("nan"), 2.0),  # no count in the window: ready
    (0, 1.0, 0.0),  # nobody ready: no term (latency_desired answers None)
])
def test_latency_basis_by_hand(ready: int, window: float | None, want: float) -> None:
    assert latency_basis(ready, window) == pytest.approx(want)


@pytest.mark.parametrize("mean_output,reference,want", [
    (20.0, 40.0, 0.5),  # half the reference length: half the ITL target
    (100.0, 40.0, 1.0),  # long answers: the target stands
    (4.0, 40.0, 0.25),  # 4 / 40 = 0.1, floored at a quarter
    (None, 40.0, 1.0),  # unknown mix: the target stands
    (20.0, 0.0, 1.0),  # shortOutputTokens 0: off
])
def test_short_output_factor_by_hand(mean_output: float | None, reference: float, want: float) -> None:
    assert short_output_factor(mean_output, reference) == want


def test_mean_output_tokens_is_a_ratio_of_sums() -> None:
    assert mean_output_tokens(Load(generation_rate=50.0, finished_rate=2.0)) == 25.0
    assert mean_output_tokens(Load(generation_rate=50.0, finished_rate=0.0)) is None
    assert mean_output_tokens(Load(finished_rate=2.0)) is None


def answers(itl_s: float, output_tokens: float, seconds: int = 61) -> ModelHistory:
    """Two ready pods, 10 running each, reporting every second; each finishes 2 requests/s of
    `output_tokens` tokens, every gap `itl_s`."""
    h = ModelHistory("ns", "m")
    for t in range(seconds):
        n = 2.0 * t
        pods = tuple(ReplicaSample(p, float(t), running=10.0, max_running=256.0, requests_finished_total=n,
                                   generation_tokens_total=n * output_tokens, ttft_count=n, ttft_sum=n * 0.2,
                                   itl_sum=n * output_tokens * itl_s, itl_count=n * output_tokens) for p in ("a", "b"))
        h.ingest(Observation("ns", "m", float(t), pods))
    return h


ITL50 = {**BASE, "targetInterTokenLatency": "50ms"}


def test_short_answers_tighten_the_itl_target() -> None:
    # 20 tokens per answer against shortOutputTokens 40: target 50 ms x 0.5 = 25 ms; observed 30 ms ->
    # 2 ready x 30 / 25 = 2.4 -> 3 replicas, by latency.
    replicas, reason, details = run(answers(0.03, 20.0), {**ITL50, "shortOutputTokens": "40"})
    assert (replicas, reason) == (3, "latency_up")
    assert details["mean_output_tokens"] == pytest.approx(20.0)
    assert details["itl_short_output_factor"] == pytest.approx(0.5)
    assert details["target_itl_effective_s"] == pytest.approx(0.025)
    assert details["latency_ratio"] == pytest.approx(1.2)


def test_long_answers_and_the_switch_off_keep_the_target() -> None:
    # 200 tokens per answer: factor 1, 30 / 50 ms = 0.6 x 2 = 1.2 < the policy's 2: steady.
    assert run(answers(0.03, 200.0), ITL50)[:2] == (2, "steady")
    # 20 tokens but shortOutputTokens 0: the plain target, steady too, and no factor reported.
    replicas, reason, details = run(answers(0.03, 20.0), {**ITL50, "shortOutputTokens": "0"})
    assert (replicas, reason) == (2, "steady") and "itl_short_output_factor" not in details


@pytest.mark.parametrize("itl,target,floor,want", [
    (0.019, 0.056, 0.0112, (1 - 0.0112 / 0.019) / (1 - 0.0112 / 0.056)),  # 8B A100: 0.51, where 19 / 56 = 0.34
    (0.056, 0.056, 0.0112, 1.0),  # at the target: the proportional ratio's 1
    (0.0112, 0.056, 0.0112, 0.0),  # at the floor: idle
    (0.005, 0.056, 0.0112, 0.0),  # under a floor fitted high: idle, not negative
    (0.05, 0.05, 0.07, 0.0),  # a target under the floor holds no busy share
    (0.05, 0.05, 0.0, 0.0),  # no floor
    (float("nan"), 0.056, 0.0112, 0.0),  # no reading, not NaN carried into the count
    (0.019, 0.056, float("nan"), 0.0),
    (0.019, 0.056, float("inf"), 0.0),
])
def test_busy_ratio_by_hand(itl: float, target: float, floor: float, want: float) -> None:
    assert busy_ratio(itl, target, floor) == pytest.approx(want)


def test_the_busy_share_counts_only_under_the_target_and_only_with_a_floor() -> None:
    # under the target it adds to the proportional ratio where larger: 2 x 0.51 = 1.03 against 2 x 0.34
    assert latency_desired(None, 0.019, 10.0, 2, None, 0.056).desired == pytest.approx(2 * 0.019 / 0.056)
    got = latency_desired(None, 0.019, 10.0, 2, None, 0.056, itl_floor=0.0112)
    assert got is not None and got.desired == pytest.approx(2 * busy_ratio(0.019, 0.056, 0.0112))
    # near the floor the proportional ratio is the larger, and it stands
    assert latency_desired(None, 0.012, 10.0, 2, None, 0.056, itl_floor=0.0112).desired == pytest.approx(
        2 * 0.012 / 0.056)
    # over the target the term is as before: proportional in the stable window, its root in the panic one
    for step in (1.0, 0.5):
        assert latency_desired(None, 0.112, 10.0, 2, None, 0.056, itl_floor=0.0112, itl_step=step) == \
            latency_desired(None, 0.112, 10.0, 2, None, 0.056, itl_step=step)


def test_from_window_reads_the_floor_only_with_itl_scaling_busy() -> None:
    load = Load(itl_sum_rate=0.019 * 100.0, itl_count_rate=100.0, finished_rate=1.0)
    for scaling, want in (("proportional", 0.019 / 0.056), ("busy", busy_ratio(0.019, 0.056, 0.0112))):
        config = parse_metadata({"model": "m", "targetInterTokenLatency": "56ms", "itlScaling": scaling})
        got = from_window(load, 60.0, 2.0, config, itl_floor=0.0112)
        assert got is not None and got.ratio == pytest.approx(want)


def test_an_unknown_itl_scaling_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match=r"itlScaling.*proportional.*busy"):
        parse_metadata({"model": "m", "itlScaling": "fast"})
