"""ScaledObjects KEDA stops asking about are forgotten, and what they shared is let go with its last user.

Found by driving the scaler as KEDA does: with the DecisionRefresher running (the default) RPCs reuse its
answers and the sweep, called only on the RPC path, never ran: 2,000 deleted ScaledObjects kept their
entries, were re-decided every second and kept their series in /metrics. And when the sweep did run, a
ScaledObject re-created with new metadata lost its Kubernetes view with its old entry.
"""

from __future__ import annotations

import contextlib

from prometheus_client import generate_latest
from scaler_harness import FakeClock

from keda_llm.scaler.activation import ActivationBus
from keda_llm.scaler.decide import decide
from keda_llm.scaler.model import WorkloadState
from keda_llm.scaler.service import HistoryStore, NoUsableData, ScaledObjectKey, ScalerService

T0 = 1_800_000_000.0
HOUR = 3600.0


class World:
    def __init__(self) -> None:
        self.clock = FakeClock(T0)
        self.forgotten: list[ScaledObjectKey] = []
        self.service = ScalerService(
            decide=decide, histories=HistoryStore().get, bus=ActivationBus(clock=self.clock), clock=self.clock,
            workloads=lambda key: WorkloadState(1, 1), forget_after_s=HOUR,
            on_forget=lambda key, cfg: self.forgotten.append(key))

    def poll(self, name: str, **metadata: str) -> None:
        with contextlib.suppress(NoUsableData):  # no data here: the entry is made all the same
            self.service.answer(ScaledObjectKey("llm", name), {"model": "m", **metadata})

    def series(self, name: str) -> int:
        text = generate_latest(self.service.metrics.registry).decode()
        return sum(1 for line in text.splitlines() if line.startswith("keda_llm_scaler_unavailable_total{")
                   and f'scaledobject="{name}"' in line)


def test_the_refresher_forgets_what_keda_stopped_asking_about() -> None:
    w = World()
    for i in range(50):
        w.poll(f"gone-{i}", maxReplicas=str(5 + i))
    w.poll("live")
    assert len(w.service.known()) == 51 and w.series("gone-0") == 1
    for _ in range(3):  # two hours of refresher ticks, KEDA polling only "live"
        w.clock.now += 40 * 60
        w.poll("live")
        w.service.refresh()
    assert len(w.service.known()) == 1
    assert sorted(k.name for k in w.forgotten) == sorted(f"gone-{i}" for i in range(50))
    assert w.series("gone-0") == 0 and w.series("live") == 1


def test_a_recreated_scaledobject_keeps_its_kubernetes_view_when_its_old_entry_goes() -> None:
    w = World()
    w.poll("chat", maxReplicas="2")
    w.clock.now += 60
    w.poll("chat", maxReplicas="3")  # re-created with new metadata: a second entry, same name
    for _ in range(4):
        w.clock.now += 20 * 60
        w.poll("chat", maxReplicas="3")
        w.service.refresh()
    assert len(w.service.known()) == 1
    assert w.forgotten == []  # its Kubernetes view and warming stay: the new entry still uses them
    assert w.series("chat") == 1
