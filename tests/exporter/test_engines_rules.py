"""Detection, errors and the rank rules of the engine adapters, on small bodies written for each case."""

from __future__ import annotations

import math

import pytest
from conftest import engine_body

from keda_llm.exporter.engines import ENGINE_NAMES, detect, normalize
from keda_llm.exporter.engines.ranks import weighted_ratio
from keda_llm.exporter.errors import ScrapeError
from keda_llm.exporter.model import EngineMetrics, Target
from keda_llm.exporter.parse import parse

T = Target(url="http://engine/metrics")


def one(body: str, target: Target = T) -> EngineMetrics:
    result = normalize(body, target)
    assert len(result) == 1, result
    return result[0]


def test_engine_names_are_the_vocabulary_engines() -> None:
    from keda_llm.common.vocabulary import ENGINES

    assert ENGINE_NAMES == ENGINES


@pytest.mark.parametrize(("body_name", "engine"), [
    ("vllm-0.32.0-cpu-load.prom", "vllm"), ("composed-vllm-dp2.prom", "vllm"), ("composed-sglang.prom", "sglang"),
    ("composed-tgi.prom", "tgi"), ("composed-triton-trtllm.prom", "trtllm"),
    ("llamacpp-b11434-load.prom", "llamacpp"), ("composed-llamacpp.prom", "llamacpp"),
])
def test_detect_from_the_names_present(body_name: str, engine: str) -> None:
    assert detect(parse(engine_body(body_name))) == engine


def test_detect_nothing_known() -> None:
    assert detect(parse("process_cpu_seconds_total 1\nnv_inference_count{model=\"m\"} 3\n")) is None


# --- errors -------------------------------------------------------------------------------------------------

def test_unknown_engine() -> None:
    with pytest.raises(ScrapeError) as err:
        normalize("# TYPE process_open_fds gauge\nprocess_open_fds 50\n", T)
    assert err.value.reason == "unknown_engine"


def test_forced_engine_whose_metrics_are_absent_is_unknown_engine() -> None:
    with pytest.raises(ScrapeError, match="no vllm metrics") as err:
        normalize(engine_body("llamacpp-b11434-load.prom"), Target(url="u", engine="vllm"))
    assert err.value.reason == "unknown_engine"


def test_forced_engine_that_does_not_exist() -> None:
    with pytest.raises(ScrapeError, match="'ollama' is not one of") as err:
        normalize(engine_body("vllm-0.32.0-cpu-load.prom"), Target(url="u", engine="ollama"))
    assert err.value.reason == "unknown_engine"


def test_forced_engine_gives_the_detected_result() -> None:
    body = engine_body("composed-vllm-dp2.prom")
    assert normalize(body, Target(url="u", engine="vllm")) == normalize(body, T)


def test_malformed_body_is_a_parse_error() -> None:
    with pytest.raises(ScrapeError) as err:
        normalize('vllm:num_requests_running{engine="0" 3\n', T)
    assert err.value.reason == "parse"


def test_duplicate_series_we_read() -> None:
    body = engine_body("vllm-0.32.0-cpu-load.prom") + 'vllm:num_requests_running{engine="0",model_name="smollm2"} 3\n'
    with pytest.raises(ScrapeError, match=r"vllm:num_requests_running\{engine=\"0\",model_name=\"smollm2\"\}") as err:
        normalize(body, T)
    assert err.value.reason == "duplicate"


def test_duplicate_label_order_does_not_hide_a_duplicate() -> None:
    body = 'llamacpp:requests_processing{a="1",b="2"} 1\nllamacpp:requests_processing{b="2",a="1"} 1\n'
    with pytest.raises(ScrapeError) as err:
        normalize(body, T)
    assert err.value.reason == "duplicate"


def test_duplicate_in_a_family_we_do_not_read_is_ignored() -> None:
    body = engine_body("vllm-0.32.0-cpu-load.prom") + "process_open_fds 50.0\n"
    assert one(body).requests_running == 16


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf"])
def test_nan_or_inf_in_a_gauge_we_use_is_invalid_value(value: str) -> None:
    body = engine_body("vllm-0.32.0-cpu-load.prom").replace(
        'vllm:kv_cache_usage_perc{engine="0",model_name="smollm2"} 0.0440771349862259',
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="smollm2"}} {value}')
    with pytest.raises(ScrapeError, match="vllm:kv_cache_usage_perc") as err:
        normalize(body, T)
    assert err.value.reason == "invalid_value"


def test_nan_in_a_counter_we_use_is_invalid_value() -> None:
    body = "llamacpp:requests_processing 1\nllamacpp:tokens_predicted_total NaN\n"
    with pytest.raises(ScrapeError) as err:
        normalize(body, T)
    assert err.value.reason == "invalid_value"


def test_nan_in_a_histogram_bucket_we_use_is_invalid_value() -> None:
    body = engine_body("vllm-0.32.0-cpu-after.prom").replace(
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="smollm2"} 16.0',
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="smollm2"} NaN')
    with pytest.raises(ScrapeError) as err:
        normalize(body, T)
    assert err.value.reason == "invalid_value"


def test_nan_in_a_family_we_do_not_read_is_ignored() -> None:
    body = engine_body("vllm-0.32.0-cpu-load.prom").replace(
        'vllm:estimated_flops_per_gpu_total{engine="0",model_name="smollm2"} 0.0',
        'vllm:estimated_flops_per_gpu_total{engine="0",model_name="smollm2"} NaN')
    assert "NaN" in body
    assert one(body).requests_running == 16


# --- vLLM rules -------------------------------------------------------------------------------------------------

OLD_VLLM = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 5.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 2.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.25
# TYPE vllm:gpu_prefix_cache_queries_total counter
vllm:gpu_prefix_cache_queries_total{model_name="m"} 100.0
# TYPE vllm:gpu_prefix_cache_hits_total counter
vllm:gpu_prefix_cache_hits_total{model_name="m"} 40.0
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{le="0.1",model_name="m"} 7.0
vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="m"} 9.0
vllm:time_per_output_token_seconds_count{model_name="m"} 9.0
vllm:time_per_output_token_seconds_sum{model_name="m"} 0.5
"""


def test_vllm_older_names() -> None:
    got = one(OLD_VLLM)
    assert (got.requests_running, got.requests_waiting, got.kv_cache_usage_ratio) == (5, 2, 0.25)
    assert (got.prefix_cache_queried_tokens_total, got.prefix_cache_hit_tokens_total) == (100, 40)
    assert got.inter_token_latency_seconds is not None
    assert got.inter_token_latency_seconds.buckets == ((0.1, 7.0), (math.inf, 9.0))
    assert (got.inter_token_latency_seconds.sum, got.inter_token_latency_seconds.count) == (0.5, 9.0)
    # no cache_config_info: no capacity; counters the body lacks stay None
    assert got.kv_cache_capacity_tokens is None
    assert got.prompt_tokens_total is None
    assert got.time_to_first_token_seconds is None


def test_vllm_new_name_wins_where_a_build_exposes_both() -> None:
    body = OLD_VLLM + 'vllm:kv_cache_usage_perc{model_name="m"} 0.5\n'
    assert one(body).kv_cache_usage_ratio == 0.5


def test_vllm_stray_pid_label_takes_the_live_process() -> None:
    # api-server-count > 1 on builds before vLLM PR #28792: one KV series per pid, all but one 0
    body = ('vllm:kv_cache_usage_perc{engine="0",model_name="m",pid="11"} 0.0\n'
            'vllm:kv_cache_usage_perc{engine="0",model_name="m",pid="12"} 0.75\n'
            'vllm:num_requests_running{engine="0",model_name="m",pid="11"} 0.0\n'
            'vllm:num_requests_running{engine="0",model_name="m",pid="12"} 6.0\n')
    got = one(body)
    assert (got.kv_cache_usage_ratio, got.requests_running) == (0.75, 6.0)


def _dp_body(cap0: str, cap1: str) -> str:
    return (f'vllm:cache_config_info{{block_size="16",engine="0",num_gpu_blocks="{cap0}"}} 1.0\n'
            f'vllm:cache_config_info{{block_size="16",engine="1",num_gpu_blocks="{cap1}"}} 1.0\n'
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2\n'
            'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.8\n')


def _dp_tokens_body(cap0: str, cap1: str) -> str:
    return (f'vllm:cache_config_info{{block_size="16",engine="0",kv_cache_size_tokens="{cap0}"}} 1.0\n'
            f'vllm:cache_config_info{{block_size="16",engine="1",kv_cache_size_tokens="{cap1}"}} 1.0\n'
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2\n'
            'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.8\n')


def test_vllm_kv_ratio_is_weighted_by_each_rank_capacity() -> None:
    got = one(_dp_tokens_body("1600", "4800"))
    # kv_cache_size_tokens is each rank's own; (0.2*1600 + 0.8*4800) / 6400 = (320 + 3840) / 6400 = 0.65
    assert got.kv_cache_capacity_tokens == 6400
    assert got.kv_cache_usage_ratio == pytest.approx(0.65)


def test_vllm_data_parallel_num_gpu_blocks_is_the_front_ends_sum_over_its_ranks() -> None:
    # vLLM's front end adds every DP engine's blocks into its one CacheConfig at startup and writes that
    # config under each engine label: two ranks of 26948 blocks show num_gpu_blocks="53896" on both
    got = one(_dp_body("53896", "53896"))
    assert got.kv_cache_capacity_tokens == 53896 * 16  # 862336, not twice that
    assert got.kv_cache_usage_ratio == pytest.approx((0.2 + 0.8) / 2)  # equal shares, equal weights
    # the rank's own kv_cache_size_tokens (newer builds, not summed across DP) still adds up over ranks
    assert one(_dp_tokens_body("431168", "431168")).kv_cache_capacity_tokens == 862336


def test_vllm_rank_without_capacity_gives_plain_mean_and_no_capacity() -> None:
    # engine 1 not yet profiled: its capacity is unknown
    got = one(_dp_tokens_body("1600", "None"))
    assert got.kv_cache_usage_ratio == pytest.approx((0.2 + 0.8) / 2)
    assert got.kv_cache_capacity_tokens is None
    got = one(_dp_body("None", "None"))
    assert (got.kv_cache_usage_ratio, got.kv_cache_capacity_tokens) == (pytest.approx(0.5), None)


def test_triton_vllm_backend_models_are_told_apart_by_the_model_label() -> None:
    # Triton's vLLM backend writes the vllm: names under Triton's model/version labels, no model_name
    body = ('vllm:num_requests_running{model="llama8b",version="1"} 10\n'
            'vllm:num_requests_running{model="mistral7b",version="1"} 3\n'
            'vllm:num_requests_waiting{model="llama8b",version="1"} 5\n'
            'vllm:num_requests_waiting{model="mistral7b",version="1"} 0\n'
            'vllm:gpu_cache_usage_perc{model="llama8b",version="1"} 0.9\n'
            'vllm:gpu_cache_usage_perc{model="mistral7b",version="1"} 0.1\n'
            'nv_inference_request_success{model="llama8b",version="1"} 7\n')
    got = {m.model: (m.requests_running, m.requests_waiting, m.kv_cache_usage_ratio)
           for m in normalize(body, Target(url="u", model="other"))}
    assert got == {"llama8b": (10, 5, 0.9), "mistral7b": (3, 0, 0.1)}


def test_vllm_prefers_kv_cache_size_tokens_label() -> None:
    body = ('vllm:cache_config_info{block_size="16",engine="0",kv_cache_size_tokens="5000",num_gpu_blocks="100"} 1.0\n'
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.1\n')
    assert one(body).kv_cache_capacity_tokens == 5000  # not 100 x 16 = 1600 (hybrid models)


def test_vllm_model_name_from_the_engine_wins_over_the_target() -> None:
    assert one(engine_body("vllm-0.32.0-cpu-load.prom"), Target(url="u", model="other")).model == "smollm2"


def test_vllm_role_comes_from_the_target() -> None:
    assert one(engine_body("vllm-0.32.0-cpu-load.prom"), Target(url="u", role="decode")).role == "decode"


def test_histogram_ranks_with_different_bounds_are_not_added() -> None:
    body = ('vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 1\n'
            'vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 2\n'
            'vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.3\n'
            'vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 2\n'
            'vllm:time_to_first_token_seconds_bucket{engine="1",le="0.2",model_name="m"} 1\n'
            'vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 1\n'
            'vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 0.1\n'
            'vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 1\n'
            'vllm:num_requests_running{engine="0",model_name="m"} 1\n')
    assert one(body).time_to_first_token_seconds is None


def test_openmetrics_body_of_an_engine() -> None:
    body = ("# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{engine="0",model_name="m"} 4.0\n'
            "# TYPE vllm:prompt_tokens counter\n"
            'vllm:prompt_tokens_total{engine="0",model_name="m"} 10.0 # {trace_id="t"} 3.0 1712345678.0\n'
            'vllm:prompt_tokens_created{engine="0",model_name="m"} 1712345000.0\n'
            "# EOF\n")
    got = one(body)
    assert (got.requests_running, got.prompt_tokens_total) == (4.0, 10.0)


# --- SGLang rules -----------------------------------------------------------------------------------------------

def _sg(name: str, value: float, dp: str, tp: str, role: str = "unified") -> str:
    return (f'sglang:{name}{{dp_rank="{dp}",engine_type="{role}",model_name="m",moe_ep_rank="0",pp_rank="0",'
            f'tp_rank="{tp}"}} {value}\n')


def test_sglang_sums_dp_ranks_and_takes_one_of_tp_replicas() -> None:
    # --enable-metrics-for-all-schedulers: tp ranks 0 and 1 of each dp rank report the same batch
    body = "".join(_sg("num_running_reqs", v, dp, tp) for dp, v in (("0", 10), ("1", 7)) for tp in ("0", "1"))
    body += "".join(_sg("max_total_num_tokens", c, dp, tp) for dp, c in (("0", 1000), ("1", 3000)) for tp in "01")
    body += "".join(_sg("token_usage", r, dp, tp) for dp, r in (("0", 0.5), ("1", 0.1)) for tp in "01")
    got = one(body)
    assert got.requests_running == 10 + 7
    assert got.kv_cache_capacity_tokens == 1000 + 3000
    assert got.kv_cache_usage_ratio == pytest.approx((0.5 * 1000 + 0.1 * 3000) / 4000)  # 0.2


def test_sglang_older_names_and_batch_limit() -> None:
    body = ('sglang:num_requests_running{model_name="m"} 3\n'
            'sglang:num_requests_waiting{model_name="m"} 8\n'
            'sglang:max_running_requests{model_name="m"} 48\n'
            'sglang:max_total_num_tokens{model_name="m"} 9000\n')
    got = one(body, Target(url="u", max_running=999))
    assert (got.requests_running, got.requests_waiting) == (3, 8)
    assert got.requests_max_running == 48  # the engine's own limit wins over the configured one
    assert got.kv_cache_capacity_tokens == 9000
    assert got.kv_cache_usage_ratio is None


def test_sglang_grammar_queue_adds_to_waiting() -> None:
    body = _sg("num_queue_reqs", 4, "0", "0") + _sg("num_grammar_queue_reqs", 2, "0", "0")
    assert one(body).requests_waiting == 6


def test_sglang_prefill_server_role_applies_to_tokenizer_series() -> None:
    body = (_sg("num_running_reqs", 2, "0", "0", role="prefill")
            + 'sglang:prompt_tokens_total{model_name="m"} 500\n'
            + 'sglang:cached_tokens_total{cache_source="device",model_name="m"} 100\n'
            + 'sglang:cached_tokens_total{cache_source="host",model_name="m"} 50\n')
    got = one(body)
    assert got.role == "prefill"
    assert (got.requests_running, got.prompt_tokens_total) == (2, 500)
    assert (got.prefix_cache_queried_tokens_total, got.prefix_cache_hit_tokens_total) == (500, 150)


def test_sglang_priority_breakdown_is_not_added_to_its_total() -> None:
    # --enable-priority-scheduling: the total under priority="", a breakdown under priority="0", "1"
    body = "".join(f'sglang:{name}{{engine_type="unified",model_name="m",priority="{p}",tp_rank="0"}} {v}\n'
                   for name, values in (("num_running_reqs", (10, 7, 3)), ("num_queue_reqs", (4, 1, 3)),
                                        ("num_prefill_bootstrap_queue_reqs", (2, 2, 0)))
                   for p, v in zip(("", "0", "1"), values, strict=True))
    got = one(body)
    assert (got.requests_running, got.requests_waiting) == (10, 4 + 2)
    # a name written only broken down keeps its (disjoint) parts
    only_parts = ('sglang:num_running_reqs{model_name="m",priority="0"} 7\n'
                  'sglang:num_running_reqs{model_name="m",priority="1"} 3\n')
    assert one(only_parts).requests_running == 10


def test_vllm_v0_swapped_requests_are_waiting() -> None:
    """V0 engines (and Triton's vLLM backend) report requests preempted to CPU apart: in neither running nor
    waiting, but waiting to run (vllm/engine/metrics.py, `vllm:num_requests_swapped`)."""
    body = ('vllm:num_requests_running{model_name="m"} 8\nvllm:num_requests_waiting{model_name="m"} 2\n'
            'vllm:num_requests_swapped{model_name="m"} 3\n')
    got = one(body)
    assert (got.requests_running, got.requests_waiting) == (8, 5)


def test_sglang_tokenizer_series_are_summed_over_priorities() -> None:
    """The tokenizer's counters and histograms carry each request's own priority (`""`: it named none), so the
    parts are disjoint: dropping them as a breakdown kept only the requests without a priority (a prefix hit
    ratio above 1 too, with cached tokens counted from every priority)."""
    lab = 'engine_type="unified",model_name="m"'
    body = "".join(
        f'sglang:{name}{{{lab},is_streaming="false",priority="{p}"}} {v}\n'
        for name, values in (("prompt_tokens_total", (12, 90000)), ("generation_tokens_total", (3, 8000)),
                             ("num_requests_total", (1, 400)))
        for p, v in zip(("", "1"), values, strict=True))
    body += (f'sglang:cached_tokens_total{{{lab},cache_source="device",priority="1"}} 5000\n'
             + "".join(f'sglang:time_to_first_token_seconds_{part}{{{lab},priority="{p}"{le}}} {v}\n'
                       for p, n in (("", 1), ("1", 400))
                       for part, le, v in (("bucket", ',le="+Inf"', n), ("sum", "", n * 0.2), ("count", "", n)))
             + f'sglang:num_running_reqs{{{lab},priority="",tp_rank="0"}} 5\n'
             + f'sglang:num_running_reqs{{{lab},priority="1",tp_rank="0"}} 5\n')
    got = one(body)
    assert (got.prompt_tokens_total, got.generation_tokens_total, got.requests_finished_total) == (90012, 8003, 401)
    assert got.prefix_cache_hit_tokens_total == 5000
    assert got.time_to_first_token_seconds is not None and got.time_to_first_token_seconds.count == 401
    assert got.requests_running == 5  # the scheduler's queue gauge: the total, its breakdown dropped


@pytest.mark.parametrize("queue", ["num_prefill_bootstrap_queue_reqs", "num_prefill_prealloc_queue_reqs"])
def test_sglang_prefill_bootstrap_queue_under_its_current_and_older_name(queue: str) -> None:
    body = (_sg("num_queue_reqs", 1, "0", "0", role="prefill") + _sg(queue, 25, "0", "0", role="prefill"))
    assert one(body).requests_waiting == 26


def test_sglang_v03_names_the_model_in_a_name_label() -> None:
    body = ('sglang:max_total_num_tokens{name="google/gemma-2-9b-it"} 161721.0\n'
            'sglang:num_requests_running{name="google/gemma-2-9b-it"} 9\n')
    got = one(body, Target(url="u", model="configured"))
    assert (got.model, got.requests_running, got.kv_cache_capacity_tokens) == ("google/gemma-2-9b-it", 9, 161721)


def test_sglang_no_hit_yet_means_no_prefix_cache_series() -> None:
    # cached_tokens_total is only created at the first hit (incremented when cached_tokens > 0)
    got = one('sglang:prompt_tokens_total{model_name="m"} 500\n')
    assert (got.prefix_cache_queried_tokens_total, got.prefix_cache_hit_tokens_total) == (None, None)


# --- Triton, TGI, llama.cpp rules -------------------------------------------------------------------------------

def test_triton_with_two_trtllm_models_keeps_their_names() -> None:
    body = ('nv_trt_llm_request_metrics{model="a",request_type="active",version="1"} 1\n'
            'nv_trt_llm_request_metrics{model="b",request_type="active",version="1"} 2\n')
    got = normalize(body, Target(url="u", model="llama"))
    assert sorted((m.model, m.requests_running) for m in got) == [("a", 1), ("b", 2)]


@pytest.mark.parametrize(("types", "expected"), [
    ({"active": 10, "scheduled": 6, "waiting": 4, "max": 64}, (6, 4)),  # v0.18+: waiting = active - scheduled
    ({"active": 10, "scheduled": 6, "context": 2, "max": 64}, (6, 4)),  # v0.7-v0.17: no `waiting` label
    ({"active": 10, "waiting": 4}, (6, 4)),
    ({"active": 3}, (3, None)),
])
def test_triton_trtllm_running_is_scheduled_and_active_holds_the_waiting(
        types: dict[str, int], expected: tuple[float, float | None]) -> None:
    """tensorrtllm_backend reports `active` as every request the executor holds and `waiting` as active -
    scheduled (inflight_batcher_llm/src/model_instance_state.cc): active as running counted each waiting
    request twice, and builds without the `waiting` label reported none."""
    body = "".join(f'nv_trt_llm_request_metrics{{model="tensorrt_llm",request_type="{k}",version="1"}} {v}\n'
                   for k, v in types.items())
    got = one(body)
    assert (got.requests_running, got.requests_waiting) == expected


def test_triton_trtllm_without_fraction_takes_used_over_max() -> None:
    # older tensorrtllm_backend builds report max/free/used/tokens_per blocks, no fraction
    body = "".join(f'nv_trt_llm_kv_cache_block_metrics{{kv_cache_block_type="{k}",model="tensorrt_llm",version="1"}} '
                   f"{v}\n" for k, v in (("tokens_per", 64), ("used", 300), ("free", 700), ("max", 1000)))
    got = one(body)
    assert (got.kv_cache_usage_ratio, got.kv_cache_capacity_tokens) == (0.3, 64000)
    # fraction, where present, is the one read
    with_fraction = body + ('nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="tensorrt_llm",'
                            'version="1"} 0.25\n')
    assert one(with_fraction).kv_cache_usage_ratio == 0.25


def test_triton_model_with_only_token_histograms_is_not_an_engine() -> None:
    body = ('nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="active",version="1"} 1\n'
            'nv_llm_output_token_len_sum{model="ensemble",response_metric_type="total_output_tokens",version="1"} 9\n')
    assert [m.model for m in normalize(body, T)] == ["tensorrt_llm"]


def test_tgi_before_warmup_reports_no_kv() -> None:
    got = one("tgi_batch_current_size 0\ntgi_batch_current_max_tokens 0\ntgi_batch_max_total_tokens 0\n")
    assert (got.kv_cache_usage_ratio, got.kv_cache_capacity_tokens) == (None, None)


def test_tgi_fresh_server_has_empty_queue_and_batch_not_missing() -> None:
    """A gauge is written when first set (metrics-exporter-prometheus): before its first request a TGI server's
    body holds the warmed-up budget and no queue or batch sample. Those are 0 then, not missing; once a
    request was counted, a missing gauge stays missing (a backend that does not write it)."""
    fresh = ("# HELP tgi_queue_size Current queue size\n# TYPE tgi_queue_size gauge\n"
             "# TYPE tgi_batch_max_total_tokens gauge\ntgi_batch_max_total_tokens 412384\n")
    got = one(fresh, Target(url="u", model="m"))
    assert (got.requests_running, got.requests_waiting, got.kv_cache_usage_ratio) == (0, 0, 0)
    assert got.kv_cache_capacity_tokens == 412384
    assert one(fresh + "tgi_request_count 0\n").requests_waiting == 0
    served = one(fresh + "tgi_request_count 7\n")
    assert (served.requests_running, served.requests_waiting, served.kv_cache_usage_ratio) == (None, None, None)
    live = one(fresh + "tgi_request_count 7\ntgi_queue_size 3\ntgi_batch_current_size 2\n")
    assert (live.requests_running, live.requests_waiting) == (2, 3)


def test_llamacpp_older_build_kv_ratio() -> None:
    got = one("llamacpp:requests_processing 1\nllamacpp:kv_cache_usage_ratio 0.25\nllamacpp:kv_cache_tokens 512\n")
    assert (got.kv_cache_usage_ratio, got.kv_cache_capacity_tokens) == (0.25, None)


# --- weighted_ratio alone -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("ratios", "caps", "expected"), [
    ({}, {}, (None, None)),
    ({}, {"0": 100.0}, (None, 100.0)),  # capacity known, usage not reported
    ({"0": 0.4}, {"0": 100.0}, (0.4, 100.0)),
    ({"0": 0.4, "1": 0.1}, {"0": 100.0, "1": 300.0}, (0.175, 400.0)),  # (40 + 30) / 400
    ({"0": 0.4, "1": 0.1}, {"0": 100.0}, (0.25, None)),  # rank 1 capacity unknown: plain mean
    ({"0": 0.4, "1": 0.1}, {"0": 100.0, "1": 0.0}, (0.25, None)),  # a zero capacity is unknown too
])
def test_weighted_ratio(ratios: dict[str, float], caps: dict[str, float],
                        expected: tuple[float | None, float | None]) -> None:
    ratio, cap = weighted_ratio(ratios, caps)
    assert cap == expected[1]
    if expected[0] is None:
        assert ratio is None
    else:
        assert ratio == pytest.approx(expected[0])


# --- trtllm-serve (TensorRT-LLM's own OpenAI server) -------------------------------------------------------------

TRTLLM_SERVE = """\
# HELP trtllm_num_requests_running Number of active requests
# TYPE trtllm_num_requests_running gauge
trtllm_num_requests_running{engine_type="trtllm",model_name="nvidia/llama-8b-fp8"} 12.0
# TYPE trtllm_num_requests_waiting gauge
trtllm_num_requests_waiting{engine_type="trtllm",model_name="nvidia/llama-8b-fp8"} 5.0
# TYPE trtllm_max_num_active_requests gauge
trtllm_max_num_active_requests{engine_type="trtllm",model_name="nvidia/llama-8b-fp8"} 64.0
# TYPE trtllm_kv_cache_utilization gauge
trtllm_kv_cache_utilization{engine_type="trtllm",model_name="nvidia/llama-8b-fp8"} 0.375
# TYPE trtllm_kv_cache_max_blocks gauge
trtllm_kv_cache_max_blocks{engine_type="trtllm",model_name="nvidia/llama-8b-fp8"} 4096.0
# TYPE trtllm_kv_cache_tokens_per_block gauge
trtllm_kv_cache_tokens_per_block{engine_type="trtllm",model_name="nvidia/llama-8b-fp8"} 32.0
# TYPE trtllm_request_success counter
trtllm_request_success_total{engine_type="trtllm",finished_reason="stop",model_name="nvidia/llama-8b-fp8"} 90.0
trtllm_request_success_total{engine_type="trtllm",finished_reason="length",model_name="nvidia/llama-8b-fp8"} 10.0
# TYPE trtllm_prompt_tokens counter
trtllm_prompt_tokens_total{engine_type="trtllm",model_name="nvidia/llama-8b-fp8"} 51200.0
# TYPE trtllm_generation_tokens counter
trtllm_generation_tokens_total{engine_type="trtllm",model_name="nvidia/llama-8b-fp8"} 25600.0
# TYPE trtllm_time_to_first_token_seconds histogram
trtllm_time_to_first_token_seconds_bucket{engine_type="trtllm",le="0.25",model_name="nvidia/llama-8b-fp8"} 80.0
trtllm_time_to_first_token_seconds_bucket{engine_type="trtllm",le="+Inf",model_name="nvidia/llama-8b-fp8"} 100.0
trtllm_time_to_first_token_seconds_count{engine_type="trtllm",model_name="nvidia/llama-8b-fp8"} 100.0
trtllm_time_to_first_token_seconds_sum{engine_type="trtllm",model_name="nvidia/llama-8b-fp8"} 21.5
"""


def test_trtllm_serve_body_is_read_as_trtllm() -> None:
    """Names and meanings from NVIDIA/TensorRT-LLM tensorrt_llm/metrics/collector.py (MetricsCollector): the
    utilization is usedNumBlocks / maxNumBlocks, the capacity max blocks x tokens per block."""
    assert detect(parse(TRTLLM_SERVE)) == "trtllm"
    got = one(TRTLLM_SERVE, Target(url="u", model="configured"))
    assert (got.engine, got.model) == ("trtllm", "nvidia/llama-8b-fp8")
    assert (got.requests_running, got.requests_waiting, got.requests_max_running) == (12, 5, 64)
    assert (got.kv_cache_usage_ratio, got.kv_cache_capacity_tokens) == (0.375, 4096 * 32)
    assert (got.prompt_tokens_total, got.generation_tokens_total, got.requests_finished_total) == (51200, 25600, 100)
    assert got.time_to_first_token_seconds is not None and got.time_to_first_token_seconds.count == 100


def test_trtllm_serve_without_iteration_stats_reports_them_missing() -> None:
    """Without `enable_iter_perf_stats` only the request families exist: queue and KV are missing, not 0."""
    body = "\n".join(line for line in TRTLLM_SERVE.splitlines()
                     if "request_success" in line or "prompt_tokens" in line or line.startswith("#")) + "\n"
    got = one(body)
    assert (got.requests_running, got.requests_waiting, got.kv_cache_usage_ratio, got.kv_cache_capacity_tokens) == (
        None, None, None, None)
    assert got.requests_finished_total == 100 and got.model == "nvidia/llama-8b-fp8"


def test_trtllm_serve_prefix_cache_earlier_names_and_dynamo_prefix() -> None:
    """The cached prompt tokens are the hits, the prompt tokens the queried (tensorrt_llm/metrics/collector.py:
    `trtllm_prompt_cached_tokens_total`, "prompt tokens served from KV cache"); an earlier collector named the
    executor's active and queued requests `trtllm_num_active_requests` / `trtllm_server_queue_length`; NVIDIA
    Dynamo's worker passes the series through as `trtllm:<name>`."""
    lab = '{model_name="q",engine_type="trtllm"}'
    body = (f"trtllm_num_active_requests{lab} 5\ntrtllm_server_queue_length{lab} 2\n"
            f"trtllm_prompt_tokens_total{lab} 1800\ntrtllm_prompt_cached_tokens_total{lab} 450\n")
    got = one(body)
    assert (got.requests_running, got.requests_waiting) == (5, 2)
    assert (got.prefix_cache_queried_tokens_total, got.prefix_cache_hit_tokens_total) == (1800, 450)
    success = f'trtllm:request_success_total{lab[:-1]},finished_reason="stop"}} 150\n'
    dynamo = one(body.replace("trtllm_", "trtllm:") + success)
    assert (dynamo.engine, dynamo.model, dynamo.requests_running, dynamo.requests_finished_total) == (
        "trtllm", "q", 5, 150)
    assert dynamo.prefix_cache_hit_tokens_total == 450
    # no hit yet: no prefix-cache series
    assert one(f"trtllm_prompt_tokens_total{lab} 10\n").prefix_cache_queried_tokens_total is None


def test_trtllm_serve_undefined_model_name_is_the_targets_model() -> None:
    """trtllm-serve builds its collector with `{"model_name": "undefined", "engine_type": "undefined"}`
    (tensorrt_llm/serve/openai_server.py) and a multiprocess `pid`: read as a name, no ScaledObject's model
    would ever match it."""
    lab = '{engine_type="undefined",model_name="undefined",pid="4242"}'
    body = (f"# TYPE trtllm_num_requests_running gauge\ntrtllm_num_requests_running{lab} 12.0\n"
            f"# TYPE trtllm_num_requests_waiting gauge\ntrtllm_num_requests_waiting{lab} 5.0\n")
    got = one(body, Target(url="u", model="meta-llama/Llama-3.1-8B-Instruct"))
    assert (got.model, got.requests_running, got.requests_waiting) == ("meta-llama/Llama-3.1-8B-Instruct", 12, 5)
    assert one(body, Target(url="u")).model == "unknown"


@pytest.mark.parametrize(("body", "said"), [
    ('# TYPE dynamo_frontend_inflight_requests gauge\ndynamo_frontend_inflight_requests{model="q"} 40\n'
     'dynamo_frontend_queued_requests{model="q"} 9\n', "Dynamo frontend"),
    ('# TYPE nv_inference_pending_request_count gauge\n'
     'nv_inference_pending_request_count{model="tensorrt_llm",version="1"} 0\n', "registers none"),
])
def test_bodies_that_are_not_an_engines_say_what_to_scrape(body: str, said: str) -> None:
    with pytest.raises(ScrapeError) as err:
        normalize(body, T)
    assert err.value.reason == "unknown_engine" and said in str(err.value)


def test_forcing_trtllm_accepts_either_server() -> None:
    assert one(TRTLLM_SERVE, Target(url="u", engine="trtllm")).requests_running == 12
    with pytest.raises(ScrapeError, match=r"no trtllm metrics \(nv_trt_llm_\*, trtllm_\*, trtllm:\*\)"):
        normalize('vllm:num_requests_running{model_name="m"} 1\n', Target(url="u", engine="trtllm"))
