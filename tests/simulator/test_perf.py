"""The performance model, model/hardware arithmetic and presets, against hand-computed numbers."""

from __future__ import annotations

import numpy as np
import pytest

from keda_llm.simulator.hardware.gpus import A100_SXM_80GB, H100_SXM_80GB, L4
from keda_llm.simulator.hardware.models import LLAMA_3_1_8B, LLAMA_3_1_70B
from keda_llm.simulator.hardware.perf import (
    N_COEF,
    ConstantPerf,
    Efficiency,
    PhysicsPerf,
    coefficient_step_time,
    coefficient_step_times,
    step_time,
)
from keda_llm.simulator.hardware.presets import PRESETS, ConfigError, Preset, get_preset

EFF = Efficiency(bandwidth=0.5, mfu=0.5, step_overhead_s=0.001, allreduce_latency_s=13e-6, frontend_latency_s=0.0,
                 kv_bandwidth=0.5)


def test_model_sizes_match_published_parameter_counts() -> None:
    # Meta's model cards: Llama-3.1-8B 8.03B, 70B 70.6B; exact totals of the config shapes:
    assert LLAMA_3_1_8B.params == 8_030_261_248
    assert LLAMA_3_1_70B.params == 70_553_706_496
    # 2 (K,V) x 32 layers x 8 KV heads x 128 dims x 2 bytes
    assert LLAMA_3_1_8B.kv_bytes_per_token == 131_072
    assert LLAMA_3_1_70B.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2 == 327_680
    # bf16 weights 16.06 GB; a decode streams all but the 128256 x 4096 embedding table: 15.01 GB
    assert LLAMA_3_1_8B.weight_bytes == 16_060_522_496
    assert LLAMA_3_1_8B.streamed_weight_bytes == 16_060_522_496 - 2 * 128_256 * 4096 == 15_009_849_344


def test_decode_step_by_hand() -> None:
    perf = PhysicsPerf(H100_SXM_80GB, LLAMA_3_1_8B, 1, EFF)
    # one sequence, empty context: weights 15,009,849,344 B / (3.35e12 B/s x 0.5) = 8.961104 ms, + linear
    # 2 x 7,504,924,672 FLOP / (989.5e12 x 0.5) = 0.030338 ms, + attention of one pair (~1e-9 s), + 1 ms
    assert step_time(perf, 1, 0, 1) == pytest.approx(0.009991443395989352, rel=1e-12)
    # 1000 tokens of context: attention reads 1000 x 131,072 B at 1.675e12 B/s = 0.078252 ms more
    assert step_time(perf, 1, 1000, 1001) == pytest.approx(0.010069694276584978, rel=1e-9)


def test_decode_step_grows_with_the_batch_and_the_context_held() -> None:
    perf = PhysicsPerf(H100_SXM_80GB, LLAMA_3_1_8B, 1, EFF)
    one = step_time(perf, 1, 300, 301)
    # 256 sequences of 300 tokens: the GEMMs' math (256 x 0.030 ms) and the KV reads (256 x 300 x 131 kB)
    # add to the weights: +7.8 ms + 6.0 ms, where a max(memory, compute) roofline would add 6 ms
    batch = step_time(perf, 256, 256 * 300, 256 * 301)
    assert batch - one == pytest.approx(255 * 3.0338250316321375e-05 + 255 * 300 * 131_072 / 1.675e12, rel=1e-6)
    longer = step_time(perf, 256, 256 * 1000, 256 * 1001)
    assert longer - batch == pytest.approx(256 * 700 * 131_072 / 1.675e12, rel=1e-6)


def test_prefill_is_compute_bound_by_hand() -> None:
    perf = PhysicsPerf(H100_SXM_80GB, LLAMA_3_1_8B, 1, EFF)
    # 2048-token prompt: 2 x 7,504,924,672 x 2048 + 4 x 32 layers x 32 heads x 128 x (2048 x 2049 / 2) pairs
    # = 31,840,219,955,200 FLOP / (989.5e12 x 0.5) = 64.356 ms, + the weights streamed once (8.961 ms) + 1 ms
    pairs = 2048 * 2049 / 2
    assert step_time(perf, 2048, 0, pairs) == pytest.approx(0.07431728388425211, rel=1e-12)


def test_a_mixed_step_costs_what_chunked_prefill_costs() -> None:
    # a 2048-token chunk beside 10 decodes of 500 tokens: the weights once, the linear layers for all 2058
    # tokens, attention for both (the chunk's pairs; the decodes' KV reads): the two iterations apart
    # minus one pass over the weights
    perf = PhysicsPerf(H100_SXM_80GB, LLAMA_3_1_8B, 1, EFF)
    chunk, decodes = (2048, 0, 2048 * 2049 / 2), (10, 5000, 5010)
    mixed = step_time(perf, chunk[0] + decodes[0], chunk[1] + decodes[1], chunk[2] + decodes[2])
    weights_and_overhead = 0.008961104085970149 + 0.001
    apart = step_time(perf, *chunk) + step_time(perf, *decodes)
    # attention is max(KV reads, FLOPs) over the iteration: the chunk's FLOPs hide the decodes' reads
    assert apart - weights_and_overhead - 5000 * 131_072 / 1.675e12 <= mixed <= apart - weights_and_overhead
    assert mixed > step_time(perf, *chunk)


def test_tensor_parallel_divides_work_and_adds_allreduces() -> None:
    perf = PhysicsPerf(H100_SXM_80GB, LLAMA_3_1_70B, 4, EFF)
    # comm: 2 all-reduces x 80 layers x (13 us + 8192 x 2 B x 2 x 3/4 / 450e9 B/s) = 2.0887 ms
    # weights: 70,553,706,496 - 1,050,673,152 (embedding) = 69,503,033,344 params x 2 B / 4 GPUs / 1.675e12;
    # linear: 2 x 69,503,033,344 / 4 / 494.75e12
    mem = 69_503_033_344 * 2 / 4 / 1.675e12
    lin = 2 * 69_503_033_344 / 4 / 494.75e12
    assert step_time(perf, 1, 0, 1) == pytest.approx(mem + lin + 0.001 + 0.0020887381333333332, rel=1e-6)


def test_the_mfu_can_differ_by_gpu_architecture() -> None:
    eff = Efficiency(mfu=0.5, mfu_by_arch=(("ampere", 0.8),))
    assert eff.mfu_on(A100_SXM_80GB) == 0.8 and eff.mfu_on(H100_SXM_80GB) == 0.5
    with pytest.raises(ValueError, match="mfu_by_arch"):
        Efficiency(mfu_by_arch=(("ampere", 1.5),))


def test_every_preset_names_the_engine_version_it_was_fitted_on() -> None:
    for p in PRESETS.values():
        assert p.engine.startswith("vLLM 0.6.0")


def test_coefficients_are_the_step_times() -> None:
    cases = np.array([[1, 100, 101], [300, 5e5, 5e5 + 300], [8192, 1e4, 3e7]], dtype=np.float64)
    for perf in (PhysicsPerf(H100_SXM_80GB, LLAMA_3_1_70B, 4, EFF), ConstantPerf(0.01, 1e-5, 1e-8)):
        want = perf.step_times(cases[:, 0], cases[:, 1], cases[:, 2])
        got = coefficient_step_times(perf.coefficients(), cases[:, 0], cases[:, 1], cases[:, 2])
        assert got.tolist() == pytest.approx(want.tolist(), rel=1e-12)
    assert len(ConstantPerf().coefficients()) == N_COEF


def test_fp8_uses_fp8_peak_only_where_the_gpu_has_it() -> None:
    fp8 = LLAMA_3_1_8B.with_weights(1.0, "-FP8")
    assert H100_SXM_80GB.peak_flops(fp8.bytes_per_param) == 1979e12
    assert A100_SXM_80GB.peak_flops(fp8.bytes_per_param) == 312e12
    assert L4.peak_flops(2.0) == 121e12


def test_constant_perf_is_exact() -> None:
    perf = ConstantPerf(base_s=0.01, per_token_s=0.001, per_kv_token_s=0.0001)
    assert step_time(perf, 5, 10, 0) == pytest.approx(0.01 + 0.005 + 0.001)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"bandwidth": 0.0}, "bandwidth"),
        ({"bandwidth": 1.2}, "bandwidth"),
        ({"mfu": 0.0}, "mfu"),
        ({"kv_bandwidth": 0.0}, "kv_bandwidth"),
        ({"step_overhead_s": -1.0}, "step_overhead_s"),
    ],
)
def test_bad_efficiency_is_refused(kwargs: dict[str, float], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        Efficiency(**kwargs)


def test_preset_kv_blocks_by_hand() -> None:
    # (80e9 x 0.9 - 16,060,522,496 - 2e9) / (131,072 x 16) = 25,720.3 -> 25,720 blocks
    assert PRESETS["llama-3.1-8b/h100"].kv_blocks == 25_720
    # per GPU: (72e9 - 141,107,412,992 / 4 - 2e9) / (327,680 / 4 x 16) = 26,491.7 -> 26,491
    assert PRESETS["llama-3.1-70b/h100-tp4"].kv_blocks == 26_491
    # L4: (24e9 x 0.9 - 16,060,522,496 - 1.5e9) / 2,097,152 = 1,926.3
    assert PRESETS["llama-3.1-8b/l4"].kv_blocks == 1_926
    assert PRESETS["llama-3.1-8b/h100"].replica_config().kv_capacity_tokens == 25_720 * 16


def test_weights_that_do_not_fit_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"weights 141\.11 GB per GPU do not fit"):
        Preset("70b-on-one", LLAMA_3_1_70B, H100_SXM_80GB, 1, max_num_seqs=256, max_num_batched_tokens=2048)


def test_no_room_for_kv_is_refused() -> None:
    with pytest.raises(ConfigError, match="no memory left for the KV cache"):
        get_preset("llama-3.1-8b/l4").with_changes(gpu_memory_utilization=0.7)


def test_more_kv_than_memory_is_refused() -> None:
    with pytest.raises(ConfigError, match="needs more KV memory than the GPU has: at most 25720 blocks"):
        get_preset("llama-3.1-8b/h100").with_changes(kv_blocks_override=30_000)


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"max_num_seqs": 0}, "max_num_seqs must be >= 1"),
        ({"max_num_batched_tokens": 100}, "max_num_batched_tokens"),
        ({"kv_blocks_override": 0}, "kv_blocks_override must be >= 1"),
        ({"tp": 0}, "tp must be >= 1"),
    ],
)
def test_zero_capacity_is_refused(changes: dict[str, int], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        get_preset("llama-3.1-8b/a100").with_changes(**changes)


def test_unknown_preset_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"llama-3\.1-8b/h100"):
        get_preset("nope")


def test_the_scalar_step_time_is_the_models_own_to_the_last_bit() -> None:
    # the detailed replica times its decode runs with coefficient_step_time and the fluid kernel compiles it:
    # both must give the very floats the model's step_times gives, or a run's outcome would depend on which
    # path timed it (seeded: decode, prefill and mixed iterations from an empty cache to a full one)
    rng = np.random.default_rng(9)
    new = np.concatenate([rng.integers(1, 1025, 3000), rng.integers(1, 16385, 3000)]).astype(np.float64)
    kv = rng.uniform(0.0, 2e6, new.size)
    pairs = kv + new * rng.uniform(1.0, 4e4, new.size)
    perfs = [p.perf() for p in PRESETS.values()] + [ConstantPerf(base_s=0.01, per_token_s=1e-5, per_kv_token_s=1e-8)]
    for perf in perfs:
        want = perf.step_times(new, kv, pairs)
        coef = tuple(float(x) for x in perf.coefficients())
        got = np.array([coefficient_step_time(coef, *row) for row in zip(new.tolist(), kv.tolist(), pairs.tolist(),
                                                                           strict=True)])
        assert np.array_equal(got, want), type(perf).__name__
