"""A window cut from a longer trace starts mid-flight: replay the traffic before it, score only the window.

A deployment serving the 10:00-16:00 window of a week has been running all morning: it holds the replicas
the morning's load asked for, and its scaler holds the morning's history. Started cold (one replica, no
history) at 10:00, every reactive policy misses the window's first minutes while its count catches up,
which says nothing about the policy; the oracle, which provisions ahead of time 0, never starts cold. So
a window that carries its lead-in (`Trace.window(..., lead_s=...)`) is simulated from the start of the
lead-in, and the result keeps only the window: the requests arriving in it, with times re-based to the
window's start, and the totals (GPU-seconds, cold starts, scalings, time at zero) counted from it
(`SimConfig.score_from_s`). Requests of the lead-in still in flight at the window's start load the
window's replicas, as they would.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from keda_llm.simulator.cluster.engine import RequestTable, SimResult, Timeline
from keda_llm.simulator.hardware.replica import Request
from keda_llm.simulator.workload.traces import Trace

#: seconds of lead-in the backtests give every policy but the oracle: longer than every policy's memory of the load
#: that sets its count (ours' windows are 10 minutes at most, the HPA's stabilization 5, a cold start 4)
LEAD_IN_S = 1800.0


def lead_and_window(trace: Trace) -> tuple[Trace, float]:
    """The trace to simulate and where its scored part starts."""
    return trace.after_lead(), (trace.lead_s if trace.lead is not None else 0.0)


class _Shift:
    """Copies of the window's requests on the window's clock; one copy per request however many lists hold it."""

    def __init__(self, start_s: float) -> None:
        self.start_s = start_s
        self._done: dict[int, Request] = {}

    def one(self, r: Request) -> Request:
        got = self._done.get(id(r))
        if got is None:
            by = self.start_s
            got = dataclasses.replace(r, arrival_s=r.arrival_s - by,
                                      first_token_s=None if r.first_token_s is None else r.first_token_s - by,
                                      finish_s=None if r.finish_s is None else r.finish_s - by)
            self._done[id(r)] = got
        return got

    def kept(self, reqs: list[Request]) -> list[Request]:
        return [self.one(r) for r in reqs if r.arrival_s >= self.start_s]


def _timeline(tl: Timeline, start_s: float) -> Timeline:
    keep = [i for i, t in enumerate(tl.t) if t >= start_s]
    out = Timeline()
    for f in dataclasses.fields(Timeline):
        col = getattr(tl, f.name)
        setattr(out, f.name, [col[i] - start_s if f.name == "t" else col[i] for i in keep])
    return out


def _event(ev: Any, start_s: float) -> Any | None:
    """A controller event on the window's clock, or None when it happened in the lead-in."""
    if hasattr(ev, "at"):
        return dataclasses.replace(ev, at=ev.at - start_s) if ev.at >= start_s else None
    if isinstance(ev, tuple) and ev and isinstance(ev[0], (int, float)):
        return (ev[0] - start_s, *ev[1:]) if ev[0] >= start_s else None
    return ev


def scored_part(result: SimResult, start_s: float) -> SimResult:
    """The part of a run from `start_s` on, on a clock starting there. The run must have counted its totals
    from `start_s` (`SimConfig.score_from_s`); this keeps the requests, timeline rows and events of the
    window and re-bases their times."""
    if start_s <= 0:
        return result
    cohorts = result.cohorts
    if cohorts is not None:
        sel = cohorts.arrival_s >= start_s
        cohorts = RequestTable(cohorts.arrival_s[sel] - start_s, cohorts.weight[sel], cohorts.ttft_s[sel],
                               cohorts.tpot_s[sel])
    shift = _Shift(start_s)
    refused = [dataclasses.replace(f, at=f.at - start_s, request=shift.one(f.request))
               for f in result.refused if f.request.arrival_s >= start_s]
    events = [e for e in (_event(ev, start_s) for ev in result.events) if e is not None]
    return dataclasses.replace(
        result, requests=shift.kept(result.requests), dropped_timeout=shift.kept(result.dropped_timeout),
        dropped_rejected=shift.kept(result.dropped_rejected), end_s=result.end_s - start_s,
        timeline=_timeline(result.timeline, start_s), events=events, cohorts=cohorts, refused=refused,
        # the fluid mode counts its refusals without keeping them: the whole run's count stays
        refused_count=result.refused_count if cohorts is not None else len(refused))
