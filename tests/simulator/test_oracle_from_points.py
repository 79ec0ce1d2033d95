"""The oracle planned on from the policies' schedules (simulator.report.frontier.oracle_from_points): a causal
policy meeting the target for fewer GPU-hours than the oracle's plan from scratch makes every ratio to that
oracle flatter, so the frontier plans on from such a policy's schedule and keeps the cheaper plan, with its pods,
so that a table replaying them shows the figures the frontier reports."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest

from keda_llm.simulator.control.controllers import ScheduleController
from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.report.frontier import (
    Frontier,
    Point,
    oracle_from_points,
    oracle_pods,
    ready_counts,
    references,
)
from keda_llm.simulator.report.frontier_cache import PointCache, References
from keda_llm.simulator.report.summary import Slo, summarize
from keda_llm.simulator.run import Backtest, simulate
from keda_llm.simulator.workload.traces import Trace


@pytest.fixture(scope="module")
def case() -> tuple[Trace, Backtest, References]:
    rng = np.random.default_rng(3)
    n = 900
    # a quiet first half and a busy second: a schedule has buckets to trim and buckets to hold
    arrivals = np.sort(np.concatenate([rng.uniform(0, 300, n // 4), rng.uniform(300, 600, n - n // 4)]))
    tr = Trace("two-levels", arrivals, rng.integers(300, 2000, n).astype(np.int32),
               rng.integers(100, 500, n).astype(np.int32))
    bt = Backtest(get_preset("llama-3.1-8b/h100"), cold_start="fast", slo=Slo(ttft_s=1.0, itl_s=0.03))
    return tr, bt, references(tr, bt)


def _front(policy: str, knob: float, gpu_hours: float) -> Frontier:
    return Frontier(policy, "knob", knob, (Point(knob, 1.0, gpu_hours, 0.0),), target=0.99, cap_gpu_hours=None)


def test_ready_counts_take_each_buckets_most_and_hold_through_a_bucket_with_no_row() -> None:
    run = cast(Any, SimpleNamespace(timeline=SimpleNamespace(t=[-30.0, 0.0, 20.0, 50.0, 130.0, 170.0],
                                                             ready=[9, 1, 3, 2, 4, 1])))
    # the lead-in's row (t < 0) is not the trace's; bucket 1 has no row and holds bucket 0's last count
    assert ready_counts(run, 60.0, 4).tolist() == [3, 2, 4, 1]
    empty = cast(Any, SimpleNamespace(timeline=SimpleNamespace(t=[], ready=[])))
    assert ready_counts(empty, 60.0, 2).tolist() == [0, 0]


def test_a_policy_cheaper_than_the_oracle_is_planned_on_and_its_plan_replays_to_the_figures_kept(
        case: tuple[Trace, Backtest, References]) -> None:
    tr, bt, refs = case
    assert refs.oracle_pods == () and not refs.oracle_settled
    # as if the plan from scratch had stopped far above what a causal policy spends
    dear = replace(refs, oracle_gpu_hours=refs.oracle_gpu_hours * 50)
    lines: list[str] = []
    new = oracle_from_points(tr, bt, dear, [_front("concurrency", 4.0, refs.oracle_gpu_hours * 2)],
                             cap_gpu_hours=None, log=lines.append)
    assert new is not None
    assert any("planned on from concurrency at 4" in line for line in lines)
    assert new.oracle_gpu_hours < dear.oracle_gpu_hours
    assert new.scratch_gpu_hours == dear.oracle_gpu_hours and new.oracle_settled
    assert "Planned on from the schedule of concurrency at 4 (seed 0)" in new.oracle_status
    assert "target met" in new.oracle_status
    # the kept pods are the plan: replayed, they give the attainment and GPU-hours the references say
    pods = oracle_pods(new)
    assert pods
    s = summarize(simulate(tr, bt, ScheduleController("oracle", pods), bt.resolved_mode(tr)), bt.slo)
    assert s.gpu_hours == pytest.approx(new.oracle_gpu_hours, rel=1e-9)
    assert s.slo_attainment == pytest.approx(new.oracle_attainment, abs=1e-12)
    assert s.slo_attainment >= new.target_over_all - 1e-9
    # static (the cap) and the bound are the plan from scratch's: the sweeps they stopped do not move
    assert (new.static_gpu_hours, new.bound_gpu_hours) == (refs.static_gpu_hours, refs.bound_gpu_hours)
    assert new.oracle_starts == ("concurrency@4.0",)
    # settled, and its start tried: run again, nothing is planned
    again: list[str] = []
    assert oracle_from_points(tr, bt, new, [_front("concurrency", 4.0, refs.oracle_gpu_hours * 2)],
                              cap_gpu_hours=None, log=again.append) is None
    assert again == []


def test_a_start_that_saves_nothing_is_recorded_and_not_tried_again(case: tuple[Trace, Backtest, References]) -> None:
    tr, bt, refs = case
    # a point as dear as static: within the margin of an oracle said to cost as much, but its plan is no cheaper
    # than that oracle, so the references change only in the start they now list
    level = replace(refs, oracle_gpu_hours=refs.static_gpu_hours)
    lines: list[str] = []
    fronts = [_front("gpu", 80.0, refs.static_gpu_hours * 1.05)]
    out = oracle_from_points(tr, bt, level, fronts, cap_gpu_hours=None, log=lines.append)
    assert len(lines) == 1 and "planned on from gpu at 80" in lines[0]
    assert out is not None and out.oracle_starts == ("gpu@80.0",)
    assert replace(out, oracle_starts=(), cpu_s=level.cpu_s) == level
    assert oracle_from_points(tr, bt, out, fronts, cap_gpu_hours=None, log=lines.append) is None
    assert len(lines) == 1


def test_no_plan_where_no_policy_meets_the_target_for_less(case: tuple[Trace, Backtest, References]) -> None:
    tr, bt, refs = case
    lines: list[str] = []
    dearer = _front("concurrency", 4.0, refs.oracle_gpu_hours * 1.2)  # beyond the margin (10%)
    missing = Frontier("queue", "knob", 5.0, (Point(5.0, 0.9, refs.oracle_gpu_hours / 2, 0.0),), target=0.99,
                       cap_gpu_hours=None)
    over_cap = _front("gpu", 80.0, refs.oracle_gpu_hours / 2)
    assert oracle_from_points(tr, bt, refs, [dearer, missing], cap_gpu_hours=None,
                              log=lines.append) is None
    assert oracle_from_points(tr, bt, refs, [over_cap], cap_gpu_hours=refs.oracle_gpu_hours / 4,
                              log=lines.append) is None
    assert lines == []


def test_the_store_keeps_the_pods_and_reads_entries_written_before_they_were_kept(
        case: tuple[Trace, Backtest, References], tmp_path: Any) -> None:
    tr, bt, refs = case
    cache = PointCache(tmp_path, tr, bt)
    planned = replace(refs, oracle_pods=((0.0, 60.0, 0.0), (30.0, 120.0, 12.5)), oracle_settled=True,
                      scratch_gpu_hours=9.0)
    cache.put_references(bt.oracle_target, planned)
    assert cache.get_references(bt.oracle_target) == planned
    # an entry of the format before: no pods, not settled, the plan from scratch
    path = next((tmp_path / "references").iterdir())
    text = path.read_text()
    data = json.loads(text)
    for k in ("oracle_pods", "oracle_settled", "scratch_gpu_hours"):
        data.pop(k)
    path.write_text(json.dumps(data))
    old = cache.get_references(bt.oracle_target)
    assert old is not None and old.oracle_pods == () and oracle_pods(old) is None and not old.oracle_settled
