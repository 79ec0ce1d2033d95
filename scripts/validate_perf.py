"""Fit the performance model's efficiencies on public vLLM measurements and validate on others.

Run:  python scripts/validate_perf.py            (prints the Markdown tables for docs/simulator.md; minutes)
      python scripts/validate_perf.py --no-fit   (uses simulator.hardware.perf.FITTED as is)

Every measurement is replayed through the same Replica the simulator uses, with the benchmark's own
requests (token counts) and load (all at once, a closed loop of C clients, or a Poisson QPS sweep of
ShareGPT-like requests: simulator/hardware/calibration.py), and the metric the source reports is computed from the
simulated requests the way the benchmark computes it. The fit takes the small-batch fit rows and the
loaded curves L1-L3 together (one engine version, vLLM 0.6.0 with multi-step scheduling): their mean TPOT
at every finite QPS and their throughput at QPS = inf.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

import keda_llm.simulator.hardware.calibration as cal
from keda_llm.simulator.hardware.gpus import A100_SXM_40GB, A100_SXM_80GB, GPU, H100_SXM_80GB
from keda_llm.simulator.hardware.models import LLAMA_3_1_8B, LLAMA_3_1_70B, ModelSpec
from keda_llm.simulator.hardware.perf import FITTED, Efficiency, PhysicsPerf
from keda_llm.simulator.hardware.replica import Replica, ReplicaConfig, Request

LAMBDA = "https://github.com/LambdaLabsML/vllm-benchmark/blob/main/"
# The 10 ShareGPT prompts every Lambda "prompt_10" run sends at once (request rate inf), input tokens.
LAMBDA_INPUTS = (13, 25, 27, 10, 329, 29, 399, 328, 4, 205)


@dataclass(frozen=True)
class Point:
    """One published number and how to reproduce its setting."""

    key: str
    role: str  # "fit" or "validate"
    gpu: GPU
    model: ModelSpec
    tp: int
    metric: str  # "duration_s" | "median_ttft_ms" | "median_tpot_ms" | "output_tok_s"
    measured: float
    setting: str
    source: str
    run: Callable[[PhysicsPerf], list[Request] | tuple[list[Request], float]]


def burst(
    inputs: tuple[int, ...], outputs: tuple[int, ...], max_num_seqs: int = 256
) -> Callable[[PhysicsPerf], list[Request]]:
    """All requests arrive at t=0 (vLLM benchmark_serving --request-rate inf)."""

    def go(perf: PhysicsPerf) -> list[Request]:
        rep = Replica(ReplicaConfig(max_num_seqs, 8192, kv_blocks=100_000), perf)
        reqs = [Request(i, 0.0, p, o) for i, (p, o) in enumerate(zip(inputs, outputs, strict=True))]
        for r in reqs:
            rep.add(r, 0.0)
        now = 0.0
        while rep.has_work:
            now += rep.step(now).duration
        return reqs

    return go


def closed_loop(
    concurrency: int, prompt: int, output: int, n: int
) -> Callable[[PhysicsPerf], tuple[list[Request], float]]:
    """`concurrency` clients, each sending its next request when the last one finishes (--max-concurrency)."""

    def go(perf: PhysicsPerf) -> tuple[list[Request], float]:
        config = ReplicaConfig(256, 2048, kv_blocks=100_000)
        return cal.closed_loop_requests(perf, config, concurrency, prompt, output, n)

    return go


def metric(point: Point, perf: PhysicsPerf) -> float:
    out = point.run(perf)
    reqs, end = out if isinstance(out, tuple) else (out, max(r.finish_s or 0.0 for r in out))
    if point.metric == "duration_s":
        return end
    if point.metric == "median_ttft_ms":
        return 1000 * float(np.median([r.ttft_s for r in reqs if r.ttft_s is not None]))
    if point.metric == "median_tpot_ms":
        return 1000 * float(np.median([r.tpot_s for r in reqs if r.tpot_s is not None]))
    if point.metric == "output_tok_s":
        return sum(r.target_output for r in reqs) / end
    raise ValueError(point.metric)


FP8_8B = LLAMA_3_1_8B.with_weights(1.0, "-FP8")

# Lambda vllm-benchmark, results/prompt_10: vLLM 0.6-era docker image, multi-step scheduling,
# max_num_seqs 256, 10 ShareGPT prompts at once. Output token counts are the run's own `output_lens`.
H100_8B = (120, 429, 233, 194, 101, 741, 9, 3, 6, 31)
A100_8B = (120, 507, 233, 194, 101, 741, 9, 3, 6, 31)
H100_70B = (120, 661, 233, 194, 101, 741, 0, 0, 6, 35)
A100_70B = (120, 723, 233, 194, 101, 741, 0, 0, 6, 35)
H100_8B_FP8 = (120, 1, 1, 194, 0, 40, 0, 0, 6, 80)


def lambda_points(role: str, gpu: GPU, model: ModelSpec, tp: int, outs: tuple[int, ...], path: str,
                  dur: float, ttft: float, tpot: float, label: str) -> list[Point]:
    setting = f"{label}; 10 ShareGPT prompts at once (1369 input tokens), outputs {sum(outs)} tokens"
    run = burst(LAMBDA_INPUTS, outs)
    return [
        Point(f"{label} duration", role, gpu, model, tp, "duration_s", dur, setting, LAMBDA + path, run),
        Point(f"{label} TTFT p50", role, gpu, model, tp, "median_ttft_ms", ttft, setting, LAMBDA + path, run),
        Point(f"{label} TPOT p50", role, gpu, model, tp, "median_tpot_ms", tpot, setting, LAMBDA + path, run),
    ]


MUSGRAVE = "https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on"
POINTS: list[Point] = [
    *lambda_points("fit", H100_SXM_80GB, LLAMA_3_1_8B, 1, H100_8B,
                   "results/prompt_10/1xH100-80GB-SXM/Meta-Llama-3-8B-Instruct_tp1_len2048.json",
                   5.3666, 62.19, 7.558, "Llama-3-8B bf16, 1xH100"),
    *lambda_points("fit", A100_SXM_80GB, LLAMA_3_1_8B, 1, A100_8B,
                   "results/prompt_10/1xA100-80GB-SXM/Meta-Llama-3-8B-Instruct_tp1_len2048.json",
                   8.5854, 126.73, 12.014, "Llama-3-8B bf16, 1xA100-80GB"),
    *lambda_points("fit", H100_SXM_80GB, LLAMA_3_1_70B, 4, H100_70B,
                   "results/prompt_10/4xH100-80GB-SXM/Meta-Llama-3-70B-Instruct_tp4_len2048.json",
                   13.0712, 140.56, 18.117, "Llama-3-70B bf16, 4xH100 TP4"),
    *lambda_points("validate", A100_SXM_80GB, LLAMA_3_1_70B, 4, A100_70B,
                   "results/prompt_10/4xA100-80GB-SXM/Meta-Llama-3-70B-Instruct_tp4_len2048.json",
                   21.4518, 315.17, 29.583, "Llama-3-70B bf16, 4xA100-80GB TP4"),
    *lambda_points("validate", H100_SXM_80GB, FP8_8B, 1, H100_8B_FP8,
                   "results/prompt_10/1xH100-80GB-SXM/Meta-Llama-3.1-8B-FP8_tp1_len2048.json",
                   1.0679, 62.48, 5.198, "Llama-3.1-8B FP8, 1xH100"),
    Point("Llama-3.1-8B bf16, 1xA100-40GB, C=1", "validate", A100_SXM_40GB, LLAMA_3_1_8B, 1, "output_tok_s", 75.0,
          "vLLM 0.23, random 1024 in / 128 out (ignore_eos), max concurrency 1, 20 prompts; "
          "'about 75 tokens/sec'",
          MUSGRAVE, closed_loop(1, 1024, 128, 20)),
    Point("Llama-3.1-8B bf16, 1xA100-40GB, C=8", "validate", A100_SXM_40GB, LLAMA_3_1_8B, 1, "output_tok_s", 6.6 * 75.0,
          "same sweep, max concurrency 8, 160 prompts; 'a 6.6x gain' over C=1", MUSGRAVE,
          closed_loop(8, 1024, 128, 160)),
]


def perf_for(p: Point, eff: Efficiency) -> PhysicsPerf:
    return PhysicsPerf(p.gpu, p.model, p.tp, eff)


@dataclass(frozen=True)
class LoadedRow:
    """One published number of a loaded curve (L1-L3) and the model's value for it."""

    curve: cal.LoadedCurve
    qps: float
    metric: str  # "mean_tpot_ms" | "req_s" | "mean_ttft_s"
    measured: float
    fitted: bool  # part of the fit (finite-QPS TPOT, QPS = inf throughput); the QPS = inf TPOT and TTFT are reported

    def model(self, eff: Efficiency) -> float:
        c = self.curve
        perf = PhysicsPerf(c.gpu, c.model, c.tp, eff)
        r = cal.replay(perf, cal.v060_config(c.gpu, c.model, c.tp), self.qps,
                       scheduler_steps=cal.V060_SCHEDULER_STEPS)
        return {"mean_tpot_ms": r.mean_tpot_ms, "req_s": r.req_s, "mean_ttft_s": r.mean_ttft_s}[self.metric]


#: the mean TTFT with every request at once (QPS = inf) each loaded curve's source states beside its TPOT
#: (../shared/reference/calibration-under-load.md, L1-L3; the blog's figures): reported, never fitted
INF_TTFT_S = {"L1": 2.65, "L2": 4.4, "L3": 4.7}

LOADED_ROWS: list[LoadedRow] = [
    row
    for c in cal.LOADED
    for row in [LoadedRow(c, q, "mean_tpot_ms", t, not math.isinf(q)) for q, t in c.tpot_ms]
    + [LoadedRow(c, math.inf, "req_s", c.inf_req_s, True),
       LoadedRow(c, math.inf, "mean_ttft_s", INF_TTFT_S[c.key], False)]
]


def loss(eff: Efficiency, points: list[Point], loaded: list[LoadedRow] | None = None) -> float:
    small = sum(math.log(metric(p, perf_for(p, eff)) / p.measured) ** 2 for p in points)
    rows = LOADED_ROWS if loaded is None else loaded
    return small + sum(math.log(r.model(eff) / r.measured) ** 2 for r in rows if r.fitted)


def fit(points: list[Point], start: Efficiency) -> Efficiency:
    """Nelder-Mead on log-parameters (bandwidth, MFU, step overhead, all-reduce latency, front-end latency,
    KV bandwidth, the Ampere MFU)."""

    def unpack(x: np.ndarray) -> Efficiency | None:
        bw, mfu, oh, ar, fe, kv, mfu_a = np.exp(x)
        if bw > 1 or mfu > 1 or kv > 1 or mfu_a > 1:
            return None
        return Efficiency(float(bw), float(mfu), float(oh), float(ar), float(fe), float(kv), start.engine,
                          (("ampere", float(mfu_a)),))

    def f(x: np.ndarray) -> float:
        e = unpack(x)
        return 1e9 if e is None else loss(e, points)

    ampere = dict(start.mfu_by_arch).get("ampere", start.mfu)
    x0 = np.log([start.bandwidth, start.mfu, start.step_overhead_s, start.allreduce_latency_s,
                 max(start.frontend_latency_s, 1e-3), start.kv_bandwidth, ampere])
    simplex = [x0] + [x0 + 0.2 * np.eye(7)[i] for i in range(7)]
    vals = [f(x) for x in simplex]
    for _ in range(250):
        order = np.argsort(vals)
        simplex = [simplex[i] for i in order]
        vals = [vals[i] for i in order]
        if vals[-1] - vals[0] < 1e-7:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        xr = centroid + (centroid - simplex[-1])
        fr = f(xr)
        if fr < vals[0]:
            xe = centroid + 2 * (centroid - simplex[-1])
            fe = f(xe)
            simplex[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            simplex[-1], vals[-1] = xr, fr
        else:
            xc = centroid + 0.5 * (simplex[-1] - centroid)
            fc = f(xc)
            if fc < vals[-1]:
                simplex[-1], vals[-1] = xc, fc
            else:
                simplex = [simplex[0] + 0.5 * (s - simplex[0]) for s in simplex]
                vals = [f(s) for s in simplex]
    best = unpack(simplex[int(np.argmin(vals))])
    assert best is not None
    return best


def table(eff: Efficiency) -> str:
    rows = ["| role | point | metric | measured | model | error |", "|---|---|---|---|---|---|"]
    worst = 0.0
    for p in POINTS:
        got = metric(p, perf_for(p, eff))
        err = got / p.measured - 1
        if p.role == "validate":
            worst = max(worst, abs(err))
        rows.append(f"| {p.role} | {p.key} | {p.metric} | {p.measured:.4g} | {got:.4g} | {100 * err:+.1f}% |")
    rows.append("")
    rows.append(f"Worst validation error: {100 * worst:.1f}% (goal: within 25%).")
    return "\n".join(rows)


def _qps(q: float) -> str:
    return "inf" if math.isinf(q) else f"{q:g}"


def loaded_table(eff: Efficiency) -> str:
    rows = ["| point | QPS | metric | published | model | error | role |", "|---|---|---|---|---|---|---|"]
    for r in LOADED_ROWS:
        got = r.model(eff)
        role = "fit" if r.fitted else "reported"
        rows.append(f"| {r.curve.key} {r.curve.label} | {_qps(r.qps)} | {r.metric} | {r.measured:g} | {got:.3g} | "
                    f"{100 * (got / r.measured - 1):+.0f}% | {role} |")
    return "\n".join(rows)


def held_out_table(eff: Efficiency) -> str:
    """The same blog's points no fit uses (simulator/hardware/calibration.py HELD_OUT)."""
    rows = ["| setup | dataset | QPS | metric | published | model | error | held |",
            "|---|---|---|---|---|---|---|---|"]
    for p in cal.HELD_OUT:
        got = cal.replay_held_out(p, PhysicsPerf(p.gpu, p.model, p.tp, eff))
        rows.append(f"| {p.label} | {p.dataset} | {_qps(p.qps)} | {p.metric} | {p.published:g} | {got:.3g} | "
                    f"{100 * (got / p.published - 1):+.0f}% | {'25%' if p.held else 'reported'} |")
    return "\n".join(rows)


def sources() -> str:
    seen: dict[str, str] = {}
    for p in POINTS:
        key = p.setting.split(";")[0] if p.source.startswith(LAMBDA) else p.key
        seen.setdefault(key, f"{p.setting} - {p.source}")
    return "\n".join(f"- {k}: {v}" for k, v in seen.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--no-fit", action="store_true", help="use simulator.hardware.perf.FITTED instead of refitting")
    args = ap.parse_args()
    eff = FITTED if args.no_fit else fit([p for p in POINTS if p.role == "fit"], FITTED)
    print(f"Efficiency: bandwidth={eff.bandwidth:.3f} mfu={eff.mfu:.3f} "
          f"step_overhead_s={eff.step_overhead_s:.5f} allreduce_latency_s={eff.allreduce_latency_s:.2e} "
          f"frontend_latency_s={eff.frontend_latency_s:.4f} kv_bandwidth={eff.kv_bandwidth:.3f} "
          f"mfu_by_arch={eff.mfu_by_arch}\n")
    print(table(replace(eff)))
    print("\n" + loaded_table(eff))
    print("\n" + held_out_table(eff))
    print("\nSources:\n" + sources())


if __name__ == "__main__":
    main()
