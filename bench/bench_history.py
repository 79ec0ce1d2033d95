"""Memory and CPU of the scaler's per-model history and decide(): 1,000 models, every ring filled.

Run: .venv/bin/python bench/bench_history.py [--models 1000] [--out bench/results/history.md]

Each model gets 3 replicas and enough observations to touch every bucket of every tier (the rings
are fixed-size, so a full rotation costs what an hour or a week costs). Reported:
- bytes per model held in arrays (ModelHistory.nbytes) and the process RSS growth per model;
- the same data kept naively (one ReplicaSample per replica per second for an hour, in lists),
  measured on a few models in the same run: the baseline the ring buffers are compared with;
- CPU per ingest and per decide (time.process_time), against the CPU of building the Observation
  itself (the baseline: what the collector spends anyway).
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import time
from pathlib import Path

from keda_llm.scaler.config import ScalerConfig, parse_metadata
from keda_llm.scaler.decide import decide
from keda_llm.scaler.history import ModelHistory
from keda_llm.scaler.model import Observation, PolicyState, ReplicaSample, WorkloadState

REPLICAS = 3


def rss_bytes() -> int:
    """Current resident set size (Linux /proc), else the peak from getrusage."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def times() -> list[float]:
    """Collection times that touch every bucket: 60 s tier, then 10 s, then the 1 s tier."""
    return ([float(t) for t in range(0, 4500, 30)] + [float(t) for t in range(4500, 5400, 5)]
            + [float(t) for t in range(5400, 5701)])


def observation(model: str, t: float) -> Observation:
    reps = tuple(
        ReplicaSample(f"{model}-{i}", t, running=8.0 + i, waiting=float(i), max_running=64.0, kv_usage_ratio=0.5,
                      kv_capacity_tokens=200_000.0, prompt_tokens_total=1000.0 * t, generation_tokens_total=300.0 * t,
                      requests_finished_total=2.0 * t, startup_seconds=120.0, ttft_sum=0.4 * t, ttft_count=2.0 * t,
                      itl_sum=0.03 * 150.0 * t, itl_count=150.0 * t)
        for i in range(REPLICAS)
    )
    return Observation("bench", model, t, reps)


def naive_bytes_per_model(n_models: int = 5) -> float:
    """Baseline: an hour of per-second ReplicaSamples per replica, in plain lists."""
    gc.collect()
    before = rss_bytes()
    keep = []
    for m in range(n_models):
        keep.append([[ReplicaSample(f"n{m}-{i}", float(t), running=8.0 + t % 7, waiting=float(t % 3),
                                    max_running=64.0, kv_usage_ratio=0.5 + (t % 10) / 100,
                                    kv_capacity_tokens=200_000.0, prompt_tokens_total=1000.0 * t,
                                    generation_tokens_total=300.0 * t, requests_finished_total=2.0 * t)
                      for t in range(3600)] for i in range(REPLICAS)])
    grown = rss_bytes() - before
    del keep
    return grown / n_models


def decide_cpu_per_call(histories: list[ModelHistory], config: ScalerConfig, workload: WorkloadState,
                        now: float) -> float:
    """CPU seconds per decide(), the best of three passes over every history (the machine is shared). Each
    pass decides at its own `now`: a history keeps a decision's reads for one `now`, so a repeated one would
    time kept answers, not decisions."""
    passes = []
    for k in range(3):
        c0 = time.process_time()
        for h in histories:
            decide(h, config, PolicyState(), workload, now + k * 1e-3)
        passes.append((time.process_time() - c0) / len(histories))
    return min(passes)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=Path("bench/results/history.md"))
    args = ap.parse_args()
    ts = times()

    gc.collect()
    rss0 = rss_bytes()
    histories = [ModelHistory("bench", f"m{i}") for i in range(args.models)]
    ingest_cpu = build_cpu_total = 0.0
    n_ingest = 0
    for i, h in enumerate(histories):
        c0 = time.process_time()
        obs = [observation(f"m{i}", t) for t in ts]  # baseline: what the collector spends anyway
        build_cpu_total += time.process_time() - c0
        c0 = time.process_time()
        for o in obs:
            h.ingest(o)
        ingest_cpu += time.process_time() - c0
        n_ingest += len(obs)
    gc.collect()
    rss_grown = rss_bytes() - rss0
    array_bytes = sum(h.nbytes() for h in histories) / len(histories)

    config = parse_metadata({"model": "m"})
    workload = WorkloadState(current_replicas=REPLICAS, ready_replicas=REPLICAS)
    now = ts[-1]
    build_cpu = build_cpu_total / n_ingest
    decide_cpu = decide_cpu_per_call(histories, config, workload, now)
    # the shipped ScaledObject's latency targets: the term reads the stable, panic and mix windows and every
    # replica's stable and panic windows on top of the policy's (deploy/examples/keda-2.18/llama-70b-h100-tp4.yaml)
    latency = parse_metadata({"model": "m", "targetTimeToFirstToken": "1s", "targetInterTokenLatency": "0.05s"})
    latency_cpu = decide_cpu_per_call(histories, latency, workload, now + 0.01)

    naive = naive_bytes_per_model()
    per_model_rss = rss_grown / args.models
    rows = [
        ("models x replicas", f"{args.models} x {REPLICAS}"),
        ("observations per model (every bucket of every tier touched)", f"{len(ts)}"),
        ("array bytes per model (ModelHistory.nbytes)", f"{array_bytes / 1024:.1f} KiB"),
        ("RSS growth per model (arrays + Python objects)", f"{per_model_rss / 1024:.1f} KiB"),
        (f"RSS growth, all {args.models} models", f"{rss_grown / 2**20:.1f} MiB"),
        ("baseline: 1 h of per-second ReplicaSamples in lists, per model", f"{naive / 1024:.0f} KiB"),
        ("ratio history / baseline (memory)", f"{per_model_rss / naive:.3f}"),
        ("ingest CPU per observation", f"{ingest_cpu / n_ingest * 1e6:.1f} us"),
        ("baseline: building that Observation", f"{build_cpu * 1e6:.1f} us"),
        ("ratio ingest / build (CPU)", f"{ingest_cpu / n_ingest / build_cpu:.2f}"),
        ("decide CPU per call (tokens policy, 3 replicas, best of 3 passes)", f"{decide_cpu * 1e6:.1f} us"),
        ("the same with the shipped latency targets (TTFT 1 s, ITL 0.05 s)", f"{latency_cpu * 1e6:.1f} us"),
    ]
    text = ("# History and decide: memory and CPU\n\n"
            f"`bench/bench_history.py --models {args.models}`, Python {sys.version.split()[0]}, "
            f"{time.strftime('%Y-%m-%d')}. CPU time is process time.\n\n"
            "| measure | value |\n|---|---|\n" + "".join(f"| {k} | {v} |\n" for k, v in rows))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
