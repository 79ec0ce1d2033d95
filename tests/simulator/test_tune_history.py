"""The per-minute history export (simulator.workload.history) against a REAL Prometheus holding two hours of counters.

The data is written as the exporters' series would be scraped every 15 s (two replicas of the model, plus a
second model and the same model in another namespace, which must not count) and loaded into the real
TSDB with `promtool tsdb create-blocks-from openmetrics` (Prometheus' own backfill), then a real
`prometheus` serves it. Each replica's counters rise evenly inside each minute, so a 1 m rate at the minute's
end, times 60, is exactly that minute's count in Prometheus 2 (closed ranges) and 3 (open on the left,
extrapolated): the expected rows are the counts written, derived by hand below.
"""

from __future__ import annotations

import csv
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_server import PrometheusServer, running_prometheus

from keda_llm.common.httpget import fetch
from keda_llm.simulator.workload.history import (
    COLD_START_P90,
    HistoryError,
    Minute,
    chunks,
    export_minutes,
    measured_cold_start_p90,
    parse_span,
    queries,
    query_range,
    write_minutes_csv,
)
from keda_llm.simulator.workload.traces import load_minutes_csv

MODEL = 'meta-llama/Llama-3.1-8B-Instruct'
PD_MODEL = "pd-model"  # served by prefill and decode pools
N = 120  # minutes of data
PROMPT_PER_REQ, OUTPUT_PER_REQ = 123, 17


def per_pod(m: int) -> tuple[int, int]:
    """Requests finished in minute m by replica 0 and replica 1 (minutes 40-44: none)."""
    if 40 <= m < 45:
        return 0, 0
    return 1 + m % 5, 2 * (m % 3)


def expected(t0: int) -> list[Minute]:
    out = []
    for m in range(N):
        r = sum(per_pod(m))
        out.append(Minute(t0 + 60 * m, float(r), float(PROMPT_PER_REQ * r), float(OUTPUT_PER_REQ * r)))
    return out


def openmetrics(t0: int) -> str:
    series: list[tuple[str, dict[str, str], int]] = []  # (metric, labels, which replica's counts; 2 = replica 0's)
    for pod in (0, 1):
        series.append(("llm_requests_finished", {"model": MODEL, "namespace": "llm", "pod": f"p{pod}"}, pod))
    series.append(("llm_requests_finished", {"model": "other", "namespace": "llm", "pod": "o0"}, 2))
    series.append(("llm_requests_finished", {"model": MODEL, "namespace": "dev", "pod": "d0"}, 2))
    lines: list[str] = []
    for family, factor in (("llm_requests_finished", 1), ("llm_prompt_tokens", PROMPT_PER_REQ),
                           ("llm_generation_tokens", OUTPUT_PER_REQ)):
        lines.append(f"# TYPE {family} counter")
        for _, labels, which in series:
            lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
            value = 0.0
            lines.append(f"{family}_total{{{lab}}} 0 {t0}")
            for m in range(N):
                count = per_pod(m)[which % 2] * factor * (3 if which == 2 else 1)
                for k in range(1, 5):
                    value += count / 4
                    lines.append(f"{family}_total{{{lab}}} {value} {t0 + 60 * m + 15 * k}")
    # PD_MODEL in prefill and decode pools: each request passes a prefill server (its prompt, and one token to
    # end its part there) and a decode server (which counts the request, its prompt and its answer)
    for family, prefill, decode in (("llm_requests_finished", 1, 1),
                                    ("llm_prompt_tokens", PROMPT_PER_REQ, PROMPT_PER_REQ),
                                    ("llm_generation_tokens", 1, OUTPUT_PER_REQ)):
        at = lines.index(f"# TYPE {family} counter") + 1  # a family's samples stay together in OpenMetrics
        block = []
        for role, factor in (("prefill", prefill), ("decode", decode)):
            lab = f'model="{PD_MODEL}",namespace="llm",pod="{role}0",role="{role}"'
            value = 0.0
            block.append(f"{family}_total{{{lab}}} 0 {t0}")
            for m in range(N):
                count = sum(per_pod(m)) * factor
                for k in range(1, 5):
                    value += count / 4
                    block.append(f"{family}_total{{{lab}}} {value} {t0 + 60 * m + 15 * k}")
        lines[at:at] = block
    # the scaler's measured cold-start p90 (scaler/phases.py), from two scaler pods: 150 s in the first hour, then
    # 240 s (and 230 s on the other pod); the same model in another namespace took 999 s
    lines.append(f"# TYPE {COLD_START_P90} gauge")
    for pod, ns, first, then in (("s0", "llm", 150.0, 240.0), ("s1", "llm", 150.0, 230.0), ("s0", "dev", 999.0, 999.0)):
        labels = f'model="{MODEL}",namespace="{ns}"'
        for m in range(N):
            value = first if m < 60 else then
            lines.append(f'{COLD_START_P90}{{{labels},pod="{pod}"}} {value} {t0 + 60 * m + 30}')
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusServer, int]]:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool (shipped with prometheus) is not on PATH")
    tmp = tmp_path_factory.mktemp("history")
    t0 = (int(time.time()) // 60) * 60 - 60 * (N + 30)  # two hours ending half an hour ago
    (tmp / "data.om").write_text(openmetrics(t0))
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(tmp / "data.om"), str(tmp / "tsdb")],
                   check=True, capture_output=True)
    with running_prometheus(tmp, jobs=[]) as server:
        yield server, t0


def test_chunks_stay_under_the_point_limit() -> None:
    assert chunks(0, 600, 60, 4) == [(0, 180), (240, 420), (480, 600)]
    assert chunks(0, 0, 60, 4) == [(0, 0)]
    assert chunks(60, 60 * 11_000, 60) == [(60, 60 * 11_000)]  # 11,000 points: one query
    assert chunks(60, 60 * 11_001, 60) == [(60, 60 * 11_000), (60 * 11_001, 60 * 11_001)]


def test_queries_use_the_vocabulary_and_escape_the_model() -> None:
    q = queries('a"b', "ns")
    assert q["requests"] == ('60 * sum(rate(llm_requests_finished_total{model="a\\"b",namespace="ns",'
                             'role!="prefill"}[1m]))')
    assert "llm_prompt_tokens_total" in q["prompt_tokens"] and "llm_generation_tokens_total" in q["output_tokens"]
    assert queries("m")["requests"] == '60 * sum(rate(llm_requests_finished_total{model="m",role!="prefill"}[1m]))'


def test_spans() -> None:
    assert parse_span("7d") == 7 * 86400 and parse_span("2w") == 14 * 86400 and parse_span("90m") == 5400
    with pytest.raises(HistoryError, match="not a span"):
        parse_span("soon")


def test_the_export_gives_each_minute_of_the_model_in_its_namespace(world: tuple[PrometheusServer, int]) -> None:
    server, t0 = world
    calls: list[dict[str, str]] = []

    def counting(url: str, **kw: Any) -> tuple[int, bytes]:
        calls.append(kw["params"])
        return fetch(url, **kw)

    got = export_minutes(server.url, MODEL, t0, t0 + 60 * N, namespace="llm", max_points=50, get=counting)
    assert [m.start for m in got] == [m.start for m in expected(t0)]
    for g, e in zip(got, expected(t0), strict=True):
        assert g.requests == pytest.approx(e.requests, abs=1e-6), g
        assert g.prompt_tokens == pytest.approx(e.prompt_tokens, abs=1e-6), g
        assert g.output_tokens == pytest.approx(e.output_tokens, abs=1e-6), g
    assert len(calls) == 3 * 3  # three counters, 120 points in chunks of at most 50
    assert all((int(c["end"]) - int(c["start"])) // 60 + 1 <= 50 for c in calls)


def test_a_model_in_prefill_and_decode_pools_counts_each_request_once(world: tuple[PrometheusServer, int]) -> None:
    """Each request passes a prefill and a decode server: its prompt from the prefill pool, the request and its
    answer from the decode pool, not the sum of both (twice the requests)."""
    server, t0 = world
    got = export_minutes(server.url, PD_MODEL, t0, t0 + 60 * N, namespace="llm")
    assert [m.start for m in got] == [m.start for m in expected(t0)]
    for g, e in zip(got, expected(t0), strict=True):
        assert (g.requests, g.prompt_tokens, g.output_tokens) == pytest.approx(
            (e.requests, e.prompt_tokens, e.output_tokens), abs=1e-6), g


def test_a_week_is_asked_for_in_chunks_prometheus_accepts(world: tuple[PrometheusServer, int]) -> None:
    server, t0 = world
    end = t0 + 60 * N
    q = queries(MODEL, "llm")["requests"]
    # Prometheus refuses (end - start) / step > 11,000 (web/api/v1/api.go), and says so in these words
    with pytest.raises(HistoryError, match="exceeded maximum resolution of 11,000 points"):
        query_range(server.url, q, end - 60 * 11_001, end)
    assert query_range(server.url, q, end - 60 * 10_999, end)  # 11,000 points: what a chunk asks at most
    got = export_minutes(server.url, MODEL, end - 8 * 86400, end, namespace="llm")
    assert [m.start for m in got] == [m.start for m in expected(t0)]
    assert [m.requests for m in got] == pytest.approx([m.requests for m in expected(t0)])


def test_without_a_namespace_every_namespace_counts(world: tuple[PrometheusServer, int]) -> None:
    server, t0 = world
    got = export_minutes(server.url, MODEL, t0, t0 + 60 * N)
    # the dev namespace's replica counts 3x replica 0's: 4 r0 + r1; minutes 0-2: r0 = 1, 2, 3 and r1 = 0, 2, 4
    assert [m.requests for m in got][:3] == pytest.approx([4.0, 10.0, 16.0])
    assert [m.requests for m in got] == pytest.approx([4 * per_pod(m)[0] + per_pod(m)[1] for m in range(N)])


def test_the_file_reads_back_as_the_same_minutes(world: tuple[PrometheusServer, int], tmp_path: Path) -> None:
    server, t0 = world
    got = export_minutes(server.url, MODEL, t0, t0 + 60 * N, namespace="llm")
    path = tmp_path / "h.csv"
    write_minutes_csv(got, path, comment="test")
    rows = list(csv.reader(line for line in path.read_text().splitlines() if not line.startswith("#")))
    assert rows[0] == ["minute", "requests", "prompt_tokens", "output_tokens"]
    assert rows[1][1:] == ["1.000", "123.0", "17.0"]
    trace = load_minutes_csv(path, token_sigma=0)
    assert len(trace) == sum(sum(per_pod(m)) for m in range(N))  # whole counts: no rounding draws
    assert set(trace.prompt_tokens.tolist()) == {PROMPT_PER_REQ}


def test_a_refused_query_and_an_absent_server_are_history_errors(world: tuple[PrometheusServer, int]) -> None:
    server, t0 = world
    with pytest.raises(HistoryError, match="refused"):
        query_range(server.url, "sum(rate(", t0, t0 + 600)
    from prometheus_server import refused_address

    with pytest.raises(HistoryError, match="connection"):
        export_minutes(f"http://{refused_address()}", MODEL, t0, t0 + 600)


def test_tune_from_prometheus_end_to_end(world: tuple[PrometheusServer, int], tmp_path: Path) -> None:
    """`keda-llm tune --from-prometheus`: the saved history is the minutes written, the ScaledObject names the model."""
    from keda_llm.cli import main

    server, t0 = world
    hist, out = tmp_path / "history.csv", tmp_path / "so.yaml"
    rc = main(["tune", "--from-prometheus", server.url, "--model", MODEL, "--namespace", "llm", "--since", "2h",
               "--until", str(t0 + 60 * N), "--slo-ttft", "2", "--slo-itl", "0.1", "--quick", "--workers", "2",
               "--no-oracle", "--mode", "detailed", "--cold-start", "fast", "--save-history", str(hist),
               "--out", str(out), "--quiet"])
    assert rc in (0, 1)  # 1: written, target not met
    trace = load_minutes_csv(hist)
    assert len(trace) == sum(sum(per_pod(m)) for m in range(N))
    text = out.read_text()
    assert f"model: {MODEL}" in text and "namespace: llm" in text
    assert "--from-prometheus" in text  # the header's command names where the traffic came from


def test_the_scalers_measured_cold_start_is_read_and_tunes_the_written_cold_start(
        world: tuple[PrometheusServer, int], capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 11: the horizon is the model's measured cold start (p90). Tuned from Prometheus, the preset's cold
    start is scaled to what the scaler measured (its latest value over the span, the largest over its pods), unless
    a --cold-start case is asked for."""
    import argparse

    from keda_llm.simulator import tune_cli

    server, t0 = world
    end = t0 + 60 * N
    assert measured_cold_start_p90(server.url, MODEL, end, 7200, namespace="llm") == 240.0
    assert measured_cold_start_p90(server.url, MODEL, t0 + 60 * 50, 3000, namespace="llm") == 150.0
    assert measured_cold_start_p90(server.url, MODEL, end, 7200) == 999.0  # every namespace: the largest
    assert measured_cold_start_p90(server.url, "other", end, 7200) is None

    parser = argparse.ArgumentParser()
    tune_cli.add_arguments(parser)
    base = ["--from-prometheus", server.url, "--model", MODEL, "--namespace", "llm", "--since", "2h", "--until",
            str(end), "--slo-ttft", "2", "--slo-itl", "0.1", "--quick"]
    _, bt, *_ = tune_cli.build(parser.parse_args(base))
    assert bt.preset.cold_start(bt.cold_start).quantile(0.9) == pytest.approx(240.0)
    assert "the scaler measured a p90 of 240 s" in capsys.readouterr().err
    _, fast, *_ = tune_cli.build(parser.parse_args([*base, "--cold-start", "fast"]))
    assert fast.preset.cold_start_scale == 1.0 and fast.cold_start == "fast"
    # found by a review: the header's command must rebuild the same ScaledObject, so a --cold-start given (which
    # keeps the preset's) is repeated and none given (the measured p90) is not
    given = parser.parse_args([*base, "--cold-start", "typical"])
    _, typical, *_ = tune_cli.build(given)
    assert typical.preset.cold_start_scale == 1.0 and "--cold-start typical" in tune_cli._command(given)
    assert "--cold-start" not in tune_cli._command(parser.parse_args(base))


def test_a_measured_cold_start_past_what_a_scaledobject_takes_or_unreadable_keeps_the_presets(
        capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from httpstub import HttpStub, Request, Response
    from prometheus_server import json_body

    from keda_llm.simulator import tune_cli
    from keda_llm.simulator.hardware.presets import PRESETS

    answers = {"value": 2e5}

    def prom(request: Request) -> Response:
        if answers["value"] is None:
            return Response(500, b"down", "text/plain")
        return Response(200, json_body({"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {}, "value": [0, str(answers["value"])]}]}}), "application/json")

    stub = HttpStub(prom)
    try:
        parser = argparse.ArgumentParser()
        tune_cli.add_arguments(parser)
        args = parser.parse_args(["--from-prometheus", stub.url, "--model", "m", "--since", "2h", "--slo-ttft", "2",
                                  "--slo-itl", "0.1"])
        args.until_resolved = 1_800_000_000
        preset = PRESETS["llama-3.1-8b/h100"]
        for value, says in ((2e5, "outside what a ScaledObject's coldStart takes"), (0.3, "outside"),
                            (None, "cold start: Prometheus at")):
            answers["value"] = value
            assert tune_cli._measured_cold_start(args, "m", preset) is preset
            assert says in capsys.readouterr().err
    finally:
        stub.close()


def test_tune_from_prometheus_for_a_model_it_never_saw(world: tuple[PrometheusServer, int],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from keda_llm.cli import main

    server, t0 = world
    rc = main(["tune", "--from-prometheus", server.url, "--model", "llama-nope", "--since", "2h",
               "--until", str(t0 + 60 * N), "--slo-ttft", "2", "--slo-itl", "0.1", "--quick", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "model 'llama-nope', the last 2h: no requests" in err[0] and "hint: check the URL" in err[0], err[0]


def test_a_history_file_that_cannot_be_written_is_one_line(world: tuple[PrometheusServer, int], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from keda_llm.cli import main

    server, t0 = world
    rc = main(["tune", "--from-prometheus", server.url, "--model", MODEL, "--since", "2h", "--until",
               str(t0 + 60 * N), "--slo-ttft", "2", "--slo-itl", "0.1", "--quick", "--quiet",
               "--save-history", str(tmp_path / "no-such-dir" / "h.csv")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "cannot write" in err[0] and "--save-history" in err[0], err


def test_a_partial_answer_is_a_history_error_and_partial_answers_are_declined() -> None:
    """A history missing what a down store holds would tune for less traffic than the model serves: the
    export asks Thanos and VictoriaMetrics not to answer partially, and refuses an answer marked partial."""
    from httpstub import HttpStub, Request, Response
    from prometheus_server import json_body

    def vm(request: Request) -> Response:
        return Response(200, json_body({"status": "success", "isPartial": True,
                                        "data": {"resultType": "matrix", "result": []}}), "application/json")

    stub = HttpStub(vm)
    try:
        with pytest.raises(HistoryError, match="partial answer"):
            query_range(stub.url, "up", 1_800_000_000, 1_800_000_600)
        (req,) = stub.requests
        assert req.query["partial_response"] == ["false"] and req.query["deny_partial_response"] == ["1"]
    finally:
        stub.close()


def test_points_no_traffic_can_be_are_read_as_none_and_counted(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A NaN, an infinity or a negative rate in Prometheus' answer (an exporter that wrote NaN into a counter, a
    counter that went back): read as no traffic, and the export counts them so `tune` says how many, where it
    used to drop them without a word."""
    from collections import Counter

    from httpstub import HttpStub, Request, Response
    from prometheus_server import json_body

    from keda_llm.cli import main

    t0 = 1_700_000_040  # a minute in the past: --until is refused past now

    def matrix(request: Request) -> Response:
        values = [[t0 + 60 * (i + 1), v] for i, v in enumerate(["2", "NaN", "+Inf", "-3", "4", "-Inf"])]
        return Response(200, json_body({"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": {}, "values": values}]}}), "application/json")

    stub = HttpStub(matrix)
    try:
        dropped: Counter[str] = Counter()
        got = export_minutes(stub.url, MODEL, t0, t0 + 60 * 6, dropped=dropped)
        assert [m.requests for m in got] == [2.0, 0.0, 4.0]  # the NaN and infinite minutes hold no point
        assert dropped == {"non_finite": 3 * 3, "negative": 3}  # three counters, the same answer each
        hist = tmp_path / "h.csv"
        main(["tune", "--from-prometheus", stub.url, "--model", MODEL, "--since", "6m", "--until",
              str(t0 + 60 * 6), "--slo-ttft", "2", "--slo-itl", "0.1", "--save-history", str(hist), "--quick",
              "--no-oracle", "--quiet", "--out", str(tmp_path / "so.yaml")])
        warned = [line for line in capsys.readouterr().err.splitlines() if "NaN" in line]
        assert len(warned) == 1 and "9 NaN or infinite point(s)" in warned[0] and "3 negative" in warned[0], warned
    finally:
        stub.close()
