"""What Dynamo's predictors cost per interval in the simulator's `dynamo-sla*` anchors (simulator/control/anchors/
dynamo.py), on a shipped trace's own series: its request count per 180 s interval, fed one interval at a time,
each followed by a forecast, as the planner does every throughput interval (it runs three: requests, mean
ISL and mean OSL, so a simulated interval costs three times the figure).

Each predictor runs the whole series in turn in this process; CPU is this process's plus its children's
(Prophet optimizes in a cmdstan subprocess), `resource.getrusage`. The baseline measured in the same run is
the Kalman filter, the frontier's default predictor. ARIMA fits once and then updates, so its cost per
interval falls with the series' length; Prophet refits every interval on its last 50.

    .venv/bin/python bench/bench_dynamo_predictors.py [--trace azure2023-conv] [--intervals N]
"""

from __future__ import annotations

import argparse
import resource

import numpy as np

from keda_llm.simulator.control.anchors.dynamo import PREDICTORS, THROUGHPUT_INTERVAL_S
from keda_llm.simulator.workload.traces import load_shipped


def cpu_s() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def series(trace: str, intervals: int | None) -> list[float]:
    """Requests per throughput interval over the trace, repeated to `intervals` where that is longer."""
    arr = load_shipped(trace).arrival_s
    edges = np.arange(0.0, float(arr[-1]) + THROUGHPUT_INTERVAL_S, THROUGHPUT_INTERVAL_S)
    counts = np.histogram(arr, bins=edges)[0].astype(float)
    n = intervals or counts.size
    return [float(v) for v in np.resize(counts, n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", default="azure2023-conv")
    ap.add_argument("--intervals", type=int, default=None, help="repeat the trace's series to this many intervals")
    args = ap.parse_args()
    values = series(args.trace, args.intervals)
    print(f"{args.trace}: {len(values)} intervals of {THROUGHPUT_INTERVAL_S:g} s")
    base = None
    for name, make in PREDICTORS.items():
        try:
            p = make()
        except ValueError as e:
            print(f"{name:9s} skipped: {e}")
            continue
        t0 = cpu_s()
        for v in values:
            p.add(v)
            p.predict()
        per = (cpu_s() - t0) / len(values)
        base = per if name == "kalman" else base
        ratio = f"{per / base:,.0f}x Kalman" if base and name != "kalman" else ""
        print(f"{name:9s} {1000 * per:9.3f} CPU ms per interval  {ratio}", flush=True)


if __name__ == "__main__":
    main()
