"""The simulator's speed on two checkouts in the same run: a change's cost as a ratio, not a stale figure.

    python bench/bench_simulator_ab.py BEFORE AFTER [--rounds 2] [--repeat 3] [--out bench/results/simulator_ab.md]
    python bench/bench_simulator_ab.py BEFORE AFTER --points azure2024-code:gpu:94.57 [...] [--out ...]

BEFORE and AFTER are checkouts of this repository (e.g. a `git worktree` of main and the branch), each with
its link tree built (`python scripts/linktree.py` in it). Each round runs, in a fresh process per checkout
(its own PYTHONPATH), bench_simulator.py's `_one` (policy ours, preset llama-3.1-8b/h100) on the two
one-hour Azure 2023 traces in both modes: one warm-up run, then the best of `--repeat` CPU seconds
(time.process_time). The checkouts alternate round by round so that load on the shared machine falls on
both; the table gives each checkout's best over the rounds and AFTER / BEFORE. The outcome line (SLO, GPU-h,
cold starts) is printed too: a change meant to keep results must show the same on both sides.

`--points TRACE:POLICY:KNOB ...` times frontier points instead (scripts/simulator_table.py's preset, SLO and
case windows, seed 0, each in the mode the frontier runs it): a first run on the case's 20-minute quick
window compiles what the point runs, then the best of `--repeat`; the outcome is the point's SLO attainment
and GPU-hours, in full precision.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

CASES = (("azure2023-conv", "detailed"), ("azure2023-conv", "fluid"), ("azure2023-code", "detailed"),
         ("azure2023-code", "fluid"))

# run inside each checkout's process: its own bench_simulator and simulator
CHILD = """
import importlib.util, sys
tree, repeat = sys.argv[1], int(sys.argv[2])
spec = importlib.util.spec_from_file_location("bench_simulator", tree + "/bench/bench_simulator.py")
bs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bs)
import keda_llm.simulator.run as run
assert run.__file__.startswith(tree), f"{run.__file__} is not under {tree}: build its link tree"
for name, mode in CASES:
    tr = bs.load_shipped(name)
    what = bs._one(tr, mode)[1]
    best = min(bs._one(tr, mode)[0] for _ in range(repeat))
    print(f"{name}\\t{mode}\\t{best:.4f}\\t{what}", flush=True)
""".replace("CASES", repr(CASES))


# the same for frontier points (--points)
CHILD_POINTS = """
import sys
tree, repeat, specs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
sys.path.insert(0, tree + "/scripts")
import simulator_table as st
import keda_llm.simulator.run as run
from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.report.frontier_point import run_point
assert run.__file__.startswith(tree), f"{run.__file__} is not under {tree}: build its link tree"
bt = run.Backtest(get_preset(st.PRESET), cold_start="typical", slo=st.SLO)
for spec in specs:
    trace, policy, knob = spec.split(":")
    case = next(c for c in st.CASES if c.trace == trace)
    run_point(st.load(case, True), bt, policy, float(knob))  # compiles what the point runs
    tr = st.load(case, False)
    pts = [run_point(tr, bt, policy, float(knob)) for _ in range(repeat)]
    what = f"{pts[0].attainment!r} SLO, {pts[0].gpu_hours!r} GPU-h"
    print(f"{trace}\t{policy}@{knob} ({bt.resolved_mode(tr)})\t{min(p.cpu_s for p in pts):.4f}\t{what}", flush=True)
"""


def measure(tree: Path, repeat: int, points: list[str] | None = None) -> dict[tuple[str, str], tuple[float, str]]:
    env = dict(os.environ, PYTHONPATH=str(tree / "build" / "linktree"))
    # cwd: not the checkout's root, whose keda_llm/ folder would shadow the link tree (`-c` puts cwd first)
    argv = [sys.executable, "-c", CHILD, str(tree), str(repeat)] if points is None else \
        [sys.executable, "-c", CHILD_POINTS, str(tree), str(repeat), *points]
    proc = subprocess.run(argv, env=env, cwd=tree / "bench", check=False, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"{tree}: {proc.stderr}")
    out = proc.stdout
    rows = {}
    for line in out.splitlines():
        name, mode, cpu, what = line.split("\t")
        rows[(name, mode)] = (float(cpu), what)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "simulator_ab.md"))
    ap.add_argument("--points", nargs="+", metavar="TRACE:POLICY:KNOB",
                    help="time these frontier points (70B TP4, the frontier's windows) instead of ours on 8B")
    args = ap.parse_args()
    best: dict[str, dict[tuple[str, str], tuple[float, str]]] = {"before": {}, "after": {}}
    for r in range(args.rounds):
        for side, tree in (("before", args.before), ("after", args.after)):
            for key, (cpu, what) in measure(tree.resolve(), args.repeat, args.points).items():
                if key not in best[side] or cpu < best[side][key][0]:
                    best[side][key] = (cpu, what)
            print(f"round {r + 1}: {side} done", flush=True)
    what = "policy ours, llama-3.1-8b/h100" if args.points is None else \
        "frontier points (scripts/simulator_table.py: llama-3.1-70b/h100-tp4, its windows, seed 0)"
    lines = [
        "# Simulator speed, before and after",
        "",
        f"`bench/bench_simulator_ab.py`, {what}; best CPU seconds of {args.repeat} runs "
        f"x {args.rounds} alternating rounds per checkout.",
        "",
        "| trace | mode | before CPU s | after CPU s | after / before | outcome before | outcome after |",
        "|---|---|---|---|---|---|---|",
    ]
    for key in best["before"]:
        (b, bw), (a, aw) = best["before"][key], best["after"][key]
        name = f"{key[0]} (1 h)" if args.points is None else key[0]
        lines.append(f"| {name} | {key[1]} | {b:.3f} | {a:.3f} | {a / b:.2f}x | {bw} | {aw} |")
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
