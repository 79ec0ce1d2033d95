"""scaler/pools.py: one split per model across its pools, by hand-derived numbers.

The histories are real ModelHistory objects fed observations as collection would (replicas labelled
with their `role`); every expected count is worked out in the test's comments.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from keda_llm.scaler.config import ConfigError, ScalerConfig, Variant, parse_metadata
from keda_llm.scaler.decide import decide
from keda_llm.scaler.history import ModelHistory
from keda_llm.scaler.model import NoData, Observation, PolicyState, ReplicaSample, WorkloadState
from keda_llm.scaler.pools import (
    VariantLimit,
    anchored_mix,
    cheapest_mix,
    pd_split,
    prefill_utilization,
    split_ratio,
    variant_limits,
    variant_split,
    with_peers,
)

T0 = 1_000_000.0
KV = 100_000.0  # KV tokens per replica


def cfg(**md: str) -> ScalerConfig:
    return parse_metadata({"model": "m", **md})


# ---- the ratio modes -----------------------------------------------------------------------------


@pytest.mark.parametrize(("md", "p_need", "d_need", "want"), [
    # independent: each rounded up on its own
    ({}, 1.5, 1.25, (2, 2)),
    # fixed 1:2: decode = ceil(max(1.25, 1.5 / 0.5 = 3)) = 3, prefill = ceil(0.5 x 3) = 2
    ({"ratio": "fixed", "prefillDecodeRatio": "1:2"}, 1.5, 1.25, (2, 3)),
    # fixed 1:2, decode-bound: decode = ceil(max(4.1, 2)) = 5, prefill = ceil(2.5) = 3
    ({"ratio": "fixed", "prefillDecodeRatio": "1:2"}, 1.0, 4.1, (3, 5)),
    # fixed 1:3 (0.333...): decode 3 -> prefill exactly 1, not 2 from float noise
    ({"ratio": "fixed", "prefillDecodeRatio": "1:3"}, 0.5, 3.0, (1, 3)),
    # bounded at most 1:2: prefill 3 > 0.5 x 2 -> decode = ceil(3 / 0.5) = 6
    ({"ratio": "bounded", "maxPrefillDecodeRatio": "1:2"}, 3.0, 2.0, (3, 6)),
    # bounded at least 1:2: prefill 1 < 0.5 x 6 -> prefill = 3
    ({"ratio": "bounded", "minPrefillDecodeRatio": "1:2"}, 1.0, 6.0, (3, 6)),
    # bounded within [1:4, 1:1]: 2 and 3 are within, kept as each signal says
    ({"ratio": "bounded", "minPrefillDecodeRatio": "1:4", "maxPrefillDecodeRatio": "1:1"}, 1.2, 2.5, (2, 3)),
    # nothing to do: nothing asked
    ({"ratio": "fixed", "prefillDecodeRatio": "1:2"}, 0.0, 0.0, (0, 0)),
])
def test_ratio_modes(md: dict[str, str], p_need: float, d_need: float, want: tuple[int, int]) -> None:
    assert split_ratio(p_need, d_need, cfg(role="prefill", **md)) == want


def test_prefill_utilization_keeps_the_mean_ttft_within_the_target() -> None:
    # one prompt: 2000 tokens / 10000 tok/s = 0.2 s; target 1 s: rho = 2 (1 - 0.2) / (2 - 0.2) = 0.888...
    assert prefill_utilization(2000, 10000, 1.0, 0.8) == pytest.approx(1.6 / 1.8)
    # and at that rho the M/D/1 mean wait is what is left of the target: 0.2 + rho 0.2 / (2 (1 - rho)) = 1
    rho = 1.6 / 1.8
    assert 0.2 + rho * 0.2 / (2 * (1 - rho)) == pytest.approx(1.0)
    assert prefill_utilization(2000, 10000, 0.15, 0.8) == 0.05  # one prompt takes longer than the target
    assert prefill_utilization(10, 10000, 100.0, 0.8) == 0.95  # a loose target never plans a replica full
    assert prefill_utilization(2000, 10000, None, 0.8) == 0.8  # no target: targetKVUtilization


# ---- prefill / decode from a history -------------------------------------------------------------


def sample(pod: str, role: str, t: float, *, prompt: float = 0.0, finished: float = 0.0, kv: float = 0.0,
           waiting: float = 0.0, hits: float | None = None) -> ReplicaSample:
    return ReplicaSample(pod=pod, timestamp=t, running=1.0, waiting=waiting, kv_usage_ratio=kv,
                         kv_capacity_tokens=KV, prompt_tokens_total=prompt, generation_tokens_total=0.0,
                         requests_finished_total=finished, role=role,
                         prefix_queried_total=None if hits is None else prompt, prefix_hit_total=hits)


def pd_history(seconds: int = 120, prefill_tps: float = 6000.0, decode_kv: float = 0.5,
               prefill_waiting: float = 0.0, hit_ratio: float | None = None) -> ModelHistory:
    """2 prefill replicas looking up `prefill_tps` prompt tokens/s each (3 requests/s: 2000 tokens each),
    `hit_ratio` of them found in the prefix cache where set, 2 decode replicas with `decode_kv` of their
    KV cache in use, one observation a second."""
    h = ModelHistory("llm", "m")
    for i in range(seconds + 1):
        t = T0 + i
        hits = None if hit_ratio is None else hit_ratio * prefill_tps * i
        reps = [sample(f"p{k}", "prefill", t, prompt=prefill_tps * i, finished=3.0 * i, waiting=prefill_waiting,
                       hits=hits) for k in range(2)]
        reps += [sample(f"d{k}", "decode", t, kv=decode_kv) for k in range(2)]
        h.ingest(Observation("llm", "m", t, tuple(reps)))
    return h


def test_each_pool_has_its_own_history_and_the_model_keeps_the_sum() -> None:
    h = pd_history()
    now = T0 + 120
    prefill, decode = h.pool("prefill"), h.pool("decode")
    assert prefill is not None and decode is not None and h.pool("unified") is None
    assert prefill.window(now, 60).prompt_rate == pytest.approx(12000.0)
    assert decode.window(now, 60).kv_used == pytest.approx(2 * 0.5 * KV)
    assert decode.window(now, 60).prompt_rate == 0.0
    assert h.window(now, 60).kv_used == pytest.approx(2 * 0.5 * KV)  # prefill replicas hold none (kv 0)
    assert ModelHistory("llm", "x").pool("prefill") is None


def test_pd_split_by_hand() -> None:
    h = pd_history()
    now = T0 + 120
    # prefill: 12000 tok/s against 10000 tok/s x 0.8 (targetKVUtilization, no TTFT target) = 1.5 replicas
    # decode: 100000 tokens held against 100000 x 0.8 per replica = 1.25 replicas
    base = {"role": "decode", "prefillTokensPerSecond": "10000"}
    counts, details = pd_split(h, cfg(**base), now)
    assert counts == {"prefill": 2, "decode": 2}
    assert details["prefill_need"] == pytest.approx(1.5)
    assert details["decode_need"] == pytest.approx(1.25)
    counts, _ = pd_split(h, cfg(**base, ratio="fixed", prefillDecodeRatio="1:2"), now)
    assert counts == {"prefill": 2, "decode": 3}  # decode = ceil(max(1.25, 3)), prefill = ceil(1.5)
    # a TTFT target of 1 s with 2000-token prompts: rho = 0.888..., prefill need = 12000 / 8888.9 = 1.35 -> 2
    counts, details = pd_split(h, cfg(**base, targetTimeToFirstToken="1s"), now)
    assert details["prefill_need"] == pytest.approx(12000 / (10000 * 1.6 / 1.8))
    assert counts["prefill"] == 2


def test_prefix_cache_hits_are_not_prefill_work() -> None:
    # a quarter of the 12000 prompt tokens/s are cache hits: 9000 to compute / 8000 = 1.125 -> 2
    h = pd_history(hit_ratio=0.25)
    counts, details = pd_split(h, cfg(role="prefill", prefillTokensPerSecond="10000"), T0 + 120)
    assert details["prefix_hit_ratio"] == pytest.approx(0.25)
    assert details["prefill_need"] == pytest.approx(9000 / 8000)
    assert counts["prefill"] == 2
    # measured while queueing: 6000 x 0.75 = 4500 computed per replica; 9000 / 3600, plus the 2 queued
    # prompts' 2 x 1500 tokens drained within the default 600 s cold start: 3000 / (4500 x 600)
    h = pd_history(hit_ratio=0.25, prefill_waiting=1.0)
    _, details = pd_split(h, cfg(role="prefill"), T0 + 120)
    assert details["prefill_capacity_tps"] == pytest.approx(4500.0)
    assert details["prefill_need"] == pytest.approx(9000 / 3600 + 3000 / (4500 * 600))


def test_queued_prompts_drain_within_a_cold_start() -> None:
    # 40 requests waiting on each prefill replica, 2000 tokens each: 160000 tokens, drained within the 20 s
    # cold start at 10000 tok/s a replica (policy.backlog_replicas): 0.8 replicas; on top of the 12000 tok/s
    # arriving at rho 3.6 / 3.8 (0.2 s prompts in a 2 s TTFT): 1.267. 2.067 -> 3
    h = pd_history(prefill_waiting=40.0)
    c = cfg(role="prefill", prefillTokensPerSecond="10000", targetTimeToFirstToken="2s", coldStart="20s")
    counts, details = pd_split(h, c, T0 + 120)
    assert details["prefill_tokens_per_s"] == pytest.approx(12000.0)
    assert details["prefill_need_backlog"] == pytest.approx(0.8)
    assert details["prefill_need"] == pytest.approx(12000 / (10000 * 3.6 / 3.8) + 0.8)
    assert counts["prefill"] == 3


def test_pending_guard_caps_a_pool_while_its_new_replicas_load() -> None:
    # 400 waiting per prefill replica: 1.6e6 tokens / (10000 x 20 s cold start) = 8 replicas, + 1.267 for the
    # 12000 tok/s arriving = 9.27 -> 10; with a third prefill replica listed but not up yet (loading), the
    # pool holds at the 3 it has
    h = pd_history(prefill_waiting=400.0)
    c = cfg(role="prefill", prefillTokensPerSecond="10000", targetTimeToFirstToken="2s", coldStart="20s")
    assert pd_split(h, c, T0 + 120)[0]["prefill"] == 10
    now = T0 + 121
    reps = [sample(f"p{k}", "prefill", now, prompt=6000.0 * 121, finished=3.0 * 121, waiting=400.0) for k in range(2)]
    reps += [ReplicaSample(pod="p-new", timestamp=0.0, up=False, role="prefill")]
    reps += [sample(f"d{k}", "decode", now, kv=0.5) for k in range(2)]
    h.ingest(Observation("llm", "m", now, tuple(reps)))
    counts, details = pd_split(h, c, now)
    assert counts["prefill"] == 3 and details["prefill_pending_guard"] == 3.0
    assert counts["decode"] == 2  # the other pool has nothing loading: its own need
    # the guard holds the queue's part only: at 2000 tok/s a replica a prompt takes 1 s, rho = 2 (2 - 1) /
    # (4 - 1) = 2/3, and the 12000 tok/s arriving need 12000 / 1333.3 = 9 replicas whatever is loading
    slow = cfg(role="prefill", prefillTokensPerSecond="2000", targetTimeToFirstToken="2s", coldStart="20s")
    counts, details = pd_split(h, slow, now)
    assert details["prefill_need_flow"] == pytest.approx(9.0)
    assert counts["prefill"] == 9 and details["prefill_pending_guard"] == pytest.approx(9.0)


def test_the_prefill_pool_stands_ready_for_the_bursts_of_the_last_three_cold_starts() -> None:
    # 300 s of 6000 prompt tokens/s a replica (12000 in all), but 18000 a replica (36000) from T0+100 to
    # T0+120: a burst shorter than a cold start. At T0+300 with a 180 s cold start, the last 540 s hold it:
    # 36000 / (10000 x 0.8) = 4.5 -> 5 prefill replicas; with a 30 s cold start the last 90 s do not: 1.5 -> 2
    h = ModelHistory("llm", "m")
    prompt = 0.0
    for i in range(301):
        t = T0 + i
        prompt += 18000.0 if 100 < i <= 120 else 6000.0
        reps = [sample(f"p{k}", "prefill", t, prompt=prompt, finished=3.0 * i) for k in range(2)]
        reps += [sample(f"d{k}", "decode", t, kv=0.5) for k in range(2)]
        h.ingest(Observation("llm", "m", t, tuple(reps)))
    counts, details = pd_split(h, cfg(role="prefill", prefillTokensPerSecond="10000", coldStart="180s"), T0 + 300)
    assert details["prefill_burst_tokens_per_s"] == pytest.approx(36000.0)
    assert details["prefill_need"] == pytest.approx(4.5)
    assert counts["prefill"] == 5
    counts, details = pd_split(h, cfg(role="prefill", prefillTokensPerSecond="10000", coldStart="30s"), T0 + 300)
    assert details["prefill_need"] == pytest.approx(1.5)
    assert counts["prefill"] == 2


def test_the_decode_pool_stands_ready_for_the_kv_of_the_last_three_cold_starts() -> None:
    # 2 decode replicas with half their KV (100000 each) in use, but 0.9 from T0+100 to T0+120. At T0+300
    # with a 180 s cold start the last 540 s hold it: 2 x 90000 = 180000 tokens / (100000 x 0.8) = 2.25 -> 3;
    # with a 30 s cold start they do not: 100000 / 80000 = 1.25 -> 2
    h = ModelHistory("llm", "m")
    for i in range(301):
        t = T0 + i
        reps = [sample(f"p{k}", "prefill", t, prompt=6000.0 * i, finished=3.0 * i) for k in range(2)]
        reps += [sample(f"d{k}", "decode", t, kv=0.9 if 100 <= i < 120 else 0.5) for k in range(2)]
        h.ingest(Observation("llm", "m", t, tuple(reps)))
    c = cfg(role="decode", prefillTokensPerSecond="10000", coldStart="180s")
    counts, details = pd_split(h, c, T0 + 300)
    assert details["decode_need"] == pytest.approx(2.25)
    assert counts["decode"] == 3
    counts, details = pd_split(h, cfg(role="decode", prefillTokensPerSecond="10000", coldStart="30s"), T0 + 300)
    assert details["decode_need"] == pytest.approx(1.25)
    assert counts["decode"] == 2


def test_prefill_throughput_is_measured_while_requests_queue() -> None:
    # unset prefillTokensPerSecond: the most one replica computed while requests queued = 6000 tok/s;
    # 12000 / (6000 x 0.8) = 2.5, and a queue of 1 per replica: 4000 tokens / (6000 x 600 s) -> 3
    h = pd_history(prefill_waiting=1.0)
    counts, details = pd_split(h, cfg(role="prefill"), T0 + 120)
    assert details["prefill_capacity_tps"] == pytest.approx(6000.0)
    assert details["prefill_need"] == pytest.approx(2.5 + 4000 / (6000 * 600))
    assert counts["prefill"] == 3
    # never saturated (no queue): nothing to measure, a clear NoData
    with pytest.raises(NoData, match="prefillTokensPerSecond"):
        pd_split(pd_history(), cfg(role="prefill"), T0 + 120)


def test_a_model_without_roles_has_no_pools() -> None:
    h = ModelHistory("llm", "m")
    h.ingest(Observation("llm", "m", T0, (ReplicaSample(pod="u", timestamp=T0, running=1.0),)))
    assert h.pool("decode") is None
    with pytest.raises(NoData, match="role prefill or decode"):
        pd_split(h, cfg(role="decode", prefillTokensPerSecond="1000"), T0)


def test_decide_answers_each_pool_its_share_of_the_same_split() -> None:
    """The prefill and the decode ScaledObject, decided from the same history at the same tick, get the
    two halves of one pair, whatever state each carries."""
    h = pd_history()
    now = T0 + 120
    md = {"prefillTokensPerSecond": "10000", "ratio": "fixed", "prefillDecodeRatio": "1:2"}
    wl = WorkloadState(current_replicas=2, ready_replicas=2)
    p, _ = decide(h, cfg(role="prefill", **md), PolicyState(), wl, now)
    d, _ = decide(h, cfg(role="decode", **md), PolicyState(last_replicas=17, initialized=True), wl, now)
    assert (p.replicas, d.replicas) == (2, 3)
    assert (p.reason, d.reason) == ("steady", "scale_up")
    assert p.details["pool_decode"] == d.details["pool_decode"] == 3.0
    # its own bounds clamp its own share only
    d, _ = decide(h, cfg(role="decode", maxReplicas="2", **md), PolicyState(), wl, now)
    assert (d.replicas, d.reason) == (2, "max_clamp")


# ---- variants ------------------------------------------------------------------------------------

L4 = Variant("l4", 0.8, 60_000.0, 4)
H100 = Variant("h100", 4.1, 480_000.0)
PER = {"l4": 60_000.0, "h100": 480_000.0}
FREE = {"l4": VariantLimit(4), "h100": VariantLimit(math.inf)}


@pytest.mark.parametrize(("need", "want", "price"), [
    # 200000 tokens: 4 x L4 (240000) = 3.2/h beats 1 x H100 = 4.1/h
    (200_000.0, {"l4": 4, "h100": 0}, 3.2),
    # 500000: 1 H100 + 1 L4 (540000) = 4.9/h beats 2 H100 = 8.2 (L4 alone cannot: at most 4)
    (500_000.0, {"l4": 1, "h100": 1}, 4.9),
    # 120000: 2 x L4 = 1.6/h
    (120_000.0, {"l4": 2, "h100": 0}, 1.6),
    # 250000: L4 alone would need 5 (> its 4); 1 H100 = 4.1/h beats 4 L4 + 1 H100 = 7.3/h
    (250_000.0, {"l4": 0, "h100": 1}, 4.1),
    (0.0, {"l4": 0, "h100": 0}, 0.0),
])
def test_cheapest_mix(need: float, want: dict[str, int], price: float) -> None:
    counts, covered = cheapest_mix(need, [L4, H100], PER, FREE)
    assert covered and counts == want
    assert sum(counts[v.name] * v.price_per_hour for v in (L4, H100)) == pytest.approx(price)


def test_ties_go_to_the_more_preferred_variant() -> None:
    a, b = Variant("a", 1.0, 100.0), Variant("b", 1.0, 100.0)
    limits = {"a": VariantLimit(math.inf), "b": VariantLimit(math.inf)}
    assert cheapest_mix(250.0, [a, b], {"a": 100.0, "b": 100.0}, limits)[0] == {"a": 3, "b": 0}
    assert cheapest_mix(250.0, [b, a], {"a": 100.0, "b": 100.0}, limits)[0] == {"a": 0, "b": 3}


def test_a_mix_covers_prompt_compute_as_well_as_kv() -> None:
    # per replica (KV tokens, prompt tokens/s): A100 (400000, 10000) at 1.8/h, H100 (400000, 20000) at 4.1/h;
    # need 300000 KV tokens and 40000 tok/s: prompt compute binds both; per 10000 tok/s an A100 costs 1.8,
    # an H100 2.05: 4 A100 = 7.2/h (2 H100 = 8.2/h; 3 A100 + 1 H100 = 9.5/h). KV alone: 1 A100.
    a100, h100 = Variant("a100", 1.8, 400_000.0), Variant("h100", 4.1, 400_000.0)
    per = {"a100": (400_000.0, 10_000.0), "h100": (400_000.0, 20_000.0)}
    free = {"a100": VariantLimit(math.inf), "h100": VariantLimit(math.inf)}
    assert cheapest_mix((300_000.0, 40_000.0), [a100, h100], per, free) == ({"a100": 4, "h100": 0}, True)
    # the H100 at 25000 tok/s is cheaper per unit (1.64 per 10000): it goes first, 2 H100 = 8.2/h, or 1 H100 and
    # 2 A100 for the last 15000 = 7.7/h. (4 A100 = 7.2/h is cheaper by rounding; the search does not drop the
    # cheaper-per-unit variant altogether: docs/pools.md)
    fast = {**per, "h100": (400_000.0, 25_000.0)}
    assert cheapest_mix((300_000.0, 40_000.0), [a100, h100], fast, free) == ({"a100": 2, "h100": 1}, True)
    assert cheapest_mix(300_000.0, [a100, h100], {"a100": 400_000.0, "h100": 400_000.0}, free)[0] == {
        "a100": 1, "h100": 0}
    # at most 2 A100: 2 A100 (20000) + 1 H100 (20000) = 7.7/h beats 2 H100
    capped = {"a100": VariantLimit(2), "h100": VariantLimit(math.inf)}
    assert cheapest_mix((300_000.0, 40_000.0), [a100, h100], per, capped) == ({"a100": 2, "h100": 1}, True)


def test_nothing_covers_it_every_variant_at_its_cap() -> None:
    counts, covered = cheapest_mix(1e9, [L4], {"l4": 60_000.0}, {"l4": VariantLimit(4)})
    assert (counts, covered) == ({"l4": 4}, False)


def test_a_variant_pending_past_the_timeout_is_capped_at_what_it_scheduled() -> None:
    stuck = WorkloadState(current_replicas=4, ready_replicas=2, unscheduled=2, unscheduled_since=T0)
    limits = variant_limits([L4, H100], {"l4": stuck}, T0 + 299, 300.0)
    assert limits["l4"] == VariantLimit(4, False)  # 299 s: not yet
    limits = variant_limits([L4, H100], {"l4": stuck}, T0 + 300, 300.0)
    assert limits["l4"] == VariantLimit(2, True)
    assert limits["h100"] == VariantLimit(math.inf, False)


def variant_history(kv_used: float) -> ModelHistory:
    """Two replicas holding `kv_used` tokens in all (each KV cache 480000), nothing queued."""
    h = ModelHistory("llm", "m")
    for i in range(61):
        t = T0 + i
        h.ingest(Observation("llm", "m", t, tuple(
            ReplicaSample(pod=f"r{k}", timestamp=t, running=1.0, waiting=0.0, kv_usage_ratio=kv_used / 2 / 480_000,
                          kv_capacity_tokens=480_000.0) for k in range(2))))
    return h


VARIANTS = "l4 pricePerHour=0.8 capacity=75000 maxReplicas=4; h100 pricePerHour=4.1 capacity=600000"


def test_variant_split_spills_past_a_stuck_variant_and_holds_its_pending_pods() -> None:
    # 200000 tokens held; at targetKVUtilization 0.8 an L4 carries 60000, an H100 480000 (as above)
    h = variant_history(200_000.0)
    now = T0 + 60
    c = cfg(variant="l4", variants=VARIANTS)
    counts, details = variant_split(h, c, WorkloadState(4, 4), now)
    assert counts == {"l4": 4, "h100": 0}
    assert details["variants_price_per_hour"] == pytest.approx(3.2)
    # L4 got 4 but only 2 were scheduled, the other 2 Pending since T0 - 300: capped at 2, the rest
    # spills to an H100; the 2 pending pods are kept (not asked more, not fewer)
    l4 = WorkloadState(current_replicas=4, ready_replicas=2, unscheduled=2, unscheduled_since=now - 300)
    counts, details = variant_split(h, c, l4, now)
    assert counts == {"l4": 4, "h100": 1}
    assert details["variant_l4_stuck"] == 1.0
    # the same from the H100's ScaledObject, which sees the L4 through its peers
    counts_h, _ = variant_split(h, cfg(variant="h100", variants=VARIANTS),
                                with_peers(WorkloadState(0, 0), {"l4": l4, "gone": None}), now)
    assert counts_h == counts
    # the pods were scheduled (capacity came back): back to the cheapest mix, the H100 released
    counts, _ = variant_split(h, c, WorkloadState(4, 4), now)
    assert counts == {"l4": 4, "h100": 0}


def test_variant_rates_parse_and_a_rate_needs_covering() -> None:
    c = cfg(variant="a", variants="a pricePerHour=1 capacity=1000 prefillTokensPerSecond=500 "
            "decodeTokensPerSecond=200; b pricePerHour=2 capacity=1000")
    assert c.variants == (Variant("a", 1.0, 1000.0, None, 500.0, 200.0), Variant("b", 2.0, 1000.0))
    with pytest.raises(ConfigError, match="decodeTokensPerSecond must be in"):
        cfg(variant="a", variants="a pricePerHour=1 capacity=1000 decodeTokensPerSecond=0")


def rates_history() -> ModelHistory:
    """Two replicas, each computing 3000 prompt tokens/s and generating 1000 tokens/s over 2 requests/s
    (mean prompt 1500, mean output 500), holding 10000 KV tokens each, nothing queued."""
    h = ModelHistory("llm", "m")
    for i in range(61):
        t = T0 + i
        h.ingest(Observation("llm", "m", t, tuple(
            ReplicaSample(pod=f"r{k}", timestamp=t, running=4.0, waiting=0.0, kv_usage_ratio=0.01,
                          kv_capacity_tokens=1_000_000.0, prompt_tokens_total=3000.0 * i,
                          generation_tokens_total=1000.0 * i, requests_finished_total=2.0 * i) for k in range(2))))
    return h


# two GPU types of different speeds: "slow" computes 10000 prompt tokens/s and generates 2500 tokens/s within
# the ITL target, "fast" 4x both
TWO = ("slow pricePerHour=1 capacity=1000000 prefillTokensPerSecond=10000 decodeTokensPerSecond=2500{m}; "
       "fast pricePerHour={p} capacity=1000000 prefillTokensPerSecond=40000 decodeTokensPerSecond=10000")


def test_a_replica_carries_its_share_of_the_load_within_the_slo() -> None:
    # the load: 6000 prompt tokens/s and 2000 generated tokens/s. A slow replica at targetKVUtilization 0.8
    # (no TTFT target) spends 6000 / 8000 = 0.75 of a replica prefilling and 2000 / 2000 = 1.0 generating:
    # 1.75 replicas carry it all, one carries 1 / 1.75 = 0.571 of it; a fast one 0.1875 + 0.25 = 0.4375 ->
    # 2.286 of it. (Each rate on its own would have planned 0.75 -> 1 slow replica for prompts and 1.0 ->
    # 1 for generation: one replica doing both at once, at 1.75x its time.)
    h, now = rates_history(), T0 + 60
    c = cfg(variant="slow", variants=TWO.format(m="", p="5"))
    counts, details = variant_split(h, c, WorkloadState(2, 2), now)
    assert details["prefill_tokens_per_s"] == pytest.approx(6000.0)
    assert details["decode_tokens_per_s"] == pytest.approx(2000.0)
    assert details["variant_slow_share"] == pytest.approx(1 / 1.75)
    assert details["variant_fast_share"] == pytest.approx(1 / 0.4375)
    # per unit of the load: slow 1 x 1.75 = 1.75/h, fast 5 / 2.286 = 2.19/h: 2 slow (2/h) carry it
    assert counts == {"slow": 2, "fast": 0}
    # at most 1 slow: it carries 0.571, the other 0.429 spills to one fast: 1 + 5 = 6/h
    capped = cfg(variant="slow", variants=TWO.format(m=" maxReplicas=1", p="5"))
    assert variant_split(h, capped, WorkloadState(1, 1), now)[0] == {"slow": 1, "fast": 1}
    # the fast at 1.5/h: 0.66/h per unit, cheaper per unit than the slow: it goes first, and its one replica
    # (1.5/h) beats none and 2 slow (2/h)
    cheap_fast = cfg(variant="slow", variants=TWO.format(m="", p="1.5"))
    assert variant_split(h, cheap_fast, WorkloadState(2, 2), now)[0] == {"slow": 0, "fast": 1}
    # at 3/h it is still cheaper per unit (1.31/h), but none and 2 slow (2/h) beat its one replica (3/h)
    cheap_fast = cfg(variant="slow", variants=TWO.format(m="", p="3"))
    assert variant_split(h, cheap_fast, WorkloadState(2, 2), now)[0] == {"slow": 2, "fast": 0}


def test_the_split_swaps_variants_only_when_the_swap_saves_a_replica() -> None:
    # the load and shares above; the fast at 2.5/h: cheaper per unit (1.09/h), but 2 slow (2/h) beat its one
    # replica (2.5/h) by rounding. Running 1 fast, which covers the load: a swap to 2 slow saves 0.5/h, less
    # than the cheapest replica (1/h), so the fast one stays (no cold start on the slow ones while the HPA
    # keeps the fast one for its window)
    h, now = rates_history(), T0 + 60
    c = cfg(variant="slow", variants=TWO.format(m="", p="2.5"))
    assert variant_split(h, c, WorkloadState(2, 2), now)[0] == {"slow": 2, "fast": 0}  # the other unknown
    running_fast = with_peers(WorkloadState(0, 0), {"fast": WorkloadState(1, 1)})
    counts, details = variant_split(h, c, running_fast, now)
    assert counts == {"slow": 0, "fast": 1} and details["variants_anchored"] == 1.0
    assert anchored_mix(1.0, [Variant("slow", 1.0, 1e6), Variant("fast", 2.5, 1e6)],
                        {"slow": 1 / 1.75, "fast": 1 / 0.4375}, {"slow": VariantLimit(math.inf),
                                                                "fast": VariantLimit(math.inf)},
                        {"slow": 0, "fast": 1}) == {"slow": 0, "fast": 1}
    # at 5/h the swap saves 3/h, more than a replica: 2 slow replace the fast one
    c = cfg(variant="slow", variants=TWO.format(m="", p="5"))
    counts, details = variant_split(h, c, running_fast, now)
    assert counts == {"slow": 2, "fast": 0} and "variants_anchored" not in details
    # short of the load (1 slow carries 0.571), the current counts only grow: 1 more slow (the rest, 0.429,
    # at 1/h) -> the cheapest mix anyway
    running_slow = with_peers(WorkloadState(1, 1), {"fast": WorkloadState(0, 0)})
    assert variant_split(h, c, running_slow, now)[0] == {"slow": 2, "fast": 0}


def test_variant_metadata_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match="'variant' = 'a100': is not one of variants"):
        cfg(variant="a100", variants=VARIANTS)
    with pytest.raises(ConfigError, match="capacity= is required"):
        cfg(variant="l4", variants="l4 pricePerHour=1")
    with pytest.raises(ConfigError, match="cannot be combined with role"):
        cfg(variant="l4", variants=VARIANTS, role="decode")


# ---- the shipped examples ------------------------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"


@pytest.mark.parametrize("name", ["pools-prefill-decode.yaml", "pools-variants.yaml"])
def test_the_examples_pools_share_one_split(name: str) -> None:
    """Every ScaledObject of the model carries the same split keys (only `role`/`variant` differ), so each
    scaler pod computes the same split whichever ScaledObject it is asked about; each names its own pool."""
    docs = [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d and d["kind"] == "ScaledObject"]
    assert len(docs) == 2
    metas = [dict(d["spec"]["triggers"][0]["metadata"]) for d in docs]
    configs = [parse_metadata(m) for m in metas]
    own = [c.role or c.variant for c in configs]
    assert len(set(own)) == 2
    for d, c in zip(docs, configs, strict=True):
        if c.variants:
            assert c.variant == d["metadata"]["name"]  # a variant is named by its ScaledObject
    shared = [{k: v for k, v in m.items() if k not in ("role", "variant")} for m in metas]
    assert shared[0] == shared[1]
