"""Every bundled engine body, normalized, against values derived by hand from the body.

Each expected value carries the body line(s) it comes from and the arithmetic. Signals an engine does
not report are listed as None on purpose: `check` fails on any field the table does not name, so a
made-up value (a 0 where the engine says nothing) is caught.
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

import pytest
from conftest import engine_body

from keda_llm.exporter.engines import normalize
from keda_llm.exporter.model import EngineMetrics, Histogram, Target

SIGNALS = [f.name for f in fields(EngineMetrics) if f.name not in ("engine", "model", "role", "version")]


def hist(count: float, total: float, buckets: dict[float, float]) -> dict[str, Any]:
    """Expected histogram: count, sum and the cumulative counts of the named bounds."""
    return {"count": count, "sum": total, "buckets": buckets}


def check(got: EngineMetrics, engine: str, model: str, role: str, **expected: Any) -> None:
    assert (got.engine, got.model, got.role, got.version) == (engine, model, role, None)
    unknown = set(expected) - set(SIGNALS)
    assert not unknown, f"table names no such signal: {unknown}"
    for name in SIGNALS:
        want = expected.get(name)
        value = getattr(got, name)
        if want is None:
            assert value is None, f"{name}: the engine does not report it, got {value!r}"
        elif isinstance(want, dict):
            assert isinstance(value, Histogram), f"{name}: {value!r}"
            assert value.count == want["count"], name
            assert value.sum == pytest.approx(want["sum"], rel=1e-12), name
            assert value.buckets[-1] == (math.inf, want["count"]), name
            by_bound = dict(value.buckets)
            for bound, cumulative in want["buckets"].items():
                assert by_bound[bound] == cumulative, f"{name} le={bound}"
        else:
            assert value == pytest.approx(want, rel=1e-12), f"{name}: {value!r} != {want!r}"


def only(body_name: str, target: Target | None = None) -> EngineMetrics:
    result = normalize(engine_body(body_name), target or Target(url="http://engine/metrics"))
    assert len(result) == 1, result
    return result[0]


# --- vLLM 0.32.0 (real CPU scrapes; one engine rank, engine="0", model_name="smollm2") -------------------
# capacity, in every vLLM 0.32 body: vllm:cache_config_info{...,block_size="128",...,kv_cache_size_tokens="46592",
#   ...,num_gpu_blocks="364",...} 1.0   ->  46592 tokens (= 364 blocks x 128, the same)
VLLM_CAPACITY = 46592


def test_vllm_idle() -> None:
    check(only("vllm-0.32.0-cpu-idle.prom"), "vllm", "smollm2", "unified",
          requests_running=0,  # vllm:num_requests_running{engine="0",model_name="smollm2"} 0.0
          requests_waiting=0,  # vllm:num_requests_waiting{...} 0.0
          kv_cache_usage_ratio=0.0,  # vllm:kv_cache_usage_perc{...} 0.0
          kv_cache_capacity_tokens=VLLM_CAPACITY,
          prompt_tokens_total=0,  # vllm:prompt_tokens_total{...} 0.0
          generation_tokens_total=0,  # vllm:generation_tokens_total{...} 0.0
          requests_finished_total=0,  # vllm:request_success_total{finished_reason=stop|length|abort|...} all 0.0
          prefix_cache_queried_tokens_total=0,  # vllm:prefix_cache_queries_total{...} 0.0
          prefix_cache_hit_tokens_total=0,  # vllm:prefix_cache_hits_total{...} 0.0
          preemptions_total=0,  # vllm:num_preemptions_total{...} 0.0
          time_to_first_token_seconds=hist(0, 0.0, {0.5: 0}),  # _count 0.0, _sum 0.0, every bucket 0.0
          inter_token_latency_seconds=hist(0, 0.0, {0.05: 0}),
          # requests_max_running: vLLM does not export max_num_seqs and the target configures none
          )


def test_vllm_load_running_16_waiting_0() -> None:
    check(only("vllm-0.32.0-cpu-load.prom"), "vllm", "smollm2", "unified",
          requests_running=16,  # vllm:num_requests_running{engine="0",model_name="smollm2"} 16.0
          requests_waiting=0,  # vllm:num_requests_waiting{...} 0.0
          kv_cache_usage_ratio=0.0440771349862259,  # vllm:kv_cache_usage_perc{...} 0.0440771349862259
          kv_cache_capacity_tokens=VLLM_CAPACITY,
          prompt_tokens_total=179,  # vllm:prompt_tokens_total{...} 179.0
          generation_tokens_total=97,  # vllm:generation_tokens_total{...} 97.0
          requests_finished_total=0,  # vllm:request_success_total: 5 reasons, all 0.0 (none finished yet)
          prefix_cache_queried_tokens_total=179,  # vllm:prefix_cache_queries_total{...} 179.0
          prefix_cache_hit_tokens_total=0,  # vllm:prefix_cache_hits_total{...} 0.0
          preemptions_total=0,  # vllm:num_preemptions_total{...} 0.0
          # vllm:time_to_first_token_seconds_count 16.0, _sum 5.477985382080078; _bucket le="0.25" 1.0, le="0.5" 16.0
          time_to_first_token_seconds=hist(16, 5.477985382080078, {0.25: 1, 0.5: 16}),
          # vllm:inter_token_latency_seconds_count 81.0, _sum 4.204427014998714
          inter_token_latency_seconds=hist(81, 4.204427014998714, {}),
          )


def test_vllm_after() -> None:
    check(only("vllm-0.32.0-cpu-after.prom"), "vllm", "smollm2", "unified",
          requests_running=0,  # vllm:num_requests_running{...} 0.0
          requests_waiting=0,  # vllm:num_requests_waiting{...} 0.0
          kv_cache_usage_ratio=0.0,  # vllm:kv_cache_usage_perc{...} 0.0
          kv_cache_capacity_tokens=VLLM_CAPACITY,
          prompt_tokens_total=179,  # vllm:prompt_tokens_total{...} 179.0
          generation_tokens_total=847,  # vllm:generation_tokens_total{...} 847.0
          requests_finished_total=16,  # request_success_total stop 6.0 + length 10.0 + abort/error/repetition 0.0
          prefix_cache_queried_tokens_total=179,  # vllm:prefix_cache_queries_total{...} 179.0
          prefix_cache_hit_tokens_total=0,  # vllm:prefix_cache_hits_total{...} 0.0
          preemptions_total=0,  # vllm:num_preemptions_total{...} 0.0
          # TTFT _count 16.0, _sum 5.477985382080078; le="0.1" 1.0, le="0.25" 1.0, le="0.5" 16.0
          time_to_first_token_seconds=hist(16, 5.477985382080078, {0.08: 0, 0.1: 1, 0.25: 1, 0.5: 16}),
          # ITL _count 831.0, _sum 38.43145808399947; le="0.025" 0.0, le="0.05" 707.0, le="0.075" 830.0, le="0.3" 831.0
          inter_token_latency_seconds=hist(831, 38.43145808399947, {0.025: 0, 0.05: 707, 0.075: 830, 0.3: 831}),
          )


def test_vllm_data_parallel_2_is_summed_over_both_ranks() -> None:
    # two ranks, engine="0" and engine="1"; cache_config_info of each: block_size="16", num_gpu_blocks="26948"
    # (no kv_cache_size_tokens label in this build). vLLM writes the front end's one CacheConfig under every
    # engine label, its num_gpu_blocks the sum over the DP engines (vllm/v1/engine/utils.py, "Sum values
    # from all engines in DP case"; vllm/v1/metrics/loggers.py, log_metrics_info): 26948 x 16 = 431168
    # tokens for both ranks together, 215584 each
    check(only("composed-vllm-dp2.prom"), "vllm", "meta-llama/Llama-3.1-8B-Instruct", "unified",
          requests_running=99,  # num_requests_running engine 0: 48.0 + engine 1: 51.0
          requests_waiting=9,  # num_requests_waiting 3.0 + 6.0
          kv_cache_capacity_tokens=431168,  # 215584 + 215584
          # kv_cache_usage_perc 0.6134 and 0.6672, equal capacities: (0.6134*215584 + 0.6672*215584) / 431168
          kv_cache_usage_ratio=0.6403,
          prompt_tokens_total=52962700,  # prompt_tokens_total 2.657995e+07 + 2.638275e+07
          generation_tokens_total=11323060,  # generation_tokens_total 5.68261e+06 + 5.64045e+06
          # request_success_total engine 0: stop 17003 + length 1273 + abort 7 = 18283;
          #                       engine 1: stop 16873 + length 1264 + abort 7 = 18144;  18283 + 18144
          requests_finished_total=36427,
          prefix_cache_queried_tokens_total=52962700,  # prefix_cache_queries_total 2.657995e+07 + 2.638275e+07
          prefix_cache_hit_tokens_total=21714688,  # prefix_cache_hits_total 1.0897776e+07 + 1.0816912e+07
          preemptions_total=35,  # num_preemptions_total 12.0 + 23.0
          # TTFT _count 457 + 453; _sum 123.55933065668516 + 124.70233115588242;
          # le="0.06" 2 + 1, le="0.25" 239 + 221, le="1.0" 457 + 453
          time_to_first_token_seconds=hist(910, 123.55933065668516 + 124.70233115588242,
                                           {0.06: 3, 0.25: 460, 1.0: 910}),
          # ITL _count 13710 + 13590; _sum 391.7417409913855 + 393.8745849346135; le="0.025" 6427 + 6315
          inter_token_latency_seconds=hist(27300, 391.7417409913855 + 393.8745849346135, {0.01: 0, 0.025: 12742}),
          )


def test_vllm_configured_batch_limit_is_applied() -> None:
    got = only("vllm-0.32.0-cpu-load.prom", Target(url="u", max_running=256))
    assert got.requests_max_running == 256


# --- SGLang (composed; one scheduler: tp_rank="0", engine_type="unified") ------------------------------------

def test_sglang() -> None:
    check(only("composed-sglang.prom"), "sglang", "meta-llama/Llama-3.1-8B-Instruct", "unified",
          requests_running=97,  # sglang:num_running_reqs{engine_type="unified",...,tp_rank="0"} 97.0
          requests_waiting=6,  # sglang:num_queue_reqs{...} 6.0 + sglang:num_grammar_queue_reqs{...} 0.0
          kv_cache_usage_ratio=0.5,  # sglang:token_usage{...} 0.5
          kv_cache_capacity_tokens=429466,  # sglang:max_total_num_tokens{...} 429466.0
          prompt_tokens_total=26592444,  # sglang:prompt_tokens_total{model_name=...} 2.6592444e+07
          generation_tokens_total=5702114,  # sglang:generation_tokens_total{...} 5.702114e+06
          requests_finished_total=18394,  # sglang:num_requests_total{...} 18394.0
          prefix_cache_queried_tokens_total=26592444,  # every prompt token is looked up: prompt_tokens_total
          prefix_cache_hit_tokens_total=10902231,  # sglang:cached_tokens_total{cache_source="device",...} 1.0902231e+07
          preemptions_total=14,  # sglang:num_retracted_requests_total{...} 14.0
          # sglang:time_to_first_token_seconds_count 1800.0, _sum 424.89389783249095; le="0.1" 195.0, le="0.2" 843.0
          time_to_first_token_seconds=hist(1800, 424.89389783249095, {0.1: 195, 0.2: 843, 2.0: 1800}),
          # sglang:inter_token_latency_seconds_count 36000.0, _sum 899.0837052176743;
          # le="0.02" 5169.0, le="0.025" 18105.0
          inter_token_latency_seconds=hist(36000, 899.0837052176743, {0.015: 0, 0.02: 5169, 0.025: 18105}),
          # requests_max_running: no sglang:max_running_requests in current builds, none configured
          )


# --- TGI (composed; no labels, no model name) ----------------------------------------------------------------

def test_tgi_takes_the_model_from_the_target() -> None:
    check(only("composed-tgi.prom", Target(url="u", model="mistral-7b")), "tgi", "mistral-7b", "unified",
          requests_running=37,  # tgi_batch_current_size 37
          requests_waiting=4,  # tgi_queue_size 4
          kv_cache_usage_ratio=61544 / 412384,  # tgi_batch_current_max_tokens 61544 / tgi_batch_max_total_tokens 412384
          kv_cache_capacity_tokens=412384,  # tgi_batch_max_total_tokens 412384
          prompt_tokens_total=3413698,  # tgi_request_input_length_sum 3413698
          generation_tokens_total=667438,  # tgi_request_generated_tokens_sum 667438
          requests_finished_total=2400,  # tgi_request_success 2400
          # tgi_request_mean_time_per_token_duration_count 2400, _sum 66.030129;
          # le="0.029192926025390625" 1473, le="0.043789389038085935" 2400
          inter_token_latency_seconds=hist(2400, 66.030129, {0.029192926025390625: 1473, 0.043789389038085935: 2400}),
          # no TTFT, prefix cache or preemption metric in TGI; batch limit only in GET /info
          )


def test_tgi_without_a_configured_model_is_unknown() -> None:
    assert only("composed-tgi.prom").model == "unknown"


# --- Triton + TensorRT-LLM backend (composed; model="tensorrt_llm", version="1") ------------------------------

def test_triton_trtllm() -> None:
    check(only("composed-triton-trtllm.prom"), "trtllm", "tensorrt_llm", "unified",
          # running is `scheduled`, not `active` 63: the backend's active holds the waiting requests too (it reports
          # waiting = active - scheduled; this composed body's 63 / 61 / 4 do not add up as a real one's would)
          requests_running=61,  # nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="scheduled",...} 61
          requests_waiting=4,  # ...{request_type="waiting"} 4
          requests_max_running=256,  # ...{request_type="max"} 256
          kv_cache_usage_ratio=0.5821,  # nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"} 0.5821
          kv_cache_capacity_tokens=409728,  # kv_cache_block_type="max" 12804 x "tokens_per" 32
          prompt_tokens_total=7204694,  # nv_llm_input_token_len_sum{...} 7204694
          generation_tokens_total=1562907,  # nv_llm_output_token_len_sum{...} 1562907
          requests_finished_total=5409,  # nv_llm_output_token_len_count{...} 5409
          )


def test_triton_model_name_is_replaced_by_the_configured_one() -> None:
    assert only("composed-triton-trtllm.prom", Target(url="u", model="llama-3.1-8b")).model == "llama-3.1-8b"


# --- llama.cpp (no labels; counters and two request gauges) --------------------------------------------------

def test_llamacpp_idle() -> None:
    check(only("llamacpp-b11434-idle.prom", Target(url="u", model="smollm2")), "llamacpp", "smollm2", "unified",
          requests_running=0,  # llamacpp:requests_processing 0
          requests_waiting=0,  # llamacpp:requests_deferred 0
          prompt_tokens_total=0,  # llamacpp:prompt_tokens_total 0 + llamacpp:prompt_tokens_cached_total 0
          generation_tokens_total=0,  # llamacpp:tokens_predicted_total 0
          prefix_cache_queried_tokens_total=0,  # = prompt tokens, cached included
          prefix_cache_hit_tokens_total=0,  # llamacpp:prompt_tokens_cached_total 0
          )


def test_llamacpp_load_running_4_waiting_12() -> None:
    check(only("llamacpp-b11434-load.prom", Target(url="u", model="smollm2")), "llamacpp", "smollm2", "unified",
          requests_running=4,  # llamacpp:requests_processing 4
          requests_waiting=12,  # llamacpp:requests_deferred 12
          prompt_tokens_total=20,  # llamacpp:prompt_tokens_total 20 + llamacpp:prompt_tokens_cached_total 0
          generation_tokens_total=0,  # llamacpp:tokens_predicted_total 0
          prefix_cache_queried_tokens_total=20,
          prefix_cache_hit_tokens_total=0,  # llamacpp:prompt_tokens_cached_total 0
          # predicted_tokens_seconds / prompt_tokens_seconds (183.34) are not read: they reset per scrape
          )


def test_llamacpp_after() -> None:
    check(only("llamacpp-b11434-after.prom", Target(url="u", model="smollm2")), "llamacpp", "smollm2", "unified",
          requests_running=0,  # llamacpp:requests_processing 0
          requests_waiting=0,  # llamacpp:requests_deferred 0
          prompt_tokens_total=179,  # llamacpp:prompt_tokens_total 122 + llamacpp:prompt_tokens_cached_total 57
          generation_tokens_total=947,  # llamacpp:tokens_predicted_total 947
          prefix_cache_queried_tokens_total=179,  # 122 + 57
          prefix_cache_hit_tokens_total=57,  # llamacpp:prompt_tokens_cached_total 57
          )


def test_llamacpp_older_build() -> None:
    check(only("composed-llamacpp.prom"), "llamacpp", "unknown", "unified",
          requests_running=3,  # llamacpp:requests_processing 3
          requests_waiting=0,  # llamacpp:requests_deferred 0
          prompt_tokens_total=1362380,  # llamacpp:prompt_tokens_total 1.36238e+06 (no cached counter in this build)
          generation_tokens_total=247778,  # llamacpp:tokens_predicted_total 247778
          # no prompt_tokens_cached_total -> no prefix-cache signals; no KV metric in this build either
          )


def test_every_bundled_body_is_covered_here() -> None:
    from conftest import ENGINE_FIXTURES

    covered = {
        "vllm-0.32.0-cpu-idle.prom", "vllm-0.32.0-cpu-load.prom", "vllm-0.32.0-cpu-after.prom",
        "composed-vllm-dp2.prom", "composed-sglang.prom", "composed-tgi.prom", "composed-triton-trtllm.prom",
        "llamacpp-b11434-idle.prom", "llamacpp-b11434-load.prom", "llamacpp-b11434-after.prom",
        "composed-llamacpp.prom",
        "composed-vllm-lora.prom", "composed-sglang-lora.prom",  # tests/exporter/test_lora.py
        "vllm-0.32.0-cpu-stats-off.prom",  # refused, naming the flag: tests/exporter/test_engines_unread.py
    }
    assert {p.name for p in ENGINE_FIXTURES.glob("*.prom")} == covered
