"""On every shipped trace the oracle meets its target, or says it cannot within the replica cap (never that its
budget of simulations ran out: that is a search stopped short, not a target out of reach); its row is a
simulation that reaches what it claims, and the lower bound is at or below its GPU-hours. The cases: each
trace's first 20 minutes, as `scripts/simulator_table.py --quick` cuts them; the Azure 2024 weeks from
minute 600, the docs' window (the conversation week's first 5 minutes of it); BurstGPT's busiest 6 hours
(1,642 requests; its first 20 minutes hold 31, its busiest 20 minutes 251).

The full traces: `python scripts/simulator_table.py --oracle-check` (opt-in, minutes)."""

from __future__ import annotations

import numpy as np
import pytest
from sim_helpers import busiest

from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.report.summary import Slo, met_mask, summarize
from keda_llm.simulator.run import Backtest, run_policies
from keda_llm.simulator.workload.traces import SHIPPED, load_shipped

SLO = Slo(ttft_s=2.0, itl_s=0.1)
PRESET = "llama-3.1-70b/h100-tp4"
QUICK_S = 1200.0
BUSIEST = "busiest"
#: per trace: where its case starts (seconds, or its busiest span) and how long it is
CASES: dict[str, tuple[float | str, float]] = {
    "azure2023-code": (0.0, QUICK_S),
    "azure2023-conv": (0.0, QUICK_S),
    "mooncake-conv": (0.0, QUICK_S),
    "azure2024-code": (600 * 60.0, QUICK_S),
    "azure2024-conv": (600 * 60.0, 300.0),  # 2,700 requests a minute: five of them are 14,000
    "burstgpt-week1": (BUSIEST, 6 * 3600.0),
}


def test_every_shipped_trace_is_a_case() -> None:
    assert set(CASES) == set(SHIPPED)


@pytest.mark.parametrize("name", list(CASES))
def test_oracle_meets_its_target_or_says_why_and_the_bound_is_below(name: str) -> None:
    start, span = CASES[name]
    tr = load_shipped(name)
    tr = busiest(tr, int(span // 60)) if isinstance(start, str) else tr.window(start, start + span)
    assert len(tr) > 1000, len(tr)  # traffic enough to plan for
    bt = Backtest(get_preset(PRESET), cold_start="typical", slo=SLO)
    results, oracle = run_policies(tr, bt, ["oracle"])
    assert oracle is not None and oracle.bound is not None
    status = oracle.status()
    if oracle.met_target:
        assert oracle.attainment >= oracle.target - 1e-9 and "target met" in status
    else:  # out of reach within the replica cap, which the status says; a search cut short is a failure
        assert "(max_replicas)" in oracle.reason and oracle.reason in status and "NOT met" in status
    # the row is the kept schedule's own simulation and reaches the attainment the plan reports
    tab = results[0].request_table()
    ok = met_mask(tab.ttft_s, tab.tpot_s, SLO)
    f = oracle.feasible
    assert abs(float(np.sum((ok & f) * tab.weight) / np.sum(f * tab.weight)) - oracle.attainment) < 1e-9
    gpu_h = summarize(results[0], SLO).gpu_hours
    assert 0 < oracle.bound.gpu_hours <= gpu_h
