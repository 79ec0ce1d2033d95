"""One backtest: a trace, a preset, a set of policies -> one SimResult per policy.

This is the library entry point the CLI, the docs table script and the benchmarks share. The oracle is
planned first when `static` or `oracle` is asked for (static provisioning is the oracle's peak, kept all
the time); the concurrency baseline's per-pod target is 70% of the largest batch that meets the ITL
target (Knative's default target utilization, 70%).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from keda_llm.simulator.cluster.engine import (
    GAUGE_TIMINGS,
    Controller,
    DegradedSpell,
    GaugeTiming,
    SimConfig,
    SimResult,
    Simulation,
)
from keda_llm.simulator.cluster.lead_in import lead_and_window, scored_part
from keda_llm.simulator.cluster.router import RoutingRule
from keda_llm.simulator.control import KedaSettings
from keda_llm.simulator.control.anchors import AnchorContext
from keda_llm.simulator.control.controllers import ScheduleController
from keda_llm.simulator.control.policies import POLICIES, build_controller, is_policy
from keda_llm.simulator.hardware.presets import Preset
from keda_llm.simulator.report.oracle import OraclePlan, plan_oracle, sustainable_batch
from keda_llm.simulator.report.summary import Slo
from keda_llm.simulator.workload.traces import Trace

Mode = Literal["detailed", "fluid", "auto"]
MODES: tuple[Mode, ...] = ("detailed", "fluid", "auto")
#: `auto` picks the fluid mode above this many requests
AUTO_FLUID_REQUESTS = 200_000
CONCURRENCY_TARGET_FRACTION = 0.7
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Backtest:
    """Everything but the trace and the policy list; defaults are what `keda-llm simulate` uses."""

    preset: Preset
    cold_start: str = "typical"
    slo: Slo = field(default_factory=Slo)
    seed: int = 0
    routing: RoutingRule = "least_outstanding"
    max_wait_s: float = 600.0
    max_held: int | None = None  # the gateway's bound (the activator's max_held); None: unbounded
    collection_interval_s: float = 5.0
    scaledobject: KedaSettings | None = None
    max_replicas: int = 64
    mode: Mode = "auto"
    oracle_bucket_s: float | None = None  # None: 60 s up to 2 h of trace, 300 s beyond
    oracle_target: float = 0.99
    fluid_dt_s: float | None = None  # the fluid mode's time slice (larger is faster, coarser); None: the preset's
    degraded: tuple[DegradedSpell, ...] = ()  # replicas running slower for a while (detailed mode only)
    #: when the engines' gauges change (engine.GaugeTiming). Out of the repr while it is the default, so the
    #: frontier store's keys of the leading timing's points stay as they were (frontier_cache.PointCache)
    gauges: GaugeTiming = field(default="leading", repr=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.max_replicas < 1:
            raise ValueError(f"max_replicas must be >= 1, got {self.max_replicas}")
        if self.fluid_dt_s is not None and not 0 < self.fluid_dt_s < math.inf:
            raise ValueError(f"fluid time slice must be > 0 seconds, got {self.fluid_dt_s}")
        if self.max_held is not None and self.max_held < 0:
            raise ValueError(f"max_held must be >= 0, got {self.max_held}")
        if self.gauges not in GAUGE_TIMINGS:
            raise ValueError(f"gauges must be one of {', '.join(GAUGE_TIMINGS)}, got {self.gauges!r}")
        if self.routing == "least_loaded" and self.mode == "fluid":
            raise ValueError("routing least_loaded runs in the detailed mode only (the fluid mode routes by "
                             "outstanding requests in its compiled loop)")

    def sim_config(self) -> SimConfig:
        p = self.preset
        return SimConfig(p.replica_config(), p.perf(), p.cold_start(self.cold_start), gpus_per_replica=p.tp,
                         collection_interval_s=self.collection_interval_s, routing=self.routing,
                         max_wait_s=self.max_wait_s, max_held=self.max_held, seed=self.seed, model=p.model.name,
                         degraded=self.degraded, gauges=self.gauges)

    @property
    def fluid_slice_s(self) -> float:
        """The fluid mode's slice: `fluid_dt_s`, else the preset's own (`fluid.slice_for`)."""
        if self.fluid_dt_s is not None:
            return self.fluid_dt_s
        from keda_llm.simulator.cluster.fluid import slice_for

        return slice_for(self.preset.perf(), self.preset.max_num_batched_tokens)

    def resolved_mode(self, trace: Trace) -> Literal["detailed", "fluid"]:
        if self.mode == "auto":
            # the fluid mode does not model prefix caching (traces with prefix hashes stay detailed) nor
            # least_loaded routing
            long = (len(trace) > AUTO_FLUID_REQUESTS and trace.hash_offsets is None
                    and self.routing != "least_loaded")
            return "fluid" if long else "detailed"
        return self.mode

    def describe(self) -> dict[str, Any]:
        """The resolved config, written next to the results."""
        p = self.preset
        cs = p.cold_start(self.cold_start)
        return {
            "preset": p.name, "gpus_per_replica": p.tp, "max_num_seqs": p.max_num_seqs,
            "max_num_batched_tokens": p.max_num_batched_tokens, "kv_capacity_tokens": p.kv_capacity_tokens,
            "cold_start": self.cold_start, "cold_start_median_s": round(cs.quantile(0.5), 1),
            "cold_start_p90_s": round(cs.quantile(0.9), 1), "slo_ttft_s": self.slo.ttft_s, "slo_itl_s": self.slo.itl_s,
            "seed": self.seed, "routing": self.routing, "max_wait_s": self.max_wait_s, "max_held": self.max_held,
            "collection_interval_s": self.collection_interval_s, "max_replicas": self.max_replicas,
            "mode": self.mode, "oracle_target": self.oracle_target, "fluid_dt_s": self.fluid_slice_s,
            **({"gauges": self.gauges} if self.gauges != "leading" else {}),
            "scaledobject": None if self.scaledobject is None else {
                "name": self.scaledobject.name, "namespace": self.scaledobject.namespace,
                "pollingInterval": self.scaledobject.polling_interval_s,
                "cooldownPeriod": self.scaledobject.cooldown_period_s,
                "minReplicaCount": self.scaledobject.min_replicas, "maxReplicaCount": self.scaledobject.max_replicas,
                "triggers": [{"type": t.type, "metadata": dict(t.metadata)} for t in self.scaledobject.triggers],
                "behavior": self.scaledobject.behavior is not None,
            },
        }


def simulate(trace: Trace, backtest: Backtest, controller: Controller, mode: Literal["detailed", "fluid"],
             progress: Callable[[int, int], None] | None = None) -> SimResult:
    """Run one controller on the trace in the given mode. A trace with a lead-in (a window of a longer
    trace) is run from the lead-in's start and scored on the window only (simulator/cluster/lead_in.py),
    except for a schedule planned in advance (the oracle's), whose pods are ready at the window's start."""
    config = backtest.sim_config()
    run_trace, start = trace, 0.0
    if trace.lead is not None and not isinstance(controller, ScheduleController):
        run_trace, start = lead_and_window(trace)
        config = replace(config, score_from_s=start)
    if mode == "fluid":
        from keda_llm.simulator.cluster.fluid import FluidBackend

        result = Simulation(run_trace, config, controller, progress, FluidBackend.slices(backtest.fluid_slice_s)).run()
    else:
        result = Simulation(run_trace, config, controller, progress=progress).run()
    return scored_part(result, start)


def concurrency_target(trace: Trace, backtest: Backtest) -> float:
    p = backtest.preset
    mean_ctx = float(np.mean(trace.prompt_tokens + np.maximum(1, trace.output_tokens) / 2)) if len(trace) else 1.0
    batch = sustainable_batch(p.perf(), p.replica_config(), mean_ctx, backtest.slo.itl_s)
    return max(1.0, math.floor(CONCURRENCY_TARGET_FRACTION * batch))


def run_policies(trace: Trace, backtest: Backtest, policies: Sequence[str],
                 progress: Progress | None = None) -> tuple[list[SimResult], OraclePlan | None]:
    """Every policy on the trace, in the order given (the oracle's own run is reused as its result)."""
    unknown = [p for p in policies if not is_policy(p)]
    if unknown:
        raise ValueError(f"unknown policy {unknown[0]!r}; known: {', '.join(POLICIES)}")
    mode = backtest.resolved_mode(trace)
    p = backtest.preset

    def prog(name: str) -> Callable[[int, int], None] | None:
        if progress is None:
            return None
        return lambda done, total: progress(name, done, total)

    oracle: OraclePlan | None = None
    if "oracle" in policies or "static" in policies:
        bucket = backtest.oracle_bucket_s or (60.0 if trace.duration_s <= 7200 else 300.0)
        oracle = plan_oracle(trace, lambda ctl: simulate(trace, backtest, ctl, mode, prog("oracle")), p.perf(),
                             p.replica_config(), p.cold_start(backtest.cold_start), backtest.slo, bucket_s=bucket,
                             target=backtest.oracle_target, seed=backtest.seed, max_replicas=backtest.max_replicas,
                             gpus_per_replica=p.tp)
    static_n = int(oracle.counts.max()) if oracle is not None and len(oracle.counts) else 1
    target = concurrency_target(trace, backtest)
    cold_p90 = p.cold_start(backtest.cold_start).quantile(0.9)
    results: list[SimResult] = []
    for name in policies:
        if name == "oracle":
            assert oracle is not None
            results.append(oracle.result)
            continue
        ctl = build_controller(name, model=p.model.name, max_replicas=backtest.max_replicas,
                               concurrency_target=target, static_replicas=max(1, static_n),
                               settings=backtest.scaledobject, cold_start_s=cold_p90,
                               slo=(backtest.slo.ttft_s, backtest.slo.itl_s),
                               anchor=AnchorContext(backtest.max_replicas, backtest.slo.ttft_s, backtest.slo.itl_s,
                                                    p.perf(), p.replica_config()))
        results.append(simulate(trace, backtest, ctl, mode, prog(name)))
    return results, oracle
