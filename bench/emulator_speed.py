"""CPU cost of the KEDA+HPA emulator per simulated week (what a long backtest pays for the control loop).

    python bench/emulator_speed.py [--days 7]

One ScaledObject, pollingInterval 15 s, HPA sync 15 s, an in-process scaler whose desired count
follows a daily sine (1..20 replicas, scale to zero at night). Baseline, measured in the same run: a
bare loop calling the same decision function once per tick. Figures go to bench/results/emulator_speed.md.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from keda_llm.simulator.control import CallbackScaler, KedaHpaLoop, KedaSettings, Trigger


def decide(t: float) -> tuple[int, bool]:
    level = max(0.0, math.sin(2 * math.pi * t / 86400.0)) * 20
    return math.ceil(level), level > 0


def run_emulator(days: float, step: float) -> tuple[float, int]:
    settings = KedaSettings(name="m", triggers=(Trigger("external", {"scalerAddress": "x:1"}),),
                            polling_interval_s=15, cooldown_period_s=300)
    loop = KedaHpaLoop(settings, CallbackScaler(decide))
    start = time.process_time()
    t, end = 0.0, days * 86400.0
    while t < end:
        t += step
        loop.advance_to(t)
    return time.process_time() - start, len(loop.events)


def run_baseline(days: float) -> float:
    start = time.process_time()
    ticks = int(days * 86400 / 15) * 3  # a poll and an HPA sync per 15 s (2 chains) + one decide for the state
    sink = 0
    for i in range(ticks):
        sink += decide(i * 5.0)[0]
    return time.process_time() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--step", type=float, default=5.0, help="how often the caller advances the clock (s)")
    args = ap.parse_args()
    cpu, events = run_emulator(args.days, args.step)
    base = run_baseline(args.days)
    lines = [
        "# KEDA+HPA emulator speed",
        "",
        f"{args.days:g} simulated days, caller advancing every {args.step:g} s, poll and HPA sync every 15 s.",
        "",
        "| what | CPU s | ratio to baseline |",
        "|---|---|---|",
        f"| bare decision loop (baseline) | {base:.3f} | 1.0 |",
        f"| emulator (KEDA poll + HPA sync + scaler calls), {events} events | {cpu:.3f} | {cpu / base:.1f} |",
        "",
        f"Per simulated day: {cpu / args.days * 1000:.0f} ms CPU.",
    ]
    out = Path(__file__).parent / "results" / "emulator_speed.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
