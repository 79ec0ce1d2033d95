"""The pure reader: exporter text -> Observations (scaler/sources/exposition.py)."""

from __future__ import annotations

import pytest
from sources_bodies import MODEL, NOW, engine_block, pod_a, two_pod_body

from keda_llm.scaler.model import Observation, ReplicaSample
from keda_llm.scaler.sources.errors import SourceError
from keda_llm.scaler.sources.exposition import observations_from_exposition, parse_exposition

# Expected by hand from sources_bodies: pod a = running 7, waiting 2, kv 0.5; pod b = 3, 0, 0.25.
COMMON = dict(max_running=None, kv_capacity_tokens=262144.0, prompt_tokens_total=120000.0,
              generation_tokens_total=45000.0, requests_finished_total=300.0, startup_seconds=95.5,
              ttft_sum=4.5, ttft_count=30.0)  # the TTFT histogram's _sum/_count (its buckets are skipped)
A = ReplicaSample(pod="vllm-a", timestamp=NOW - 1, up=True, running=7.0, waiting=2.0, kv_usage_ratio=0.5, **COMMON)
B = ReplicaSample(pod="vllm-b", timestamp=NOW - 2, up=True, running=3.0, waiting=0.0, kv_usage_ratio=0.25, **COMMON)


def test_two_pods_and_another_model_become_two_observations() -> None:
    got = observations_from_exposition(two_pod_body(), now=NOW)
    qwen = ReplicaSample(pod="qwen-0", timestamp=NOW - 3, up=True, running=1.0, waiting=0.0, kv_usage_ratio=0.1,
                         **{**COMMON, "kv_capacity_tokens": 65536.0})
    assert got == [
        Observation(namespace="llm", model=MODEL, at=NOW, replicas=(A, B)),
        Observation(namespace="team-b", model="Qwen/Qwen3-8B", at=NOW, replicas=(qwen,)),
    ]


def test_pods_are_sorted_whatever_the_body_order() -> None:
    body_ba = engine_block("vllm-b", "n2", running="3", waiting="0", kv="0.25", ts=NOW - 2) + pod_a()
    assert observations_from_exposition(body_ba, now=NOW)[0].replicas == (A, B)


@pytest.mark.parametrize("bad", ["NaN", "+Inf", "-Inf", "-1"])
def test_unusable_value_reads_as_missing_and_is_counted(bad: str) -> None:
    parsed = parse_exposition(pod_a(running=bad, kv=bad))
    assert parsed.invalid_values == 2
    fields = parsed.replicas[("llm", MODEL, "vllm-a")]
    assert "running" not in fields and "kv_usage_ratio" not in fields
    assert fields["waiting"] == 2.0
    (obs,) = observations_from_exposition(pod_a(running=bad), now=NOW)
    assert obs.replicas[0].running is None and obs.replicas[0].waiting == 2.0


def test_engine_down_is_a_replica_that_is_not_up() -> None:
    lab = f'model="{MODEL}",engine="vllm",role="unified",namespace="llm",pod="vllm-c",node="n3"'
    body = f"llm_engine_up{{{lab}}} 0\nllm_engine_last_success_timestamp_seconds{{{lab}}} {NOW - 60}\n"
    (obs,) = observations_from_exposition(body, now=NOW)
    assert obs.replicas == (ReplicaSample(pod="vllm-c", timestamp=NOW - 60, up=False),)


def test_without_a_staleness_clock_a_replica_is_never_fresh() -> None:
    body = f'llm_requests_running{{model="{MODEL}",namespace="llm",pod="p"}} 4\n'
    (obs,) = observations_from_exposition(body, now=NOW)
    assert obs.replicas == (ReplicaSample(pod="p", timestamp=0.0, up=True, running=4.0),)


def test_escaped_label_values_and_static_targets_without_pod() -> None:
    body = (
        'llm_requests_running{model="we\\"ird\\\\name",engine="tgi",role="unified",namespace="llm",pod="",node="n1"}'
        " 5 1800000000000\n"
        'llm_requests_running{model="m",engine="llamacpp",role="decode",namespace="",node="n9"} 2\n'
    )
    got = {(o.namespace, o.model): o.replicas for o in observations_from_exposition(body, now=NOW)}
    assert got == {
        ("llm", 'we"ird\\name'): (ReplicaSample(pod="n1/tgi/unified", timestamp=0.0, running=5.0),),
        ("", "m"): (ReplicaSample(pod="n9/llamacpp/decode", timestamp=0.0, running=2.0, role="decode"),),
    }


def test_series_without_model_belong_to_nobody() -> None:
    assert observations_from_exposition('llm_requests_running{pod="p"} 3\nllm_requests_waiting 1\n', now=NOW) == []


@pytest.mark.parametrize(
    ("body", "line", "what"),
    [
        ("<html><body>502 Bad Gateway</body></html>\n", 1, "not an exposition line"),
        (pod_a() + 'llm_requests_running{model="x",pod="p"\n', 16, "unclosed label set"),
        (pod_a() + 'llm_requests_waiting{model="x"} many\n', 16, "value 'many' is not a number"),
        ('llm_requests_running{model="x" pod="p"} 1\n', 1, "bad label set"),
        ("# HELP ok\nup 1\nllm_requests_running\n", 3, "value '' is not a number"),
        ("up 1\n{} 2\n", 2, "not an exposition line"),
    ],
)
def test_garbage_is_refused_naming_the_line(body: str, line: int, what: str) -> None:
    with pytest.raises(SourceError) as info:
        parse_exposition(body)
    assert info.value.reason == "parse"
    assert f"line {line}:" in str(info.value) and what in str(info.value)


def test_empty_body_is_valid_and_empty() -> None:
    assert observations_from_exposition("", now=NOW) == []
    assert observations_from_exposition("# EOF\n", now=NOW) == []


def test_reads_what_the_exporter_renders() -> None:
    """Interop with exporter/render.py: one live vLLM pod and one engine that is down."""
    from keda_llm.exporter.collect import Snapshot, TargetState
    from keda_llm.exporter.model import EngineMetrics, GpuMetrics, Histogram, Target
    from keda_llm.exporter.render import render

    live = TargetState(
        target=Target(url="http://10.1.0.7:8000/metrics", namespace="llm", pod="vllm-a", node="n1"),
        up=True, last_success=NOW - 1, startup_seconds=95.5,
        identities=((MODEL, "vllm", "unified"),),
        metrics=(EngineMetrics(engine="vllm", model=MODEL, requests_running=7.0, requests_waiting=2.0,
                               kv_cache_usage_ratio=0.5, kv_cache_capacity_tokens=262144.0,
                               prompt_tokens_total=120000.0,
                               time_to_first_token_seconds=Histogram(((0.1, 1.0), (float("inf"), 3.0)), 0.9, 3.0)),),
    )
    down = TargetState(
        target=Target(url="http://10.1.0.8:8000/metrics", namespace="llm", pod='odd"pod\\x', node="n1"),
        up=False, last_success=NOW - 60, identities=((MODEL, "vllm", "unified"),),
    )
    gpu = GpuMetrics(index="0", uuid="GPU-1", gpu_model="H100", utilization_ratio=0.9)
    body = render(Snapshot(node="n1", targets=(live, down), gpus=(gpu,), cycle_seconds=0.01, discovery_errors=0,
                           at=NOW))
    (obs,) = observations_from_exposition(body, now=NOW)
    assert obs.replicas == (
        ReplicaSample(pod='odd"pod\\x', timestamp=NOW - 60, up=False),
        ReplicaSample(pod="vllm-a", timestamp=NOW - 1, up=True, running=7.0, waiting=2.0, kv_usage_ratio=0.5,
                      kv_capacity_tokens=262144.0, prompt_tokens_total=120000.0, startup_seconds=95.5,
                      ttft_sum=0.9, ttft_count=3.0),
    )


def test_latency_histograms_of_the_vllm_fixture_read_as_sum_and_count() -> None:
    """vLLM fixture -> exporter normalize -> render -> the scaler's reader: the TTFT/ITL _sum/_count.

    From tests/fixtures/engines/vllm-0.32.0-cpu-after.prom: vllm:time_to_first_token_seconds_count 16.0,
    _sum 5.477985382080078; vllm:inter_token_latency_seconds_count 831.0, _sum 38.43145808399947.
    """
    from conftest import engine_body

    from keda_llm.exporter.collect import Snapshot, TargetState
    from keda_llm.exporter.engines import normalize
    from keda_llm.exporter.model import Target
    from keda_llm.exporter.render import render

    target = Target(url="http://10.1.0.7:8000/metrics", namespace="llm", pod="vllm-a", node="n1")
    metrics = tuple(normalize(engine_body("vllm-0.32.0-cpu-after.prom"), target))
    state = TargetState(target=target, up=True, last_success=NOW - 1, identities=(("smollm2", "vllm", "unified"),),
                        metrics=metrics)
    body = render(Snapshot(node="n1", targets=(state,), gpus=(), cycle_seconds=0.01, discovery_errors=0, at=NOW))
    (obs,) = observations_from_exposition(body, now=NOW)
    (got,) = obs.replicas
    assert (got.ttft_sum, got.ttft_count) == (5.477985382080078, 16.0)
    assert (got.itl_sum, got.itl_count) == (38.43145808399947, 831.0)


@pytest.mark.parametrize("chunk", [1, 7, 200])
def test_chunked_scans_read_the_same_whatever_the_chunk_size(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """The reader scans a body a chunk at a time (to let the gRPC loop take the GIL): lines that
    straddle a chunk boundary, and an error past one, read as in one piece."""
    import keda_llm.scaler.sources.exposition as exposition

    monkeypatch.setattr(exposition, "CHUNK_CHARS", chunk)
    test_two_pods_and_another_model_become_two_observations()
    with pytest.raises(SourceError) as info:
        parse_exposition(pod_a() + "up 1\n<html>\n")
    assert "line 17: not an exposition line: '<html>'" in str(info.value)


def test_line_shapes_the_fast_scan_must_treat_as_the_format_does() -> None:
    lab = f'model="{MODEL}",namespace="llm",pod="p"'
    body = (f"  llm_requests_running{{{lab}}} 4 1800000000000\r\n"  # indented, CRLF, with a timestamp
            f"llm_requests_waiting{{{lab}}}   1\n"
            "llm_requests_running_other{x=\"1\"} 9\n"  # a longer name that only starts like ours
            "llm_requests_running\t{x} 9\n"  # a tab: not our series name, but a valid line
            "\n   \n# comment\n")
    parsed = parse_exposition(body)
    assert parsed.replicas == {("llm", MODEL, "p"): {"running": 4.0, "waiting": 1.0}}
    # A space before the brace: the labels are the value, as in the text format's grammar.
    with pytest.raises(SourceError) as info:
        parse_exposition(f"# x\nllm_requests_running {{{lab}}} 4\n")
    assert "line 2: value '{model=" in str(info.value)
    with pytest.raises(SourceError) as info:
        parse_exposition("up 1\n  up\n")
    assert "line 2: not an exposition line: 'up'" in str(info.value)
