"""What forecasting costs and buys: CPU per decide() hybrid vs reactive, and a backtest of both.

CPU: one model, 3 replicas reporting every second for an hour (tokens policy, the default), so the
history's tiers are full; then decide() is timed in `reactive` and `hybrid` mode, interleaved in
the same run (`time.process_time`, this process only), and the forecast's own steps alone.

Backtest (`--sim`): the simulator's `ours` policy (keda-llm's recommended ScaledObject through the
KEDA+HPA emulator) with `mode: reactive` and with `mode: hybrid` on a window of a shipped trace;
SLO attainment and GPU-hours as the simulator reports them.

    .venv/bin/python bench/bench_forecast.py [--calls 2000] [--sim] [--trace azure2023-conv]
        [--minutes 60] [--preset llama-3.1-8b/h100] [--rate-scale 1] [--out bench/results/forecast.md]
    .venv/bin/python bench/bench_forecast.py --compare azure2023-conv:8,azure2023-code:8,mooncake-conv:4

`--compare` prints one Markdown table per trace: keda-llm's variants (OURS_VARIANTS) and every simulator
baseline (static peak, KEDA queue > 5, GPU-utilization HPA, concurrency target, oracle), simulator mode
`detailed`, typical cold start; bench/results/policy_vs_baselines.md holds them.
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from keda_llm.scaler.config import ScalerConfig, parse_metadata
from keda_llm.scaler.decide import decide
from keda_llm.scaler.forecast import desired_series, forecast
from keda_llm.scaler.history import ModelHistory
from keda_llm.scaler.model import Observation, PolicyState, ReplicaSample, WorkloadState

ROOT = Path(__file__).resolve().parent.parent

HOUR = 3600
REPLICAS = 3


def build_history(seconds: int = HOUR) -> ModelHistory:
    """3 replicas of a vLLM-like engine (KV 100k tokens, batch 256) under a slow wave plus noise."""
    rng = np.random.default_rng(0)
    h = ModelHistory("ns", "m")
    prompt = [0.0] * REPLICAS
    finished = [0.0] * REPLICAS
    for t in range(1, seconds + 1):
        load = 0.5 + 0.3 * np.sin(t / 600.0)
        samples = []
        for i in range(REPLICAS):
            running = max(0.0, 60 * load + rng.normal(0, 5))
            finished[i] += running / 20
            prompt[i] += running / 20 * 800
            samples.append(ReplicaSample(f"p{i}", float(t), running=running, waiting=max(0.0, rng.normal(2, 2)),
                                         max_running=256, kv_usage_ratio=min(1.0, load + rng.normal(0, 0.03)),
                                         kv_capacity_tokens=100_000, prompt_tokens_total=prompt[i],
                                         requests_finished_total=finished[i], startup_seconds=150.0))
        h.ingest(Observation("ns", "m", float(t), tuple(samples)))
    return h


def cpu_per_call(fn: Callable[[], object], calls: int) -> list[float]:
    out = []
    for _ in range(calls):
        start = time.process_time()
        fn()
        out.append(time.process_time() - start)
    return out


def bench_cpu(calls: int) -> list[str]:
    history = build_history()
    now = float(HOUR)
    workload = WorkloadState(REPLICAS, REPLICAS)
    configs = {mode: parse_metadata({"model": "m", "mode": mode}) for mode in ("reactive", "hybrid")}
    state = PolicyState(initialized=True)

    def one(config: ScalerConfig) -> Callable[[], object]:
        return lambda: decide(history, config, state, workload, now)

    snap = history.snapshot(now)
    hybrid_config = configs["hybrid"]
    series = desired_series(history, hybrid_config, snap, now)
    steps: dict[str, Callable[[], object]] = {
        "decide, mode reactive (baseline)": one(configs["reactive"]),
        "decide, mode hybrid": one(hybrid_config),
        "forecast step: desired_series (14 series, policy per bucket)":
            lambda: desired_series(history, hybrid_config, snap, now),
        "forecast step: Holt + hold + bounds": lambda: forecast(*series, now, 195.0, 1.5),
    }
    for fn in steps.values():  # warm-up
        cpu_per_call(fn, 50)
    samples: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(10):  # interleaved rounds: drift on a shared machine hits every step alike
        for name, fn in steps.items():
            samples[name] += cpu_per_call(fn, calls // 10)
    med = {name: statistics.median(v) * 1e6 for name, v in samples.items()}
    p90 = {name: float(np.percentile(v, 90)) * 1e6 for name, v in samples.items()}
    d, _ = decide(history, hybrid_config, state, workload, now)
    lines = [
        "## CPU per decide()", "",
        f"One model, {REPLICAS} replicas reporting every second for 1 h (tokens policy), {calls} calls per row, "
        "rows interleaved in 10 rounds; `time.process_time` of this process, microseconds.",
        f"Forecast at the timed call: {d.details['forecast_points']:.0f} buckets, horizon "
        f"{d.details['forecast_horizon_s']:.0f} s, forecast desired {d.details['forecast_desired_raw']:.2f} "
        f"(windows: {d.details['desired_stable_raw']:.2f}).", "",
        "| step | median CPU us | p90 CPU us |", "|---|---:|---:|",
    ]
    lines += [f"| {name} | {med[name]:.0f} | {p90[name]:.0f} |" for name in steps]
    ratio = med["decide, mode hybrid"] / med["decide, mode reactive (baseline)"]
    lines += ["", f"hybrid / reactive: {ratio:.1f}x CPU per decide() (same run)."]
    return lines


def bench_sim(trace_name: str, minutes: float, preset_name: str, rate_scale: float) -> list[str]:
    from keda_llm.simulator.control.policies import OursController, build_controller, default_scaledobject
    from keda_llm.simulator.hardware.presets import PRESETS
    from keda_llm.simulator.report.summary import Slo, summarize
    from keda_llm.simulator.run import Backtest, concurrency_target, simulate
    from keda_llm.simulator.workload.traces import load_shipped

    trace = load_shipped(trace_name).window(0.0, minutes * 60.0)
    if rate_scale != 1.0:
        trace = trace.scale_rate(rate_scale)
    preset = PRESETS[preset_name]
    backtest = Backtest(preset=preset)
    cold = preset.cold_start(backtest.cold_start)
    mode_sim = backtest.resolved_mode(trace)
    target = concurrency_target(trace, backtest)
    policies = {"tokens": {}, "concurrency": {"policy": "concurrency", "targetConcurrency": f"{target:g}"}}
    rows = []
    for policy, extra in policies.items():
        for mode in ("reactive", "hybrid"):
            so = default_scaledobject(preset.model.name, max_replicas=backtest.max_replicas,
                                      cold_start_s=cold.quantile(0.9))
            trig = so.triggers[0]
            so = dataclasses.replace(so, name=f"ours-{mode}", triggers=(
                dataclasses.replace(trig, metadata={**trig.metadata, **extra, "mode": mode}),))
            ctl = OursController(f"ours-{mode}", so, initial_replicas=max(1, so.min_replicas))
            start = time.process_time()
            s = summarize(simulate(trace, backtest, ctl, mode_sim), Slo())
            rows.append(f"| {policy} | {mode} | {s.slo_attainment * 100:.2f}% | {s.gpu_hours:.2f} | "
                        f"{s.ttft_p90_s:.2f} | {s.ttft_p99_s:.2f} | {s.scale_events} | {s.cold_starts} | "
                        f"{time.process_time() - start:.0f} |")
            print(rows[-1], file=sys.stderr)
    base = build_controller("concurrency", model=preset.model.name, max_replicas=backtest.max_replicas,
                            concurrency_target=target, static_replicas=1)
    start = time.process_time()
    s = summarize(simulate(trace, backtest, base, mode_sim), Slo())
    rows.append(f"| (baseline: KEDA on running+waiting, HPA defaults) | - | {s.slo_attainment * 100:.2f}% | "
                f"{s.gpu_hours:.2f} | {s.ttft_p90_s:.2f} | {s.ttft_p99_s:.2f} | {s.scale_events} | {s.cold_starts} | "
                f"{time.process_time() - start:.0f} |")
    return [
        "## Backtest: reactive vs hybrid", "",
        f"Trace `{trace_name}`, first {minutes:g} min, rate x{rate_scale:g} ({len(trace)} requests), "
        f"preset `{preset.name}`, cold start "
        f"`{backtest.cold_start}` (p90 {cold.quantile(0.9):.0f} s, passed as `coldStart`), simulator mode "
        f"`{mode_sim}`, SLO TTFT {Slo().ttft_s:g} s / ITL {Slo().itl_s:g} s; the recommended ScaledObject "
        "(`simulator.control.policies.default_scaledobject`) with only `mode` changed; `concurrency` rows also set "
        f"`policy: concurrency`, `targetConcurrency: {target:g}` (the simulator's concurrency baseline target: 70% "
        "of the largest batch that meets the ITL SLO).", "",
        "| policy | mode | SLO attainment | GPU-hours | TTFT p90 s | TTFT p99 s | scale events | cold starts | "
        "sim CPU s |", "|---|---|---:|---:|---:|---:|---:|---:|---:|", *rows,
    ]


#: keda-llm rows of the comparison: (label, metadata over the recommended ScaledObject's)
OURS_VARIANTS: tuple[tuple[str, dict[str, str]], ...] = (
    ("ours: tokens, reactive, no delay (the old default)", {"mode": "reactive", "scaleDownDelay": "0s"}),
    ("ours: tokens, hybrid, no delay", {"mode": "hybrid", "scaleDownDelay": "0s"}),
    ("ours: tokens, reactive, scaleDownDelay = coldStart", {"mode": "reactive"}),
    ("**ours: tokens, hybrid, scaleDownDelay = coldStart (the new default)**", {"mode": "hybrid"}),
)
BASELINES = ("static", "queue", "gpu", "concurrency", "oracle")


def compare(trace_name: str, rate_scale: float, minutes: float, preset_name: str) -> list[str]:
    """keda-llm's variants and every simulator baseline on one trace window; one Markdown table."""
    from keda_llm.simulator.control.policies import OursController, default_scaledobject
    from keda_llm.simulator.hardware.presets import PRESETS
    from keda_llm.simulator.report.summary import Slo, Summary, summarize, with_oracle_ratio
    from keda_llm.simulator.run import Backtest, run_policies, simulate
    from keda_llm.simulator.workload.traces import load_shipped

    trace = load_shipped(trace_name).window(0.0, minutes * 60.0)
    if rate_scale != 1.0:
        trace = trace.scale_rate(rate_scale)
    preset = PRESETS[preset_name]
    backtest = Backtest(preset=preset, mode="detailed")
    cold = preset.cold_start(backtest.cold_start)
    summaries: list[tuple[str, Summary]] = []
    for label, extra in OURS_VARIANTS:
        so = default_scaledobject(preset.model.name, max_replicas=backtest.max_replicas,
                                  cold_start_s=cold.quantile(0.9))
        trig = so.triggers[0]
        so = dataclasses.replace(so, triggers=(dataclasses.replace(trig, metadata={**trig.metadata, **extra}),))
        s = summarize(simulate(trace, backtest, OursController("ours", so), "detailed"), Slo())
        summaries.append((label, s))
        print(trace_name, label, f"{s.slo_attainment:.4f}", f"{s.gpu_hours:.2f}", file=sys.stderr, flush=True)
    results, _ = run_policies(trace, backtest, BASELINES)
    for r in results:
        summaries.append((r.policy, summarize(r, Slo())))
        print(trace_name, r.policy, f"{summaries[-1][1].slo_attainment:.4f}", file=sys.stderr, flush=True)
    ratios = with_oracle_ratio([s for _, s in summaries])
    rows = [f"| {label} | {s.slo_attainment * 100:.1f}% | {s.gpu_hours:.2f} | {s.gpu_hours_vs_oracle or 0:.2f}x | "
            f"{s.ttft_p90_s:.1f} | {s.ttft_p99_s:.1f} | {s.scale_events} | {s.cold_starts} |"
            for (label, _), s in zip(summaries, ratios, strict=True)]
    return [
        f"### `{trace_name}`, first {minutes:g} min, rate x{rate_scale:g} ({len(trace)} requests)", "",
        "| policy | SLO attainment | GPU-hours | / oracle | TTFT p90 s | TTFT p99 s | scale events | cold starts |",
        "|---|---:|---:|---:|---:|---:|---:|---:|", *rows,
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--sim", action="store_true", help="also backtest reactive vs hybrid in the simulator")
    ap.add_argument("--trace", default="azure2023-conv")
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--preset", default="llama-3.1-8b/h100")
    ap.add_argument("--rate-scale", type=float, default=1.0, help="multiply the trace's request rate")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "forecast.md")
    ap.add_argument("--compare", default=None, metavar="TRACE:RATE,...",
                    help="instead: keda-llm's variants against every simulator baseline on these traces")
    args = ap.parse_args()
    if args.compare:
        for item in args.compare.split(","):
            name, _, rate = item.partition(":")
            print("\n".join(compare(name, float(rate or 1), args.minutes, args.preset)) + "\n", flush=True)
        return
    lines = ["# Forecasting: cost and effect", "",
             f"`bench/bench_forecast.py`; Python {platform.python_version()} on {platform.machine()}, "
             "2 CPUs (shared).", ""]
    lines += bench_cpu(args.calls)
    if args.sim:
        lines += ["", *bench_sim(args.trace, args.minutes, args.preset, args.rate_scale)]
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
