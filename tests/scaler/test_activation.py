"""Activations: POST /v1/activate on any scaler pod reaches the pod that holds KEDA's stream."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from scaler_harness import (
    FakeClock,
    FakeHistory,
    ServerThread,
    StreamReader,
    get,
    make_service,
    metric_value,
    post,
    ref,
    stub,
    wait_for_streams,
)

from keda_llm.scaler.activation import ActivationBus, PeerForwarder, Peers, ScaledObjectKey, parse_peer

MODEL = "llama"
KEY = ScaledObjectKey("llm", "chat")


def idle() -> dict[tuple[str, str], Any]:
    return {("llm", MODEL): FakeHistory(desired=0, active=False)}


# ---- the bus alone ----

def test_bus_records_the_latest_activation_and_wakes_only_that_scaled_objects_streams() -> None:
    clock = FakeClock(100.0)
    bus = ActivationBus(clock=clock)

    async def scenario() -> tuple[bool, bool, int]:
        mine = bus.subscribe(KEY)
        other = bus.subscribe(ScaledObjectKey("llm", "other"))
        woken = bus.activate(KEY)
        got_mine = await mine.wait(timeout=5)
        got_other = await other.wait(timeout=0.01)
        mine.close()
        other.close()
        return got_mine, got_other, woken

    assert asyncio.run(scenario()) == (True, False, 1)
    assert bus.last_activation(KEY) == 100.0
    bus.activate(KEY, at=90.0)  # an older (forwarded, delayed) activation does not move time back
    assert bus.last_activation(KEY) == 100.0
    assert bus.streams() == 0 and bus.watched() == []


def test_bus_evicts_the_oldest_stream_past_its_bound() -> None:
    bus = ActivationBus(max_streams_per_key=2)

    async def scenario() -> list[bool]:
        subs = [bus.subscribe(KEY) for _ in range(3)]
        await asyncio.sleep(0)
        return [s.evicted for s in subs]

    assert asyncio.run(scenario()) == [True, False, False]
    with pytest.raises(ValueError, match="max_streams_per_key must be >= 1, got 0"):
        ActivationBus(max_streams_per_key=0)


@pytest.mark.parametrize(("text", "expected"), [
    ("10.0.0.7", ("10.0.0.7", 9091)),
    ("scaler-1.scaler:9191", ("scaler-1.scaler", 9191)),
    ("[fd00::7]:9091", ("fd00::7", 9091)),
])
def test_parse_peer(text: str, expected: tuple[str, int]) -> None:
    assert parse_peer(text, 9091) == expected


@pytest.mark.parametrize("text", ["", ":9091", "host:port"])
def test_parse_peer_refuses_nonsense_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match="bad peer address"):
        parse_peer(text, 9091)


def test_peers_from_dns_skip_this_pod_and_duplicates() -> None:
    peers = Peers(static=["10.0.0.9:9091"], dns_name="keda-llm-scaler-peers.keda-llm.svc", port=9091,
                  self_addresses=["10.0.0.5"], resolve=lambda host, port: ["10.0.0.5", "10.0.0.6", "10.0.0.9"])
    assert peers.addresses() == [("10.0.0.9", 9091), ("10.0.0.6", 9091)]


def test_peers_dns_failure_leaves_the_static_list() -> None:
    def fail(host: str, port: int) -> list[str]:
        raise OSError("no such host")

    peers = Peers(static=["10.0.0.9"], dns_name="gone.svc", resolve=fail)
    assert peers.addresses() == [("10.0.0.9", 9091)]


# ---- two scaler pods on loopback ----

@pytest.fixture
def pods() -> Iterator[tuple[ServerThread, ServerThread]]:
    a = ServerThread(make_service(idle(), FakeClock()))
    b = ServerThread(make_service(idle(), FakeClock()))
    # Each knows the other as its peer (as a headless Service would list both).
    a.server.forwarder = PeerForwarder(Peers(static=[f"127.0.0.1:{b.server.http_port}"]))
    b.server.forwarder = PeerForwarder(Peers(static=[f"127.0.0.1:{a.server.http_port}"]))
    yield a, b
    a.stop()
    b.stop()


def test_activation_posted_to_a_reaches_the_stream_held_by_b(pods: tuple[ServerThread, ServerThread]) -> None:
    a, b = pods
    so = ref("chat", model=MODEL, scaleToZero="true")
    with grpc.insecure_channel(b.target) as channel:
        client = stub(channel)
        reader = StreamReader(client.StreamIsActive(so))
        wait_for_streams(b, 1)
        assert client.IsActive(so).result is False
        status, body = post(a.http + "/v1/activate/llm/chat")
        assert status == 200
        assert body == {"scaledObject": "llm/chat", "streams": 0, "forwarded": False,
                        "peers": {f"127.0.0.1:{b.server.http_port}": "ok"}}
        assert reader.next() is True
        assert client.IsActive(so).result is True
        reader.call.cancel()
    # B delivered it locally and did not pass it back to A: one activation each, no loop.
    _, text_a = get(a.http + "/metrics")
    _, text_b = get(b.http + "/metrics")
    count = "keda_llm_scaler_activations_total"
    assert metric_value(text_a, count, namespace="llm", scaledobject="chat", source="http") == 1.0
    assert metric_value(text_a, count, namespace="llm", scaledobject="chat", source="peer") is None
    assert metric_value(text_b, count, namespace="llm", scaledobject="chat", source="peer") == 1.0
    assert metric_value(text_b, count, namespace="llm", scaledobject="chat", source="http") is None


def test_a_peer_that_is_down_does_not_fail_the_activation(pods: tuple[ServerThread, ServerThread]) -> None:
    a, b = pods
    port = b.server.http_port
    b.stop()
    status, body = post(a.http + "/v1/activate/llm/chat")
    assert status == 200
    assert body["peers"][f"127.0.0.1:{port}"].startswith("error: ")
    # ...and A itself is active now.
    with grpc.insecure_channel(a.target) as channel:
        assert stub(channel).IsActive(ref("chat", model=MODEL, scaleToZero="true")).result is True
    b.stop = lambda grace=0.1: None  # type: ignore[method-assign]  # already stopped


@pytest.mark.parametrize(("method", "path", "status", "error"), [
    ("POST", "/v1/activate/llm", 404, "expected POST /v1/activate/<namespace>/<scaledobject>"),
    ("POST", "/v1/activate/llm/chat/extra", 404, "expected POST"),
    ("POST", "/v1/activate/LLM/chat", 400, "bad namespace 'LLM'"),
    ("POST", "/v1/activate/llm/Chat_1", 400, "bad ScaledObject name 'Chat_1'"),
    ("GET", "/v1/activate/llm/chat", 405, "use POST"),
])
def test_bad_activation_requests_say_what_is_wrong(method: str, path: str, status: int, error: str) -> None:
    st = ServerThread(make_service(idle(), FakeClock()))
    try:
        if method == "POST":
            got_status, body = post(st.http + path)
            message = body["error"]
        else:
            got_status, message = get(st.http + path)
        assert got_status == status
        assert error in message
        assert st.service.bus.last_activation(KEY) is None
    finally:
        st.stop()


def test_activation_token_is_required_when_configured() -> None:
    st = ServerThread(make_service(idle(), FakeClock()), activation_token="s3cret")
    try:
        assert post(st.http + "/v1/activate/llm/chat")[0] == 401
        assert post(st.http + "/v1/activate/llm/chat", {"Authorization": "Bearer wrong"})[0] == 401
        assert st.service.bus.last_activation(KEY) is None
        assert post(st.http + "/v1/activate/llm/chat", {"Authorization": "Bearer s3cret"})[0] == 200
        assert st.service.bus.last_activation(KEY) == 1_000_000.0
        assert post(st.http + "/v1/activate/Bad_NS/chat", {"Authorization": "Bearer s3cret"})[0] == 400
        _, text = get(st.http + "/metrics")
        # refusals counted by reason only (the URL's names are whatever a caller sent)
        assert metric_value(text, "keda_llm_scaler_activations_rejected_total", reason="unauthorized") == 2
        assert metric_value(text, "keda_llm_scaler_activations_rejected_total", reason="bad_name") == 1
    finally:
        st.stop()


def test_activation_holds_is_active_for_the_hold_then_lets_go() -> None:
    clock = FakeClock()
    st = ServerThread(make_service(idle(), clock, activation_hold_s=300.0))
    so = ref("chat", model=MODEL, scaleToZero="true")
    try:
        with grpc.insecure_channel(st.target) as channel:
            client = stub(channel)
            post(st.http + "/v1/activate/llm/chat")
            clock.now += 299.0
            assert client.IsActive(so).result is True
            clock.now += 1.0
            assert client.IsActive(so).result is False
    finally:
        st.stop()


@pytest.mark.parametrize(("known", "answer"), [(12, 12), (0, 1), (None, None)])
def test_the_activation_floor_never_lowers_a_count_on_unusable_data(known: int | None, answer: int | None) -> None:
    """No usable data, activated a minute ago: GetMetrics holds the count the Kubernetes API gives (at least
    1, which wakes a target at zero) and, with no count known, answers UNAVAILABLE; never the floor of 1
    for a model that runs 12."""
    from keda_llm.scaler.externalscaler import externalscaler_pb2 as pb
    from keda_llm.scaler.model import WorkloadState

    clock = FakeClock()
    workloads = None if known is None else (lambda _key: WorkloadState(current_replicas=known, ready_replicas=known))
    st = ServerThread(make_service({("llm", MODEL): FakeHistory(desired=None)}, clock, activation_hold_s=300.0,
                                   workloads=workloads))
    so = ref("chat", model=MODEL)
    try:
        with grpc.insecure_channel(st.target) as channel:
            client = stub(channel)
            name = client.GetMetricSpec(so).metricSpecs[0].metricName
            request = pb.GetMetricsRequest(scaledObjectRef=so, metricName=name)
            with pytest.raises(grpc.RpcError) as err:
                client.GetMetrics(request)  # not activated: KEDA and the HPA hold
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            post(st.http + "/v1/activate/llm/chat")
            clock.now += 60.0
            if answer is None:
                with pytest.raises(grpc.RpcError) as err:
                    client.GetMetrics(request)
                assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            else:
                assert client.GetMetrics(request).metricValues[0].metricValue == answer
            assert client.IsActive(so).result is True
    finally:
        st.stop()


def test_with_an_activation_token_the_relay_to_the_peer_carries_it() -> None:
    """Both pods require the token: A's relay to B must present it, or B refuses and its stream never hears."""
    a = ServerThread(make_service(idle(), FakeClock()), activation_token="s3cret")
    b = ServerThread(make_service(idle(), FakeClock()), activation_token="s3cret")
    a.server.forwarder = PeerForwarder(Peers(static=[f"127.0.0.1:{b.server.http_port}"]), token="s3cret")
    b.server.forwarder = PeerForwarder(Peers(static=[f"127.0.0.1:{a.server.http_port}"]), token="s3cret")
    try:
        so = ref("chat", model=MODEL, scaleToZero="true")
        with grpc.insecure_channel(b.target) as channel:
            client = stub(channel)
            reader = StreamReader(client.StreamIsActive(so))
            wait_for_streams(b, 1)
            status, body = post(a.http + "/v1/activate/llm/chat", {"Authorization": "Bearer s3cret"})
            assert status == 200 and body["peers"] == {f"127.0.0.1:{b.server.http_port}": "ok"}
            assert reader.next() is True
            reader.call.cancel()
    finally:
        a.stop()
        b.stop()


@pytest.mark.parametrize(("api_says", "status"), [(False, 404), (True, 200), (None, 200)])
def test_an_activation_for_a_scaled_object_the_api_does_not_have_is_404(api_says: bool | None,
                                                                         status: int) -> None:
    """Refused only on the API's word; an API that cannot tell (down) never blocks a wake."""
    asked: list[ScaledObjectKey] = []

    def exists(key: ScaledObjectKey) -> bool | None:
        asked.append(key)
        return api_says

    st = ServerThread(make_service(idle(), FakeClock()), scaled_object_exists=exists)
    try:
        code, body = post(st.http + "/v1/activate/llm/typo")
        assert code == status and asked == [ScaledObjectKey("llm", "typo")]
        if status == 404:
            assert "no ScaledObject 'typo' in namespace 'llm'" in body["error"]
            assert st.service.bus.last_activation(ScaledObjectKey("llm", "typo")) is None
            _, text = get(st.http + "/metrics")
            assert metric_value(text, "keda_llm_scaler_activations_rejected_total", reason="unknown") == 1
    finally:
        st.stop()


def test_the_kubernetes_reader_says_whether_a_scaled_object_exists(tmp_path: Path) -> None:
    from fakekube import FakeKube

    from keda_llm.scaler.kube import KubeClient, KubeConfig, WorkloadReader

    token = tmp_path / "token"
    token.write_text("t")
    with FakeKube(token="t") as api:
        api.put_scaled_object("llm", "chat", {"scaleTargetRef": {"name": "chat"}})
        reader = WorkloadReader(KubeClient(KubeConfig(base_url=api.url, token_path=str(token), ca_path=None,
                                                      timeout_s=2.0)))
        assert reader.exists("llm", "chat") is True
        assert reader.exists("llm", "typo") is False
        reader.track("llm", "tracked")  # KEDA asked about it: known without a read
        assert reader.exists("llm", "tracked") is True
        api.fail_with = 503
        assert reader.exists("llm", "other") is None  # the API cannot tell


def test_the_bus_keeps_a_bounded_number_of_scaledobjects() -> None:
    """Without a Kubernetes view any name is accepted: POSTs for names no ScaledObject has must not grow the
    bus for good. The least recently activated go first; a recent one is kept."""
    from keda_llm.scaler.activation import ActivationBus
    from keda_llm.scaler.service import ScaledObjectKey

    bus = ActivationBus(clock=lambda: 100.0, max_keys=50)
    keep = ScaledObjectKey("llm", "real")
    bus.activate(keep)
    for i in range(200):
        bus.activate(ScaledObjectKey("llm", f"unknown-{i}"))
        if i % 10 == 0:
            bus.activate(keep)  # still in use
    assert bus.last_activation(keep) == 100.0
    assert bus.last_activation(ScaledObjectKey("llm", "unknown-0")) is None
    assert bus.last_activation(ScaledObjectKey("llm", "unknown-199")) == 100.0
