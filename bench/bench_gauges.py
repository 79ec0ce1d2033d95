"""What the published gauge timing costs: frontier points in both timings (SimConfig.gauges), same process.

    python bench/bench_gauges.py [--points TRACE:POLICY:KNOB ...] [--repeat 2] [--out bench/results/gauges.md]

The published timing reads each replica's state at a sample differently (the detailed engine's last
iteration's end, a decode run timed to the sample; the fluid kernel's `published_totals`, a pass over the
running and waiting rows), so its cost is per sample, and largest where the queue is long. Each point
(scripts/simulator_table.py's preset, SLO and case windows, seed 0, in the mode the frontier runs it) runs
once per timing to compile and warm, then the two timings alternate `--repeat` times; the table gives the
best CPU seconds (time.process_time) of each, published / leading, and both outcomes (SLO attainment,
GPU-hours), which differ where the policy reads a gauge.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from simulator_table import CASES, PRESET, SLO, load  # noqa: E402

from keda_llm.simulator.hardware.presets import get_preset  # noqa: E402
from keda_llm.simulator.report.frontier_point import run_point  # noqa: E402
from keda_llm.simulator.run import Backtest  # noqa: E402

#: a runaway queue behind one replica (10^5 and more waiting), an ordinary fluid point, detailed points
POINTS = ("azure2024-code:gpu:94.57", "azure2024-code:queue:5", "azure2023-conv:queue:5",
          "azure2023-conv:ours:0.056", "azure2023-code:hpa-kv:0.8")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", nargs="*", default=list(POINTS))
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    lines = ["| point | mode | leading CPU s | published CPU s | published / leading | leading SLO / GPU-h | "
             "published SLO / GPU-h |", "|---|---|---|---|---|---|---|"]
    print(lines[0], lines[1], sep="\n", flush=True)
    for spec in args.points:
        trace_name, policy, knob = spec.split(":")
        case = next(c for c in CASES if c.trace == trace_name)
        tr = load(case, False)
        lead = Backtest(get_preset(PRESET), cold_start="typical", slo=SLO)
        best: dict[str, float] = {}
        out: dict[str, tuple[float, float]] = {}
        for rnd in range(args.repeat + 1):
            for gauges in ("leading", "published"):
                p = run_point(tr, replace(lead, gauges=gauges), policy, float(knob))
                out[gauges] = (p.attainment, p.gpu_hours)
                if rnd:  # the first round compiles and warms
                    best[gauges] = min(best.get(gauges, float("inf")), p.cpu_s)
        (ls, lg), (ps, pg) = out["leading"], out["published"]
        line = (f"| {spec} | {lead.resolved_mode(tr)} | {best['leading']:.2f} | {best['published']:.2f} | "
                f"{best['published'] / best['leading']:.2f}x | {100 * ls:.2f}% / {lg:.2f} | "
                f"{100 * ps:.2f}% / {pg:.2f} |")
        lines.append(line)
        print(line, flush=True)
    if args.out:
        head = f"<!-- bench/bench_gauges.py, {time.strftime('%Y-%m-%d')} -->\n"
        Path(args.out).write_text(head + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
