"""scaleDownDelay (Knative `scale-down-delay`): the count is the largest decided within the delay.

The pure step (scaler.windows.scale_down_delay) case by case, then decide() on timelines from
tests/scaler/test_policy_decide.py (policy `concurrency`, targetConcurrency 10: desired = ceil(mean running / 10);
the fleet follows each decision at once).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

import pytest
from test_policy_decide import Timeline, run, spike, summary

from keda_llm.scaler.model import Decision
from keda_llm.scaler.windows import DelayWindow, scale_down_delay


@dataclass(frozen=True)
class Case:
    label: str
    window: DelayWindow
    desired: int
    now: float
    delay: float
    held: int
    new_window: DelayWindow


CASES = [
    Case("first decision: itself", (), 4, 10.0, 60.0, 4, ((10.0, 4),)),
    Case("a drop inside the delay holds the older, larger count", ((10.0, 6),), 3, 69.0, 60.0, 6,
         ((10.0, 6), (69.0, 3))),
    Case("released exactly a delay after the larger count", ((10.0, 6), (40.0, 3)), 2, 70.0, 60.0, 3,
         ((40.0, 3), (70.0, 2))),
    Case("a rise evicts every count it is not below", ((10.0, 6), (40.0, 3)), 6, 50.0, 60.0, 6, ((50.0, 6),)),
    Case("a rise above everything: itself, alone", ((10.0, 6), (40.0, 3)), 9, 50.0, 60.0, 9, ((50.0, 9),)),
    Case("equal counts: the newer one stays, so it holds a full delay from now", ((10.0, 5),), 5, 50.0, 60.0, 5,
         ((50.0, 5),)),
    Case("zero delay: Knative's default, no hold", ((10.0, 6),), 2, 11.0, 0.0, 2, ((11.0, 2),)),
    Case("the max-queue keeps one entry per step down", ((0.0, 8), (10.0, 6), (20.0, 4)), 2, 30.0, 600.0, 8,
         ((0.0, 8), (10.0, 6), (20.0, 4), (30.0, 2))),
]


@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
def test_scale_down_delay_step(case: Case) -> None:
    assert scale_down_delay(case.window, case.desired, case.now, case.delay) == (case.held, case.new_window)


def drop(t: int) -> float:
    return 60.0 if t <= 100 else 20.0


def drop_and_back(t: int) -> float:
    return 60.0 if t <= 100 or t >= 180 else 20.0


KEYS = {"replicas", "reason", "details.would_be_replicas", "details.scale_down_delay_held"}

TIMELINES = [
    # Running 60 on 6 replicas, 20 from t=101. t=170: the stable window (110, 170] is all 20 -> 2, rate-limited
    # to floor(6/2) = 3; the 6 decided at 100 is 70 s old: held. t=220: the 6 is 120 s old, released: 3.
    # The 3 decided at 220 is itself a decision: held until 340, then 2 (ceil(20/10); floor(3/2) = 1 allows it).
    Timeline("a drop is held for the delay, then released one rate-limited step per delay", drop,
             [60, 100, 170, 219, 220, 339, 340], ready0=6, metadata={"scaleDownDelay": "120s"},
             want={60: {"replicas": 6, "reason": "steady"},
                   100: {"replicas": 6, "reason": "steady"},
                   170: {"replicas": 6, "reason": "scale_down_delay", "details.would_be_replicas": 3,
                         "details.scale_down_delay_held": 6},
                   219: {"replicas": 6, "reason": "scale_down_delay"},
                   220: {"replicas": 3, "reason": "rate_limited_down"},
                   339: {"replicas": 3, "reason": "scale_down_delay", "details.would_be_replicas": 2},
                   340: {"replicas": 2, "reason": "scale_down"}}),
    # Demand returns at t=180, inside the delay. t=200: stable (140, 200] = (39 x 20 + 21 x 60) / 60 = 34 -> 4,
    # the panic window's 6 / 6 ready is under 2: no panic; the 6 from 100 still holds. t=230: stable
    # (9 x 20 + 51 x 60) / 60 = 54 -> 6: steady. No replica was released, so none had to start again.
    Timeline("demand back inside the delay finds the replicas still there", drop_and_back, [100, 170, 200, 230],
             ready0=6, metadata={"scaleDownDelay": "120s"},
             want={100: {"replicas": 6, "reason": "steady"},
                   170: {"replicas": 6, "reason": "scale_down_delay"},
                   200: {"replicas": 6, "reason": "scale_down_delay", "details.would_be_replicas": 4},
                   230: {"replicas": 6, "reason": "steady"}}),
    # The same without the delay (Knative's 0s): 3 at 170; at 200 the panic window asks for 6 on 3 ready
    # (6 / 3 = 2, the threshold): panic, 3 replicas started again.
    Timeline("the same without the delay: released, then started again", drop_and_back, [100, 170, 200],
             ready0=6, metadata={"scaleDownDelay": "0s"},
             want={100: {"replicas": 6, "reason": "steady"},
                   170: {"replicas": 3, "reason": "rate_limited_down"},
                   200: {"replicas": 6, "reason": "panic"}}),
    # A delay shorter than the panic hold changes nothing in panic: 9 from t=105 until a stable window
    # without a trigger (105 + 60 < now), as in the spike case of test_policy_decide.py.
    Timeline("panic still never scales down, whatever the delay", spike, [105, 120, 165, 180], ready0=2,
             metadata={"scaleDownDelay": "10s"},
             want={105: {"replicas": 9, "reason": "panic"},
                   120: {"replicas": 9, "reason": "panic"},
                   165: {"replicas": 9, "reason": "panic"},
                   180: {"replicas": 4, "reason": "rate_limited_down"}}),
    # A delay longer than the panic hold: panic ends at 180 (Knative would drop to 4), the 9 decided at 165
    # holds until 285, then floor(9/2) = 4.
    Timeline("after panic the delay holds the panic count", spike, [105, 165, 180, 284, 285], ready0=2,
             metadata={"scaleDownDelay": "120s"},
             want={105: {"replicas": 9, "reason": "panic"},
                   165: {"replicas": 9, "reason": "panic"},
                   180: {"replicas": 9, "reason": "scale_down_delay", "details.would_be_replicas": 4},
                   284: {"replicas": 9, "reason": "scale_down_delay"},
                   285: {"replicas": 4, "reason": "rate_limited_down"}}),
]


@pytest.mark.parametrize("case", TIMELINES, ids=[c.label for c in TIMELINES])
def test_timeline(case: Timeline) -> None:
    got = run(case)
    for t, want in case.want.items():
        assert (t, summary(got[t][0], set(want))) == (t, want)


@pytest.mark.parametrize("metadata,delay", [
    ({}, 600.0),  # no coldStart, no reported start-up: the 10 min fallback
    ({"coldStart": "3m"}, 180.0),  # the default is the cold start
    ({"coldStart": "3m", "mode": "hybrid"}, 180.0),
    ({"coldStart": "3m", "mode": "proactive"}, 0.0),  # the forecast already looks a cold start ahead
    ({"coldStart": "3m", "mode": "proactive", "scaleDownDelay": "1m"}, 60.0),  # set: in every mode
    ({"coldStart": "3m", "scaleDownDelay": "0s"}, 0.0),
])
def test_default_delay_is_the_cold_start(metadata: dict[str, str], delay: float) -> None:
    got = run(Timeline("delay", lambda t: 20.0, [60], metadata=metadata, want={}))
    assert got[60][0].details["scale_down_delay_s"] == delay


def test_the_delay_never_holds_the_last_replica() -> None:
    """scaleToZero, idleTimeout 2m, demand until t=50: the default delay (10 min) does not keep the one replica;
    idle past 2 min it goes to zero at t=170 (as in test_policy_decide.py), and an activation at 210 wakes one
    replica, not a count from before the idle period."""
    case = Timeline("last replica", lambda t: 5.0 if t <= 50 else 0.0, [60, 170, 211], ready0=1, activations=(210,),
                    metadata={"scaleToZero": "true", "idleTimeout": "2m"}, want={})
    got = run(case)
    assert [(t, got[t][0].replicas, got[t][0].reason) for t in (60, 170, 211)] == [
        (60, 1, "steady"), (170, 0, "idle_zero"), (211, 1, "activation")]
    assert got[170][1].recent_counts == ()


def _back_at(t_back: int) -> Callable[[int], float]:
    return lambda t: 60.0 if t <= 100 or t >= t_back else 20.0


def _adaptive(t_back: int, metadata: dict[str, str] | None = None) -> list[tuple[int, Decision]]:
    """coldStart 60s, polls every 5 s to 900: demand 60 (6 replicas), 20 from t=101, 60 again from t_back."""
    polls = list(range(5, 901, 5))
    got = run(Timeline("adaptive", _back_at(t_back), polls, ready0=6,
                       metadata={"coldStart": "60s", **(metadata or {})}, want={}))
    return [(t, got[t][0]) for t in polls]


def test_a_release_regretted_within_the_delay_doubles_the_default_delay_then_it_decays() -> None:
    seq = _adaptive(260)
    released = [t for (_, a), (t, b) in pairwise(seq) if b.replicas < a.replicas]
    regrets = [t for t, d in seq if d.details.get("scale_down_delay_regret")]
    assert released and released[0] < 260  # the drop to 20 running was released after the 60 s delay
    assert all(d.details["scale_down_delay_factor"] == 1.0 for t, d in seq if t < regrets[0])
    assert len(regrets) == 1 and 260 <= regrets[0] < 260 + 60  # demand back within the delay of a release
    t_regret = regrets[0]
    after = dict(seq)
    assert after[t_regret + 5].details["scale_down_delay_s"] == 120.0  # two cold starts now
    # demand stays at 60 from then on: no release, no regret; 8 cold starts (480 s) later the factor halves
    assert after[t_regret + 475].details["scale_down_delay_factor"] == 2.0
    assert after[t_regret + 480].details["scale_down_delay_factor"] == 1.0
    assert after[t_regret + 480].details["scale_down_delay_s"] == 60.0


def test_a_rise_long_after_a_release_is_no_regret() -> None:
    seq = _adaptive(600)  # back 400 s after the drop: every release was more than a delay before
    assert not [t for t, d in seq if d.details.get("scale_down_delay_regret")]
    assert {d.details["scale_down_delay_factor"] for _, d in seq} == {1.0}


def test_a_delay_set_in_the_scaledobject_never_adapts() -> None:
    seq = _adaptive(260, {"scaleDownDelay": "60s"})
    assert {d.details["scale_down_delay_s"] for _, d in seq} == {60.0}
    assert not [t for t, d in seq if "scale_down_delay_factor" in d.details or "scale_down_delay_regret" in d.details]


def test_a_stale_hold_after_a_release_is_no_regret() -> None:
    # demand falls at t=101, the Deployment lags at 6 (as under HPA stabilization); p5 stops reporting at
    # t=200 and the stale hold answers the current 6: a hold, not demand coming back
    polls = list(range(5, 400, 5))
    got = run(Timeline("stale", lambda t: 60.0 if t <= 100 else 20.0, polls, ready0=6, follow=False,
                       metadata={"coldStart": "60s", "panicThreshold": "10"}, freeze={"p5": 200}, want={}))
    assert got[235][0].reason == "stale_hold" and got[235][0].replicas == 6
    assert [t for t in polls if got[t][0].details.get("scale_down_delay_regret")] == []
    assert got[395][1].delay_factor == 1.0


def test_a_release_before_an_idle_period_is_not_regretted_after_it() -> None:
    # 2 -> 1 at 545 (the 400 s delay), idle -> 0 at 730, woken at 800, up to 4 at once: the idle timeout, not
    # the delay, released that replica, so no regret
    def demand(t: int) -> float:
        return 20.0 if t <= 100 else 8.0 if t <= 700 else 0.0 if t < 800 else 20.0

    polls = list(range(5, 1001, 5))
    got = run(Timeline("zero", demand, polls, ready0=2, upstream=lambda t: 20.0 if t >= 800 else None, want={},
                       metadata={"coldStart": "400s", "scaleToZero": "true", "idleTimeout": "30s",
                                 "panicThreshold": "10"}))
    assert (got[545][0].replicas, got[730][0].replicas, got[805][0].replicas) == (1, 0, 4)
    assert [t for t in polls if got[t][0].details.get("scale_down_delay_regret")] == []


def _rise(after: float) -> Callable[[int], float]:
    """Running 40 on 4 replicas, 15 from t=101, `after` from t=210 (the last seconds of the polls below)."""
    return lambda t: 40.0 if t <= 100 else 15.0 if t < 210 else after


@pytest.mark.parametrize("after, held", [(35.0, 4), (25.0, 3), (15.0, 2)])
def test_the_default_delay_releases_no_replica_the_panic_window_asks_for(after: float, held: int) -> None:
    # At t=215 the 4 decided at 100 is older than the delay (coldStart 60s), and the stable window (155, 215]
    # asks for 2: (55 x 15 + 5 x 35) / 60 = 16.7 running. Its last 6 s (the panic window) hold the rise:
    # (15 + 5 x 35) / 6 = 31.7 -> 4; (15 + 5 x 25) / 6 = 23.3 -> 3. Under Knative's 2x panic threshold, so
    # Knative's count is the stable window's: the release would go while load rises. The floor is the panic
    # window's count, at most the replicas ready; with steady load (after 15) the release goes as before.
    got = run(Timeline("rise", _rise(after), [100, 215], ready0=4, metadata={"coldStart": "60s"}, want={}))
    d = got[215][0]
    assert d.details["kpa_desired"] == 2 and d.details["panic"] == 0.0
    assert d.replicas == held
    if held > 2:
        assert d.reason == "scale_down_delay" and d.details["release_guard_replicas"] == held
        assert d.details["would_be_replicas"] == 2
    else:
        assert d.reason == "scale_down" and "release_guard_replicas" not in d.details


def test_a_delay_set_in_the_scaledobject_releases_as_knative_does() -> None:
    # the same rise with scaleDownDelay set (here to the cold start the default would use): Knative's own
    # scale-down delay, which holds only the counts decided within it
    got = run(Timeline("rise", _rise(35.0), [100, 215], ready0=4, want={},
                       metadata={"coldStart": "60s", "scaleDownDelay": "60s"}))
    assert got[215][0].replicas == 2 and "release_guard_replicas" not in got[215][0].details


def test_the_guard_only_holds_replicas_it_never_adds_them() -> None:
    # a steeper rise: the panic window asks for (15 + 5 x 60) / 6 = 52.5 running -> 6, still under the panic
    # threshold with 4 ready (5.25 / 4 < 2): the guard keeps the 4 there are; scaling up stays the windows' call
    got = run(Timeline("steep", _rise(60.0), [100, 215], ready0=4, want={}, metadata={"coldStart": "60s"}))
    d = got[215][0]
    assert d.details["panic"] == 0.0 and d.details["kpa_desired"] == 2
    assert d.replicas == 4 and d.details["release_guard_replicas"] == 4
