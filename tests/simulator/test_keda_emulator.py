"""KEDA + HPA on one clock: the replica counts KEDA and the HPA would produce, computed by hand.

The scaler here is a scripted in-process ExternalScaler: it answers from functions of the
simulated time, which the loop passes through `begin(path, now)`. Polls run at 0, 30, 60, ...
(pollingInterval 30), HPA syncs at 0, 15, 30, ...; at a tie the poll runs first.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from keda_llm.scaler.externalscaler import externalscaler_pb2 as pb
from keda_llm.scaler.externalscaler import externalscaler_pb2_grpc as pb_grpc
from keda_llm.simulator.control.grpc_scaler import GrpcExternalScaler
from keda_llm.simulator.control.hpa import Behavior, ScalingRules
from keda_llm.simulator.control.inprocess import CallbackScaler
from keda_llm.simulator.control.keda import (
    CallPath,
    MetricSpec,
    MetricValue,
    ScaledObjectRef,
    ScalerUnavailable,
    request_scale,
    to_milli,
)
from keda_llm.simulator.control.loop import KedaHpaLoop, WorkloadStatus
from keda_llm.simulator.control.scaledobject import Fallback, KedaSettings, Trigger


@dataclass
class ScriptedScaler:
    """Answers GetMetricSpec / GetMetrics / IsActive from functions of simulated time; logs every call."""

    value: Callable[[float], float] = lambda t: 1.0
    active: Callable[[float], bool] = lambda t: True
    fails: Callable[[float], bool] = lambda t: False
    target: float = 1.0
    calls: list[tuple[str, str]] = field(default_factory=list)  # (path, method)
    now: float = 0.0
    path: str = ""

    def begin(self, path: CallPath, now: float) -> None:
        self.path, self.now = path, now

    def get_metric_spec(self, ref: ScaledObjectRef) -> Sequence[MetricSpec]:
        self.calls.append((self.path, "GetMetricSpec"))
        return [MetricSpec("desired-replicas", target_size_float=self.target, target_size=int(self.target))]

    def get_metrics(self, ref: ScaledObjectRef, metric_name: str) -> Sequence[MetricValue]:
        self.calls.append((self.path, "GetMetrics"))
        if self.fails(self.now):
            raise ScalerUnavailable("UNAVAILABLE", "no fresh data")
        v = self.value(self.now)
        return [MetricValue(metric_name, metric_value_float=v, metric_value=round(v))]

    def is_active(self, ref: ScaledObjectRef) -> bool:
        self.calls.append((self.path, "IsActive"))
        if self.fails(self.now):
            raise ScalerUnavailable("UNAVAILABLE", "no fresh data")
        return self.active(self.now)


def settings(**kw: object) -> KedaSettings:
    trigger = Trigger("external-push" if kw.pop("push", False) else "external",
                      {"scalerAddress": "keda-llm-scaler.keda-llm.svc:9090", "model": "m"})
    base: dict[str, object] = {"name": "m", "triggers": (trigger,), "polling_interval_s": 30}
    base.update(kw)
    return KedaSettings(**base)  # type: ignore[arg-type]


def scale_events(loop: KedaHpaLoop) -> list[tuple[float, str, int, int]]:
    return [(e.at, e.kind, e.replicas_before, e.replicas_after) for e in loop.events
            if e.replicas_before != e.replicas_after]


def run(loop: KedaHpaLoop, until: float, step: float = 5.0) -> None:
    t = loop.now
    while t < until:
        t = min(t + step, until)
        loop.advance_to(t)


@dataclass(frozen=True)
class Scenario:
    name: str
    settings: KedaSettings
    scaler: ScriptedScaler
    initial: int
    until: float
    want: list[tuple[float, str, int, int]]
    fallback_counts_on_poll: bool = True


SCENARIOS = [
    # active (value 2) through the poll at 90, then idle: lastActiveTime = 90. The HPA keeps 2 until every
    # recommendation of 2 (last at 90) is older than 300 s (t=405), then goes to its floor 1; KEDA scales to
    # 0 at the first poll after 90 + 300 (strictly later: 420). Active again at 600: KEDA 0 -> 1 at once,
    # then the HPA (same instant, after the poll) 1 -> 3.
    Scenario("minReplicaCount 0: cooldown, then back to 1 at once",
             settings(cooldown_period_s=300),
             ScriptedScaler(value=lambda t: 2.0 if t <= 90 else (3.0 if t >= 600 else 0.0),
                            active=lambda t: t <= 90 or t >= 600),
             0, 630,
             [(0, "keda_activate", 0, 1), (0, "hpa_scale_up", 1, 2), (405, "hpa_scale_down", 2, 1),
              (420, "keda_deactivate", 1, 0), (600, "keda_activate", 0, 1), (600, "hpa_scale_up", 1, 3)]),
    Scenario("cooldown is strict: 90 + 60 = 150 is not yet past",
             settings(cooldown_period_s=60),
             ScriptedScaler(value=lambda t: 1.0 if t <= 90 else 0.0, active=lambda t: t <= 90),
             0, 200,
             [(0, "keda_activate", 0, 1), (180, "keda_deactivate", 1, 0)]),
    # never active: lastActiveTime stays nil, so creation + initialCooldownPeriod rules (strictly after).
    # The HPA's first sync has no history to stabilize with: 0 asked -> its floor, 1.
    Scenario("initialCooldownPeriod 0: first poll after creation", settings(),
             ScriptedScaler(value=lambda t: 0.0, active=lambda t: False), 3, 60,
             [(0, "hpa_scale_down", 3, 1), (30, "keda_deactivate", 1, 0)]),
    Scenario("initialCooldownPeriod 120", settings(initial_cooldown_period_s=120),
             ScriptedScaler(value=lambda t: 0.0, active=lambda t: False), 3, 200,
             [(0, "hpa_scale_down", 3, 1), (150, "keda_deactivate", 1, 0)]),
    # minReplicaCount 2: never below 2 (HPA floor), KEDA never deactivates; from 0 it goes straight to 2
    Scenario("minReplicaCount 2 from zero", settings(min_replicas=2),
             ScriptedScaler(value=lambda t: 0.0, active=lambda t: False), 0, 400,
             [(0, "keda_set_min", 0, 2)]),
    # idleReplicaCount 0 with min 2: inactive -> 0 after the cooldown; active -> straight to min (2)
    Scenario("idleReplicaCount 0", settings(min_replicas=2, idle_replicas=0, cooldown_period_s=60),
             ScriptedScaler(value=lambda t: 0.0 if t < 300 else 2.0, active=lambda t: t < 30 or t >= 300),
             2, 330,
             [(90, "keda_deactivate", 2, 0), (300, "keda_activate", 0, 2)]),
    # maxReplicaCount 5: the HPA goes 1 -> 4 (cap max(2 x 1, 4)) -> 5 (max)
    Scenario("maxReplicaCount clamp", settings(max_replicas=5),
             ScriptedScaler(value=lambda t: 40.0), 1, 30,
             [(0, "hpa_scale_up", 1, 4), (15, "hpa_scale_up", 4, 5)]),
    # errors from t=100 with fallback {3, 6}: failures counted on the HPA sync at 105 (1), the poll (2) and
    # HPA sync (3) at 120; 4 > 3 at the 135 sync -> the HPA is fed 6 replicas' worth; cap max(2 x 2, 4) = 4
    Scenario("fallback after more than failureThreshold failures",
             settings(fallback=Fallback(3, 6)),
             ScriptedScaler(value=lambda t: 2.0, fails=lambda t: t >= 100), 2, 160,
             [(135, "hpa_scale_up", 2, 4), (150, "hpa_scale_up", 4, 6)]),
    # the same, counting on the HPA path only: 105 (1), 120 (2), 135 (3), 150 (4 > 3)
    Scenario("fallback counted on the HPA path only", settings(fallback=Fallback(3, 6)),
             ScriptedScaler(value=lambda t: 2.0, fails=lambda t: t >= 100), 2, 175,
             [(150, "hpa_scale_up", 2, 4), (165, "hpa_scale_up", 4, 6)], fallback_counts_on_poll=False),
    # errors and no fallback: the HPA holds and KEDA never scales to zero on errors, whatever the cooldown
    Scenario("errors without fallback hold", settings(cooldown_period_s=10),
             ScriptedScaler(value=lambda t: 3.0, fails=lambda t: t >= 20), 3, 900, []),
]


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario(sc: Scenario) -> None:
    loop = KedaHpaLoop(sc.settings, sc.scaler, initial_replicas=sc.initial,
                       fallback_counts_on_poll=sc.fallback_counts_on_poll)
    run(loop, sc.until)
    assert scale_events(loop) == sc.want


def test_push_wakes_from_zero_before_the_next_poll() -> None:
    scaler = ScriptedScaler(value=lambda t: 1.0 if t >= 40 else 0.0, active=lambda t: t >= 40)
    pushed = KedaHpaLoop(settings(push=True), scaler, initial_replicas=0)
    pushed.advance_to(35)
    pushed.push(41.0, True)
    pushed.advance_to(70)
    polled = KedaHpaLoop(settings(push=True), ScriptedScaler(value=scaler.value, active=scaler.active))
    polled.advance_to(70)
    assert scale_events(pushed)[0] == (41.0, "push_activate", 0, 1)
    assert scale_events(polled)[0] == (60.0, "keda_activate", 0, 1)


def test_push_false_is_ignored_and_push_before_the_hpa_is_skipped() -> None:
    class NoSpecYet(ScriptedScaler):
        def get_metric_spec(self, ref: ScaledObjectRef) -> Sequence[MetricSpec]:
            self.calls.append((self.path, "GetMetricSpec"))
            return [] if self.now < 20 else super().get_metric_spec(ref)

    loop = KedaHpaLoop(settings(push=True), NoSpecYet(active=lambda t: False), initial_replicas=0)
    loop.push(5.0, True)
    loop.push(6.0, False)
    loop.advance_to(10)
    kinds = [e.kind for e in loop.events]
    assert kinds == ["hpa_not_created", "scaler_error", "push_skipped", "push_ignored"]
    assert loop.spec_replicas == 0
    loop.advance_to(30)  # the poll at 30 creates the HPA; a push now wakes the workload
    loop.push(31.0, True)
    loop.advance_to(31)
    assert scale_events(loop) == [(31.0, "push_activate", 0, 1)]


def test_push_while_running_refreshes_last_active_time() -> None:
    s = settings(cooldown_period_s=60)
    loop = KedaHpaLoop(s, ScriptedScaler(value=lambda t: 1.0, active=lambda t: t < 1), initial_replicas=1)
    loop.push(50.0, True)  # lastActiveTime 0 -> 50: the poll at 90 (0 + 60 < 90) no longer deactivates
    loop.advance_to(100)
    assert loop.keda.last_active_time == 50.0
    assert loop.spec_replicas == 1
    loop.advance_to(120)  # 50 + 60 < 120
    assert scale_events(loop) == [(120, "keda_deactivate", 1, 0)]


def test_call_pattern_matches_keda() -> None:
    scaler = ScriptedScaler()
    loop = KedaHpaLoop(settings(), scaler, initial_replicas=1)
    loop.advance_to(15)
    assert scaler.calls == [
        ("reconcile", "GetMetricSpec"),  # the ScaledObject controller builds the HPA
        ("poll", "GetMetricSpec"), ("poll", "GetMetrics"), ("poll", "IsActive"),  # scale loop, t=0
        ("hpa", "GetMetricSpec"), ("hpa", "GetMetrics"), ("hpa", "IsActive"),  # HPA sync, t=0
        ("hpa", "GetMetricSpec"), ("hpa", "GetMetrics"), ("hpa", "IsActive"),  # HPA sync, t=15
    ]


def test_failed_call_is_retried_once_and_isactive_skipped() -> None:
    scaler = ScriptedScaler(fails=lambda t: True)
    loop = KedaHpaLoop(settings(), scaler, initial_replicas=1, hpa_phase_s=1.0)
    loop.advance_to(0)
    assert scaler.calls == [("reconcile", "GetMetricSpec"), ("poll", "GetMetricSpec"),
                            ("poll", "GetMetrics"), ("poll", "GetMetrics")]


def test_cached_metrics_spare_the_hpa_path_getmetrics() -> None:
    trig = Trigger("external", {"scalerAddress": "a:1"}, use_cached_metrics=True)
    scaler = ScriptedScaler()
    loop = KedaHpaLoop(settings(triggers=(trig,)), scaler, initial_replicas=1)
    loop.advance_to(0)
    assert [c for c in scaler.calls if c[0] == "hpa"] == [("hpa", "GetMetricSpec")]


def test_status_with_pending_pods_feeds_the_hpa() -> None:
    # spec 2, but only 1 pod exists yet: ratio 4 / 1 -> ceil(4 / 1) = 4 (cap max(2 x 2, 4) = 4)
    loop = KedaHpaLoop(settings(), ScriptedScaler(value=lambda t: 4.0), initial_replicas=2)
    loop.advance_to(0, WorkloadStatus(replicas=1, ready_replicas=0))
    assert loop.spec_replicas == 4


def test_behavior_from_settings_reaches_the_hpa() -> None:
    s = settings(behavior=Behavior(scale_down=ScalingRules(stabilization_window_seconds=0)))
    loop = KedaHpaLoop(s, ScriptedScaler(value=lambda t: 5.0 if t < 15 else 2.0), initial_replicas=5)
    loop.advance_to(15)
    assert scale_events(loop) == [(15, "hpa_scale_down", 5, 2)]


# Go's and Python's "%.3f" both round the exact binary value: 2.0005 is stored as 2.000500000000000167 -> 2.001
@pytest.mark.parametrize(("value", "milli"), [(2.0004, 2000), (2.0005, 2001), (2.0006, 2001), (-3.0, 0),
                                              (float("nan"), 0), (float("inf"), 0), (0.001, 1)])
def test_value_to_milli(value: float, milli: int) -> None:
    assert to_milli(value) == milli


def test_float_zero_falls_back_to_int_field() -> None:
    assert MetricValue("m", 0.0, 3).value() == 3.0
    assert MetricSpec("m", 0.0, 2).target() == 2.0
    assert MetricSpec("m", 0.5, 2).target() == 0.5


def test_request_scale_fallback_with_zero_replicas_allows_scale_to_zero() -> None:
    s = settings(fallback=Fallback(3, 0), cooldown_period_s=60)
    d = request_scale(s, 100.0, 0.0, 2, 10.0, is_active=False, is_error=True)
    assert (d.replicas, d.kind) == (0, "keda_deactivate")
    s6 = settings(fallback=Fallback(3, 6), cooldown_period_s=60)
    assert request_scale(s6, 100.0, 0.0, 2, 10.0, is_active=False, is_error=True).replicas is None


def test_time_goes_forward_only() -> None:
    loop = KedaHpaLoop(settings(), ScriptedScaler())
    loop.advance_to(10)
    with pytest.raises(ValueError, match="forward"):
        loop.advance_to(5)
    with pytest.raises(ValueError, match="before"):
        loop.push(3.0)


# ---------------------------------------------------------------------------------- over real gRPC


class _Servicer(pb_grpc.ExternalScalerServicer):  # type: ignore[misc]
    """A minimal ExternalScaler server built on the generated stubs, answering from plain fields."""

    def __init__(self) -> None:
        self.value, self.active, self.fail = 0.0, False, False
        self.pushes: queue.Queue[bool] = queue.Queue()
        self.stream_open = threading.Event()

    def GetMetricSpec(self, request: Any, context: Any) -> Any:
        return pb.GetMetricSpecResponse(metricSpecs=[pb.MetricSpec(metricName="llm", targetSize=1,
                                                                   targetSizeFloat=1.0)])

    def GetMetrics(self, request: Any, context: Any) -> Any:
        if self.fail:
            context.abort(grpc.StatusCode.UNAVAILABLE, "no fresh data")
        return pb.GetMetricsResponse(metricValues=[pb.MetricValue(
            metricName=request.metricName, metricValue=round(self.value), metricValueFloat=self.value)])

    def IsActive(self, request: Any, context: Any) -> Any:
        return pb.IsActiveResponse(result=self.active)

    def StreamIsActive(self, request: Any, context: Any) -> Iterator[Any]:
        self.stream_open.set()
        while context.is_active():  # ends when the client cancels
            try:
                result = self.pushes.get(timeout=0.05)
            except queue.Empty:
                continue
            yield pb.IsActiveResponse(result=result)


def test_real_grpc_server_push_from_zero_hpa_follows_errors_hold() -> None:
    servicer = _Servicer()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_ExternalScalerServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    scaler = GrpcExternalScaler(channel)
    try:
        loop = KedaHpaLoop(settings(push=True), scaler, initial_replicas=0)
        scaler.open_stream(loop.keda.refs[0])
        assert servicer.stream_open.wait(5.0)
        loop.advance_to(10)
        assert loop.spec_replicas == 0
        assert scaler.calls == [("reconcile", "GetMetricSpec"), ("poll", "GetMetricSpec"), ("poll", "GetMetrics"),
                                ("poll", "IsActive")]  # the HPA does not query metrics at zero
        servicer.value, servicer.active = 3.0, True
        servicer.pushes.put(True)
        assert scaler.wait_for_push(5.0)
        loop.advance_to(15)  # the push lands at the loop's time (10); the HPA sync at 15 follows the value
        assert scale_events(loop) == [(10, "push_activate", 0, 1), (15, "hpa_scale_up", 1, 3)]
        servicer.fail = True
        loop.advance_to(45)
        assert loop.spec_replicas == 3
        errors = [e for e in loop.events if e.kind == "hpa_metric_error"]
        assert [e.at for e in errors] == [30, 45]
        assert "UNAVAILABLE: no fresh data" in next(e.detail for e in loop.events if e.kind == "scaler_error")
    finally:
        scaler.close()
        channel.close()
        server.stop(None)
    assert scaler.stream_error == "CANCELLED"


def test_callback_scaler_answers_the_scaler_contract() -> None:
    # desired 6 from t=0, no data at t in [100, 140): the HPA goes 1 -> 4 -> 6 and holds through the gap
    decide = lambda t: None if 100 <= t < 140 else (6, True)  # noqa: E731
    loop = KedaHpaLoop(settings(), CallbackScaler(decide), initial_replicas=0)
    loop.advance_to(150)
    assert scale_events(loop) == [(0, "keda_activate", 0, 1), (0, "hpa_scale_up", 1, 4), (15, "hpa_scale_up", 4, 6)]
    assert [e.at for e in loop.events if e.kind == "hpa_metric_error"] == [105, 120, 135]
