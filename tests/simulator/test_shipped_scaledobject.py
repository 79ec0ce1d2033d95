"""The backtests' `ours` is the ScaledObject the repository ships: the figures in the README and docs come from
deploy/examples/keda-2.18/llama-70b-h100-tp4.yaml, not from a ScaledObject only the code knows."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from keda_llm.scaler.config import parse_metadata
from keda_llm.simulator.control.scaledobject import load_scaledobject
from keda_llm.simulator.policies import ITL_TARGET_FRACTION, default_scaledobject
from keda_llm.simulator.presets import get_preset

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "deploy" / "examples" / "keda-2.18" / "llama-70b-h100-tp4.yaml"
WIRING = ("prometheus_address", "activation_query")  # where the cluster's Prometheus and gateway metric live


def test_the_backtests_run_the_shipped_scaledobject() -> None:
    p = get_preset("llama-3.1-70b/h100-tp4")
    # what scripts/simulator_table.py and scripts/week_table.py run as `ours` (run_policies' arguments)
    ours = default_scaledobject(p.model.name, max_replicas=64, cold_start_s=p.cold_start("typical").quantile(0.9),
                                slo_itl_s=0.1 * ITL_TARGET_FRACTION)
    shipped = load_scaledobject(SHIPPED)
    spec = ("polling_interval_s", "cooldown_period_s", "initial_cooldown_period_s", "min_replicas", "max_replicas",
            "idle_replicas", "fallback", "behavior")
    assert {f: getattr(shipped, f) for f in spec} == {f: getattr(ours, f) for f in spec}
    assert [(t.type, t.name) for t in shipped.triggers] == [(t.type, t.name) for t in ours.triggers]
    mine = dataclasses.asdict(parse_metadata(ours.triggers[0].metadata))
    theirs = dataclasses.asdict(parse_metadata(shipped.triggers[0].metadata))
    for key in WIRING:
        mine.pop(key)
        theirs.pop(key)
    assert theirs == mine
    assert theirs["target_itl"] == 0.025 and theirs["mode"] == "hybrid" and theirs["seasonality"] == "auto"
