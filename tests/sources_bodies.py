"""Exporter /metrics bodies for the scaler-source tests, written out as the exporter serves them.

Names from common/vocabulary.py; label order from vocabulary.ENGINE_LABELS. Histogram and GPU
series are there so the readers must skip them. Values are chosen so each test can derive its
expected numbers by hand.
"""

from __future__ import annotations

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
NOW = 1_800_000_000.0


def engine_block(pod: str, node: str, *, running: str, waiting: str, kv: str, ts: float, up: str = "1",
                 model: str = MODEL, namespace: str = "llm", capacity: str = "262144") -> str:
    """The llm_* engine series of one pod (one vLLM replica) as text lines."""
    lab = f'model="{model}",engine="vllm",role="unified",namespace="{namespace}",pod="{pod}",node="{node}"'
    return f"""llm_engine_up{{{lab}}} {up}
llm_engine_last_success_timestamp_seconds{{{lab}}} {ts}
llm_engine_info{{{lab},version="0.32.0"}} 1.0
llm_requests_running{{{lab}}} {running}
llm_requests_waiting{{{lab}}} {waiting}
llm_kv_cache_usage_ratio{{{lab}}} {kv}
llm_kv_cache_capacity_tokens{{{lab}}} {capacity}
llm_prompt_tokens_total{{{lab}}} 120000.0
llm_generation_tokens_total{{{lab}}} 45000.0
llm_requests_finished_total{{{lab}}} 300.0
llm_engine_startup_seconds{{{lab}}} 95.5
llm_time_to_first_token_seconds_bucket{{{lab},le="0.1"}} 10.0
llm_time_to_first_token_seconds_bucket{{{lab},le="+Inf"}} 30.0
llm_time_to_first_token_seconds_sum{{{lab}}} 4.5
llm_time_to_first_token_seconds_count{{{lab}}} 30.0
"""


HEADER = """# HELP llm_engine_up 1 if the last scrape of this engine succeeded and parsed.
# TYPE llm_engine_up gauge
# HELP llm_requests_running Requests in the running batch (summed over ranks).
# TYPE llm_requests_running gauge
"""

GPU = """# HELP llm_gpu_utilization_ratio Fraction of time a kernel ran over the last sample period.
# TYPE llm_gpu_utilization_ratio gauge
llm_gpu_utilization_ratio{gpu="0",uuid="GPU-1",gpu_model="H100",mig_profile="",node="n1",\
namespace="llm",pod="p",container="c"} 0.93
llm_exporter_scrape_duration_seconds{target="llm/vllm-a"} 0.004
"""


def pod_a(ts: float = NOW - 1, running: str = "7", waiting: str = "2", kv: str = "0.5") -> str:
    return engine_block("vllm-a", "n1", running=running, waiting=waiting, kv=kv, ts=ts)


def pod_b(ts: float = NOW - 2, running: str = "3", waiting: str = "0", kv: str = "0.25") -> str:
    return engine_block("vllm-b", "n2", running=running, waiting=waiting, kv=kv, ts=ts)


def two_pod_body() -> str:
    """One body, two replicas of MODEL in namespace llm, plus another model elsewhere and GPU lines."""
    other = engine_block("qwen-0", "n1", running="1", waiting="0", kv="0.1", ts=NOW - 3, model="Qwen/Qwen3-8B",
                         namespace="team-b", capacity="65536")
    return HEADER + pod_a() + pod_b() + other + GPU
