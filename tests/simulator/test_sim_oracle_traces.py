"""On every shipped trace (its first 20 minutes, as `scripts/simulator_table.py --quick` cuts them; the Azure
2024 week from minute 600, the docs' window) the oracle meets its target or says why not, its row is a
simulation that reaches what it claims, and the lower bound is at or below its GPU-hours.

The full traces: `python scripts/simulator_table.py --oracle-check` (opt-in, minutes)."""

from __future__ import annotations

import numpy as np
import pytest

from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.report.summary import Slo, met_mask, summarize
from keda_llm.simulator.run import Backtest, run_policies
from keda_llm.simulator.workload.traces import load_shipped

SLO = Slo(ttft_s=2.0, itl_s=0.1)
PRESET = "llama-3.1-70b/h100-tp4"
QUICK_S = 1200.0
CASES = {
    "azure2023-code": None,
    "azure2023-conv": None,
    "mooncake-conv": None,
    "azure2024-code": (600 * 60.0, 960 * 60.0),
    "burstgpt-week1": None,
}


@pytest.mark.parametrize("name", list(CASES))
def test_oracle_meets_its_target_or_says_why_and_the_bound_is_below(name: str) -> None:
    tr = load_shipped(name)
    window = CASES[name]
    if window is not None:
        tr = tr.window(*window)
    tr = tr.window(0.0, QUICK_S)
    bt = Backtest(get_preset(PRESET), cold_start="typical", slo=SLO)
    results, oracle = run_policies(tr, bt, ["oracle"])
    assert oracle is not None and oracle.bound is not None
    status = oracle.status()
    if oracle.met_target:
        assert oracle.attainment >= oracle.target - 1e-9 and "target met" in status
    else:
        assert oracle.reason and oracle.reason in status and "NOT met" in status
    # the row is the kept schedule's own simulation and reaches the attainment the plan reports
    tab = results[0].request_table()
    ok = met_mask(tab.ttft_s, tab.tpot_s, SLO)
    f = oracle.feasible
    assert abs(float(np.sum((ok & f) * tab.weight) / np.sum(f * tab.weight)) - oracle.attainment) < 1e-9
    gpu_h = summarize(results[0], SLO).gpu_hours
    assert 0 < oracle.bound.gpu_hours <= gpu_h
