"""Regenerate every generated table and plot in docs/simulator-results.md (and the backtest docs beside it) in
one command, in the order they depend on nothing but the code:

    python scripts/regenerate_docs.py [--quick] [--workers N]

1. scripts/week_table.py --update-docs: the whole 2024 week, 3 seeds, tuning vs held-back days, ours beside
   hybrid (week_table.DOCS_POLICIES) and the lower bound (about 35 CPU minutes once the oracles are cached);
   then --trace conv: the conversation week no default was tuned on, one process (an oracle there holds
   14-16 GB);
2. scripts/simulator_table.py --frontier --update-docs: the cost to reach 99% per policy, with plots
   (--quick: the first 20 minutes of each trace, 3 points per policy), and each trace's oracle planned on
   from the policies' cheaper schedules; then --loo --update-docs: leave one trace out, from the frontier's
   points cache;
3. scripts/simulator_table.py --update-docs: the backtest table (every trace, every baseline, the oracle
   the frontier kept, replayed); then scripts/phase_table.py --update-docs: ours' default over the control
   loop's phase (the arrivals shifted by seconds), against the same oracles; then scripts/preset_table.py
   --update-docs: the default's ITL share on 8B H100 and A100 beside 70B, against each preset's oracle and
   its perfectly informed reactive schedule;
4. scripts/pools_table.py --update-docs (docs/pools.md) and scripts/degraded_backtest.py --update-docs
   (docs/degraded.md), then its KV-bound world (--preset llama-3.1-8b/l4 --trace azure2023-code).
Not run by CI: the whole takes CPU hours (what does not move is read from docs/data/:
the frontier's points and the week's oracles, committed). Each step
is its own process, so one failing stops the rest with its exit status.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent


def steps(quick: bool, workers: int) -> list[list[str]]:
    """Each step's argv; `quick` runs each script's short form and writes no docs."""
    q = ["--quick"] if quick else ["--update-docs"]
    w = ["--workers", str(workers)]
    week = ["--hours", "6", "--seeds", "0"] if quick else ["--update-docs"]
    return [
        ["week_table.py", *w, *week],
        ["week_table.py", "--trace", "conv", "--workers", "1", *week],
        ["simulator_table.py", "--frontier", *w, *q],
        # against the frontier's oracles, so after them; quick: one trace, two holds, its oracle planned afresh
        ["reactive_reference.py", *w,
         *(["--traces", "azure2023-code", "--holds", "0,4"] if quick else ["--update-docs"])],
        ["simulator_table.py", "--loo", *w, *q],
        ["simulator_table.py", *q],
        ["phase_table.py", *w, *q],
        ["preset_table.py", *w, *q],
        ["pools_table.py", *q],
        ["degraded_backtest.py", *q],
        ["degraded_backtest.py", "--preset", "llama-3.1-8b/l4", "--trace", "azure2023-code", *q],
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="each step's quick form, writing no docs: checks the scripts, not the figures")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    for step in steps(args.quick, args.workers):
        print("==> " + " ".join(step), flush=True)
        done = subprocess.run([sys.executable, str(SCRIPTS / step[0]), *step[1:]], check=False)
        if done.returncode != 0:
            raise SystemExit(done.returncode)


if __name__ == "__main__":
    main()
