"""ours with an ITL target under what the hardware reaches at a batch of one (scaler/itl_floor.py).

The shipped ScaledObject's target is half the ITL SLO: 50 ms on a 100 ms SLO. Llama-3.1-8B on an L4 decodes
one request at about 70 ms a token, so no count meets 50 ms, and the latency term asked for more replicas
at every poll (on the first 10 minutes of azure2023-conv: 8.82 GPU-hours and 36 cold starts where static
provisioning met the SLO with 2.70).
"""

from __future__ import annotations

from keda_llm.simulator.cluster.lead_in import LEAD_IN_S
from keda_llm.simulator.control.policies import build_controller
from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.report.summary import summarize
from keda_llm.simulator.run import Backtest, Slo, simulate
from keda_llm.simulator.workload.traces import load_shipped


def test_ours_on_hardware_whose_floor_is_over_its_itl_target_does_not_scale_without_end() -> None:
    preset = get_preset("llama-3.1-8b/l4")
    slo = Slo(ttft_s=2.0, itl_s=0.1)
    bt = Backtest(preset, cold_start="typical", slo=slo)
    tr = load_shipped("azure2023-conv").window(0.0, 600.0).wrapped(LEAD_IN_S)  # as `simulate --window 0:600`
    cold_p90 = preset.cold_start("typical").quantile(0.9)
    ctl = build_controller("ours", model=preset.model.name, max_replicas=64, concurrency_target=1.0,
                           static_replicas=1, cold_start_s=cold_p90, slo=(slo.ttft_s, slo.itl_s))
    s = summarize(simulate(tr, bt, ctl, "detailed"), slo)
    # after the fix: 99.9% at 5.25 GPU-h, 3 cold starts (static 2 replicas: 99.2% at 2.70 GPU-h)
    assert s.slo_attainment >= 0.99
    assert s.gpu_hours < 6.5, s.gpu_hours
    assert s.cold_starts <= 8, s.cold_starts
