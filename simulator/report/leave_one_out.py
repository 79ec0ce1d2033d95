"""Leave one trace out: ours' knob chosen on the other traces, judged on the one left out.

A default tuned on the traces it is then reported on flatters itself. For each trace T this chooses ours'
knob (its latency targets: `targetInterTokenLatency`, the TTFT target in proportion) on the others alone,
from their frontier points, and reports T at that knob against issue 11's bar: SLO attainment at or above
T's target (99% of all requests, or the oracle's own target where fewer than 99% can meet the SLO at all)
at no more than 1.25x the oracle's GPU-hours.

The choice on the others: among the candidate knob values, the one that meets the bar itself (the target
at <= 1.25x the oracle) on the most of them, then the target alone on the most, then the one farthest from
failing (the largest least margin of attainment over target among the traces it meets the bar on, in whole
tenths of a point), then at the least total GPU-hours relative to each one's oracle (the sum of the ratios,
so a long trace does not outweigh a short one), then the larger knob (less capacity). The bar counts first
because it is what the trace left out is judged on: a value that meets every target at 1.4-1.9x each oracle
fails the bar on the very traces it was chosen on. The margin counts before the cost because ours' curves
have cliffs (azure2023-conv: 99.8% at 0.0559 s, 98.4% at 0.0565 s): the cheapest value meeting every other
trace's target is the one nearest those cliffs, and a trace not chosen on has its cliff elsewhere. (Until
2026-12-01 the cost came before the margin: docs/simulator-results.md "Leave one trace out" has both.)
Pure: the points come in as a table; the script (scripts/simulator_table.py --loo) fills it from the
frontier's points cache and simulates the missing ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

BAR_RATIO = 1.25  # issue 11: on every shipped trace, >= the target at <= 1.25x the oracle's GPU-hours
MARGIN_STEP = 0.001  # margins over target are compared in whole tenths of a point: closer is a tie, cost decides


@dataclass(frozen=True)
class TracePoints:
    """One trace as the choice needs it: its target, its oracle, ours' points by knob value."""

    name: str
    target: float  # SLO attainment over all requests
    oracle_gpu_hours: float
    points: Mapping[float, tuple[float, float]]  # knob -> (attainment, GPU-hours)

    def meets(self, knob: float) -> bool:
        return self.points[knob][0] >= self.target

    def ratio(self, knob: float) -> float:
        return self.points[knob][1] / self.oracle_gpu_hours

    def within_bar(self, knob: float) -> bool:
        return _within_bar(self.points[knob][0], self.target, self.ratio(knob))


@dataclass(frozen=True)
class Choice:
    knob: float
    met: tuple[str, ...]  # the other traces where the knob meets the target
    missed: tuple[str, ...]
    within_bar: tuple[str, ...]  # the other traces where it meets the bar (the target at <= BAR_RATIO)
    ratio_sum: float  # GPU-hours / oracle, summed over the other traces
    margin: float = -math.inf  # the least attainment over target among `within_bar` (-inf: none)


@dataclass(frozen=True)
class HeldOut:
    """Trace `trace` judged at the knob chosen on the others."""

    trace: str
    choice: Choice
    attainment: float
    target: float
    ratio: float

    @property
    def meets_target(self) -> bool:
        return self.attainment >= self.target

    @property
    def meets_bar(self) -> bool:
        return _within_bar(self.attainment, self.target, self.ratio)


def _within_bar(attainment: float, target: float, ratio: float) -> bool:
    """Issue 11's bar: the target met at no more than BAR_RATIO x the oracle's GPU-hours."""
    return attainment >= target and ratio <= BAR_RATIO


def choose(others: Sequence[TracePoints], knobs: Sequence[float], *, margin: bool = True) -> Choice:
    """The module docstring's rule over `knobs`; every trace in `others` needs a point at each. `margin`
    False: the rule before 2026-12-01, the cost straight after the counts (kept to show both)."""
    if not others or not knobs:
        raise ValueError("choosing a knob needs at least one other trace and one candidate value")
    for t in others:
        missing = [k for k in knobs if k not in t.points]
        if missing:
            raise ValueError(f"trace {t.name} has no point at knob {', '.join(f'{k:g}' for k in missing)}")
    choices = [Choice(k, tuple(t.name for t in others if t.meets(k)), tuple(t.name for t in others if not t.meets(k)),
                      tuple(t.name for t in others if t.within_bar(k)), sum(t.ratio(k) for t in others),
                      min((t.points[k][0] - t.target for t in others if t.within_bar(k)), default=-math.inf))
               for k in knobs]
    if not margin:
        return max(choices, key=lambda c: (len(c.within_bar), len(c.met), -c.ratio_sum, c.knob))
    return max(choices, key=lambda c: (len(c.within_bar), len(c.met), _steps(c.margin), -c.ratio_sum, c.knob))


def _steps(margin: float) -> float:
    """A margin in whole MARGIN_STEPs (rounded down; a hair under a step from float error counts as the step)."""
    return math.floor(margin / MARGIN_STEP + 1e-6) if math.isfinite(margin) else margin


def leave_one_out(traces: Sequence[TracePoints], knobs: Sequence[float], *, margin: bool = True) -> list[HeldOut]:
    """For each trace, the knob chosen on the others (`choose`, with or without the margin) and what it gives
    on that trace."""
    if len(traces) < 2:
        raise ValueError("leaving one trace out needs at least two traces")
    out = []
    for t in traces:
        c = choose([u for u in traces if u is not t], knobs, margin=margin)
        if c.knob not in t.points:
            raise ValueError(f"trace {t.name} has no point at knob {c.knob:g}")
        out.append(HeldOut(t.name, c, t.points[c.knob][0], t.target, t.ratio(c.knob)))
    return out
