"""A preset from a YAML file: the user's model (its Hugging Face config.json) on the user's GPU.

The strongest check is that a file stating a shipped preset's shape is that preset, to the last timing and
to the last simulated request; the rest: published parameter counts from a config.json, what the roofline
does not model refused by name, every bad value one ConfigError naming its key (fuzzed), the CLIs' one line."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from fuzzing import mutate_tree

from keda_llm.cli import main
from keda_llm.simulator.hardware.preset_file import PresetFileError, load_preset_file, parse_preset, resolve_preset
from keda_llm.simulator.hardware.presets import PRESETS, ConfigError

# meta-llama/Llama-3.1-70B's config.json, the keys the roofline reads (and some it ignores)
LLAMA_70B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "intermediate_size": 28672,
             "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8, "vocab_size": 128256,
             "tie_word_embeddings": False, "torch_dtype": "bfloat16", "max_position_embeddings": 131072,
             "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0, "rope_type": "llama3"}}
# Qwen/Qwen2.5-7B-Instruct's config.json: 7.61 B parameters as published (the model card)
QWEN_7B = {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "intermediate_size": 18944,
           "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, "vocab_size": 152064,
           "tie_word_embeddings": False, "torch_dtype": "bfloat16", "max_position_embeddings": 32768,
           "sliding_window": 131072, "use_sliding_window": False, "max_window_layers": 28}


def _write(tmp_path: Path, doc: dict[str, Any], config: dict[str, Any] | None = None) -> Path:
    if config is not None:
        (tmp_path / "config.json").write_text(json.dumps(config))
    path = tmp_path / "preset.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _70b(tmp_path: Path) -> Path:
    return _write(tmp_path, {"name": "mine", "model": {"config_json": "config.json"}, "gpu": "h100",
                             "tensor_parallel": 4, "max_num_seqs": 1024, "max_num_batched_tokens": 8192}, LLAMA_70B)


def test_a_file_stating_a_shipped_preset_is_that_preset(tmp_path: Path) -> None:
    mine = load_preset_file(_70b(tmp_path))
    shipped = PRESETS["llama-3.1-70b/h100-tp4"]
    assert mine.model.params == shipped.model.params and mine.kv_blocks == shipped.kv_blocks
    assert mine.perf() == shipped.perf().__class__(shipped.gpu, mine.model, 4, shipped.efficiency)
    new = np.array([1.0, 64.0, 2048.0, 8192.0])
    kv = np.array([1000.0, 50_000.0, 200_000.0, 400_000.0])
    assert np.array_equal(mine.perf().step_times(new, kv, new * kv), shipped.perf().step_times(new, kv, new * kv))
    assert mine.cold_start("typical") == shipped.cold_start("typical")


def test_and_simulates_every_request_as_the_shipped_preset_does(tmp_path: Path) -> None:
    from keda_llm.simulator.report.summary import Slo
    from keda_llm.simulator.run import Backtest, run_policies
    from keda_llm.simulator.workload.traces import load_shipped

    trace = load_shipped("azure2023-conv").window(0, 600)
    runs = []
    for preset in (PRESETS["llama-3.1-70b/h100-tp4"], load_preset_file(_70b(tmp_path))):
        bt = Backtest(preset, slo=Slo(2.0, 0.1), mode="detailed", max_replicas=8)
        results, _ = run_policies(trace, bt, ["static"])
        runs.append(results[0])
    a, b = (r.request_table() for r in runs)
    assert len(a.ttft_s) == len(trace)
    assert np.array_equal(a.ttft_s, b.ttft_s) and np.array_equal(a.tpot_s, b.tpot_s, equal_nan=True)
    assert runs[0].gpu_seconds == runs[1].gpu_seconds


def test_a_published_config_json_gives_the_published_parameter_count(tmp_path: Path) -> None:
    p = load_preset_file(_write(tmp_path, {"model": {"config_json": "config.json"}, "gpu": "l4",
                                           "tensor_parallel": 1, "max_num_seqs": 256,
                                           "max_num_batched_tokens": 2048}, QWEN_7B))
    assert p.name == "preset" and p.model.n_kv_heads == 4 and p.model.head_dim == 128
    assert abs(p.model.params / 7.61e9 - 1) < 0.005  # no q/k/v biases in the shape: 0.1 M short of 7.61 B
    # vLLM's sizing: 24 GB x 0.9 - 15.2 GB of weights - 2 GB reserve, at 57,344 bytes a token, in blocks of 16
    per_block = 2 * 28 * 4 * 128 * 2 * 16
    assert p.kv_capacity_tokens == int((24e9 * 0.9 - p.model.weight_bytes - 2e9) // per_block) * 16 == 76_176


def test_a_gpu_by_its_datasheet_figures_and_fp8_weights(tmp_path: Path) -> None:
    doc = {"model": {"config_json": "config.json", "weights": "fp8"}, "tensor_parallel": 2, "max_num_seqs": 512,
           "max_num_batched_tokens": 8192,
           "gpu": {"name": "H200", "arch": "hopper", "bf16_tflops": 989.5, "fp8_tflops": 1979,
                   "memory_gb": 141, "memory_bandwidth_gbps": 4800, "interconnect_gbps": 450}}
    p = load_preset_file(_write(tmp_path, doc, LLAMA_70B))
    assert p.gpu.memory_bytes == 141e9 and p.model.bytes_per_param == 1.0
    h100 = PRESETS["llama-3.1-70b/h100-tp4"].perf()
    # more bandwidth per GPU and half the weight bytes: a decode step is faster than the shipped 70B's
    one = np.array([8.0])
    assert p.perf().step_times(one, one * 2000, one * 2000)[0] < h100.step_times(one, one * 2000, one * 2000)[0]


@pytest.mark.parametrize("change, said", [
    ({"num_local_experts": 8}, "mixture-of-experts"),
    ({"n_routed_experts": 64}, "mixture-of-experts"),
    ({"kv_lora_rank": 512}, "latent attention"),
    ({"sliding_window": 4096, "max_position_embeddings": 32768, "use_sliding_window": True}, "sliding-window"),
])
def test_what_the_roofline_does_not_model_is_refused_by_name(tmp_path: Path, change: dict[str, Any],
                                                              said: str) -> None:
    with pytest.raises(PresetFileError, match=said):
        load_preset_file(_write(tmp_path, {"model": {"config_json": "config.json"}, "gpu": "h100",
                                           "tensor_parallel": 4, "max_num_seqs": 8, "max_num_batched_tokens": 64},
                                {**LLAMA_70B, **change}))


@pytest.mark.parametrize("change, key", [
    ({"tensor_parallel": 3}, "tensor_parallel"),
    ({"tensor_parallel": 1}, "weights"),  # 141 GB of weights on one 80 GB GPU
    ({"gpu": "b300"}, "gpu"),
    ({"gpu": {"arch": "blackwell", "bf16_tflops": 1, "memory_gb": 1, "memory_bandwidth_gbps": 1}}, "gpu.arch"),
    ({"gpu": {"arch": "hopper", "bf16_tflops": float("nan"), "memory_gb": 80, "memory_bandwidth_gbps": 3350}},
     "gpu.bf16_tflops"),
    ({"max_num_seqs": 0}, "max_num_seqs"),
    ({"max_num_seqs": 1.5}, "max_num_seqs"),
    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
    ({"kv_blocks": 10**9}, "kv_blocks 1000000000"),  # the file's key, not the preset's field
    ({"tensor_parallel": 16}, "KV heads replicated"),  # vLLM would replicate 8 KV heads over 16 GPUs
    ({"max_num_seqs": 10**400}, "max_num_seqs: an integer of"),  # never through a float (OverflowError)
    ({"activation_reserve_gb": -(10**400)}, "activation_reserve_gb"),
    ({"model": {"config_json": "config.json", "intermediate_size": 28673}}, "intermediate_size"),
    ({"colour": "red"}, "colour"),
    ({"model": {"config_json": "missing.json"}}, "model.config_json"),
    ({"model": {"config_json": "config.json", "weights": "int4"}}, "model.weights"),
])
def test_every_bad_value_is_one_error_naming_its_key(tmp_path: Path, change: dict[str, Any], key: str) -> None:
    doc = {"model": {"config_json": "config.json"}, "gpu": "h100", "tensor_parallel": 4, "max_num_seqs": 8,
           "max_num_batched_tokens": 64, **change}
    with pytest.raises(PresetFileError) as err:
        load_preset_file(_write(tmp_path, doc, LLAMA_70B))
    assert key in str(err.value) and "\n" not in str(err.value) and "preset.yaml" in str(err.value)


def test_files_that_are_not_presets(tmp_path: Path) -> None:
    for name, data in (("bin.yaml", b"\xff\xfe\x00"), ("big.yaml", b"a: 1\n" * 300_000), ("bad.yaml", b"a: [1\n"),
                       ("list.yaml", b"- 1\n"), ("deep.yaml", b"[" * 5000)):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(PresetFileError):
            resolve_preset(str(tmp_path / name))
    with pytest.raises(PresetFileError, match="cannot read"):
        resolve_preset(str(tmp_path / "none.yaml"))
    with pytest.raises(ConfigError, match="unknown preset"):
        resolve_preset("llama-3.1-8b/b200")
    assert resolve_preset("llama-3.1-8b/l4") is PRESETS["llama-3.1-8b/l4"]


def test_fuzz_only_the_documented_error_escapes(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_70B))
    good = {"name": "x", "model": {"config_json": "config.json", "weights": "bf16", "kv_cache": "fp8"}, "gpu":
            {"name": "g", "arch": "hopper", "bf16_tflops": 989.5, "fp8_tflops": 1979, "memory_gb": 80,
             "memory_bandwidth_gbps": 3350, "interconnect_gbps": 450},
            "tensor_parallel": 4, "max_num_seqs": 256, "max_num_batched_tokens": 8192,
            "gpu_memory_utilization": 0.9, "activation_reserve_gb": 2, "block_size": 16, "enable_prefix_caching": True,
            "efficiency": {"bandwidth": 0.8, "mfu": 0.5, "step_overhead_s": 0.001, "engine": "mine"},
            "cold_start": {"image_gb": 8, "storage_mb_per_s": 1000, "warmup_s": 30, "p90_over_median": 1.5}}
    parse_preset(good, base=tmp_path)
    rng = random.Random(20261130)
    parsed = refused = 0
    for _ in range(5000):
        try:
            parse_preset(mutate_tree(rng, good), base=tmp_path)
            parsed += 1
        except ConfigError:
            refused += 1
    assert parsed > 200 and refused > 2000


def test_the_commands_take_a_preset_file_and_refuse_a_bad_one_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _write(tmp_path, {"model": {"config_json": "config.json"}, "gpu": "h100", "tensor_parallel": 3,
                            "max_num_seqs": 8, "max_num_batched_tokens": 64}, LLAMA_70B)
    for argv in (["simulate", "--trace", "azure2023-conv", "--preset", str(bad)],
                 ["tune", "--trace", "azure2023-conv", "--preset", str(bad), "--slo-ttft", "2", "--slo-itl", "0.1"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "tensor_parallel" in err and "hint:" in err and "docs/simulator.md" in err
    good = _70b(tmp_path)
    out = tmp_path / "out"
    assert main(["simulate", "--trace", "azure2023-conv", "--window", "0:300", "--preset", str(good),
                 "--policies", "static", "--mode", "detailed", "--quiet", "--out", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["preset"] == "mine"


def test_the_docs_example_is_a_preset_that_loads(tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "simulator.md").read_text()
    block = text.split("### Your own model and GPU", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    doc = yaml.safe_load(block)
    (tmp_path / "Qwen2.5-7B-Instruct").mkdir()
    (tmp_path / "Qwen2.5-7B-Instruct" / "config.json").write_text(json.dumps(QWEN_7B))
    p = load_preset_file(_write(tmp_path, doc))
    assert p.name == "qwen2.5-7b/l4" and p.model.name == "Qwen2.5-7B-Instruct" and p.kv_blocks == doc["kv_blocks"]
    gpu = yaml.safe_load(block.split("# gpu: ", 1)[1].split("\ntensor_parallel", 1)[0].replace("#", ""))
    assert parse_preset({**doc, "gpu": gpu, "kv_blocks": None}, base=tmp_path).gpu.name == "H200"


def test_a_quantized_checkpoint_is_read_as_fp8_only_where_its_weights_are_8_bit_floats(tmp_path: Path) -> None:
    def weights(quant: dict[str, Any]) -> float:
        doc = {"model": {"config_json": "config.json"}, "gpu": "h100", "tensor_parallel": 4, "max_num_seqs": 8,
               "max_num_batched_tokens": 64}
        shape = {**LLAMA_70B, "quantization_config": quant}
        return load_preset_file(_write(tmp_path, doc, shape)).model.bytes_per_param

    fp8 = {"quant_method": "compressed-tensors",
           "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}, "targets": ["Linear"]}}}
    assert weights(fp8) == 1.0 and weights({"quant_method": "fp8"}) == 1.0
    w4a16 = {"quant_method": "compressed-tensors",
             "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int"}, "targets": ["Linear"]}}}
    for quant in (w4a16, {"quant_method": "awq", "bits": 4}, {"quant_method": "compressed-tensors"}):
        with pytest.raises(PresetFileError, match=r"model\.weights: config\.json's quantization"):
            weights(quant)


def test_config_json_defaults_read_as_transformers_reads_them(tmp_path: Path) -> None:
    """save_pretrained leaves out what equals PretrainedConfig's default: no tie_word_embeddings means tied; a
    null num_key_value_heads means as many as the attention heads (no GQA)."""
    shape = {k: v for k, v in QWEN_7B.items() if k != "tie_word_embeddings"} | {"num_key_value_heads": None}
    p = load_preset_file(_write(tmp_path, {"model": {"config_json": "config.json"}, "gpu": "h100",
                                           "tensor_parallel": 1, "max_num_seqs": 8, "max_num_batched_tokens": 64},
                                shape))
    assert p.model.tied_embeddings and p.model.n_kv_heads == 28
    untied = load_preset_file(_write(tmp_path, {"model": {"config_json": "config.json"}, "gpu": "h100",
                                                "tensor_parallel": 1, "max_num_seqs": 8,
                                                "max_num_batched_tokens": 64}, QWEN_7B))
    assert untied.model.params - p.model.params == 152064 * 3584 - (28 - 4) * 128 * 3584 * 2 * 28


def test_an_efficiency_section_stands_for_another_engine_version(tmp_path: Path) -> None:
    """A user who measured their engine sets what it reaches of the datasheet; the keys not set stay fitted."""
    from keda_llm.simulator.hardware.perf import FITTED

    base = {"model": {"config_json": "config.json"}, "gpu": "h100", "tensor_parallel": 4, "max_num_seqs": 256,
            "max_num_batched_tokens": 8192}
    fitted = load_preset_file(_write(tmp_path, base, LLAMA_70B))
    assert fitted.efficiency == FITTED
    faster = load_preset_file(_write(tmp_path, {**base, "efficiency": {"bandwidth": 0.85, "step_overhead_s": 0.0004,
                                                                       "engine": "vLLM 0.11 (V1)"}}, LLAMA_70B))
    assert (faster.efficiency.bandwidth, faster.efficiency.mfu, faster.engine) == (0.85, FITTED.mfu, "vLLM 0.11 (V1)")
    one = np.array([32.0])
    assert faster.perf().step_times(one, one * 1000, one * 1000)[0] < fitted.perf().step_times(one, one * 1000,
                                                                                              one * 1000)[0]
    only_a_label = load_preset_file(_write(tmp_path, {**base, "efficiency": {"engine": "vLLM 0.11"}}, LLAMA_70B))
    assert only_a_label.efficiency == FITTED  # no number changed: the timing still says what it was fitted on
    for bad, key in (({"bandwidth": 1.5}, "efficiency.bandwidth"), ({"mfu": float("nan")}, "efficiency.mfu"),
                     ({"speed": 2}, "efficiency.speed")):
        with pytest.raises(PresetFileError, match=key):
            load_preset_file(_write(tmp_path, {**base, "efficiency": bad}, LLAMA_70B))


def test_a_cold_start_section_makes_the_backtests_cold_start_the_users(tmp_path: Path) -> None:
    """The scaler measures the cold start live; a backtest's comes from the preset: what the user knows of their
    image, storage and engine init. With none set, the shipped model's."""
    base = {"model": {"config_json": "config.json"}, "gpu": "h100", "tensor_parallel": 4, "max_num_seqs": 256,
            "max_num_batched_tokens": 8192}
    shipped = PRESETS["llama-3.1-70b/h100-tp4"].cold_start("typical")
    assert load_preset_file(_write(tmp_path, base, LLAMA_70B)).cold_start("typical") == shipped
    mine = load_preset_file(_write(tmp_path, {**base, "cold_start": {
        "image_gb": 0, "storage_mb_per_s": 2000, "scheduling_s": 2, "warmup_s": 30, "p90_over_median": 1.2}},
        LLAMA_70B)).cold_start("typical")
    medians = {ph.name: ph.median_s for ph in mine.phases}
    weights_per_gpu = PRESETS["llama-3.1-70b/h100-tp4"].model.weight_bytes / 4
    assert medians == {"scheduling": 2.0, "image_pull": 0.0, "weight_load": weights_per_gpu / 2e9, "warmup": 30.0}
    assert mine.quantile(0.9) < shipped.quantile(0.5)  # 35 GB at 2 GB/s and no pull: well under the shipped
    for bad, key in (({"warmup_s": -1}, "cold_start.warmup_s"), ({"storage_mb_per_s": 0}, "cold_start.storage"),
                     ({"image": 3}, "cold_start.image")):
        with pytest.raises(PresetFileError, match=key):
            load_preset_file(_write(tmp_path, {**base, "cold_start": bad}, LLAMA_70B))
