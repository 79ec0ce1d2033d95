"""What a perfectly informed reactive schedule reaches on a trace, against the oracle (opt-in; minutes).

    .venv/bin/python scripts/reactive_reference.py [--traces NAME ...] [--holds 0,2,4,...]
        [--headrooms 1,1.25,1.5] [--workers N]
    .venv/bin/python scripts/reactive_reference.py --docs [--update-docs] [--workers N]

Plans the docs table's oracle for each of its traces (scripts/simulator_table.py: its preset, SLO, windows
and mode), then replays simulator/report/reactive.py's schedule for every hold (minutes) and
headroom: the oracle's own count for each minute, known as the minute starts, ready one median cold start
later (rounded down to whole minutes), the largest of the last `hold` minutes kept, times `headroom`.
Prints a Markdown table per trace: SLO attainment over all requests, GPU-hours and their ratio to the
oracle's, and the cheapest setting that meets the oracle's target. Results: docs/simulator-results.md.

--docs makes the docs' table instead (`--update-docs` writes it into the `reactive-reference` block): every
trace of the backtest table against the frontier's oracle (docs/data/frontier-points, seed 0), the one every
other ratio on that page is to. Where the store's oracle was planned on from a policy's schedule, the count per
minute is read off its pods (simulator/report/reactive.py `counted`); where it is the plan from scratch, that
plan is made again (deterministic: the same GPU-hours, checked). Beside each trace ours' default as the
frontier ran it (its three seeds: the worst attainment at the mean GPU-hours), from the same store. About 6
CPU minutes, most of it BurstGPT's week.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from simulator_table import CACHE, CASES, FRONTIER_SEEDS, PRESET, SLO, Case, case_title, load, publish

from keda_llm.simulator.control.controllers import PodPlan
from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.report.frontier import default_knob, over_seeds
from keda_llm.simulator.report.frontier_cache import PointCache
from keda_llm.simulator.report.oracle import OraclePlan
from keda_llm.simulator.report.reactive import (
    HEADROOMS,
    HOLDS,
    CountPlan,
    ReactivePoint,
    cheapest_meeting,
    counted,
    delay_buckets,
    reactive_counts,
    reactive_point,
)
from keda_llm.simulator.report.summary import summarize
from keda_llm.simulator.run import Backtest, run_policies
from keda_llm.simulator.workload.traces import Trace

CASE = {c.trace: c for c in CASES}  # the docs table's traces and windows (scripts/simulator_table.py)


def backtest() -> Backtest:
    return Backtest(get_preset(PRESET), cold_start="typical", slo=SLO)


def plan(case: Case) -> OraclePlan:
    """The docs table's oracle for the case (run_policies plans it in the table's mode)."""
    oracle = run_policies(load(case, quick=False), backtest(), ["oracle"])[1]
    assert oracle is not None
    return oracle


def point(case: Case, oracle: CountPlan, hold: int, headroom: float) -> ReactivePoint:
    """The reactive schedule at one setting on the docs table's trace (simulator/report/reactive.py)."""
    return reactive_point(load(case, quick=False), backtest(), oracle, hold, headroom)


#: the holds the docs' table shows (minutes, headroom 1); the cheapest setting is searched over HOLDS x HEADROOMS
DOCS_HOLDS = (0, 4, 10, 20, 30)


def stored_oracle(case: Case, tr: Trace) -> tuple[CountPlan, float]:
    """The frontier's oracle for the case (seed 0; `tr` its trace) as the schedule replays it, and its GPU-hours."""
    bt = backtest()
    refs = PointCache(CACHE, tr, bt).get_references(bt.oracle_target)
    if refs is None:
        raise SystemExit(f"reactive_reference: the store holds no oracle for {case.trace} under this source; "
                         "run scripts/simulator_table.py --frontier (or scripts/carry_points.py) first")
    if refs.oracle_pods:
        pods = [PodPlan(*q) for q in refs.oracle_pods]
        return counted(pods, tr.duration_s, refs.target_over_all), refs.oracle_gpu_hours
    fresh = plan(case)
    got = summarize(fresh.result, SLO).gpu_hours
    if abs(got - refs.oracle_gpu_hours) > 1e-6 * max(1.0, got):
        raise SystemExit(f"reactive_reference: {case.trace}: the oracle planned again costs {got:.4f} GPU-h, the "
                         f"store's {refs.oracle_gpu_hours:.4f}: the store is stale")
    return fresh, refs.oracle_gpu_hours


def ours_default(tr: Trace) -> tuple[float, float] | None:
    """Ours' default point over the frontier's seeds from the store: (worst attainment, mean GPU-hours)."""
    bt = backtest()
    cache = PointCache(CACHE, tr, bt)
    knob = default_knob("ours", tr, bt)
    runs = [cache.get("ours", knob, seed) for seed in range(FRONTIER_SEEDS)]
    if any(r is None for r in runs):
        return None
    p = over_seeds(knob, [r for r in runs if r is not None])
    return p.attainment, p.gpu_hours


def docs_table(workers: int) -> tuple[str, float]:
    """The `reactive-reference` block: a row per trace of the backtest table, against the frontier's oracle; and
    the replays' CPU seconds."""
    settings = [(h, r) for r in HEADROOMS for h in HOLDS]
    rows = []
    cpu = 0.0
    with ProcessPoolExecutor(workers) as pool:
        for case in CASES:
            tr = load(case, quick=False)
            oracle, oracle_h = stored_oracle(case, tr)
            pts = list(pool.map(point, *zip(*[(case, oracle, h, r) for h, r in settings], strict=True)))
            cpu += sum(p.cpu_s for p in pts)
            shown = {p.hold: p for p in pts if p.headroom == 1.0}
            best = cheapest_meeting(pts, oracle.target_over_all)
            cells = [f"{100 * shown[h].attainment:.2f}% / {shown[h].gpu_hours / oracle_h:.2f}x" for h in DOCS_HOLDS]
            cheap = (f"hold {best.hold}{'' if best.headroom == 1.0 else f', headroom {best.headroom:g}'}: "
                     f"{best.gpu_hours / oracle_h:.2f}x" if best else
                     f"none (best {100 * max(p.attainment for p in pts):.2f}%)")
            ours = ours_default(tr)
            mine = "not in the store" if ours is None else f"{100 * ours[0]:.1f}% / {ours[1] / oracle_h:.2f}x"
            rows.append(f"| {case_title(case, False)} | {100 * oracle.target_over_all:.1f}% | " + " | ".join(cells)
                        + f" | {cheap} | {mine} |")
            print(rows[-1], flush=True)
    bt = backtest()
    cold = bt.preset.cold_start(bt.cold_start)
    head = (f"Preset {PRESET}, typical cold starts, SLO TTFT <= {SLO.ttft_s:g} s and mean ITL <= {SLO.itl_s:g} s, "
            f"seed 0; against the frontier's oracle (docs/data/frontier-points). The oracle's count of each minute "
            f"ready {delay_buckets(cold, 60.0)} minute(s) after it is known (median cold start "
            f"{cold.quantile(0.5):.0f} s), the largest of the last `hold` minutes kept. Each cell: SLO attainment "
            f"over all requests / GPU-hours over the oracle's. The cheapest setting meeting the oracle's target is "
            f"searched over holds {', '.join(map(str, HOLDS))} and headrooms {', '.join(f'{r:g}' for r in HEADROOMS)}; "
            f"ours is the frontier's default point ({FRONTIER_SEEDS} seeds: the worst attainment, the mean "
            f"GPU-hours).\n\n")
    cols = " | ".join(f"hold {h} min" if h else "hold 0" for h in DOCS_HOLDS)
    return (head + f"| trace | target | {cols} | cheapest at the target | ours (default) |\n"
            + "|" + "---|" * (len(DOCS_HOLDS) + 4) + "\n" + "\n".join(rows) + "\n"), cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", nargs="*", default=["azure2023-code"])
    ap.add_argument("--holds", default="0,2,4,6,8,10,15,20,30",
                    help="minutes the largest count is kept, comma-separated")
    ap.add_argument("--headrooms", default="1", help="multipliers on the count, comma-separated")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--docs", action="store_true", help="the docs' table: every trace, the frontier's oracle")
    ap.add_argument("--update-docs", action="store_true", help="--docs, written into docs/simulator-results.md")
    args = ap.parse_args()
    if args.docs or args.update_docs:
        started = time.time()
        text, cpu = docs_table(args.workers)
        publish(text, "python scripts/reactive_reference.py --update-docs", cpu, started, args.workers,
                "reactive-reference" if args.update_docs else None)
        return
    try:
        holds = [int(h) for h in args.holds.split(",")]
        rooms = [float(h) for h in args.headrooms.split(",")]
        for r in rooms:
            reactive_counts(np.array([1]), 0, min(holds), r)  # refuses a negative hold or a bad headroom
    except ValueError as e:
        raise SystemExit(f"reactive_reference: {e} (--holds: minutes >= 0, --headrooms: numbers > 0, "
                         f"comma-separated)") from None
    unknown = [name for name in args.traces if name not in CASE]
    if unknown:
        raise SystemExit(f"reactive_reference: {unknown[0]!r} is not a trace of the docs table; "
                         f"one of: {', '.join(CASE)}")
    bt = backtest()
    cold = bt.preset.cold_start(bt.cold_start)
    with ProcessPoolExecutor(args.workers) as pool:
        plans = {name: pool.submit(plan, CASE[name]) for name in args.traces}
        for name in args.traces:
            oracle = plans[name].result()
            o = summarize(oracle.result, SLO)
            target = oracle.target_over_all
            futs = [pool.submit(point, CASE[name], oracle, h, r) for r in rooms for h in holds]
            rows = [f.result() for f in futs]
            print(f"\n### {name}\n\nOracle {o.gpu_hours:.2f} GPU-h at {100 * o.slo_attainment:.1f}% (target "
                  f"{100 * target:.1f}% of all requests, planned in {oracle.bucket_s:g} s buckets); the count of each "
                  f"minute ready {delay_buckets(cold, 60.0)} minute(s) after it is known (median cold start "
                  f"{cold.quantile(0.5):.0f} s).\n")
            print("| hold (minutes) | headroom | SLO met | GPU-h | ÷ oracle | CPU s |")
            print("|---|---|---|---|---|---|")
            for p in rows:
                print(f"| {p.hold} | {p.headroom:g} | {100 * p.attainment:.2f}% | {p.gpu_hours:.2f} | "
                      f"{p.gpu_hours / o.gpu_hours:.2f}x | {p.cpu_s:.0f} |")
            best = cheapest_meeting(rows, target)
            print("\nCheapest setting that meets the oracle's target: " + (
                f"hold {best.hold}, headroom {best.headroom:g}: {100 * best.attainment:.2f}% at "
                f"{best.gpu_hours / o.gpu_hours:.2f}x the oracle." if best
                else f"none (best {100 * max(p.attainment for p in rows):.2f}%)."), flush=True)


if __name__ == "__main__":
    main()
