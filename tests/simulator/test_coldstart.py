"""Cold-start distributions: phase medians by hand, seeded sampling, bad parameters."""

from __future__ import annotations

import math

import numpy as np
import pytest

from keda_llm.simulator.hardware.coldstart import Phase, cold_start_model
from keda_llm.simulator.hardware.presets import get_preset


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


def test_the_levers_change_only_their_own_phase() -> None:
    # 70B on 4 GPUs: 141_107_412_992 / 4 bytes per GPU; storage 500e6 B/s, page cache 5.4e9 B/s (vllm PR #17122:
    # 14.99 GiB in 2.95 s); no free node adds 120 s of provisioning to the 5 s of scheduling
    per_gpu = 141_107_412_992 / 4
    medians = {}
    for node_free in (True, False):
        for warm in (False, True):
            m = cold_start_model(per_gpu, "typical", node_free=node_free, weights_warm=warm)
            medians[(node_free, warm)] = {p.name: p.median_s for p in m.phases}
    cold = medians[(False, False)]
    assert cold == pytest.approx({"scheduling": 125.0, "image_pull": 10e9 / 150e6, "weight_load": per_gpu / 500e6,
                                  "warmup": 45.0})
    assert medians[(False, True)] == pytest.approx({**cold, "weight_load": per_gpu / 5.4e9})  # 6.53 s, not 70.55 s
    assert medians[(True, False)] == pytest.approx({**cold, "scheduling": 5.0})  # placeholder: no provisioning
    assert medians[(True, True)] == pytest.approx({**cold, "scheduling": 5.0, "weight_load": per_gpu / 5.4e9})
    # the defaults are today's typical case, named as before (presets and the docs tables are unchanged)
    plain = cold_start_model(per_gpu, "typical")
    assert plain.case == "typical" and {p.name: p.median_s for p in plain.phases} == medians[(True, False)]
    assert cold_start_model(per_gpu, "typical", node_free=False, weights_warm=True).case == \
        "typical+provision+warm-weights"
    # both levers: 120 s + (70.55 - 6.53) s = 184.0 s off the sum of medians
    both = cold_start_model(per_gpu, "typical", weights_warm=True)
    none = cold_start_model(per_gpu, "typical", node_free=False)
    assert none.median_sum_s - both.median_sum_s == pytest.approx(120.0 + per_gpu / 500e6 - per_gpu / 5.4e9)
    assert none.median_sum_s - both.median_sum_s == pytest.approx(184.0, abs=0.1)


def test_fast_case_levers() -> None:
    # fast: node-local NVMe at 5e9 already; warm weights read at the faster of it and the page cache
    m = cold_start_model(5.4e9, "fast", weights_warm=True, node_free=False)
    assert {p.name: p.median_s for p in m.phases} == pytest.approx(
        {"scheduling": 121.0, "image_pull": 0.0, "weight_load": 1.0, "warmup": 4.0})
