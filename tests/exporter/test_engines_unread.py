"""Bodies an engine serves that the adapters once misread or refused without saying why: an idle old TGI, an
engine with its metrics switched off, trtllm-serve before its `trtllm_` prefix and before its first request,
and the vLLM production-stack router (a pool, not a replica). Each test failed before its fix."""

from __future__ import annotations

import random

import pytest
from conftest import engine_body, load_script
from httpstub import HttpStub, Request, Response

from keda_llm.exporter.collect import fetch
from keda_llm.exporter.engines import detect, normalize
from keda_llm.exporter.errors import ScrapeError
from keda_llm.exporter.model import EngineMetrics, Target
from keda_llm.exporter.parse import parse

T = Target(url="http://engine/metrics")
TGI = Target(url="u", engine="tgi", model="m")


def one(body: str, target: Target = T) -> EngineMetrics:
    result = normalize(body, target)
    assert len(result) == 1, result
    return result[0]


def refused(body: str, target: Target = T) -> str:
    with pytest.raises(ScrapeError) as err:
        normalize(body, target)
    assert err.value.reason == "unknown_engine"
    return str(err.value)


# --- TGI before v2.3.1: an idle server's body is empty -----------------------------------------------------

# huggingface/text-generation-inference: `metrics-exporter-prometheus` prints a series once it is first touched;
# before 0204946d (#2595, v2.3.1) nothing is set at warmup, so an idle server answers 200 with no sample.
PYTHON_ONLY = ('# HELP python_info Python platform information\n# TYPE python_info gauge\n'
               'python_info{implementation="CPython",major="3",minor="11",patchlevel="9",version="3.11.9"} 1.0\n'
               'process_cpu_seconds_total 12.5\nprocess_open_fds 31.0\n')


@pytest.mark.parametrize("body", ["", "\n", "# no series yet\n", PYTHON_ONLY], ids=["empty", "blank", "comment",
                                                                                "runtime-only"])
def test_idle_tgi_before_2_3_1_forced_reads_nothing_running_nothing_waiting(body: str) -> None:
    got = one(body, TGI)
    assert (got.engine, got.model, got.requests_running, got.requests_waiting) == ("tgi", "m", 0, 0)
    assert (got.kv_cache_usage_ratio, got.kv_cache_capacity_tokens, got.requests_finished_total) == (None, None, None)


def test_an_empty_body_detected_stays_unknown_engine_and_says_how_to_read_an_idle_tgi() -> None:
    for body in ("", "# HELP x y\n"):
        said = refused(body)
        assert "idle TGI" in said and "keda-llm.io/engine: tgi" in said


def test_forcing_tgi_does_not_read_another_servers_body_as_idle() -> None:
    assert "no tgi metrics" in refused(engine_body("vllm-0.32.0-cpu-load.prom"), TGI)
    assert "no tgi metrics" in refused(_stats_off(), TGI)


def test_tgi_backend_that_never_writes_queue_or_batch_gauges_reports_them_missing() -> None:
    """TGI's trtllm, llamacpp and neuron backends write the request counters and histograms only: the queue
    and batch are missing once requests were counted, never an error and never a made-up 0."""
    body = ("tgi_request_count 5\ntgi_request_success 5\ntgi_request_input_length_sum 500\n"
            "tgi_request_input_length_count 5\n")
    for target in (T, TGI):
        got = one(body, target)
        assert (got.requests_running, got.requests_waiting) == (None, None)
        assert (got.prompt_tokens_total, got.requests_finished_total) == (500, 5)


# --- metrics switched off ----------------------------------------------------------------------------------

def _stats_off() -> str:
    """vLLM 0.32 with --disable-log-stats: no stat logger, so the body keeps the http_/process_/python_ series
    (a real scrape: tests/fixtures/engines/README.md)."""
    return engine_body("vllm-0.32.0-cpu-stats-off.prom")


@pytest.mark.parametrize("target", [T, Target(url="u", engine="vllm"), Target(url="u", engine="sglang")],
                         ids=["detected", "vllm", "sglang"])
def test_an_engine_with_stats_logging_off_is_told_by_its_flags(target: Target) -> None:
    said = refused(_stats_off(), target)
    assert "--disable-log-stats" in said and "--enable-metrics" in said


def test_a_body_of_no_server_and_no_engine_keeps_the_plain_message() -> None:
    said = refused("# TYPE process_open_fds gauge\nprocess_open_fds 50\n")
    assert "no metric of a known engine" in said and "--disable-log-stats" not in said
    assert "--disable-log-stats" not in refused('ollama_requests{model="m"} 4\n', Target(url="u", engine="vllm"))


#: llama-server b11434 started without --metrics, its answer to GET /metrics as served (a real scrape)
LLAMACPP_501 = engine_body("llamacpp-b11434-no-metrics-501.json").encode()


@pytest.mark.parametrize(("status", "body", "said"), [
    # llama.cpp tools/server/server.cpp, get_metrics without params.endpoint_metrics
    (501, LLAMACPP_501, "HTTP 501: This server does not support metrics endpoint. Start it with `--metrics`"),
    (404, b'{"detail":"Not Found"}', 'HTTP 404: {"detail":"Not Found"}'),  # SGLang without --enable-metrics
    (503, b"\n  model is loading\nretry later\n", "HTTP 503: model is loading"),
    (500, b"\x00\x9f\xff binary", "HTTP 500"),
    (502, b"", "HTTP 502"),
])
def test_a_refused_scrape_keeps_the_first_line_of_the_answers_text(status: int, body: bytes, said: str) -> None:
    def answer(_: Request) -> Response:
        return Response(status, body, "application/json")

    with HttpStub(answer) as stub, pytest.raises(ScrapeError) as err:
        fetch(stub.url + "/metrics", 2.0, 1024 * 1024)
    assert err.value.reason == "http_status"
    assert str(err.value) == f"http_status: {said}"


def test_a_long_refusal_is_cut_to_200_characters() -> None:
    with HttpStub(lambda _: Response(500, b"e" * 5000)) as stub, pytest.raises(ScrapeError) as err:
        fetch(stub.url, 2.0, 1024 * 1024)
    assert str(err.value) == "http_status: HTTP 500: " + "e" * 200


# --- trtllm-serve from TensorRT-LLM <= 1.1.x: no prefix ----------------------------------------------------

# NVIDIA/TensorRT-LLM tensorrt_llm/metrics/collector.py at 89fd9b74 (1.1.0rc5): `MetricsCollector` registers
# request_success_total (+ finished_reason), e2e_request_latency_seconds, time_to_first_token_seconds,
# time_per_output_token_seconds and request_queue_time_seconds, no prefix, labels model_name and engine_type
# (openai_server.py: both "undefined"); prometheus_client adds request_success_created.
_L = 'engine_type="undefined",model_name="undefined"'
TRTLLM_1_1 = f"""\
# TYPE request_success_total counter
request_success_total{{{_L},finished_reason="stop"}} 150.0
request_success_total{{{_L},finished_reason="length"}} 10.0
request_success_created{{{_L},finished_reason="stop"}} 1.7e9
# TYPE e2e_request_latency_seconds histogram
e2e_request_latency_seconds_bucket{{{_L},le="+Inf"}} 160.0
e2e_request_latency_seconds_count{{{_L}}} 160.0
e2e_request_latency_seconds_sum{{{_L}}} 300.0
# TYPE time_to_first_token_seconds histogram
time_to_first_token_seconds_bucket{{{_L},le="0.1"}} 100.0
time_to_first_token_seconds_bucket{{{_L},le="+Inf"}} 160.0
time_to_first_token_seconds_count{{{_L}}} 160.0
time_to_first_token_seconds_sum{{{_L}}} 20.0
# TYPE time_per_output_token_seconds histogram
time_per_output_token_seconds_bucket{{{_L},le="0.05"}} 150.0
time_per_output_token_seconds_bucket{{{_L},le="+Inf"}} 160.0
time_per_output_token_seconds_count{{{_L}}} 160.0
time_per_output_token_seconds_sum{{{_L}}} 4.0
python_info{{implementation="CPython",major="3",minor="12",patchlevel="3",version="3.12.3"}} 1.0
"""


@pytest.mark.parametrize("target", [Target(url="u", model="m"), Target(url="u", model="m", engine="trtllm")],
                         ids=["detected", "forced"])
def test_trtllm_serve_1_1_bare_names_are_read(target: Target) -> None:
    assert detect(parse(TRTLLM_1_1)) == "trtllm"
    got = one(TRTLLM_1_1, target)
    assert (got.engine, got.model, got.requests_finished_total) == ("trtllm", "m", 160)
    assert got.time_to_first_token_seconds is not None and got.time_to_first_token_seconds.count == 160
    assert got.inter_token_latency_seconds is not None and got.inter_token_latency_seconds.sum == 4
    assert (got.requests_running, got.requests_waiting, got.kv_cache_usage_ratio) == (None, None, None)
    prefixed = TRTLLM_1_1.replace("\nrequest_", "\ntrtllm_request_").replace("\ntime_", "\ntrtllm_time_")
    assert one(prefixed, target) == got


def test_bare_names_without_the_collectors_labels_are_another_apps() -> None:
    body = ('request_success_total{route="/login"} 9\ntime_to_first_token_seconds_count{app="x"} 3\n'
            'time_to_first_token_seconds_sum{app="x"} 1\n')
    assert detect(parse(body)) is None
    assert "no metric of a known engine" in refused(body)
    assert "no trtllm metrics" in refused(body, Target(url="u", engine="trtllm"))
    only_model = 'request_success_total{model_name="m",finished_reason="stop"} 9\n'  # no engine_type
    assert "no trtllm metrics" in refused(only_model, Target(url="u", engine="trtllm"))


def test_a_prefixed_engine_wins_over_bare_names() -> None:
    """SGLang's collector carries model_name and engine_type too, under `sglang:` names: a body with any
    prefixed engine series is that engine's, and Triton's C++ backend is read as Triton."""
    sglang_body = ('sglang:num_running_reqs{model_name="q",engine_type="unified",tp_rank="0"} 3\n'
                   'time_to_first_token_seconds_count{model_name="q",engine_type="unified"} 5\n')
    assert detect(parse(sglang_body)) == "sglang"
    triton = engine_body("composed-triton-trtllm.prom")
    assert normalize(triton + TRTLLM_1_1, T) == normalize(triton, T)


# --- trtllm-serve before its first request: no load series ------------------------------------------------

# tensorrt_llm/metrics/collector.py: every series is labelled, and a labelled series is written from its first
# observation; openai_server.py mounts /prometheus/metrics on a multiprocess registry (no runtime series). Newer
# collectors write `trtllm_*_config_info` once at startup (`log_config_info`).
TRTLLM = Target(url="u", engine="trtllm", model="m")
CONFIG_INFO = ('# TYPE trtllm_model_config_info gauge\n'
               'trtllm_model_config_info{engine_type="undefined",model_name="undefined",dtype="bfloat16"} 1.0\n')


@pytest.mark.parametrize("body", ["", "\n", CONFIG_INFO, PYTHON_ONLY], ids=["empty", "blank", "config-info",
                                                                        "runtime-only"])
def test_idle_trtllm_serve_forced_reads_no_request_finished_yet(body: str) -> None:
    got = one(body, TRTLLM)
    assert (got.engine, got.model, got.requests_finished_total) == ("trtllm", "m", 0)
    # an empty body cannot tell idle from a first request in flight, and <= 1.1.x never writes token counters:
    # nothing else is claimed
    assert (got.requests_running, got.requests_waiting, got.kv_cache_usage_ratio) == (None, None, None)
    assert (got.prompt_tokens_total, got.generation_tokens_total) == (None, None)


def test_idle_trtllm_serve_detected_says_how_to_read_it() -> None:
    assert "keda-llm.io/engine: trtllm" in refused(CONFIG_INFO)
    assert "trtllm-serve" in refused("") and "`trtllm`" in refused("")


def test_only_trtllm_serves_config_series_read_as_no_load() -> None:
    # OpenTelemetry's target_info, or trtllm-serve's config series under a wrong `engine: tgi`: not an idle TGI
    assert "no tgi metrics" in refused('target_info{service_name="x"} 1\n', TGI)
    assert "no tgi metrics" in refused(CONFIG_INFO, TGI)


def test_forcing_trtllm_reads_neither_triton_nor_another_engine_as_idle() -> None:
    triton_idle = "".join(line for line in engine_body("composed-triton-trtllm.prom").splitlines(keepends=True)
                          if "nv_trt_llm_" not in line)  # Triton's own series only: a backend with none
    assert "no trtllm metrics" in refused(triton_idle, TRTLLM)
    assert "no trtllm metrics" in refused(engine_body("vllm-0.32.0-cpu-load.prom"), TRTLLM)
    assert "no trtllm metrics" in refused(_stats_off(), TRTLLM)


# --- the vLLM production-stack router: a pool, not a replica -------------------------------------------------

# vllm-project/production-stack src/vllm_router/services/metrics_service/__init__.py: per-backend gauges under
# vLLM's names with a `server` label, the router's own vllm:current_qps and vllm:healthy_pods_total.
ROUTER = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{server="http://10.0.0.1:8000"} 12.0
vllm:num_requests_running{server="http://10.0.0.2:8000"} 9.0
vllm:num_requests_waiting{server="http://10.0.0.1:8000"} 3.0
vllm:num_requests_waiting{server="http://10.0.0.2:8000"} 0.0
vllm:num_requests_swapped{server="http://10.0.0.1:8000"} 0.0
vllm:gpu_prefix_cache_hits_total{server="http://10.0.0.1:8000"} 500.0
vllm:gpu_prefix_cache_queries_total{server="http://10.0.0.1:8000"} 1000.0
vllm:current_qps{server="http://10.0.0.1:8000"} 4.0
vllm:healthy_pods_total{server="http://10.0.0.1:8000"} 1.0
"""


@pytest.mark.parametrize("body", [
    ROUTER,
    "".join(line + "\n" for line in ROUTER.splitlines() if "qps" not in line and "healthy" not in line),
    'vllm:healthy_pods_total{server="http://10.0.0.1:8000"} 1.0\nvllm:num_requests_running{model_name="m"} 1\n',
], ids=["router", "server-label-only", "healthy-pods-only"])
@pytest.mark.parametrize("engine", [None, "vllm"])
def test_the_production_stack_router_is_refused_as_a_pool(body: str, engine: str | None) -> None:
    said = refused(body, Target(url="u", engine=engine))
    assert "router" in said and "scrape the vLLM engine pods" in said


def test_vllm_engines_and_tritons_vllm_backend_are_still_read() -> None:
    assert one('vllm:num_requests_running{model_name="m",server="x"} 3\n').requests_running == 3
    triton = 'vllm:num_requests_running{model="vllm_model",version="1"} 2\n'
    assert one(triton).model == "vllm_model"
    assert one(engine_body("vllm-0.32.0-cpu-load.prom")).requests_running == 16


# --- fuzzing: the new bodies let only ScrapeError out ------------------------------------------------------

def test_the_new_bodies_mutated_raise_only_the_documented_errors() -> None:
    """scripts/fuzz_exporter.py's generator and promise, seeded with this file's bodies (its corpus is the
    bundled fixtures): detected and with every engine forced."""
    fuzz = load_script("fuzz_exporter")
    sources = [b.splitlines() or [""] for b in ("", PYTHON_ONLY, _stats_off(), TRTLLM_1_1, CONFIG_INFO, ROUTER)]
    bodies = fuzz.bodies(random.Random(20261203), sources)
    failures = []
    for n in range(6000):
        body, engine = next(bodies), fuzz.ENGINES[n % len(fuzz.ENGINES)]
        try:
            fuzz.check_body(body, engine)
        except Exception as err:  # a broken promise, whatever its type
            failures.append(f"{engine}: {body[:200]!r}: {type(err).__name__}: {err}")
    assert failures == []
