"""What the short-answer rule (`shortOutputTokens`, scaler/slo.py `short_output_factor`) costs per decide().

One model, 3 replicas reporting every second for an hour (bench_forecast's history: its mix is unknown, so
the factor stays 1, but the window is read all the same), `targetInterTokenLatency` set; decide() timed with
the rule off (`shortOutputTokens: 0`) and on (the default), interleaved in the same run, CPU time of this
process (`time.process_time`). The rule reads one more window of history (the last 10 minutes) per decision.

    .venv/bin/python bench/bench_short_output.py [--calls 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench_forecast import HOUR, REPLICAS, build_history  # bench/ is the script's own folder

from keda_llm.scaler.config import parse_metadata
from keda_llm.scaler.decide import decide
from keda_llm.scaler.model import PolicyState, WorkloadState


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    h = build_history()
    work = WorkloadState(current_replicas=REPLICAS, ready_replicas=REPLICAS, min_replicas=1)
    base = {"model": "m", "coldStart": "258s", "targetInterTokenLatency": "50ms"}
    configs = {"off": parse_metadata({**base, "shortOutputTokens": "0"}), "on": parse_metadata(base)}
    state = PolicyState(initialized=True)
    took: dict[str, list[float]] = {k: [] for k in configs}
    for i in range(args.calls):
        for name, cfg in configs.items():
            t0 = time.process_time()
            decide(h, cfg, state, work, float(HOUR) + i * 1e-3)
            took[name].append(time.process_time() - t0)
    off, on = (statistics.mean(took[k]) * 1e6 for k in ("off", "on"))
    print(f"decide() CPU per call over {args.calls} calls: rule off {off:.0f} us, on {on:.0f} us ({on / off:.2f}x)")


if __name__ == "__main__":
    main()
