"""scripts/preset_table.py: the floor and margin a target leaves, and the table's cells and pick."""

from __future__ import annotations

import re
import sys
from dataclasses import replace
from types import ModuleType

import pytest
from conftest import load_script

from keda_llm.simulator.hardware.perf import step_time
from keda_llm.simulator.hardware.presets import get_preset


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return load_script("preset_table")


def test_the_floor_is_one_decode_step_and_orders_the_presets_as_their_hardware(script: ModuleType) -> None:
    floors = {p: script.floor_s(p) for p in script.PRESETS}
    for p, f in floors.items():
        assert f == step_time(get_preset(p).perf(), 1.0, 1500.0, 1500.0)
    # an H100 reads 8B's weights faster than an A100 does; 70B on four H100s reads more than 8B on one
    assert floors["llama-3.1-8b/h100"] < floors["llama-3.1-8b/a100"] < floors["llama-3.1-70b/h100-tp4"]


def test_a_target_further_above_the_floor_holds_more_utilization_and_leaves_less_margin(script: ModuleType) -> None:
    u70, m70 = script.margin(0.018, 0.056, 0.1)
    u8, m8 = script.margin(0.011, 0.056, 0.1)
    assert u70 == pytest.approx(1 - 0.018 / 0.056) and m70 == pytest.approx((1 - 0.018 / 0.1) / u70)
    assert u8 > u70 and m8 < m70
    # at the SLO itself there is no margin left; under the floor the target holds nothing
    assert script.margin(0.018, 0.1, 0.1)[1] == pytest.approx(1.0)
    assert script.margin(0.07, 0.056, 0.1) == (0.0, 0.0)


def _runs(script: ModuleType, cells: list[tuple[float, int, float, float]]) -> list:  # type: ignore[type-arg]
    return [script.Run("llama-3.1-8b/a100", "azure2023-conv", share, False, seed, 0.0, slo, gpu_h, 1.0)
            for share, seed, slo, gpu_h in cells]


def test_a_cell_is_the_worst_run_at_the_mean_cost_and_the_pick_the_cheapest_meeting_99(script: ModuleType) -> None:
    case = next(c for c in script.CASES if c.trace == "azure2023-conv")
    runs = _runs(script, [(0.0, 0, 0.999, 2.0),
                          (0.3, 0, 0.999, 3.0), (0.3, 1, 0.998, 3.2),  # meets, 1.55x
                          (0.5, 0, 0.995, 2.2), (0.5, 1, 0.991, 2.4),  # meets, 1.15x: the pick
                          (0.56, 0, 0.995, 2.0), (0.56, 1, 0.94, 3.0)])  # one run misses: not picked
    runs += [script.Run("llama-3.1-8b/a100", "azure2023-conv", 0.56, True, seed, 0.0, slo, 2.1, 1.0)
             for seed, slo in ((0, 0.992), (1, 0.995))]  # busy: its own column, not in the pick
    row = script.table(runs, ["llama-3.1-8b/a100"], [case], (0.3, 0.5, 0.56), 2, 1).splitlines()[-1]
    assert "| 99.90% at 2.00 GPU-h |" in row
    assert "| 99.80% / 1.55x | **99.10% / 1.15x** | 94.00% / 1.25x | 99.20% / 1.05x |" in row
    none = _runs(script, [(0.0, 0, 0.999, 2.0), (0.5, 0, 0.98, 2.2)])
    row = script.table(none, ["llama-3.1-8b/a100"], [case], (0.5,), 1, 1).splitlines()[-1]
    assert "**" not in row and row.endswith("| 98.00% / 1.10x | - |")


def test_the_busy_column_runs_the_shipped_scaledobject_with_itl_scaling_busy(script: ModuleType) -> None:
    from keda_llm.simulator.control.policies import ours_scaledobject
    from keda_llm.simulator.run import Backtest

    bt = Backtest(get_preset("llama-3.1-8b/a100"), cold_start="typical", slo=script.SLO, seed=0)
    so = script.busy_scaledobject(bt)
    shipped = ours_scaledobject(bt.preset.model.name, max_replicas=bt.max_replicas,
                                cold_start_s=bt.preset.cold_start("typical").quantile(0.9),
                                slo=(script.SLO.ttft_s, script.SLO.itl_s))
    assert so.triggers[0].metadata == {**shipped.triggers[0].metadata, "itlScaling": "busy"}
    assert so.behavior == shipped.behavior and so.min_replicas == shipped.min_replicas


def test_quick_runs_one_preset_end_to_end_and_writes_no_docs(script: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The script as regenerate_docs --quick runs it: the first 20 minutes of one trace, every column."""
    monkeypatch.setattr(sys, "argv", ["preset_table.py", "--quick", "--workers", "1"])
    written: list[str] = []
    monkeypatch.setattr(sys.modules["simulator_table"], "replace_block", lambda *a: written.append(a[1]))
    script.main()
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if line.startswith("| llama-3.1-8b/h100 |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    # preset, trace, floor, margin, the oracle, the reactive reactive, each share, the busy column
    assert len(cells) == 6 + len(script.SHARES) + 1
    assert "GPU-h" in cells[4]
    assert re.fullmatch(r"\d+\.\d\dx \(hold \d+ min, x[\d.]+\)|never: [\d.]+% at best \(hold \d+ min, x[\d.]+\)",
                        cells[5]), cells[5]
    assert all(re.fullmatch(r"(\*\*)?[\d.]+% / [\d.]+x(\*\*)?", c) for c in cells[6:]), cells[6:]
    assert not written


def test_the_cheapest_reactive_cell_says_the_cheapest_setting_or_the_best_it_reached(script: ModuleType) -> None:
    from keda_llm.simulator.report.reactive import ReactivePoint

    oracle = script.Run("llama-3.1-8b/h100", "azure2023-code", 0.0, False, 0, 0.0, 0.998, 2.0, 1.0,
                        ReactivePoint(2, 1.25, 0.9978, 3.02, 1.0), ReactivePoint(10, 1.25, 0.9989, 3.5, 1.0))
    assert script._reactive(oracle) == "1.51x (hold 2 min, x1.25)"
    never = replace(oracle, reactive=None, reactive_best=ReactivePoint(10, 1.0, 0.97631, 2.6, 1.0))
    assert script._reactive(never) == "never: 97.63% at best (hold 10 min, x1)"
    assert script._reactive(replace(oracle, reactive=None, reactive_best=None)) == "-"
