"""One frontier point: a policy with its main knob at one value, simulated on a trace.

Apart from the sweep (simulator/report/frontier.py) so that the points cache (simulator/report/frontier_cache.py) can
key a point on the code that computes it: a change to how the sweep walks its knobs re-simulates nothing,
a change here re-simulates everything.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from keda_llm.simulator.cluster.engine import Controller
from keda_llm.simulator.control.anchors import ANCHORS, AnchorContext
from keda_llm.simulator.control.baselines import gpu_baseline, queue_baseline
from keda_llm.simulator.control.controllers import KedaController
from keda_llm.simulator.control.policies import at_latency_knob, build_controller, ours_scaledobject
from keda_llm.simulator.report.summary import summarize
from keda_llm.simulator.run import Backtest, concurrency_target, simulate
from keda_llm.simulator.workload.traces import Trace

#: the sweepable policies, in table order
SWEPT = ("ours", "queue", "gpu", "concurrency", *ANCHORS)


@dataclass(frozen=True)
class Point:
    knob: float
    attainment: float  # SLO attainment over all requests, 0-1
    gpu_hours: float
    cpu_s: float  # CPU seconds the simulation took (measured; not part of equality)
    cached: bool = False  # read from the points cache rather than simulated in this run

    def same(self, other: Point) -> bool:
        """Equal but for the CPU seconds and where it came from."""
        return (self.knob, self.attainment, self.gpu_hours) == (other.knob, other.attainment, other.gpu_hours)


def build_point_controller(policy: str, knob: float, trace: Trace, backtest: Backtest) -> Controller:
    """`policy` with its main knob at `knob`, otherwise exactly as `run_policies` builds it."""
    p = backtest.preset
    cold_p90 = p.cold_start(backtest.cold_start).quantile(0.9)
    slo = (backtest.slo.ttft_s, backtest.slo.itl_s)
    m = backtest.max_replicas
    if policy == "ours":
        so = backtest.scaledobject or ours_scaledobject(p.model.name, max_replicas=m, cold_start_s=cold_p90, slo=slo)
        return build_controller("ours", model=p.model.name, max_replicas=m, concurrency_target=1.0,
                                static_replicas=1, settings=at_latency_knob(so, knob), cold_start_s=cold_p90, slo=slo)
    if policy in ("queue", "gpu"):
        settings, scaler = (queue_baseline if policy == "queue" else gpu_baseline)(m)
        scaler.target = knob
        return KedaController(policy, settings, scaler, initial_replicas=max(1, settings.min_replicas))
    if policy not in SWEPT:
        raise ValueError(f"policy {policy!r} has no knob to sweep; sweepable: {', '.join(SWEPT)}")
    return build_controller(f"{policy}@{knob:g}", model=p.model.name, max_replicas=m,
                            concurrency_target=concurrency_target(trace, backtest), static_replicas=1,
                            settings=backtest.scaledobject, cold_start_s=cold_p90, slo=slo,
                            anchor=AnchorContext(m, slo[0], slo[1], p.perf(), p.replica_config()))


def run_point(trace: Trace, backtest: Backtest, policy: str, knob: float) -> Point:
    """One simulation: `policy` at `knob` on the trace; CPU seconds measured in the process that runs it."""
    t0 = time.process_time()
    ctl = build_point_controller(policy, knob, trace, backtest)
    s = summarize(simulate(trace, backtest, ctl, backtest.resolved_mode(trace)), backtest.slo)
    return Point(knob, s.slo_attainment, s.gpu_hours, time.process_time() - t0)
