"""LoRA adapter demand: vLLM's `vllm:lora_requests_info` and SGLang's `sglang:lora_pool_*` -> llm_lora_*.

Expected values are read by hand off the bodies (the line each comes from is quoted).
"""

from __future__ import annotations

import random

from conftest import engine_body, load_script
from prometheus_client.parser import text_string_to_metric_families

from keda_llm.exporter.collect import Snapshot, TargetState
from keda_llm.exporter.engines import normalize
from keda_llm.exporter.engines.vllm import lora_adapters
from keda_llm.exporter.model import Sample, Target
from keda_llm.exporter.render import render

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def test_composed_vllm_body_with_adapters() -> None:
    (m,) = normalize(engine_body("composed-vllm-lora.prom"), Target(url="http://engine/metrics"))
    assert (m.engine, m.model, m.role) == ("vllm", MODEL, "unified")  # the info series adds no "unknown" model
    # the newest of the four label sets (value 1.7953001379e+09):
    #   running_lora_adapters="sql-lora,chat-fr,code-py,summ-de" -> 4 distinct
    #   waiting_lora_adapters="legal-en,sql-lora,med-es" minus the running ones -> legal-en, med-es = 2
    #   max_lora="4"
    assert (m.lora_adapters_running, m.lora_adapters_waiting, m.lora_adapters_max) == (4.0, 2.0, 4.0)
    # the other signals are untouched by the LoRA series
    assert (m.requests_running, m.requests_waiting) == (22.0, 9.0)
    assert m.kv_cache_capacity_tokens == 24000 * 16  # num_gpu_blocks x block_size
    assert m.requests_finished_total == 1650 + 110 + 0


def test_without_lora_no_lora_series() -> None:
    (m,) = normalize(engine_body("composed-vllm-dp2.prom"), Target(url="u"))
    assert (m.lora_adapters_running, m.lora_adapters_waiting, m.lora_adapters_max) == (None, None, None)


def info(running: str, waiting: str, max_lora: str, at: float) -> Sample:
    return Sample("vllm:lora_requests_info",
                  {"max_lora": max_lora, "running_lora_adapters": running, "waiting_lora_adapters": waiting}, at)


def test_lora_info_rules() -> None:
    assert lora_adapters([]) == (None, None, None)
    # idle: empty names count 0, not 1
    assert lora_adapters([info("", "", "2", 1.0)]) == (0.0, 0.0, 2.0)
    # duplicates and blanks in the joined list: distinct names
    assert lora_adapters([info("a,a, b,", "c,c,a", "2", 1.0)]) == (2.0, 1.0, 2.0)
    # newest wins whatever the order in the body
    assert lora_adapters([info("a,b,c", "", "4", 9.0), info("a", "b", "4", 3.0)]) == (3.0, 0.0, 4.0)
    # a max_lora that is not a positive number is unknown
    assert lora_adapters([info("a", "", "None", 1.0)]) == (1.0, 0.0, None)
    assert lora_adapters([info("a", "", "0", 1.0)]) == (1.0, 0.0, None)




def test_sglang_lora_pool() -> None:
    (m,) = normalize(engine_body("composed-sglang-lora.prom"), Target(url="u"))
    # tp ranks are copies of one batch (largest taken): 3 adapters running of 8 slots; SGLang reports no waiting
    assert (m.lora_adapters_running, m.lora_adapters_waiting, m.lora_adapters_max) == (3.0, None, 8.0)
    assert m.requests_running == 12.0


def test_lora_series_render_with_engine_labels() -> None:
    target = Target(url="http://10.0.0.7:8000/metrics", namespace="llm", pod="llama-0", node="n1")
    metrics = tuple(normalize(engine_body("composed-vllm-lora.prom"), target))
    state = TargetState(target=target, up=True, metrics=metrics, identities=(), last_success=99.0)
    text = render(Snapshot(node="n1", targets=(state,), gpus=(), cycle_seconds=0.1, discovery_errors=0, at=100.0))
    got = {(s.name, s.labels["pod"]): s.value for f in text_string_to_metric_families(text) for s in f.samples
           if s.name.startswith("llm_lora_")}
    assert got == {("llm_lora_adapters_running", "llama-0"): 4.0, ("llm_lora_adapters_waiting", "llama-0"): 2.0,
                   ("llm_lora_adapters_max", "llama-0"): 4.0}


def test_the_seeded_fuzz_reaches_the_lora_paths() -> None:
    """scripts/fuzz_exporter.py mutates excerpts of every bundled body, the two LoRA bodies included: with
    the CI run's seed, many of its bodies carry the LoRA series and get through to the new code."""
    fuzz = load_script("fuzz_exporter")
    source = fuzz.bodies(random.Random(20261124), fuzz.fixture_lines())
    reached = {"vllm:lora_requests_info": 0, "sglang:lora_pool_slots_used": 0}
    for _ in range(27_000):
        body = next(source)
        for name in reached:
            reached[name] += name in body
    assert min(reached.values()) >= 200, reached
