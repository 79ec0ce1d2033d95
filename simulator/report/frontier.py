"""Frontiers: each policy swept over its main knob, SLO attainment against GPU-hours.

`sweep(trace, backtest, policies, cap_gpu_hours=...)` runs every policy at its documented default, then at
knob values that buy more capacity (a geometric grid: `default x ratio^i`, every knob here buys capacity
as it goes down), and stops a policy's sweep at the first point that meets `target` (SLO attainment over
all requests), or that costs more than `cap_gpu_hours` (static provisioning at the oracle's peak), or
after `points` points. Each policy's result is a `Frontier`: its points and its cost to reach the target
(the fewest GPU-hours among the points that meet it) or "never" with the best attainment it reached.

Points are independent simulations. `workers > 1` runs them in a process pool, `ray_address` on a Ray
cluster (`auto`: a local one; `pip install 'keda-llm[ray]'`); both keep every policy's sequence of points
exactly what a serial run gives (a policy's next point depends only on its own previous ones, and each
simulation is seeded), so results are identical whatever runs them.

`frontier(trace, backtest, policies)` adds the reference points the sweep needs and the docs show: the
oracle (its GPU-hours, attainment, the share of requests that can meet the SLO at all), static
provisioning at its peak (the cap) and the lower bound on GPU-hours.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any

from keda_llm.simulator.cluster.engine import Controller
from keda_llm.simulator.control.anchors import ANCHORS, KNOBS, AnchorContext, aibrix, keda_driven, knative, ray_serve
from keda_llm.simulator.control.baselines import (
    GPU_UTIL_TARGET_PERCENT,
    PROD_STACK_THRESHOLD,
    gpu_baseline,
    queue_baseline,
)
from keda_llm.simulator.control.controllers import KedaController
from keda_llm.simulator.control.policies import ITL_TARGET_FRACTION, build_controller, default_scaledobject
from keda_llm.simulator.report.summary import summarize
from keda_llm.simulator.run import Backtest, concurrency_target, run_policies, simulate
from keda_llm.simulator.workload.traces import Trace

#: the sweepable policies, in table order
SWEPT = ("ours", "queue", "gpu", "concurrency", *ANCHORS)
# ours' knob is its latency target: with targetInterTokenLatency set (as the recommended ScaledObject sets
# it, half the ITL SLO) the latency term decides the count wherever engines are busy, and targetKVUtilization
# then moves nothing (swept on azure2023-code: 0.8 down to 0.13 gave the same 90.7% at 32.11 GPU-h).
KNOB_NAMES = {"ours": "targetInterTokenLatency (s)", "queue": "num_requests_waiting threshold",
              "gpu": "GPU utilization target (%)", "concurrency": "concurrency per pod", **KNOBS}
DEFAULT_RATIO = 0.7  # each point's knob over the previous one's: about 1.4x the capacity per step
DEFAULT_POINTS = 6


@dataclass(frozen=True)
class Point:
    knob: float
    attainment: float  # SLO attainment over all requests, 0-1
    gpu_hours: float
    cpu_s: float  # CPU seconds the simulation took (measured; not part of equality)

    def same(self, other: Point) -> bool:
        """Equal but for the CPU seconds."""
        return (self.knob, self.attainment, self.gpu_hours) == (other.knob, other.attainment, other.gpu_hours)


@dataclass(frozen=True)
class Frontier:
    policy: str
    knob_name: str
    default: float
    points: tuple[Point, ...]
    target: float
    cap_gpu_hours: float | None

    @property
    def reached(self) -> Point | None:
        """The cheapest point that meets the target, None when none does."""
        ok = [p for p in self.points if p.attainment >= self.target]
        return min(ok, key=lambda p: p.gpu_hours) if ok else None

    @property
    def best(self) -> Point:
        """The point with the highest attainment (the cheaper one at a tie)."""
        return max(self.points, key=lambda p: (p.attainment, -p.gpu_hours))

    @property
    def stop(self) -> str:
        """Why the sweep stopped: `target`, `cap` (cost more than static) or `points` (the grid ran out)."""
        last = self.points[-1]
        if last.attainment >= self.target:
            return "target"
        if self.cap_gpu_hours is not None and last.gpu_hours > self.cap_gpu_hours:
            return "cap"
        return "points"

    def cost(self) -> str:
        """`12.3 GPU-h` or `never (best 97.1%)`."""
        r = self.reached
        if r is None:
            return f"never (best {100 * self.best.attainment:.1f}%)"
        return f"{r.gpu_hours:.2f} GPU-h"


def default_knob(policy: str, trace: Trace, backtest: Backtest) -> float:
    """The documented default of `policy`'s main knob (concurrency's depends on the trace and preset)."""
    if policy == "ours":
        return float(f"{backtest.slo.itl_s * ITL_TARGET_FRACTION:.4g}")
    if policy == "queue":
        return PROD_STACK_THRESHOLD
    if policy == "gpu":
        return GPU_UTIL_TARGET_PERCENT
    if policy == "concurrency":
        return concurrency_target(trace, backtest)
    if policy == "knative-kpa":
        return knative.CONTAINER_CONCURRENCY_TARGET_DEFAULT * knative.TARGET_UTILIZATION
    if policy in ("aibrix-kpa", "aibrix-apa"):
        return aibrix.KV_TARGET
    if policy in ("llmd-wva", "llmd-wva-tokens"):
        return keda_driven.KV_CACHE_THRESHOLD
    if policy == "hpa-kv":
        return keda_driven.HPA_KV_TARGET
    if policy == "ray-serve":
        return ray_serve.TARGET_ONGOING_REQUESTS
    if policy in ("dynamo-load", "dynamo-sla"):
        return backtest.slo.itl_s
    raise ValueError(f"policy {policy!r} has no knob to sweep; sweepable: {', '.join(SWEPT)}")


def knob_grid(default: float, points: int = DEFAULT_POINTS, ratio: float = DEFAULT_RATIO) -> list[float]:
    """`default`, then `default x ratio^i` (4 significant digits), `points` values in all."""
    if not 0 < ratio < 1:
        raise ValueError(f"ratio must be in (0, 1), got {ratio}")
    return [float(f"{default * ratio ** i:.4g}") for i in range(max(1, points))]


def build_point_controller(policy: str, knob: float, trace: Trace, backtest: Backtest) -> Controller:
    """`policy` with its main knob at `knob`, otherwise exactly as `run_policies` builds it."""
    p = backtest.preset
    cold_p90 = p.cold_start(backtest.cold_start).quantile(0.9)
    slo = (backtest.slo.ttft_s, backtest.slo.itl_s)
    m = backtest.max_replicas
    if policy == "ours":
        so = backtest.scaledobject or default_scaledobject(p.model.name, max_replicas=m, cold_start_s=cold_p90,
                                                           slo_itl_s=slo[1] * ITL_TARGET_FRACTION)
        trig = so.triggers[0]
        so = replace(so, triggers=(replace(trig, metadata={**trig.metadata, "targetInterTokenLatency": f"{knob:g}s"}),
                                   *so.triggers[1:]))
        return build_controller("ours", model=p.model.name, max_replicas=m, concurrency_target=1.0,
                                static_replicas=1, settings=so, cold_start_s=cold_p90, slo=slo)
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
    """One simulation: `policy` at `knob` on the trace."""
    t0 = time.process_time()
    ctl = build_point_controller(policy, knob, trace, backtest)
    s = summarize(simulate(trace, backtest, ctl, backtest.resolved_mode(trace)), backtest.slo)
    return Point(knob, s.slo_attainment, s.gpu_hours, time.process_time() - t0)


# -- executors ------------------------------------------------------------------------------------------
_WORKER: tuple[Trace, Backtest] | None = None


def _init_worker(trace: Trace, backtest: Backtest) -> None:
    global _WORKER
    _WORKER = (trace, backtest)


def _worker_point(policy: str, knob: float) -> Point:
    assert _WORKER is not None, "worker not initialized"
    return run_point(*_WORKER, policy, knob)


Submit = Callable[[str, float], "Future[Point]"]


class _Serial:
    """Runs each point at once in this process (the reference the parallel runs must equal)."""

    def __init__(self, trace: Trace, backtest: Backtest) -> None:
        self.trace, self.backtest = trace, backtest

    def submit(self, policy: str, knob: float) -> Future[Point]:
        f: Future[Point] = Future()
        f.set_result(run_point(self.trace, self.backtest, policy, knob))
        return f

    def close(self) -> None:
        pass


class _Pool:
    def __init__(self, trace: Trace, backtest: Backtest, workers: int) -> None:
        self.pool: Executor = ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(trace, backtest))

    def submit(self, policy: str, knob: float) -> Future[Point]:
        return self.pool.submit(_worker_point, policy, knob)

    def close(self) -> None:
        self.pool.shutdown()


class _Ray:
    """The same points as Ray tasks; the trace and backtest are put in the object store once."""

    def __init__(self, trace: Trace, backtest: Backtest, address: str) -> None:
        try:  # imported only when asked for, and untyped here so the checks pass without the extra
            ray: Any = importlib.import_module("ray")
        except ImportError as e:  # pragma: no cover - depends on the extra
            raise RuntimeError("--ray needs Ray: pip install 'keda-llm[ray]'") from e
        self.ray: Any = ray
        self.started = not ray.is_initialized()
        if self.started:
            # `auto`: an instance this machine already runs, else a new local one (Ray's own address=None)
            ray.init(address=None if address in ("auto", "local") else address, include_dashboard=False,
                     log_to_driver=False, logging_level=logging.WARNING)
        self.task = ray.remote(run_point)
        self.ctx = (ray.put(trace), ray.put(backtest))

    def submit(self, policy: str, knob: float) -> Future[Point]:
        fut: Future[Point] = self.task.remote(*self.ctx, policy, knob).future()
        return fut

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()


def sweep(trace: Trace, backtest: Backtest, policies: Sequence[str], *, cap_gpu_hours: float | None,
          target: float = 0.99, points: int = DEFAULT_POINTS, ratio: float = DEFAULT_RATIO, workers: int = 1,
          ray_address: str | None = None, progress: Callable[[str, Point], None] | None = None) -> list[Frontier]:
    """Every policy's frontier, in the order given (see the module docstring)."""
    defaults = {pol: default_knob(pol, trace, backtest) for pol in policies}
    grids = {pol: knob_grid(defaults[pol], points, ratio) for pol in policies}
    done: dict[str, list[Point]] = {pol: [] for pol in policies}
    if ray_address is not None:
        runner: _Serial | _Pool | _Ray = _Ray(trace, backtest, ray_address)
    elif workers > 1:
        runner = _Pool(trace, backtest, workers)
    else:
        runner = _Serial(trace, backtest)
    try:
        pending: dict[Future[Point], str] = {runner.submit(pol, grids[pol][0]): pol for pol in policies}
        while pending:
            finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for fut in sorted(finished, key=lambda f: policies.index(pending[f])):
                pol = pending.pop(fut)
                pt = fut.result()
                done[pol].append(pt)
                if progress is not None:
                    progress(pol, pt)
                over = cap_gpu_hours is not None and pt.gpu_hours > cap_gpu_hours
                n = len(done[pol])
                if pt.attainment < target and not over and n < len(grids[pol]):
                    pending[runner.submit(pol, grids[pol][n])] = pol
    finally:
        runner.close()
    return [Frontier(pol, KNOB_NAMES[pol], defaults[pol], tuple(done[pol]), target, cap_gpu_hours)
            for pol in policies]


@dataclass(frozen=True)
class Reference:
    """A fixed point on the plot: the oracle or static provisioning."""

    attainment: float
    gpu_hours: float


@dataclass(frozen=True)
class TraceFrontier:
    trace: str
    requests: int
    feasible_share: float  # requests that can meet the SLO at all (the oracle's OraclePlan)
    target: float  # over all requests: 0.99, or 99% of the feasible share where that is lower
    oracle: Reference
    oracle_status: str
    static: Reference
    bound_gpu_hours: float
    frontiers: tuple[Frontier, ...]
    reference_cpu_s: float  # CPU seconds for the oracle and static
    mode: str

    @property
    def points_cpu_s(self) -> float:
        """CPU seconds of the sweep's simulations, wherever they ran."""
        return sum(p.cpu_s for f in self.frontiers for p in f.points)


def frontier(trace: Trace, backtest: Backtest, policies: Sequence[str], *, points: int = DEFAULT_POINTS,
             ratio: float = DEFAULT_RATIO, workers: int = 1, ray_address: str | None = None,
             progress: Callable[[str, Point], None] | None = None) -> TraceFrontier:
    """The oracle, static at its peak, the lower bound, then `sweep` with static as the cap. The target is
    99% over all requests, or the oracle's own target over all requests (99% of those that can meet the SLO
    at all) where fewer than 99% can."""
    t0 = time.process_time()
    results, oracle = run_policies(trace, backtest, ["static", "oracle"])
    assert oracle is not None and oracle.bound is not None
    static, orc = (summarize(r, backtest.slo) for r in results)
    ref_cpu = time.process_time() - t0
    target = min(0.99, oracle.target_over_all)
    fronts = sweep(trace, backtest, policies, cap_gpu_hours=static.gpu_hours, target=target, points=points,
                   ratio=ratio, workers=workers, ray_address=ray_address, progress=progress)
    return TraceFrontier(trace.name, len(trace), oracle.feasible_share, target,
                         Reference(orc.slo_attainment, orc.gpu_hours), oracle.status(),
                         Reference(static.slo_attainment, static.gpu_hours), oracle.bound.gpu_hours, tuple(fronts),
                         ref_cpu, backtest.resolved_mode(trace))
