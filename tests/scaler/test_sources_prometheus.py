"""The `prometheus` source: against a REAL Prometheus scraping a loopback exporter body, and against
a fake HTTP server for the answers a real Prometheus would not give (scaler/sources/prometheus.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from httpstub import HttpStub, Request, Response
from prometheus_server import BodyServer, Job, PrometheusServer, json_body, prometheus_servers, refused_address
from sources_bodies import HEADER, MODEL, NOW, pod_a, pod_b, two_pod_body

from keda_llm.scaler.model import Observation
from keda_llm.scaler.sources.errors import SourceError
from keda_llm.scaler.sources.exporters import ExportersSource, static_targets
from keda_llm.scaler.sources.exposition import observations_from_exposition
from keda_llm.scaler.sources.prometheus import PrometheusSource, observations_from_vectors, signal_queries
from keda_llm.scaler.sources.promql import PrometheusClient, VectorSample, parse_query_response

Factory = Callable[[Sequence[Job]], PrometheusServer]


class Clock:
    def __init__(self, t: float = NOW) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def prometheus_factory(tmp_path: Path) -> Iterator[Factory]:
    with prometheus_servers(tmp_path) as start:
        yield start


@pytest.fixture
def exporter() -> Iterator[BodyServer]:
    server = BodyServer(two_pod_body())
    yield server
    server.close()


def _count(n: int) -> Callable[[list[object]], bool]:
    return lambda result: len(result) == 1 and float(result[0]["value"][1]) == n  # type: ignore[index]


def test_real_prometheus_gives_the_same_observations_as_the_exporter_body(
    prometheus_factory: Factory, exporter: BodyServer
) -> None:
    # Two jobs scrape the same exporter: one as recommended (honor_labels), one without, where
    # Prometheus' target labels win and the exporter's become exported_namespace / exported_pod.
    prom = prometheus_factory([
        Job("keda-llm-exporter", [exporter.address]),
        Job("annotations", [exporter.address], honor_labels=False,
            labels={"namespace": "monitoring", "pod": "keda-llm-exporter-7x2k"}),
    ])
    prom.wait_for("count(llm_engine_up)", _count(6))  # 3 replicas x 2 jobs
    source = PrometheusSource(PrometheusClient(prom.url), clock=Clock())
    try:
        source.watch("llm", MODEL, activation_query='sum(llm_requests_waiting{namespace="llm"})')
        got = source.collect_once()
        # exactly what the pure reader makes of the body: no doubling by the second job
        expected = observations_from_exposition(two_pod_body(), now=NOW)
        assert [o.replicas for o in got] == [o.replicas for o in expected]
        assert [(o.namespace, o.model, o.at) for o in got] == [("llm", MODEL, NOW), ("team-b", "Qwen/Qwen3-8B", NOW)]
        # waiting 2 (pod a) + 0 (pod b), counted once: the second job's copies carry namespace="monitoring"
        assert got[0].upstream_demand == 2.0
        assert got[1].upstream_demand is None  # not watched with a query
        assert source.status().ok and source.status().errors == {}

        # NaN in a sample reaches Prometheus as NaN; the source drops it and counts it (once per job)
        exporter.set(HEADER + pod_a(running="NaN") + pod_b())
        prom.wait_for('llm_requests_running{pod="vllm-a"}', lambda r: len(r) == 1 and r[0]["value"][1] == "NaN")
        prom.wait_for('llm_requests_running{exported_pod="vllm-a"}', lambda r: r[0]["value"][1] == "NaN")
        (obs,) = source.collect_once()
        assert [(r.pod, r.running, r.waiting) for r in obs.replicas] == [("vllm-a", None, 2.0), ("vllm-b", 3.0, 0.0)]
        assert source.status().errors == {"invalid_value": 2}
    finally:
        source.stop()


def test_real_prometheus_activation_query_scalar_empty_and_bad(
    prometheus_factory: Factory, exporter: BodyServer
) -> None:
    prom = prometheus_factory([Job("keda-llm-exporter", [exporter.address])])
    prom.wait_for("count(llm_engine_up)", _count(3))
    client = PrometheusClient(prom.url)
    assert client.demand("scalar(sum(llm_requests_running))") == 11.0  # 7 + 3 + 1, by hand
    assert client.demand('sum(llm_requests_waiting{model="no-such-model"})') == 0.0  # empty vector: no demand
    with pytest.raises(SourceError, match=r"^api_error: query 'sum\(': Prometheus said bad_data: ") as info:
        client.demand("sum(")
    assert info.value.reason == "api_error"
    with pytest.raises(SourceError, match=r"^result_type: query 'llm_requests_running\[1m\]': resultType 'matrix'"):
        client.demand("llm_requests_running[1m]")
    with pytest.raises(SourceError, match=r"^invalid_value: query 'scalar\(vector\(0\) / 0\)': scalar holds nan"):
        client.demand("scalar(vector(0) / 0)")


def test_prometheus_down_is_an_error_state_not_zero() -> None:
    down = refused_address()
    source = PrometheusSource(PrometheusClient(down, timeout_s=2.0), clock=Clock())
    try:
        source.watch("llm", MODEL)
        assert source.collect_once() == []
        assert source.latest("llm", MODEL) is None  # no data, not an empty (zero) observation
        status = source.status()
        assert not status.ok and status.last_success_at is None
        assert status.errors == {"connection": len(signal_queries())}
        assert status.last_error is not None and status.last_error.startswith(f"connection: http://{down}/api/v1/query")
    finally:
        source.stop()


VECTOR = {"status": "success", "data": {"resultType": "vector", "result": [
    {"metric": {"namespace": "llm", "model": MODEL, "pod": "vllm-a"}, "value": [NOW, "4"]}]}}


@pytest.mark.parametrize(
    ("status", "body", "ctype", "reason", "message"),
    [
        (200, b"<html>502 from the proxy</html>", "text/html", "not_json", "answer is not JSON"),
        (200, json_body([1, 2]), "application/json", "not_json", "not a Prometheus API envelope"),
        (400, json_body({"status": "error", "errorType": "bad_data", "error": "parse error at char 5"}),
         "application/json", "api_error", "Prometheus said bad_data: parse error at char 5"),
        (200, json_body({"status": "success", "data": {"resultType": "matrix", "result": []}}),
         "application/json", "result_type", "resultType 'matrix', expected vector or scalar"),
        (200, json_body({"status": "success", "data": {"resultType": "vector", "result": [{"value": [1, "2"]}]}}),
         "application/json", "not_json", "vector element without a metric object"),
        (200, json_body({"status": "success", "data": {"resultType": "vector",
                                                        "result": [{"metric": {}, "value": [1, "lots"]}]}}),
         "application/json", "not_json", "value 'lots' is not a number"),
        (502, b"bad gateway", "text/plain", "http_status", "HTTP 502"),
        (200, json_body({**VECTOR, "isPartial": True}), "application/json", "partial",  # VictoriaMetrics cluster
         "a partial answer"),
    ],
)
def test_prometheus_answering_garbage_is_a_clear_counted_error(
    status: int, body: bytes, ctype: str, reason: str, message: str
) -> None:
    fake = BodyServer(body, status, ctype)
    source = PrometheusSource(PrometheusClient(fake.address), clock=Clock())
    try:
        assert source.collect_once() == []
        got = source.status()
        assert not got.ok
        assert got.errors == {reason: len(signal_queries())}
        assert got.last_error is not None and got.last_error.startswith(f"{reason}: ")
        assert message in got.last_error
    finally:
        source.stop()
        fake.close()


def test_prometheus_garbage_after_good_data_keeps_the_last_view_and_exporters_stay_fresh() -> None:
    fake_prom = BodyServer(json_body(VECTOR), 200, "application/json")
    exporter = BodyServer(pod_a())
    clock = Clock()
    prom_source = PrometheusSource(PrometheusClient(fake_prom.address), clock=clock)
    exp_source = ExportersSource(static_targets([exporter.url]), clock=clock)
    try:
        (first,) = prom_source.collect_once()
        assert first.replicas[0].running == 4.0
        exp_source.collect_once()
        fake_prom.set(b"not json at all", 200, "text/plain")
        clock.t = NOW + 10
        exporter.set(pod_a(ts=NOW + 9, running="8"))
        assert prom_source.collect_once() == []
        assert prom_source.latest("llm", MODEL) == first  # the old one, its age visible in `at`
        (fresh,) = exp_source.collect_once()
        assert (fresh.at, fresh.replicas[0].running, fresh.replicas[0].timestamp) == (NOW + 10, 8.0, NOW + 9)
        assert exp_source.status().ok and not prom_source.status().ok
    finally:
        prom_source.stop()
        exp_source.stop()
        fake_prom.close()
        exporter.close()


def test_observations_from_vectors_reads_exported_labels_and_drops_bad_values() -> None:
    results = {
        "running": [VectorSample({"namespace": "monitoring", "exported_namespace": "llm", "model": "m",
                                  "pod": "exporter-1", "exported_pod": "p1"}, 5.0),
                    VectorSample({"namespace": "llm", "model": "m", "pod": "p2"}, float("nan"))],
        "waiting": [VectorSample({"namespace": "llm", "model": "m", "pod": "p2"}, 1.0),
                    VectorSample({"namespace": "llm", "pod": "no-model"}, 1.0)],
        "timestamp": [VectorSample({"namespace": "llm", "model": "m", "pod": "p1"}, NOW - 1)],
    }
    (obs,), invalid = observations_from_vectors(results, NOW)
    assert invalid == 1
    assert [(r.pod, r.running, r.waiting, r.timestamp) for r in obs.replicas] == [
        ("p1", 5.0, None, NOW - 1), ("p2", None, 1.0, 0.0)]


def test_signal_queries_are_one_max_by_pod_per_signal() -> None:
    q = signal_queries('namespace=~"ml-.*"')
    assert q["running"] == ('max by (namespace, exported_namespace, model, pod, exported_pod, role) '
                            '(llm_requests_running{namespace=~"ml-.*"})')
    assert q["timestamp"].endswith("(llm_engine_last_success_timestamp_seconds{namespace=~\"ml-.*\"})")
    # 13 gauges/counters + the TTFT and ITL histograms' _sum and _count + 3 LoRA gauges + llm_replica_degraded
    assert len(q) == 21
    assert q["degraded"] == ('max by (namespace, exported_namespace, model, pod, exported_pod, role, reason) '
                             '(llm_replica_degraded{namespace=~"ml-.*"})')


def test_parse_query_response_scalar() -> None:
    body = json_body({"status": "success", "data": {"resultType": "scalar", "result": [NOW, "2.5"]}})
    assert parse_query_response(body, "q") == ("scalar", 2.5)


def test_empty_observation_for_a_watched_model_after_a_good_cycle() -> None:
    fake = BodyServer(json_body({"status": "success", "data": {"resultType": "vector", "result": []}}),
                      200, "application/json")
    source = PrometheusSource(PrometheusClient(fake.address), clock=Clock())
    try:
        source.watch("llm", "asleep")
        assert source.collect_once() == [Observation(namespace="llm", model="asleep", at=NOW)]
    finally:
        source.stop()
        fake.close()


def test_every_signal_of_a_cycle_is_evaluated_at_one_time() -> None:
    """Each query at Prometheus' own "now", a scrape landing between two of them mixed two scrapes in one
    observation (a panic-window mean TTFT read twice its value, found by a review)."""

    class Recording(PrometheusClient):
        def __init__(self) -> None:
            super().__init__("127.0.0.1:9")
            self.ats: list[float | None] = []

        def vector(self, promql: str, at: float | None = None) -> list[VectorSample]:
            self.ats.append(at)
            return []

    client = Recording()
    source = PrometheusSource(client, clock=Clock())
    try:
        source.collect_once()
        source.collect_once()
    finally:
        source.stop()
    n = len(signal_queries())
    assert len(client.ats) == 2 * n and None not in client.ats
    assert len(set(client.ats[:n])) == 1 and len(set(client.ats[n:])) == 1


def test_a_querier_that_answers_partially_by_default_is_asked_not_to() -> None:
    """A Thanos querier answers with what the stores that answered hold, unless `partial_response=false`
    (a VictoriaMetrics cluster: `deny_partial_response=1`). A partial view reads missing replicas as fewer
    replicas; asked not to, the querier fails the query, and the cycle publishes nothing (it holds)."""
    def thanos(request: Request) -> Response:
        if request.query.get("partial_response") == ["false"]:
            return Response(422, json_body({"status": "error", "errorType": "execution",
                                            "error": "receive series from store B: unavailable"}), "application/json")
        return Response(200, json_body({**VECTOR, "warnings": ["receive series from store B: unavailable"]}),
                        "application/json")

    stub = HttpStub(thanos)
    source = PrometheusSource(PrometheusClient(stub.address), clock=Clock())
    try:
        source.watch("llm", MODEL)
        assert source.collect_once() == []
        assert source.latest("llm", MODEL) is None
        assert source.status().errors == {"api_error": len(signal_queries())}
        assert all(r.query.get("deny_partial_response") == ["1"] for r in stub.requests)
        # the long history's range queries ask the same
        with pytest.raises(SourceError, match="unavailable"):
            PrometheusClient(stub.address).range_query("up", NOW - 60, NOW, 15)
        assert stub.requests[-1].path == "/api/v1/query_range"
        assert stub.requests[-1].query.get("partial_response") == ["false"]
    finally:
        source.stop()
        stub.close()


@pytest.mark.parametrize("skew_s", [90.0, -45.0, 0.5])
def test_a_cycle_is_evaluated_at_prometheus_now_when_its_clock_is_off(skew_s: float) -> None:
    """A Prometheus whose clock runs behind ours was asked about its future (a 6 s panic window there holds
    no samples), one ahead about its past. The source measures the offset with `time()` at Prometheus' own
    now and evaluates every signal at ours plus it; within clocks.TOLERANCE_S it reads as none. The clock
    is measured once a minute, not every cycle."""
    import time

    def prometheus(request: Request) -> Response:
        if request.query.get("query") == ["time()"]:
            now = time.time() + skew_s
            return Response(200, json_body({"status": "success",
                                            "data": {"resultType": "scalar", "result": [now, f"{now:.3f}"]}}),
                            "application/json")
        return Response(200, json_body(VECTOR), "application/json")

    stub = HttpStub(prometheus)
    source = PrometheusSource(PrometheusClient(stub.address), clock=Clock())
    try:
        before = time.time()
        source.collect_once()
        source.collect_once()
        after = time.time()
    finally:
        source.stop()
        stub.close()
    clocks = [r for r in stub.requests if r.query.get("query") == ["time()"]]
    assert len(clocks) == 1  # measured once for both cycles
    assert "time" not in clocks[0].query  # at Prometheus' own now: with a `time` it would echo ours
    ats = [float(r.query["time"][0]) for r in stub.requests if r.query.get("query") != ["time()"]]
    assert len(ats) == 2 * len(signal_queries())
    expected = skew_s if abs(skew_s) > 2.0 else 0.0
    assert source.clock_offset == pytest.approx(expected, abs=0.5)
    assert all(before + expected - 0.5 <= at <= after + expected + 0.5 for at in ats), (ats, before, after)


def test_a_prometheus_that_cannot_tell_its_time_leaves_the_cycle_at_our_clock() -> None:
    """`time()` refused or odd (a proxy that allows only the signal queries): no offset, and the signals
    are still read, each at our clock."""
    def prometheus(request: Request) -> Response:
        if request.query.get("query") == ["time()"]:
            return Response(400, json_body({"status": "error", "errorType": "bad_data", "error": "not allowed"}),
                            "application/json")
        return Response(200, json_body(VECTOR), "application/json")

    import time

    stub = HttpStub(prometheus)
    source = PrometheusSource(PrometheusClient(stub.address), clock=Clock())
    try:
        source.watch("llm", MODEL)
        before = time.time()
        assert source.collect_once() != []
        after = time.time()
        assert source.clock_offset == 0.0
        ats = [float(r.query["time"][0]) for r in stub.requests if r.query.get("query") != ["time()"]]
        assert ats and all(before - 0.5 <= at <= after + 0.5 for at in ats)
    finally:
        source.stop()
        stub.close()
