"""Where a fluid-mode result is not to be trusted as it stands: a replica at the edge of its KV cache.

The fluid mode agrees with the detailed engine within the tolerances (5% GPU-hours, 1 point of SLO) wherever
no replica preempts. Where replicas preempt (the KV-bound L4 preset, long prompts on a small cache) it
admits and recomputes differently from the engine: on the 2023 matrix (one run per cell) the seven runs that
preempted read -1.9 to +3.4 points of SLO off the engine's, above it in six, and ours on L4 reads +2.80 in the
mean of 48 phases, a bias; eight static L4 replicas on the Azure 2023 chat hour, where the engine sits between
thrashing and not (2.4% of the SLO at seven replicas, 29.4% at eight, 71.4% at nine), read +12.4 points in the
mean of six phases (docs/simulator-results.md, "Fluid vs detailed"). A run that preempted more than
`EDGE_SHARE` of its requests is said to be there, with the hint that settles it: the same run in the detailed
mode.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from keda_llm.simulator.workload.traces import Trace

#: fluid preemptions per request above which a run is at the edge of the KV cache. The 2023 matrix's
#: fluid runs that preempted did so for 6-56% of their requests, the rest for none or 0.03%.
EDGE_SHARE = 0.01


@dataclass(frozen=True)
class EdgeRun:
    """One fluid run that preempted past `EDGE_SHARE`: its name (a policy, a tuner's candidate) and counts."""

    name: str
    preemptions: int
    requests: int

    @property
    def share(self) -> float:
        return self.preemptions / self.requests


def requests_run(trace: Trace) -> int:
    """The requests a policy's run simulates, its lead-in's with the scored ones: the engines' preemption
    count covers both (over the scored ones alone, a 10-minute window after its 30-minute lead-in read about 4x
    too high)."""
    return len(trace) + (len(trace.lead) if trace.lead is not None else 0)


def at_kv_edge(mode: str, runs: Iterable[tuple[str, int, int]]) -> list[EdgeRun]:
    """The runs among (name, preemptions, requests) that a fluid result should carry a caveat for; none in
    the detailed mode, which preempts as vLLM V1 does."""
    if mode != "fluid":
        return []
    return [EdgeRun(name, pre, n) for name, pre, n in runs if n > 0 and pre > EDGE_SHARE * n]


def kv_edge_caveat(edge: list[EdgeRun]) -> str | None:
    """One line for the report when any run is at the edge (None when none is): which runs, how far, what the
    fluid mode does there, and how to check it."""
    if not edge:
        return None
    worst = max(edge, key=lambda e: e.share)
    most = f"{worst.preemptions} preemptions, {100 * worst.share:.1f}% of its requests"
    if len(edge) == 1:
        which = f"{worst.name}: {most}"
    else:
        names = ", ".join(e.name for e in edge[:4]) + (f" and {len(edge) - 4} more" if len(edge) > 4 else "")
        which = f"{names}; the most, {worst.name}: {most}"
    return (f"the fluid mode ran replicas at the edge of their KV cache ({which}): there its SLO attainment "
            "has read up to 15 points off the detailed engine's, most often above it (docs/simulator-results.md, "
            "\"Fluid vs detailed\"); hint: run it again with --mode detailed (slower) before trusting these figures")
