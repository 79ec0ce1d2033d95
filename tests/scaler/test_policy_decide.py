"""decide() on timelines: a simulated fleet reports every second, KEDA polls, replicas follow the decision.

Policy `concurrency` with targetConcurrency 10 throughout, so every expected count is derived by hand
from the demand: desired = ceil(window mean of total running / 10), then the Knative rules.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from keda_llm.scaler.config import parse_metadata
from keda_llm.scaler.decide import activate, decide
from keda_llm.scaler.history import ModelHistory
from keda_llm.scaler.model import Decision, NoData, Observation, PolicyState, ReplicaSample, WorkloadState

# mode reactive: these timelines pin the Knative core; the forecast (the default, hybrid) has its own tests in
# test_decide_forecast.py.
BASE = {"model": "m", "policy": "concurrency", "targetConcurrency": "10", "mode": "reactive"}


@dataclass
class Pod:
    name: str
    ready_at: float  # model loaded and serving from then on
    frozen_at: float | None = None  # stops reporting then: its exporter keeps its last sample


@dataclass
class Timeline:
    """A case: demand over time and what happens to the fleet."""

    label: str
    demand: Callable[[int], float]  # total running requests at second t, split over the reporting pods
    polls: list[int]
    want: dict[int, dict[str, object]]  # poll time -> expected summary (see `summary`)
    metadata: dict[str, str] = field(default_factory=dict)
    ready0: int = 2
    state: PolicyState = field(default_factory=lambda: PolicyState(initialized=True))
    load_time: float = 0.0  # seconds a new replica takes to load
    follow: bool = True  # the fleet follows each decision (KEDA+HPA at once)
    freeze: dict[str, int] = field(default_factory=dict)  # pod -> second it stops reporting
    upstream: Callable[[int], float | None] = lambda t: None
    activations: tuple[int, ...] = ()


def run(case: Timeline) -> dict[int, tuple[Decision, PolicyState]]:
    config = parse_metadata({**BASE, **case.metadata})
    history = ModelHistory("ns", "m", stale_after=config.stale_after)
    pods = [Pod(f"p{i}", -math.inf) for i in range(case.ready0)]
    state = case.state
    out: dict[int, tuple[Decision, PolicyState]] = {}
    last: dict[str, ReplicaSample] = {}
    for t in range(1, max(case.polls) + 1):
        for name, at in case.freeze.items():
            for p in pods:
                if p.name == name:
                    p.frozen_at = at
        reporting = [p for p in pods if p.ready_at <= t and (p.frozen_at is None or t <= p.frozen_at)]
        share = case.demand(t) / len(reporting) if reporting else 0.0
        samples = []
        for p in pods:
            if p.ready_at > t:
                samples.append(ReplicaSample(p.name, 0.0, up=False))  # loading: exporter cannot scrape it yet
            elif p.frozen_at is not None and t > p.frozen_at:
                samples.append(last[p.name])  # stopped reporting: the last sample, ageing
            else:
                last[p.name] = ReplicaSample(p.name, float(t), running=share, waiting=0.0)
                samples.append(last[p.name])
        history.ingest(Observation("ns", "m", float(t), tuple(samples), case.upstream(t)))
        if t in case.activations:
            state = activate(state, float(t))
        if t in case.polls:
            ready = sum(1 for p in pods if p.ready_at <= t)
            workload = WorkloadState(current_replicas=len(pods), ready_replicas=ready)
            decision, state = decide(history, config, state, workload, float(t))
            out[t] = (decision, state)
            if case.follow:
                while len(pods) < decision.replicas:
                    pods.append(Pod(f"p{len(pods)}", t + case.load_time))
                del pods[decision.replicas:]
    return out


def summary(d: Decision, keys: set[str]) -> dict[str, object]:
    """The whole result as one dict: count, reason, activity, and the details a case names."""
    full: dict[str, object] = {"replicas": d.replicas, "reason": d.reason, "active": d.active}
    full.update({f"details.{k}": v for k, v in d.details.items()})
    if d.would_be is not None:
        full["would_be.replicas"] = d.would_be.replicas
        full["would_be.reason"] = d.would_be.reason
    return {k: v for k, v in full.items() if k in keys}


def spike(t: int) -> float:
    return 20.0 if t <= 100 or t >= 110 else 100.0


def queue_grows(t: int) -> float:
    return 20.0 if t <= 100 else 100.0 + (t - 101)


CASES = [
    Timeline("steady: a restarted scaler starts in panic (Knative), holds, then steady after a stable window",
             lambda t: 20.0, [15, 75, 90, 120], state=PolicyState(),
             want={15: {"replicas": 2, "reason": "panic", "details.panic": 1.0},
                   75: {"replicas": 2, "reason": "panic"},
                   90: {"replicas": 2, "reason": "steady", "details.panic": 0.0, "details.dspc": 2},
                   120: {"replicas": 2, "reason": "steady", "active": True}}),
    # demand 40 + t/6: stable mean over s in (t-60, t] = 40 + (t - 29.5)/6
    Timeline("ramp: follows the stable window up, no panic", lambda t: 40.0 + t / 6, [60, 90, 120], ready0=4,
             want={60: {"replicas": 5, "reason": "scale_up", "details.dspc": 5, "details.dppc": 5},
                   90: {"replicas": 6, "reason": "scale_up", "details.panic": 0.0},
                   120: {"replicas": 6, "reason": "steady"}}),
    # t=105: panic window s=100..105 = (20 + 5x100)/6 = 86.7 -> 9 >= 2x2; stable (55x20 + 5x100)/60 = 26.7 -> 3.
    # t=120: stable (40x20 + 9x100 + 11x20)/60 = 32 -> 4 = floor(9/2); panic holds 9 until 105 + 60 < now.
    # scaleDownDelay 0s (Knative's default) isolates the panic rule; with the default delay the 9 would hold
    # until the delay passes (tests/scaler/test_scale_down_delay.py).
    Timeline("spike: panic scales to the panic window, never down until a stable window without panic",
             spike, [90, 105, 120, 165, 180], metadata={"scaleDownDelay": "0s"},
             want={90: {"replicas": 2, "reason": "steady"},
                   105: {"replicas": 9, "reason": "panic", "details.dppc": 9, "details.dspc": 3},
                   120: {"replicas": 9, "reason": "panic", "details.dspc": 4, "details.desired_stable": 4},
                   165: {"replicas": 9, "reason": "panic"},
                   180: {"replicas": 4, "reason": "rate_limited_down", "details.panic": 0.0,
                         "details.max_scale_down": 4}}),
    Timeline("rate limit up: maxScaleUpRate 2 -> ceil(2 x 2)", lambda t: 100.0, [60],
             metadata={"maxScaleUpRate": "2", "panicThreshold": "10"},
             want={60: {"replicas": 4, "reason": "rate_limited_up", "details.dspc": 10,
                        "details.max_scale_up": 4}}),
    Timeline("max clamp: maxReplicas 3", lambda t: 50.0, [60], metadata={"maxReplicas": "3", "panicThreshold": "10"},
             want={60: {"replicas": 3, "reason": "max_clamp", "details.would_be_replicas": 5}}),
    Timeline("min clamp: minReplicas 4 over a rate-limited 2", lambda t: 20.0, [60], ready0=4,
             metadata={"minReplicas": "4"},
             want={60: {"replicas": 4, "reason": "min_clamp", "details.kpa_desired": 2}}),
    Timeline("advisory: decides scale_up to 5, hands back the current 2", lambda t: 50.0, [60],
             metadata={"advisory": "true", "panicThreshold": "10"},
             want={60: {"replicas": 2, "reason": "advisory_hold", "active": True, "would_be.replicas": 5,
                        "would_be.reason": "scale_up", "details.would_be_replicas": 5}}),
    # demand 5 until t=50, then nothing; idleTimeout 120 s: inactive from t=170 on.
    Timeline("drop to zero: idle past idleTimeout -> inactive; an activation wakes it",
             lambda t: 5.0 if t <= 50 else 0.0, [60, 169, 170, 200, 211], ready0=1, activations=(210,),
             metadata={"scaleToZero": "true", "idleTimeout": "2m"},
             want={60: {"replicas": 1, "reason": "steady", "active": True},
                   169: {"replicas": 1, "reason": "steady", "active": True, "details.idle_s": 119.0},
                   170: {"replicas": 0, "reason": "idle_zero", "active": False},
                   200: {"replicas": 0, "reason": "idle_zero", "active": False, "details.current": 0},
                   211: {"replicas": 1, "reason": "activation", "active": True}}),
    Timeline("from zero: upstream demand (activationQuery) wakes it", lambda t: 0.0, [60, 250, 300], ready0=1,
             upstream=lambda t: 3.0 if t >= 300 else 0.0, metadata={"scaleToZero": "true", "idleTimeout": "1m"},
             want={60: {"replicas": 0, "reason": "idle_zero", "active": False},
                   250: {"replicas": 0, "reason": "idle_zero", "active": False},
                   300: {"replicas": 1, "reason": "activation", "active": True}}),
    Timeline("scaleToZero off: always active, never below one", lambda t: 0.0, [60, 1000], ready0=1,
             want={60: {"replicas": 1, "reason": "steady", "active": True},
                   1000: {"replicas": 1, "reason": "steady", "active": True}}),
    # p1 stops reporting at t=100 (stale from t=131): demand 5 on p0 alone wants 1, the stale data holds 2.
    Timeline("a replica stops reporting: excluded, and no scale-down on stale data",
             lambda t: 20.0 if t <= 100 else 5.0, [200], freeze={"p1": 100},
             want={200: {"replicas": 2, "reason": "stale_hold", "details.fresh": 1, "details.stale": 1,
                         "details.stale_data": 1.0, "details.would_be_replicas": 1, "details.demand": 5.0}}),
    Timeline("stale data still scales up on fresh demand", lambda t: 20.0 if t <= 100 else 60.0, [200],
             freeze={"p1": 100},
             want={200: {"replicas": 6, "reason": "panic", "details.stale_data": 1.0, "details.demand": 60.0}}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
def test_timeline(case: Timeline) -> None:
    got = run(case)
    for t, want in case.want.items():
        assert (t, summary(got[t][0], set(want))) == (t, want)


def test_pending_guard_no_cascade_while_replicas_load() -> None:
    """A 3-minute model load: the queue grows while the new replicas load, the count does not."""
    polls = list(range(90, 301, 15))
    case = Timeline("pending guard", queue_grows, polls, load_time=180.0, want={})
    got = run(case)
    # t=105: panic window (20 + 100+101+102+103+104)/6 = 88.3 -> 9 (see the spike case).
    assert summary(got[105][0], {"replicas", "reason"}) == {"replicas": 9, "reason": "panic"}
    # t=120: the panic window alone asks for ceil(116.5/10) = 12; 7 replicas are loading: hold 9.
    assert summary(got[120][0], {"replicas", "reason", "details.pending", "details.would_be_replicas"}) == {
        "replicas": 9, "reason": "pending_guard", "details.pending": 7, "details.would_be_replicas": 12}
    held = [(t, got[t][0].replicas, got[t][0].reason) for t in polls if 120 <= t < 285]
    assert held == [(t, 9, "pending_guard") for t in range(120, 285, 15)]
    # Panic did not remember the refused counts.
    assert got[270][1].max_panic_pods == 9
    # Loaded at t=285 (105 + 180): the guard lets go and the backlog is served.
    assert got[285][0].details["pending"] == 0 and got[285][0].replicas > 9


def test_pending_guard_lets_go_after_two_cold_starts() -> None:
    """Pods stuck pending (no GPU node) past 2 x coldStart: scale-up is allowed again."""
    case = Timeline("stuck", queue_grows, [105, 120, 159, 160], load_time=10_000.0, metadata={"coldStart": "20s"},
                    want={})
    got = run(case)
    # The first poll that sees pending replicas is t=120: guarded until 120 + 2 x 20 s.
    assert [(t, got[t][0].replicas, got[t][0].reason) for t in (120, 159)] == [
        (120, 9, "pending_guard"), (159, 9, "pending_guard")]
    # t=160: panic window s=155..160 is demand 154..159, mean 156.5 -> 16.
    assert (got[160][0].replicas, got[160][0].reason) == (16, "panic")


def test_everything_loading_holds() -> None:
    """No replica reports yet, none ready: hold the count (not NoData, not zero)."""
    config = parse_metadata(BASE)
    h = ModelHistory("ns", "m")
    h.ingest(Observation("ns", "m", 10.0, (ReplicaSample("a", 0.0, up=False), ReplicaSample("b", 0.0, up=False))))
    d, _ = decide(h, config, PolicyState(), WorkloadState(current_replicas=2, ready_replicas=0), 10.0)
    assert summary(d, {"replicas", "reason", "details.loading", "details.pending"}) == {
        "replicas": 2, "reason": "pending_guard", "details.loading": 2, "details.pending": 2}


@pytest.mark.parametrize("label,observations,workload,now,needle", [
    ("nothing ingested yet", [], WorkloadState(1, 1), 10.0, "no observation"),
    ("collection stopped past staleAfter", [Observation("ns", "m", 10.0, (ReplicaSample("a", 10.0, running=1),))],
     WorkloadState(1, 1), 40.5, "30.5s ago"),
    ("every ready replica stale", [Observation("ns", "m", 100.0, (ReplicaSample("a", 60.0, running=1),))],
     WorkloadState(1, 1), 100.0, "none of the 1 ready replicas"),
    ("unknown model: ready replicas, none in the data", [Observation("ns", "m", 100.0, ())],
     WorkloadState(2, 2), 100.0, "none of the 2 ready replicas"),
    ("policy without a signal", [Observation("ns", "m", 100.0, (ReplicaSample("a", 100.0, running=1),))],
     WorkloadState(1, 1), 100.0, "llm_kv_cache_capacity_tokens"),
])
def test_no_data(label: str, observations: list[Observation], workload: WorkloadState, now: float,
                 needle: str) -> None:
    config = parse_metadata({"model": "m"} if "signal" in label else BASE)
    h = ModelHistory("ns", "m")
    for o in observations:
        h.ingest(o)
    with pytest.raises(NoData, match=needle):
        decide(h, config, PolicyState(), workload, now)


def test_two_scalers_agree() -> None:
    """Two scaler pods fed the same observations decide the same, every poll (peers must agree)."""
    for case in (Timeline("spike", spike, list(range(5, 200, 5)), want={}),
                 Timeline("guard", queue_grows, list(range(5, 320, 5)), load_time=180.0, want={})):
        first, second = run(case), run(case)
        assert first == second
        assert len({d.replicas for d, _ in first.values()}) > 1  # the timeline did move


@pytest.mark.parametrize("metadata,activation,want", [
    ({"scaleToZero": "true"}, None, {"replicas": 0, "reason": "idle_zero", "active": False}),
    ({"scaleToZero": "true"}, 95.0, {"replicas": 1, "reason": "activation", "active": True}),
    ({}, None, {"replicas": 1, "reason": "activation", "active": True}),
], ids=["scaleToZero: stays at zero", "scaleToZero: an activation wakes it", "no scaleToZero: always active"])
def test_at_zero_without_any_observation(metadata: dict[str, str], activation: float | None,
                                         want: dict[str, object]) -> None:
    """At zero nothing reports: not NoData. The scaler may have just started (no history at all)."""
    state = PolicyState() if activation is None else activate(PolicyState(), activation)
    d, new = decide(ModelHistory("ns", "m"), parse_metadata({**BASE, **metadata}), state, WorkloadState(0, 0), 100.0)
    assert summary(d, set(want)) == want
    assert new.active is want["active"]


def test_tokens_policy_end_to_end() -> None:
    """The default policy through decide(): two replicas of 10,000 KV tokens, half full, 16 queued requests of
    500 prompt tokens (1,000 prompt tokens/s over 2 finished/s). Both replicas queue, so each one's 500 prompt
    tokens/s is its measured prefill rate and the queue is work: 8,000 tokens / (500/s x the 600 s default
    cold start) = 0.0267 replicas beside the KV held: 10,000 / (10,000 x 0.8) + 0.0267 = 1.28 -> 2 (the old
    rule, the queue as KV to hold, asked for (10,000 + 8,000) / 8,000 = 2.25 -> 3)."""
    config = parse_metadata({"model": "m"})
    h = ModelHistory("ns", "m")
    for t in range(1, 61):
        h.ingest(Observation("ns", "m", float(t), tuple(
            ReplicaSample(pod, float(t), running=4.0, waiting=8.0, kv_usage_ratio=0.5, kv_capacity_tokens=10_000.0,
                          prompt_tokens_total=500.0 * t, requests_finished_total=1.0 * t)
            for pod in ("a", "b"))))
    d, _ = decide(h, config, PolicyState(initialized=True), WorkloadState(2, 2), 60.0)
    want = {"replicas": 2, "reason": "steady", "details.demand": 18000.0, "details.capacity_per_replica": 8000.0,
            "details.tokens_held": 10000.0, "details.tokens_queued": 8000.0, "details.mean_prompt_tokens": 500.0,
            "details.backlog_desired": 8000.0 / (500.0 * 600.0), "details.dspc": 2, "details.panic": 0.0}
    assert summary(d, set(want)) == want
