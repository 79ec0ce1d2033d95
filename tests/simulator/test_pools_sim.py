"""simulator/pools.py: the pools' lifecycle, the two-pool and the variants fluid models, by hand where
the numbers allow it and by conservation (every request served, GPU time adds up) where they do not."""

from __future__ import annotations

import numpy as np
import pytest

from keda_llm.simulator.control.anchors.dynamo import disaggregated_replicas
from keda_llm.simulator.hardware.perf import ConstantPerf
from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.hardware.replica import ReplicaConfig
from keda_llm.simulator.pools import (
    PdSetup,
    PdSimulation,
    Pool,
    VariantSpec,
    VariantsSimulation,
    shifted_trace,
)
from keda_llm.simulator.workload.traces import Trace

H100_70B = get_preset("llama-3.1-70b/h100-tp4")


def steady(n: int, every_s: float, prompt: int, output: int, name: str = "steady") -> Trace:
    return Trace(name, np.arange(n, dtype=np.float64) * every_s, np.full(n, prompt, dtype=np.int32),
                 np.full(n, output, dtype=np.int32))


def test_pool_lifecycle() -> None:
    p = Pool(["a", "b"], next_pod=2)
    p.scale_to(4, now=10.0, cold_start_s=100.0)
    assert (p.ready, p.spec, p.starting) == (2, 4, [(110.0, "r2"), (110.0, "r3")])
    p.advance(109.0)
    assert p.ready == 2
    p.scale_to(3, now=109.0, cold_start_s=100.0)  # the newest starting pod goes first, nothing drains
    assert (p.ready, p.spec, p.draining) == (2, 3, 0)
    p.advance(110.0)
    assert p.pods == ["a", "b", "r2"] and p.starting == []
    p.scale_to(1, now=111.0, cold_start_s=100.0)
    assert (p.pods, p.draining) == (["a"], 2)


def test_hpa_scale_down_stabilization_keeps_the_largest_count_of_the_window() -> None:
    p = Pool(["a", "b", "c"], next_pod=3, recs=[(0.0, 3)])
    p.recommend(1, now=100.0, window_s=300.0, cold_start_s=60.0)
    assert p.spec == 3  # 3 was recommended within 300 s
    p.recommend(2, now=301.0, window_s=300.0, cold_start_s=60.0)
    assert p.spec == 2  # (0, 3) left the window; the largest since is 2
    p.recommend(5, now=302.0, window_s=300.0, cold_start_s=60.0)
    assert p.spec == 5  # up at once


def test_shifted_trace_is_the_first_before_and_the_second_after() -> None:
    a, b = steady(10, 1.0, 100, 50, "a"), steady(10, 1.0, 2000, 10, "b")
    s = shifted_trace(a, b, at_s=5.0)
    assert s.arrival_s.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert s.prompt_tokens.tolist() == [100] * 5 + [2000] * 5
    assert s.output_tokens.tolist() == [50] * 5 + [10] * 5


def test_a_light_steady_load_is_served_within_the_slo_by_every_controller() -> None:
    # 1 request/s of 1000 prompt tokens and 50 output tokens for 5 minutes: one prefill and one decode
    # replica of 70B on 4 H100s carry it many times over, so every controller keeps its warm start
    tr = steady(300, 1.0, 1000, 50)
    setup = PdSetup(H100_70B, ttft_slo_s=2.0, itl_slo_s=0.1)
    for mode in ("unified", "fixed", "independent", "bounded", "dynamo-pd"):
        sim = PdSimulation(tr, setup, mode)
        assert sim.warm_counts() == (1, 1)
        r = sim.run()
        assert (r.finished, r.arrived) == (300, 300), mode
        assert r.slo_attainment == 1.0, mode
        # the first token comes after the prompt's prefill (and, disaggregated, its KV transfer)
        floor = 1000 / sim.prefill_tps
        assert r.ttft_p50 >= floor, mode
        if mode == "unified":
            assert r.mean_prefill == 0.0
        else:
            assert r.mean_prefill >= 1.0 and r.mean_decode >= 1.0
        # GPU time: every pool's replicas x 4 GPUs, every simulated second
        assert r.gpu_hours >= (r.mean_prefill + r.mean_decode) * 4 * 300 / 3600 - 1e-9


def test_disaggregated_ttft_includes_the_kv_transfer() -> None:
    # one request of 8000 tokens: prefill 8000 / tps, then 8000 x KV bytes per token over 1 GB/s
    tr = steady(1, 1.0, 8000, 5)
    slow = PdSimulation(tr, PdSetup(H100_70B, transfer_gbps=1.0), "independent")
    fast = PdSimulation(tr, PdSetup(H100_70B, transfer_gbps=1000.0), "independent")
    r_slow, r_fast = slow.run(), fast.run()
    transfer = 8000 * H100_70B.model.kv_bytes_per_token / 1e9
    assert r_slow.ttft_p50 - r_fast.ttft_p50 == pytest.approx(transfer - transfer / 1000, rel=1e-6)


def test_fixed_ratio_keeps_more_decode_than_independent_when_the_work_is_prompt_heavy() -> None:
    # long prompts, short answers (code-like): prefill needs several replicas, decode one. fixed 1:2 ends
    # with decode = 2 x prefill or one less (prefill = ceil(decode / 2)); independent keeps less decode
    tr = steady(1200, 0.25, 4000, 20)
    setup = PdSetup(H100_70B, cold_start_s=60.0)
    fixed_sim = PdSimulation(tr, setup, "fixed")
    fixed = fixed_sim.run()
    p, d = fixed_sim.prefill.spec, fixed_sim.decode.spec
    assert p >= 2 and d in (2 * p - 1, 2 * p)
    independent = PdSimulation(tr, setup, "independent").run()
    assert independent.mean_decode < fixed.mean_decode
    assert independent.gpu_hours < fixed.gpu_hours


def test_pods_past_what_the_cluster_schedules_stay_pending_and_cost_nothing() -> None:
    # the A100 variant alone, at most 1 schedulable: whatever the scaler asks past 1 stays Pending
    tr = steady(1800, 0.1, 2000, 100)
    vs = [VariantSpec("a100", get_preset("llama-3.1-8b/a100"), 1.8, 1),
          VariantSpec("h100", get_preset("llama-3.1-8b/h100"), 4.1)]
    r = VariantsSimulation(tr, vs, "a100").run()
    assert r.pending_s > 0
    assert r.mean_replicas["a100"] <= 1.0 + 1e-9
    assert r.cost == pytest.approx(r.gpu_hours * 1.8)  # one GPU a replica, billed only while scheduled
    mix = VariantsSimulation(tr, vs, "mix").run()
    assert mix.mean_replicas["h100"] > 0  # the mix spills to the H100s
    assert mix.finished > r.finished or mix.slo_attainment > r.slo_attainment


def test_dynamo_disaggregated_planner_by_hand() -> None:
    # one iteration: 10 ms + 0.1 ms per new token. Prefill of 1000 tokens: 0.11 s -> 9090.9 tok/s.
    # Decode at the 13.2 ms ITL SLA: batch <= 32 by time, <= 14 by KV (16000 tokens / 1100 of context each):
    # 14 per 11.4 ms = 1228.1 tok/s. 20 req/s: prefill 20000 / 9090.9 = 2.2 -> 3; decode 4000 / 1228.1 = 3.26 -> 4
    perf = ConstantPerf(base_s=0.01, per_token_s=1e-4)
    cfg = ReplicaConfig(max_num_seqs=64, max_num_batched_tokens=2048, kv_blocks=1000, block_size=16)
    assert disaggregated_replicas(perf, cfg, 20.0, 1000.0, 200.0, 0.0132) == (3, 4)
    assert disaggregated_replicas(perf, cfg, 0.0, 1000.0, 200.0, 0.0132) == (1, 1)


def test_the_mix_moves_to_the_cheaper_variant_and_a_removed_replica_finishes_what_it_holds() -> None:
    # 4 requests/s of 1000 prompt and 200 output tokens for 20 minutes. The mix starts warm on the H100s (the
    # variant listed last); an A100 replica at 1.0/h carries this load's share for far less than an H100 at
    # 4.1/h (about 1.8x less rate for 4.1x less price), so the split moves it to A100s. The H100 replicas
    # it removes hold requests: they finish them (every request served).
    tr = steady(4800, 0.25, 1000, 200)
    vs = [VariantSpec("a100", get_preset("llama-3.1-8b/a100"), 1.0),
          VariantSpec("h100", get_preset("llama-3.1-8b/h100"), 4.1)]
    r = VariantsSimulation(tr, vs, "mix").run()
    assert (r.finished, r.arrived) == (4800, 4800)
    assert r.mean_replicas["a100"] > r.mean_replicas["h100"]
    assert r.slo_attainment > 0.95
