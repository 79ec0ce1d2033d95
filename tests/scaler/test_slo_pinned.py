"""A queue pinned to one replica: the latency term leaves that replica out (scaler/slo.py `without_pinned`).

Found on mooncake-conv's lead-in: one replica took 719 requests while it was alone, the gateway then sent
new requests to the 63 others, and the term (ready x the model's mean TTFT / target) held the maximum for
the 50 minutes that replica took to drain its own queue.
"""

from __future__ import annotations

import pytest

from keda_llm.scaler.config import parse_metadata
from keda_llm.scaler.decide import decide
from keda_llm.scaler.history import ModelHistory, ReplicaWindow
from keda_llm.scaler.model import Observation, PolicyState, ReplicaSample, WorkloadState
from keda_llm.scaler.slo import PINNED_FACTOR, Unpinned, from_window, without_pinned


def win(pod: str, waiting: float | None, ttft: float | None = None, ttft_n: float = 0.0, itl: float | None = None,
        itl_n: float = 0.0, running: float | None = 0.0) -> ReplicaWindow:
    return ReplicaWindow(pod, (), running, 1.0, ttft, ttft_n, itl, itl_n, waiting)


def test_no_pinned_queue_keeps_the_models_means() -> None:
    # Balanced queues (least-loaded routing under a real shortage), no queue at all, no queue reported.
    assert without_pinned([win("a", 40.0, 9.0, 5), win("b", 50.0, 8.0, 5), win("c", 45.0, 7.0, 5)]) is None
    assert without_pinned([win("a", 0.0, 0.3, 5), win("b", 0.0, 0.2, 5)]) is None
    assert without_pinned([win("a", None, 1.5, 5, running=None), win("b", None, 0.2, 5, running=None)]) is None
    # At the bars exactly (a backlog of 8 x max(1, median 0); a TTFT of 8 x the median 0.2) is not past them.
    at_bars = [win("a", PINNED_FACTOR, 1.6, 5), win("b", 0.0, 0.2, 5), win("c", 0.0, 0.2, 5)]
    assert without_pinned(at_bars) is None


def test_a_pinned_queue_is_left_out_by_hand() -> None:
    # a: 500 queued, 2 first tokens at 200 s, slow steps; b, c: no queue, one queued request on d.
    # (The TTFT rule would leave a out as well: 200 s is past 8 x max(median 0.4, no target).)
    windows = [win("a", 500.0, 200.0, 2.0, 0.5, 1000.0), win("b", 0.0, 0.4, 6.0, 0.02, 300.0),
               win("c", 0.0, 0.2, 2.0, 0.04, 100.0), win("d", 1.0, None, 0.0, 0.03, 100.0)]
    got = without_pinned(windows)
    # median backlog 0.5 -> bar 8 x 1 = 8: only a is past it. TTFT (0.4 x 6 + 0.2 x 2) / 8 = 0.35; ITL
    # (0.02 x 300 + 0.04 x 100 + 0.03 x 100) / 500 = 0.026; queue 0 + 0 + 1.
    assert got == Unpinned(pytest.approx(0.35), pytest.approx(0.026), 1.0, 1)  # type: ignore[arg-type]


def test_the_bar_follows_the_median_backlog() -> None:
    # Every replica queues about 20: a 100-request queue is 5x the median, not pinned; 200 is 10x, pinned.
    base = [win(p, 20.0, 3.0, 4) for p in "abcd"]
    assert without_pinned([*base, win("e", 100.0, 20.0, 1)]) is None
    got = without_pinned([*base, win("e", 200.0, 60.0, 1)])
    assert got is not None and got.pinned == 1 and got.ttft == pytest.approx(3.0) and got.waiting == 80.0


def test_running_requests_count_in_the_backlog() -> None:
    # A queue worked off into an overfull batch: 30 running, 5 waiting against 1 each elsewhere.
    others = [win(p, 0.0, 0.5, 4, running=1.0) for p in "abc"]
    got = without_pinned([*others, win("d", 5.0, 0.6, 4, running=30.0)])
    assert got is not None and got.pinned == 1 and got.ttft == pytest.approx(0.5)


def test_a_backlog_just_worked_off_still_reports_its_queueing() -> None:
    # d holds 2 requests like the others, but its first tokens come after 20 minutes of queueing: its TTFT
    # is past 8 x max(median 0.5, target 1) = 8 s. Without a target the bar is 8 x 0.5 = 4 s.
    others = [win(p, 0.0, 0.5, 4, running=2.0) for p in "abc"]
    got = without_pinned([*others, win("d", 0.0, 1200.0, 2, running=2.0)], target_ttft=1.0)
    assert got is not None and got.pinned == 1 and got.ttft == pytest.approx(0.5)
    # 6 s: under 8 x the target, the replica stays in; with no target set it is past 8 x the median.
    slow = [*others, win("d", 0.0, 6.0, 2, running=2.0)]
    assert without_pinned(slow, target_ttft=1.0) is None
    assert without_pinned(slow) is not None
    # Every replica slow alike (a model short of capacity): nothing is pinned.
    assert without_pinned([win(p, 0.0, 30.0, 4, running=2.0) for p in "abcd"], target_ttft=1.0) is None


def test_no_replica_reports_a_queue() -> None:
    assert without_pinned([]) is None
    assert without_pinned([win("a", None, running=None)]) is None


def history(pinned_waiting: float, others_waiting: float, pinned_ttft: float, others_ttft: float,
            pods: int = 8, seconds: int = 61) -> ModelHistory:
    """`pods` ready pods reporting every second: pod 0 holds `pinned_waiting` queued requests and gives one
    first token every 4 s at `pinned_ttft`; the others hold `others_waiting` and give 2 a second at
    `others_ttft`; every pod 100 gaps of 30 ms per request."""
    h = ModelHistory("ns", "m")
    for t in range(seconds):
        samples = []
        for i in range(pods):
            rate, ttft, waiting = (0.25, pinned_ttft, pinned_waiting) if i == 0 else (2.0, others_ttft, others_waiting)
            n = rate * t
            samples.append(ReplicaSample(f"p{i}", float(t), running=10.0, waiting=waiting, max_running=256.0,
                                         ttft_sum=n * ttft, ttft_count=n, itl_sum=n * 100 * 0.03, itl_count=n * 100))
        h.ingest(Observation("ns", "m", float(t), tuple(samples)))
    return h


META = {"model": "m", "policy": "concurrency", "targetConcurrency": "100", "mode": "reactive", "scaleDownDelay": "0s",
        "targetTimeToFirstToken": "1s", "targetInterTokenLatency": "100ms"}
READY8 = WorkloadState(current_replicas=8, ready_replicas=8, min_replicas=1, max_replicas=64)


def decided(h: ModelHistory) -> tuple[int, str, dict[str, float]]:
    d, _ = decide(h, parse_metadata(META), PolicyState(initialized=True), READY8, 60.0)
    return d.replicas, d.reason, dict(d.details)


def test_a_pinned_backlog_does_not_take_the_model_to_its_maximum() -> None:
    # The model's mean TTFT: (0.25 x 1500 + 7 x 2 x 0.5) / 14.25 = 26.8 s over a 1 s target: 8 x sqrt(26.8)
    # = 41 before. The seven other replicas serve at 0.5 s with no queue: the term asks for nothing, and the
    # policy's own count stands ((80 running + 600 waiting) / 100 -> 7).
    h = history(600.0, 0.0, 1500.0, 0.5)
    before = from_window(h.window(60.0, 60.0), 60.0, 8, parse_metadata(META))
    assert before is not None and before.desired == pytest.approx(8 * (382 / 14.25) ** 0.5, rel=0.02)
    replicas, reason, details = decided(h)
    assert (replicas, reason) == (7, "scale_down")
    assert details["latency_pinned_replicas"] == 1.0
    assert "observed_ttft_s" not in details  # no queue on the other replicas: TTFT not judged


def test_a_model_short_everywhere_still_scales_on_latency() -> None:
    # Every replica queues 30 and gives first tokens at 4 s: nothing pinned, 8 x sqrt(4 / 1) = 16.
    replicas, reason, details = decided(history(30.0, 30.0, 4.0, 4.0))
    assert (replicas, reason) == (16, "latency_up")
    assert "latency_pinned_replicas" not in details
    assert details["observed_ttft_s"] == pytest.approx(4.0)
    # the wait in the queue (Little's law): 240 queued / 14.25 first tokens a second, well over a tenth of 4 s
    assert details["queue_wait_s"] == pytest.approx(240 / 14.25)


def test_the_other_replicas_queueing_are_still_judged() -> None:
    # Pod 0 pinned (600), the others queue 5 each at 2.25 s: the term judges them, 8 x sqrt(2.25) = 12.
    replicas, reason, details = decided(history(600.0, 5.0, 300.0, 2.25))
    assert (replicas, reason) == (12, "latency_up")
    assert details["observed_ttft_s"] == pytest.approx(2.25)
    assert details["latency_pinned_replicas"] == 1.0


def test_replica_windows_carry_each_replicas_latency_and_queue() -> None:
    h = history(600.0, 3.0, 300.0, 0.5, pods=2)
    by = {w.pod: w for w in h.replica_windows(60.0, 60.0)}
    assert by["p0"].ttft == pytest.approx(300.0) and by["p1"].ttft == pytest.approx(0.5)
    assert by["p0"].waiting == 600.0 and by["p1"].waiting == 3.0
    assert by["p1"].itl == pytest.approx(0.03)
    # counts in the window: the mean rate x the window (the first sample has no rate yet)
    assert by["p1"].ttft_count == pytest.approx(2.0 * 60.0)
    assert by["p1"].itl_count == pytest.approx(200.0 * 60.0)
