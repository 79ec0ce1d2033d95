"""Bad engines: each kind of failure costs only its own target.

Three real HTTP engines on loopback: a vLLM and a llama.cpp that stay good, and a vLLM that turns bad
after one good cycle. After the bad cycle, for every kind of failure:
- the good targets are fresh (last success = the bad cycle's time) with their exact values;
- the error is counted once under its reason, and no other reason moved;
- the bad target's llm_engine_up is 0 under the labels it had, its last-success timestamp is still the
  good cycle's, and every other series of it is gone.
The exposition is read back with prometheus_client's parser, as Prometheus would read it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from conftest import engine_body
from fakeengine import FakeEngine
from prometheus_client.parser import text_string_to_metric_families

from keda_llm.exporter.collect import Collector
from keda_llm.exporter.config import parse_config
from keda_llm.exporter.discovery import Discovery
from keda_llm.exporter.engines import normalize
from keda_llm.exporter.errors import REASONS
from keda_llm.exporter.render import render

VLLM = engine_body("vllm-0.32.0-cpu-load.prom")
GOOD_CYCLE, BAD_CYCLE = 1_750_000_000.0, 1_750_000_005.0


class Clock:
    def __init__(self) -> None:
        self.now = GOOD_CYCLE

    def __call__(self) -> float:
        return self.now


@dataclass
class Rig:
    good_vllm: FakeEngine
    good_llama: FakeEngine
    bad: FakeEngine
    collector: Collector
    clock: Clock

    def cycle(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        self.collector.run_cycle()
        text = self.collector.exposition().decode()
        return {(s.name, frozenset(s.labels.items())): s.value
                for fam in text_string_to_metric_families(text) for s in fam.samples}


@pytest.fixture
def rig() -> Iterator[Rig]:
    engines = [FakeEngine(VLLM), FakeEngine(engine_body("llamacpp-b11434-load.prom")), FakeEngine(VLLM)]
    cfg = parse_config({"interval": 2, "timeout": 1.0, "max_body_bytes": "1MiB", "node_name": "node-a", "targets": [
        {"url": engines[0].url, "namespace": "llm", "pod": "good-vllm"},
        {"url": engines[1].url, "namespace": "llm", "pod": "good-llama", "model": "smollm2-gguf"},
        {"url": engines[2].url, "namespace": "llm", "pod": "bad"},
    ]}, env={})
    clock = Clock()
    collector = Collector(cfg, Discovery(cfg), normalize, render, clock=clock)
    yield Rig(engines[0], engines[1], engines[2], collector, clock)
    collector.stop()
    for e in engines:
        e.stop()


def engine_labels(pod: str, model: str, engine: str) -> frozenset[tuple[str, str]]:
    return frozenset({"model": model, "engine": engine, "role": "unified", "namespace": "llm", "pod": pod,
                      "node": "node-a"}.items())


GOOD_VLLM = engine_labels("good-vllm", "smollm2", "vllm")
GOOD_LLAMA = engine_labels("good-llama", "smollm2-gguf", "llamacpp")
BAD = engine_labels("bad", "smollm2", "vllm")


def errors(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], pod: str) -> dict[str, float]:
    return {dict(k[1])["reason"]: v for k, v in samples.items()
            if k[0] == "llm_exporter_scrape_errors_total" and dict(k[1])["pod"] == pod}


def series_of(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], pod: str) -> set[str]:
    return {k[0] for k in samples if dict(k[1]).get("pod") == pod and k[0].startswith("llm_")
            and not k[0].startswith("llm_exporter_")}


def break_body(body: str) -> object:
    def apply(rig: Rig) -> None:
        rig.bad.body = body.encode()
    return apply


def set_mode(mode: str) -> object:
    def apply(rig: Rig) -> None:
        rig.bad.mode = mode  # type: ignore[assignment]
    return apply


def refuse(rig: Rig) -> None:
    rig.bad.stop()  # the port closes: connection refused


CASES = [
    ("malformed text", break_body('vllm:num_requests_running{engine="0",model_name="smollm2" 16.0\n'), "parse"),
    ("NaN value", break_body(VLLM.replace('vllm:num_requests_running{engine="0",model_name="smollm2"} 16.0',
                                          'vllm:num_requests_running{engine="0",model_name="smollm2"} NaN')),
     "invalid_value"),
    ("+Inf value", break_body(VLLM.replace('vllm:num_requests_waiting{engine="0",model_name="smollm2"} 0.0',
                                           'vllm:num_requests_waiting{engine="0",model_name="smollm2"} +Inf')),
     "invalid_value"),
    ("50 MB body", set_mode("huge"), "too_large"),
    ("accepts and never answers", set_mode("hang"), "timeout"),
    ("trickles bytes", set_mode("trickle"), "timeout"),
    ("connection refused", refuse, "connection"),
    ("duplicate series", break_body(VLLM + 'vllm:num_requests_running{engine="0",model_name="smollm2"} 3.0\n'),
     "duplicate"),
    ("unknown engine", break_body("# TYPE ollama_requests gauge\nollama_requests 4\n"), "unknown_engine"),
    ("HTTP 500", set_mode("status"), "http_status"),
]


@pytest.mark.parametrize(("label", "make_bad", "reason"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_engine_costs_only_itself(rig: Rig, label: str, make_bad: object, reason: str) -> None:
    first = rig.cycle()
    assert first[("llm_engine_up", BAD)] == 1
    assert first[("llm_requests_running", BAD)] == 16

    make_bad(rig)  # type: ignore[operator]
    rig.clock.now = BAD_CYCLE
    s = rig.cycle()

    # the good targets are fresh, with their exact values (vLLM load body: running 16, waiting 0;
    # llama.cpp load body: processing 4, deferred 12)
    assert s[("llm_engine_up", GOOD_VLLM)] == 1
    assert s[("llm_engine_last_success_timestamp_seconds", GOOD_VLLM)] == BAD_CYCLE
    assert (s[("llm_requests_running", GOOD_VLLM)], s[("llm_requests_waiting", GOOD_VLLM)]) == (16, 0)
    assert s[("llm_engine_up", GOOD_LLAMA)] == 1
    assert s[("llm_engine_last_success_timestamp_seconds", GOOD_LLAMA)] == BAD_CYCLE
    assert (s[("llm_requests_running", GOOD_LLAMA)], s[("llm_requests_waiting", GOOD_LLAMA)]) == (4, 12)
    assert errors(s, "good-vllm") == errors(s, "good-llama") == dict.fromkeys(REASONS, 0)

    # the error is counted under its reason, once
    expected: dict[str, float] = {**dict.fromkeys(REASONS, 0), reason: 1}
    assert errors(s, "bad") == expected, label
    # down under the same labels, last success kept, every other series gone
    assert s[("llm_engine_up", BAD)] == 0
    assert s[("llm_engine_last_success_timestamp_seconds", BAD)] == GOOD_CYCLE
    assert series_of(s, "bad") == {"llm_engine_up", "llm_engine_last_success_timestamp_seconds"}
    assert series_of(first, "bad") > {"llm_requests_running", "llm_kv_cache_usage_ratio", "llm_engine_info"}
    targets = {dict(k[1])["state"]: v for k, v in s.items() if k[0] == "llm_exporter_targets"}
    assert targets == {"all": 3, "up": 2}


def test_the_bad_target_comes_back(rig: Rig) -> None:
    rig.cycle()
    rig.bad.mode = "status"
    rig.clock.now = BAD_CYCLE
    rig.cycle()
    rig.bad.mode = "serve"
    rig.clock.now = BAD_CYCLE + 5
    s = rig.cycle()
    assert s[("llm_engine_up", BAD)] == 1
    assert s[("llm_engine_last_success_timestamp_seconds", BAD)] == BAD_CYCLE + 5
    assert s[("llm_requests_running", BAD)] == 16
    assert errors(s, "bad")["http_status"] == 1  # a counter: it stays


def test_a_target_that_never_answered_is_down_under_its_configured_labels(rig: Rig) -> None:
    rig.bad.mode = "status"
    s = rig.cycle()
    never_labels = {"model": "", "engine": "", "role": "unified", "namespace": "llm", "pod": "bad", "node": "node-a"}
    never = frozenset(never_labels.items())
    assert s[("llm_engine_up", never)] == 0
    assert ("llm_engine_last_success_timestamp_seconds", never) not in s  # no success to report yet
