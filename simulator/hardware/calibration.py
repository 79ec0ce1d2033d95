"""Published serving measurements under load, and their replay through the simulator's own engine.

The points come from ../shared/reference/calibration-under-load.md (each with its source); nothing here
was measured by us. L1-L3 are one engine version (vLLM 0.6.0 with multi-step scheduling) and are fitted
together with the small-batch points by scripts/validate_perf.py; L4 and L5 are other versions and only
checked for shape (tests/simulator/test_calibration.py, the table in docs/simulator.md).

A benchmark is replayed the way vLLM's benchmark_serving runs it: `n` ShareGPT-like requests (lengths
below) arriving as a Poisson process at `qps` (all at t = 0 for QPS = inf), each request's TPOT is
(finish - first token) / (output - 1), and the run's throughput is requests / the time the last one
finishes. The engine is `Replica` with the engine's own limits, timed by the performance model under test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from keda_llm.simulator.hardware.gpus import A100_SXM_80GB, GPU, H100_SXM_80GB
from keda_llm.simulator.hardware.models import LLAMA_3_1_8B, LLAMA_3_1_70B, ModelSpec
from keda_llm.simulator.hardware.perf import VLLM_0_6_0, PerfModel
from keda_llm.simulator.hardware.presets import Preset
from keda_llm.simulator.hardware.replica import Replica, ReplicaConfig, Request

VLLM_V1_ALPHA = "vLLM V1 alpha (January 2025)"
VLLM_0_21 = "vLLM 0.21"

BLOG_V060 = "vLLM blog 'vLLM v0.6.0: 2.7x throughput improvement', 2024-09-05 (reproduction: vllm issue #8176)"
BLOG_V1 = "vLLM blog 'vLLM V1 alpha', 2025-01-27, figure v1_llama"
RECIPE = "a public concurrency-sweep recipe (single run)"


@dataclass(frozen=True)
class LoadedCurve:
    """A published QPS sweep: mean TPOT per QPS (inf: every request at once) and the QPS = inf throughput."""

    key: str
    label: str
    gpu: GPU
    model: ModelSpec
    tp: int
    engine: str
    tpot_ms: tuple[tuple[float, float], ...]  # (QPS, mean TPOT ms)
    inf_req_s: float
    source: str


# vLLM 0.6.0's V0 defaults for these runs: max_num_seqs 256; no chunked prefill (multi-step excluded it in
# 0.6.0), so a prefill batch holds up to max(max_model_len 8192, 2048) tokens (vllm/config.py SchedulerConfig).
V060_MAX_NUM_SEQS = 256
V060_MAX_BATCHED_TOKENS = 8192
V060_SCHEDULER_STEPS = 10

LOADED: tuple[LoadedCurve, ...] = (
    LoadedCurve("L1", "Llama-3-8B, 1xH100", H100_SXM_80GB, LLAMA_3_1_8B, 1, VLLM_0_6_0,
                ((2.0, 8.0), (32.0, 13.5), (math.inf, 58.0)), 37.0, BLOG_V060 + ", figure H100_8B"),
    LoadedCurve("L2", "Llama-3-70B, 4xH100 TP4", H100_SXM_80GB, LLAMA_3_1_70B, 4, VLLM_0_6_0,
                ((2.0, 22.0), (8.0, 28.0), (16.0, 40.0), (32.0, 55.0), (math.inf, 110.0)), 17.3,
                BLOG_V060 + ", figure H100_70B"),
    LoadedCurve("L3", "Llama-3-8B, 1xA100", A100_SXM_80GB, LLAMA_3_1_8B, 1, VLLM_0_6_0,
                ((2.0, 13.0), (16.0, 25.0), (32.0, 40.0), (math.inf, 118.0)), 19.0, BLOG_V060 + ", figure A100_8B"),
)

# L4: mean request latency (s) per QPS, vLLM V1 alpha, ShareGPT; 8B on 1xH100 and 70B on 4xH100 TP4.
L4_8B = ((1.0, 1.7), (20.0, 2.0), (40.0, 2.8), (50.0, 3.9), (60.0, 7.1), (70.0, 13.5))
L4_70B = ((1.0, 4.2), (10.0, 5.1), (20.0, 8.1), (25.0, 12.4), (30.0, 22.0))
# L5: Llama-3.1-8B-Instruct on 1xH100, vLLM 0.21, closed loop: concurrency -> (output tok/s, TPOT p50 ms)
L5 = ((1, 122.0, 6.48), (16, 1384.0, 10.9), (64, 1312.0, 46.9))

# Held out: the same blog's points that no fit uses, to see how the fitted model does on a length mix and a
# setup it was not fitted on. The blog's other two datasets (its appendix text): 500 prompts generated from
# the sonnet dataset with about 462 input tokens and about 16 (prefill-heavy) or 256 (decode-heavy) output
# tokens on average, replayed with those fixed lengths; and its fourth figure, Llama-3-70B on 4xA100 TP4
# (A100_70B), ShareGPT included. vLLM's curve read off the figures by us (about +-5% of full scale).
PREFILL_HEAVY, DECODE_HEAVY = (462, 16), (462, 256)


@dataclass(frozen=True)
class HeldOutPoint:
    label: str
    gpu: GPU
    model: ModelSpec
    tp: int
    dataset: str  # "sharegpt" | "decode-heavy" | "prefill-heavy"
    metric: str  # "mean_tpot_ms" | "req_s" | "mean_ttft_s"
    qps: float
    published: float
    figure: str

    @property
    def held(self) -> bool:
        """Held to a tolerance by the tests: finite-QPS TPOT and QPS = inf throughput, as L1-L3 are. TPOT
        and TTFT with every request at once are reported only (docs/simulator.md says why)."""
        return self.metric == "req_s" or (self.metric == "mean_tpot_ms" and not math.isinf(self.qps))

    @property
    def lengths(self) -> tuple[int, int] | None:
        return {"prefill-heavy": PREFILL_HEAVY, "decode-heavy": DECODE_HEAVY}.get(self.dataset)


def _held_out() -> tuple[HeldOutPoint, ...]:
    h100_8b = ("Llama-3-8B, 1xH100", H100_SXM_80GB, LLAMA_3_1_8B, 1, "H100_8B")
    h100_70b = ("Llama-3-70B, 4xH100 TP4", H100_SXM_80GB, LLAMA_3_1_70B, 4, "H100_70B")
    a100_8b = ("Llama-3-8B, 1xA100", A100_SXM_80GB, LLAMA_3_1_8B, 1, "A100_8B")
    a100_70b = ("Llama-3-70B, 4xA100 TP4", A100_SXM_80GB, LLAMA_3_1_70B, 4, "A100_70B")
    inf = math.inf
    rows: list[tuple[tuple[str, GPU, ModelSpec, int, str], str, str, float, float]] = [
        (h100_8b, "decode-heavy", "mean_tpot_ms", 2, 7.7), (h100_8b, "decode-heavy", "mean_tpot_ms", 16, 12.7),
        (h100_8b, "decode-heavy", "mean_tpot_ms", 32, 25.5), (h100_8b, "decode-heavy", "req_s", inf, 31.0),
        (h100_8b, "prefill-heavy", "req_s", inf, 59.0),
        (h100_8b, "decode-heavy", "mean_tpot_ms", inf, 44.0), (h100_8b, "decode-heavy", "mean_ttft_s", inf, 4.8),
        (h100_8b, "prefill-heavy", "mean_ttft_s", inf, 4.9),
        (h100_70b, "decode-heavy", "mean_tpot_ms", 2, 21.7), (h100_70b, "decode-heavy", "mean_tpot_ms", 16, 74.0),
        (h100_70b, "decode-heavy", "req_s", inf, 15.4), (h100_70b, "prefill-heavy", "req_s", inf, 25.2),
        (h100_70b, "decode-heavy", "mean_ttft_s", inf, 11.0),
        (a100_8b, "decode-heavy", "mean_tpot_ms", 2, 13.5), (a100_8b, "decode-heavy", "mean_tpot_ms", 8, 23.5),
        (a100_8b, "decode-heavy", "mean_tpot_ms", 16, 62.7), (a100_8b, "decode-heavy", "req_s", inf, 14.7),
        (a100_8b, "prefill-heavy", "req_s", inf, 28.5), (a100_8b, "prefill-heavy", "mean_ttft_s", inf, 9.4),
        (a100_70b, "sharegpt", "mean_tpot_ms", 2, 40.0), (a100_70b, "sharegpt", "mean_tpot_ms", 8, 68.0),
        (a100_70b, "sharegpt", "mean_tpot_ms", 16, 130.0), (a100_70b, "sharegpt", "req_s", inf, 8.54),
        (a100_70b, "decode-heavy", "mean_tpot_ms", 2, 46.7), (a100_70b, "decode-heavy", "req_s", inf, 6.76),
        (a100_70b, "prefill-heavy", "req_s", inf, 11.4),
    ]
    return tuple(HeldOutPoint(label, gpu, model, tp, ds, metric, float(qps), value, f"{BLOG_V060}, figure {fig}")
                 for (label, gpu, model, tp, fig), ds, metric, qps, value in rows)


HELD_OUT = _held_out()


def replay_held_out(point: HeldOutPoint, perf: PerfModel) -> float:
    """The model's value for a held-out point, replayed as L1-L3 are (vLLM 0.6.0's limits, multi-step)."""
    r = replay(perf, v060_config(point.gpu, point.model, point.tp), point.qps,
               scheduler_steps=V060_SCHEDULER_STEPS, lengths=point.lengths)
    return {"mean_tpot_ms": r.mean_tpot_ms, "req_s": r.req_s, "mean_ttft_s": r.mean_ttft_s}[point.metric]


# The ShareGPT-like lengths. benchmark_serving samples ShareGPT conversations, drops prompts or references
# under 4 tokens, prompts over 1024 and prompt + reference over 2048, and asks for the reference answer's
# length as max_tokens without ignoring EOS, so an output is the shorter of the reference and the model's
# own answer. Our assumption (no sample was published): prompts lognormal (sigma 1.0); references
# lognormal (sigma 2.5: many ShareGPT answers are a few words), the model's own answers lognormal around
# 350 tokens (sigma 0.4); both rescaled to the published means, 202 in / 179 out. With seed 0 and 500
# requests: output median 119, 16% under 20 tokens, 99th percentile 730, longest 1168.
MEAN_PROMPT, MEAN_OUTPUT = 202.0, 179.0
PROMPT_SIGMA, REFERENCE_SIGMA, ANSWER_MEDIAN, ANSWER_SIGMA = 1.0, 2.5, 350.0, 0.4


def sharegpt_like(n: int, seed: int = 0, mean_prompt: float = MEAN_PROMPT,
                  mean_output: float = MEAN_OUTPUT) -> tuple[np.ndarray, np.ndarray]:
    """(prompt, output) token counts of `n` requests with the stated means; see the module constants."""
    rng = np.random.default_rng(seed)
    m = 4 * n + 100
    prompt = np.exp(rng.normal(math.log(mean_prompt) - PROMPT_SIGMA ** 2 / 2, PROMPT_SIGMA, m))
    ref = np.exp(rng.normal(0.0, REFERENCE_SIGMA, m))
    answer = np.exp(rng.normal(math.log(ANSWER_MEDIAN), ANSWER_SIGMA, m))

    def sample(scale: float) -> tuple[np.ndarray, np.ndarray]:
        out = np.minimum(ref * scale, answer)
        keep = (prompt >= 4) & (out >= 4) & (prompt <= 1024) & (prompt + out <= 2048)
        return prompt[keep][:n], out[keep][:n]

    lo, hi = 1.0, 1e5  # the reference scale that gives the output mean
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if sample(mid)[1].mean() < mean_output else (lo, mid)
    p, o = sample(math.sqrt(lo * hi))
    p = np.clip(np.round(p * mean_prompt / p.mean()), 4, 1024)
    o = np.clip(np.round(o * mean_output / o.mean()), 4, 2048 - p)
    return p.astype(np.int64), o.astype(np.int64)


@dataclass(frozen=True)
class Replay:
    mean_tpot_ms: float
    mean_ttft_s: float
    mean_latency_s: float
    req_s: float  # requests / the time the last one finished
    output_tok_s: float


def poisson_arrivals(n: int, qps: float, seed: int = 1) -> np.ndarray:
    if math.isinf(qps):
        return np.zeros(n)
    gaps = np.random.default_rng(seed).exponential(1.0 / qps, n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def replay(perf: PerfModel, config: ReplicaConfig, qps: float, n: int = 500, seed: int = 0,
           scheduler_steps: int = 1, lengths: tuple[int, int] | None = None) -> Replay:
    """Run `n` ShareGPT-like requests (or all of `lengths`, prompt and output) at `qps` through one replica.

    `scheduler_steps` > 1 stands for multi-step scheduling, which hands out a sequence's tokens at the end
    of each block of that many decode steps: a request's decode then lasts whole blocks, so its TPOT is
    taken over steps x ceil((output - 1) / steps) iterations at its own mean iteration time."""
    if lengths is None:
        prompt, output = sharegpt_like(n, seed)
    else:
        prompt, output = np.full(n, lengths[0], dtype=np.int64), np.full(n, lengths[1], dtype=np.int64)
    arrival = poisson_arrivals(n, qps, seed + 1)
    reqs = [Request(i, float(arrival[i]), int(prompt[i]), int(output[i])) for i in range(n)]
    rep = Replica(config, perf)
    now, i = 0.0, 0
    while i < n or rep.has_work:
        while i < n and arrival[i] <= now:
            rep.add(reqs[i], float(arrival[i]))
            i += 1
        if not rep.has_work:
            now = float(arrival[i])
            continue
        now += rep.step(now, float(arrival[i]) if i < n else math.inf).duration
    tpots = []
    for r in reqs:
        t = r.tpot_s
        if t is not None:
            gaps = r.target_output - 1
            tpots.append(t * scheduler_steps * math.ceil(gaps / scheduler_steps) / gaps)
    end = max(r.finish_s or 0.0 for r in reqs)
    return Replay(
        mean_tpot_ms=1000.0 * float(np.mean(tpots)),
        mean_ttft_s=float(np.mean([r.ttft_s or 0.0 for r in reqs])),
        mean_latency_s=float(np.mean([(r.finish_s or 0.0) - r.arrival_s for r in reqs])),
        req_s=n / end, output_tok_s=float(output.sum()) / end,
    )


def closed_loop_requests(perf: PerfModel, config: ReplicaConfig, concurrency: int, prompt: int, output: int,
                         n: int) -> tuple[list[Request], float]:
    """`concurrency` clients each sending the next request when its last one finishes (a benchmark's
    --max-concurrency): the requests as served, and the time the last one finished."""
    reqs = [Request(i, 0.0, prompt, output) for i in range(n)]
    rep = Replica(config, perf)
    sent = 0
    for _ in range(min(concurrency, n)):
        rep.add(reqs[sent], 0.0)
        sent += 1
    now = 0.0
    while rep.has_work:
        res = rep.step(now)
        now += res.duration
        for _ in res.finished:
            if sent < n:
                reqs[sent].arrival_s = now
                rep.add(reqs[sent], now)
                sent += 1
    return reqs, now


def closed_loop(perf: PerfModel, config: ReplicaConfig, concurrency: int, prompt: int, output: int,
                n: int) -> tuple[float, float]:
    """closed_loop_requests summarized: (output tok/s, TPOT p50 ms)."""
    reqs, now = closed_loop_requests(perf, config, concurrency, prompt, output, n)
    tpot = float(np.median([r.tpot_s for r in reqs if r.tpot_s is not None]))
    return n * output / now, 1000.0 * tpot


def v060_config(gpu: GPU, model: ModelSpec, tp: int) -> ReplicaConfig:
    """The replica limits of a vLLM 0.6.0 run (V0 defaults above), KV sized as the presets size it."""
    p = Preset("calibration", model, gpu, tp, max_num_seqs=V060_MAX_NUM_SEQS,
               max_num_batched_tokens=V060_MAX_BATCHED_TOKENS)
    return p.replica_config()


# L5's "short chat prompts": the recipe gives no lengths; we take 64 prompt and 256 output tokens.
L5_PROMPT, L5_OUTPUT = 64, 256
