"""The backtests' `ours` is a ScaledObject the repository ships: the figures in the README and docs come from
deploy/examples/keda-2.18/llama-70b-h100-tp4*.yaml, not from a ScaledObject only the code knows."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from keda_llm.scaler.config import parse_metadata
from keda_llm.simulator.control.policies import ITL_TARGET_FRACTION, TTFT_TARGET_FRACTION, default_scaledobject
from keda_llm.simulator.control.scaledobject import KedaSettings, load_scaledobject
from keda_llm.simulator.hardware.presets import get_preset

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "deploy" / "examples" / "keda-2.18"
WIRING = ("prometheus_address", "activation_query")  # where the cluster's Prometheus and gateway metric live
SPEC = ("polling_interval_s", "cooldown_period_s", "initial_cooldown_period_s", "min_replicas", "max_replicas",
        "idle_replicas", "fallback", "behavior")


def _policy(so: KedaSettings) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the spec KEDA and the HPA read, the trigger's parsed metadata less the cluster wiring)."""
    meta = dataclasses.asdict(parse_metadata(so.triggers[0].metadata))
    for key in WIRING:
        meta.pop(key)
    return {f: getattr(so, f) for f in SPEC} | {"triggers": [(t.type, t.name) for t in so.triggers]}, meta


def test_the_table_runs_the_shipped_scaledobject() -> None:
    p = get_preset("llama-3.1-70b/h100-tp4")
    # what scripts/simulator_table.py runs as `ours` (run_policies: build_controller's default, the backtest's SLO)
    ours = default_scaledobject(p.model.name, max_replicas=64, cold_start_s=p.cold_start("typical").quantile(0.9),
                                slo_ttft_s=2.0 * TTFT_TARGET_FRACTION, slo_itl_s=0.1 * ITL_TARGET_FRACTION)
    assert _policy(load_scaledobject(EXAMPLES / "llama-70b-h100-tp4.yaml")) == _policy(ours)


def test_the_week_runs_the_same_shipped_scaledobject() -> None:
    # one default for chat and code traffic: the week's `ours` is the table's file, with the short-answer
    # tightening of the ITL target at its default (no per-traffic sibling)
    sys.path.insert(0, str(ROOT / "scripts"))
    import week_table

    assert week_table.SHIPPED == EXAMPLES / "llama-70b-h100-tp4.yaml"
    _, meta = _policy(load_scaledobject(week_table.SHIPPED))
    assert meta["target_itl"] == 0.05 and meta["short_output_tokens"] == 43.0 and meta["mode"] == "reactive"
    assert meta["target_ttft"] == 1.0
    assert not (EXAMPLES / "llama-70b-h100-tp4-code.yaml").exists()
