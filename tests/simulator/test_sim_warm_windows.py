"""The backtest honours warmWindows: the simulator runs the scaler's own decide, so a window's floor reaches
KEDA and the HPA as it would in production.

Simulated time 0 is the epoch, 00:00Z Thursday 1 January 1970, so a window `5 0 1 1 *` in UTC opens at
t = 300; with duration 5m and leadTime 0s it closes at 600. The ScaledObject is the recommended one
(scale to zero, pollingInterval 10 s, cooldownPeriod 120 s, the HPA syncing every 15 s); cold start
10 s + 50 s. Two requests arrive at t = 1000, long after the window.
"""

from __future__ import annotations

from dataclasses import replace

from sim_helpers import at, config, run, trace

from keda_llm.simulator.cluster.engine import SimResult
from keda_llm.simulator.control.policies import OursController, default_scaledobject

WINDOW = "[{start: '5 0 1 1 *', duration: 5m, timezone: UTC, desiredReplicas: 3, leadTime: 0s}]"


def backtest(windows: str | None) -> tuple[SimResult, list[tuple[float, str, int, int]]]:
    so = default_scaledobject("m", scale_to_zero=True)
    trig = so.triggers[0]
    md = {**trig.metadata, "policy": "concurrency", "targetConcurrency": "4"}
    if windows is not None:
        md["warmWindows"] = windows
    ctl = OursController("ours", replace(so, triggers=(replace(trig, metadata=md),)), initial_replicas=0)
    res = run(trace([1000, 1000], output=3), config(), ctl)
    events = [(e.at, e.kind, e.replicas_before, e.replicas_after) for e in ctl.events if e.kind != "hpa_created"]
    return res, events


def test_a_window_scales_a_model_at_zero_up_for_its_span_and_back_down() -> None:
    res, events = backtest(WINDOW)
    assert events[:4] == [
        (300.0, "keda_activate", 0, 1),  # KEDA's poll at 300 finds the trigger active: 0 -> 1
        (300.0, "hpa_scale_up", 1, 3),  # the HPA's sync at 300 (20 x 15 s) reads the floor, 3
        (615.0, "hpa_scale_down", 3, 1),  # the first sync after 600 reads 0; the HPA keeps its minimum, 1
        (720.0, "keda_deactivate", 1, 0),  # last active poll 590 + cooldownPeriod 120 s: the poll at 720
    ]
    assert at(res, 295.0) == (0, 0, 0)
    assert at(res, 360.0) == (3, 0, 3)  # ready one cold start (60 s) after 300
    assert at(res, 595.0) == (3, 0, 3)
    assert at(res, 740.0) == (0, 0, 0)
    assert res.cold_starts == 4  # three for the window, one for the requests at 1000


def test_without_the_window_nothing_starts_before_demand() -> None:
    res, events = backtest(None)
    assert events[0] == (1000.0, "push_activate", 0, 1)
    assert res.cold_starts == 1
