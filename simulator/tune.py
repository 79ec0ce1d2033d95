"""Tune a ScaledObject on a trace: sweep its knobs through the simulator, keep the cheapest that meets the SLO.

Each candidate is keda-llm's recommended ScaledObject (`policies.default_scaledobject`) with the knobs set
(`Knobs`: targetInterTokenLatency, targetKVUtilization, scaleDownDelay, mode, minReplicaCount,
targetTimeToFirstToken), written as
the manifest the user will apply (`scaledobject_manifest`) and read back through the validating loader
(KEDA's CRD, our metadata parser), so the simulation runs exactly the YAML the tuner writes. The HPA
`behavior` carries no `tolerance`: that field needs KEDA 2.18 and Kubernetes 1.33 (deploy/README.md), so
the candidates run with the HPA's default 10% band, as the clusters the written file is for do.

Points are independent, seeded simulations: `workers > 1` runs them in a process pool and gives the same
numbers as a serial run. With several `seeds` (the cold starts drawn afresh) each candidate runs once per
seed and counts its worst SLO attainment at its mean GPU-hours, the frontier's rule
(simulator/report/frontier.py `worst_at_mean`): a pick that meets the target then meets it on every draw.
With `phases` > 1 each run is repeated with the arrivals moved by 0, 15/N, ... s against the control loop
(the exporter's 5 s samples, KEDA's poll, the HPA's 15 s sync: `phase_shifted`), and each seed counts the
mean over its phases: on an hour of bursty traffic one phase can hold a replica fewer or more through a
burst (docs/simulator-results.md, "Over the control loop's phase"), and the mean is what the next hour meets.
The answer (`TuneResult`) holds every point, the Pareto frontier (SLO attainment
against GPU-hours), the oracle and static provisioning where asked for, and the pick: the cheapest point
meeting `target` (a fraction of all requests), else the cheapest point within 0.1 point of the best
attainment, flagged as missing the target. The oracle is planned on from the cheapest candidate's schedule
that meets the target for less than it, or at most 10% more (`oracle_on_from_pick`, the frontier's rule):
the plan from scratch can stop short, and a pick "cheaper than the oracle" would say so only about the plan.
Beside the oracle, the perfectly informed reactive schedule (simulator/report/reactive.py: the oracle's count
for each minute, ready a cold start after the minute starts, held and given headroom), its settings run in
the same pool as the candidates: the cheapest that meets `target`, or the best it reaches. Where even it
misses, or needs far more than the oracle, the trace's bursts are shorter than a cold start, and what meets
them is capacity held before them (`minReplicaCount`, warm windows) rather than a better reactive knob.
"""

from __future__ import annotations

import itertools
import math
import re
import signal
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import fmean
from typing import Any, cast

import yaml

from keda_llm.scaler.config import format_duration, parse_metadata
from keda_llm.scaler.scaledobject import Behavior
from keda_llm.simulator.cluster.engine import Controller
from keda_llm.simulator.control.controllers import PodPlan
from keda_llm.simulator.control.manifest import scaledobject_manifest
from keda_llm.simulator.control.policies import (
    ITL_TARGET_FRACTION,
    TTFT_TARGET_FRACTION,
    build_controller,
    default_scaledobject,
)
from keda_llm.simulator.control.scaledobject import KedaSettings, settings_from_manifest
from keda_llm.simulator.report.fidelity import at_kv_edge, kv_edge_caveat, requests_run
from keda_llm.simulator.report.frontier import (
    CHEAPER,
    START_MARGIN,
    Reference,
    plan_on_from,
    plan_on_while_saving,
    schedule_of,
    seeds_of,
    with_seed,
    worker_pool,
    worst_at_mean,
)
from keda_llm.simulator.report.oracle import OraclePlan
from keda_llm.simulator.report.reactive import HOLDS, ReactivePoint, best_of, cheapest_meeting, replay, settings_pods
from keda_llm.simulator.report.summary import summarize
from keda_llm.simulator.run import Backtest, Mode, run_policies, simulate
from keda_llm.simulator.workload.traces import Trace, TraceError

#: What the activator exports for the model's held requests (docs/activator.md): the demand seen at zero.
ACTIVATION_QUERY = 'sum(keda_llm_activator_held_requests{{model="{model}"}})'
DEFAULT_SCALER_ADDRESS = "keda-llm-scaler.keda-llm.svc:9090"
DEFAULT_MAX_REPLICAS = 16


def promql_string(text: str) -> str:
    """`text` as a PromQL string literal's inside: a model named with a quote or a backslash would otherwise
    end the label matcher early and the activationQuery would not parse."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


@dataclass(frozen=True)
class Knobs:
    """One candidate's settings. `itl_fraction`: targetInterTokenLatency over the ITL SLO; `scale_down_delay`
    in cold starts (p90), None = the scaler's adaptive default; `ttft_fraction`: targetTimeToFirstToken over
    the TTFT SLO, None = unset (no TTFT term: the cheapest where prompts never queue); `itl_scaling`: the
    scaler's `itlScaling` (docs/design.md, "`itlScaling: busy`")."""

    itl_fraction: float = ITL_TARGET_FRACTION
    kv_utilization: float = 0.8
    scale_down_delay: float | None = None
    mode: str = "hybrid"
    min_replicas: int = 1
    ttft_fraction: float | None = TTFT_TARGET_FRACTION
    itl_scaling: str = "proportional"

    def describe(self, slo_itl_s: float, cold_start_s: float, slo_ttft_s: float) -> dict[str, str]:
        """The knobs as the ScaledObject spells them."""
        return {"targetInterTokenLatency": format_duration(round(self.itl_fraction * slo_itl_s, 4)),
                "targetKVUtilization": f"{self.kv_utilization:g}",
                "scaleDownDelay": "adaptive" if self.scale_down_delay is None
                else format_duration(round(self.scale_down_delay * cold_start_s)),
                "mode": self.mode, "minReplicaCount": str(self.min_replicas),
                "targetTimeToFirstToken": "unset" if self.ttft_fraction is None
                else format_duration(round(self.ttft_fraction * slo_ttft_s, 4)),
                "itlScaling": self.itl_scaling}


@dataclass(frozen=True)
class Grid:
    """Values per knob; the candidates are every combination. The ITL targets hold the backtests' default
    (ITL_TARGET_FRACTION), so the tuner can recommend it where it is the cheapest that meets the target."""

    itl_fraction: tuple[float, ...] = (0.3, 0.4, 0.5, ITL_TARGET_FRACTION, 0.7)
    kv_utilization: tuple[float, ...] = (0.6, 0.8)
    scale_down_delay: tuple[float | None, ...] = (None, 0.5, 2.0)
    mode: tuple[str, ...] = ("hybrid", "reactive")
    min_replicas: tuple[int, ...] = (1, 2, 3)
    ttft_fraction: tuple[float | None, ...] = (TTFT_TARGET_FRACTION, None)
    itl_scaling: tuple[str, ...] = ("proportional",)  # `keda-llm tune --itl-scaling`

    def candidates(self) -> list[Knobs]:
        return [Knobs(*combo) for combo in itertools.product(self.itl_fraction, self.kv_utilization,
                                                             self.scale_down_delay, self.mode, self.min_replicas,
                                                             self.ttft_fraction, self.itl_scaling)]


FULL_GRID = Grid()
#: `--quick`: the two knobs that moved SLO attainment most in the backtests (docs/simulator-results.md); the
#: ITL target at the default and at a tight 0.3 of the SLO
QUICK_GRID = Grid(itl_fraction=(0.3, ITL_TARGET_FRACTION), kv_utilization=(0.8,), scale_down_delay=(None,),
                  mode=("hybrid", "reactive"), min_replicas=(1,), ttft_fraction=(TTFT_TARGET_FRACTION,))


@dataclass(frozen=True)
class Target:
    """What the written ScaledObject names: itself, its Deployment, the served model, the scaler."""

    model: str
    name: str = "llm"
    namespace: str = "default"
    deployment: str = "llm"
    max_replicas: int = DEFAULT_MAX_REPLICAS
    scaler_address: str = DEFAULT_SCALER_ADDRESS
    prometheus_address: str | None = None  # for activationQuery; None: the scaler's --prometheus-address


def candidate(knobs: Knobs, target: Target, *, slo_itl_s: float, cold_start_s: float,
              slo_ttft_s: float) -> KedaSettings:
    """The recommended ScaledObject with `knobs` set, named as `target` says."""
    base = default_scaledobject(target.model, max_replicas=target.max_replicas, cold_start_s=cold_start_s)
    meta = dict(base.triggers[0].metadata)
    spelled = knobs.describe(slo_itl_s, cold_start_s, slo_ttft_s)
    meta.update(scalerAddress=target.scaler_address,
                activationQuery=ACTIVATION_QUERY.format(model=promql_string(target.model)),
                targetInterTokenLatency=spelled["targetInterTokenLatency"],
                targetKVUtilization=f"{knobs.kv_utilization:g}", mode=knobs.mode)
    meta.pop("targetTimeToFirstToken", None)
    if knobs.ttft_fraction is not None:
        meta["targetTimeToFirstToken"] = spelled["targetTimeToFirstToken"]
    if target.prometheus_address:
        meta["prometheusAddress"] = target.prometheus_address
    if knobs.scale_down_delay is not None:
        meta["scaleDownDelay"] = format_duration(round(knobs.scale_down_delay * cold_start_s))
    if knobs.itl_scaling != "proportional":  # the scaler's default, left unwritten
        meta["itlScaling"] = knobs.itl_scaling
    parse_metadata(meta)  # a bad knob is the scaler's own ConfigError, here rather than in a worker
    behavior = None
    if base.behavior is not None:  # no `tolerance`: it needs KEDA 2.18 and Kubernetes 1.33
        up, down = base.behavior.scale_up, base.behavior.scale_down
        behavior = Behavior(scale_up=None if up is None else replace(up, tolerance=None),
                            scale_down=None if down is None else replace(down, tolerance=None))
    return replace(base, name=target.name, namespace=target.namespace, target_name=target.deployment,
                   triggers=(replace(base.triggers[0], metadata=meta),), min_replicas=knobs.min_replicas,
                   behavior=behavior)


@dataclass(frozen=True)
class Point:
    knobs: Knobs
    manifest: dict[str, Any]
    attainment: float  # SLO attainment over all requests, 0-1
    gpu_hours: float
    cold_starts: int
    cpu_s: float  # CPU seconds of its simulation (measured; not part of equality)
    preemptions: int = 0  # the replicas' preemptions (the most of any seed): a fluid run's fidelity
    requests: int = 0  # the requests it ran, its lead-in's included (report.fidelity.requests_run)

    def same(self, other: Point) -> bool:
        """Equal but for the CPU seconds."""
        return (self.knobs, self.attainment, self.gpu_hours, self.cold_starts) == \
            (other.knobs, other.attainment, other.gpu_hours, other.cold_starts)


#: the span the phases cover: the HPA's sync period, the longest of the control loop's periods
PHASE_SPAN_S = 15.0


def phase_shifted(trace: Trace, phase: int, phases: int) -> Trace:
    """The trace with its arrivals PHASE_SPAN_S x phase / phases later against the control loop; its lead-in as
    it was. Phase 0 is the trace itself."""
    if phase == 0:
        return trace
    by = PHASE_SPAN_S * phase / phases
    return Trace(trace.name, trace.arrival_s + by, trace.prompt_tokens, trace.output_tokens, trace.hash_offsets,
                 trace.hash_values, trace.lead, trace.lead_s)


def over_phases(runs: Sequence[Point]) -> Point:
    """One candidate's runs at one seed over the control loop's phases: the mean attainment at the mean GPU-hours,
    the most cold starts, CPU summed. One run is itself."""
    if len(runs) == 1:
        return runs[0]
    return _combined(runs, fmean(p.attainment for p in runs), fmean(p.gpu_hours for p in runs))


def over_seeds(runs: Sequence[Point]) -> Point:
    """One candidate run with several seeds: its worst attainment at its mean GPU-hours (`worst_at_mean`),
    the most cold starts of any run, CPU summed. One run is itself."""
    if len(runs) == 1:
        return runs[0]
    return _combined(runs, *worst_at_mean([(p.attainment, p.gpu_hours) for p in runs]))


def _combined(runs: Sequence[Point], attainment: float, gpu_hours: float) -> Point:
    """One candidate's runs as one point with the given attainment and GPU-hours: the most cold starts and
    preemptions of any run, CPU summed."""
    return Point(runs[0].knobs, runs[0].manifest, attainment, gpu_hours, max(p.cold_starts for p in runs),
                 sum(p.cpu_s for p in runs), max(p.preemptions for p in runs), runs[0].requests)


def candidate_controller(backtest: Backtest, knobs: Knobs, manifest: dict[str, Any]) -> Controller:
    """Ours under the candidate's manifest, read back as users' files are."""
    settings = settings_from_manifest(manifest, source=f"candidate {knobs}")
    return build_controller("ours", model=backtest.preset.model.name, max_replicas=settings.max_replicas,
                            concurrency_target=1.0, static_replicas=1, settings=settings)


def run_point(trace: Trace, backtest: Backtest, knobs: Knobs, manifest: dict[str, Any]) -> Point:
    """One simulation of the manifest, read back as users' files are."""
    t0 = time.process_time()
    r = simulate(trace, backtest, candidate_controller(backtest, knobs, manifest), backtest.resolved_mode(trace))
    s = summarize(r, backtest.slo)
    return Point(knobs, manifest, s.slo_attainment, s.gpu_hours, s.cold_starts, time.process_time() - t0,
                 r.engine_totals[0], requests_run(trace))


@dataclass(frozen=True)
class TuneResult:
    points: tuple[Point, ...]
    target: float
    oracle: Reference | None
    static: Reference | None
    feasible_share: float | None  # requests that can meet the SLO at all (the oracle's), when it ran
    mode: str
    seeds: tuple[int, ...] = (0,)  # each point's runs (over_seeds); the references ran with the first
    max_replicas: int = DEFAULT_MAX_REPLICAS  # every candidate's maxReplicaCount, as simulated
    phases: int = 1  # each seed's runs over the control loop's phase (over_phases)
    #: the perfectly informed reactive schedule's settings, replayed (first seed, phase 0; with the oracle)
    reactive: tuple[ReactivePoint, ...] = ()

    @property
    def reactive_meeting(self) -> ReactivePoint | None:
        """The cheapest informed reactive setting that meets the target (None: none does, or none ran)."""
        return cheapest_meeting(self.reactive, self.target)

    @property
    def met(self) -> bool:
        return any(p.attainment >= self.target for p in self.points)

    @property
    def chosen(self) -> Point:
        """Of the points meeting the target, the best attainment among those within COST_TIE of the cheapest;
        else the cheapest of those within TIE of the best attainment."""
        return pick(self.points, self.target)

    @property
    def frontier(self) -> list[Point]:
        return pareto(self.points)


#: Attainments this close count as a tie when no point meets the target: the cheaper one is written. (On
#: azure2023-code, 97.62% at 3.67 GPU-h against 97.58% at 2.86: a difference of 4 requests in 8,819.)
TIE = 0.001
#: GPU-hours this close (relative) count as a tie among the points meeting the target: the one meeting the SLO
#: for more requests is written. A run's GPU-hours move by more than this with where its arrivals fall against
#: the control loop (docs/simulator-results.md, "Over the control loop's phase"), so a cheaper point by less is
#: not cheaper, and the margin over the target is what holds on the next hour. (On azure2023-code, 8B H100:
#: 95.28% and 98.23%, both 2.74 GPU-h.)
COST_TIE = 0.01


def pick(points: Sequence[Point], target: float) -> Point:
    """Of the points meeting `target`, the best attainment within COST_TIE of the cheapest's GPU-hours (the
    cheaper at equal attainment); else the cheapest within TIE of the best attainment."""
    ok = [p for p in points if p.attainment >= target]
    if ok:
        cheapest = min(p.gpu_hours for p in ok)
        near = [p for p in ok if p.gpu_hours <= cheapest * (1 + COST_TIE)]
        return min(near, key=lambda p: (-p.attainment, p.gpu_hours))
    best = max(p.attainment for p in points)
    ok = [p for p in points if p.attainment >= best - TIE]
    return min(ok, key=lambda p: (p.gpu_hours, -p.attainment))


def pareto(points: Iterable[Point]) -> list[Point]:
    """The points no other beats on both axes (more attainment for no more GPU-hours), cheapest first."""
    out: list[Point] = []
    for p in sorted(points, key=lambda p: (p.gpu_hours, -p.attainment)):
        if not out or p.attainment > out[-1].attainment:
            out.append(p)
    return out


# -- running ------------------------------------------------------------------------------------------
_WORKER: tuple[Trace, Backtest] | None = None


def _init_worker(trace: Trace, backtest: Backtest) -> None:
    global _WORKER
    _WORKER = (trace, backtest)
    # Ctrl-C reaches the whole process group: the parent alone handles it (`_stop`), not each worker mid-point
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop(pool: ProcessPoolExecutor) -> None:
    """End a sweep now (Ctrl-C, or a point that raised): the points not started are cancelled and the workers
    ended, rather than the pool's exit waiting for every queued point to run (minutes, on a full grid)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())  # its workers: no public handle
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.join()


def _worker_point(knobs: Knobs, manifest: dict[str, Any], seed: int, phase: int, phases: int) -> Point:
    assert _WORKER is not None, "worker not initialized"
    trace, backtest = _WORKER
    return run_point(phase_shifted(trace, phase, phases), with_seed(backtest, seed), knobs, manifest)


def references(trace: Trace, backtest: Backtest) -> tuple[Reference, Reference, float, OraclePlan]:
    """(oracle, static at the oracle's peak, the share of requests that can meet the SLO at all, the plan)."""
    results, oracle = run_policies(trace, backtest, ["static", "oracle"])
    assert oracle is not None
    static, orc = (summarize(r, backtest.slo) for r in results)
    return (Reference(orc.slo_attainment, orc.gpu_hours), Reference(static.slo_attainment, static.gpu_hours),
            oracle.feasible_share, oracle)


def _worker_reactive(hold: int, headroom: float, pods: list[PodPlan]) -> ReactivePoint:
    assert _WORKER is not None, "worker not initialized"
    trace, backtest = _WORKER
    return replay(trace, backtest, hold, headroom, pods)


def oracle_on_from_pick(trace: Trace, backtest: Backtest, points: Sequence[Point], target: float,
                        oracle: Reference, rounds: int = 1) -> Reference:
    """The oracle planned on from the schedule of the cheapest candidate meeting `target`, where that costs
    less than the oracle or at most START_MARGIN more, then from its own while that saves: the frontier's rule
    (simulator.report.frontier.oracle_from_points), so the oracle's line is never above a schedule the sweep
    found. The cheaper of the two; the candidate runs once more at the backtest's seed and phase 0, and that run's
    GPU-hours are what the margin judges (a point over seeds or phases is their mean; the schedule planned on
    from is this one run's)."""
    ok = [q for q in points if q.attainment >= target]
    if not ok:
        return oracle
    best = min(ok, key=lambda q: q.gpu_hours)
    run = simulate(trace, backtest, candidate_controller(backtest, best.knobs, best.manifest),
                   backtest.resolved_mode(trace))
    if summarize(run, backtest.slo).gpu_hours >= oracle.gpu_hours * (1 + START_MARGIN):
        return oracle
    plan = plan_on_from(trace, backtest, schedule_of(trace, backtest, run))
    got = summarize(plan.result, backtest.slo)
    if not (plan.met_target and got.gpu_hours < oracle.gpu_hours * (1 - CHEAPER)):
        return oracle
    later, _, _ = plan_on_while_saving(trace, backtest, plan.pods, got.gpu_hours, rounds, lambda line: None)
    if later is not None:
        got = summarize(later.result, backtest.slo)
    return Reference(got.slo_attainment, got.gpu_hours)


def tune(trace: Trace, backtest: Backtest, target_so: Target, *, grid: Grid = FULL_GRID, target: float = 0.99,
         workers: int = 1, with_references: bool = True, seeds: Sequence[int] | None = None, phases: int = 1,
         progress: Callable[[int, int], None] | None = None,
         reactive_holds: Sequence[int] = HOLDS) -> TuneResult:
    """Every candidate of `grid` on the trace (see the module docstring), each run with every one of `seeds`
    (default: the backtest's own) at each of `phases` phases; with the references, the informed reactive
    schedule at each of `reactive_holds` (minutes) x reactive.HEADROOMS. `progress(done, total)` after each
    run."""
    if not 0 < target <= 1:
        raise ValueError(f"target must be in (0, 1], got {target}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if phases < 1:
        raise ValueError(f"phases must be >= 1, got {phases}")
    seeds = seeds_of(backtest, seeds)
    cold = backtest.preset.cold_start(backtest.cold_start).quantile(0.9)
    knobs = grid.candidates()
    if not knobs:
        raise ValueError("the grid holds no candidate: every knob needs at least one value")
    manifests = [scaledobject_manifest(candidate(k, target_so, slo_itl_s=backtest.slo.itl_s, cold_start_s=cold,
                                                 slo_ttft_s=backtest.slo.ttft_s))
                 for k in knobs]
    bt = replace(backtest, max_replicas=target_so.max_replicas, scaledobject=None, seed=seeds[0])
    jobs = [(i, seed, k) for i in range(len(knobs)) for seed in seeds for k in range(phases)]
    # the references: the oracle with static, the informed reactive schedule's settings (in the pool, beside the
    # candidates), then the oracle planned on from the pick (oracle_on_from_pick)
    oracle = static = None
    feasible = None
    settings: list[tuple[int, float, list[PodPlan]]] = []
    if with_references:
        oracle, static, feasible, plan = references(trace, bt)
        settings = settings_pods(plan, bt, reactive_holds)
    total = len(jobs) + len(settings) + (2 if with_references else 0)
    if with_references and progress is not None:
        progress(1, total)
    done0 = 1 if with_references else 0
    runs: dict[tuple[int, int, int], Point] = {}
    reactive: list[ReactivePoint] = []
    if workers == 1:
        n = done0
        for i, seed, k in jobs:
            runs[i, seed, k] = run_point(phase_shifted(trace, k, phases), with_seed(bt, seed), knobs[i], manifests[i])
            n += 1
            if progress is not None:
                progress(n, total)
        for hold, room, pods in settings:
            reactive.append(replay(trace, bt, hold, room, pods))
            n += 1
            if progress is not None:
                progress(n, total)
    else:
        pool = worker_pool(min(workers, len(jobs) + len(settings)), _init_worker, (trace, bt))
        try:
            pending: dict[Future[Any], tuple[int, int, int] | None] = {
                pool.submit(_worker_point, knobs[i], manifests[i], seed, k, phases): (i, seed, k)
                for i, seed, k in jobs}
            pending.update({pool.submit(_worker_reactive, hold, room, pods): None for hold, room, pods in settings})
            n = done0
            while pending:
                finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                for fut in finished:
                    key = pending.pop(fut)
                    if key is None:
                        reactive.append(fut.result())
                    else:
                        runs[key] = fut.result()
                    n += 1
                    if progress is not None:
                        progress(n, total)
        except BaseException:
            _stop(pool)
            raise
        pool.shutdown()
    reactive.sort(key=lambda p: (p.headroom, p.hold))
    points = tuple(over_seeds([over_phases([runs[i, seed, k] for k in range(phases)]) for seed in seeds])
                   for i in range(len(knobs)))
    if oracle is not None:
        oracle = oracle_on_from_pick(trace, bt, points, target, oracle)
        if progress is not None:
            progress(total, total)
    return TuneResult(points, target, oracle, static, feasible, bt.resolved_mode(trace), seeds, bt.max_replicas,
                      phases, tuple(reactive))


# -- holding out ------------------------------------------------------------------------------------

#: the shortest held-out span: a minute of the control loop (a few seconds' requests would say nothing)
MIN_HOLDOUT_S = 60.0


def split_holdout(trace: Trace, span_s: float) -> tuple[Trace, Trace]:
    """(the part to tune on, the last `span_s` seconds held out). A pick tuned on a trace is measured on
    that same trace: in-sample. Held out, the trace's end checks it on traffic it was not chosen on (the
    protocol of issue 11: tune on days 1-5, report days 6-7). The trace's lead-in length carries over: the
    tuned part takes its own end as its lead-in (as a whole trace does, `Trace.wrapped`), the held-out part
    the traffic just before it, none of which is the held-out traffic."""
    end = trace.duration_s
    if not (math.isfinite(span_s) and MIN_HOLDOUT_S <= span_s < end):
        raise TraceError(f"holdout {span_s:g} s: must be at least {MIN_HOLDOUT_S:g} s and shorter than the trace "
                         f"({end:g} s)")
    split = end - span_s
    fit = trace.window(0.0, split)
    held = trace.window(split, math.nextafter(end, math.inf), lead_s=trace.lead_s)
    if len(fit) == 0:  # (the held-out part holds the last request: the trace ends at its last arrival)
        raise TraceError(f"holdout {span_s:g} s: no request arrives in the part before it")
    return (fit.wrapped(trace.lead_s) if trace.lead_s > 0 else fit), held


@dataclass(frozen=True)
class Holdout:
    """The pick run on the held-out span: its SLO attainment (the worst over the seeds) and GPU-hours (their
    mean), beside the oracle on that span where it ran."""

    trace: Trace
    attainment: float
    gpu_hours: float
    target: float
    oracle: Reference | None

    @property
    def met(self) -> bool:
        return self.attainment >= self.target


def check_holdout(result: TuneResult, held: Trace, backtest: Backtest, *, with_reference: bool = True) -> Holdout:
    """The written pick (`result.chosen`) on the held-out trace, as the sweep ran it: its mode (not the one
    the shorter held-out trace would resolve to), maxReplicaCount, seeds and worst-of-seeds rule."""
    bt = replace(backtest, scaledobject=None, seed=result.seeds[0], max_replicas=result.max_replicas,
                 mode=cast(Mode, result.mode))
    c = result.chosen
    p = over_seeds([over_phases([run_point(phase_shifted(held, k, result.phases), with_seed(bt, seed), c.knobs,
                                           c.manifest) for k in range(result.phases)]) for seed in result.seeds])
    oracle = None
    if with_reference:  # the oracle alone: static at its peak would be one more simulation, never shown
        (orc_run,), _ = run_policies(held, bt, ["oracle"])
        orc = summarize(orc_run, bt.slo)
        oracle = Reference(orc.slo_attainment, orc.gpu_hours)
    return Holdout(held, p.attainment, p.gpu_hours, result.target, oracle)


# -- writing ------------------------------------------------------------------------------------------

def model_note(model: str) -> str:
    """What a ScaledObject written without --model must be told: the preset's model name stands in the trigger's
    `model` and its activationQuery, and no engine serves under that name unless it was started so."""
    return (f"model {model!r} is the preset's model name (no --model given): the trigger's model and its "
            "activationQuery must be the engine's served model name (vLLM's --served-model-name); edit both, or "
            "run again with --model NAME")


def static_line(result: TuneResult) -> str | None:
    """One sentence of the verdict when static provisioning at the peak meets the target for no more GPU-hours
    than the pick (a trace with no quiet hours to scale down in, or a fleet the minimum already fills): the
    ScaledObject then buys nothing on this trace. None otherwise, or when static did not run."""
    s, c = result.static, result.chosen
    if s is None or s.attainment < result.target:
        return None
    same = f"{s.gpu_hours:.2f}" == f"{c.gpu_hours:.2f}"  # as printed: "fewer" than an equal figure reads wrong
    if s.gpu_hours > c.gpu_hours and not same:  # a hair over the pick in the last bits is the same cost
        return None
    cost = "as many GPU-hours as" if same else "fewer GPU-hours than"
    pick = (f"the pick ({100 * c.attainment:.2f}% at {c.gpu_hours:.2f})" if result.met else
            f"the best point swept ({100 * c.attainment:.2f}% at {c.gpu_hours:.2f}, short of the target)")
    return (f"static provisioning at the peak meets the {100 * result.target:g}% target too, "
            f"{100 * s.attainment:.2f}% at {s.gpu_hours:.2f} GPU-hours: {cost} {pick}; on this trace autoscaling "
            "saves nothing (a trace with quieter hours may tell them apart)")


def fidelity_note(result: TuneResult) -> str | None:
    """The caveat on a pick measured in the fluid mode with its replicas at the edge of their KV cache, where
    that mode reads optimistic (simulator/report/fidelity.py); None where the pick's numbers stand."""
    c = result.chosen
    return kv_edge_caveat(at_kv_edge(result.mode, [("the written pick", c.preemptions, c.requests)]))


def header(result: TuneResult, *, trace: Trace, backtest: Backtest, command: str | None = None,
           holdout: Holdout | None = None, preset_model: str | None = None) -> list[str]:
    """The comment lines above the written ScaledObject: what it was tuned on and what it measured.
    `preset_model`: the model name written when no --model was given (`model_note`)."""
    c = result.chosen
    cold = backtest.preset.cold_start(backtest.cold_start).quantile(0.9)
    knobs = ", ".join(f"{k}={v}" for k, v in c.knobs.describe(backtest.slo.itl_s, cold, backtest.slo.ttft_s).items())
    lines = [f"Tuned by keda-llm tune in its simulator ({result.mode} mode).",
             *([f"NOTE: {model_note(preset_model)}."] if preset_model is not None else []),
             f"Trace: {trace.name}, {len(trace)} requests over {trace.duration_s / 3600:.2f} h"
             + (f", after its own last {trace.lead_s:g} s as an unscored lead-in" if trace.lead is not None else "")
             + ".",
             f"Preset: {backtest.preset.name}, cold start "
             f"{backtest.cold_start if backtest.preset.cold_start_scale == 1 else 'as measured'} (p90 {cold:.0f} s).",
             f"Timing: {backtest.preset.engine} (the engine version the replica model stands for).",
             f"SLO: TTFT <= {backtest.slo.ttft_s:g} s and ITL <= {backtest.slo.itl_s:g} s; "
             f"target {100 * result.target:g}% of requests.",
             f"Measured: {100 * c.attainment:.1f}% of requests met the SLO at {c.gpu_hours:.2f} GPU-hours"
             + (f" (the worst of seeds {', '.join(map(str, result.seeds))} at their mean GPU-hours)"
                if len(result.seeds) > 1 else "")
             + (f" (the mean over {result.phases} phases of the control loop"
                + (" per seed)" if len(result.seeds) > 1 else ")") if result.phases > 1 else "")
             + ("" if result.met else f" (NO point met the {100 * result.target:g}% target: this is the best "
                                      "attainment swept)") + "."]
    refs = []
    if result.oracle is not None:
        refs.append(f"oracle {100 * result.oracle.attainment:.1f}% at {result.oracle.gpu_hours:.2f} GPU-h")
    if result.static is not None:
        refs.append(f"static at peak {100 * result.static.attainment:.1f}% at {result.static.gpu_hours:.2f} GPU-h")
    if refs:
        lines.append("Beside it: " + "; ".join(refs) + ".")
    line = reactive_line(result)
    if line is not None:
        lines.append(line)
    note = fidelity_note(result)
    if note is not None:
        lines.append(f"NOTE: {note}.")
    if holdout is not None:
        lines.append(holdout_line(holdout))
    lines.append(f"Knobs ({len(result.points)} points swept): {knobs}.")
    if command:
        lines.append(f"Command: {command}")
    return lines


def reactive_line(result: TuneResult) -> str | None:
    """One sentence: what reacting on a perfect signal costs on this trace, against the pick (None: not run)."""
    if not result.reactive:
        return None
    head = "Reacting on a perfect signal (the oracle's count for each minute, ready a cold start later): "
    best = result.reactive_meeting
    if best is not None:
        return (head + f"meets the target at {best.gpu_hours:.2f} GPU-hours (a {best.hold}-minute hold, headroom "
                f"{best.headroom:g}; {100 * best.attainment:.1f}%).")
    top = best_of(result.reactive)
    head += (f"never meets the target ({100 * top.attainment:.1f}% at best, a {top.hold}-minute hold, headroom "
             f"{top.headroom:g}, {top.gpu_hours:.2f} GPU-hours)")
    if result.oracle is not None and result.oracle.attainment < result.target:
        return head + ", nor does the oracle."
    return head + ": reacting is not enough here; capacity held before the bursts (minReplicaCount, warm windows) is."


def holdout_line(h: Holdout) -> str:
    """One sentence: what the pick measured on the held-out span, and whether that meets the target."""
    tr = h.trace
    oracle = "" if h.oracle is None else (f" (oracle {100 * h.oracle.attainment:.1f}% at "
                                          f"{h.oracle.gpu_hours:.2f} GPU-h)")
    verdict = "meets" if h.met else "MISSES"
    return (f"Held out (not tuned on): the trace's last {tr.duration_s / 3600:.2f} h, {len(tr)} requests: "
            f"{100 * h.attainment:.1f}% met the SLO at {h.gpu_hours:.2f} GPU-hours{oracle}; {verdict} the "
            f"{100 * h.target:g}% target.")


def render_yaml(result: TuneResult, *, trace: Trace, backtest: Backtest, command: str | None = None,
                holdout: Holdout | None = None, preset_model: str | None = None) -> str:
    """The chosen ScaledObject as YAML, under a comment header (see `header`)."""
    head = "".join(f"# {_comment(line)}\n" for line in header(result, trace=trace, backtest=backtest,
                                                               command=command, holdout=holdout,
                                                               preset_model=preset_model))
    return head + yaml.safe_dump(result.chosen.manifest, sort_keys=False, width=1 << 16)


#: what may not stand in a YAML comment as it is: line breaks (one would end the comment, and the rest of the
#: line would be read as YAML) and characters YAML does not allow in a stream at all (a surrogate from a file
#: name that is not UTF-8 could not even be written)
_NOT_IN_COMMENT = re.compile(r"[^\t\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]")


def _comment(line: str) -> str:
    """`line` as one comment line: a trace file or model named with a line break stays on it, escaped."""
    return _NOT_IN_COMMENT.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}",
                               line)


def plot(result: TuneResult, path: str | Path, *, title: str) -> None:
    """SLO attainment against GPU-hours: every point, the frontier, the target, the references, the pick."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    pts = result.points
    ax.scatter([p.gpu_hours for p in pts], [100 * p.attainment for p in pts], s=14, color="0.6",
               label=f"candidates ({len(pts)})")
    front = result.frontier
    ax.plot([p.gpu_hours for p in front], [100 * p.attainment for p in front], "-o", color="tab:blue", ms=4,
            label="frontier")
    c = result.chosen
    ax.scatter([c.gpu_hours], [100 * c.attainment], marker="*", s=220, color="tab:red", zorder=5,
               label="recommended" if result.met else "best (target not met)")
    ax.axhline(100 * result.target, color="tab:red", ls=":", lw=1, label=f"target {100 * result.target:g}%")
    for ref, name, marker in ((result.oracle, "oracle", "D"), (result.static, "static (peak)", "s")):
        if ref is not None:
            ax.scatter([ref.gpu_hours], [100 * ref.attainment], marker=marker, s=50, color="k", label=name, zorder=4)
    if result.reactive:
        r = result.reactive_meeting or best_of(result.reactive)
        ax.scatter([r.gpu_hours], [100 * r.attainment], marker="^", s=60, color="tab:green", zorder=4,
                   label=f"informed reactive (hold {r.hold} min, x{r.headroom:g})")
    ax.set_xlabel("GPU-hours")
    ax.set_ylabel("SLO attainment (% of requests)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
