"""A preset from a YAML file: the user's own model (a Hugging Face config.json) on the user's own GPU.

The shipped presets are four: Llama 3.1 8B on H100, A100 and L4, 70B on four H100s. A user who serves
another dense model, or on another GPU, tunes on a preset of their own: the model's shape (its config.json,
as published with the weights), the GPU's datasheet figures (or a known GPU's name), the tensor-parallel
degree and vLLM's limits. The timing is the same roofline with the same fitted efficiencies
(`perf.FITTED`), so a file that states a shipped preset's shape gives that preset exactly
(tests/simulator/test_preset_file.py). What the model does not cover is refused, not approximated:
mixture-of-experts, latent attention (MLA) and sliding-window attention change where the time goes.

    name: qwen2.5-32b/h100-tp2
    model:
      config_json: Qwen2.5-32B-Instruct/config.json   # relative to this file; or the keys inline
      weights: bf16                                   # bf16, fp16 or fp8 [from config.json]
    gpu: h100                                         # h100, a100, a100-40gb, l4, or a mapping (below)
    tensor_parallel: 2
    max_num_seqs: 256
    max_num_batched_tokens: 8192
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from keda_llm.common import yamltext
from keda_llm.simulator.hardware.coldstart import ColdStartAssumptions
from keda_llm.simulator.hardware.gpus import A100_SXM_40GB, A100_SXM_80GB, GIGA, GPU, GPUS, H100_SXM_80GB, L4, TERA
from keda_llm.simulator.hardware.models import ModelSpec
from keda_llm.simulator.hardware.perf import FITTED, Efficiency
from keda_llm.simulator.hardware.presets import PRESETS, ConfigError, Preset, get_preset

#: The most a preset file or a config.json may hold: both are a screenful; a larger file is not one.
MAX_FILE_BYTES = 1 << 20
#: GPU names a file may give instead of the figures (besides GPUS' own names).
GPU_ALIASES = {"h100": H100_SXM_80GB, "a100": A100_SXM_80GB, "a100-40gb": A100_SXM_40GB, "l4": L4}
#: Architectures the efficiencies were fitted on (perf.FITTED: an MFU per architecture where they differ).
ARCHES = ("hopper", "ampere", "ada")
WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
_TOP = {"name", "model", "gpu", "tensor_parallel", "max_num_seqs", "max_num_batched_tokens",
        "gpu_memory_utilization", "activation_reserve_gb", "kv_blocks", "block_size", "enable_prefix_caching",
        "efficiency", "cold_start"}
#: The cold start's assumptions a file may set (coldstart.ColdStartAssumptions), in the units users measure:
#: key -> (field, factor to the field's unit, bounds in the file's unit)
_COLD_START = {
    "image_gb": ("image_bytes", 1e9, (0.0, 1e4)),  # the serving image, pulled on a node without it
    "registry_mb_per_s": ("registry_bandwidth", 1e6, (1.0, 1e6)),
    "storage_mb_per_s": ("storage_bandwidth", 1e6, (1.0, 1e6)),  # weights from network storage, per GPU
    "local_mb_per_s": ("local_bandwidth", 1e6, (1.0, 1e6)),  # weights from local disk (the `fast` case)
    "scheduling_s": ("schedule_s", 1.0, (0.0, 3600.0)),
    "warmup_s": ("warmup_s", 1.0, (0.0, 3600.0)),  # engine init: profiling, compile, CUDA graphs
    "p90_over_median": ("tail", 1.0, (1.0, 10.0)),
}
#: What an engine version reaches of the datasheet (perf.Efficiency), each key's bounds: a file may set any of
#: them to stand for another engine version, fitted on the user's own measurements; the rest stay FITTED's.
_EFFICIENCY = {"bandwidth": (0.01, 1.0), "mfu": (0.01, 1.0), "kv_bandwidth": (0.01, 1.0),
               "step_overhead_s": (0.0, 1.0), "allreduce_latency_s": (0.0, 0.1), "frontend_latency_s": (0.0, 10.0)}
_MODEL = {"config_json", "name", "weights", "kv_cache", "hidden_size", "num_hidden_layers", "num_attention_heads",
          "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size", "tie_word_embeddings",
          "use_sliding_window"}
_GPU = {"name", "arch", "bf16_tflops", "fp8_tflops", "memory_gb", "memory_bandwidth_gbps", "interconnect_gbps"}
#: config.json keys that say the model is not a dense GQA transformer the roofline times.
_UNMODELLED = {
    "num_local_experts": "a mixture-of-experts model", "num_experts": "a mixture-of-experts model",
    "n_routed_experts": "a mixture-of-experts model", "kv_lora_rank": "multi-head latent attention (MLA)",
}


class PresetFileError(ConfigError):
    """A preset file that cannot be used: the message names the file and the key."""


def resolve_preset(text: str) -> Preset:
    """A shipped preset by name, or a preset file (a path ending in .yaml or .yml, or any file that exists)."""
    if text in PRESETS:
        return PRESETS[text]
    path = Path(text)
    if path.suffix.lower() in (".yaml", ".yml") or path.is_file():
        return load_preset_file(path)
    return get_preset(text)  # the unknown-name error, listing the shipped ones


def load_preset_file(path: str | Path) -> Preset:
    """The preset a YAML file states; ConfigError naming the file and the key for anything wrong."""
    p = Path(path)
    try:
        raw = _read(p, "preset file")
    except ConfigError as err:
        raise PresetFileError(str(err)) from None
    try:
        doc = yamltext.load(raw)
    except yamltext.YAMLTextError as err:
        raise PresetFileError(f"{p}: not YAML: {err}") from None
    try:
        return parse_preset(doc, base=p.parent, default_name=p.stem)
    except ConfigError as err:
        raise PresetFileError(f"{p}: {err}") from None


def parse_preset(doc: object, base: Path, default_name: str = "custom") -> Preset:
    """A preset from a parsed YAML document; config_json paths are relative to `base`."""
    top = _mapping(doc, "", _TOP)
    for key in ("model", "gpu", "tensor_parallel", "max_num_seqs", "max_num_batched_tokens"):
        if key not in top:
            raise ConfigError(f"{key}: required (keys: {', '.join(sorted(_TOP))})")
    name = _text(top.get("name", default_name), "name")
    model = _model(top["model"], base)
    gpu = _gpu(top["gpu"])
    tp = _int(top["tensor_parallel"], "tensor_parallel", 1, 64)
    if model.n_heads % tp:
        raise ConfigError(f"tensor_parallel: {tp} does not divide the model's {model.n_heads} attention heads: "
                          "vLLM refuses this split")
    if model.n_kv_heads % tp:
        # vLLM would replicate the KV heads over the GPUs (or refuse the split); the KV cache and the
        # roofline here divide the KV heads among them, so either would be misread
        raise ConfigError(f"tensor_parallel: {tp} does not divide the model's {model.n_kv_heads} KV heads: KV heads "
                          "replicated across GPUs are not modelled")
    if model.intermediate % tp:
        raise ConfigError(f"tensor_parallel: {tp} does not divide the model's intermediate_size "
                          f"{model.intermediate}: vLLM refuses this split")
    reserve = _number(top.get("activation_reserve_gb", 2.0), "activation_reserve_gb", 0.0, 1e4)
    try:
        preset = Preset(
            name=name, model=model, gpu=gpu, tp=tp,
            max_num_seqs=_int(top["max_num_seqs"], "max_num_seqs", 1, 1 << 20),
            max_num_batched_tokens=_int(top["max_num_batched_tokens"], "max_num_batched_tokens", 1, 1 << 24),
            gpu_memory_utilization=_number(top.get("gpu_memory_utilization", 0.9), "gpu_memory_utilization", 0.01,
                                           1.0),
            activation_reserve_bytes=reserve * GIGA,
            block_size=_int(top.get("block_size", 16), "block_size", 1, 1024),
            kv_blocks_override=None if top.get("kv_blocks") is None else _int(top["kv_blocks"], "kv_blocks", 1,
                                                                               1 << 40),
            enable_prefix_caching=_bool(top.get("enable_prefix_caching", True), "enable_prefix_caching"),
            efficiency=_efficiency(top.get("efficiency")),
            cold_start_assumptions=_cold_start(top.get("cold_start")),
        )
    except ConfigError as err:  # the preset's own checks: named by the file's keys
        raise ConfigError(str(err).removeprefix(f"preset {name}: ").replace("kv_blocks_override", "kv_blocks")) \
            from None
    return preset


def _model(value: object, base: Path) -> ModelSpec:
    m = _mapping(value, "model", _MODEL)
    shape: dict[str, Any] = {}
    source = ""
    if "config_json" in m:
        path = base / _text(m["config_json"], "model.config_json")
        try:
            loaded = json.loads(_read(path, "model.config_json"))
        except (ValueError, RecursionError) as err:  # JSONDecodeError, or an integer past 4,300 digits
            raise ConfigError(f"model.config_json: {path.name}: not JSON: {err}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"model.config_json: {path.name}: not a JSON object")
        shape.update(loaded.get("text_config", {}) if isinstance(loaded.get("text_config"), dict) else {})
        shape.update({k: v for k, v in loaded.items() if k != "text_config"})
        source = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    shape.update({k: v for k, v in m.items() if k not in ("config_json", "name", "weights", "kv_cache")})
    for key, what in _UNMODELLED.items():
        if shape.get(key):
            raise ConfigError(f"model: {what} ({key} {shape[key]!r}) is not modelled: the roofline times a dense "
                              "transformer")
    window, context = shape.get("sliding_window"), shape.get("max_position_embeddings")
    if window and shape.get("use_sliding_window", True) is not False and not (
            isinstance(window, int | float) and isinstance(context, int | float) and window >= context):
        raise ConfigError(f"model: sliding-window attention (sliding_window {window!r}) is not modelled: the "
                          "roofline reads every token's KV (use_sliding_window: false where the engine serves it so)")
    need = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
    for key in need:
        if key not in shape:
            raise ConfigError(f"model.{key}: required (from config_json, or given inline)")
    hidden = _int(shape["hidden_size"], "model.hidden_size", 1, 1 << 20)
    heads = _int(shape["num_attention_heads"], "model.num_attention_heads", 1, 1 << 14)
    kv = shape.get("num_key_value_heads")
    kv_heads = heads if kv is None else _int(kv, "model.num_key_value_heads", 1, 1 << 14)  # none: as many as heads
    head_dim = (_int(shape["head_dim"], "model.head_dim", 1, 1 << 14) if shape.get("head_dim") is not None
                else hidden // heads)
    weights = _weights(m, shape)
    kv_bytes = WEIGHT_BYTES[_choice(m.get("kv_cache", "bf16"), "model.kv_cache", tuple(WEIGHT_BYTES))]
    try:
        return ModelSpec(
            name=_text(m.get("name", shape.get("_name_or_path") or source or "custom"), "model.name"),
            n_layers=_int(shape["num_hidden_layers"], "model.num_hidden_layers", 1, 1 << 12),
            hidden=hidden, n_heads=heads, n_kv_heads=kv_heads, head_dim=head_dim,
            intermediate=_int(shape["intermediate_size"], "model.intermediate_size", 1, 1 << 22),
            vocab=_int(shape["vocab_size"], "model.vocab_size", 1, 1 << 24), bytes_per_param=weights,
            # absent means tied: transformers' PretrainedConfig default, which save_pretrained leaves out
            kv_bytes_per_elem=kv_bytes, tied_embeddings=_bool(shape.get("tie_word_embeddings", True),
                                                              "model.tie_word_embeddings"),
            source=source,
        )
    except ValueError as err:
        raise ConfigError(f"model: {err}") from None


def _weights(m: Mapping[str, Any], shape: Mapping[str, Any]) -> float:
    if "weights" in m:
        return WEIGHT_BYTES[_choice(m["weights"], "model.weights", tuple(WEIGHT_BYTES))]
    quant = shape.get("quantization_config")
    if isinstance(quant, dict):
        method = str(quant.get("quant_method", "")).lower()
        if method in ("fp8", "fbgemm_fp8") or (method == "compressed-tensors" and _fp8_groups(quant)):
            return 1.0
        raise ConfigError(f"model.weights: config.json's quantization {method!r} is not modelled (bf16, fp16, fp8): "
                          "set model.weights to the nearest")
    dtype = str(shape.get("torch_dtype", "bfloat16"))
    return 1.0 if "float8" in dtype else 2.0


def _efficiency(value: object) -> Efficiency:
    """FITTED with the file's `efficiency` keys over it; a file that sets any names the engine it stands for
    as its own (`engine`, else "fitted by the user"), and one MFU for every architecture."""
    if value is None:
        return FITTED
    e = _mapping(value, "efficiency", {*_EFFICIENCY, "engine"})
    changes: dict[str, Any] = {k: _number(e[k], f"efficiency.{k}", *_EFFICIENCY[k]) for k in _EFFICIENCY if k in e}
    label = _text(e.get("engine", "fitted by the user (preset file)"), "efficiency.engine")
    if not changes:  # no number changed: the timing is still the fitted engine's, and says so
        return FITTED
    changes["engine"] = label
    if "mfu" in changes:
        changes["mfu_by_arch"] = ()  # the user's MFU is for their GPU, whatever its architecture
    return replace(FITTED, **changes)


def _cold_start(value: object) -> ColdStartAssumptions | None:
    """The file's cold-start assumptions over the defaults (None: the defaults): what the user knows of their
    image, storage and engine init, so the backtest's cold start is theirs (the scaler measures it live)."""
    if value is None:
        return None
    c = _mapping(value, "cold_start", set(_COLD_START))
    changes = {field: _number(c[key], f"cold_start.{key}", *bounds) * factor
               for key, (field, factor, bounds) in _COLD_START.items() if key in c}
    return replace(ColdStartAssumptions(), **changes)


def _fp8_groups(quant: Mapping[str, Any]) -> bool:
    """Whether a compressed-tensors checkpoint's weights are 8-bit floats in every group (W8A8 FP8), the one
    of its schemes the roofline times; W4A16 and the integer schemes are not."""
    groups = quant.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        return False
    for group in groups.values():
        weights = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(weights, dict) or weights.get("num_bits") != 8 or weights.get("type") != "float":
            return False
    return True


def _gpu(value: object) -> GPU:
    if isinstance(value, str):
        gpu = GPU_ALIASES.get(value.lower()) or GPUS.get(value)
        if gpu is None:
            raise ConfigError(f"gpu: {value!r}: not a known GPU ({', '.join([*GPU_ALIASES, *GPUS])}); give its "
                              f"figures as a mapping ({', '.join(sorted(_GPU))})")
        return gpu
    g = _mapping(value, "gpu", _GPU)
    for key in ("arch", "bf16_tflops", "memory_gb", "memory_bandwidth_gbps"):
        if key not in g:
            raise ConfigError(f"gpu.{key}: required for a GPU given by its figures")
    arch = _choice(g["arch"], "gpu.arch", ARCHES)
    fp8 = g.get("fp8_tflops")
    return GPU(
        name=_text(g.get("name", "custom"), "gpu.name"), arch=arch,
        peak_bf16_flops=_number(g["bf16_tflops"], "gpu.bf16_tflops", 1.0, 1e6) * TERA,
        peak_fp8_flops=None if fp8 is None else _number(fp8, "gpu.fp8_tflops", 1.0, 1e6) * TERA,
        hbm_bandwidth=_number(g["memory_bandwidth_gbps"], "gpu.memory_bandwidth_gbps", 1.0, 1e6) * GIGA,
        memory_bytes=_number(g["memory_gb"], "gpu.memory_gb", 0.5, 1e5) * GIGA,
        interconnect_bandwidth=_number(g.get("interconnect_gbps", 32.0), "gpu.interconnect_gbps", 0.1, 1e5) * GIGA,
        source="preset file",
    )


# ---- values: each names its key in the ConfigError ----

def _read(path: Path, key: str) -> str:
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise ConfigError(f"{key}: cannot read {path.name}: {err.strerror or err}") from None
    except ValueError:  # a NUL in the path
        raise ConfigError(f"{key}: cannot read {path.name!r}: not a path") from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(f"{key}: {path.name} is over {MAX_FILE_BYTES >> 20} MiB: not a preset or a config.json")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"{key}: {path.name} is not UTF-8 text") from None


def _mapping(value: object, key: str, allowed: set[str]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key or 'the file'}: expected a mapping, got {type(value).__name__}")
    for k in value:
        if k not in allowed:
            where = f"{key}.{k}" if key else str(k)
            raise ConfigError(f"{where}: unknown key (known: {', '.join(sorted(allowed))})")
    return value


def _int(value: object, key: str, lo: int, hi: int) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):  # an int of any size: never through a float
        raise ConfigError(f"{key}: expected a whole number, got {_show(value)}")
    if not lo <= value <= hi:
        raise ConfigError(f"{key}: {_show(value)} is outside {lo}..{hi}")
    return value


def _number(value: object, key: str, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or (isinstance(value, float)
                                                                        and not math.isfinite(value)):
        raise ConfigError(f"{key}: expected a number, got {_show(value)}")
    if not lo <= value <= hi:  # an int past any float compares exactly
        raise ConfigError(f"{key}: {_show(value)} is outside {lo:g}..{hi:g}")
    return float(value)


def _show(value: object) -> str:
    return yamltext.show(value, 80)


def _bool(value: object, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{key}: expected true or false, got {_show(value)}")
    return value


def _text(value: object, key: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 253:
        raise ConfigError(f"{key}: expected a name (text, at most 253 characters), got {_show(value)}")
    return value.strip()


def _choice(value: object, key: str, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value.lower() not in allowed:
        raise ConfigError(f"{key}: {_show(value)} is not one of {', '.join(allowed)}")
    return value.lower()
