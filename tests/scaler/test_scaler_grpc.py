"""The scaler's gRPC contract with KEDA, over loopback, with a client generated from the proto.

Each test replays what KEDA does (kedacore/keda pkg/scalers/external_scaler.go and
pkg/scaling/cache/scalers_cache.go): GetMetricSpec, then GetMetrics + IsActive per metric, every poll;
the HPA path the same under the metrics apiserver's 3 s deadline; StreamIsActive held open.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from scaler_harness import (
    FakeClock,
    FakeHistory,
    Poll,
    ServerThread,
    get,
    keda_poll,
    make_service,
    metric_value,
    post,
    ref,
    stub,
)

from keda_llm.scaler.config import shown
from keda_llm.scaler.externalscaler import externalscaler_pb2 as pb

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
NAME = "llm-meta-llama-llama-3-1-8b-instruct-" + hashlib.sha256(MODEL.encode()).hexdigest()[:6]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def histories() -> dict[tuple[str, str], Any]:
    return {("llm", MODEL): FakeHistory(desired=3, details={"demand": 5000.0, "capacity": 2000.0})}


@pytest.fixture
def server(histories: dict[tuple[str, str], Any], clock: FakeClock) -> Iterator[ServerThread]:
    st = ServerThread(make_service(histories, clock))
    yield st
    st.stop()


@pytest.fixture
def client(server: ServerThread) -> Iterator[Any]:
    with grpc.insecure_channel(server.target) as channel:
        yield stub(channel)


def test_keda_poll_gets_target_one_and_the_desired_count_in_both_fields(client: Any) -> None:
    poll = keda_poll(client, ref(model=MODEL))
    assert poll == Poll(specs=[(NAME, 1, 1.0)], values=[(NAME, 3, 3.0)], active=True)


def test_hpa_path_answers_under_its_3s_deadline(client: Any) -> None:
    # keda-operator-metrics-apiserver -> operator uses a 3 s timeout for the whole chain.
    poll = keda_poll(client, ref(model=MODEL), timeout=3.0)
    assert poll.values == [(NAME, 3, 3.0)]


def test_get_metrics_matches_the_name_case_insensitively_and_with_keda_index_prefix(client: Any) -> None:
    so = ref(model=MODEL)
    for asked in (NAME, NAME.upper(), f"s0-{NAME}", f"s12-{NAME.upper()}", ""):
        got = client.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=so, metricName=asked))
        assert [(v.metricName, v.metricValue, v.metricValueFloat) for v in got.metricValues] == [(NAME, 3, 3.0)]


def test_get_metrics_for_another_name_is_not_found(client: Any) -> None:
    with pytest.raises(grpc.RpcError) as err:
        client.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(model=MODEL), metricName="llm-other-000000"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert NAME in err.value.details() and "llm-other-000000" in err.value.details()


def test_desired_zero_is_sent_as_zero_in_both_fields_and_inactive(histories: dict[tuple[str, str], Any],
                                                                  client: Any) -> None:
    histories[("llm", MODEL)] = FakeHistory(desired=0, active=False)
    poll = keda_poll(client, ref(model=MODEL, scaleToZero="true"))
    assert poll.values == [(NAME, 0, 0.0)]
    assert poll.active is False


def test_without_scale_to_zero_is_active_is_always_true(histories: dict[tuple[str, str], Any],
                                                        client: Any) -> None:
    histories[("llm", MODEL)] = FakeHistory(desired=0, active=False)
    assert client.IsActive(ref(model=MODEL)).result is True


def test_no_usable_data_is_unavailable_so_keda_holds(histories: dict[tuple[str, str], Any], client: Any) -> None:
    histories[("llm", MODEL)] = FakeHistory(desired=None)
    so = ref(model=MODEL, scaleToZero="true")
    for call in (lambda: client.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=so, metricName=NAME)),
                 lambda: client.IsActive(so)):
        with pytest.raises(grpc.RpcError) as err:
            call()  # type: ignore[no-untyped-call]  # a lambda over the untyped stub
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "no usable data" in err.value.details() and MODEL in err.value.details()
    # GetMetricSpec never depends on live data.
    assert client.GetMetricSpec(so).metricSpecs[0].metricName == NAME


def test_unknown_model_without_scale_to_zero_is_unavailable_naming_model_and_namespace(client: Any) -> None:
    so = ref(model="nobody/serves-this")
    with pytest.raises(grpc.RpcError) as err:
        client.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=so, metricName=""))
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "'nobody/serves-this'" in err.value.details() and "'llm'" in err.value.details()


def test_unknown_model_with_scale_to_zero_is_idle_at_zero(client: Any) -> None:
    # A model at zero has no replicas to report: that is idle, not broken. An error here would make
    # KEDA's poll an error and block polled activation for good.
    poll = keda_poll(client, ref(model="nobody/serves-this", scaleToZero="true"))
    assert poll.values[0][1:] == (0, 0.0)
    assert poll.active is False


BAD_METADATA = [
    ({}, "model"),  # required key missing
    ({"model": MODEL, "targetKVUtilisation": "0.8"}, "targetKVUtilisation"),  # unknown key (typo)
    ({"model": MODEL, "targetKVUtilization": "lots"}, "targetKVUtilization"),  # not a number
    ({"model": MODEL, "targetKVUtilization": "1.5"}, "targetKVUtilization"),  # out of range
    ({"model": MODEL, "targetKVUtilization": "NaN"}, "targetKVUtilization"),  # not finite
    ({"model": MODEL, "stableWindow": "ten minutes"}, "stableWindow"),  # bad duration
    ({"model": MODEL, "idleTimeout": "-5m"}, "idleTimeout"),  # negative duration
    ({"model": MODEL, "scaleToZero": "yes"}, "scaleToZero"),  # bad boolean
    ({"model": MODEL, "policy": "gpu"}, "policy"),  # not one of the choices
    ({"model": MODEL, "maxReplicas": "2.5"}, "maxReplicas"),  # not a whole number
    ({"model": MODEL, "panicWindow": "2m"}, "panicWindow"),  # rule between keys: > stableWindow
    ({"model": "  "}, "model"),  # empty
    # absurd but parseable: 400 nines was an infinity that failed an int conversion (INTERNAL, every call)
    ({"model": MODEL, "panicWindow": "9" * 400}, "panicWindow"),
    ({"model": MODEL, "stableWindow": "9" * 400 + "h"}, "stableWindow"),
    ({"model": MODEL, "maxScaleUpRate": "1e308"}, "maxScaleUpRate"),
    ({"model": MODEL, "maxReplicas": "9" * 400}, "maxReplicas"),
]


@pytest.mark.parametrize(("metadata", "bad_key"), BAD_METADATA)
def test_bad_metadata_is_invalid_argument_naming_the_key_on_every_rpc(client: Any, metadata: dict[str, str],
                                                                      bad_key: str) -> None:
    so = ref(**metadata)
    calls = {
        "GetMetricSpec": lambda: client.GetMetricSpec(so),
        "GetMetrics": lambda: client.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=so, metricName=NAME)),
        "IsActive": lambda: client.IsActive(so),
        "StreamIsActive": lambda: next(iter(client.StreamIsActive(so, timeout=10))),
    }
    for method, call in calls.items():
        with pytest.raises(grpc.RpcError) as err:
            call()  # type: ignore[no-untyped-call]  # a lambda over the untyped stub
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
        assert f"'{bad_key}'" in err.value.details(), (method, err.value.details())
        value = metadata.get(bad_key)
        if value is not None:  # quoted whole, or (longer than SHOWN_VALUE) its start and its length
            assert shown(value) in err.value.details(), (method, err.value.details())
            assert len(err.value.details()) < 4096  # far under gRPC's 8 KB soft limit on metadata


def test_keda_own_keys_are_accepted(client: Any) -> None:
    so = ref(model=MODEL, enableTLS="false", unsafeSsl="false", modelFromEnv="MODEL_NAME")
    assert client.GetMetricSpec(so).metricSpecs[0].metricName == NAME


def test_stream_metric_spec_is_unimplemented(client: Any) -> None:
    with pytest.raises(grpc.RpcError) as err:
        next(iter(client.StreamMetricSpec(ref(model=MODEL), timeout=10)))
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_policy_runs_once_per_tick_and_every_question_in_a_tick_sees_it(server: ServerThread, client: Any,
                                                                       clock: FakeClock) -> None:
    so = ref(model=MODEL)
    key = server.service.known()[0] if server.service.known() else None
    assert key is None
    for _ in range(3):
        keda_poll(client, so)
    entries = server.service._entries  # the fake decide counts its calls in the policy state
    (entry,) = entries.values()
    assert entry.state.last_replicas == 1
    clock.now += 1.0
    keda_poll(client, so)
    assert entry.state.last_replicas == 2


def test_scaler_metrics_per_scaled_object(server: ServerThread, client: Any) -> None:
    keda_poll(client, ref(model=MODEL))
    status, text = get(server.http + "/metrics")
    assert status == 200
    labels = {"namespace": "llm", "scaledobject": "llama", "model": MODEL}
    assert metric_value(text, "keda_llm_scaler_desired_replicas", **labels) == 3.0
    assert metric_value(text, "keda_llm_scaler_demand", **labels) == 5000.0
    assert metric_value(text, "keda_llm_scaler_capacity", **labels) == 2000.0
    assert metric_value(text, "keda_llm_scaler_active", **labels) == 1.0
    assert metric_value(text, "keda_llm_scaler_decision_reason", reason="steady", **labels) == 1.0
    assert metric_value(text, "keda_llm_scaler_rpcs_total", method="GetMetrics", code="OK") == 1.0


def test_healthz(server: ServerThread) -> None:
    assert get(server.http + "/healthz") == (200, '{"status": "ok"}\n')
    status, _ = post(server.http + "/healthz")
    assert status == 404
