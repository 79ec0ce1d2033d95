"""The continuous-batching replica against hand-computed timelines (constant 10 ms iterations)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from keda_llm.simulator.hardware.gpus import H100_SXM_80GB
from keda_llm.simulator.hardware.models import LLAMA_3_1_8B
from keda_llm.simulator.hardware.perf import ConstantPerf, Efficiency, PhysicsPerf
from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.hardware.replica import Replica, ReplicaConfig, Request

TEN_MS = ConstantPerf(base_s=0.01)


def run(rep: Replica, now: float = 0.0, horizon: float = math.inf) -> float:
    while rep.has_work:
        now += rep.step(now, horizon).duration
    return now


def test_single_request_timeline() -> None:
    rep = Replica(ReplicaConfig(max_num_seqs=4, max_num_batched_tokens=64, kv_blocks=100), TEN_MS)
    r = Request(0, 0.0, prompt_tokens=10, output_tokens=3)
    assert rep.add(r, 0.0)
    first = rep.step(0.0)  # prefill of 10 tokens emits token 1 at 0.01
    assert first.duration == pytest.approx(0.01) and first.iterations == 1
    rest = rep.step(0.01)  # tokens 2 and 3: one call, two identical decode iterations
    assert rest.iterations == 2 and rest.finished == [r]
    assert r.ttft_s == pytest.approx(0.01)
    assert r.finish_s == pytest.approx(0.03)
    assert r.tpot_s == pytest.approx(0.01)
    assert rep.free_blocks == 100 and rep.counters.generation_tokens == 3


def test_batch_limit_queues_the_rest() -> None:
    rep = Replica(ReplicaConfig(max_num_seqs=2, max_num_batched_tokens=64, kv_blocks=100), TEN_MS)
    for i in range(3):
        rep.add(Request(i, 0.0, 4, 2), 0.0)
    rep.step(0.0)
    assert (rep.num_running, rep.num_waiting) == (2, 1)


def test_chunked_prefill_respects_the_token_budget() -> None:
    # 20-token prompt, 8 tokens per iteration: chunks 8, 8, 4 -> first token at 30 ms
    perf = ConstantPerf(base_s=0.0, per_token_s=0.001)
    rep = Replica(ReplicaConfig(max_num_seqs=4, max_num_batched_tokens=8, kv_blocks=100), perf)
    r = Request(0, 0.0, 20, 1)
    rep.add(r, 0.0)
    durations = []
    now = 0.0
    while rep.has_work:
        d = rep.step(now).duration
        durations.append(d)
        now += d
    assert durations == pytest.approx([0.008, 0.008, 0.004])
    assert r.ttft_s == pytest.approx(0.020)


def test_kv_shortage_preempts_the_latest_and_recomputes() -> None:
    # 2 blocks of 4 tokens. A and B (prompt 4, output 4) each fit alone (ceil(8/4) = 2 blocks).
    rep = Replica(ReplicaConfig(max_num_seqs=4, max_num_batched_tokens=64, kv_blocks=2, block_size=4), TEN_MS)
    a, b = Request(0, 0.0, 4, 4), Request(1, 0.0, 4, 4)
    rep.add(a, 0.0)
    rep.add(b, 0.0)
    rep.step(0.0)  # both prefill (1 block each): first tokens at 0.01
    assert a.first_token_s == pytest.approx(0.01) and b.first_token_s == pytest.approx(0.01)
    res = rep.step(0.01)  # A needs a 2nd block: B is preempted; A decodes one token (nobody admitted here)
    assert b.preemptions == 1 and rep.counters.preemptions == 1 and res.iterations == 1
    res = rep.step(0.02)  # B (5 tokens: 2 blocks) does not fit beside A's 2: A decodes its last 2 tokens alone
    assert res.finished == [a] and a.finish_s == pytest.approx(0.04)
    end = run(rep, 0.04)  # B re-prefills 5 tokens (prompt + 1 generated): token 2 at 0.05, done at 0.07
    assert b.finish_s == pytest.approx(0.07) and end == pytest.approx(0.07)
    assert b.max_itl_s == pytest.approx(0.04)  # 0.01 -> 0.05
    assert rep.free_blocks == 2


def test_an_iteration_that_preempts_admits_nobody() -> None:
    # vLLM V1 (scheduler.py, "if not preempted_reqs"): the blocks a preemption frees go to the running requests,
    # not to the queue in the same step. 5 blocks of 4 tokens, an 8-token budget. A (prompt 8) prefills alone
    # (2 blocks); B (prompt 8) joins with a 7-token chunk beside A's decode (2 blocks: none free), then gets its
    # 8th token and its first output. In the fourth iteration B needs a 3rd block: it is the latest, so it is
    # preempted. Its 2 freed blocks would hold its first 7 tokens again, and admitting it at once (as the replica
    # did) recomputed them beside A's decode every few iterations: on a KV-bound L4 replica that thrash made the
    # detailed engine about 1.6x slower per output token than vLLM's rule (docs/simulator-results.md).
    rep = Replica(ReplicaConfig(max_num_seqs=4, max_num_batched_tokens=8, kv_blocks=5, block_size=4), TEN_MS)
    a, b = Request(0, 0.0, 8, 10), Request(1, 0.0, 8, 10)
    rep.add(a, 0.0)
    rep.add(b, 0.0)
    now = 0.0
    for _ in range(3):
        now += rep.step(now).duration
    assert rep.running == [a, b] and rep.free_blocks == 0 and b.first_token_s == pytest.approx(0.03)
    res = rep.step(now)
    assert b.preemptions == 1 and list(rep.waiting) == [b] and rep.running == [a]
    assert res.iterations == 1 and rep.free_blocks == 2  # A decoded alone; B's blocks stay free this step
    res = rep.step(now + res.duration)
    assert rep.running == [a, b] and res.iterations == 1  # admitted again in the next iteration


def test_horizon_stops_a_decode_run() -> None:
    rep = Replica(ReplicaConfig(max_num_seqs=4, max_num_batched_tokens=64, kv_blocks=100), TEN_MS)
    rep.add(Request(0, 0.0, 4, 10), 0.0)
    rep.step(0.0)
    res = rep.step(0.01, horizon=0.035)  # iterations end at 0.02, 0.03 (0.04 is past the horizon)
    assert res.iterations == 2 and res.duration == pytest.approx(0.02)


def test_prefix_cache_hit_skips_cached_blocks() -> None:
    perf = ConstantPerf(base_s=0.0, per_token_s=1e-4)
    rep = Replica(ReplicaConfig(max_num_seqs=4, max_num_batched_tokens=8192, kv_blocks=1000), perf)
    a = Request(0, 0.0, 600, 5, prefix_hashes=(7, 8))
    rep.add(a, 0.0)
    assert rep.step(0.0).duration == pytest.approx(0.06)  # 600 tokens
    b = Request(1, 0.06, 600, 5, prefix_hashes=(7, 9))  # shares the first 512-token block
    rep.add(b, 0.06)
    # A decodes 1 token, B computes 600 - 512 = 88: 89 tokens -> 8.9 ms
    assert rep.step(0.06).duration == pytest.approx(0.0089)
    assert b.cached_tokens == 512
    assert rep.counters.prefix_hit_tokens == 512 and rep.counters.prefix_queried_tokens == 1200


def test_prefix_hit_never_covers_the_whole_prompt() -> None:
    rep = Replica(ReplicaConfig(max_num_seqs=4, max_num_batched_tokens=8192, kv_blocks=1000), TEN_MS)
    rep.add(Request(0, 0.0, 512, 1, prefix_hashes=(1,)), 0.0)
    run(rep)
    b = Request(1, 1.0, 512, 1, prefix_hashes=(1,))
    rep.add(b, 1.0)
    run(rep, 1.0)
    assert b.cached_tokens == 511  # the last token is always computed to produce the first output


def test_prefix_caching_off() -> None:
    cfg = ReplicaConfig(max_num_seqs=4, max_num_batched_tokens=8192, kv_blocks=1000, enable_prefix_caching=False)
    rep = Replica(cfg, TEN_MS)
    for i in range(2):
        rep.add(Request(i, 0.0, 600, 1, prefix_hashes=(7,)), 0.0)
        run(rep)
    assert rep.counters.prefix_hit_tokens == 0


def test_request_larger_than_kv_is_rejected() -> None:
    rep = Replica(ReplicaConfig(max_num_seqs=4, max_num_batched_tokens=64, kv_blocks=2, block_size=4), TEN_MS)
    assert not rep.add(Request(0, 0.0, 8, 1), 0.0)  # 9 tokens need 3 blocks
    assert rep.counters.rejected == 1 and not rep.has_work


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"max_num_seqs": 0, "max_num_batched_tokens": 64, "kv_blocks": 10}, "max_num_seqs must be > 0"),
        ({"max_num_seqs": 4, "max_num_batched_tokens": 64, "kv_blocks": 0}, "kv_blocks must be > 0"),
        ({"max_num_seqs": 8, "max_num_batched_tokens": 4, "kv_blocks": 10}, "must be >= max_num_seqs"),
    ],
)
def test_impossible_replica_configs(kwargs: dict[str, int], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        ReplicaConfig(kwargs["max_num_seqs"], kwargs["max_num_batched_tokens"], kwargs["kv_blocks"])


def test_physics_decode_step_in_the_replica() -> None:
    eff = Efficiency(bandwidth=0.5, mfu=0.5, step_overhead_s=0.001, allreduce_latency_s=0.0, frontend_latency_s=0.0,
                     kv_bandwidth=0.5)
    perf = PhysicsPerf(H100_SXM_80GB, LLAMA_3_1_8B, 1, eff)
    rep = Replica(ReplicaConfig(max_num_seqs=4, max_num_batched_tokens=2048, kv_blocks=1000), perf)
    r = Request(0, 0.0, 1000, 2)
    rep.add(r, 0.0)
    run(rep)
    # the decode reads 15,009,849,344 B of weights + 1000 x 131,072 B of KV at 3.35e12 x 0.5 B/s
    # = 9.039356 ms, computes one token through the linear layers (2 x 7,504,924,672 FLOP at 494.75e12 FLOP/s
    # = 0.030338 ms), + 1 ms overhead (the attention FLOPs are hidden under its KV reads)
    assert r.finish_s is not None and r.first_token_s is not None
    assert r.finish_s - r.first_token_s == pytest.approx(0.010039356026268658 + 3.0338250316321375e-05, rel=1e-9)


def test_macro_steps_match_single_iterations() -> None:
    """Same timeline whether decode runs are taken whole or cut into single iterations by a horizon."""
    perf = ConstantPerf(base_s=0.001, per_token_s=1e-5, per_kv_token_s=1e-6)

    def simulate(step_horizon: bool) -> list[float]:
        rep = Replica(ReplicaConfig(max_num_seqs=8, max_num_batched_tokens=256, kv_blocks=400), perf)
        reqs = [Request(i, 0.0, 50 + 13 * i, 20 + 7 * i) for i in range(6)]
        for r in reqs:
            rep.add(r, 0.0)
        now = 0.0
        while rep.has_work:
            now += rep.step(now, now if step_horizon else math.inf).duration
        return [r.finish_s or 0.0 for r in reqs]

    assert simulate(True) == pytest.approx(simulate(False), rel=1e-12)


def test_a_decode_run_cut_by_a_horizon_times_each_iteration_as_the_model_does() -> None:
    # a fitted preset's batch of five decoding, cut at a horizon: the iterations the run covers and where it
    # ends are those of the model's step_times over the run, to the last bit (the run times each iteration
    # in scalars and stops at the first past the horizon)
    preset = get_preset("llama-3.1-70b/h100-tp4")
    perf = preset.perf()
    rep = Replica(ReplicaConfig(max_num_seqs=8, max_num_batched_tokens=8192, kv_blocks=10_000), perf)
    for i in range(5):
        rep.add(Request(i, 0.0, 300 + 17 * i, 400), 0.0)
    now = rep.step(0.0).duration  # one prefill iteration for all five
    s0 = float(sum(r._computed for r in rep.running))
    horizon = now + 0.55
    res = rep.step(now, horizon)
    steps = np.arange(399, dtype=np.float64)
    kv = s0 + 5 * steps
    ends = now + np.cumsum(perf.step_times(np.full(399, 5.0), kv, kv + 5))
    covered = int(np.searchsorted(ends, horizon, side="right"))
    assert 1 < covered < 399  # the regime: a run the horizon cuts
    assert res.iterations == covered
    assert now + res.duration == ends[covered - 1]
    assert all(r._last_token_s == ends[covered - 1] for r in rep.running)
