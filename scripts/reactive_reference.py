"""What a perfectly informed reactive schedule reaches on a trace, against the oracle (opt-in; minutes).

    .venv/bin/python scripts/reactive_reference.py [--traces NAME ...] [--holds 0,2,4,...]
        [--headrooms 1,1.25,1.5] [--workers N]

Plans the docs table's oracle for each trace (70B TP4 H100, typical cold starts, TTFT 2 s / ITL 0.1 s, the
table's mode), then replays simulator/report/reactive.py's schedule for every hold (minutes) and
headroom: the oracle's own count for each minute, known as the minute starts, ready one median cold start
later (rounded down to whole minutes), the largest of the last `hold` minutes kept, times `headroom`.
Prints a Markdown table per trace: SLO attainment over all requests, GPU-hours and their ratio to the
oracle's, and the cheapest setting that meets the oracle's target. Results: docs/simulator-results.md.
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from keda_llm.simulator.control.controllers import ScheduleController
from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.report.oracle import OraclePlan, plan_oracle
from keda_llm.simulator.report.reactive import delay_buckets, reactive_counts, reactive_pods
from keda_llm.simulator.report.summary import Slo, summarize
from keda_llm.simulator.run import Backtest, simulate
from keda_llm.simulator.workload.traces import Trace, TraceError, load_shipped

PRESET = "llama-3.1-70b/h100-tp4"
SLO = Slo(ttft_s=2.0, itl_s=0.1)
WINDOWS = {"azure2024-code": (600 * 60.0, 960 * 60.0)}  # as the docs table: minutes 600-960 of the week


def backtest() -> Backtest:
    return Backtest(get_preset(PRESET), cold_start="typical", slo=SLO)


def load(name: str) -> Trace:
    tr = load_shipped(name)
    return tr.window(*WINDOWS[name]) if name in WINDOWS else tr


def plan(name: str) -> OraclePlan:
    tr, bt = load(name), backtest()
    p, mode = bt.preset, bt.resolved_mode(tr)
    bucket = bt.oracle_bucket_s or (60.0 if tr.duration_s <= 7200 else 300.0)
    return plan_oracle(tr, lambda ctl: simulate(tr, bt, ctl, mode), p.perf(), p.replica_config(),
                       p.cold_start(bt.cold_start), bt.slo, bucket_s=bucket, target=bt.oracle_target, seed=bt.seed,
                       max_replicas=bt.max_replicas, gpus_per_replica=p.tp)


def point(name: str, oracle: OraclePlan, hold: int, headroom: float) -> tuple[int, float, float, float, float]:
    """(hold, headroom, SLO attainment, GPU-hours, CPU s) of the reactive schedule."""
    tr, bt = load(name), backtest()
    t0 = time.process_time()
    pods = reactive_pods(oracle, bt.preset.cold_start(bt.cold_start), hold, headroom, bt.seed, bt.max_replicas)
    s = summarize(simulate(tr, bt, ScheduleController("reactive", pods), bt.resolved_mode(tr)), SLO)
    return hold, headroom, s.slo_attainment, s.gpu_hours, time.process_time() - t0


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
    for name in args.traces:
        try:
            load(name)
        except TraceError as e:
            raise SystemExit(f"reactive_reference: {e}") from None
    bt = backtest()
    cold = bt.preset.cold_start(bt.cold_start)
    with ProcessPoolExecutor(args.workers) as pool:
        plans = {name: pool.submit(plan, name) for name in args.traces}
        for name in args.traces:
            oracle = plans[name].result()
            o = summarize(oracle.result, SLO)
            target = oracle.target_over_all
            futs = [pool.submit(point, name, oracle, h, r) for r in rooms for h in holds]
            rows = [f.result() for f in futs]
            print(f"\n### {name}\n\nOracle {o.gpu_hours:.2f} GPU-h at {100 * o.slo_attainment:.1f}% (target "
                  f"{100 * target:.1f}% of all requests, planned in {oracle.bucket_s:g} s buckets); the count of each "
                  f"minute ready {delay_buckets(cold, 60.0)} minute(s) after it is known (median cold start "
                  f"{cold.quantile(0.5):.0f} s).\n")
            print("| hold (minutes) | headroom | SLO met | GPU-h | ÷ oracle | CPU s |")
            print("|---|---|---|---|---|---|")
            for h, r, slo, gpu_h, cpu in rows:
                print(f"| {h} | {r:g} | {100 * slo:.2f}% | {gpu_h:.2f} | {gpu_h / o.gpu_hours:.2f}x | {cpu:.0f} |")
            meeting = [row for row in rows if row[2] >= target - 1e-9]
            best = min(meeting, key=lambda row: row[3]) if meeting else None
            print("\nCheapest setting that meets the oracle's target: " + (
                f"hold {best[0]}, headroom {best[1]:g}: {100 * best[2]:.2f}% at {best[3] / o.gpu_hours:.2f}x the "
                f"oracle." if best else f"none (best {100 * max(row[2] for row in rows):.2f}%)."), flush=True)


if __name__ == "__main__":
    main()
