"""The oracle's schedule, run through the simulator, meets its target or says why not; static provisioning is
its peak; the lower bound on GPU-hours is below it and, on small traces, equal to what a hand count gives."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from sim_helpers import config, fixed_cold_start

from keda_llm.simulator.cluster.engine import SimConfig, SimResult, Simulation
from keda_llm.simulator.control.controllers import ScheduleController
from keda_llm.simulator.hardware.perf import ConstantPerf
from keda_llm.simulator.hardware.replica import ReplicaConfig
from keda_llm.simulator.report.oracle import (
    TRIM_STEPS,
    cold_start_table,
    counts_from_pods,
    first_counts,
    idle_ttft,
    lower_bound,
    plan_oracle,
    planned_replica_seconds,
    pods_from_counts,
    sustainable_batch,
)
from keda_llm.simulator.report.summary import Slo, met_mask
from keda_llm.simulator.workload.traces import Trace

SLO = Slo(ttft_s=0.5, itl_s=0.05)


def _bursty() -> Trace:
    """3 phases of 300 s: 2, 19 and 1 requests/s (Poisson, seeded); prompt 10, 20 output tokens."""
    rng = np.random.default_rng(3)
    parts = [np.sort(rng.uniform(a, a + 300, int(rate * 300))) for a, rate in ((0, 2), (300, 19), (600, 1))]
    arr = np.concatenate(parts)
    n = len(arr)
    return Trace("bursty", arr, np.full(n, 10, np.int32), np.full(n, 20, np.int32))


def test_oracle_schedule_meets_the_slo_in_the_simulator() -> None:
    tr = _bursty()
    cfg = config(iteration_s=0.02, cold=(5.0, 25.0))
    runs: list[SimResult] = []

    def run(ctl: ScheduleController) -> SimResult:
        runs.append(Simulation(tr, cfg, ctl).run())
        return runs[-1]

    plan = plan_oracle(tr, run, cfg.perf, cfg.replica, cfg.cold_start, SLO, bucket_s=60.0, target=0.99)
    assert plan.met_target and plan.reason == ""
    assert any(plan.result is r for r in runs)  # the oracle's row is its own simulation, not an estimate
    assert plan.rounds == len(runs) == plan.raise_runs + plan.trim_runs
    tab = plan.result.request_table()
    assert plan.feasible.all()  # a 10-token prefill (20 ms) and a lone decode (20 ms) fit the targets
    attained = met_mask(tab.ttft_s, tab.tpot_s, SLO).mean()
    assert attained >= 0.99 and attained == plan.attainment
    assert "target met" in plan.status() and "100.0% of requests can meet it at all" in plan.status()
    # the trim keeps nothing that costs more than what the raise ended with
    assert plan.result.gpu_seconds <= runs[plan.raise_runs - 1].gpu_seconds + 1e-9
    assert plan.bound is not None and plan.bound.gpu_hours <= plan.result.gpu_seconds / 3600
    assert plan.result.dropped_timeout == [] and plan.result.dropped_rejected == []
    # every iteration is 20 ms <= 50 ms, so the ITL target only binds through the batch limit (4): the
    # sustainable batch is the batch limit
    assert sustainable_batch(cfg.perf, cfg.replica, 20.0, SLO.itl_s) == 4
    # The busy phase (19/s x 0.103 s of work each = 1.96 replicas of work) starts at 2 replicas in most
    # buckets, with no headroom: queues grow, the check fails, and the refinement adds replicas.
    first = first_counts(tr, cfg.perf, cfg.replica, SLO, 60.0, 15)
    assert (first[5:10] == 2).sum() >= 3
    assert plan.raise_runs >= 2
    counts = plan.counts
    assert counts[5:10].min() >= 3 and counts[0:5].max() == 1
    # pods are created one (their own) cold start ahead of their bucket: none is still starting when needed
    for p in plan.pods:
        assert p.create_at == p.ready_at - p.cold_start_s


def test_first_counts_by_hand() -> None:
    # Work per request: prefill 10 tokens at (20 ms / 64-token budget) per token + 20 decode steps of 20 ms
    # shared by a batch of 4: 10 x 0.02/64 + 20 x 0.02/4 = 0.003125 + 0.1 = 0.103125 s.
    # 600 requests in bucket 0 (60 s): 61.875 s of work -> 2 replicas; 60 in bucket 1: 6.1875 s -> 1.
    perf = ConstantPerf(base_s=0.02)
    cfg = config(iteration_s=0.02).replica
    arr = np.concatenate([np.linspace(0, 59, 600), np.linspace(60, 119, 60)])
    tr = Trace("t", arr, np.full(660, 10, np.int32), np.full(660, 20, np.int32))
    assert first_counts(tr, perf, cfg, SLO, 60.0, 2).tolist() == [2, 1]


def test_idle_ttft_counts_every_chunk() -> None:
    # budget 64 tokens: a 150-token prompt takes 3 iterations (64, 64, 22) of 20 ms each
    perf = ConstantPerf(base_s=0.02)
    cfg = config(iteration_s=0.02).replica
    assert idle_ttft(perf, cfg, np.array([150, 64, 1])).tolist() == [0.06, 0.02, 0.02]


def test_pods_bridge_gaps_shorter_than_a_cold_start() -> None:
    # counts per 60 s bucket: slot 0 needed everywhere but bucket 2 (a 60 s gap < 100 s cold start:
    # bridged, one pod); slot 1 in buckets 1 and 5 (a gap of 180 s > 100 s: two pods).
    cold = fixed_cold_start(20.0, 80.0)
    pods = pods_from_counts(np.array([1, 2, 0, 1, 1, 2]), 60.0, cold, np.random.default_rng(0))
    got = sorted((p.ready_at, p.remove_at, p.cold_start_s) for p in pods)
    assert got == [(0.0, 360.0, 0.0), (60.0, 120.0, 100.0), (300.0, 360.0, 100.0)]


def _steady(rate: float, seconds: float, prompt: int = 10, output: int = 20, seed: int = 5) -> Trace:
    rng = np.random.default_rng(seed)
    arr = np.sort(rng.uniform(0, seconds, int(rate * seconds)))
    n = len(arr)
    return Trace("steady", arr, np.full(n, prompt, np.int32), np.full(n, output, np.int32))


def _planner(tr: Trace, cfg: SimConfig) -> tuple[list[SimResult], RunFn]:
    runs: list[SimResult] = []

    def run(ctl: ScheduleController) -> SimResult:
        runs.append(Simulation(tr, cfg, ctl).run())
        return runs[-1]

    return runs, run


RunFn = Callable[[ScheduleController], SimResult]


def test_lower_bound_by_hand_work_only() -> None:
    # ConstantPerf 20 ms per iteration, budget 64 tokens: the peak is 20 ms / 64 = 0.3125 ms per token. Each
    # request brings 10 prompt + 19 decode tokens (the first output token comes with the prefill) = 9.0625 ms.
    # No request holds KV for a whole second (latest first token 0.5 s, earliest finish 10 x 0.3125 ms +
    # 19 x 20 ms = 0.383 s), so there is no KV floor: the bound is the work, all of it (target 1).
    cfg = config(iteration_s=0.02)
    tr = _steady(2.0, 300.0)
    b = lower_bound(tr, cfg.perf, cfg.replica, SLO, target=1.0, gpus_per_replica=2)
    assert b.seconds_per_token == 0.02 / 64
    assert b.counted == len(tr)
    assert abs(b.replica_seconds - len(tr) * 29 * 0.02 / 64) < 1e-9
    assert abs(b.gpu_hours - 2 * b.replica_seconds / 3600) < 1e-12
    assert b.kv_floor_replica_s == 0.0
    # target 99%: the 1% of requests with the most work are left out (here all equal: 1% of them)
    b99 = lower_bound(tr, cfg.perf, cfg.replica, SLO, target=0.99)
    assert b99.counted == len(tr) - len(tr) // 100


def test_lower_bound_by_hand_kv_floor() -> None:
    # KV capacity 1,600 tokens. Two requests at t=0, 1,000 prompt tokens and 101 output tokens each: each holds
    # its KV from the latest first token (0.5 s) to its earliest finish (1,000 x 0.3125 ms + 100 x 20 ms =
    # 2.3125 s), so slot [1 s, 2 s) holds 2,000 tokens: 2 replicas. That capacity works off both requests'
    # work (1,100 x 0.3125 ms each, due by 0.5 + 100 x 0.05 = 5.5 s), so nothing is added: 2 replica-seconds.
    perf = ConstantPerf(base_s=0.02)
    rc = ReplicaConfig(max_num_seqs=4, max_num_batched_tokens=64, kv_blocks=100, block_size=16,
                       enable_prefix_caching=False)
    tr = Trace("kv", np.array([0.0, 0.0]), np.full(2, 1000, np.int32), np.full(2, 101, np.int32))
    b = lower_bound(tr, perf, rc, SLO, target=0.99)
    assert b.counted == 2
    assert b.kv_floor_replica_s == 2.0 and b.replica_seconds == 2.0
    assert b.kv_floor.tolist() == [2]
    # one request alone: 1,000 tokens of 1,600 -> 1 replica for that second, and its work fits in it
    one = lower_bound(tr.take(np.array([0], dtype=np.int64)), perf, rc, SLO)
    assert one.replica_seconds == 1.0


def test_lower_bound_counts_a_shared_prefix_once() -> None:
    # two requests with the same two 512-token blocks: the second computes only its last token
    perf = ConstantPerf(base_s=0.02)
    rc = ReplicaConfig(max_num_seqs=4, max_num_batched_tokens=64, kv_blocks=10_000, block_size=16)
    offs = np.array([0, 2, 4], dtype=np.int64)
    vals = np.array([7, 8, 7, 8], dtype=np.int64)
    tr = Trace("p", np.array([0.0, 10.0]), np.full(2, 1024, np.int32), np.full(2, 1, np.int32), offs, vals)
    b = lower_bound(tr, perf, rc, Slo(ttft_s=20.0, itl_s=0.05), target=1.0)
    assert abs(b.work_replica_s - (1024 + 1) * 0.02 / 64) < 1e-12


def test_infeasible_share_lowers_the_target_and_says_why() -> None:
    # a fifth of the prompts take 2,000 tokens: 32 chunks of 20 ms = 0.64 s alone > the 0.5 s TTFT target
    cfg = config(iteration_s=0.02)
    base = _steady(2.0, 300.0)
    prompt = base.prompt_tokens.copy()
    prompt[::5] = 2000
    tr = Trace("long", base.arrival_s, prompt, base.output_tokens)
    _, run = _planner(tr, cfg)
    plan = plan_oracle(tr, run, cfg.perf, cfg.replica, cfg.cold_start, SLO, bucket_s=60.0)
    assert abs(plan.feasible_share - 0.8) < 0.01
    assert plan.met_target
    assert abs(plan.target_over_all - 0.99 * plan.feasible_share) < 1e-12
    status = plan.status()
    assert "target met" in status and "so the target over all requests is" in status
    tab = plan.result.request_table()
    met = met_mask(tab.ttft_s, tab.tpot_s, SLO)
    assert met.mean() >= plan.target_over_all - 1e-9


def test_target_infeasible_under_the_replica_cap_is_reported() -> None:
    # 19 requests/s need about 3 replicas of 4 slots; one is all it may have
    cfg = config(iteration_s=0.02)
    tr = _steady(19.0, 180.0)
    _, run = _planner(tr, cfg)
    plan = plan_oracle(tr, run, cfg.perf, cfg.replica, cfg.cold_start, SLO, bucket_s=60.0, max_replicas=1)
    assert not plan.met_target
    assert "max_replicas" in plan.reason and "NOT met" in plan.status()
    assert plan.attainment < 0.99 and plan.trim_runs == 0
    assert plan.counts.tolist() == [1, 1, 1]


def test_run_budget_is_reported() -> None:
    cfg = config(iteration_s=0.02)
    tr = _steady(19.0, 180.0)
    runs, run = _planner(tr, cfg)
    plan = plan_oracle(tr, run, cfg.perf, cfg.replica, cfg.cold_start, SLO, bucket_s=60.0, max_runs=1)
    assert len(runs) == 1 and not plan.met_target and "budget of 1 simulations" in plan.reason


def test_oracle_meets_a_steady_load_with_the_replicas_a_hand_count_gives() -> None:
    # 19 requests/s, each 21 iterations of 20 ms in a batch of at most 4: one replica serves at most
    # 4 / 0.42 s = 9.5 requests/s, so 2 replicas are short and 3 suffice; the bound is far below
    cfg = config(iteration_s=0.02, cold=(5.0, 25.0))
    tr = _steady(19.0, 300.0)
    _, run = _planner(tr, cfg)
    plan = plan_oracle(tr, run, cfg.perf, cfg.replica, cfg.cold_start, SLO, bucket_s=60.0)
    assert plan.met_target and plan.attainment >= 0.99
    assert plan.counts.min() >= 3 and plan.counts.max() <= 4
    assert plan.bound is not None and plan.bound.gpu_hours < plan.result.gpu_seconds / 3600


def test_planned_seconds_match_the_pods() -> None:
    cold = fixed_cold_start(20.0, 80.0)
    counts = np.array([1, 3, 0, 2, 2, 4, 1, 0, 0, 0, 0, 2])
    table = cold_start_table(cold, 3, 8, len(counts))
    pods = pods_from_counts(counts, 60.0, cold, np.random.default_rng(0), table)
    assert planned_replica_seconds(counts, 60.0, cold, table) == sum(p.remove_at - p.create_at for p in pods)


def test_counts_from_pods_give_the_schedule_back() -> None:
    """A stored schedule's counts make the same pods again (bridged gaps and each slot's drawn cold start
    included), so an earlier plan can be where a new one starts. Seeded random counts with runs and gaps of
    every length around the 100 s cold start."""
    cold = fixed_cold_start(20.0, 80.0)
    rng = np.random.default_rng(11)
    for case in range(300):
        n = int(rng.integers(1, 40))
        counts = np.where(rng.random(n) < 0.3, 0, rng.integers(0, 6, n)).astype(np.int64)
        table = cold_start_table(fixed_cold_start(20.0, 80.0), case, 6, n)
        pods = pods_from_counts(counts, 60.0, cold, np.random.default_rng(0), table)
        held = counts_from_pods(pods, 60.0, n)
        assert (held >= counts).all()  # a bridged gap counts as held
        assert pods_from_counts(held, 60.0, cold, np.random.default_rng(0), table) == pods
    # a pod kept to the end (remove_at inf) or ready off a bucket's edge counts from the bucket it is ready in
    from keda_llm.simulator.control.controllers import PodPlan

    got = counts_from_pods([PodPlan(0.0, float("inf"), 0.0), PodPlan(90.0, 150.0, 30.0)], 60.0, 4)
    assert got.tolist() == [1, 2, 2, 1]


def test_a_plan_continued_from_its_own_schedule_starts_met_and_ends_no_dearer() -> None:
    """`start`: the trim freezes buckets after a failed trial, so a plan from scratch can stop above what its
    own schedule can reach; continued from that schedule it spends one run confirming the target and can only
    go lower."""
    tr = _bursty()
    cfg = config(iteration_s=0.02, cold=(5.0, 25.0))
    _, run = _planner(tr, cfg)
    first = plan_oracle(tr, run, cfg.perf, cfg.replica, cfg.cold_start, SLO, bucket_s=60.0)
    assert first.met_target
    runs, run = _planner(tr, cfg)
    again = plan_oracle(tr, run, cfg.perf, cfg.replica, cfg.cold_start, SLO, bucket_s=60.0, start=first.pods,
                        trim_steps=(0.0,))
    assert again.met_target and again.raise_runs == 1
    assert runs[0].gpu_seconds == first.result.gpu_seconds  # its first run is the start's schedule, as it was
    assert again.result.gpu_seconds <= first.result.gpu_seconds + 1e-9
    assert (again.counts <= counts_from_pods(first.pods, 60.0, len(first.counts))).all()
    # a start that misses the target is raised like a plan from scratch
    short = plan_oracle(tr, _planner(tr, cfg)[1], cfg.perf, cfg.replica, cfg.cold_start, SLO, bucket_s=60.0,
                        start=[], trim_steps=TRIM_STEPS)
    assert short.met_target and short.raise_runs >= 2


def test_bad_trim_steps_are_refused() -> None:
    tr = _steady(2.0, 60.0)
    cfg = config(iteration_s=0.02)
    for steps in ((), (1.0,), (-0.1,)):
        with pytest.raises(ValueError, match="trim steps"):
            plan_oracle(tr, _planner(tr, cfg)[1], cfg.perf, cfg.replica, cfg.cold_start, SLO, trim_steps=steps)
