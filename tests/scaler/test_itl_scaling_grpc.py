"""`itlScaling` over KEDA's real call pattern: the real server, history and decide behind gRPC on loopback.

Two 8B-A100-like replicas (ITL 10 ms + 0.5 ms a request) alternate between 36 and 8 running every 30 s,
so the scaler fits their ITL floor (about 10.5 ms) and the stable window reads a mean ITL of about 21 ms
against a 56 ms target. Proportional scaling reads 2 x 21 / 56 = 0.75 and lets one go; `busy` reads each as
about half busy against the 0.81 the target holds, 2 x 0.62, and keeps both (scaler/slo.py `busy_ratio`).
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from scaler_harness import FakeClock, ServerThread, get, keda_poll, metric_value, real_scaler, ref, stub

from keda_llm.scaler.model import Observation, ReplicaSample
from keda_llm.scaler.service import HistoryStore, ScaledObjectKey

MODEL = "llama-8b"
META = {"model": MODEL, "policy": "concurrency", "targetConcurrency": "64", "mode": "reactive",
        "scaleDownDelay": "0s", "targetInterTokenLatency": "56ms", "shortOutputTokens": "0"}
T0 = 80_000.0


@pytest.fixture
def scaler() -> Iterator[tuple[FakeClock, HistoryStore, ServerThread]]:
    with real_scaler(T0) as world:
        yield world


class Fleet:
    """Pods a and b, each second: `running` requests decoding 100 tokens/s at 10 ms + 0.5 ms a request."""

    def __init__(self, clock: FakeClock, store: HistoryStore) -> None:
        self.clock, self.store, self.t = clock, store, 0
        self.sums = {"a": [0.0, 0.0], "b": [0.0, 0.0]}

    def feed(self, seconds: int) -> None:
        for _ in range(seconds):
            self.clock.now += 1.0
            running = 36.0 if self.t % 60 < 30 else 8.0
            pods = []
            for p, (itl_sum, count) in self.sums.items():
                itl_sum += 100.0 * (0.010 + 0.0005 * running)
                count += 100.0
                self.sums[p] = [itl_sum, count]
                pods.append(ReplicaSample(p, self.clock.now, running=running, max_running=256.0,
                                          ttft_sum=count / 100, ttft_count=count / 100, itl_sum=itl_sum,
                                          itl_count=count))
            self.store.ingest(Observation("llm", MODEL, self.clock.now, tuple(pods)))
            self.t += 1


@pytest.mark.parametrize("scaling,want", [("proportional", 1), ("busy", 2)])
def test_itl_scaling_decides_over_keda_polls(scaling: str, want: int,
                                             scaler: tuple[FakeClock, HistoryStore, ServerThread]) -> None:
    clock, store, server = scaler
    fleet = Fleet(clock, store)
    meta = {**META, "itlScaling": scaling}
    with grpc.insecure_channel(server.target) as channel:
        client = stub(channel)
        answers = []
        for _ in range(4):  # a fresh autoscaler holds its count through one stable window (Knative's panic)
            fleet.feed(60)
            answers.append(keda_poll(client, ref("chat", **meta)).values[0][1])
    assert answers[-1] == want, answers
    d = server.service.last_decision(ScaledObjectKey("llm", "chat"), dict(ref("chat", **meta).scalerMetadata))
    assert d is not None
    assert d.details["itl_floor_s"] == pytest.approx(0.0105, rel=0.02)
    assert d.details["observed_itl_s"] == pytest.approx(0.021, rel=0.1)
    # what the decision read is on /metrics for the dashboard: the floor, and the ratio the count came from
    _, text = get(server.http + "/metrics")
    labels = {"namespace": "llm", "scaledobject": "chat", "model": MODEL}
    assert metric_value(text, "keda_llm_scaler_itl_floor_seconds", **labels) == pytest.approx(d.details["itl_floor_s"])
    stable = metric_value(text, "keda_llm_scaler_latency_ratio", **labels, window="stable")
    assert stable == pytest.approx(d.details["latency_ratio"])
    assert (2 * stable > 1) == (scaling == "busy")  # two replicas' worth asked for, or one


def test_an_unknown_itl_scaling_is_invalid_argument_naming_the_key(
        scaler: tuple[FakeClock, HistoryStore, ServerThread]) -> None:
    _, _, server = scaler
    with grpc.insecure_channel(server.target) as channel, pytest.raises(grpc.RpcError) as err:
        stub(channel).GetMetricSpec(ref("chat", **{**META, "itlScaling": "fast"}), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "itlScaling" in (err.value.details() or "")


def test_latency_series_go_when_the_term_has_no_signal_and_with_the_scaledobject() -> None:
    from keda_llm.scaler.model import Decision
    from keda_llm.scaler.service import Answer, ServiceMetrics

    m = ServiceMetrics()
    lv = ("llm", "chat", MODEL)

    def value(name: str, **labels: str) -> float | None:
        return m.registry.get_sample_value(name, {"namespace": "llm", "scaledobject": "chat", "model": MODEL,
                                                  **labels})

    full = {"latency_ratio": 0.62, "latency_ratio_panic": 0.5, "itl_floor_s": 0.0105}
    m.record(ScaledObjectKey(*lv[:2]), MODEL, Answer("m", Decision(2, "steady", details=full), True))
    assert (value("keda_llm_scaler_latency_ratio", window="stable"),
            value("keda_llm_scaler_latency_ratio", window="panic"),
            value("keda_llm_scaler_itl_floor_seconds")) == (0.62, 0.5, 0.0105)
    # the panic window lost its signal (too few requests), the floor is NaN: their series go, not stay stale
    m.record(ScaledObjectKey(*lv[:2]), MODEL,
             Answer("m", Decision(2, "steady", details={"latency_ratio": 0.7, "itl_floor_s": float("nan")}), True))
    assert value("keda_llm_scaler_latency_ratio", window="stable") == 0.7
    assert value("keda_llm_scaler_latency_ratio", window="panic") is None
    assert value("keda_llm_scaler_itl_floor_seconds") is None
    m.record(ScaledObjectKey(*lv[:2]), MODEL, Answer("m", Decision(2, "steady", details=full), True))
    m.forget(lv)
    assert value("keda_llm_scaler_latency_ratio", window="stable") is None
    assert value("keda_llm_scaler_itl_floor_seconds") is None
