"""The activator's pure rules (activator/core.py) driven with a fake clock: no sockets, no loop."""

from __future__ import annotations

from keda_llm.activator.core import (
    Admitted,
    EndpointLoad,
    HeldQueue,
    Refused,
    Routing,
    RoutingRules,
    Waker,
    pick,
    retry_after,
    route_by_body,
    route_by_path,
)


def admit(q: HeldQueue, priority: int, now: float):  # type: ignore[no-untyped-def]
    r = q.offer(priority, now, retry_after=7)
    assert isinstance(r, Admitted)
    return r.ticket


def test_queue_bound_refuses_past_max_held_with_retry_after() -> None:
    q = HeldQueue("m", max_held=2, max_wait=60, classes=1)
    admit(q, 0, 0.0)
    admit(q, 0, 0.1)
    r = q.offer(0, 0.2, retry_after=7)
    assert r == Refused("queue_full", 7)
    assert len(q) == 2


def test_priority_classes_leave_first_and_fifo_within_a_class() -> None:
    q = HeldQueue("m", max_held=10, max_wait=60, classes=2)
    s1, p1, s2, p2 = admit(q, 1, 0), admit(q, 0, 1), admit(q, 1, 2), admit(q, 0, 3)
    assert [q.pop(), q.pop(), q.pop(), q.pop(), q.pop()] == [p1, p2, s1, s2, None]
    assert all(t.state == "released" for t in (s1, p1, s2, p2))
    # classes past the last are clamped onto it
    t = admit(q, 9, 4)
    assert t.priority == 1


def test_cancelled_requests_are_never_released_and_free_their_place() -> None:
    q = HeldQueue("m", max_held=2, max_wait=60)
    a, b = admit(q, 0, 0), admit(q, 0, 1)
    assert q.cancel(a) and not q.cancel(a)
    assert len(q) == 1
    c = admit(q, 0, 2)  # the freed place
    assert q.pop() is b and q.pop() is c and q.pop() is None
    assert a.state == "cancelled"
    assert not q.cancel(b)  # released already: cancel says so, the caller gives its endpoint back


def test_expire_takes_exactly_those_held_past_max_wait() -> None:
    q = HeldQueue("m", max_held=10, max_wait=5, classes=2)
    a, b, c = admit(q, 1, 0.0), admit(q, 0, 1.0), admit(q, 1, 4.0)
    assert q.expire(4.99) == []
    assert q.expire(5.0) == [a]
    assert q.expire(6.0) == [b]
    assert len(q) == 1 and q.pop() is c
    assert a.state == b.state == "expired"


def test_requeue_goes_to_the_head_with_its_first_arrival_even_past_the_bound() -> None:
    q = HeldQueue("m", max_held=1, max_wait=5)
    a = admit(q, 0, 3.0)
    back = q.requeue(0, 1.0)
    assert len(q) == 2 and q.pop() is back and back.arrived == 1.0
    assert q.expire(7.9) == [] and q.expire(8.0) == [a]


def test_oldest_and_take_all() -> None:
    q = HeldQueue("m", max_held=10, max_wait=5, classes=2)
    assert q.oldest() is None
    a, b = admit(q, 1, 2.0), admit(q, 0, 3.0)
    assert q.oldest() == 2.0
    assert q.take_all() == [b, a] and len(q) == 0


def test_waker_calls_at_once_then_every_interval_and_never_with_ready_endpoints() -> None:
    w = Waker(interval=30)
    assert not w.due(0, held=0, ready=0)
    assert w.due(0, held=1, ready=0)
    w.sent(0)
    assert not w.due(29.9, held=5, ready=0)
    assert w.due(30, held=5, ready=0)
    assert not w.due(100, held=5, ready=1)
    w.reset()
    assert w.due(100.1, held=1, ready=0)


def test_retry_after_is_what_is_left_of_the_cold_start_at_least_one_second() -> None:
    assert retry_after(10, None, 120) == 120
    assert retry_after(100, 10, 120) == 30
    assert retry_after(100.5, 10, 120) == 30  # rounded up
    assert retry_after(500, 10, 120) == 1


def test_pick_least_loaded_by_metrics_and_escape_hatch_for_a_saturated_endpoint() -> None:
    rules = RoutingRules(kv_saturation=0.9)
    eps = [EndpointLoad("a", 0, 0.5, 4), EndpointLoad("b", 3, 0.3, 0), EndpointLoad("c", 0, 0.95, 0)]
    assert pick(eps, rules) == "b"  # 0.3 + 0.03 < 0.5 + 0.4
    # c has the lowest score without its KV saturated... but it is saturated, so it is skipped
    eps = [EndpointLoad("a", 0, 0.85, 2), EndpointLoad("c", 0, 0.92, 0)]
    assert pick(eps, RoutingRules(kv_saturation=0.9, waiting_weight=1.0)) == "a"
    # every endpoint saturated: the least loaded of them still gets it (the engine queues)
    eps = [EndpointLoad("a", 0, 0.99, 5), EndpointLoad("c", 0, 0.97, 1)]
    assert pick(eps, rules) == "c"


def test_pick_falls_back_to_outstanding_when_a_candidate_has_no_fresh_metrics() -> None:
    eps = [EndpointLoad("a", 5, 0.1, 0), EndpointLoad("b", 2, None, None)]
    assert pick(eps, RoutingRules()) == "b"


def test_pick_respects_the_cap_and_round_robins_ties() -> None:
    rules = RoutingRules(max_outstanding=2)
    assert pick([EndpointLoad("a", 2), EndpointLoad("b", 2)], rules) is None
    assert pick([EndpointLoad("a", 2), EndpointLoad("b", 1)], rules) == "b"
    r = Routing(RoutingRules())
    eps = [EndpointLoad("a"), EndpointLoad("b"), EndpointLoad("c")]
    assert [r.pick(eps) for _ in range(6)] == ["a", "b", "c", "a", "b", "c"]
    assert pick([], rules) is None


def test_routes_by_path_prefix_then_by_body_model() -> None:
    prefixes = [("/llama", "llama-8b"), ("/llama/big", "llama-70b")]
    assert route_by_path("/llama/big/v1/chat/completions", prefixes).model == "llama-70b"  # type: ignore[union-attr]
    r = route_by_path("/llama/v1/completions", prefixes)
    assert r is not None and (r.model, r.path) == ("llama-8b", "/v1/completions")
    assert route_by_path("/llamas/v1", prefixes) is None
    names = {"llama-8b": "llama-8b", "meta-llama/Llama-3.1-8B-Instruct": "llama-8b"}
    r = route_by_body("/v1/chat/completions", "meta-llama/Llama-3.1-8B-Instruct", names, "")
    assert r is not None and r.model == "llama-8b"
    assert route_by_body("/v1/x", "nope", names, "llama-8b") is None
    assert route_by_body("/v1/models", None, names, "llama-8b") is not None
    assert route_by_body("/v1/models", None, names, "") is None
