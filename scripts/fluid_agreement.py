"""Fluid vs detailed, the full matrix: every policy of the docs table on every preset and trace window.

    .venv/bin/python scripts/fluid_agreement.py [--presets P,...] [--traces T,...] [--policies ...]
        [--minutes M] [--shifts N [--spread S]] [--jobs J] [--json FILE]
    .venv/bin/python scripts/fluid_agreement.py --physics [--jobs J]
    .venv/bin/python scripts/fluid_agreement.py --replica [--presets P,...] [--jobs J]

For each preset and trace window it plans the oracle once (in the fluid mode; `static` is its peak, kept
all the time, as in run_policies), then runs each policy in both modes and prints fluid minus detailed:
GPU-hours relative (target: within 5%) and SLO attainment in points (target: within 1). The oracle row
replays the one planned schedule in both modes, so it compares the modes, not two plans.

Trace windows: the one-hour Azure 2023 code and conversation traces, and the busiest hour of the Azure
2024 code week (by request count, rolling by the minute; `peak_hour`). `--minutes` cuts every window to
its first M minutes (the peak hour to its busiest M minutes). `--shifts N` also runs each case with the
arrivals shifted by 0.5, 1.0, ... s against the control loop's phase and reports the detailed mode's own
spread: where that spread is wider than the tolerance the single run is not determined within it, and the
means are what the modes must agree on. Where a policy's runs split into two branches (queue on 70B's busiest
hour: about 250 or 390-437 GPU-h, by where a drain ends against the HPA's sync), six shifts cannot tell the
modes apart: `--shifts 48 --spread 15` puts each mean within about 3%. `--physics` instead runs replica
physics alone: fixed replica counts from the start (PHYSICS_CASES), no control loop, so nothing is
path-bound, and prints fluid minus detailed
mean TPOT (over requests) and SLO attainment. `--replica` runs one static replica per preset under 300 s of
synthetic traffic (REPLICA_LOADS: lognormal prompts and answers, from short prompts to ones near an L4's
whole cache, each at four rates from light to four times overloaded) and prints both modes' mean TPOT,
mean TTFT, preemptions and prompt tokens computed over the trace's (recomputation after preemption
included): the engine at the edge of its KV cache, where the shipped traces rarely take it. Not run by
CI (tests/simulator/test_sim_fluid.py holds a short window per preset); results are in
docs/simulator-results.md, "Fluid vs detailed".
"""

from __future__ import annotations

import argparse
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np

from keda_llm.simulator.cluster.engine import GAUGE_TIMINGS, Controller, GaugeTiming
from keda_llm.simulator.control.anchors import AnchorContext
from keda_llm.simulator.control.controllers import PodPlan, ScheduleController
from keda_llm.simulator.control.policies import build_controller
from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.report.oracle import OraclePlan, plan_oracle
from keda_llm.simulator.report.summary import Slo, summarize
from keda_llm.simulator.run import Backtest, concurrency_target, simulate
from keda_llm.simulator.workload.traces import Trace, load_shipped

SLO = Slo(ttft_s=2.0, itl_s=0.1)
PRESETS = ("llama-3.1-8b/h100", "llama-3.1-8b/a100", "llama-3.1-8b/l4", "llama-3.1-70b/h100-tp4")
TRACES = ("azure2023-code", "azure2023-conv", "azure2024-code-peak")
POLICIES = ("ours", "static", "queue", "gpu", "concurrency", "oracle")
GPU_H_TOL, SLO_TOL = 0.05, 0.01
#: (preset, trace window, minutes or None, static replicas): loaded replicas on every kind of preset
PHYSICS_CASES = (("llama-3.1-8b/h100", "azure2023-code", None, 1),
                 ("llama-3.1-8b/h100", "azure2023-code", None, 2),
                 ("llama-3.1-8b/a100", "azure2023-code", None, 2),
                 ("llama-3.1-70b/h100-tp4", "azure2023-code", None, 3),
                 ("llama-3.1-70b/h100-tp4", "azure2023-conv", None, 1),
                 ("llama-3.1-8b/h100", "azure2024-code-peak", 10, 12),
                 # the KV-bound L4 at the edge of its cache: eight replicas preempt a few hundred times where
                 # the mean TPOT straddles the 0.1 s ITL SLO (docs/simulator-results.md, "Open")
                 ("llama-3.1-8b/l4", "azure2023-conv", 20, 8))


def peak_start_minute(trace: Trace, minutes: int) -> int:
    """The first minute of the `minutes`-long window with the most arrivals (rolling by the minute)."""
    per_min = np.bincount(np.floor(trace.arrival_s / 60.0).astype(np.int64))
    sums = np.convolve(per_min, np.ones(minutes, dtype=np.int64), "valid")
    return int(np.argmax(sums))


@lru_cache(maxsize=4)
def load_window(name: str, minutes: int | None) -> Trace:
    """A trace window by name (see the module docstring); `minutes` cuts it to its first (busiest) M."""
    if name == "azure2024-code-peak":
        week = load_shipped("azure2024-code")
        hour = peak_start_minute(week, 60)
        start = hour
        if minutes is not None and minutes < 60:
            start = hour + peak_start_minute(week.window(hour * 60.0, (hour + 60) * 60.0), minutes)
        return week.window(start * 60.0, (start + (minutes or 60)) * 60.0)
    tr = load_shipped(name)
    return tr if minutes is None else tr.window(0.0, minutes * 60.0)


def shifted(trace: Trace, by_s: float) -> Trace:
    return Trace(trace.name, trace.arrival_s + by_s, trace.prompt_tokens, trace.output_tokens)


def controller(policy: str, trace: Trace, bt: Backtest, plan: OraclePlan | None) -> Controller:
    """The controller run_policies builds for `policy` (the oracle's schedule replayed)."""
    p = bt.preset
    if policy == "oracle":
        assert plan is not None
        return ScheduleController("oracle", plan.pods)
    static_n = int(plan.counts.max()) if plan is not None and len(plan.counts) else 1
    return build_controller(policy, model=p.model.name, max_replicas=bt.max_replicas,
                            concurrency_target=concurrency_target(trace, bt), static_replicas=max(1, static_n),
                            cold_start_s=p.cold_start(bt.cold_start).quantile(0.9), slo=(bt.slo.ttft_s, bt.slo.itl_s),
                            anchor=AnchorContext(bt.max_replicas, bt.slo.ttft_s, bt.slo.itl_s, p.perf(),
                                                 p.replica_config()))


def plan(trace: Trace, bt: Backtest) -> OraclePlan:
    p = bt.preset
    bucket = bt.oracle_bucket_s or (60.0 if trace.duration_s <= 7200 else 300.0)
    return plan_oracle(trace, lambda ctl: simulate(trace, bt, ctl, "fluid"), p.perf(), p.replica_config(),
                       p.cold_start(bt.cold_start), bt.slo, bucket_s=bucket, target=bt.oracle_target, seed=bt.seed,
                       max_replicas=bt.max_replicas, gpus_per_replica=p.tp)


@dataclass
class Row:
    preset: str
    trace: str
    policy: str
    shift_s: float
    detailed_gpu_h: float
    fluid_gpu_h: float
    detailed_slo: float
    fluid_slo: float
    detailed_cpu_s: float
    fluid_cpu_s: float

    @property
    def gpu_rel(self) -> float:
        return (self.fluid_gpu_h - self.detailed_gpu_h) / self.detailed_gpu_h

    @property
    def slo_pts(self) -> float:
        return 100.0 * (self.fluid_slo - self.detailed_slo)


def run_case(preset: str, trace_name: str, policy: str, minutes: int | None, shift_s: float,
             plan_: OraclePlan | None, gauges: GaugeTiming = "leading") -> Row:
    tr = load_window(trace_name, minutes)
    if shift_s:
        tr = shifted(tr, shift_s)
    bt = Backtest(get_preset(preset), cold_start="typical", slo=SLO, gauges=gauges)
    out: dict[str, tuple[float, float, float]] = {}
    for mode in ("detailed", "fluid"):
        t0 = time.process_time()
        s = summarize(simulate(tr, bt, controller(policy, tr, bt, plan_), mode), SLO)  # type: ignore[arg-type]
        out[mode] = (s.gpu_hours, s.slo_attainment, time.process_time() - t0)
    (dg, ds, dc), (fg, fs, fc) = out["detailed"], out["fluid"]
    return Row(preset, trace_name, policy, shift_s, dg, fg, ds, fs, dc, fc)


def physics_case(preset: str, trace_name: str, minutes: int | None, replicas: int) -> str:
    """One PHYSICS_CASES row as a markdown line: mean TPOT and SLO attainment, detailed, fluid, difference."""
    tr = load_window(trace_name, minutes)
    bt = Backtest(get_preset(preset), cold_start="typical", slo=SLO)
    out = []
    for mode in ("detailed", "fluid"):
        res = simulate(tr, bt, ScheduleController("static", [PodPlan(0.0, math.inf, 0.0)] * replicas),
                       mode)  # type: ignore[arg-type]
        out.append((float(np.nanmean(res.request_table().tpot_s)), summarize(res, SLO).slo_attainment))
    (d_tpot, d_slo), (f_tpot, f_slo) = out
    window = f"{trace_name}{f' (busiest {minutes} min)' if minutes else ''}"
    return (f"| {preset} | {window} | {replicas} | {d_tpot:.4f} | {f_tpot:.4f} | "
            f"{100 * (f_tpot - d_tpot) / d_tpot:+.1f}% | {100 * d_slo:.2f} | {100 * f_slo:.2f} | "
            f"{100 * (f_slo - d_slo):+.2f} |")


#: --replica: (median prompt, median answer) tokens, lognormal with sigma 0.8; each at RATE_MULTIPLES of the
#: preset's REPLICA_BASE_RATE (requests/s at a 1,500-token prompt, scaled by 1,500 / prompt and by the
#: square root of 150 / answer), a rate about at the replica's saturation on that preset
REPLICA_LOADS = ((300, 300), (1500, 150), (6000, 200), (20000, 300))
RATE_MULTIPLES = (0.5, 1.0, 2.0, 4.0)
REPLICA_BASE_RATE = {"llama-3.1-8b/h100": 6.0, "llama-3.1-8b/a100": 3.0, "llama-3.1-8b/l4": 0.5,
                     "llama-3.1-70b/h100-tp4": 2.0}


def replica_case(preset: str, prompt_tok: int, output_tok: int, mult: float) -> str:
    """One static replica under 300 s of lognormal traffic (seeded), both modes: one markdown line."""
    p = get_preset(preset)
    rate = REPLICA_BASE_RATE[preset] * mult * 1500 / prompt_tok * math.sqrt(150 / output_tok)
    rng = np.random.default_rng(1)
    n = max(20, int(300 * rate))
    arrival = np.cumsum(rng.exponential(1 / rate, n))
    prompt = np.clip(rng.lognormal(math.log(prompt_tok), 0.8, n), 16, 60000).astype(np.int32)
    output = np.clip(rng.lognormal(math.log(output_tok), 0.8, n), 2, 4000).astype(np.int32)
    fits = prompt + output <= p.replica_config().kv_capacity_tokens  # a request larger than the cache is refused
    tr = Trace("replica", arrival[fits], prompt[fits], output[fits])
    bt = Backtest(p, cold_start="typical", slo=SLO)
    out = []
    for mode in ("detailed", "fluid"):
        res = simulate(tr, bt, ScheduleController("static", [PodPlan(0.0, math.inf, 0.0)]), mode)  # type: ignore[arg-type]
        t = res.request_table()
        served = np.isfinite(t.ttft_s)
        preempted, computed = res.engine_totals
        out.append((float(np.nanmean(t.tpot_s)), float(np.mean(t.ttft_s[served])), preempted,
                    computed / float(tr.prompt_tokens.sum()), summarize(res, SLO).slo_attainment))
    (d_tpot, d_ttft, d_pre, d_x, d_slo), (f_tpot, f_ttft, f_pre, f_x, f_slo) = out
    return (f"| {preset} | {prompt_tok} / {output_tok} | {rate:.2f} (x{mult:g}) | {d_tpot:.4f} / {f_tpot:.4f} | "
            f"{100 * (f_tpot - d_tpot) / d_tpot:+.1f}% | {d_ttft:.2f} / {f_ttft:.2f} | {d_pre} / {f_pre} | "
            f"{d_x:.2f} / {f_x:.2f} | {100 * d_slo:.1f} / {100 * f_slo:.1f} |")


def plan_for(preset: str, trace_name: str, minutes: int | None) -> OraclePlan:
    return plan(load_window(trace_name, minutes), Backtest(get_preset(preset), cold_start="typical", slo=SLO))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--traces", default=",".join(TRACES))
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--minutes", type=int, default=None, help="cut each window to its first (busiest) M minutes")
    ap.add_argument("--shifts", type=int, default=1, help="runs per case, arrivals shifted by 0, 0.5, ... s")
    ap.add_argument("--spread", type=float, default=None,
                    help="spread the shifts evenly over this many seconds instead (15: the HPA's sync period, the "
                         "control loop's whole phase, as tests/simulator/test_sim_fluid.py SHIFTS_S); a table of "
                         "each case's means follows the runs")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--gauges", default="leading", choices=GAUGE_TIMINGS,
                    help="when the engines' gauges change, in both modes (SimConfig.gauges) [leading]")
    ap.add_argument("--json", default=None, help="write the rows here")
    ap.add_argument("--physics", action="store_true", help="static replicas only (PHYSICS_CASES), no control loop")
    ap.add_argument("--replica", action="store_true",
                    help="one replica per preset under synthetic load (REPLICA_LOADS), no control loop")
    args = ap.parse_args()
    if args.replica:
        print("| preset | median prompt / answer | requests/s | mean TPOT detailed / fluid | TPOT | "
              "mean TTFT (s) | preemptions | prefill x | SLO % |")
        print("|---|---|---|---|---|---|---|---|---|")
        cases = [(p, pt, ot, m) for p in args.presets.split(",") for pt, ot in REPLICA_LOADS for m in RATE_MULTIPLES]
        with ProcessPoolExecutor(args.jobs) as pool:
            for line in pool.map(replica_case, *zip(*cases, strict=True)):
                print(line, flush=True)
        return
    if args.physics:
        print("| preset | trace | replicas | TPOT detailed | TPOT fluid | TPOT | SLO detailed | SLO fluid | SLO pts |")
        print("|---|---|---|---|---|---|---|---|---|")
        with ProcessPoolExecutor(args.jobs) as pool:
            for line in pool.map(physics_case, *zip(*PHYSICS_CASES, strict=True)):
                print(line, flush=True)
        return
    presets, traces, policies = (a.split(",") for a in (args.presets, args.traces, args.policies))
    needs_plan = any(p in ("static", "oracle") for p in policies)
    with ProcessPoolExecutor(args.jobs) as pool:
        plans = {(p, t): pool.submit(plan_for, p, t, args.minutes) for p in presets for t in traces} \
            if needs_plan else {}
        step = 0.5 if args.spread is None else args.spread / args.shifts
        futs = [pool.submit(run_case, p, t, pol, args.minutes, step * k,
                            plans[(p, t)].result() if (p, t) in plans else None, args.gauges)
                for p in presets for t in traces for pol in policies for k in range(args.shifts)]
        rows = [f.result() for f in futs]
    print("| preset | trace | policy | GPU-h detailed | GPU-h fluid | GPU-h | SLO detailed | SLO fluid | SLO pts |"
          " CPU s d/f |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        flag = " **" if abs(r.gpu_rel) > GPU_H_TOL or abs(r.slo_pts) > 100 * SLO_TOL else ""
        print(f"| {r.preset} | {r.trace}{f' +{r.shift_s:g}s' if r.shift_s else ''} | {r.policy} | "
              f"{r.detailed_gpu_h:.3f} | {r.fluid_gpu_h:.3f} | {100 * r.gpu_rel:+.1f}% | {100 * r.detailed_slo:.2f} | "
              f"{100 * r.fluid_slo:.2f} | {r.slo_pts:+.2f}{flag} | {r.detailed_cpu_s:.0f}/{r.fluid_cpu_s:.0f} |",
              flush=True)
    if args.shifts > 1:
        print_means(rows)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([asdict(r) for r in rows], fh, indent=1)


def print_means(rows: list[Row]) -> None:
    """Each case's means over its shifts, fluid against detailed: what the modes must agree on where one run is
    path-bound; with the detailed mode's own spread beside them."""
    print("\n| preset | trace | policy | runs | GPU-h detailed (range) | GPU-h fluid | GPU-h | SLO detailed (range) |"
          " SLO fluid | SLO pts |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    cases: dict[tuple[str, str, str], list[Row]] = {}
    for r in rows:
        cases.setdefault((r.preset, r.trace, r.policy), []).append(r)
    for (preset, trace, policy), rs in cases.items():
        dg, fg = (float(np.mean([getattr(r, k) for r in rs])) for k in ("detailed_gpu_h", "fluid_gpu_h"))
        ds, fs = (float(np.mean([getattr(r, k) for r in rs])) for k in ("detailed_slo", "fluid_slo"))
        rel, pts = (fg - dg) / dg, 100.0 * (fs - ds)
        flag = " **" if abs(rel) > GPU_H_TOL or abs(pts) > 100 * SLO_TOL else ""
        g_lo, g_hi = min(r.detailed_gpu_h for r in rs), max(r.detailed_gpu_h for r in rs)
        s_lo, s_hi = min(r.detailed_slo for r in rs), max(r.detailed_slo for r in rs)
        print(f"| {preset} | {trace} | {policy} | {len(rs)} | {dg:.3f} ({g_lo:.3f}-{g_hi:.3f}) | {fg:.3f} | "
              f"{100 * rel:+.1f}% | {100 * ds:.2f} ({100 * s_lo:.2f}-{100 * s_hi:.2f}) | {100 * fs:.2f} | "
              f"{pts:+.2f}{flag} |", flush=True)


if __name__ == "__main__":
    main()
