"""One decision per model, split across its pools: prefill/decode disaggregation and GPU variants by cost.

A model served by several Deployments has a ScaledObject per Deployment, and KEDA polls each one on
its own, possibly on different scaler pods, each through its own HPA. So every answer is a share of one
split that any pod computes alike: a pure function of the shared inputs (the model's history as
collection saw it, the ScaledObject's metadata, what Kubernetes says of the pools' Deployments) and the
tick, with no per-pod state. Two pods fed the same collections give the same pair.

Prefill/decode (`role`): the pools are told apart by the replicas' `role` label (history.pool).
- prefill need = prompt tokens/s to compute (the window's, or the largest 10 s burst of the last three
  cold starts: standing headroom for bursts no scaling can answer; net of prefix-cache hits where
  known) / (prefill tokens/s of one replica x a utilization that keeps the mean TTFT within the target:
  M/D/1 queueing per replica, `prefill_utilization`), plus the queue drained within a cold start
  (policy.backlog_replicas, the unified pool's rule);
- decode need = the configured policy on the decode pool (the `tokens` policy: KV tokens held and
  queued against KV tokens per replica) on the window or the recent KV burst, with the ITL target's
  latency term;
- `ratio: fixed` keeps P:D (decode first, prefill = ceil(ratio x decode)); `independent` sizes each
  on its own; `bounded` sizes each on its own, then raises the smaller pool into the ratio limits.

Variants (`variants`): the model's KV-token demand (held + queued, over all its replicas) and, where the
table gives rates, its whole load (each replica carrying the share its prompt and generation times
allow, `replica_share`) are spread to the cheapest mix that covers both, ties to the more preferred; a
variant whose pods stay unscheduled past `pendingTimeout` (no GPU of that type) is capped at the
replicas it has scheduled, so demand spills to the next, and its answer holds its current count (the
pending pods stay as the probe that tells when capacity returns) until they are scheduled.

The windows are Knative's: the stable window's need, or the panic window's when that asks for
`panicThreshold` times more. The pending guard is decide.py's, read from what collection lists: while
a pool has replicas loading (listed by the exporters, never up yet), its need is capped at the
replicas it has, so the queue that builds while they load does not cascade into more. No scale-down
delay or panic hold here (those are per-pod state): the HPA's stabilization smooths scale-down.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from keda_llm.scaler.config import ScalerConfig, Variant
from keda_llm.scaler.history import HistoryView, Load, Snapshot
from keda_llm.scaler.model import Decision, NoData, PolicyState, Reason, WorkloadState
from keda_llm.scaler.policy import NoSignal, backlog_replicas, cold_start_of, demand, mean_prompt_tokens, tokens
from keda_llm.scaler.slo import from_window
from keda_llm.scaler.windows import ceil_replicas

MAX_UTILIZATION = 0.95  # a prefill replica never planned busier than this, whatever the TTFT target allows
MIN_UTILIZATION = 0.05  # nor idler: a TTFT target below one prompt's compute time cannot be met by replicas
MEASURE_S = 3600.0  # how far back the measured prefill throughput looks


def pooled(config: ScalerConfig) -> bool:
    """Whether this ScaledObject's answer is a share of a split (decide.py hands it here)."""
    return config.role in ("prefill", "decode") or bool(config.variants)


# ---- prefill / decode ----------------------------------------------------------------------------


def prefill_utilization(mean_prompt: float, per_replica_tps: float, target_ttft: float | None,
                        default: float) -> float:
    """The utilization at which a prefill replica keeps the mean TTFT within the target.

    One prompt takes s = L/mu seconds; with Poisson arrivals the M/D/1 queue waits W = rho s / (2(1-rho))
    on average (Pollaczek-Khinchine; Kleinrock, Queueing Systems vol. 1, 1975, ch. 5), so s + W <= T holds
    while rho <= 2(T - s) / (2T - s). Without a target: `default` (targetKVUtilization)."""
    if target_ttft is None:
        return default
    s = mean_prompt / per_replica_tps if per_replica_tps > 0 else math.inf
    if s >= target_ttft:
        return MIN_UTILIZATION
    rho = 2.0 * (target_ttft - s) / (2.0 * target_ttft - s)
    return min(MAX_UTILIZATION, max(MIN_UTILIZATION, rho))


def measured_prefill_tps(history: HistoryView, now: float) -> float | None:
    """The most prompt tokens/s one prefill replica computed (net of prefix-cache hits) in a 1 s..60 s bucket
    of the last hour while requests queued (a saturated replica shows its throughput); None when it never
    was saturated."""
    _, rate = history.series("prompt_rate", now, MEASURE_S)
    _, replicas = history.series("replicas", now, MEASURE_S)
    _, waiting = history.series("waiting", now, MEASURE_S)
    _, queried = history.series("prefix_queried_rate", now, MEASURE_S)
    _, hits = history.series("prefix_hit_rate", now, MEASURE_S)
    best = None
    for r, n, w, q, h in zip(rate.tolist(), replicas.tolist(), waiting.tolist(), queried.tolist(), hits.tolist(),
                             strict=True):
        if n > 0 and w > 0 and r > 0 and math.isfinite(r):
            net = 1.0 - h / q if q > 0 and math.isfinite(h) and 0 <= h <= q else 1.0  # computed, not cached
            best = r * net / n if best is None else max(best, r * net / n)
    return best


@dataclass(frozen=True)
class Need:
    """Replicas a pool needs (not rounded) and the numbers behind it."""

    replicas: float
    parts: Mapping[str, float]


BURST_COLD_STARTS = 3.0  # the prefill pool stands ready for the largest burst seen within this many cold starts
BURST_BUCKET_S = 10.0  # a burst is a 10 s bucket's prompt rate (the history's middle tier)


def burst_prompt_rate(pool: HistoryView, now: float, lookback: float) -> float:
    """The highest prompt tokens/s any 10 s bucket saw within `lookback` (0 when none).

    A burst that comes and goes within a cold start cannot be answered by scaling: replicas asked for
    when it starts serve after it ends, while its prompts wait and miss the TTFT target. So the prefill
    pool keeps the capacity for the bursts it saw lately, as standing headroom."""
    _, rate = pool.series("prompt_rate", now, max(lookback, BURST_BUCKET_S))
    finite = rate[np.isfinite(rate)]
    return float(finite.max()) if finite.size else 0.0


def prefill_need(load: Load, snap: Snapshot | None, config: ScalerConfig, per_replica_tps: float,
                 hit_ratio: float | None = None, burst_tps: float = 0.0) -> Need:
    """Prompt tokens/s to compute against what a prefill replica computes at the TTFT-keeping utilization,
    plus the replicas that drain the queued prompts within a cold start (policy.backlog_replicas, at this
    pool's prefill rate).

    The rate is the window's or the recent burst's (`burst_tps`, burst_prompt_rate), whichever is higher."""
    prompt, _ = mean_prompt_tokens(load, snap)
    net = 1.0 - min(1.0, max(0.0, hit_ratio or 0.0))
    queued_tokens = ((load.waiting or 0.0) + (load.upstream or 0.0)) * (prompt or 0.0) * net
    rate = max(load.prompt_rate or 0.0, burst_tps) * net
    rho = prefill_utilization((prompt or 0.0) * net, per_replica_tps, config.target_ttft,
                              config.target_kv_utilization)
    flow = rate / (per_replica_tps * rho)
    at_rate = replace(snap, prefill_rate=per_replica_tps) if snap is not None else None
    backlog = backlog_replicas(queued_tokens, config, at_rate) or 0.0
    return Need(flow + backlog, {"prefill_tokens_per_s": rate, "prefill_capacity_tps": per_replica_tps,
                                 "prefix_hit_ratio": 1.0 - net, "prefill_burst_tokens_per_s": burst_tps * net,
                                 "prefill_utilization": rho, "prefill_need_flow": flow,
                                 "prefill_need_backlog": backlog,
                                 "prefill_mean_prompt_tokens": prompt or 0.0})


def burst_load(pool: HistoryView, load: Load, now: float, lookback: float) -> Load:
    """`load` with its KV held and its queue at the highest any 10 s bucket within `lookback` saw them
    (held + queued), for the decode pool's standing headroom, as burst_prompt_rate is the prefill pool's."""
    _, kv = pool.series("kv_used", now, max(lookback, BURST_BUCKET_S))
    _, waiting = pool.series("waiting", now, max(lookback, BURST_BUCKET_S))
    prompt = (load.kv_used / load.running) if load.kv_used and load.running else 0.0  # tokens a request holds
    both = np.nan_to_num(kv) + np.nan_to_num(waiting) * prompt
    if not both.size or not float(both.max()) > (load.kv_used or 0.0) + (load.waiting or 0.0) * prompt:
        return load
    i = int(np.argmax(both))
    return replace(load, kv_used=float(np.nan_to_num(kv[i])), waiting=float(np.nan_to_num(waiting[i])))


def decode_need(load: Load, snap: Snapshot | None, config: ScalerConfig, burst: Load | None = None) -> Need:
    """The configured policy on the decode pool (KV tokens for `tokens`), on the window or on the recent
    burst (`burst`, burst_load), whichever asks more."""
    d = demand(load, config, snap)
    if burst is not None:
        b = demand(burst, config, snap)
        d = b if b.desired > d.desired else d
    return Need(d.desired, {"decode_demand": d.demand, "decode_capacity_per_replica": d.per_replica,
                            "decode_need_policy": d.desired})


def split_ratio(p_need: float, d_need: float, config: ScalerConfig) -> tuple[int, int]:
    """(prefill, decode) replicas from the two needs under the configured ratio mode."""
    if config.ratio == "fixed":
        r = config.prefill_decode_ratio
        assert r is not None  # the config's rules
        d = ceil_replicas(max(d_need, p_need / r))
        return ceil_replicas(r * d), d
    p, d = ceil_replicas(p_need), ceil_replicas(d_need)
    if config.ratio == "bounded":
        hi, lo = config.max_prefill_decode_ratio, config.min_prefill_decode_ratio
        if hi is not None and p > hi * d:
            d = ceil_replicas(p / hi)
        if lo is not None and p < lo * d:
            p = ceil_replicas(lo * d)
    return p, d


def _pool(history: HistoryView, role: str) -> HistoryView | None:
    pool = getattr(history, "pool", None)
    return pool(role) if pool is not None else None


def _window_need(pool: HistoryView | None, now: float, config: ScalerConfig, which: str,
                 tps: float | None) -> tuple[Need, Need]:
    """The pool's need over the stable and the panic window (zero for a pool nobody reports for)."""
    if pool is None:
        zero = Need(0.0, {})
        return zero, zero
    snap = pool.snapshot(now, config.stale_after)
    ready = snap.fresh if snap is not None else 0
    # the pending guard: replicas loading are supply that is coming; no more while they load
    held = float(snap.fresh + snap.stale + snap.loading) if snap is not None and snap.loading > 0 else math.inf
    burst = burst_prompt_rate(pool, now, BURST_COLD_STARTS * cold_start_of(config, snap)) if which == "prefill" else 0.0
    out = []
    for seconds, panic in ((config.stable_window, False), (config.panic_window, True)):
        load = pool.window(now, seconds)
        if which == "prefill":
            assert tps is not None
            need = prefill_need(load, snap, config, tps, load.prefix_hit_ratio, burst)
            # the guard holds the queue's part only: the prompts arriving are demand whatever is loading
            cap = max(held, need.parts["prefill_need_flow"])
            latency = from_window(load, seconds, ready, replace(config, target_itl=None), panic=panic)
        else:
            lookback = BURST_COLD_STARTS * cold_start_of(config, snap)
            need = decode_need(load, snap, config, burst_load(pool, load, now, lookback))
            latency = from_window(load, seconds, ready, replace(config, target_ttft=None), panic=panic)
            cap = held
        if latency is not None and latency.desired > need.replicas:
            need = Need(latency.desired, {**need.parts, f"{which}_latency_desired": latency.desired})
        if need.replicas > cap:
            need = Need(cap, {**need.parts, f"{which}_pending_guard": cap})
        out.append(need)
    return out[0], out[1]


def _panicked(stable: float, panic: float, config: ScalerConfig) -> float:
    """Knative's rule without its memory: the panic window rules when it asks panicThreshold x the stable."""
    return panic if panic >= config.panic_threshold * max(stable, 1e-9) and panic > stable else stable


def pd_split(history: HistoryView, config: ScalerConfig, now: float) -> tuple[dict[str, int], dict[str, float]]:
    """The model's (prefill, decode) counts at `now`, and the numbers behind them."""
    prefill, decode = _pool(history, "prefill"), _pool(history, "decode")
    if prefill is None and decode is None:
        raise NoData(f"no replica of model {history.model!r} reports role prefill or decode yet")
    tps = config.prefill_tokens_per_second
    if tps is None and prefill is not None:
        tps = measured_prefill_tps(prefill, now)
    if tps is None:
        raise NoData(f"model {history.model!r}: no measured prefill throughput yet (no prefill replica was "
                     "saturated in the last hour): set prefillTokensPerSecond")
    try:
        p_stable, p_panic = _window_need(prefill, now, config, "prefill", tps)
        d_stable, d_panic = _window_need(decode, now, config, "decode", None)
    except NoSignal as e:
        raise NoData(str(e)) from None
    p_need = _panicked(p_stable.replicas, p_panic.replicas, config)
    d_need = _panicked(d_stable.replicas, d_panic.replicas, config)
    p, d = split_ratio(p_need, d_need, config)
    details = {**p_stable.parts, **d_stable.parts, "prefill_need": p_need, "decode_need": d_need,
               "pool_prefill": float(p), "pool_decode": float(d)}
    return {"prefill": p, "decode": d}, details


# ---- variants by cost ----------------------------------------------------------------------------


@dataclass(frozen=True)
class VariantLimit:
    """What one variant may be given now: at most `most` replicas; `stuck`: pods pending past the timeout."""

    most: float  # math.inf: no limit
    stuck: bool = False


def variant_limits(variants: Sequence[Variant], workloads: Mapping[str, WorkloadState | None], now: float,
                   pending_timeout: float, *, shortfall: bool = True) -> dict[str, VariantLimit]:
    """Each variant's cap: its `maxReplicas`, its ScaledObject's max, and while stuck (pods unscheduled for
    `pending_timeout`) the replicas it has scheduled (`shortfall=False`: as if the GPUs were there)."""
    out = {}
    for v in variants:
        most: float = math.inf if v.max_replicas is None else v.max_replicas
        w = workloads.get(v.name)
        stuck = False
        if w is not None:
            most = min(most, w.max_replicas)
            since = w.unscheduled_since
            if w.unscheduled > 0 and since is not None and now - since >= pending_timeout:
                stuck = True
                if shortfall:
                    most = min(most, max(0, w.current_replicas - w.unscheduled))
        out[v.name] = VariantLimit(most, stuck)
    return out


Amount = float | Sequence[float]


def _vec(x: Amount) -> tuple[float, ...]:
    return (float(x),) if isinstance(x, (int, float)) else tuple(float(v) for v in x)


def cheapest_mix(need: Amount, variants: Sequence[Variant], per_replica: Mapping[str, Amount],
                 limits: Mapping[str, VariantLimit]) -> tuple[dict[str, int], bool]:
    """Counts per variant covering `need` at the least price per hour; (counts, covered).

    `need` and each variant's `per_replica` are amounts of one or more resources (KV tokens, and the share
    of the load it carries within the SLO where the variants give rates); a mix covers every one. Searches,
    variant by variant in order of price per unit of what a replica covers of the resource that binds it
    (its cost per unit of SLO-meeting capacity), the counts that just cover what is left and one fewer
    (4 variants: at most 16 candidates); ties go to more replicas of the more preferred variants (listed
    first). So the cheapest per unit carries the load up to its cap and only the rounding of its last
    replica may go to the next; a mix without the cheapest per unit is tried only where it needs one.
    Nothing covers it: every variant at its cap."""
    want = _vec(need)
    per = {name: _vec(v) for name, v in per_replica.items()}
    if all(x <= 0 for x in want):
        return {v.name: 0 for v in variants}, True

    def unit_price(i: int) -> float:
        """Price per unit of what one replica covers on the resource that binds it (the share of `need`)."""
        covers = min((c / w for c, w in zip(per[variants[i].name], want, strict=True) if w > 0), default=math.inf)
        return variants[i].price_per_hour / covers if covers > 0 else math.inf

    order = sorted(range(len(variants)), key=lambda i: (unit_price(i), i))
    best: tuple[float, tuple[int, ...]] | None = None
    best_counts: dict[str, int] | None = None

    def options(i: int, rest: tuple[float, ...]) -> list[int]:
        v = variants[i]
        top = limits[v.name].most
        full = max((ceil_replicas(r / c) if c > 0 else (math.inf if r > 1e-9 else 0)
                    for r, c in zip(rest, per[v.name], strict=True)), default=0)
        cands = {min(full, top), min(max(full - 1, 0), top)}
        return sorted((int(c) for c in cands if math.isfinite(c)), reverse=True)

    def walk(k: int, rest: tuple[float, ...], chosen: dict[str, int]) -> None:
        nonlocal best, best_counts
        done = all(r <= 1e-9 for r in rest)
        if done or k == len(order):
            if not done:
                return
            counts = {v.name: chosen.get(v.name, 0) for v in variants}
            cost = sum(counts[v.name] * v.price_per_hour for v in variants)
            key = (round(cost, 9), tuple(-counts[v.name] for v in variants))
            if best is None or key < best:
                best, best_counts = key, counts
            return
        i = order[k]
        name = variants[i].name
        for n in options(i, rest):
            walk(k + 1, tuple(r - n * c for r, c in zip(rest, per[name], strict=True)), {**chosen, name: n})

    walk(0, want, {})
    if best_counts is None:
        capped = {v.name: int(min(limits[v.name].most, 2**31 - 1)) for v in variants}
        return capped, False
    return best_counts, True


def _cost(counts: Mapping[str, int], price: Mapping[str, float]) -> float:
    return sum(n * price[name] for name, n in counts.items())


def _covered(need: tuple[float, ...], counts: Mapping[str, int], per: Mapping[str, Amount]) -> tuple[float, ...]:
    """What `need` leaves uncovered by `counts` (never below zero)."""
    return tuple(max(0.0, w - sum(n * _vec(per[name])[d] for name, n in counts.items()))
                 for d, w in enumerate(need))


def anchored_mix(need: Amount, variants: Sequence[Variant], per_replica: Mapping[str, Amount],
                 limits: Mapping[str, VariantLimit], current: Mapping[str, int]) -> dict[str, int] | None:
    """The cheapest mix that only shrinks the current counts (where they cover `need`) or only grows them
    (where they do not): no variant asked to grow while another is asked to shrink. None: none found.

    variant_split answers it instead of the cheapest mix unless the cheapest saves at least one replica
    of the cheapest variant. A swap costs a cold start on the growing variant while the HPA keeps the
    shrinking one for its scale-down window; near a rounding point the cheapest mix flips between, say,
    3 H100s and 2 H100s + 1 A100 as the load moves, and each HPA keeping the larger of its recent counts
    paid for both (docs/pools.md). A swap that saves a replica's price or more is still made."""
    want = _vec(need)
    if any(current.get(v.name, 0) > limits[v.name].most for v in variants):
        return None
    rest = _covered(want, current, per_replica)
    if all(r <= 1e-9 for r in rest):
        down = {v.name: VariantLimit(min(limits[v.name].most, current.get(v.name, 0))) for v in variants}
        counts, covered = cheapest_mix(want, variants, per_replica, down)
        return counts if covered else dict(current)
    room = {v.name: VariantLimit(limits[v.name].most - current.get(v.name, 0)) for v in variants}
    more, covered = cheapest_mix(rest, variants, per_replica, room)
    return {v.name: current.get(v.name, 0) + more[v.name] for v in variants} if covered else None


def prompt_mean(load: Load, snap: Snapshot | None) -> float:
    """Mean prompt tokens computed per request, net of prefix-cache hits (0 when unknown)."""
    prompt, _ = mean_prompt_tokens(load, snap)
    return (prompt or 0.0) * (1.0 - min(1.0, max(0.0, load.prefix_hit_ratio or 0.0)))


def load_rates(load: Load, snap: Snapshot | None, config: ScalerConfig) -> tuple[float, float]:
    """(prompt tokens/s to compute, tokens/s to generate): what the model's replicas did over the window
    plus the queue's (waiting + upstream requests at the mean prompt and output) drained within the stable
    window, prompts net of prefix-cache hits."""
    queued = (load.waiting or 0.0) + (load.upstream or 0.0)
    net = 1.0 - min(1.0, max(0.0, load.prefix_hit_ratio or 0.0))
    prompt, _ = mean_prompt_tokens(load, snap)
    prompt_tps = ((load.prompt_rate or 0.0) + queued * (prompt or 0.0) / config.stable_window) * net
    out_tokens = (load.generation_rate / load.finished_rate if load.generation_rate and load.finished_rate
                  else 0.0)
    gen_tps = (load.generation_rate or 0.0) + queued * out_tokens / config.stable_window
    return prompt_tps, gen_tps


def replica_share(v: Variant, prompt_tps: float, gen_tps: float, mean_prompt: float,
                  config: ScalerConfig) -> float:
    """The share of the model's load one replica of `v` carries within the SLO (math.inf: unbounded).

    A unified replica computes prompts and generates in turns (chunked prefill), so carrying the whole load
    takes prompt_tps / (its prompt rate x the TTFT-keeping utilization) + gen_tps / (its generation rate at
    the ITL target x targetKVUtilization) replicas: the time each part takes, summed, as Dynamo's planner
    sums its prefill and decode loads for an aggregated engine (simulator/control/anchors/dynamo.py). A replica
    carries the inverse of that. A rate the table leaves out is not a constraint."""
    time = 0.0
    if v.prefill_tps is not None and prompt_tps > 0:
        rho = prefill_utilization(mean_prompt, v.prefill_tps, config.target_ttft, config.target_kv_utilization)
        time += prompt_tps / (v.prefill_tps * min(rho, config.target_kv_utilization))  # never planned fuller
    if v.decode_tps is not None and gen_tps > 0:
        time += gen_tps / (v.decode_tps * config.target_kv_utilization)
    return 1.0 / time if time > 0 else math.inf


def variant_split(history: HistoryView, config: ScalerConfig, workload: WorkloadState,
                  now: float) -> tuple[dict[str, int], dict[str, float]]:
    """Counts per variant at `now`: the tokens demand over all the model's replicas, to the cheapest mix."""
    snap = history.snapshot(now, config.stale_after)
    try:
        stable = tokens(history.window(now, config.stable_window), config, snap)
        panic = tokens(history.window(now, config.panic_window), config, snap)
    except NoSignal as e:
        raise NoData(str(e)) from None
    need = _panicked(stable.demand, panic.demand, config)
    workloads: dict[str, WorkloadState | None] = dict(workload.peers)
    workloads[config.variant] = workload
    limits = variant_limits(config.variants, workloads, now, config.pending_timeout)
    kv_per = {v.name: v.capacity * config.target_kv_utilization for v in config.variants}
    details: dict[str, float] = {}
    needs: list[float] = [need]
    per_replica: dict[str, Amount] = dict(kv_per)
    if any(v.prefill_tps is not None or v.decode_tps is not None for v in config.variants):
        # replica time: a unified replica computes prompts and generates in turns, so what it carries at the
        # SLO is a share of the model's whole load (replica_share), not a prompt and a generation capacity
        # covered each on its own (that planned the slower GPU as if it could do both at once)
        load = history.window(now, config.stable_window)
        prompt_tps, gen_tps = load_rates(load, snap, config)
        needs.append(1.0 if prompt_tps > 0 or gen_tps > 0 else 0.0)
        for v in config.variants:
            per_replica[v.name] = (kv_per[v.name], replica_share(v, prompt_tps, gen_tps, prompt_mean(load, snap),
                                                                 config))
        details["prefill_tokens_per_s"], details["decode_tokens_per_s"] = prompt_tps, gen_tps
        for v in config.variants:
            details[f"variant_{v.name}_share"] = _vec(per_replica[v.name])[1]
    if snap is not None and snap.loading > 0:  # the pending guard: replicas loading are supply that is coming
        have = [sum((w.current_replicas - w.unscheduled) * _vec(per_replica[name])[d]
                    for name, w in workloads.items() if w is not None and name in per_replica)
                for d in range(len(needs))]
        needs = [min(x, h) if 0 < h < math.inf else x for x, h in zip(needs, have, strict=True)]
    need = needs[0]
    counts, covered = cheapest_mix(needs, config.variants, per_replica, limits)
    if any(lim.stuck for lim in limits.values()):
        # A stuck variant keeps what it has, pending pods included, as far as the mix without the shortfall
        # would want them: they tell when capacity returns, and asking less would delete them and make it
        # look free again (then stuck again a pendingTimeout later). It is asked for no more.
        free = variant_limits(config.variants, workloads, now, config.pending_timeout, shortfall=False)
        wanted, _ = cheapest_mix(needs, config.variants, per_replica, free)
        for v in config.variants:
            w = workloads.get(v.name)
            if limits[v.name].stuck and w is not None:
                counts[v.name] = max(counts[v.name], min(w.current_replicas, wanted[v.name]))
    elif all(workloads.get(v.name) is not None for v in config.variants):
        current = {v.name: w.current_replicas for v in config.variants if (w := workloads.get(v.name)) is not None}
        kept = anchored_mix(needs, config.variants, per_replica, limits, current)
        price = {v.name: v.price_per_hour for v in config.variants}
        if kept is not None and kept != counts and (
                _cost(kept, price) < _cost(counts, price) + min(price.values()) - 1e-9):
            counts = kept
            details["variants_anchored"] = 1.0
    details.update({"demand": need, "variants_covered": float(covered),
                    "variants_price_per_hour": sum(counts[v.name] * v.price_per_hour for v in config.variants)})
    for v in config.variants:
        details[f"variant_{v.name}"] = float(counts[v.name])
        details[f"variant_{v.name}_stuck"] = float(limits[v.name].stuck)
    return counts, details


# ---- the decision --------------------------------------------------------------------------------


def split(history: HistoryView, config: ScalerConfig, workload: WorkloadState,
          now: float) -> tuple[dict[str, int], dict[str, float]]:
    """Every pool's count (by role, or by variant name) at `now`: the one split both answers come from."""
    if config.variants:
        return variant_split(history, config, workload, now)
    return pd_split(history, config, now)


def own_pool(config: ScalerConfig) -> str:
    return config.variant or config.role


def decide_pool(history: HistoryView, config: ScalerConfig, state: PolicyState, workload: WorkloadState,
                now: float) -> tuple[Decision, PolicyState]:
    """decide() for a pooled ScaledObject: its share of the model's split, within its own bounds.

    The state passes through unchanged (only `last_replicas` is recorded): the split has no memory,
    so the answer does not depend on which pod was asked before."""
    counts, details = split(history, config, workload, now)
    want = counts[own_pool(config)]
    lo = config.min_replicas if config.min_replicas is not None else workload.min_replicas
    hi = config.max_replicas if config.max_replicas is not None else workload.max_replicas
    count = min(max(want, lo), hi)
    details = {**details, "current": float(workload.current_replicas), "pool_share": float(want)}
    current = workload.current_replicas
    if count != want:
        reason = Reason.MIN_CLAMP if count > want else Reason.MAX_CLAMP
    else:
        reason = Reason.SCALE_UP if count > current else Reason.SCALE_DOWN if count < current else Reason.STEADY
    active = count > 0 or not config.scale_to_zero
    if config.advisory:
        held = Decision(current, Reason.ADVISORY_HOLD.value, active, {**details, "would_be_replicas": count},
                        would_be=Decision(count, reason.value, active, details))
        return held, replace(state, initialized=True, last_replicas=current, active=active)
    return Decision(count, reason.value, active, details), replace(state, initialized=True, last_replicas=count,
                                                                     active=active)


def with_peers(workload: WorkloadState, peers: Mapping[str, WorkloadState | None]) -> WorkloadState:
    """The workload with the other variants' states attached (those Kubernetes has answered for)."""
    known = tuple(sorted(((name, w) for name, w in peers.items() if w is not None), key=lambda p: p[0]))
    return replace(workload, peers=known)


__all__ = ["Need", "VariantLimit", "anchored_mix", "burst_load", "burst_prompt_rate", "cheapest_mix", "decide_pool",
           "load_rates", "measured_prefill_tps", "pd_split", "pooled", "prefill_need", "prefill_utilization",
           "replica_share", "split", "split_ratio", "variant_limits", "variant_split", "with_peers"]
