"""The docs table: every baseline and our reactive policy on each shipped trace, typical cold starts.

    .venv/bin/python scripts/simulator_table.py [--update-docs] [--out FILE] [--quick]
    .venv/bin/python scripts/simulator_table.py --frontier [--quick] [--update-docs] [--traces NAME ...]
                                                [--workers N | --ray ADDRESS] [--fresh | --no-cache]
    .venv/bin/python scripts/simulator_table.py --loo [--update-docs] [--workers N]

For each trace it runs ours (the scaler's tokens policy through KEDA+HPA, keda-llm's recommended
ScaledObject), static provisioning at the oracle's peak, the queue (num_requests_waiting > 5), GPU
utilization and concurrency baselines, and the oracle, and prints SLO attainment, GPU-hours / oracle and
GPU-hours / the lower bound (simulator.report.oracle.lower_bound) as Markdown (plus the full table per trace and the
oracle's status: target met, or why not). Not run by CI: it takes minutes. The Azure 2024 week is
cut to a 6-hour window (the oracle simulates its schedule several times); --quick cuts every trace to
its first 20 minutes, to check the script itself. --update-docs writes the tables into the marked blocks
of docs/simulator-results.md (everything) and docs/simulator.md (the summary); --check compares them
with a fresh run instead (a refactoring must leave them identical but for the CPU seconds).
--oracle-check runs only the oracle and the bound on every trace (full length unless --quick) and exits 1
unless each oracle meets its target or says why not, and each bound is at or below its oracle's GPU-hours:
the opt-in slow counterpart of tests/simulator/test_sim_oracle_traces.py.

--frontier sweeps every policy that has a knob (ours, queue, gpu, concurrency and the nine anchors) over
it on each trace (simulator.report.frontier: from the documented default toward more capacity until it meets
99% or costs more than static at the oracle's peak; where the default already meets it, toward less
capacity while it still does) and prints one table per trace: the cost to reach 99% (the cheapest point
that meets it) or "never (best X%)", the knob there and every point tried; with --update-docs it writes
the traces it ran into the `frontier` block of docs/simulator-results.md (one section per trace, the
others kept) and one plot per trace to docs/img/frontier-<trace>.png. --quick: the first 20 minutes, 3
points per policy. After each trace's sweep (with the points cache, every policy), the oracle is planned on
from the schedules of the policies whose cheapest point meeting the target costs less than it or at most 10%
more, and the cheapest plan meeting its target for less is kept in the store with its pods
(simulator.report.frontier.oracle_from_points); the backtest table replays those pods. Points run in
--workers processes (default: every core), or on a Ray cluster with --ray ADDRESS (`auto`: a local
instance; needs `pip install 'keda-llm[ray]'`).

Points cache: every point (and each trace's oracle, static and lower bound) is kept in
docs/data/frontier-points/ (committed, so that a fresh checkout simulates only what its changes moved), keyed
on the trace (name and contents: a window is another trace), the backtest (preset, SLO, seed, cold starts,
mode), the policy, the knob value and a digest of the source the point runs: simulator/ (but the sweep, the
tuner and the command lines), scaler/model.py, scaler/scaledobject.py and the modules (and data files) of
scaler/, common/ and activator/ they import for every point, plus simulator/control/policies.py and the
scaler's modules the simulator imports (its policy and service, not its server) for ours'
(simulator/report/frontier_cache.py). --frontier --check rebuilds each trace's section from the store alone. A
re-run after a change to ours' policy simulates only ours' points; after a change to the simulator, every
point (to the fluid mode's own modules: only the fluid traces' points). --fresh simulates every point again
(and overwrites the cache), --no-cache neither reads nor writes it; `rm -r docs/data/frontier-points` empties
it (entries are never deleted otherwise: commit the new ones with the docs they made). --policies NAME ...
fills the cache for some policies only (not with --update-docs).

--loo (leave one trace out, simulator.leave_one_out): ours' frontier on every trace (from the cache),
ours at every knob value any trace's frontier tried on every trace (simulated where missing, then
cached), and for each trace the knob chosen on the other traces alone, reported on the trace left out
against issue 11's bar; --update-docs writes the `leave-one-out` block of docs/simulator-results.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import re
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from keda_llm.simulator.cluster.engine import GAUGE_TIMINGS, SimResult
from keda_llm.simulator.cluster.lead_in import LEAD_IN_S
from keda_llm.simulator.control.anchors import VARIANTS
from keda_llm.simulator.control.controllers import ScheduleController
from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.report.frontier import (
    SWEPT,
    Point,
    Reference,
    TraceFrontier,
    default_knob,
    frontier,
    oracle_from_points,
    oracle_pods,
    over_seeds,
    run_point,
    with_seed,
)
from keda_llm.simulator.report.frontier_cache import PointCache
from keda_llm.simulator.report.leave_one_out import BAR_RATIO, HeldOut, TracePoints, leave_one_out
from keda_llm.simulator.report.oracle import OraclePlan
from keda_llm.simulator.report.summary import Slo, Summary, markdown_table, summarize, with_oracle_ratio
from keda_llm.simulator.run import Backtest, run_policies, simulate
from keda_llm.simulator.workload.traces import Trace, load_shipped

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
#: committed: the points behind the docs' frontier and leave-one-out tables
CACHE = ROOT / "docs" / "data" / "frontier-points"
#: --quick's points (20-minute traces): not the docs', kept out of git
QUICK_CACHE = ROOT / "build" / "frontier-cache-quick"
PRESET = "llama-3.1-70b/h100-tp4"
SLO = Slo(ttft_s=2.0, itl_s=0.1)
POLICIES = ["ours", "static", "queue", "gpu", "concurrency", "oracle"]


@dataclass(frozen=True)
class Case:
    trace: str
    window: tuple[float, float] | None = None
    note: str = ""


CASES = [
    Case("azure2023-code"),
    Case("azure2023-conv"),
    Case("mooncake-conv"),
    Case("azure2024-code", (600 * 60.0, 960 * 60.0), "minutes 600-960 of the week"),
    Case("burstgpt-week1"),
]


def load(case: Case, quick: bool, shift_s: float = 0.0) -> Trace:
    """The case's trace with a lead-in every policy but the oracle lives through first, unscored
    (simulator/cluster/lead_in.py), so none starts cold where the oracle starts warm: a window of a longer
    trace carries LEAD_IN_S of the traffic before it; a whole trace, its own last LEAD_IN_S (Trace.wrapped).
    `shift_s` moves every arrival that much later before the cut (scripts/phase_table.py)."""
    tr = load_shipped(case.trace)
    if shift_s:
        tr = Trace(tr.name, tr.arrival_s + shift_s, tr.prompt_tokens, tr.output_tokens, tr.hash_offsets,
                   tr.hash_values)
    if case.window is not None:
        start, end = case.window
        return tr.window(start, min(end, start + 1200.0) if quick else end, lead_s=LEAD_IN_S)
    return (tr.window(0.0, 1200.0) if quick else tr).wrapped(LEAD_IN_S)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="also write the Markdown here")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--update-docs", action="store_true", help="write the tables into docs/ (marked blocks)")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if the docs' tables differ from a fresh run (the CPU-seconds figures aside); "
                         "with --frontier, from the committed points alone (exit 2 where the store lacks some)")
    ap.add_argument("--oracle-check", action="store_true",
                    help="run only the oracle and the lower bound; exit 1 unless each meets its target or says why "
                         "and each bound is at or below the oracle's GPU-hours")
    ap.add_argument("--frontier", action="store_true",
                    help="sweep every policy's knob; the frontier table and plot per trace (--update-docs: into docs)")
    ap.add_argument("--traces", nargs="*", default=None, help="--frontier: only these traces (default: all)")
    ap.add_argument("--points", type=int, default=None,
                    help=f"--frontier: points per policy at most (default {FRONTIER_POINTS}, --quick {QUICK_POINTS})")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="--frontier: processes for the points")
    ap.add_argument("--seeds", type=int, default=None,
                    help=f"--frontier, --loo: run every point with seeds 0..N-1 and count its worst attainment at "
                         f"its mean GPU-hours (default {FRONTIER_SEEDS}, --quick 1)")
    ap.add_argument("--ray", default=None, metavar="ADDRESS",
                    help="--frontier: run the points on this Ray cluster (`auto`: a local one)")
    ap.add_argument("--policies", nargs="*", default=None,
                    help=f"--frontier: only these policies (default: all of {', '.join(FRONTIER_POLICIES)}), to fill "
                         "the points cache ahead of a full run; not with --update-docs")
    ap.add_argument("--fresh", action="store_true",
                    help="--frontier: simulate every point again (the cache is overwritten, not read)")
    ap.add_argument("--loo", action="store_true",
                    help="leave one trace out: ours' knob chosen on the other traces' frontier points, reported on "
                         "the one left out (--update-docs: the leave-one-out block); uses the points cache")
    ap.add_argument("--no-cache", action="store_true",
                    help="--frontier: neither read nor write the points cache")
    ap.add_argument("--gauges", default="leading", choices=GAUGE_TIMINGS,
                    help="when the engines' gauges change (SimConfig.gauges): the docs' tables are on leading until "
                         "they are regenerated on published; --frontier --gauges published fills the store with "
                         "published points (keyed apart), without --update-docs [leading]")
    args = ap.parse_args()
    if args.seeds is not None and args.seeds < 1:
        raise SystemExit(f"--seeds must be at least 1, got {args.seeds}")
    if args.ray and importlib.util.find_spec("ray") is None:
        raise SystemExit("--ray needs Ray, which is not installed; hint: pip install 'keda-llm[ray]', or run on "
                         "--workers N")
    if args.gauges != "leading" and (args.update_docs or args.check):
        raise SystemExit(f"--gauges {args.gauges} fills the points store; the docs' tables are on the leading timing "
                         "until all of them move (docs/simulator-results.md, \"Open\"): drop --update-docs/--check")
    bt = Backtest(get_preset(PRESET), cold_start="typical", slo=SLO, gauges=args.gauges)
    if args.oracle_check:
        raise SystemExit(oracle_check(bt, args.quick))
    if args.loo:
        run_loo(bt, args)
        return
    if args.frontier:
        run_frontier(bt, args)
        return
    head = (["trace", "requests"] + [f"{p} SLO / GPU-h÷oracle / ÷bound" for p in POLICIES]
            + ["oracle GPU-h", "bound GPU-h", "oracle target"])
    summary_rows: list[str] = []
    details: list[str] = []
    for case in CASES:
        tr = load(case, args.quick)
        t0 = time.process_time()
        results, oracle = run_policies(tr, bt, POLICIES)
        assert oracle is not None and oracle.bound is not None
        status = oracle.status()
        stored = stored_oracle(tr, bt, args.quick)
        if stored is not None:  # cheaper than the plan from scratch, which static's peak still comes from
            results[POLICIES.index("oracle")], status = stored
        sums: list[Summary] = with_oracle_ratio([summarize(r, SLO) for r in results], oracle.bound.gpu_hours)
        cpu = time.process_time() - t0
        by = {s.policy: s for s in sums}
        cells = [f"{100 * by[p].slo_attainment:.1f}% / {by[p].gpu_hours_vs_oracle or 0:.2f}x / "
                 f"{by[p].gpu_hours_vs_bound or 0:.2f}x" for p in POLICIES]
        cells += [f"{by['oracle'].gpu_hours:.2f}", f"{oracle.bound.gpu_hours:.2f}",
                  short_status(oracle) + (" (planned on from a policy's schedule)" if stored else "")]
        name = tr.name + (f" ({case.note})" if case.note else "")
        summary_rows.append(f"| {name} | {len(tr)} | " + " | ".join(cells) + " |")
        note = f"Oracle: {status} {bound_line(oracle)} "
        details.append(f"### {name}\n\n{markdown_table(sums)}\n\n{note}Mode {bt.resolved_mode(tr)}, "
                       f"{cpu:.0f} CPU s.\n")
        print(summary_rows[-1], flush=True)
    text = "\n".join([
        f"Preset {PRESET} (4 x H100 per replica), typical cold starts, SLO: TTFT <= {SLO.ttft_s:g} s and mean "
        f"ITL <= {SLO.itl_s:g} s per request. Each cell: SLO attainment / GPU-hours relative to the oracle / "
        f"relative to the lower bound (GPU-hours no schedule can go below).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" for _ in head) + "|",
        *summary_rows,
        "",
        *details,
    ])
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    summary = "\n".join(text.split("\n")[:4 + len(summary_rows)])
    if args.check:
        blocks = ((DOCS / "simulator-results.md", "simulator-table", text),
                  (DOCS / "simulator.md", "simulator-summary", summary))
        stale = [f"{path.name}:{name}" for path, name, body in blocks
                 if _without_cpu(read_block(path, name)) != _without_cpu(body.strip("\n"))]
        print("docs tables: " + ("differ in " + ", ".join(stale) if stale else "identical to this run"))
        raise SystemExit(1 if stale else 0)
    if args.update_docs:
        replace_block(DOCS / "simulator-results.md", "simulator-table", text)
        replace_block(DOCS / "simulator.md", "simulator-summary", summary)


FRONTIER_POINTS = 6
QUICK_POINTS = 3
#: seeds (the cold starts' draws) every frontier point runs with: issue 11 asks for at least 3, the worst reported
FRONTIER_SEEDS = 3
#: the frontier's policies: every one with a knob (static and the oracle are its reference points), but the
#: anchors' VARIANTS (Dynamo's ARIMA predictor: measured beside the frontier, docs "Dynamo's predictors")
FRONTIER_POLICIES = [p for p in SWEPT if p not in VARIANTS]
IMG = DOCS / "img"


def cache_root(quick: bool) -> Path:
    """The committed store for full-length points; --quick's elsewhere (they make no docs)."""
    return QUICK_CACHE if quick else CACHE


def case_title(case: Case, quick: bool) -> str:
    name = case.trace + (f" ({case.note})" if case.note else "")
    return name + (" first 20 minutes" if quick else "")


def run_frontier(bt: Backtest, args: argparse.Namespace) -> None:
    """--frontier: every case (or --traces), a section and a plot each; --update-docs writes them."""
    cases = [c for c in CASES if args.traces is None or c.trace in args.traces]
    if args.traces:
        missing = set(args.traces) - {c.trace for c in cases}
        if missing:
            known = ", ".join(c.trace for c in CASES)
            raise SystemExit(f"unknown trace(s): {', '.join(sorted(missing))}; known: {known}")
    points = args.points or (QUICK_POINTS if args.quick else FRONTIER_POINTS)
    policies = FRONTIER_POLICIES if args.policies is None else args.policies
    if args.policies is not None and args.update_docs:
        raise SystemExit("--policies fills the points cache; --update-docs needs every policy (cached ones cost "
                         "nothing: run it without --policies)")
    unknown = set(policies) - set(SWEPT)  # the variants too: swept on demand, into the same store
    if unknown:
        raise SystemExit(f"unknown policy(ies): {', '.join(sorted(unknown))}; "
                         f"sweepable: {', '.join(SWEPT)}")
    if args.check:
        shaped = [f for f, v in (("--quick", args.quick), ("--points", args.points), ("--seeds", args.seeds),
                                 ("--policies", args.policies)) if v]
        if shaped:  # the docs' sections are the full runs': any of these would compare another run with them
            raise SystemExit(f"--frontier --check compares the docs' full-length frontiers: drop {', '.join(shaped)}")
        raise SystemExit(check_frontier(bt, cases, FRONTIER_POLICIES, FRONTIER_POINTS, frontier_seeds(args)))
    sections: dict[str, str] = {}
    costs: dict[str, str] = {}
    for case in cases:
        tr = load(case, args.quick)
        title = case_title(case, args.quick)
        t0 = time.time()
        cache = None if args.no_cache else PointCache(cache_root(args.quick), tr, bt, fresh=args.fresh)
        tf = frontier(tr, bt, policies, points=points, workers=args.workers, ray_address=args.ray, cache=cache,
                      seeds=frontier_seeds(args),
                      progress=lambda pol, pt: print(f"  {pol}@{pt.knob:g}: {100 * pt.attainment:.1f}% "
                                                     f"{pt.gpu_hours:.2f} GPU-h {pt.cpu_s:.1f} CPU s"
                                                     f"{' (cached)' if pt.cached else ''}", flush=True))
        if cache is not None and args.policies is None:
            tf = oracle_on_from_points(tr, bt, tf, cache)
        img = f"frontier-{case.trace}{'-quick' if args.quick else ''}.png"
        sections[title] = frontier_section(title, tf, points, img, time.time() - t0)
        costs[title] = cost_row(title, tf)
        print(sections[title], flush=True)
        if args.update_docs:
            plot_frontier(tf, title, IMG / img)
    if args.update_docs:
        path = DOCS / "simulator-results.md"
        old = parse_sections(read_block(path, "frontier")) if "generated:frontier" in path.read_text() else {}
        replace_block(path, "frontier", merge_sections(old, sections))
        if not args.quick:
            bench = ROOT / "bench" / "results" / "frontier.md"
            old_rows = {m.group(1): m.group(0) for m in COST_ROW.finditer(read_block(bench, "frontier-cost"))}
            replace_block(bench, "frontier-cost", cost_table({**old_rows, **costs}))


def oracle_on_from_points(tr: Trace, bt: Backtest, tf: TraceFrontier, cache: PointCache) -> TraceFrontier:
    """The oracle planned on from every policy's cheapest schedule meeting the target for less than it
    (simulator.report.frontier.oracle_from_points), kept in the store and shown where it is cheaper."""
    refs = cache.get_references(bt.oracle_target)
    assert refs is not None  # `frontier` put them there
    new = oracle_from_points(tr, bt, refs, tf.frontiers, cap_gpu_hours=tf.static.gpu_hours,
                             log=lambda line: print("  oracle: " + line, flush=True))
    if new is None:
        return tf
    cache.put_references(bt.oracle_target, new)
    return replace(tf, oracle=Reference(new.oracle_attainment, new.oracle_gpu_hours), oracle_status=new.oracle_status,
                   reference_cpu_s=new.cpu_s)


def stored_oracle(tr: Trace, bt: Backtest, quick: bool) -> tuple[SimResult, str] | None:
    """The store's oracle for this trace where it was planned on from a policy's schedule (`--frontier`): its
    schedule replayed (one simulation) and its status; None where the store holds the plan from scratch."""
    refs = PointCache(cache_root(quick), tr, bt).get_references(bt.oracle_target)
    pods = None if refs is None else oracle_pods(refs)
    if refs is None or pods is None:
        return None
    return simulate(tr, bt, ScheduleController("oracle", pods), bt.resolved_mode(tr)), refs.oracle_status


class StoreMiss(Exception):
    """A point (or a trace's references) the store does not hold for the current source."""


def _store_only(trace: Trace, backtest: Backtest, policy: str, knob: float) -> Point:
    raise StoreMiss(f"{policy}@{knob:g} seed {backtest.seed}")


#: what a section says of the machine and the run that wrote it, not of the points: CPU seconds (measured
#: where each point was simulated) and this run's wall time and cache reads
RUN_NOTE = re.compile(r"[\d.]+ CPU s per simulation, \d+ CPU s for the oracle and static|"
                      r"this run \d+ s wall, \d+ of the points read from the points cache")


def frontier_from_store(bt: Backtest, case: Case, policies: list[str], points: int,
                        seeds: tuple[int, ...]) -> str:
    """A trace's section rebuilt from the committed store alone, simulating nothing (StoreMiss where the store
    lacks a point for the current source: it is stale, or the docs were written by another source)."""
    tr = load(case, False)
    title = case_title(case, False)
    cache = PointCache(CACHE, tr, bt)
    if cache.get_references(bt.oracle_target) is None:
        raise StoreMiss("the oracle and static")
    tf = frontier(tr, bt, policies, points=points, cache=cache, seeds=seeds, run=_store_only)
    return frontier_section(title, tf, points, f"frontier-{case.trace}.png", 0.0)


def check_frontier(bt: Backtest, cases: list[Case], policies: list[str], points: int,
                   seeds: tuple[int, ...]) -> int:
    """--frontier --check: 0 when every trace's section in the docs is what the store gives for the current
    source (the CPU seconds and run notes aside), 1 when one differs, 2 when the store lacks points (nothing
    compared there)."""
    docs = parse_sections(read_block(DOCS / "simulator-results.md", "frontier"))
    worst = 0
    for case in cases:
        title = case_title(case, False)
        try:
            mine = frontier_from_store(bt, case, policies, points, seeds)
        except StoreMiss as e:
            print(f"{title}: the store lacks {e} for this source: run --frontier (it simulates only those)")
            worst = max(worst, 2)
            continue
        same = RUN_NOTE.sub("", mine) == RUN_NOTE.sub("", docs.get(title, ""))
        print(f"{title}: {'the docs are what the store gives' if same else 'the docs differ from the store'}")
        worst = max(worst, 0 if same else 1)
    return worst


COST_ROW = re.compile(r"^\| (.+?) \([\d,]+ requests\) \|.*$", re.M)
COST_HEAD = ("| trace | mode | points | CPU s per simulation: all (max) | anchors' | ours' | oracle + static CPU s |\n"
             "|---|---|---|---|---|---|---|")


def cost_row(title: str, tf: TraceFrontier) -> str:
    """A trace's line in bench/results/frontier.md: CPU seconds per point as measured in the workers."""
    def mean(xs: list[float]) -> str:
        return f"{sum(xs) / len(xs):.1f}" if xs else ""

    n = len(tf.seeds)  # a point's CPU is its runs' sum: per simulation, as the one-seed rows were
    every = [p.cpu_s / n for f in tf.frontiers for p in f.points]
    ours = [p.cpu_s / n for f in tf.frontiers if f.policy == "ours" for p in f.points]
    anchors = [p.cpu_s / n for f in tf.frontiers if f.policy != "ours" for p in f.points]
    return (f"| {title} ({tf.requests:,} requests) | {tf.mode} | {len(every)} | **{mean(every)}** ({max(every):.1f}) | "
            f"{mean(anchors)} | {mean(ours)} | {tf.reference_cpu_s:.0f} |")


def cost_table(rows: dict[str, str]) -> str:
    order = [case_title(c, False) for c in CASES]
    keys = sorted(rows, key=lambda k: order.index(k) if k in order else len(order))
    return "\n".join([COST_HEAD, *(rows[k] for k in keys)])


def frontier_seeds(args: argparse.Namespace) -> tuple[int, ...]:
    """The seeds every frontier point runs with: --seeds N, else FRONTIER_SEEDS (1 with --quick)."""
    n = args.seeds if args.seeds is not None else (1 if args.quick else FRONTIER_SEEDS)
    return tuple(range(n))


def run_loo(bt: Backtest, args: argparse.Namespace) -> None:
    """--loo: ours' frontier on every trace (from the points cache where it holds them), ours at every knob
    value any trace tried on every other trace (simulated where missing), then the choice per trace left
    out (simulator.leave_one_out); --update-docs writes the `leave-one-out` block."""
    points = args.points or (QUICK_POINTS if args.quick else FRONTIER_POINTS)
    seeds = frontier_seeds(args)
    loaded = []
    for case in CASES:
        tr = load(case, args.quick)
        cache = PointCache(cache_root(args.quick), tr, bt, fresh=args.fresh)
        tf = frontier(tr, bt, ["ours"], points=points, workers=args.workers, cache=cache, seeds=seeds)
        loaded.append((case, tr, cache, tf))
        print(f"{case_title(case, args.quick)}: ours' frontier {tf.frontiers[0].cost()}", flush=True)
    knobs = sorted({p.knob for *_, tf in loaded for p in tf.frontiers[0].points})
    table: dict[str, dict[float, tuple[float, float]]] = {}
    runs: dict[tuple[str, float], dict[int, Point]] = {}  # (trace, knob) -> its runs so far, by seed
    todo = []
    for case, tr, cache, tf in loaded:
        have = {p.knob: (p.attainment, p.gpu_hours) for p in tf.frontiers[0].points}
        for k in (k for k in knobs if k not in have):
            runs[case.trace, k] = {}
            for seed in seeds:
                hit = cache.get("ours", k, seed)
                if hit is not None:
                    runs[case.trace, k][seed] = hit
                else:
                    todo.append((case, tr, cache, k, seed))
        table[case.trace] = have
    print(f"{len(todo)} run(s) to simulate: " + ", ".join(f"{c.trace}@{k:g} seed {s}" for c, _, _, k, s in todo),
          flush=True)
    with ProcessPoolExecutor(max(1, args.workers)) as pool:
        futs = [(case, cache, seed, pool.submit(run_point, tr, with_seed(bt, seed), "ours", k))
                for case, tr, cache, k, seed in todo]
        for case, cache, seed, fut in futs:
            pt = fut.result()
            cache.put("ours", pt, seed)
            runs[case.trace, pt.knob][seed] = pt
            print(f"  {case.trace} ours@{pt.knob:g} seed {seed}: {_pct(pt.attainment)} {pt.gpu_hours:.2f} GPU-h "
                  f"{pt.cpu_s:.1f} CPU s", flush=True)
    for (trace, k), by_seed in runs.items():
        pt = over_seeds(k, [by_seed[seed] for seed in seeds])
        table[trace][k] = (pt.attainment, pt.gpu_hours)
    traces = [TracePoints(case.trace, tf.target, tf.oracle.gpu_hours, table[case.trace]) for case, _, _, tf in loaded]
    rows = leave_one_out(traces, knobs)
    before = leave_one_out(traces, knobs, margin=False)
    default = default_knob("ours", loaded[0][1], bt)
    text = loo_block(rows, traces, knobs, default, args.quick, seeds, before)
    print(text)
    if args.update_docs and not args.quick:
        replace_block(DOCS / "simulator-results.md", "leave-one-out", text)


def loo_block(rows: list[HeldOut], traces: list[TracePoints], knobs: list[float], default: float,
              quick: bool, seeds: tuple[int, ...] = (0,), before: list[HeldOut] | None = None) -> str:
    """The leave-one-out block: one row per trace left out (`before`: the same by the rule before the margin
    counted), then every point the choice used."""
    cell = {t.name: t for t in traces}
    head = [
        f"Generated by `scripts/simulator_table.py --loo --update-docs`{' (--quick)' if quick else ''}: ours' "
        f"`targetInterTokenLatency` (the TTFT target in proportion) chosen on the other {len(traces) - 1} traces "
        f"(the value that meets the bar on the most of them, then each one's target on the most, then the "
        f"largest least margin over target among those it meets the bar on, in whole tenths of a point, then "
        f"the least summed GPU-hours / oracle), from the values ours' frontier "
        f"tried on any trace ({', '.join(f'{k:g}' for k in knobs)} s). The bar (issue 11): SLO attainment at or "
        f"above the trace's target at <= {BAR_RATIO:g}x the oracle's GPU-hours. Points: {seeds_note(seeds)[:-2]}.",
        "",
        "| trace left out | knob chosen on the others (s) | others meeting the bar there | others meeting their "
        "target there | their least margin | others' GPU-h ÷ oracle (sum) | left out: SLO (target) | GPU-h ÷ "
        f"oracle | meets the bar | at the default {default:g} s: SLO / ÷ oracle | by cost before margin (the rule "
        "until 2026-12-01): knob, SLO / ÷ oracle, bar |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines = []
    old = {r.trace: r for r in before or []}
    for r in rows:
        t = cell[r.trace]
        met = f"{len(r.choice.met)} of {len(r.choice.met) + len(r.choice.missed)}" + (
            f" (not {', '.join(r.choice.missed)})" if r.choice.missed else "")
        verdict = "yes" if r.meets_bar else ("no: SLO" if not r.meets_target else f"no: {r.ratio:.3f}x")
        at_default = (f"{_pct(t.points[default][0])} / {t.ratio(default):.2f}x" if default in t.points else "")
        bar = f"{len(r.choice.within_bar)} of {len(r.choice.met) + len(r.choice.missed)}"
        margin = f"{100 * r.choice.margin:+.2f} pt" if math.isfinite(r.choice.margin) else "none"
        o = old.get(r.trace)
        by_cost = (f"{o.choice.knob:g}, {_pct(o.attainment)} / {o.ratio:.2f}x, {'yes' if o.meets_bar else 'no'}"
                   if o is not None else "")
        lines.append(f"| {r.trace} | {r.choice.knob:g} | {bar} | {met} | {margin} | {r.choice.ratio_sum:.2f} | "
                     f"{_pct(r.attainment)} ({_pct(r.target)}) | {r.ratio:.2f}x | {verdict} | {at_default} | "
                     f"{by_cost} |")
    matrix = ["", "Ours' points the choice used (SLO / GPU-h ÷ oracle; bold: meets the trace's target):", "",
              "| knob (s) | " + " | ".join(t.name for t in traces) + " |",
              "|---|" + "---|" * len(traces)]
    for k in knobs:
        cells = []
        for t in traces:
            c = f"{_pct(t.points[k][0])} / {t.ratio(k):.2f}x"
            cells.append(f"**{c}**" if t.meets(k) else c)
        matrix.append(f"| {k:g} | " + " | ".join(cells) + " |")
    return "\n".join(head + lines + matrix)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def frontier_section(title: str, tf: TraceFrontier, points: int, img: str | None, wall_s: float) -> str:
    """One trace's frontier as Markdown: a header line, the table, the plot."""
    n_points = sum(len(f.points) for f in tf.frontiers)
    n_cached = sum(p.cached for f in tf.frontiers for p in f.points)
    tgt = _pct(tf.target)
    lines = [
        f"### {title}", "",
        f"{tf.requests} requests, {_pct(tf.feasible_share)} of them can meet the SLO at all; target {tgt} of all "
        f"requests. Oracle {tf.oracle.gpu_hours:.2f} GPU-h at {_pct(tf.oracle.attainment)}; static at its peak "
        f"(the cap) {tf.static.gpu_hours:.2f} GPU-h at {_pct(tf.static.attainment)}; lower bound "
        f"{tf.bound_gpu_hours:.2f} GPU-h. Mode {tf.mode}; at most {points} points per policy, {n_points} run; "
        f"{seeds_note(tf.seeds)}"
        f"{tf.points_cpu_s / max(1, n_points * len(tf.seeds)):.1f} CPU s per simulation, {tf.reference_cpu_s:.0f} "
        f"CPU s for the oracle and static (as measured when simulated); this run {wall_s:.0f} s wall, {n_cached} "
        "of the points read from the points cache.", "",
        f"| policy | knob | default | cost to reach {tgt} | ÷ oracle | knob there | stop "
        "| points tried (knob: SLO / GPU-h) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for f in tf.frontiers:
        r = f.reached
        tried = "; ".join(f"{p.knob:g}: {_pct(p.attainment)} / {p.gpu_hours:.2f}" for p in f.points)
        ratio = f"{r.gpu_hours / tf.oracle.gpu_hours:.2f}x" if r is not None and tf.oracle.gpu_hours > 0 else ""
        lines.append(f"| {f.policy} | {f.knob_name} | {f.default:g} | {f.cost()} | {ratio} | "
                     f"{'' if r is None else f'{r.knob:g}'} | {f.stop} | {tried} |")
    lines += ["", ours_vs_others(tf)]
    if img:
        lines += ["", f"![{title}: SLO attainment vs GPU-hours](img/{img})"]
    return "\n".join(lines)


def seeds_note(seeds: tuple[int, ...]) -> str:
    """How a point reads when it ran with several seeds."""
    if len(seeds) == 1:
        return f"seed {seeds[0]}; "
    return (f"every point run with seeds {seeds[0]}-{seeds[-1]}: its SLO is the worst of the {len(seeds)}, its "
            "GPU-h their mean; ")


def ours_vs_others(tf: TraceFrontier) -> str:
    """One sentence: is ours' cost to reach the target at or below every other policy's, and if not, who
    beats it and by how much."""
    by = {f.policy: f for f in tf.frontiers}
    if "ours" not in by:
        return ""
    ours = by["ours"]
    others = [f for f in tf.frontiers if f.policy != "ours"]
    reach = sorted((f for f in others if f.reached is not None), key=lambda f: f.reached.gpu_hours if f.reached else 0)
    r = ours.reached
    if r is None:
        if not reach:
            over = [f for f in tf.frontiers if f.reached_over_cap is not None]
            if over:
                names = ", ".join(f"{f.policy} ({f.cost()})" for f in over)
                return (f"**Ours against the others:** no policy reaches {_pct(tf.target)} for less than static "
                        f"provisioning at the peak ({tf.static.gpu_hours:.2f} GPU-h at {_pct(tf.static.attainment)}); "
                        f"ours' best is {_pct(ours.best.attainment)}; over the cap: {names}.")
            best = max(others, key=lambda f: f.best.attainment, default=None)
            tail = f"; the best other is {best.policy} at {_pct(best.best.attainment)}" if best else ""
            return (f"**Ours against the others:** no policy reaches {_pct(tf.target)} here; ours' best is "
                    f"{_pct(ours.best.attainment)}{tail}.")
        names = ", ".join(f"{f.policy} ({f.cost()})" for f in reach)
        return (f"**Ours against the others:** behind: ours never reaches {_pct(tf.target)} (best "
                f"{_pct(ours.best.attainment)}), while {names} do.")
    cheaper = [f for f in reach if f.reached is not None and round(f.reached.gpu_hours, 2) < round(r.gpu_hours, 2)]
    if not cheaper:
        return (f"**Ours against the others:** at or beyond every other policy: ours reaches {_pct(tf.target)} at "
                f"{r.gpu_hours:.2f} GPU-h, and {len(reach)} of the {len(others)} others reach it at all, none for "
                "less.")
    names = ", ".join(f"{f.policy} {f.cost()} ({100 * (1 - f.reached.gpu_hours / r.gpu_hours):.0f}% less)"
                      for f in cheaper if f.reached is not None)
    return (f"**Ours against the others:** behind: ours reaches {_pct(tf.target)} at {r.gpu_hours:.2f} GPU-h; "
            f"cheaper: {names}.")


SECTION = re.compile(r"^### (.+)$", re.M)


def parse_sections(block: str) -> dict[str, str]:
    """The frontier block -> {title: section text}; text before the first section is dropped."""
    heads = list(SECTION.finditer(block))
    return {m.group(1): block[m.start():(heads[i + 1].start() if i + 1 < len(heads) else len(block))].strip("\n")
            for i, m in enumerate(heads)}


def parse_frontier_table(section: str) -> list[dict[str, str]]:
    """A section's table rows as {column: cell}."""
    rows = [ln for ln in section.splitlines() if ln.startswith("|")]
    head = [c.strip() for c in rows[0].strip("|").split("|")]
    return [dict(zip(head, (c.strip() for c in ln.strip("|").split("|")), strict=True)) for ln in rows[2:]]


FRONTIER_INTRO = ("Generated by `scripts/simulator_table.py --frontier --update-docs` (all traces, full length; "
                  "`--traces NAME`: one trace). Each section is one run, its points read from the points cache "
                  "where they were simulated before by the same code; a run replaces only the sections of the "
                  "traces it ran. Each point: the worst SLO attainment over its seeds at their mean GPU-hours "
                  "(the section says which seeds).")


def merge_sections(old: dict[str, str], new: dict[str, str]) -> str:
    """The block: the full-length sections in CASES order, then the quick ones."""
    merged = {**old, **new}
    order = [case_title(c, q) for q in (False, True) for c in CASES]
    keys = sorted(merged, key=lambda k: order.index(k) if k in order else len(order))
    return "\n\n".join([FRONTIER_INTRO, *(merged[k] for k in keys)])


def plot_frontier(tf: TraceFrontier, title: str, path: Path) -> None:
    """SLO attainment vs GPU-hours, one line per policy; the oracle, static and the lower bound marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=80)
    cmap = plt.get_cmap("tab20")
    for i, f in enumerate(tf.frontiers):
        xs = [p.gpu_hours for p in f.points]
        ys = [100 * p.attainment for p in f.points]
        ax.plot(xs, ys, marker="o", ms=3, lw=1.2, color=cmap(i % 20), label=f.policy)
    ax.plot([tf.oracle.gpu_hours], [100 * tf.oracle.attainment], marker="*", ms=14, color="black", ls="",
            label="oracle")
    ax.plot([tf.static.gpu_hours], [100 * tf.static.attainment], marker="s", ms=8, color="gray", ls="",
            label="static (cap)")
    ax.axvline(tf.bound_gpu_hours, color="black", ls=":", lw=1, label="lower bound")
    ax.axhline(100 * tf.target, color="red", ls="--", lw=0.8, label=f"target {_pct(tf.target)}")
    ax.axhline(100 * tf.feasible_share, color="green", ls="-.", lw=0.8, label="can meet SLO at all")
    ax.set_xscale("log")
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("GPU-hours (log)")
    ax.set_ylabel("SLO attainment, % of all requests")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6.5, ncol=1, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def short_status(oracle: OraclePlan) -> str:
    """The summary table's cell: met, met on the lowered target, or not met."""
    if not oracle.met_target:
        return "NOT met"
    return "met" if oracle.feasible_share >= oracle.target else f"met ({100 * oracle.target_over_all:.1f}% of all)"


def bound_line(oracle: OraclePlan) -> str:
    b = oracle.bound
    assert b is not None
    return (f"Lower bound: {b.gpu_hours:.2f} GPU-h ({b.counted} requests at the peak {1e6 * b.seconds_per_token:.1f} "
            f"us/token, KV floor {b.kv_floor_replica_s / 3600:.2f} replica-h).")


def oracle_check(bt: Backtest, quick: bool) -> int:
    """Every trace: the oracle meets its target or says it cannot within the replica cap (a search its budget of
    simulations cut short fails); the bound is at or below its GPU-hours."""
    bad = 0
    for case in CASES:
        tr = load(case, quick)
        t0 = time.process_time()
        results, oracle = run_policies(tr, bt, ["oracle"])
        assert oracle is not None and oracle.bound is not None
        gpu_h = summarize(results[0], SLO).gpu_hours
        ok = (oracle.met_target or "(max_replicas)" in oracle.reason) and oracle.bound.gpu_hours <= gpu_h + 1e-9
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {tr.name}: oracle {gpu_h:.2f} GPU-h, bound {oracle.bound.gpu_hours:.2f} "
              f"GPU-h; {oracle.status()} {time.process_time() - t0:.0f} CPU s.", flush=True)
    return 1 if bad else 0


def _without_cpu(text: str) -> str:
    """The table with its one measured figure (CPU seconds per trace, never the same twice) blanked."""
    return re.sub(r"\d+ CPU s\.", "N CPU s.", text)


def read_block(path: Path, name: str) -> str:
    """What lies between `<!-- generated:NAME -->` and `<!-- /generated:NAME -->` in `path`."""
    start, end = f"<!-- generated:{name} -->", f"<!-- /generated:{name} -->"
    doc = path.read_text()
    return doc[doc.index(start) + len(start):doc.index(end)].strip("\n")


def replace_block(path: Path, name: str, body: str) -> None:
    """Replace what lies between `<!-- generated:NAME -->` and `<!-- /generated:NAME -->` in `path`."""
    start, end = f"<!-- generated:{name} -->", f"<!-- /generated:{name} -->"
    doc = path.read_text()
    a, b = doc.index(start) + len(start), doc.index(end)
    path.write_text(doc[:a] + "\n" + body.strip("\n") + "\n" + doc[b:])


def publish(text: str, command: str, cpu_s: float, started: float, workers: int, block: str | None) -> None:
    """A table script's end: `text` with a line naming the command that generated it and what it cost (process
    CPU seconds, wall seconds since `started`, workers), printed, and written into docs/simulator-results.md's
    `block` (None: printed only)."""
    text += (f"\nGenerated by `{command}` ({cpu_s:.0f} CPU s in {time.time() - started:.0f} s on {workers} "
             f"worker(s)).\n")
    print(text)
    if block is not None:
        replace_block(ROOT / "docs" / "simulator-results.md", block, text)


if __name__ == "__main__":
    main()
