"""CPU of the degraded-replica rule in decide(): rules on (the defaults) against both rules off, same run.

Run: .venv/bin/python bench/bench_degraded.py [--replicas 8 64] [--calls 2000]

One model, each replica ingested for 10 minutes at 1 s (rings full), one of them throttled and one slow,
so the rule reads every replica's window and finds two degraded. decide() is timed (time.process_time)
with degradedFraction/slowReplicaRatio at their defaults and with both off (degradedFraction 1,
slowReplicaRatio 0: decide then reads no replica window); the difference is the rule's cost.
"""

from __future__ import annotations

import argparse
import time

from keda_llm.scaler.config import parse_metadata
from keda_llm.scaler.decide import decide
from keda_llm.scaler.history import ModelHistory
from keda_llm.scaler.model import Observation, PolicyState, ReplicaSample, WorkloadState


def history(replicas: int) -> ModelHistory:
    h = ModelHistory("bench", "m")
    for t in range(1, 601):
        h.ingest(Observation("bench", "m", float(t), tuple(
            ReplicaSample(f"m-{i}", float(t), running=8.0, waiting=1.0, max_running=64.0, kv_usage_ratio=0.5,
                          kv_capacity_tokens=200_000.0, generation_tokens_total=(100.0 if i == 1 else 300.0) * t,
                          degraded=("gpu_throttled",) if i == 0 else ())
            for i in range(replicas))))
    return h


def per_call_us(h: ModelHistory, meta: dict[str, str], replicas: int, calls: int) -> float:
    config = parse_metadata(meta)
    workload = WorkloadState(replicas, replicas)
    state = PolicyState()
    t0 = time.process_time()
    for k in range(calls):
        _, state = decide(h, config, state, workload, 600.0 + k * 1e-3)
    return (time.process_time() - t0) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, nargs="+", default=[8, 64])
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    base = {"model": "m", "mode": "reactive"}
    print("| replicas | decide, rules off | decide, rules on | added by the rule |")
    print("|---|---|---|---|")
    for n in args.replicas:
        h = history(n)
        off = per_call_us(h, {**base, "degradedFraction": "1", "slowReplicaRatio": "0"}, n, args.calls)
        on = per_call_us(h, base, n, args.calls)
        print(f"| {n} | {off:.0f} us | {on:.0f} us | +{on - off:.0f} us ({on / off:.2f}x) |", flush=True)


if __name__ == "__main__":
    main()
