"""The shipped default on other hardware: does its ITL target carry from the 70B it was chosen on?

    .venv/bin/python scripts/preset_table.py [--presets P ...] [--traces T ...] [--seeds S] [--phases N]
                                             [--workers J] [--update-docs | --quick]

The default `targetInterTokenLatency` (0.56 of the ITL SLO) was chosen on 70B TP4 H100, the preset the
docs' tables run. The latency term holds a replica's mean ITL at that target, and a replica's ITL is
about its decode step at a batch of one (the floor: the weights read once per token) stretched by the
other work its iterations carry, mostly chunked prefill: ITL ~ floor / (1 - u) with u the share of the
GPU that other work takes. So a target T holds u at about 1 - floor / T, and how much the load can grow
before the ITL reaches the SLO is (1 - floor / SLO) / (1 - floor / T): one ITL target is a different
utilization, and a different margin for a burst within a cold start, on each preset.

This runs ours (the shipped ScaledObject at each ITL share of the tuner's grid, the TTFT target moved in
proportion, as the frontier's knob moves it) on each preset and trace, as the docs' tables run a trace
(the same lead-in), over seeds and the control loop's phase (the arrivals shifted across the HPA's 15 s
sync), against the oracle of that preset (seed 0, phase 0), and the default share once more with
`itlScaling: busy` (the latency term reads the replicas' busy share above their fitted ITL floor). Each
cell: the worst run's SLO attainment and the runs' mean GPU-hours over the oracle's. Beside it the
preset's floor (one decode step at 1,500 tokens of context), the utilization and load margin the
default target leaves, and the perfectly informed reactive schedule: the cheapest setting that
meets the oracle's target (simulator/report/reactive.py: the oracle's own count for each minute, ready a
cold start after the minute starts, held and given headroom): what reacting on a perfect signal costs.

--update-docs writes the `preset-table` block of docs/simulator-results.md; --quick runs the first 20
minutes of one trace on one preset, one seed and phase (checks the script). Not run by CI: the default
(3 presets x 2 traces x 5 columns x 3 seeds x 2 phases, and each oracle's informed reactive schedules) is
about 12 CPU minutes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from simulator_table import CASES, SLO, Case, load, publish

from keda_llm.simulator.control import KedaSettings
from keda_llm.simulator.control.policies import ITL_TARGET_FRACTION, ours_scaledobject
from keda_llm.simulator.hardware.perf import step_time
from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.report.frontier_point import run_point
from keda_llm.simulator.report.reactive import ReactivePoint, cheapest_reactive
from keda_llm.simulator.report.summary import summarize
from keda_llm.simulator.run import Backtest, run_policies
from keda_llm.simulator.tune import FULL_GRID, PHASE_SPAN_S

PRESETS = ["llama-3.1-8b/h100", "llama-3.1-8b/a100", "llama-3.1-70b/h100-tp4"]
TRACES = ["azure2023-code", "azure2023-conv"]
SHARES = tuple(s for s in FULL_GRID.itl_fraction if s <= ITL_TARGET_FRACTION)  # the default and tighter
FLOOR_CONTEXT = 1500.0  # tokens of context at which the floor is read (docs/design.md, the ITL floor)


@dataclass(frozen=True)
class Run:
    preset: str
    trace: str
    share: float  # the ITL target over the ITL SLO; 0 for the oracle
    busy: bool  # itlScaling: busy
    seed: int
    shift_s: float
    slo: float
    gpu_h: float
    cpu_s: float
    #: the oracle's row only: the cheapest perfectly informed reactive setting meeting its target (None: none
    #: does) and the setting of best attainment (`cheapest_reactive`)
    reactive: ReactivePoint | None = None
    reactive_best: ReactivePoint | None = None


def floor_s(preset: str) -> float:
    """One decode step of one request at FLOOR_CONTEXT tokens of context: the ITL no count goes under."""
    return step_time(get_preset(preset).perf(), 1.0, FLOOR_CONTEXT, FLOOR_CONTEXT)


def margin(floor: float, target_s: float, slo_s: float) -> tuple[float, float]:
    """(the utilization a target holds, how far the load can grow before the ITL reaches the SLO), on
    ITL = floor / (1 - u); a target under the floor holds none (0, 0)."""
    if target_s <= floor:
        return 0.0, 0.0
    held = 1.0 - floor / target_s
    return held, (1.0 - floor / slo_s) / held


def busy_scaledobject(bt: Backtest) -> KedaSettings:
    """The shipped ScaledObject as the backtest builds it, with `itlScaling: busy`."""
    p = bt.preset
    so = ours_scaledobject(p.model.name, max_replicas=bt.max_replicas,
                           cold_start_s=p.cold_start(bt.cold_start).quantile(0.9), slo=(SLO.ttft_s, SLO.itl_s))
    trig = so.triggers[0]
    return replace(so, triggers=(replace(trig, metadata={**trig.metadata, "itlScaling": "busy"}), *so.triggers[1:]))


def run_one(job: tuple[str, str, float, bool, int, float, bool]) -> Run:
    preset, trace, share, busy, seed, shift_s, quick = job
    case = next(c for c in CASES if c.trace == trace)
    t0 = time.process_time()
    tr = load(case, quick, shift_s)
    bt = Backtest(get_preset(preset), cold_start="typical", slo=SLO, seed=seed)
    if share == 0.0:
        (result,), plan = run_policies(tr, bt, ["oracle"])
        assert plan is not None
        s = summarize(result, SLO)
        reactive, best = cheapest_reactive(tr, bt, plan)
        return Run(preset, trace, 0.0, False, seed, shift_s, s.slo_attainment, s.gpu_hours,
                   time.process_time() - t0, reactive, best)
    if busy:
        bt = replace(bt, scaledobject=busy_scaledobject(bt))
    point = run_point(tr, bt, "ours", share * SLO.itl_s)
    return Run(preset, trace, share, busy, seed, shift_s, point.attainment, point.gpu_hours,
               time.process_time() - t0)


def _cell(runs: list[Run], oracle_gpu_h: float) -> tuple[float, float]:
    """The worst run's SLO attainment and the runs' mean GPU-hours over the oracle's."""
    return min(r.slo for r in runs), float(np.mean([r.gpu_h for r in runs])) / oracle_gpu_h


def _shown(cell: tuple[float, float]) -> str:
    return f"{100 * cell[0]:.2f}% / {cell[1]:.2f}x"


def _reactive(oracle: Run) -> str:
    """The informed reactive cell: its setting and cost over the oracle's, or the best it reached."""
    if oracle.reactive is not None:
        p = oracle.reactive
        return f"{p.gpu_hours / oracle.gpu_h:.2f}x (hold {p.hold} min, x{p.headroom:g})"
    if oracle.reactive_best is None:
        return "-"
    p = oracle.reactive_best
    return f"never: {100 * p.attainment:.2f}% at best (hold {p.hold} min, x{p.headroom:g})"


def table(runs: list[Run], presets: list[str], cases: list[Case], shares: tuple[float, ...], seeds: int,
          phases: int) -> str:
    head = (f"SLO TTFT <= {SLO.ttft_s:g} s and mean ITL <= {SLO.itl_s:g} s, typical cold starts; ours is the shipped "
            f"ScaledObject at each `targetInterTokenLatency` share of the ITL SLO (the TTFT target moved in "
            f"proportion), {seeds} seed(s) x {phases} phase(s) of the control loop each: the worst run's SLO "
            f"attainment / the runs' mean GPU-hours over the preset's oracle (seed 0, phase 0). Floor: one decode "
            f"step at {FLOOR_CONTEXT:,.0f} tokens of context; at the default ({ITL_TARGET_FRACTION:g}) the "
            f"utilization its target holds, u = 1 - floor / target, and how far the load can grow before the ITL "
            f"reaches the SLO, (1 - floor / SLO) / u. Informed reactive: the cheapest perfectly informed reactive "
            f"schedule meeting the oracle's target, over the oracle's GPU-hours. Last column: the default with "
            f"`itlScaling: busy`. **Bold**: the cheapest share at 99% on every run (proportional scaling).\n\n")
    cols = " | ".join(f"ours at {s:g}" for s in shares) + f" | ours at {ITL_TARGET_FRACTION:g}, busy"
    out = [head + f"| preset | trace | floor | u / margin at {ITL_TARGET_FRACTION:g} | oracle | informed reactive | "
                  f"{cols} |",
           "|---|---|---|---|---|---|" + "---|" * (len(shares) + 1)]
    for preset in presets:
        floor = floor_s(preset)
        u, grow = margin(floor, ITL_TARGET_FRACTION * SLO.itl_s, SLO.itl_s)
        for case in cases:
            mine = [r for r in runs if r.preset == preset and r.trace == case.trace]
            (oracle,) = [r for r in mine if r.share == 0.0]
            cells = [_cell([r for r in mine if r.share == s and not r.busy], oracle.gpu_h) for s in shares]
            busy = [r for r in mine if r.busy]
            meeting = [i for i, (slo, _) in enumerate(cells) if slo >= 0.99 - 1e-9]
            best = min(meeting, key=lambda i: cells[i][1]) if meeting else None
            text = [_shown(c) for c in cells]
            if best is not None:
                text[best] = f"**{text[best]}**"
            text.append(_shown(_cell(busy, oracle.gpu_h)) if busy else "-")
            out.append(f"| {preset} | {case.trace} | {1000 * floor:.1f} ms | {u:.2f} / {grow:.2f}x | "
                       f"{100 * oracle.slo:.2f}% at {oracle.gpu_h:.2f} GPU-h | {_reactive(oracle)} | "
                       + " | ".join(text) + " |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--presets", nargs="*", default=PRESETS)
    ap.add_argument("--traces", nargs="*", default=TRACES)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--phases", type=int, default=2)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--quick", action="store_true", help="20 minutes of one trace on one preset, one run, no docs")
    ap.add_argument("--update-docs", action="store_true")
    args = ap.parse_args()
    if args.phases < 1 or args.seeds < 1:
        raise SystemExit("--phases and --seeds must be at least 1")
    if args.quick and args.update_docs:
        raise SystemExit("--quick writes no docs")
    for p in args.presets:
        get_preset(p)  # an unknown name fails here, with the known ones
    cases = [c for c in CASES if c.trace in args.traces]
    if not cases:
        raise SystemExit(f"no such trace; known: {', '.join(c.trace for c in CASES)}")
    presets, seeds, phases = args.presets, args.seeds, args.phases
    if args.quick:
        presets, cases, seeds, phases = presets[:1], cases[:1], 1, 1
    jobs = [(p, c.trace, 0.0, False, 0, 0.0, args.quick) for p in presets for c in cases]
    columns = [(s, False) for s in SHARES] + [(ITL_TARGET_FRACTION, True)]
    jobs += [(p, c.trace, s, busy, seed, k * PHASE_SPAN_S / phases, args.quick) for p in presets for c in cases
             for s, busy in columns for seed in range(seeds) for k in range(phases)]
    t0 = time.time()
    runs: list[Run] = []
    with ProcessPoolExecutor(max(1, args.workers)) as ex:
        for r in ex.map(run_one, jobs):
            runs.append(r)
            name = f"{r.share or 'oracle'}{' busy' if r.busy else ''}"
            print(f"{r.preset} {r.trace} {name} seed {r.seed} +{r.shift_s:g}s: {100 * r.slo:.2f}% at "
                  f"{r.gpu_h:.2f} GPU-h ({r.cpu_s:.0f} CPU s)", flush=True)
    publish(table(runs, presets, cases, SHARES, seeds, phases), "scripts/preset_table.py --update-docs",
            sum(r.cpu_s for r in runs), t0, args.workers, "preset-table" if args.update_docs else None)


if __name__ == "__main__":
    main()
