"""What a perfectly informed reactive schedule reaches on a trace, against the oracle (opt-in; minutes).

    .venv/bin/python scripts/reactive_reference.py [--traces NAME ...] [--holds 0,2,4,...]
        [--headrooms 1,1.25,1.5] [--workers N]

Plans the docs table's oracle for each of its traces (scripts/simulator_table.py: its preset, SLO, windows
and mode), then replays simulator/report/reactive.py's schedule for every hold (minutes) and
headroom: the oracle's own count for each minute, known as the minute starts, ready one median cold start
later (rounded down to whole minutes), the largest of the last `hold` minutes kept, times `headroom`.
Prints a Markdown table per trace: SLO attainment over all requests, GPU-hours and their ratio to the
oracle's, and the cheapest setting that meets the oracle's target. Results: docs/simulator-results.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from simulator_table import CASES, PRESET, SLO, Case, load

from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.report.oracle import OraclePlan
from keda_llm.simulator.report.reactive import (
    ReactivePoint,
    cheapest_meeting,
    delay_buckets,
    reactive_counts,
    reactive_point,
)
from keda_llm.simulator.report.summary import summarize
from keda_llm.simulator.run import Backtest, run_policies

CASE = {c.trace: c for c in CASES}  # the docs table's traces and windows (scripts/simulator_table.py)


def backtest() -> Backtest:
    return Backtest(get_preset(PRESET), cold_start="typical", slo=SLO)


def plan(case: Case) -> OraclePlan:
    """The docs table's oracle for the case (run_policies plans it in the table's mode)."""
    oracle = run_policies(load(case, quick=False), backtest(), ["oracle"])[1]
    assert oracle is not None
    return oracle


def point(case: Case, oracle: OraclePlan, hold: int, headroom: float) -> ReactivePoint:
    """The reactive schedule at one setting on the docs table's trace (simulator/report/reactive.py)."""
    return reactive_point(load(case, quick=False), backtest(), oracle, hold, headroom)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", nargs="*", default=["azure2023-code"])
    ap.add_argument("--holds", default="0,2,4,6,8,10,15,20,30",
                    help="minutes the largest count is kept, comma-separated")
    ap.add_argument("--headrooms", default="1", help="multipliers on the count, comma-separated")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
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
