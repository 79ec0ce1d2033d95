"""Frontiers: each policy swept over its main knob, SLO attainment against GPU-hours.

`sweep(trace, backtest, policies, cap_gpu_hours=...)` runs every policy at its documented default, then
walks a geometric grid from it (every knob here buys capacity as it goes down):
- when the default misses `target` (SLO attainment over all requests): toward more capacity,
  `default x ratio^i`, up to the first point that meets it, or that costs more than `cap_gpu_hours`
  (static provisioning at the oracle's peak);
- when the default already meets it: toward less capacity, `default / ratio^i` (at most the knob's
  bound, KNOB_MAX), while the points still meet it, so that a cheaper point of that policy is tried
  too (a default that happens to sit above the target would otherwise cost its policy the comparison),
  and until a step changes nothing (the same attainment and GPU-hours as the point before: the policy
  sits at its floor, one replica, and the next step would not move it either; without this rule a
  mostly idle trace spends most of its CPU on such points);
in either direction after `points` points in all. Where the walk's last step crossed the target (one
point met it, the next missed it, or the other way), `refine` (3) more points bisect that step (geometric
means of the knobs), and up to `REFINE_MORE` (2) more after them while the point that met costs over
`REFINE_TOLERANCE` (2%) more than the one that missed, so a cost to reach the target inside one step is
found to within about 2% rather than charged the whole 1.4x step (GPU-hours are not monotone in the knob: over
three seeds ours' fell by 12% inside the 1.04x step three bisections left on azure2023-conv, where one more
replica is held or not, and aibrix-kpa's and hpa-kv's cheapest points there lie below both ends of theirs,
so the first three are run whatever the ends cost). Each policy's result is a
`Frontier`: its points and its cost to reach the target (the fewest GPU-hours among the points that meet
it, whichever direction found them) or "never" with the best attainment it reached. Every policy is swept
by the same rule. Where static provisioning at the cap meets the target (`frontier` says), a point that
meets it only above the cap is reported but not counted as reaching it ("over the cap"): the cap stops a
sweep, so a policy whose grid step jumped past it and one the cap stopped are both beaten by static there.

`seeds`: every point is run once per seed (the cold starts' draws) and counts as the worst attainment at
the mean GPU-hours (`over_seeds`). One seed's frontier on a one-hour trace is one draw of a few cold
starts: on azure2023-conv, four seeds moved one anchor's cheapest 99% point between 98.4% and 99.6%, so
a cost to reach decided by one seed ranks policies partly by luck; over seeds, a point that reaches the
target reaches it on every draw (issue 11: "run at least 3 seeds and report the worst").

Points are independent simulations (simulator/report/frontier_point.py). `workers > 1` runs them in a process
pool, `ray_address` on a Ray cluster (`auto`: a local one; `pip install 'keda-llm[ray]'`); both keep
every policy's sequence of points exactly what a serial run gives (a policy's next point depends only on
its own previous ones, and each simulation is seeded), so results are identical whatever runs them.
`cache` (simulator/report/frontier_cache.py) reads the points computed before by the same code and writes the
new ones, which changes nothing but the CPU spent.

`frontier(trace, backtest, policies)` adds the reference points the sweep needs and the docs show: the
oracle (its GPU-hours, attainment, the share of requests that can meet the SLO at all), static
provisioning at its peak (the cap) and the lower bound on GPU-hours.

`oracle_from_points(trace, backtest, refs, fronts)`: the oracle's plan stops where its start leads it (its
trim freezes buckets after a failed trial), so a causal policy can meet the target for fewer GPU-hours than the
plan from scratch, and every ratio to that oracle then flatters. So each policy whose cheapest point meeting the
target costs less than the oracle, or at most 10% more (a plan from it trims), is run once more at the oracle's
own seed; the replicas it had ready in each bucket become the start of a plan (which raises where the oracle's
own cold starts leave a bucket short, then trims), and the cheapest plan that meets the target for less than
the oracle replaces it in the references, planned on from its own schedule while that saves more, its pods
kept so that any table can replay it. Static provisioning (the cap) stays at the first plan's peak, so the
sweeps it stopped do not move.
"""

from __future__ import annotations

import gc
import importlib
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from keda_llm.simulator.cluster.engine import SimResult
from keda_llm.simulator.control.anchors import KNOBS, aibrix, keda_driven, knative, ray_serve
from keda_llm.simulator.control.baselines import GPU_UTIL_TARGET_PERCENT, PROD_STACK_THRESHOLD
from keda_llm.simulator.control.controllers import PodPlan
from keda_llm.simulator.control.policies import ITL_TARGET_FRACTION
from keda_llm.simulator.report.frontier_cache import PointCache, References
from keda_llm.simulator.report.frontier_point import SWEPT, Point, build_point_controller, run_point
from keda_llm.simulator.report.oracle import OraclePlan, plan_oracle, pods_from_counts
from keda_llm.simulator.report.summary import summarize
from keda_llm.simulator.run import Backtest, concurrency_target, run_policies, simulate
from keda_llm.simulator.workload.traces import Trace

__all__ = ["SWEPT", "Frontier", "Point", "Reference", "TraceFrontier", "build_point_controller", "frontier",
           "knob_grid", "over_seeds", "run_point", "seeds_of", "sweep", "with_seed", "worst_at_mean"]
# ours' knob is its latency targets: with them set (as the recommended ScaledObject sets them, half the SLOs)
# the latency term decides the count wherever engines are busy, and targetKVUtilization then moves nothing
# (swept on azure2023-code: 0.8 down to 0.13 gave the same 90.7% at 32.11 GPU-h). The knob's value is the ITL
# target; the TTFT target moves with it (policies.at_latency_knob): on long prompts the TTFT term holds the
# count, and the ITL alone left the sweep flat there (mooncake-conv: 111.88 GPU-h from 0.102 s on).
KNOB_NAMES = {"ours": "targetInterTokenLatency (s), TTFT target in proportion",
              "queue": "num_requests_waiting threshold", "gpu": "GPU utilization target (%)",
              "concurrency": "concurrency per pod", **KNOBS}
#: the largest value a knob can take (the sweep toward less capacity stops there): the fractions and the
#: GPU utilization percentage; the others (thresholds, targets per pod, latencies) have no upper bound
KNOB_MAX = {"gpu": 100.0, "aibrix-kpa": 1.0, "aibrix-apa": 1.0, "llmd-wva": 1.0, "llmd-wva-tokens": 1.0,
            "hpa-kv": 1.0}
DEFAULT_RATIO = 0.7  # each point's knob over the previous one's: about 1.4x the capacity per step
DEFAULT_POINTS = 6
DEFAULT_REFINE = 3  # bisection points after the grid's last step crossed the target
#: bisection points beyond `refine` while the point that met the target costs over REFINE_TOLERANCE more than
#: the one that missed (what one more bisection may still save, where GPU-hours fall with the knob)
REFINE_MORE = 2
REFINE_TOLERANCE = 0.02


@dataclass(frozen=True)
class Frontier:
    policy: str
    knob_name: str
    default: float
    points: tuple[Point, ...]
    target: float
    cap_gpu_hours: float | None
    knob_max: float | None = None
    #: how many of `points` are the grid walk's (the rest bisect its last step); None: all
    coarse: int | None = None
    #: whether static provisioning at the cap meets the target: then a point that meets it only above the cap
    #: is beaten by not autoscaling, and does not count as reaching it (`reached`)
    cap_meets_target: bool = False

    @property
    def grid(self) -> tuple[Point, ...]:
        """The grid walk's points (without the bisection points)."""
        return self.points if self.coarse is None else self.points[:self.coarse]

    @property
    def reached(self) -> Point | None:
        """The cheapest point that meets the target, None when none does. Where static provisioning at the
        cap meets the target, only points at or under the cap count: the sweep stops a policy at the cap, so
        one that meets the target only above it (a step that jumped past the cap) is as dominated by static
        as one the cap stopped, and counting it would rank the two by where a grid step happened to land."""
        ok = [p for p in self.points if p.attainment >= self.target and not self.over_cap(p)]
        return min(ok, key=lambda p: p.gpu_hours) if ok else None

    @property
    def reached_over_cap(self) -> Point | None:
        """The cheapest point that meets the target above the cap where none does under it (see `reached`)."""
        if self.reached is not None:
            return None
        ok = [p for p in self.points if p.attainment >= self.target]
        return min(ok, key=lambda p: p.gpu_hours) if ok else None

    def over_cap(self, p: Point) -> bool:
        """Whether `p` costs more than static provisioning that meets the target."""
        return self.cap_meets_target and self.cap_gpu_hours is not None and p.gpu_hours > self.cap_gpu_hours

    @property
    def best(self) -> Point:
        """The point with the highest attainment (the cheaper one at a tie)."""
        return max(self.points, key=lambda p: (p.attainment, -p.gpu_hours))

    @property
    def went_down(self) -> bool:
        """Whether the sweep went toward less capacity (the default met the target)."""
        return self.points[0].attainment >= self.target

    @property
    def stop(self) -> str:
        """Why the sweep stopped. Toward more capacity: `target` (met), `cap` (cost more than static) or
        `points` (the grid ran out). Toward less: `below` (the next cheaper point missed the target),
        `flat` (a step changed nothing), `bound` (the knob reached its largest value) or `points`."""
        last = self.grid[-1]
        if self.went_down:
            if len(self.grid) > 1 and last.attainment < self.target:
                return "below"
            if len(self.grid) > 1 and _flat(self.grid[-2], last):
                return "flat"
            if self.knob_max is not None and last.knob >= self.knob_max:
                return "bound"
            return "points"
        if last.attainment >= self.target:
            return "target"
        if self.cap_gpu_hours is not None and last.gpu_hours > self.cap_gpu_hours:
            return "cap"
        return "points"

    def cost(self) -> str:
        """`12.3 GPU-h`, `never (best 97.1%)`, `not in 6 points (best 58.2%)` or `over the cap (99.8% at 71.37
        GPU-h)`. "never": the sweep went on until its points cost more than static provisioning; "not in N
        points": its grid ran out first, so more capacity might still reach the target under the cap."""
        r = self.reached
        if r is None:
            o = self.reached_over_cap
            if o is not None:
                return f"over the cap ({100 * o.attainment:.1f}% at {o.gpu_hours:.2f} GPU-h)"
            best = f"best {100 * self.best.attainment:.1f}%"
            return f"not in {len(self.grid)} points ({best})" if self.stop == "points" else f"never ({best})"
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
    if policy.startswith("dynamo-"):
        return backtest.slo.itl_s
    raise ValueError(f"policy {policy!r} has no knob to sweep; sweepable: {', '.join(SWEPT)}")


def knob_grid(default: float, points: int = DEFAULT_POINTS, ratio: float = DEFAULT_RATIO) -> list[float]:
    """Toward more capacity: `default`, then `default x ratio^i` (4 significant digits), `points` values."""
    if not 0 < ratio < 1:
        raise ValueError(f"ratio must be in (0, 1), got {ratio}")
    return [float(f"{default * ratio ** i:.4g}") for i in range(max(1, points))]


def knob_grid_down(default: float, points: int = DEFAULT_POINTS, ratio: float = DEFAULT_RATIO,
                   top: float | None = None) -> list[float]:
    """Toward less capacity: `default`, then `default / ratio^i` (4 significant digits), at most `points`
    values; a value past `top` is replaced by `top` once, and the grid ends there."""
    if not 0 < ratio < 1:
        raise ValueError(f"ratio must be in (0, 1), got {ratio}")
    if top is not None and default > top:
        raise ValueError(f"default {default:g} is above the knob's largest value {top:g}")
    grid = [default]
    for i in range(1, max(1, points)):
        k = float(f"{default / ratio ** i:.4g}")
        if top is not None and k >= top:
            if grid[-1] < top:
                grid.append(top)
            break
        grid.append(k)
    return grid


# -- executors ------------------------------------------------------------------------------------------
RunPoint = Callable[[Trace, Backtest, str, float], Point]
_WORKER: tuple[Trace, Backtest, RunPoint] | None = None


def _init_worker(trace: Trace, backtest: Backtest, run: RunPoint) -> None:
    global _WORKER
    _WORKER = (trace, backtest, run)


def with_seed(backtest: Backtest, seed: int) -> Backtest:
    """The backtest run with `seed` (itself where that is its own)."""
    return backtest if seed == backtest.seed else replace(backtest, seed=seed)


def _worker_point(policy: str, knob: float, seed: int) -> Point:
    assert _WORKER is not None, "worker not initialized"
    trace, backtest, run = _WORKER
    return run(trace, with_seed(backtest, seed), policy, knob)


class _Serial:
    """Runs each point at once in this process (the reference the parallel runs must equal)."""

    def __init__(self, trace: Trace, backtest: Backtest, run: RunPoint) -> None:
        self.trace, self.backtest, self.run = trace, backtest, run

    def submit(self, policy: str, knob: float, seed: int) -> Future[Point]:
        f: Future[Point] = Future()
        f.set_result(self.run(self.trace, with_seed(self.backtest, seed), policy, knob))
        return f

    def close(self) -> None:
        pass


def worker_pool(workers: int, initializer: Callable[..., None], initargs: tuple[Any, ...]) -> ProcessPoolExecutor:
    """Worker processes forked from this one, after a full collection. A forked child that collects garbage
    the parent left behind (a gRPC server or channel closed but not yet collected: the tests, the demo) runs
    its finalizer, which waits on threads the child does not have, and never returns (gRPC is not fork-safe).
    Collected first, nothing of the parent's is left for the children to finalize. The sweeps here and in
    simulator/tune.py start their workers through it."""
    gc.collect()
    return ProcessPoolExecutor(workers, initializer=initializer, initargs=initargs)


class _Pool:
    def __init__(self, trace: Trace, backtest: Backtest, run: RunPoint, workers: int) -> None:
        self.pool: Executor = worker_pool(workers, _init_worker, (trace, backtest, run))

    def submit(self, policy: str, knob: float, seed: int) -> Future[Point]:
        return self.pool.submit(_worker_point, policy, knob, seed)

    def close(self) -> None:
        self.pool.shutdown()


class _Ray:
    """The same points as Ray tasks; the trace and backtest are put in the object store once."""

    def __init__(self, trace: Trace, backtest: Backtest, run: RunPoint, address: str) -> None:
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
        self.task = ray.remote(run)
        self.trace = ray.put(trace)
        self.backtest = backtest
        self.backtests: dict[int, Any] = {}

    def submit(self, policy: str, knob: float, seed: int) -> Future[Point]:
        if seed not in self.backtests:
            self.backtests[seed] = self.ray.put(with_seed(self.backtest, seed))
        fut: Future[Point] = self.task.remote(self.trace, self.backtests[seed], policy, knob).future()
        return fut

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()


def worst_at_mean(runs: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(SLO attainment, GPU-hours) of one setting run with several seeds: the worst attainment (it meets a
    target only if it does on every seed) at the mean GPU-hours (the expected cost). The frontier's and
    the tuner's rule (simulator/tune.py)."""
    if not runs:
        raise ValueError("a point needs at least one run")
    return min(a for a, _ in runs), sum(g for _, g in runs) / len(runs)


def seeds_of(backtest: Backtest, seeds: Sequence[int] | None) -> tuple[int, ...]:
    """The seeds a point runs with: `seeds`, else the backtest's own; a repeated seed is refused (it would
    count one draw twice). The frontier's and the tuner's (simulator/tune.py)."""
    out = tuple(seeds) if seeds else (backtest.seed,)
    if len(set(out)) != len(out):
        raise ValueError(f"seeds repeat: {out}")
    return out


def over_seeds(knob: float, runs: Sequence[Point]) -> Point:
    """One point from the same knob run with several seeds (`worst_at_mean`); CPU summed, cached only where
    every run was. One run is itself."""
    if len(runs) == 1:
        return runs[0]
    attainment, gpu_hours = worst_at_mean([(p.attainment, p.gpu_hours) for p in runs])
    return Point(knob, attainment, gpu_hours, sum(p.cpu_s for p in runs), cached=all(p.cached for p in runs))


def _all_done(futs: Sequence[Future[Point]], combine: Callable[[list[Point]], Point]) -> Future[Point]:
    """A future for `combine` of every one of `futs`' results, set when the last of them is."""
    out: Future[Point] = Future()
    left = [len(futs)]
    lock = threading.Lock()

    def one_done(_: Future[Point]) -> None:
        with lock:
            left[0] -= 1
            if left[0]:
                return
        try:
            out.set_result(combine([f.result() for f in futs]))
        except BaseException as e:  # handed to whoever waits on `out`
            out.set_exception(e)

    for f in futs:
        f.add_done_callback(one_done)
    return out


def next_knob(done: Sequence[Point], *, target: float, cap_gpu_hours: float | None, points: int,
              ratio: float, top: float | None, refine: int = 0) -> float | None:
    """The knob of a policy's next point given its points so far (the first is its default), or None when
    its sweep is over: the module docstring's rule, a function of the policy's own points only."""
    if not done:
        raise ValueError("a sweep starts at the policy's default")
    c = coarse_count(done, target=target, cap_gpu_hours=cap_gpu_hours, points=points, ratio=ratio, top=top)
    if c is None:
        return _grid_next(done, target=target, cap_gpu_hours=cap_gpu_hours, points=points, ratio=ratio, top=top)
    return _refine_next(done, c, target, refine)


def _grid_next(done: Sequence[Point], *, target: float, cap_gpu_hours: float | None, points: int,
               ratio: float, top: float | None) -> float | None:
    """The grid's next knob after `done`, or None where the grid walk stops."""
    n = len(done)
    if n >= points:
        return None
    default, last = done[0].knob, done[-1]
    if done[0].attainment >= target:  # toward less capacity, while the points meet the target
        grid = knob_grid_down(default, points, ratio, top)
        flat = n > 1 and _flat(done[-2], last)
        return grid[n] if last.attainment >= target and not flat and n < len(grid) else None
    over = cap_gpu_hours is not None and last.gpu_hours > cap_gpu_hours
    return None if last.attainment >= target or over else knob_grid(default, points, ratio)[n]


def coarse_count(done: Sequence[Point], *, target: float, cap_gpu_hours: float | None, points: int,
                 ratio: float, top: float | None) -> int | None:
    """How many of `done` are the grid walk's (the rest refine its last step), None while it goes on."""
    for k in range(1, len(done) + 1):
        if _grid_next(done[:k], target=target, cap_gpu_hours=cap_gpu_hours, points=points, ratio=ratio,
                      top=top) is None:
            return k
    return None


def _refine_next(done: Sequence[Point], coarse: int, target: float, refine: int) -> float | None:
    """Bisect the grid's last step where it crossed the target: between the point that met it and the one
    that missed, the geometric mean of their knobs, `refine` times, then up to REFINE_MORE times more while
    the point that met costs more than REFINE_TOLERANCE over the one that missed. Each halves the step in log
    space (three turn a 1.4x capacity step into 1.04x, five into 1.01x), so that a policy whose cost to reach
    the target lies inside one step is not charged the whole step. No crossing (or `refine` 0), none."""
    refined = len(done) - coarse
    if refine <= 0 or refined >= refine + REFINE_MORE or coarse < 2:
        return None
    a, b = done[coarse - 2], done[coarse - 1]
    if (a.attainment >= target) == (b.attainment >= target):
        return None
    meet, miss = (a, b) if a.attainment >= target else (b, a)
    for p in done[coarse:]:
        if p.attainment >= target:
            meet = p
        else:
            miss = p
    if refined >= refine and meet.gpu_hours <= miss.gpu_hours * (1 + REFINE_TOLERANCE):
        return None
    mid = float(f"{math.sqrt(meet.knob * miss.knob):.4g}")
    return None if any(mid == p.knob for p in done) else mid


def _flat(a: Point, b: Point) -> bool:
    """A step that changed nothing."""
    return (a.attainment, a.gpu_hours) == (b.attainment, b.gpu_hours)


def sweep(trace: Trace, backtest: Backtest, policies: Sequence[str], *, cap_gpu_hours: float | None,
          target: float = 0.99, points: int = DEFAULT_POINTS, ratio: float = DEFAULT_RATIO, workers: int = 1,
          ray_address: str | None = None, progress: Callable[[str, Point], None] | None = None,
          cache: PointCache | None = None, run: RunPoint = run_point, refine: int = DEFAULT_REFINE,
          seeds: Sequence[int] | None = None) -> list[Frontier]:
    """Every policy's frontier, in the order given (see the module docstring). `run` simulates one point
    (a module-level function, so that worker processes can import it; tests give a stand-in). `seeds`:
    every point is run with each (the backtest's own seed by default) and counts as `over_seeds` of them."""
    seeds = seeds_of(backtest, seeds)
    defaults = {pol: default_knob(pol, trace, backtest) for pol in policies}
    done: dict[str, list[Point]] = {pol: [] for pol in policies}
    if ray_address is not None:
        runner: _Serial | _Pool | _Ray = _Ray(trace, backtest, run, ray_address)
    elif workers > 1:
        runner = _Pool(trace, backtest, run, workers)
    else:
        runner = _Serial(trace, backtest, run)
    runs: dict[Future[Point], list[Future[Point]]] = {}  # a point's future -> its runs', one per seed

    def submit_one(pol: str, knob: float, seed: int) -> Future[Point]:
        hit = cache.get(pol, knob, seed) if cache is not None else None
        if hit is None:
            return runner.submit(pol, knob, seed)
        fut: Future[Point] = Future()
        fut.set_result(hit)
        return fut

    def submit(pol: str, knob: float) -> Future[Point]:
        per_seed = [submit_one(pol, knob, seed) for seed in seeds]
        fut = _all_done(per_seed, lambda pts: over_seeds(knob, pts))
        runs[fut] = per_seed
        return fut

    try:
        pending: dict[Future[Point], str] = {submit(pol, defaults[pol]): pol for pol in policies}
        while pending:
            finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for fut in sorted(finished, key=lambda f: policies.index(pending[f])):
                pol = pending.pop(fut)
                pt = fut.result()
                for seed, one in zip(seeds, runs.pop(fut), strict=True):
                    if cache is not None and not one.result().cached:
                        cache.put(pol, one.result(), seed)
                done[pol].append(pt)
                if progress is not None:
                    progress(pol, pt)
                knob = next_knob(done[pol], target=target, cap_gpu_hours=cap_gpu_hours, points=points,
                                 ratio=ratio, top=KNOB_MAX.get(pol), refine=refine)
                if knob is not None:
                    pending[submit(pol, knob)] = pol
    finally:
        runner.close()
    return [Frontier(pol, KNOB_NAMES[pol], defaults[pol], tuple(done[pol]), target, cap_gpu_hours,
                     KNOB_MAX.get(pol), coarse_count(done[pol], target=target, cap_gpu_hours=cap_gpu_hours,
                                                     points=points, ratio=ratio, top=KNOB_MAX.get(pol)))
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
    seeds: tuple[int, ...] = (0,)  # every point's runs (simulator.report.frontier.over_seeds)

    @property
    def points_cpu_s(self) -> float:
        """CPU seconds of the sweep's simulations, wherever they ran."""
        return sum(p.cpu_s for f in self.frontiers for p in f.points)


def frontier(trace: Trace, backtest: Backtest, policies: Sequence[str], *, points: int = DEFAULT_POINTS,
             ratio: float = DEFAULT_RATIO, workers: int = 1, ray_address: str | None = None,
             progress: Callable[[str, Point], None] | None = None, cache: PointCache | None = None,
             seeds: Sequence[int] | None = None, run: RunPoint = run_point) -> TraceFrontier:
    """The oracle, static at its peak, the lower bound, then `sweep` with static as the cap. The target is
    99% over all requests, or the oracle's own target over all requests (99% of those that can meet the SLO
    at all) where fewer than 99% can. The references are the backtest's own seed's; `seeds` and `run` are the
    points' (`sweep`)."""
    refs = cache.get_references(backtest.oracle_target) if cache is not None else None
    if refs is None:
        refs = references(trace, backtest)
        if cache is not None:
            cache.put_references(backtest.oracle_target, refs)
    target = min(0.99, refs.target_over_all)
    fronts = sweep(trace, backtest, policies, cap_gpu_hours=refs.static_gpu_hours, target=target, points=points,
                   ratio=ratio, workers=workers, ray_address=ray_address, progress=progress, cache=cache,
                   seeds=seeds, run=run)
    fronts = [replace(f, cap_meets_target=refs.static_attainment >= target) for f in fronts]
    return TraceFrontier(trace.name, len(trace), refs.feasible_share, target,
                         Reference(refs.oracle_attainment, refs.oracle_gpu_hours), refs.oracle_status,
                         Reference(refs.static_attainment, refs.static_gpu_hours), refs.bound_gpu_hours,
                         tuple(fronts), refs.cpu_s, backtest.resolved_mode(trace), seeds_of(backtest, seeds))


def references(trace: Trace, backtest: Backtest) -> References:
    """The oracle, static at the oracle's peak and the lower bound, as the frontier needs them."""
    t0 = time.process_time()
    results, oracle = run_policies(trace, backtest, ["static", "oracle"])
    assert oracle is not None and oracle.bound is not None
    static, orc = (summarize(r, backtest.slo) for r in results)
    return References(oracle.feasible_share, oracle.target_over_all, orc.slo_attainment, orc.gpu_hours,
                      oracle.status(), static.slo_attainment, static.gpu_hours, oracle.bound.gpu_hours,
                      time.process_time() - t0)


#: how much cheaper than the oracle a plan must be to replace it: rounding aside
CHEAPER = 1e-3
#: a policy's point up to this much dearer than the oracle is a start too: the plan from it trims
START_MARGIN = 0.1


def start_name(policy: str, knob: float) -> str:
    """How the references list a start planned on from (`oracle_from_points`)."""
    return f"{policy}@{knob!r}"


def oracle_bucket_s(trace: Trace, backtest: Backtest) -> float:
    """The oracle's bucket for this trace, as `run_policies` plans it."""
    return backtest.oracle_bucket_s or (60.0 if trace.duration_s <= 7200 else 300.0)


def ready_counts(result: SimResult, bucket_s: float, n_buckets: int) -> np.ndarray:
    """The most replicas a run had ready at any observation in each bucket of the scored trace (a bucket with no
    observation holds the count of the last one before it): the capacity a schedule must give to serve as that
    run did."""
    t = np.asarray(result.timeline.t, dtype=np.float64)
    ready = np.asarray(result.timeline.ready, dtype=np.int64)
    keep = t >= 0
    t, ready = t[keep], ready[keep]
    counts = np.full(n_buckets, -1, dtype=np.int64)
    if len(t):
        b = np.minimum((t // bucket_s).astype(np.int64), n_buckets - 1)
        np.maximum.at(counts, b, ready)
    empty = np.flatnonzero(counts < 0)
    before = np.searchsorted(t, empty * bucket_s, side="left") - 1  # the last row before each empty bucket
    counts[empty] = np.where(before >= 0, ready[np.maximum(before, 0)], 0) if len(t) else 0
    return counts


def schedule_of(trace: Trace, backtest: Backtest, run: SimResult, bucket_s: float | None = None) -> list[PodPlan]:
    """The schedule of the replicas `run` had ready per oracle bucket (`bucket_s`, default the one `run_policies`
    plans with): the start of a plan on from that run."""
    bucket = bucket_s or oracle_bucket_s(trace, backtest)
    n_buckets = max(1, math.ceil((trace.duration_s + 1e-9) / bucket))
    counts = np.minimum(ready_counts(run, bucket, n_buckets), backtest.max_replicas)
    cold = backtest.preset.cold_start(backtest.cold_start)
    return pods_from_counts(counts, bucket, cold, np.random.default_rng(backtest.seed))


def policy_start(trace: Trace, backtest: Backtest, policy: str, knob: float) -> tuple[list[PodPlan], SimResult]:
    """`policy` at `knob` run at the backtest's seed, and its `schedule_of`."""
    run = simulate(trace, backtest, build_point_controller(policy, knob, trace, backtest),
                   backtest.resolved_mode(trace))
    return schedule_of(trace, backtest, run), run


def plan_on_from(trace: Trace, backtest: Backtest, start: Sequence[PodPlan]) -> OraclePlan:
    """The oracle's plan (as `run_policies` plans it) begun from the schedule `start` instead of from scratch."""
    mode = backtest.resolved_mode(trace)
    p = backtest.preset
    return plan_oracle(trace, lambda ctl: simulate(trace, backtest, ctl, mode), p.perf(), p.replica_config(),
                       p.cold_start(backtest.cold_start), backtest.slo, bucket_s=oracle_bucket_s(trace, backtest),
                       target=backtest.oracle_target, seed=backtest.seed, max_replicas=backtest.max_replicas,
                       gpus_per_replica=p.tp, start=start)


def oracle_from_points(trace: Trace, backtest: Backtest, refs: References, fronts: Sequence[Frontier], *,
                       cap_gpu_hours: float | None, starts: int = 3, rounds: int = 3,
                       margin: float = START_MARGIN, log: Callable[[str], None] | None = None) -> References | None:
    """References whose oracle is planned on from the policies' schedules (the module docstring), or None where
    there was nothing to try. The starts: each policy's cheapest point meeting its target (`Frontier.reached`,
    at or under the cap)
    that costs less than the oracle's GPU-hours x (1 + `margin`) and was not a start before (the references
    list those tried), at most `starts` of them, cheapest first. The cheapest plan meeting the oracle's target
    for less than the oracle is then planned on from its own schedule (the trim's frozen buckets thawed) up to
    `rounds` times while that saves GPU-hours; a stored oracle planned on so and not yet continued is continued
    so, then marked settled."""
    say = log or (lambda line: None)
    cands = sorted((p.gpu_hours, f.policy, p.knob) for f in fronts if (p := f.reached) is not None
                   and (cap_gpu_hours is None or p.gpu_hours <= cap_gpu_hours)
                   and p.gpu_hours < refs.oracle_gpu_hours * (1 + margin)
                   and start_name(f.policy, p.knob) not in refs.oracle_starts)[:starts]
    t0 = time.process_time()
    best: tuple[float, OraclePlan] | None = None
    how = ""
    for gpu_h, policy, knob in cands:
        start, run = policy_start(trace, backtest, policy, knob)
        own = summarize(run, backtest.slo)
        plan = plan_on_from(trace, backtest, start)
        got = summarize(plan.result, backtest.slo).gpu_hours
        say(f"{trace.name}: planned on from {policy} at {knob:g} ({gpu_h:.2f} GPU-h over its seeds; at seed "
            f"{backtest.seed} {100 * own.slo_attainment:.1f}% at {own.gpu_hours:.2f}): {plan.status()} {got:.2f} GPU-h")
        if plan.met_target and got < min(refs.oracle_gpu_hours, best[0] if best else math.inf) * (1 - CHEAPER):
            best, how = (got, plan), f"the schedule of {policy} at {knob:g} (seed {backtest.seed})"
    refs = replace(refs, oracle_starts=(*refs.oracle_starts, *(start_name(c[1], c[2]) for c in cands)))
    pods = oracle_pods(refs)
    if best is None and (pods is None or refs.oracle_settled):
        return replace(refs, cpu_s=refs.cpu_s + time.process_time() - t0) if cands else None
    cur_pods = best[1].pods if best is not None else pods
    cur_gpu = best[0] if best is not None else refs.oracle_gpu_hours
    assert cur_pods is not None
    later, cur_gpu, more = plan_on_while_saving(trace, backtest, cur_pods, cur_gpu, rounds, say)
    cur_plan = later or (best[1] if best is not None else None)
    cpu = refs.cpu_s + time.process_time() - t0
    if cur_plan is None:  # the stored plan stands: now known to be settled
        return replace(refs, cpu_s=cpu, oracle_settled=True)
    s = summarize(cur_plan.result, backtest.slo)
    first = how or "the stored oracle's schedule"
    status = (f"{cur_plan.status()} Planned on from {first}"
              f"{f', then {more} time(s) from its own' if more else ''}: the cheapest schedule known to meet the "
              f"target (the plan from scratch: {refs.scratch_gpu_hours or refs.oracle_gpu_hours:.2f} GPU-h).")
    return replace(refs, oracle_attainment=s.slo_attainment, oracle_gpu_hours=cur_gpu, oracle_status=status, cpu_s=cpu,
                   oracle_pods=tuple((q.ready_at, q.remove_at, q.cold_start_s) for q in cur_plan.pods),
                   oracle_settled=True, scratch_gpu_hours=refs.scratch_gpu_hours or refs.oracle_gpu_hours)


def plan_on_while_saving(trace: Trace, backtest: Backtest, pods: Sequence[PodPlan], gpu_hours: float, rounds: int,
                         say: Callable[[str], None]) -> tuple[OraclePlan | None, float, int]:
    """Plan on from `pods` (a schedule meeting the target at `gpu_hours`), then from each result's own, up to
    `rounds` plans, while each meets the target for less: (the last such plan or None, its GPU-hours, how many)."""
    kept: OraclePlan | None = None
    more = 0
    for _ in range(rounds):
        plan = plan_on_from(trace, backtest, pods)
        got = summarize(plan.result, backtest.slo).gpu_hours
        say(f"{trace.name}: planned on from its own schedule ({gpu_hours:.2f} GPU-h): {plan.status()} {got:.2f} GPU-h")
        if not (plan.met_target and got < gpu_hours * (1 - CHEAPER)):
            break
        pods, gpu_hours, kept, more = plan.pods, got, plan, more + 1
    return kept, gpu_hours, more


def oracle_pods(refs: References) -> list[PodPlan] | None:
    """The schedule of an oracle planned on from a policy's (`oracle_from_points`), or None for the plan from
    scratch (which `run_policies` plans again)."""
    return [PodPlan(*q) for q in refs.oracle_pods] if refs.oracle_pods else None
