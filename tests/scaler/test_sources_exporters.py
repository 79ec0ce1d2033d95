"""The `exporters` source against real HTTP exporters on loopback (scaler/sources/exporters.py)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from prometheus_server import BodyServer, json_body, refused_address
from sources_bodies import MODEL, NOW, pod_a, pod_b, two_pod_body

from keda_llm.scaler.model import Observation
from keda_llm.scaler.sources.errors import SourceError
from keda_llm.scaler.sources.exporters import ExportersSource, dns_targets, static_targets
from keda_llm.scaler.sources.exposition import observations_from_exposition
from keda_llm.scaler.sources.promql import PrometheusClient


class Clock:
    def __init__(self, t: float = NOW) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def servers() -> Iterator[list[BodyServer]]:
    made: list[BodyServer] = []
    yield made
    for s in made:
        s.close()


def serve(servers: list[BodyServer], body: str | bytes, status: int = 200, ctype: str = "text/plain") -> BodyServer:
    server = BodyServer(body, status, ctype)
    servers.append(server)
    return server


def source(urls: list[str], clock: Clock, **kw: object) -> ExportersSource:
    return ExportersSource(static_targets(urls), clock=clock, timeout_s=2.0, **kw)  # type: ignore[arg-type]


def test_two_exporters_one_pod_each_merge_into_one_observation(servers: list[BodyServer]) -> None:
    n1, n2 = serve(servers, pod_a()), serve(servers, pod_b())
    src = source([n1.url, n2.url], Clock())
    try:
        got = src.collect_once()
        (obs,) = got
        # the same replicas as one body holding both pods (the pure reader's tested answer)
        (one_body,) = observations_from_exposition(pod_a() + pod_b(), now=NOW)
        assert obs == one_body
        assert [r.pod for r in obs.replicas] == ["vllm-a", "vllm-b"]
        assert [r.running for r in obs.replicas] == [7.0, 3.0]
        assert src.latest("llm", MODEL) == obs
        assert src.latest("llm", "nope") is None
        status = src.status()
        assert status.ok and status.last_success_at == NOW and status.last_error is None
        assert status.targets == {n1.url: None, n2.url: None}
        assert (n1.requests, n2.requests) == (1, 1)
    finally:
        src.stop()


def test_exporter_down_and_exporter_answering_garbage_leave_the_others_fresh(servers: list[BodyServer]) -> None:
    good = serve(servers, pod_a())
    html = serve(servers, "<html><body>oops</body></html>", 200, "text/html")
    down = f"http://{refused_address()}/metrics"
    clock = Clock()
    src = source([good.url, html.url, down], clock)
    try:
        (obs,) = src.collect_once()
        assert [r.pod for r in obs.replicas] == ["vllm-a"]
        status = src.status()
        assert status.ok  # one exporter answered: the view is usable
        assert status.errors == {"parse": 1, "connection": 1}
        assert status.targets[good.url] is None
        assert status.targets[html.url] == (
            f"parse: {html.url}: line 1: not an exposition line: '<html><body>oops</body></html>'")
        down_error = status.targets[down]
        assert down_error is not None and down_error.startswith(f"connection: {down}")
        # the next cycle: the good exporter's new answer comes through at once
        clock.t = NOW + 2
        good.set(pod_a(ts=NOW + 1, running="9"))
        (obs,) = src.collect_once()
        assert (obs.at, obs.replicas[0].running, obs.replicas[0].timestamp) == (NOW + 2, 9.0, NOW + 1)
        assert src.status().errors == {"parse": 2, "connection": 2}
    finally:
        src.stop()


def test_nan_in_samples_is_missing_and_counted(servers: list[BodyServer]) -> None:
    n1 = serve(servers, pod_a(running="NaN", kv="NaN"))
    src = source([n1.url], Clock())
    try:
        (obs,) = src.collect_once()
        assert (obs.replicas[0].running, obs.replicas[0].kv_usage_ratio, obs.replicas[0].waiting) == (None, None, 2.0)
        assert src.status().errors == {"invalid_value": 2}
    finally:
        src.stop()


def test_http_error_too_large_and_not_utf8(servers: list[BodyServer]) -> None:
    err = serve(servers, "exporter broke", 500)
    big = serve(servers, pod_a() * 100)
    binary = serve(servers, b"\xff\xfe\x00garbage")
    src = ExportersSource(static_targets([err.url, big.url, binary.url]), clock=Clock(), max_bytes=4096)
    try:
        assert src.collect_once() == []
        status = src.status()
        assert not status.ok
        assert status.errors == {"http_status": 1, "too_large": 1, "parse": 1}
        assert status.targets[err.url] == f"http_status: {err.url}: HTTP 500: b'exporter broke'"
        assert status.targets[big.url] == f"too_large: {big.url}: Content-Length {len(pod_a()) * 100} > 4096 bytes"
        assert status.targets[binary.url] == f"parse: {binary.url}: body is not UTF-8"
    finally:
        src.stop()


def test_an_exporter_that_never_answers_times_out() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # the kernel accepts the connection; nobody ever answers
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/metrics"
    src = ExportersSource(static_targets([url]), clock=Clock(), timeout_s=0.3)
    try:
        assert src.collect_once() == []
        assert src.status().errors == {"timeout": 1}
    finally:
        src.stop()
        listener.close()


def test_failed_exporter_keeps_its_last_answer_until_forgotten(servers: list[BodyServer]) -> None:
    n1, n2 = serve(servers, pod_a()), serve(servers, pod_b())
    clock = Clock()
    src = source([n1.url, n2.url], clock, forget_after_s=60.0)
    try:
        src.collect_once()
        n2.set("", status=503)
        clock.t = NOW + 30
        (obs,) = src.collect_once()
        # pod b is still there with its old timestamp: stale (hold), not gone (lost capacity)
        assert [(r.pod, r.timestamp) for r in obs.replicas] == [("vllm-a", NOW - 1), ("vllm-b", NOW - 2)]
        clock.t = NOW + 61
        (obs,) = src.collect_once()
        assert [r.pod for r in obs.replicas] == ["vllm-a"]
        assert n2.url not in src.status().targets
    finally:
        src.stop()


def test_a_pod_reported_by_two_exporters_takes_the_fresher_answer(servers: list[BodyServer]) -> None:
    old = serve(servers, pod_a(ts=NOW - 10, running="1"))
    new = serve(servers, pod_a(ts=NOW - 1, running="5"))
    for order in ([old.url, new.url], [new.url, old.url]):
        src = source(order, Clock())
        try:
            (obs,) = src.collect_once()
            assert [(r.pod, r.running, r.timestamp) for r in obs.replicas] == [("vllm-a", 5.0, NOW - 1)]
        finally:
            src.stop()


def test_watched_model_without_replicas_is_an_empty_fresh_observation(servers: list[BodyServer]) -> None:
    n1 = serve(servers, pod_a())
    src = source([n1.url], Clock())
    try:
        assert src.latest("llm", "sleeping-model") is None
        src.watch("llm", "sleeping-model")
        got = src.collect_once()
        assert [(o.model, len(o.replicas)) for o in got] == [(MODEL, 1), ("sleeping-model", 0)]
        assert src.latest("llm", "sleeping-model") == Observation(namespace="llm", model="sleeping-model", at=NOW)
        src.unwatch("llm", "sleeping-model")
        assert [o.model for o in src.collect_once()] == [MODEL]
    finally:
        src.stop()


def test_all_exporters_down_publishes_nothing_and_keeps_the_last_view(servers: list[BodyServer]) -> None:
    n1 = serve(servers, pod_a())
    clock = Clock()
    src = source([n1.url], clock)
    seen: list[Observation] = []
    src.subscribe(seen.append)
    try:
        first = src.collect_once()
        n1.set("", status=502)
        clock.t = NOW + 5
        assert src.collect_once() == []
        assert seen == first
        assert src.latest("llm", MODEL) == first[0]  # old `at`, old replica timestamps: the policy sees the age
        status = src.status()
        assert (status.ok, status.last_success_at) == (False, NOW)
        assert status.last_error == f"http_status: {n1.url}: HTTP 502: b''"
    finally:
        src.stop()


def test_two_sources_fed_the_same_inputs_give_identical_observations(servers: list[BodyServer]) -> None:
    n1, n2 = serve(servers, two_pod_body()), serve(servers, pod_b(ts=NOW - 5, running="99"))
    one = source([n1.url, n2.url], Clock())
    two = source([n2.url, n1.url], Clock())
    try:
        first, second = one.collect_once(), two.collect_once()
        assert first == second
        assert [o.model for o in first] == [MODEL, "Qwen/Qwen3-8B"]
        assert first[0].replicas[1].running == 3.0  # n1's pod b is fresher than n2's stale copy
    finally:
        one.stop()
        two.stop()


def test_background_loop_publishes_to_subscribers(servers: list[BodyServer]) -> None:
    n1 = serve(servers, pod_a())
    src = ExportersSource(static_targets([n1.url]), interval_s=0.05)
    got: list[Observation] = []
    two_cycles = threading.Event()

    def ingest(obs: Observation) -> None:
        got.append(obs)
        if len(got) >= 2:
            two_cycles.set()

    def broken(obs: Observation) -> None:
        raise RuntimeError("a subscriber bug must not stop collection")

    src.subscribe(broken)
    src.subscribe(ingest)
    src.start()
    try:
        assert two_cycles.wait(10)
    finally:
        src.stop()
    assert {o.model for o in got} == {MODEL}
    assert n1.requests >= 2


def test_dns_targets_sorted_unique_urls_ipv6_bracketed() -> None:
    def fake(name: str, port: int, type: int) -> list[tuple[object, object, object, object, tuple[object, ...]]]:
        assert (name, port, type) == ("keda-llm-exporter.keda-llm-exporter.svc", 9400, socket.SOCK_STREAM)
        return [(2, 1, 6, "", ("10.0.0.9", 9400)), (2, 1, 6, "", ("10.0.0.10", 9400)),
                (2, 1, 6, "", ("10.0.0.9", 9400)), (10, 1, 6, "", ("fd00::5", 9400, 0, 0))]

    resolve = dns_targets("keda-llm-exporter.keda-llm-exporter.svc", getaddrinfo=fake)
    assert list(resolve()) == ["http://10.0.0.10:9400/metrics", "http://10.0.0.9:9400/metrics",
                               "http://[fd00::5]:9400/metrics"]


def test_dns_failure_keeps_the_last_known_exporters(servers: list[BodyServer]) -> None:
    n1 = serve(servers, pod_a())
    answers: list[list[str] | Exception] = [[n1.url], SourceError("dns", "x.svc: Name or service not known")]

    def resolver() -> list[str]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    src = ExportersSource(resolver, clock=Clock())
    try:
        src.collect_once()
        (obs,) = src.collect_once()
        assert [r.pod for r in obs.replicas] == ["vllm-a"] and n1.requests == 2
        status = src.status()
        assert status.errors == {"dns": 1}
        assert status.last_error == "dns: x.svc: Name or service not known (using the last 1 known exporters)"
    finally:
        src.stop()


def test_real_dns_resolution_of_localhost(servers: list[BodyServer]) -> None:
    n1 = serve(servers, pod_a())
    urls = list(dns_targets("localhost", n1.port)())
    assert f"http://127.0.0.1:{n1.port}/metrics" in urls


def test_static_targets_complete_host_port() -> None:
    assert list(static_targets(["10.0.0.6:9400", "http://x:1/m", "10.0.0.5:9400"])()) == [
        "http://10.0.0.5:9400/metrics", "http://10.0.0.6:9400/metrics", "http://x:1/m"]


def test_activation_query_attaches_upstream_demand_and_a_broken_one_is_counted(servers: list[BodyServer]) -> None:
    n1 = serve(servers, pod_a())
    vector = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"gateway": "a"}, "value": [NOW, "3"]}, {"metric": {"gateway": "b"}, "value": [NOW, "1.5"]}]}}
    prom = serve(servers, json_body(vector), 200, "application/json")
    src = source([n1.url], Clock(), activation=PrometheusClient(prom.address))
    try:
        src.watch("llm", MODEL, activation_query='sum(gateway_pending{model="llama"})')
        src.watch("llm", "cold", activation_query="gateway_pending")
        got = {o.model: o.upstream_demand for o in src.collect_once()}
        assert got == {MODEL: 4.5, "cold": 4.5}
        prom.set("<html>proxy error</html>", 200, "text/html")
        (cold, obs) = src.collect_once()
        assert (obs.upstream_demand, cold.upstream_demand) == (None, None)
        assert obs.replicas[0].running == 7.0  # replica data unaffected
        assert src.status().errors == {"not_json": 2}
    finally:
        src.stop()


def test_activation_query_without_prometheus_is_refused() -> None:
    src = ExportersSource(static_targets([]))
    with pytest.raises(ValueError, match="activationQuery for llm/m needs a Prometheus address"):
        src.watch("llm", "m", activation_query="up")
    src.stop()
