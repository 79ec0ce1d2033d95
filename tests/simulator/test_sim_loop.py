"""The detailed event loop on scenarios small enough to work out by hand (constant-time iterations,
fixed cold starts), the policy going through the real scaler service and the KEDA+HPA emulator."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from sim_helpers import at, config, run, trace

from keda_llm.simulator.cluster.router import Router
from keda_llm.simulator.control import KedaSettings
from keda_llm.simulator.control.controllers import PodPlan, ScheduleController
from keda_llm.simulator.control.policies import OursController, default_scaledobject


def _static(n: int) -> ScheduleController:
    return ScheduleController("static", [PodPlan(0.0, math.inf, 0.0)] * n)


def _ours(policy: dict[str, str], *, zero: bool = False, push: bool = True) -> OursController:
    so = default_scaledobject("m", scale_to_zero=zero)
    trig = so.triggers[0]
    trig = replace(trig, metadata={**trig.metadata, **policy}, type="external-push" if push else "external")
    settings: KedaSettings = replace(so, triggers=(trig,))
    return OursController("ours", settings, initial_replicas=settings.min_replicas)


def test_two_static_replicas_least_outstanding_by_hand() -> None:
    # 10 ms per iteration; prompt 10 tokens (one prefill iteration), 5 output tokens.
    # t=0: r0 -> replica 0 (starts its prefill at once), r1 -> replica 1, r2 -> replica 0 (tie 1-1: lowest
    # index), queued behind r0's running iteration. Replica 0: [0, .01] r0 prefill -> r0 token 1;
    # [.01, .02] r0 decode + r2 prefill -> r2 token 1; then both decode: r0 token 5 at .05, r2 at .06.
    # r3 at 1.0: both idle, tie 0-0 -> replica 0: tokens at 1.01 .. 1.05.
    res = run(trace([0, 0, 0, 1.0]), config(iteration_s=0.01), _static(2))
    got = [(r.rid, round(r.first_token_s or -1, 9), round(r.finish_s or -1, 9)) for r in res.requests]
    assert got == [(0, 0.01, 0.05), (1, 0.01, 0.05), (2, 0.02, 0.06), (3, 1.01, 1.05)]
    assert res.end_s == pytest.approx(1.05)
    assert res.gpu_seconds == pytest.approx(2 * 1.05)  # two pods from 0 to the last finish
    assert res.cold_starts == 0 and res.dropped_timeout == [] and res.dropped_rejected == []


def test_round_robin_alternates() -> None:
    res = run(trace([0, 0, 0, 0]), config(iteration_s=0.01, routing="round_robin"), _static(2))
    # r0 -> 0, r1 -> 1, r2 -> 0, r3 -> 1: each replica runs two, the second one iteration later
    assert [round(r.first_token_s or -1, 9) for r in res.requests] == [0.01, 0.01, 0.02, 0.02]


def test_our_policy_scales_up_through_keda_and_hpa_by_hand() -> None:
    # 1 s per iteration, batch limit 4, 8 requests at t=0 with 200 output tokens.
    # Replica 0: r0 prefills alone over [0, 1] (the others arrive while it runs); at t=0 collection sees
    # running 1 + waiting 7 = 8. The concurrency policy (target 2 per pod) wants 8 / 2 = 4. KEDA polls at
    # 0 and the HPA syncs at 0: AverageValue 4 / target 1 over 1 pod -> 4 (the behavior allows +64 Pods).
    # Three pods start at 0, scheduled at 10, ready at 60 (cold start 10 s + 50 s).
    ctl = _ours({"policy": "concurrency", "targetConcurrency": "2"})
    res = run(trace([0] * 8, output=200), config(), ctl)
    ups = [(e.at, e.replicas_before, e.replicas_after) for e in ctl.events if e.kind == "hpa_scale_up"]
    assert ups[0] == (0.0, 1, 4)
    assert at(res, 30.0) == (1, 3, 4)
    assert at(res, 60.0) == (4, 0, 4)
    assert res.cold_starts == 3
    # The queued requests stay in replica 0's engine (a gateway does not move them). r0: token 1 at 1,
    # token 200 at 200; r1-r3 join at [1, 2]: 200 tokens at 201; at 200 r4 joins, at 201 r5-r7 join.
    first = [r.first_token_s for r in res.requests]
    finish = [r.finish_s for r in res.requests]
    assert first == [1.0, 2.0, 2.0, 2.0, 201.0, 202.0, 202.0, 202.0]
    assert finish == [200.0, 201.0, 201.0, 201.0, 400.0, 401.0, 401.0, 401.0]
    assert res.end_s == 401.0


@pytest.mark.parametrize("push, ready_at", [(True, 161.0), (False, 170.0)])
def test_scale_from_zero_loses_no_request(push: bool, ready_at: float) -> None:
    # Zero pods, scale to zero on. Three requests reach the gateway at t=101 and wait there. The gateway's
    # POST /v1/activate at 101 reaches the scaler: an external-push trigger pushes at once (0 -> 1 at 101);
    # a polled external trigger wakes at KEDA's next poll (pollingInterval 10: at 110). The pod is ready one
    # cold start (60 s) later; the held requests are queued together and share the first iteration:
    # prefill [ready, ready+1] -> first tokens.
    ctl = _ours({"policy": "concurrency", "targetConcurrency": "4"}, zero=True, push=push)
    res = run(trace([101, 101, 101], output=3), config(), ctl)
    acts = [(e.at, e.kind) for e in ctl.events if e.kind in ("push_activate", "keda_activate")]
    assert acts[0] == (ready_at - 60.0, "push_activate" if push else "keda_activate")
    assert res.dropped_timeout == [] and res.dropped_rejected == []
    assert [r.first_token_s for r in res.requests] == [ready_at + 1.0] * 3
    assert [r.ttft_s for r in res.requests] == [ready_at + 1.0 - 101.0] * 3
    assert res.zero_seconds == ready_at - 60.0  # at zero from 0 until the wake-up


def test_gateway_drops_only_after_max_wait() -> None:
    # Nobody scales (an empty schedule): the requests wait at the gateway and are dropped at the first
    # collection once held 30 s: the activator's rule (core.HeldQueue.expire, held max_wait or longer),
    # so at t=130 exactly (at 125, 25 s, they are still held).
    res = run(trace([100, 100]), config(max_wait_s=30.0), ScheduleController("none", []))
    assert len(res.dropped_timeout) == 2
    assert res.end_s == 130.0
    assert all(r.finish_s is None for r in res.requests)


def test_removed_replica_drains_its_requests() -> None:
    # Pod 0 is removed at t=5 while it runs r0 (prompt 10, 20 tokens: token 1 at 1 s ... token 20 at 20 s).
    # It finishes r0, then it is gone at 20: 20 pod-seconds. r1 at t=6 goes to pod 1 (pod 0 drains): 6 -> 26.
    plan = [PodPlan(0.0, 5.0, 0.0), PodPlan(0.0, math.inf, 0.0)]
    res = run(trace([0, 6], output=20), config(), ScheduleController("s", plan))
    assert [r.finish_s for r in res.requests] == [20.0, 26.0]
    assert res.end_s == 26.0
    assert res.gpu_seconds == pytest.approx(20.0 + 26.0)


def test_request_larger_than_kv_is_dropped_not_stuck() -> None:
    cfg = config()
    cfg = replace(cfg, replica=replace(cfg.replica, kv_blocks=2))  # 32 tokens of KV
    res = run(trace([0, 1], prompt=40, output=2), cfg, _static(1))
    assert len(res.dropped_rejected) == 2 and res.end_s == 1.0


def test_router_rejects_unknown_rule() -> None:
    with pytest.raises(ValueError,
                       match="rule must be one of least_outstanding, least_loaded, round_robin, got 'random'"):
        Router("random")  # type: ignore[arg-type]
