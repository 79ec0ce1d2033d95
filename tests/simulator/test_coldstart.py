"""Cold-start distributions: phase medians by hand, seeded sampling, bad parameters."""

from __future__ import annotations

import math

import numpy as np
import pytest

from keda_llm.simulator.coldstart import Phase, cold_start_model
from keda_llm.simulator.presets import get_preset


def test_phase_medians_by_hand() -> None:
    typical = get_preset("llama-3.1-8b/h100").cold_start("typical")
    med = {p.name: p.median_s for p in typical.phases}
    # 5 s scheduling, 10 GB image at 150 MB/s, 16.06 GB weights at 500 MB/s, 45 s warm-up
    assert med == pytest.approx({"scheduling": 5.0, "image_pull": 10e9 / 150e6,
                                 "weight_load": 16_060_522_496 / 500e6, "warmup": 45.0})
    fast = get_preset("llama-3.1-8b/h100").cold_start("fast")
    assert fast.median_sum_s == pytest.approx(1.0 + 0.0 + 16_060_522_496 / 5e9 + 4.0)
    tp4 = get_preset("llama-3.1-70b/h100-tp4").cold_start("typical")
    assert {p.name: p.median_s for p in tp4.phases}["weight_load"] == pytest.approx(141_107_412_992 / 4 / 500e6)


def test_lognormal_phase() -> None:
    ph = Phase("x", 10.0, 20.0)
    assert ph.sigma == pytest.approx(math.log(2) / 1.2815515655446004)
    s = ph.sample(np.random.default_rng(0), 200_000)
    assert np.median(s) == pytest.approx(10.0, rel=0.02)
    assert np.quantile(s, 0.9) == pytest.approx(20.0, rel=0.02)


def test_seeded_and_minutes_vs_seconds() -> None:
    m = get_preset("llama-3.1-8b/a100").cold_start("typical")
    a = m.sample(np.random.default_rng(7), 5)
    assert a.tolist() == m.sample(np.random.default_rng(7), 5).tolist()
    assert 100 < m.quantile(0.5) < 200  # minutes
    assert get_preset("llama-3.1-8b/a100").cold_start("fast").quantile(0.5) < 15  # seconds
    assert m.scaled(2.0).median_sum_s == pytest.approx(2 * m.median_sum_s)


def test_bad_parameters() -> None:
    with pytest.raises(ValueError, match="p90_s"):
        Phase("x", 10.0, 5.0)
    with pytest.raises(ValueError, match="case must be"):
        cold_start_model(1e9, "slow")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cold start case"):
        get_preset("llama-3.1-8b/a100").cold_start("slow")
