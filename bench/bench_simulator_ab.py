"""The simulator's speed on two checkouts in the same run: a change's cost as a ratio, not a stale figure.

    python bench/bench_simulator_ab.py BEFORE AFTER [--rounds 2] [--repeat 3] [--out bench/results/simulator_ab.md]

BEFORE and AFTER are checkouts of this repository (e.g. a `git worktree` of main and the branch), each with
its link tree built (`python scripts/linktree.py` in it). Each round runs, in a fresh process per checkout
(its own PYTHONPATH), bench_simulator.py's `_one` (policy ours, preset llama-3.1-8b/h100) on the two
one-hour Azure 2023 traces in both modes: one warm-up run, then the best of `--repeat` CPU seconds
(time.process_time). The checkouts alternate round by round so that load on the shared machine falls on
both; the table gives each checkout's best over the rounds and AFTER / BEFORE. The outcome line (SLO, GPU-h,
cold starts) is printed too: a change meant to keep results must show the same on both sides.
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


def measure(tree: Path, repeat: int) -> dict[tuple[str, str], tuple[float, str]]:
    env = dict(os.environ, PYTHONPATH=str(tree / "build" / "linktree"))
    # cwd: not the checkout's root, whose keda_llm/ folder would shadow the link tree (`-c` puts cwd first)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tree), str(repeat)], env=env, cwd=tree / "bench",
                          check=False, capture_output=True, text=True)
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
    args = ap.parse_args()
    best: dict[str, dict[tuple[str, str], tuple[float, str]]] = {"before": {}, "after": {}}
    for r in range(args.rounds):
        for side, tree in (("before", args.before), ("after", args.after)):
            for key, (cpu, what) in measure(tree.resolve(), args.repeat).items():
                if key not in best[side] or cpu < best[side][key][0]:
                    best[side][key] = (cpu, what)
            print(f"round {r + 1}: {side} done", flush=True)
    lines = [
        "# Simulator speed, before and after",
        "",
        f"`bench/bench_simulator_ab.py`, policy ours, llama-3.1-8b/h100; best CPU seconds of {args.repeat} runs "
        f"x {args.rounds} alternating rounds per checkout.",
        "",
        "| trace | mode | before CPU s | after CPU s | after / before | outcome before | outcome after |",
        "|---|---|---|---|---|---|---|",
    ]
    for key in CASES:
        (b, bw), (a, aw) = best["before"][key], best["after"][key]
        lines.append(f"| {key[0]} (1 h) | {key[1]} | {b:.3f} | {a:.3f} | {a / b:.2f}x | {bw} | {aw} |")
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
