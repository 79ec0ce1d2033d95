"""scripts/phase_table.py: the shifted traces are the docs table's, moved; the bar is judged on the phase's means."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest
from conftest import load_script


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return load_script("phase_table")


@pytest.mark.parametrize("trace", ["azure2023-conv", "azure2024-code"])
def test_a_shift_moves_every_arrival_of_the_docs_tables_trace(script: ModuleType, trace: str) -> None:
    case = next(c for c in script.CASES if c.trace == trace)
    at0, moved = script.load(case, True), script.load(case, True, 2.5)
    assert at0.lead is not None
    # the same requests 2.5 s later, but for the few the window's edges let in or out
    assert abs(len(moved) - len(at0)) <= 0.01 * len(at0)
    inside = at0.arrival_s < at0.arrival_s[-1] - 5.0
    later = at0.arrival_s[inside] + 2.5
    found = np.searchsorted(moved.arrival_s, later - 1e-6)
    assert np.allclose(moved.arrival_s[found], later)
    assert np.array_equal(moved.prompt_tokens[found], at0.prompt_tokens[inside])
    assert moved.lead is not None and abs(moved.lead_s - at0.lead_s) <= 2.5


def _runs(script: ModuleType, trace: str, cells: list[tuple[int, float, float, float]]) -> list:  # type: ignore[type-arg]
    return [script.Run(trace, seed, shift, slo, gpu_h, 1.0) for seed, shift, slo, gpu_h in cells]


def test_the_bar_is_judged_on_the_phase_means_not_on_phase_zero(script: ModuleType,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    case = next(c for c in script.CASES if c.trace == "azure2023-conv")
    monkeypatch.setattr(script, "oracle_of", lambda c, quick: (10.0, 0.99))
    # phase 0 meets 99% at 1.1x; the other phase costs 1.5x: the mean (1.3x) misses the bar
    lucky = _runs(script, case.trace, [(0, 0.0, 0.995, 11.0), (0, 7.5, 0.995, 15.0)])
    row = script.table(lucky, [case], [0], 2, False).splitlines()[-1]
    assert "| 99.50% / 1.10x |" in row and "1.30x (1.10-1.50)" in row and "2 of 2" in row
    assert row.endswith("not met |")
    # a phase under the target with the mean at it: met, and the run counted as missing
    steady = _runs(script, case.trace, [(0, 0.0, 0.992, 11.0), (0, 7.5, 0.989, 11.5), (1, 0.0, 0.994, 11.0),
                                        (1, 7.5, 0.993, 11.5)])
    row = script.table(steady, [case], [0, 1], 2, False).splitlines()[-1]
    assert "| 99.20% / 1.10x |" in row  # the worst seed at phase 0, the mean GPU-hours there
    assert "3 of 4" in row and "| 98.90% |" in row and row.endswith("**met** |")


def test_a_trace_the_store_holds_no_oracle_for_says_so(script: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    case = next(c for c in script.CASES if c.trace == "burstgpt-week1")
    monkeypatch.setattr(script, "oracle_of", lambda c, quick: None)
    row = script.table(_runs(script, case.trace, [(0, 0.0, 1.0, 5.0)]), [case], [0], 1, False).splitlines()[-1]
    assert "holds no oracle" in row
