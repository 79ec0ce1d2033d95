"""scaleToZero and a model no source lists: idle only when the source has answered and nothing says it runs.

A source down since the scaler started (or the first poll after a restart, before the first collection)
lists no model at all; read as "idle" that took a running model to zero (IsActive false, KEDA scales to
zero after cooldownPeriod; keda-contract.md section 2.8). Missing data answers UNAVAILABLE, and KEDA holds
the count (docs/design.md, "No usable data at all").
"""

from __future__ import annotations

import grpc
import pytest
from prometheus_server import refused_address
from scaler_harness import FakeClock, ScalerPod, keda_poll, ref, stub

from keda_llm.scaler.activation import ActivationBus
from keda_llm.scaler.decide import decide
from keda_llm.scaler.model import WorkloadState
from keda_llm.scaler.service import HistoryStore, NoUsableData, ScaledObjectKey, ScalerService

T0 = 1_800_000_000.0
KEY = ScaledObjectKey("llm", "chat")
META = {"model": "m", "scaleToZero": "true", "idleTimeout": "5m"}


def service(running: int | None, answered: bool | None) -> ScalerService:
    """No history for the model; `running`: the replicas Kubernetes shows (None: no Kubernetes view);
    `answered`: whether the source has collected lately (None: the service is not told)."""
    clock, store = FakeClock(T0), HistoryStore()
    return ScalerService(
        decide=decide, histories=store.get, history_lock=store.lock, bus=ActivationBus(clock=clock), clock=clock,
        workloads=None if running is None else (lambda key: WorkloadState(running, running)),
        source_answered_at=None if answered is None else (lambda key, cfg: T0 if answered else None))


@pytest.mark.parametrize(("running", "answered"), [(3, True), (3, False), (None, False)])
def test_no_data_is_unavailable_not_idle(running: int | None, answered: bool) -> None:
    svc = service(running, answered)
    with pytest.raises(NoUsableData):
        svc.answer(KEY, META)
    with pytest.raises(NoUsableData):
        svc.is_active(KEY, META)


@pytest.mark.parametrize(("running", "answered"), [(0, False), (0, True), (None, True)])
def test_at_zero_or_absent_from_a_source_that_answers_is_idle(running: int | None, answered: bool) -> None:
    svc = service(running, answered)
    answer = svc.answer(KEY, META)
    assert (answer.decision.replicas, answer.active) == (0, False)
    assert svc.is_active(KEY, META) is False


def test_a_scaler_whose_exporters_never_answer_holds_a_running_model() -> None:
    """`keda-llm scaler` as built (no Kubernetes view here), its exporters down from the start: every poll,
    before and after collection cycles, is UNAVAILABLE (it answered 0 and inactive)."""
    clock = FakeClock(T0)
    pod = ScalerPod(clock)
    try:
        client = stub(pod.channel)
        so = ref("chat", model="m", exporters=refused_address(), scaleToZero="true", idleTimeout="30s")
        codes = []
        for _ in range(4):
            try:
                keda_poll(client, so)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as err:
                codes.append(err.code())
            clock.now += 30.0
            pod.collect()
        assert codes == [grpc.StatusCode.UNAVAILABLE] * 4
    finally:
        pod.stop()


def test_the_first_collection_answers_within_the_tick_it_lands() -> None:
    """A scaler that has just started answers UNAVAILABLE until its source first answers. When that answer
    lands, the next question is answered from it even within the same tick: a no-data answer moved no
    policy state, so holding it to its tick only delayed KEDA (two ScaledObjects on one source, asked in
    one tick on either side of the collection, disagreed)."""
    clock, store = FakeClock(T0), HistoryStore()
    answered: list[float] = []
    svc = ScalerService(
        decide=decide, histories=store.get, history_lock=store.lock, bus=ActivationBus(clock=clock), clock=clock,
        source_answered_at=lambda key, cfg: answered[-1] if answered else None, reuse_s=10.0)
    with pytest.raises(NoUsableData):
        svc.answer(KEY, META)
    clock.now += 0.3  # same tick
    answered.append(clock.now)
    answer = svc.answer(KEY, META)
    assert (answer.decision.replicas, answer.active) == (0, False)
    # an answer with data is held to its tick as before: the source going quiet does not re-decide it
    answered.clear()
    assert svc.answer(KEY, META) is answer
