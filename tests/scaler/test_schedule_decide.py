"""decide() with warmWindows: step 5a raises the count to an open window's floor, clamped by max, and wakes
a model at zero; outside the window the policy's own count stands.

The window: Monday 6 July 2026 09:00-10:00 Europe/Berlin (CEST, UTC+2): 07:00Z-08:00Z. The policy is
`concurrency` with targetConcurrency 10, mode reactive: two replicas running 5 requests each want
ceil(10 / 10) = 1 replica, which the Knative rate limit holds at floor(2 / 2) = 1.
"""

from __future__ import annotations

from datetime import datetime, timezone

from keda_llm.scaler.config import parse_metadata
from keda_llm.scaler.decide import decide
from keda_llm.scaler.history import ModelHistory
from keda_llm.scaler.model import Decision, Observation, PolicyState, ReplicaSample, WorkloadState

START = datetime(2026, 7, 6, 7, tzinfo=timezone.utc).timestamp()
END = START + 3600.0
WINDOW = ("[{start: '0 9 6 7 *', end: '0 10 6 7 *', timezone: Europe/Berlin, desiredReplicas: 3, "
          "leadTime: 10m}]")
META = {"model": "m", "policy": "concurrency", "targetConcurrency": "10", "mode": "reactive",
        "scaleDownDelay": "0s", "warmWindows": WINDOW}


def busy(at: float, pods: int = 2) -> ModelHistory:
    """`pods` replicas reporting 5 running requests each, every 5 s over the ten minutes before `at`."""
    h = ModelHistory("ns", "m", stale_after=30.0)
    for t in range(int(at) - 600, int(at) + 1, 5):
        h.ingest(Observation("ns", "m", float(t), tuple(ReplicaSample(f"p{i}", float(t), running=5.0, waiting=0.0)
                                                         for i in range(pods))))
    return h


def once(metadata: dict[str, str], history: ModelHistory, workload: WorkloadState, now: float) -> Decision:
    decision, _ = decide(history, parse_metadata(metadata), PolicyState(initialized=True), workload, now)
    return decision


RUNNING = WorkloadState(current_replicas=2, ready_replicas=2)


def test_the_floor_raises_the_policy_count_while_the_window_is_open() -> None:
    before = once(META, busy(START - 601), RUNNING, START - 601)
    assert (before.replicas, before.reason) == (1, "scale_down")
    assert "warm_window" not in before.details
    d = once(META, busy(START - 600), RUNNING, START - 600)  # the lead: ten minutes early
    assert (d.replicas, d.reason, d.active) == (3, "warm_window", True)
    assert d.details["warm_window_floor"] == 3 and d.details["warm_window"] == 0
    assert d.details["warm_window_starts_at"] == START and d.details["warm_window_ends_at"] == END
    assert d.details["warm_window_opens_at"] == START - 600
    assert d.details["would_be_replicas"] == 1  # what the policy alone asked for
    assert once(META, busy(END - 1), RUNNING, END - 1).replicas == 3
    after = once(META, busy(END), RUNNING, END)
    assert (after.replicas, after.reason) == (1, "scale_down")


def test_more_demand_than_the_floor_wins_and_max_still_caps() -> None:
    # 4 replicas of 5 requests: ceil(20 / 10) = 2 replicas, under the floor of 3; 8 of them: 4, over it
    assert once(META, busy(START, 8), WorkloadState(8, 8), START).replicas == 4
    capped = once({**META, "maxReplicas": "2"}, busy(START), RUNNING, START)
    assert (capped.replicas, capped.reason) == (2, "max_clamp")


def test_the_default_lead_is_the_forecast_horizon() -> None:
    # coldStart 3m + KEDA's default pollingInterval 30s + the HPA's 15s sync = 225 s before the start
    md = {**META, "coldStart": "3m", "warmWindows": WINDOW.replace(", leadTime: 10m", "")}
    assert once(md, busy(START - 226), RUNNING, START - 226).replicas == 1
    d = once(md, busy(START - 225), RUNNING, START - 225)
    assert d.replicas == 3 and d.details["warm_window_lead_s"] == 225.0


def test_a_model_at_zero_wakes_to_the_floor_and_sleeps_after_the_window() -> None:
    md = {**META, "scaleToZero": "true", "idleTimeout": "60s"}
    empty = ModelHistory("ns", "m", stale_after=30.0)  # nothing runs, nothing reports
    zero = WorkloadState(current_replicas=0, ready_replicas=0)
    asleep = once(md, empty, zero, START - 601)
    assert (asleep.replicas, asleep.reason, asleep.active) == (0, "idle_zero", False)
    woken = once(md, empty, zero, START - 600)
    assert (woken.replicas, woken.reason, woken.active) == (3, "warm_window", True)
    idle = ModelHistory("ns", "m", stale_after=30.0)  # three idle replicas to the end of the window
    for t in range(int(END) - 60, int(END) + 1, 5):
        idle.ingest(Observation("ns", "m", float(t), tuple(ReplicaSample(f"p{i}", float(t), running=0.0, waiting=0.0)
                                                          for i in range(3))))
    three = WorkloadState(current_replicas=3, ready_replicas=3)
    assert once(md, idle, three, END - 1).replicas == 3
    done = once(md, idle, three, END)  # no demand was ever seen: idle past idleTimeout, so to zero at once
    assert (done.replicas, done.reason, done.active) == (0, "idle_zero", False)


def test_with_nothing_to_decide_on_an_open_window_still_wakes_a_model_at_zero() -> None:
    """The service's path for a model at zero it has no data for (no exporter reachable): warm_at_zero."""
    from keda_llm.scaler.decide import warm_at_zero

    cfg = parse_metadata({**META, "scaleToZero": "true"})
    zero = WorkloadState(current_replicas=0, ready_replicas=0)
    assert warm_at_zero(cfg, zero, START - 601) is None
    d = warm_at_zero(cfg, zero, START - 600)
    assert d is not None and (d.replicas, d.reason, d.active) == (3, "warm_window", True)
    assert d.details["warm_window_ends_at"] == END
    assert warm_at_zero(cfg, zero, END) is None
    # no data never lowers what runs, and maxReplicas still caps the floor
    assert (warm_at_zero(cfg, WorkloadState(5, 5), START) or Decision(0, "")).replicas == 5
    capped = warm_at_zero(parse_metadata({**META, "scaleToZero": "true", "maxReplicas": "2"}), zero, START)
    assert capped is not None and capped.replicas == 2
    # no leadTime: coldStart unset and nothing reported, so 10 minutes + 30 s poll + 15 s sync = 645 s early
    bare = parse_metadata({**META, "scaleToZero": "true", "warmWindows": WINDOW.replace(", leadTime: 10m", "")})
    assert warm_at_zero(bare, zero, START - 646) is None
    assert warm_at_zero(bare, zero, START - 645) is not None
