"""Rendering: exact text for hand-built snapshots, escaping, histograms, no duplicate series."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from keda_llm.common.vocabulary import ENGINE_METRICS, GPU_METRICS
from keda_llm.exporter.collect import Snapshot, TargetState
from keda_llm.exporter.errors import REASONS
from keda_llm.exporter.model import EngineMetrics, GpuMetrics, Histogram, Target
from keda_llm.exporter.render import escape, fmt, render


def snapshot(*states: TargetState, gpus: tuple[GpuMetrics, ...] = ()) -> Snapshot:
    return Snapshot(node="node-a", targets=states, gpus=gpus, cycle_seconds=0.25, discovery_errors=2, at=100.0)


def up(target: Target, *metrics: EngineMetrics, startup: float | None = None) -> TargetState:
    return TargetState(target=target, up=True, metrics=metrics,
                       identities=tuple((m.model, m.engine, m.role) for m in metrics), last_success=99.5,
                       last_duration=0.012, startup_seconds=startup, startup_done=True)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


@pytest.mark.parametrize(("raw", "escaped"), [
    ("plain", "plain"), ('say "hi"', 'say \\"hi\\"'), ("a\\b", "a\\\\b"), ("two\nlines", "two\\nlines"),
    ('\\"\n', '\\\\\\"\\n'),
])
def test_escape(raw: str, escaped: str) -> None:
    assert escape(raw) == escaped


@pytest.mark.parametrize(("value", "text"), [
    (16.0, "16.0"), (0.0440771349862259, "0.0440771349862259"), (math.inf, "+Inf"), (-math.inf, "-Inf"),
    (math.nan, "NaN"), (1e21, "1e+21"), (3, "3.0"),
])
def test_fmt(value: float, text: str) -> None:
    assert fmt(value) == text


def test_exact_text_of_one_engine() -> None:
    m = EngineMetrics(engine="vllm", model="m", version="0.32.0", requests_running=16.0, requests_waiting=0.0,
                      time_to_first_token_seconds=Histogram(((0.1, 1.0), (1.0, 3.0), (math.inf, 4.0)), 2.5, 4.0))
    text = render(snapshot(up(Target(url="http://e:8000/metrics", namespace="llm", pod="p-0"), m, startup=42.5)))
    lab = 'model="m",engine="vllm",role="unified",namespace="llm",pod="p-0",node="node-a"'
    engine_part = text[: text.index("# HELP llm_exporter_")]
    assert engine_part == (
        "# HELP llm_engine_up 1 if the last scrape of this engine succeeded and parsed.\n"
        "# TYPE llm_engine_up gauge\n"
        f"llm_engine_up{{{lab}}} 1\n"
        "# HELP llm_engine_last_success_timestamp_seconds Unix time of the last successful scrape of this engine.\n"
        "# TYPE llm_engine_last_success_timestamp_seconds gauge\n"
        f"llm_engine_last_success_timestamp_seconds{{{lab}}} 99.5\n"
        "# HELP llm_engine_info Engine type and version (value 1).\n"
        "# TYPE llm_engine_info gauge\n"
        f'llm_engine_info{{{lab},version="0.32.0"}} 1\n'
        "# HELP llm_engine_startup_seconds Measured cold start: container start to the first successful scrape.\n"
        "# TYPE llm_engine_startup_seconds gauge\n"
        f"llm_engine_startup_seconds{{{lab}}} 42.5\n"
        "# HELP llm_requests_running Requests in the running batch (summed over ranks).\n"
        "# TYPE llm_requests_running gauge\n"
        f"llm_requests_running{{{lab}}} 16.0\n"
        "# HELP llm_requests_waiting Requests queued in the engine.\n"
        "# TYPE llm_requests_waiting gauge\n"
        f"llm_requests_waiting{{{lab}}} 0.0\n"
        "# HELP llm_time_to_first_token_seconds Time to first token, as the engine reports it.\n"
        "# TYPE llm_time_to_first_token_seconds histogram\n"
        f'llm_time_to_first_token_seconds_bucket{{{lab},le="0.1"}} 1.0\n'
        f'llm_time_to_first_token_seconds_bucket{{{lab},le="1.0"}} 3.0\n'
        f'llm_time_to_first_token_seconds_bucket{{{lab},le="+Inf"}} 4.0\n'
        f"llm_time_to_first_token_seconds_sum{{{lab}}} 2.5\n"
        f"llm_time_to_first_token_seconds_count{{{lab}}} 4.0\n"
    )  # and no family for the signals the engine does not report


def test_health_metrics() -> None:
    st = up(Target(url="http://e:8000/metrics", namespace="llm", pod="p-0"), EngineMetrics(engine="vllm", model="m"))
    errors = dict(st.errors)
    errors["timeout"] = 3
    st = TargetState(**{**st.__dict__, "errors": errors})
    s = samples(render(snapshot(st)))
    tl = (("namespace", "llm"), ("node", "node-a"), ("pod", "p-0"), ("target", "http://e:8000/metrics"))
    assert s[("llm_exporter_scrape_duration_seconds", tl)] == 0.012
    for reason in REASONS:
        assert s[("llm_exporter_scrape_errors_total", tuple(sorted((*tl, ("reason", reason)))))] == (
            3 if reason == "timeout" else 0)
    assert s[("llm_exporter_targets", (("node", "node-a"), ("state", "all")))] == 1
    assert s[("llm_exporter_targets", (("node", "node-a"), ("state", "up")))] == 1
    assert s[("llm_exporter_cycle_duration_seconds", (("node", "node-a"),))] == 0.25
    assert s[("llm_exporter_discovery_errors_total", (("node", "node-a"),))] == 2


def test_awkward_label_values_survive_a_round_trip() -> None:
    model = 'org/model "v2"\\with\nnewline'
    m = EngineMetrics(engine="vllm", model=model, requests_running=1.0)
    s = samples(render(snapshot(up(Target(url="http://e/metrics", pod='p"1'), m))))
    key = ("llm_requests_running", tuple(sorted({"model": model, "engine": "vllm", "role": "unified",
                                                 "namespace": "", "pod": 'p"1', "node": "node-a"}.items())))
    assert s[key] == 1.0


def test_every_vocabulary_signal_renders_with_its_type() -> None:
    h = Histogram(((1.0, 1.0), (math.inf, 2.0)), 3.0, 2.0)
    values = {mt.field: (h if mt.type == "histogram" else float(i + 1)) for i, mt in enumerate(ENGINE_METRICS)}
    m = EngineMetrics(engine="sglang", model="m", role="decode", **values)  # type: ignore[arg-type]
    g = GpuMetrics(index="0/1", uuid="MIG-x", gpu_model="NVIDIA H100", mig_profile="1g.10gb",
                   attribution={"namespace": "llm", "pod": "p", "container": "c"},
                   **{mt.field: float(i + 1) for i, mt in enumerate(GPU_METRICS)})  # type: ignore[arg-type]
    text = render(snapshot(up(Target(url="http://e/metrics", pod="p"), m), gpus=(g,)))
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    for i, mt in enumerate(ENGINE_METRICS):
        fam = fams[mt.name.removesuffix("_total")]
        assert fam.type == mt.type
        if mt.type != "histogram":
            (sample,) = fam.samples
            assert sample.value == i + 1
            assert sample.labels["role"] == "decode"
    for i, mt in enumerate(GPU_METRICS):
        (sample,) = fams[mt.name.removesuffix("_total")].samples
        assert sample.value == i + 1
        assert sample.labels == {"gpu": "0/1", "uuid": "MIG-x", "gpu_model": "NVIDIA H100", "mig_profile": "1g.10gb",
                                 "node": "node-a", "namespace": "llm", "pod": "p", "container": "c"}


def test_two_targets_claiming_the_same_series_render_it_once() -> None:
    m = EngineMetrics(engine="vllm", model="m", requests_running=1.0)
    n = EngineMetrics(engine="vllm", model="m", requests_running=2.0)
    text = render(snapshot(up(Target(url="http://a/metrics", pod="same"), m),
                           up(Target(url="http://b/metrics", pod="same"), n)))
    running = [line for line in text.splitlines() if line.startswith("llm_requests_running{")]
    assert running == ['llm_requests_running{model="m",engine="vllm",role="unified",namespace="",pod="same",'
                       'node="node-a"} 1.0']


def test_no_gpus_no_gpu_families() -> None:
    assert "llm_gpu_" not in render(snapshot())
