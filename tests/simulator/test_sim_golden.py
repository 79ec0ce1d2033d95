"""The golden runs (tests/simulator/golden.py) give exactly the recorded results: any change to the
simulator that moves one request's TTFT, TPOT or finish, one timeline row, a GPU-second or a scaling fails
here. A change meant to move results re-records (`python tests/simulator/golden.py --record`) and says why."""

from __future__ import annotations

import json

import pytest
from golden import CASES, RECORDING, Case, fingerprint, run_case

RECORDED = json.loads(RECORDING.read_text())


def test_recording_covers_every_case() -> None:
    assert sorted(RECORDED) == sorted(c.key for c in CASES)
    assert len(CASES) == 12


@pytest.mark.parametrize("case", CASES, ids=[c.key for c in CASES])
def test_golden_run_is_unchanged(case: Case) -> None:
    got = fingerprint(run_case(case))
    assert got["requests"] > 1000 and got["served"] > 0  # a run that did something
    assert got == RECORDED[case.key]
