"""The simulator's gateway before/after a change: CPU seconds and an outcome fingerprint per run.

    .venv/bin/python bench/bench_gateway.py [--traces azure2023-code/20,azure2023-code,azure2023-conv] [--repeat 3]

Run it on two checkouts (e.g. main and a branch, each on its own PYTHONPATH) and compare: the fingerprint
(a hash of every request's TTFT and TPOT) must match where the rules agree, and the CPU seconds (best of
`--repeat`, time.process_time) say what the change costs. `NAME/20` keeps every 20th request of a shipped
one-hour trace, so `ours-zero` reaches zero and the gateway holds requests. Policies: ours, ours-zero;
modes: detailed and fluid; preset llama-3.1-8b/h100.
"""

from __future__ import annotations

import argparse
import hashlib
import time

import numpy as np

from keda_llm.simulator.control.policies import build_controller
from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.report.summary import summarize
from keda_llm.simulator.run import Backtest, simulate
from keda_llm.simulator.workload.traces import Trace, load_shipped


def trace(name: str) -> Trace:
    base, _, every = name.partition("/")
    tr = load_shipped(base)
    if not every:
        return tr
    k = int(every)
    return Trace(name, tr.arrival_s[::k].copy(), tr.prompt_tokens[::k].copy(), tr.output_tokens[::k].copy())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", default="azure2023-code/20,azure2023-code,azure2023-conv")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"| trace | mode | policy | CPU s (best of {args.repeat}) | SLO met | GPU-h | cold starts | max held "
          "| fingerprint |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.traces.split(","):
        tr = trace(name)
        for mode in ("detailed", "fluid"):
            for policy in ("ours", "ours-zero"):
                best = float("inf")
                for _ in range(args.repeat):
                    bt = Backtest(get_preset("llama-3.1-8b/h100"))
                    ctl = build_controller(policy, model="m", max_replicas=64, concurrency_target=64,
                                           static_replicas=4)
                    t0 = time.process_time()
                    res = simulate(tr, bt, ctl, mode)  # type: ignore[arg-type]
                    best = min(best, time.process_time() - t0)
                s = summarize(res, bt.slo)
                tab = res.request_table()
                h = hashlib.sha256(np.round(tab.ttft_s, 9).tobytes()
                                   + np.round(np.nan_to_num(tab.tpot_s), 9).tobytes()).hexdigest()[:12]
                print(f"| {name} | {mode} | {policy} | {best:.2f} | {100 * s.slo_attainment:.3f}% | "
                      f"{s.gpu_hours:.3f} | {s.cold_starts} | {max(res.timeline.gateway or [0])} | {h} |", flush=True)


if __name__ == "__main__":
    main()
