"""Decisions off the RPC path: ScalerService.refresh (the DecisionRefresher's step) and `reuse_s`.

The fake decide counts its calls in the policy state (`last_replicas`), so each test can see exactly
when the policy ran: at most once per tick, again when its inputs (a new collection, an activation)
change or its answer is `reuse_s`/2 old, and on the RPC path only once an answer is `reuse_s` old.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from scaler_harness import FakeClock, FakeHistory, make_service

from keda_llm.scaler.activation import ScaledObjectKey
from keda_llm.scaler.service import ScalerService

KEY = ScaledObjectKey("llm", "llama")
META = {"model": "meta-llama/Llama-3.1-8B-Instruct", "scaleToZero": "true"}
T = 1_000_000.0


@dataclass
class CollectedHistory(FakeHistory):
    """A history that says when it was last collected, as ModelHistory.last_at does."""

    last_at: float | None = None


def calls(service: ScalerService) -> int:
    (entry,) = service._entries.values()
    return entry.state.last_replicas or 0


def setup(reuse_s: float = 6.0) -> tuple[ScalerService, FakeClock, CollectedHistory]:
    clock = FakeClock(T)
    history = CollectedHistory(desired=3, last_at=T - 1)
    service = make_service({("llm", META["model"]): history}, clock, reuse_s=reuse_s)
    return service, clock, history


def test_decisions_follow_collection_and_age_and_rpcs_read_them() -> None:
    service, clock, history = setup(reuse_s=6.0)
    assert service.answer(KEY, META).decision.replicas == 3  # first question: decided on the spot
    assert calls(service) == 1
    assert service.refresh() == 0  # decided this tick already
    clock.now = T + 1
    assert service.refresh() == 0  # same inputs, answer 1 s old (< reuse_s / 2 = 3 s)
    assert service.answer(KEY, META).decision.replicas == 3 and calls(service) == 1  # served, not decided
    history.last_at, history.desired = T + 0.5, 4  # a collection landed
    assert service.refresh() == 1 and calls(service) == 2
    assert service.answer(KEY, META).decision.replicas == 4 and calls(service) == 2
    clock.now = T + 4  # inputs unchanged, answer (tick T + 1) now 3 s old: refreshed for the clock's sake
    assert service.refresh() == 1 and calls(service) == 3
    clock.now = T + 9.5  # no refresh since: the answer of tick T + 4 is 5 s old, still served
    assert service.is_active(KEY, META) and calls(service) == 3
    clock.now = T + 10  # 6 s old = reuse_s: the RPC decides itself
    service.answer(KEY, META)
    assert calls(service) == 4


def test_a_collection_within_the_tick_already_decided_waits_for_the_next_tick() -> None:
    service, clock, history = setup()
    service.answer(KEY, META)
    history.last_at = T + 0.2
    assert service.refresh() == 0 and calls(service) == 1  # once per tick
    clock.now = T + 1
    assert service.refresh() == 1 and calls(service) == 2


def test_an_activation_is_a_new_input() -> None:
    service, clock, _ = setup()
    service.answer(KEY, META)
    clock.now = T + 1
    assert service.refresh() == 0
    service.activate(KEY)
    assert service.refresh() == 1 and calls(service) == 2


def test_without_reuse_every_tick_is_decided_on_its_first_question() -> None:
    service, clock, _ = setup(reuse_s=0.0)
    service.answer(KEY, META)
    clock.now = T + 1
    service.answer(KEY, META)
    service.answer(KEY, META)
    assert calls(service) == 2


def test_demand_seen_by_a_refresh_pushes_to_an_open_stream() -> None:
    """What watch_demand does for answers it decides, refresh does for its own: an idle ScaledObject
    whose stream is open and whose new decision is active gets a push (and one `demand` activation)."""
    service, clock, history = setup()

    async def scenario() -> tuple[bool, bool]:
        history.active = False
        sub = service.bus.subscribe(KEY)
        assert service.answer(KEY, META).active is False
        clock.now = T + 1
        history.active, history.last_at = True, T + 0.5
        service.refresh()
        return await sub.wait(timeout=5.0), service.answer(KEY, META).active

    assert asyncio.run(scenario()) == (True, True)
    assert service.metrics.registry.get_sample_value(
        "keda_llm_scaler_activations_total", {"namespace": "llm", "scaledobject": "llama", "source": "demand"}) == 1.0


def test_reuse_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="reuse_s must be >= 0, got -1"):
        setup(reuse_s=-1.0)
