"""The scaler's service edges as KEDA and operators drive them: defects found by a review, one test each.

- A ScaledObject with bad metadata is refused on every poll from the config cache's one parse; the cached
  error was raised again each time and its traceback grew by every call's frames (and kept them alive):
  a rejected ScaledObject leaked about 2 KB per call for as long as KEDA polled it.
- An `external-push` ScaledObject re-created with new metadata keeps its stream open under the same name, so
  the entry of its old metadata was never forgotten: re-decided every tick for good, it kept its old series
  in /metrics and, for a model with no data, raised `keda_llm_scaler_unavailable_total` (the
  LLMScalerUnavailable alert) for a ScaledObject KEDA no longer asked about.
- An edited ScaledObject (same name and model, new metadata) was decided on its old metadata in the
  background for the hour until the sweep: the refresher wrote the old count into the same series right
  after a poll decided the new one, and the demand watch read the old activationQuery.
- A Prometheus answering deeply nested JSON raised RecursionError out of the parser: a traceback per cycle
  from the source's loop and a health that still said ok, where any other garbage is a counted `not_json`.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from prometheus_client import generate_latest
from prometheus_server import BodyServer
from scaler_harness import (
    FakeClock,
    FakeHistory,
    ServerThread,
    StreamReader,
    keda_poll,
    make_service,
    metric_value,
    ref,
    stub,
)

from keda_llm.scaler.activation import ScaledObjectKey
from keda_llm.scaler.config import ConfigError
from keda_llm.scaler.externalscaler import externalscaler_pb2 as pb
from keda_llm.scaler.model import Decision
from keda_llm.scaler.sources.errors import SourceError
from keda_llm.scaler.sources.prometheus import PrometheusSource, signal_queries
from keda_llm.scaler.sources.promql import PrometheusClient, parse_query_response, parse_range_response

HOUR = 3600.0


def test_a_rejected_scaled_object_polled_many_times_does_not_grow_its_error() -> None:
    service = make_service({}, FakeClock())
    key = ScaledObjectKey("llm", "bad")
    metadata = {"model": "m", "stableWindow": "1e30s"}
    depths = []
    for _ in range(50):  # KEDA polls a rejected ScaledObject forever: GetMetricSpec, GetMetrics, IsActive
        with pytest.raises(ConfigError) as err:
            service.config(key, metadata)
        depths.append(len(traceback.extract_tb(err.value.__traceback__)))
        assert "stableWindow" in str(err.value)
    assert depths[-1] == depths[0], f"traceback grew from {depths[0]} to {depths[-1]} frames"


def test_a_rejected_scaled_object_is_invalid_argument_on_every_call(
        server_with: tuple[ServerThread, FakeClock]) -> None:
    server, _ = server_with
    client = stub(grpc.insecure_channel(server.target))
    bad = ref(name="bad", model="m", targetKVUtilization="NaN")
    for _ in range(3):
        with pytest.raises(grpc.RpcError) as err:
            client.GetMetricSpec(bad, timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "'targetKVUtilization' = 'NaN'" in err.value.details()


@pytest.fixture
def server_with() -> Iterator[tuple[ServerThread, FakeClock]]:
    clock = FakeClock()
    service = make_service({("llm", "new"): FakeHistory(2)}, clock, forget_after_s=HOUR)
    server = ServerThread(service)
    yield server, clock
    server.stop()


def _series(server: ServerThread, model: str) -> list[str]:
    text = generate_latest(server.service.metrics.registry).decode()
    return [line for line in text.splitlines() if not line.startswith("#") and f'model="{model}"' in line]


def test_a_push_scaled_object_recreated_with_new_metadata_forgets_the_old_one(
        server_with: tuple[ServerThread, FakeClock]) -> None:
    server, clock = server_with
    service = server.service
    client = stub(grpc.insecure_channel(server.target))
    old = ref(name="chat", model="old")  # a model nothing reports: UNAVAILABLE
    new = ref(name="chat", model="new", scaleToZero="true")
    first = client.StreamIsActive(old)
    StreamReader(first)
    with pytest.raises(grpc.RpcError) as err:
        keda_poll(client, old, timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    # KEDA restarts the push scaler with the new spec: the old stream ends, a new one opens, same name
    first.cancel()
    deadline = time.monotonic() + 10
    while service.bus.streams() and time.monotonic() < deadline:
        time.sleep(0.01)
    second = client.StreamIsActive(new)
    StreamReader(second)
    while not service.bus.streams() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert service.bus.streams() == 1
    for _ in range(8):  # two hours and more of KEDA polling the new metadata, the refresher deciding
        clock.now += 20 * 60
        assert keda_poll(client, new, timeout=10).values[0][1] == 2
        service.refresh()
    assert len(service.known()) == 1, "the old metadata's entry is still decided every tick"
    assert _series(server, "old") == []
    second.cancel()


def test_a_stream_alone_keeps_its_scaled_object_remembered(server_with: tuple[ServerThread, FakeClock]) -> None:
    """The rule the fix keeps: an entry whose stream is open is not forgotten while nothing newer replaced it."""
    server, clock = server_with
    service = server.service
    client = stub(grpc.insecure_channel(server.target))
    new = ref(name="chat", model="new", scaleToZero="true")
    keda_poll(client, new, timeout=10)
    call = client.StreamIsActive(new)
    StreamReader(call)
    deadline = time.monotonic() + 10
    while not service.bus.streams() and time.monotonic() < deadline:
        time.sleep(0.01)
    for _ in range(8):  # paused polls, stream still open
        clock.now += 20 * 60
        service.refresh()
    assert len(service.known()) == 1
    call.cancel()


DEEP = b"[" * 200_000 + b"]" * 200_000


@pytest.mark.parametrize("parse", [parse_query_response, parse_range_response])
def test_deeply_nested_json_is_not_json_not_a_crash(parse: Callable[[bytes, str], object]) -> None:
    with pytest.raises(SourceError) as err:
        parse(DEEP, "up")
    assert err.value.reason == "not_json"


def test_a_prometheus_answering_deeply_nested_json_is_a_counted_error() -> None:
    fake = BodyServer(DEEP, 200, "application/json")
    source = PrometheusSource(PrometheusClient(fake.address), clock=FakeClock())
    try:
        assert source.collect_once() == []
        status = source.status()
        assert not status.ok
        assert status.errors == {"not_json": len(signal_queries())}
        assert status.last_error is not None and status.last_error.startswith("not_json: ")
        assert len(status.last_error) < 500
    finally:
        source.stop()
        fake.close()


def test_stream_with_bad_metadata_is_invalid_argument(server_with: tuple[ServerThread, FakeClock]) -> None:
    server, _ = server_with
    client = stub(grpc.insecure_channel(server.target))
    call = client.StreamIsActive(pb.ScaledObjectRef(name="chat", namespace="llm",
                                                    scalerMetadata={"model": "new", "idleTimeout": "-1s"}))
    reader = StreamReader(call)
    assert reader.next() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize(("length", "status"), [(b"\xb2", b"400"), (b"9" * 5000, b"413")])
def test_an_odd_content_length_is_answered_not_a_traceback(server_with: tuple[ServerThread, FakeClock],
                                                           caplog: pytest.LogCaptureFixture, length: bytes,
                                                           status: bytes) -> None:
    """`²` is a digit to str.isdigit() but not to int(); 5,000 digits pass int()'s limit: both raised in the
    handler (a traceback in the log, the connection cut without an answer)."""
    server, _ = server_with
    with caplog.at_level(logging.ERROR, logger="keda_llm.scaler.server"), \
            socket.create_connection(("127.0.0.1", server.server.http_port), timeout=10) as conn:
        conn.sendall(b"POST /v1/activate/llm/chat HTTP/1.1\r\nHost: scaler\r\nContent-Length: " + length + b"\r\n\r\n")
        answer = conn.recv(200)
    assert answer.split(b"\r\n")[0].split(b" ")[1] == status
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_huge_metadata_key_is_still_invalid_argument(server_with: tuple[ServerThread, FakeClock]) -> None:
    # the message quoted the 20 KB key whole: grpc-message passed the client's 16 KB header limit, and the
    # client saw RESOURCE_EXHAUSTED "Stream removed" instead of what was wrong
    server, _ = server_with
    client = stub(grpc.insecure_channel(server.target))
    bad = ref(name="bad", model="m", **{"k" * 20_000: "1"})
    with pytest.raises(grpc.RpcError) as err:
        client.GetMetricSpec(bad, timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value
    assert len(err.value.details()) <= 2000 and "characters)" in err.value.details()


def test_sources_save_the_history_first_and_stop_side_by_side() -> None:
    # each source's stop waits up to 10 s for a step and then for its fetches; one after another, a few hung
    # sources outlasted Kubernetes' 30 s grace and the pod died before its snapshot was written
    from keda_llm.scaler.assembly import ScalerSettings, Sources
    from keda_llm.scaler.service import HistoryStore

    sources = Sources(ScalerSettings(exporters=("127.0.0.1:9400",)), background=False)
    events: list[str] = []
    barrier = threading.Barrier(3, timeout=10.0)

    class Hung:
        def stop(self) -> None:
            events.append("stop")
            barrier.wait()  # passes only when all three stop at once

    for i in range(3):
        sources._sources[("exporters-static", f"10.0.0.{i}:9400", "")] = (Hung(), HistoryStore())  # type: ignore[assignment]
    sources.restorer.save = lambda: events.append("save")  # type: ignore[method-assign]
    sources.stop()
    assert events == ["save", "stop", "stop", "stop"]
    assert not barrier.broken


def _by_kv_target(calls: list[float]) -> Callable[..., Any]:
    """A decide whose count is 10 x the ScaledObject's targetKVUtilization, recording each config it ran."""
    def decide(history: FakeHistory, config: Any, state: Any, workload: Any, now: float) -> Any:
        calls.append(config.target_kv_utilization)
        return Decision(round(10 * config.target_kv_utilization), "steady", True, {}), state
    return decide


def _desired(service: Any, name: str = "chat") -> float | None:
    text = generate_latest(service.metrics.registry).decode()
    return metric_value(text, "keda_llm_scaler_desired_replicas", namespace="llm", scaledobject=name, model="new")


def _kv_target_service() -> tuple[FakeClock, list[float], Any, ServerThread]:
    """One model's service deciding by `_by_kv_target`, remembered for an hour, served over loopback; ask it
    with `_kv_refs`."""
    clock = FakeClock()
    calls: list[float] = []
    service = make_service({("llm", "new"): FakeHistory(2)}, clock, decide=_by_kv_target(calls),
                           forget_after_s=HOUR, reuse_s=2.0)
    return clock, calls, service, ServerThread(service)


def _kv_refs(server: ServerThread) -> tuple[Any, Any, Any]:
    """A client of `server` and one ScaledObject's trigger at targetKVUtilization 0.5 and at 0.8."""
    client = stub(grpc.insecure_channel(server.target))
    return (client, ref(name="chat", model="new", targetKVUtilization="0.5"),
            ref(name="chat", model="new", targetKVUtilization="0.8"))


def test_an_edited_scaled_object_is_not_decided_on_its_old_metadata_in_the_background() -> None:
    # kubectl edit: the same ScaledObject, the same model, a new targetKVUtilization. KEDA asks only the new
    # metadata from then on, but the old entry lives until the sweep forgets it (an hour). The refresher
    # decided it every tick and wrote its count into the same series: after a poll decided the new metadata in
    # a tick, the refresher skipped that entry and decided the old one, so the gauge showed the old count
    clock, calls, service, server = _kv_target_service()
    try:
        client, old, new = _kv_refs(server)
        for _ in range(4):  # KEDA's default pollingInterval, 30 s
            assert keda_poll(client, old, timeout=10).values[0][1] == 5
            service.refresh()
            clock.now += 30
        for i in range(20):  # ten minutes of the edited ScaledObject
            assert keda_poll(client, new, timeout=10).values[0][1] == 8
            calls.clear()
            service.refresh()  # the same tick as the poll
            if i >= 4:  # past 3 of the old metadata's poll gaps (90 s): superseded
                assert _desired(service) == 8, f"the gauge shows the old metadata's count {i * 30} s after the edit"
                assert 0.5 not in calls, "the old metadata is still decided in the background"
            clock.now += 30
        assert len(service.known()) == 2  # still remembered (the sweep's hour), just not decided unasked
        # nor watched for demand (the old metadata's activationQuery must not wake the model)
        stream = client.StreamIsActive(new)
        StreamReader(stream)
        deadline = time.monotonic() + 10
        while not service.bus.streams() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(service.watched_entries()) == 1
        stream.cancel()
        assert keda_poll(client, old, timeout=10).values[0][1] == 5  # and still answered when asked
    finally:
        server.stop()


def test_two_triggers_polled_slowly_are_both_decided_in_the_background() -> None:
    # a ScaledObject with two external triggers and pollingInterval 10m: each trigger is asked every 10
    # minutes; neither supersedes the other (each has been asked since the other first was)
    clock, calls, service, server = _kv_target_service()
    try:
        client, first, second = _kv_refs(server)
        for _ in range(4):
            keda_poll(client, first, timeout=10)
            clock.now += 1
            keda_poll(client, second, timeout=10)
            for _ in range(10):  # the refresher, once a minute here, between polls
                clock.now += 59.9
                calls.clear()
                service.refresh()
                assert sorted(calls) == [0.5, 0.8]
    finally:
        server.stop()
