"""Simulator speed: CPU seconds for one policy on a one-hour Azure trace and on the Azure 2024 code week.

    .venv/bin/python bench/bench_simulator.py [--skip-week] [--out bench/results/simulator.md]

Targets (GitHub issue 4): a one-hour Azure trace (~20k requests) for one policy in under 30 s, and the
Azure 2024 code week (16.8 M requests) in under 10 minutes. CPU time (time.process_time) is reported,
since the machine is shared; the fluid/detailed ratio on the same hour is measured in the same run.
Policy: ours (the scaler through KEDA+HPA, default ScaledObject), preset llama-3.1-8b/h100.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

from keda_llm.simulator.control.policies import build_controller
from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.report.summary import summarize
from keda_llm.simulator.run import Backtest, simulate
from keda_llm.simulator.workload.traces import Trace, load_shipped

PRESET = "llama-3.1-8b/h100"


def _one(trace: Trace, mode: str, policy: str = "ours", dt: float | None = None,
         progress: bool = False) -> tuple[float, str]:
    bt = Backtest(get_preset(PRESET), fluid_dt_s=dt)
    ctl = build_controller(policy, model="m", max_replicas=64, concurrency_target=64, static_replicas=4)
    t0 = time.process_time()
    step = max(1, len(trace) // 20)
    shown = [0]

    def tell(done: int, total: int) -> None:  # CPU seconds so far at every 5% of the arrivals
        if done >= shown[0] + step or done == total:
            shown[0] = done
            print(f"  {100 * done / max(total, 1):5.1f}% of arrivals, {time.process_time() - t0:7.1f} CPU s",
                  flush=True)

    res = simulate(trace, bt, ctl, mode, progress=tell if progress else None)  # type: ignore[arg-type]
    cpu = time.process_time() - t0
    s = summarize(res, bt.slo)
    return cpu, (f"{s.requests} requests, SLO met {100 * s.slo_attainment:.1f}%, {s.gpu_hours:.1f} GPU-h, "
                 f"{s.cold_starts} cold starts")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-week", action="store_true")
    ap.add_argument("--only-week", action="store_true", help="skip the one-hour traces; append to --out")
    ap.add_argument("--fluid-dt", type=float, default=None,
                    help="the fluid mode's slice for the week [the preset's, simulator.run.Backtest.fluid_slice_s]")
    ap.add_argument("--progress", action="store_true", help="print CPU seconds at every 5%% of the week")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "simulator.md"))
    args = ap.parse_args()
    rows: list[str] = []
    for name in () if args.only_week else ("azure2023-conv", "azure2023-code"):
        tr = load_shipped(name)
        d_cpu, d_what = _one(tr, "detailed")
        f_cpu, f_what = _one(tr, "fluid")
        rows.append(f"| {name} (1 h, {len(tr)} req) | detailed | {d_cpu:.1f} | 30 | {d_what} |")
        rows.append(f"| {name} (1 h, {len(tr)} req) | fluid | {f_cpu:.1f} | - | {f_what}; "
                    f"{d_cpu / f_cpu:.1f}x faster than detailed |")
        print(rows[-2], rows[-1], sep="\n", flush=True)
    if not args.skip_week:
        t0 = time.process_time()
        week = load_shipped("azure2024-code")
        load = time.process_time() - t0
        dt = Backtest(get_preset(PRESET), fluid_dt_s=args.fluid_dt).fluid_slice_s  # resolved once, for the label too
        w_cpu, w_what = _one(week, "fluid", dt=dt, progress=args.progress)
        rows.append(f"| azure2024-code (7 d, {len(week)} req) | fluid, {dt:g} s slices | "
                    f"{w_cpu + load:.0f} (load {load:.0f}) | 600 | {w_what} |")
        print(rows[-1], flush=True)
    if args.only_week:
        with Path(args.out).open("a") as fh:
            fh.write("\n".join(rows) + "\n")
        print(f"appended to {args.out}")
        return
    text = "\n".join([
        "# Simulator speed",
        "",
        f"`bench/bench_simulator.py`, policy `ours` (default ScaledObject), preset {PRESET}, "
        f"CPU seconds (process time) on {platform.machine()} / Python {platform.python_version()}.",
        "",
        "| trace | mode | CPU s | target s | outcome |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
