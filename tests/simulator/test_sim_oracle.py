"""The oracle's schedule, run through the simulator, meets the SLO; static provisioning is its peak."""

from __future__ import annotations

import numpy as np
from sim_helpers import config, fixed_cold_start

from keda_llm.simulator.controllers import ScheduleController
from keda_llm.simulator.engine import SimResult, Simulation
from keda_llm.simulator.oracle import first_counts, idle_ttft, plan_oracle, pods_from_counts, sustainable_batch
from keda_llm.simulator.perf import ConstantPerf
from keda_llm.simulator.report import Slo, met_mask
from keda_llm.simulator.traces import Trace

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
    assert plan.met_target
    assert plan.result is runs[-1]  # the oracle's row is its own simulation, not an estimate
    tab = plan.result.request_table()
    assert plan.feasible.all()  # a 10-token prefill (20 ms) and a lone decode (20 ms) fit the targets
    attained = met_mask(tab.ttft_s, tab.tpot_s, SLO).mean()
    assert attained >= 0.99
    assert plan.result.dropped_timeout == [] and plan.result.dropped_rejected == []
    # every iteration is 20 ms <= 50 ms, so the ITL target only binds through the batch limit (4): the
    # sustainable batch is the batch limit
    assert sustainable_batch(cfg.perf, cfg.replica, 20.0, SLO.itl_s) == 4
    # The busy phase (19/s x 0.103 s of work each = 1.96 replicas of work) starts at 2 replicas in most
    # buckets, with no headroom: queues grow, the check fails, and the refinement adds replicas.
    first = first_counts(tr, cfg.perf, cfg.replica, SLO, 60.0, 15)
    assert (first[5:10] == 2).sum() >= 3
    assert plan.rounds >= 2
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
