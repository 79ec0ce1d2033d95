"""What warmWindows cost a decision: CPU per decide() with and without windows, interleaved in one run.

The scaler decides every ScaledObject about once a second, so the windows' step (scaler/schedule.py: find
the latest start at or before now + lead, then its end) is paid per decision. One model, 3 replicas
reporting every second for an hour (bench_forecast's history, `mode: reactive` so the baseline is the
cheapest decide), at 1970-01-01 01:00Z (each call a different second of the next 20, so that none
reuses what the history memoized for the call before); `time.process_time` of this process, calls
interleaved round-robin so load on the shared machine hits every variant alike.

- none: no warmWindows (the baseline);
- example: deploy/examples/warm-windows.yaml's two windows (weekday office hours with an end cron, a
  Monday launch with a duration), in Europe/Berlin;
- 16: the most windows the key accepts, each a weekday start with an every-5-minutes end, in
  America/New_York;
- leap day: one window that fires only on 29 February (the longest search: back to the last leap year).

A second table times the windows' step alone (`warm_floor`) for the 16 windows on an ordinary day and in
New York's repeated hour (1 November 2026, 01:30 EST): a day with a clock change lists its fire instants
(each wildcard cron's repeated times twice), once per cron and day (cached), instead of the arithmetic.

    python bench/bench_schedule.py [--calls 3000] [--out bench/results/schedule.md]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import yaml
from bench_forecast import HOUR, REPLICAS, build_history

from keda_llm.scaler.config import parse_metadata
from keda_llm.scaler.decide import decide
from keda_llm.scaler.model import PolicyState, WorkloadState
from keda_llm.scaler.schedule import warm_floor

ROOT = Path(__file__).resolve().parent.parent


def example_windows() -> str:
    doc = yaml.safe_load((ROOT / "deploy" / "examples" / "warm-windows.yaml").read_text())
    return str(doc["spec"]["triggers"][0]["metadata"]["warmWindows"])


VARIANTS = {
    "none": None,
    "example (2 windows)": example_windows(),
    "16 windows": "\n".join(f"- {{start: '{3 * i} {i} * * MON-FRI', end: '*/5 * * * *', timezone: America/New_York, "
                            "desiredReplicas: 3}" for i in range(16)),
    "leap day (1 window)": "[{start: '0 9 29 2 *', duration: 1h, timezone: UTC, desiredReplicas: 2}]",
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "schedule.md")
    args = ap.parse_args()
    history = build_history()
    now = float(HOUR)
    workload = WorkloadState(REPLICAS, REPLICAS)
    configs = {name: parse_metadata({"model": "m", "mode": "reactive",
                                     **({"warmWindows": w} if w is not None else {})})
               for name, w in VARIANTS.items()}
    state = PolicyState(initialized=True)
    samples: dict[str, list[float]] = {name: [] for name in configs}
    for i in range(args.calls):
        for j, (name, cfg) in enumerate(configs.items()):
            # each call at another second: the history memoizes its windows per `now`, so a variant that
            # followed another at the same second would skip the work the first one paid
            at = now + (i * len(configs) + j) % 20
            start = time.process_time()
            decide(history, cfg, state, workload, at)
            samples[name].append(time.process_time() - start)
    base = statistics.median(samples["none"])
    rows = ["| warmWindows | decide() CPU median | p90 | vs none |", "|---|---|---|---|"]
    for name, xs in samples.items():
        med = statistics.median(xs)
        p90 = statistics.quantiles(xs, n=10)[-1]
        rows.append(f"| {name} | {med * 1e6:.0f} us | {p90 * 1e6:.0f} us | {med / base:.2f}x |")
    windows = configs["16 windows"].warm_windows
    instants = {"ordinary day (2026-11-03 06:30Z)": 1793687400.0, "repeated hour (2026-11-01 06:30Z)": 1793514600.0}
    floor_samples: dict[str, list[float]] = {name: [] for name in instants}
    for _ in range(args.calls):
        for name, at in instants.items():
            start = time.process_time()
            warm_floor(windows, at, 600.0, {})
            floor_samples[name].append(time.process_time() - start)
    first = statistics.median(floor_samples[next(iter(instants))])
    rows += ["", "| 16 windows, warm_floor() alone | CPU median | p90 | vs ordinary day |", "|---|---|---|---|"]
    for name, xs in floor_samples.items():
        med = statistics.median(xs)
        rows.append(f"| {name} | {med * 1e6:.0f} us | {statistics.quantiles(xs, n=10)[-1] * 1e6:.0f} us | "
                    f"{med / first:.2f}x |")
    text = "\n".join([
        "# warmWindows: CPU per decide()", "",
        f"`python bench/bench_schedule.py --calls {args.calls}`; Python {platform.python_version()}, "
        f"{platform.machine()}, {time.strftime('%Y-%m-%d', time.gmtime())}. Interleaved in one run; "
        "process CPU time.", "", *rows, ""])
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
