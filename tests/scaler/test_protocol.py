"""KEDA's protocol in one place (scaler/protocol.py): its answers and status codes, and both adapters
(the gRPC servicer and the simulator's in-process ServiceScaler) going through the same functions."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from scaler_harness import FakeClock, FakeHistory, Poll, ServerThread, keda_poll, make_service, ref, stub

from keda_llm.scaler import protocol
from keda_llm.scaler.activation import ScaledObjectKey
from keda_llm.scaler.config import ConfigError
from keda_llm.scaler.externalscaler import externalscaler_pb2 as pb
from keda_llm.scaler.model import WorkloadState
from keda_llm.scaler.service import ScalerService
from keda_llm.simulator.control import KedaSettings, ScaledObjectRef, ScalerUnavailable, Trigger
from keda_llm.simulator.control.scaler import ServiceScaler

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
NAME = "llm-meta-llama-llama-3-1-8b-instruct-" + hashlib.sha256(MODEL.encode()).hexdigest()[:6]
KEY = ScaledObjectKey("llm", "llama")
META = {"scalerAddress": "keda-llm-scaler.keda-llm:9090", "model": MODEL}


def service(history: FakeHistory | None = None, **kwargs: Any) -> ScalerService:
    histories = {} if history is None else {("llm", MODEL): history}
    return make_service(histories, FakeClock(), **kwargs)


def status(call: Callable[[], object]) -> protocol.StatusError:
    with pytest.raises(protocol.StatusError) as info:
        call()
    return info.value


def test_answers_target_one_and_the_desired_count() -> None:
    svc = service(FakeHistory(desired=3, active=True))
    assert protocol.get_metric_spec(svc, KEY, META) == protocol.MetricSpecAnswer(NAME, 1)
    assert protocol.TARGET == 1
    for asked in (NAME, NAME.upper(), f"s0-{NAME}", ""):
        assert protocol.get_metrics(svc, KEY, META, asked) == protocol.MetricValueAnswer(NAME, 3, True)
    assert protocol.is_active(svc, KEY, META) is True
    assert protocol.open_stream(svc, KEY, META) is None
    assert protocol.stream_first_answer(svc, KEY, META) is True


def test_a_desired_zero_is_zero_and_inactive() -> None:
    svc = service(FakeHistory(desired=0, active=False))
    meta = {**META, "scaleToZero": "true"}
    assert protocol.get_metrics(svc, KEY, meta, NAME) == protocol.MetricValueAnswer(NAME, 0, False)
    assert protocol.is_active(svc, KEY, meta) is False


def test_bad_metadata_is_invalid_argument_naming_the_key() -> None:
    svc = service(FakeHistory(desired=3))
    bad = {**META, "targetKVUtilization": "lots"}
    calls: list[Callable[[], object]] = [
        lambda: protocol.get_metric_spec(svc, KEY, bad),
        lambda: protocol.get_metrics(svc, KEY, bad, NAME),
        lambda: protocol.is_active(svc, KEY, {**bad, "scaleToZero": "true"}),
        lambda: protocol.open_stream(svc, KEY, bad),
    ]
    for call in calls:
        err = status(call)
        assert err.code == "INVALID_ARGUMENT"
        assert err.message.startswith("invalid ScaledObject metadata: ")
        assert "targetKVUtilization" in err.message and "'lots'" in err.message


def test_a_config_error_without_the_key_in_its_text_gets_it_named() -> None:
    class Bare(ValueError):
        key, value = "policy", "magic"

    assert protocol.describe_config_error(Bare("no such one")) == (
        "invalid ScaledObject metadata: metadata key 'policy' (value 'magic'): no such one")
    err = protocol.status_of(ConfigError("policy", "magic", "unknown"))
    assert err is not None and err.code == "INVALID_ARGUMENT" and "'policy'" in err.message
    assert protocol.status_of(RuntimeError("bug")) is None  # not the protocol's: the transport says INTERNAL


def test_no_usable_data_is_unavailable() -> None:
    never_seen = service()
    err = status(lambda: protocol.get_metrics(never_seen, KEY, META, NAME))
    assert err.code == "UNAVAILABLE" and "has been seen yet" in err.message
    no_samples = service(FakeHistory(desired=None))
    err = status(lambda: protocol.is_active(no_samples, KEY, {**META, "scaleToZero": "true"}))
    assert err.code == "UNAVAILABLE" and "fake: no samples" in err.message
    # the stream's first answer reads "no data yet" as inactive instead of failing
    assert protocol.stream_first_answer(no_samples, KEY, {**META, "scaleToZero": "true"}) is False


def test_another_metric_name_is_not_found() -> None:
    svc = service(FakeHistory(desired=3))
    err = status(lambda: protocol.get_metrics(svc, KEY, META, "llm-other-000000"))
    assert err.code == "NOT_FOUND"
    assert err.message == f"ScaledObject {KEY} has metric {NAME!r}, not 'llm-other-000000'"


def test_unexpected_errors_are_not_statuses() -> None:
    def broken(*_: Any) -> Any:
        raise RuntimeError("bug in decide")

    svc = service(FakeHistory(desired=3), decide=broken)
    with pytest.raises(RuntimeError, match="bug in decide"):
        protocol.get_metrics(svc, KEY, META, NAME)


# ------------------------------------------------------------------------- both adapters, one protocol


@pytest.fixture
def spies(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, ScalerService]]]:
    """Wrap every protocol function where the adapters look it up: (function, the service it served)."""
    calls: list[tuple[str, ScalerService]] = []
    for name in ("get_metric_spec", "get_metrics", "is_active", "open_stream", "stream_first_answer"):
        real = getattr(protocol, name)

        def spy(svc: ScalerService, *args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            calls.append((_name, svc))
            return _real(svc, *args, **kwargs)

        monkeypatch.setattr(protocol, name, spy)
    yield calls


def test_the_grpc_servicer_and_the_simulator_call_the_same_protocol_functions(
        spies: list[tuple[str, ScalerService]]) -> None:
    # the gRPC servicer, over a real grpc.aio server on loopback
    grpc_service = service(FakeHistory(desired=3))
    server = ServerThread(grpc_service)
    try:
        with grpc.insecure_channel(server.target) as channel:
            client = stub(channel)
            poll = keda_poll(client, ref(model=MODEL))
            with pytest.raises(grpc.RpcError) as info:
                client.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(model=MODEL), metricName="llm-x-000000"))
            assert info.value.code() == grpc.StatusCode.NOT_FOUND
            assert info.value.details() == f"ScaledObject llm/llama has metric {NAME!r}, not 'llm-x-000000'"
    finally:
        server.stop()
    assert poll == Poll(specs=[(NAME, 1, 1.0)], values=[(NAME, 3, 3.0)], active=True)
    grpc_calls = [name for name, svc in spies if svc is grpc_service]
    assert grpc_calls == ["get_metric_spec", "get_metrics", "is_active", "get_metrics"]

    # the simulator's in-process scaler: same functions, same status codes
    settings = KedaSettings(name="llama", namespace="llm", triggers=(Trigger("external", META),))
    sim = ServiceScaler(settings, lambda: WorkloadState(current_replicas=1, ready_replicas=1))
    so = ScaledObjectRef("llama", "llm", META)
    [spec] = sim.get_metric_spec(so)
    assert (spec.metric_name, spec.target_size, spec.target_size_float) == (NAME, 1, 1.0)
    with pytest.raises(ScalerUnavailable) as unavailable:
        sim.get_metrics(so, spec.metric_name)  # no replica seen yet
    assert unavailable.value.code == "UNAVAILABLE"
    with pytest.raises(ScalerUnavailable) as not_found:
        sim.get_metrics(so, "llm-x-000000")
    assert not_found.value.code == "NOT_FOUND"
    assert not_found.value.details == f"ScaledObject llm/llama has metric {NAME!r}, not 'llm-x-000000'"
    assert sim.is_active(so) is True  # no scaleToZero: always active
    sim_calls = [name for name, svc in spies if svc is sim.service]
    assert sim_calls == ["get_metric_spec", "get_metrics", "get_metrics", "is_active"]


def test_the_stream_opens_through_the_protocol(spies: list[tuple[str, ScalerService]]) -> None:
    svc = service(FakeHistory(desired=2))
    server = ServerThread(svc)
    try:
        with grpc.insecure_channel(server.target) as channel:
            stream = stub(channel).StreamIsActive(ref(model=MODEL))
            first = next(stream)
            stream.cancel()
    finally:
        server.stop()
    assert first.result is True
    assert [name for name, s in spies if s is svc] == ["open_stream", "stream_first_answer"]
