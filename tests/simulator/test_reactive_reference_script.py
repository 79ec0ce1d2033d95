"""scripts/reactive_reference.py: its arguments refused in one line before any planning, and its replay the
shared one (simulator/report/reactive.py), not a copy."""

from __future__ import annotations

import sys
from types import ModuleType

import pytest
from conftest import load_script

from keda_llm.simulator.report import reactive


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return load_script("reactive_reference")


@pytest.mark.parametrize(("argv", "says"), [
    (["--holds", "-1"], "--holds: minutes >= 0"),
    (["--holds", "two"], "--holds: minutes >= 0"),
    (["--headrooms", "0"], "headroom must be a positive number"),
    (["--headrooms", "nan"], "headroom must be a positive number"),
    (["--traces", "azure2023-cod"], "'azure2023-cod' is not a trace of the docs table"),
])
def test_bad_arguments_are_one_line_before_any_planning(script: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                       argv: list[str], says: str) -> None:
    monkeypatch.setattr(sys, "argv", ["reactive_reference.py", *argv])
    monkeypatch.setattr(script, "plan", lambda case: pytest.fail("planned despite a refused argument"))
    with pytest.raises(SystemExit) as e:
        script.main()
    assert isinstance(e.value.code, str) and says in e.value.code and "\n" not in e.value.code


def test_the_script_replays_with_the_shared_code(script: ModuleType) -> None:
    assert script.reactive_point is reactive.reactive_point
    assert script.cheapest_meeting is reactive.cheapest_meeting
