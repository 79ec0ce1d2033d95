"""The replica model under load against published vLLM serving measurements (simulator/hardware/calibration.py,
docs/simulator.md "Under load").

L1-L3 (vLLM 0.6.0 with multi-step scheduling, the engine version the presets' timing is fitted on) are
replayed as their benchmark ran them: 500 ShareGPT-like requests at each QPS through the detailed engine.
Their mean TPOT is held within 15% at every finite QPS and their QPS = inf throughput within 20%. L4 (vLLM
V1 alpha) and L5 (vLLM 0.21, a single run) are other engine versions, checked for shape only: latency flat
at low load and rising past the published knee. The same blog's points no fit used (its decode- and
prefill-heavy datasets, and the 4xA100 TP4 70B figure) are held within 25%. A replay takes tens of
milliseconds."""

from __future__ import annotations

import math

import pytest

import keda_llm.simulator.hardware.calibration as cal
from keda_llm.simulator.hardware.perf import FITTED, PhysicsPerf
from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.hardware.replica import ReplicaConfig


def _replay(c: cal.LoadedCurve, qps: float) -> cal.Replay:
    perf = PhysicsPerf(c.gpu, c.model, c.tp, FITTED)
    return cal.replay(perf, cal.v060_config(c.gpu, c.model, c.tp), qps, scheduler_steps=cal.V060_SCHEDULER_STEPS)


@pytest.mark.parametrize("curve, qps, tpot_ms", [
    (c, q, t) for c in cal.LOADED for q, t in c.tpot_ms if not math.isinf(q)
], ids=lambda v: getattr(v, "key", None) or str(v))
def test_mean_tpot_within_15_percent_at_every_finite_qps(curve: cal.LoadedCurve, qps: float, tpot_ms: float) -> None:
    got = _replay(curve, qps).mean_tpot_ms
    assert got == pytest.approx(tpot_ms, rel=0.15), (curve.key, qps, got)


@pytest.mark.parametrize("curve", cal.LOADED, ids=lambda c: c.key)
def test_throughput_at_qps_inf_within_20_percent(curve: cal.LoadedCurve) -> None:
    got = _replay(curve, math.inf).req_s
    assert got == pytest.approx(curve.inf_req_s, rel=0.20), (curve.key, got)


@pytest.mark.parametrize("curve", cal.LOADED, ids=lambda c: c.key)
def test_tpot_grows_with_load_and_throughput_saturates(curve: cal.LoadedCurve) -> None:
    # the shape the published curves have: TPOT rises monotonically with QPS, and past saturation more load
    # adds no throughput (every request at once finishes no faster per request than a queue at 2x capacity)
    tpots = [_replay(curve, q).mean_tpot_ms for q, _ in curve.tpot_ms]
    assert tpots == sorted(tpots)
    assert tpots[-1] > 2.5 * tpots[0]
    at_inf = _replay(curve, math.inf).req_s
    assert _replay(curve, 2 * curve.inf_req_s).req_s <= 1.05 * at_inf


@pytest.mark.parametrize("point", [p for p in cal.HELD_OUT if p.held],
                         ids=lambda p: f"{p.figure.rsplit(' ', 1)[-1]}-{p.dataset}-{p.metric}-{p.qps:g}")
def test_held_out_points_within_25_percent(point: cal.HeldOutPoint) -> None:
    # the same blog's points no fit used (another length mix, and the 4xA100 TP4 70B setup): the fitted
    # model generalizes within 25%; its worst are prefill-heavy throughput on 1xH100 (+23%: fast prefill)
    # and decode-heavy TPOT on 4xA100 TP4 at 2 QPS (-21%)
    got = cal.replay_held_out(point, PhysicsPerf(point.gpu, point.model, point.tp, FITTED))
    assert got == pytest.approx(point.published, rel=0.25), (point, got)


def test_held_out_points_cover_both_new_mixes_and_the_unfitted_setup() -> None:
    held = [p for p in cal.HELD_OUT if p.held]
    assert {p.dataset for p in held} == {"sharegpt", "decode-heavy", "prefill-heavy"}
    assert {p.figure.rsplit(" ", 1)[-1] for p in held} == {"H100_8B", "H100_70B", "A100_8B", "A100_70B"}
    fitted = {(c.gpu.name, c.model.name, c.tp) for c in cal.LOADED}
    assert all(p.dataset != "sharegpt" or (p.gpu.name, p.model.name, p.tp) not in fitted for p in cal.HELD_OUT)


def test_every_loaded_curve_is_the_presets_engine_version() -> None:
    for c in cal.LOADED:
        assert c.engine == FITTED.engine == get_preset("llama-3.1-8b/h100").engine


def test_the_sharegpt_like_lengths_have_the_published_means() -> None:
    p, o = cal.sharegpt_like(500)
    assert (round(float(p.mean())), round(float(o.mean()))) == (202, 179)
    assert p.min() >= 4 and o.min() >= 4 and p.max() <= 1024 and (p + o).max() <= 2048  # benchmark_serving's filter


# L4: vLLM V1 alpha's serving defaults in January 2025 (API server): 256 sequences, 2048 tokens per iteration.
V1_ALPHA_SEQS, V1_ALPHA_TOKENS = 256, 2048


@pytest.mark.parametrize("preset, points", [
    ("llama-3.1-8b/h100", cal.L4_8B), ("llama-3.1-70b/h100-tp4", cal.L4_70B),
])
def test_l4_latency_is_flat_at_low_load_and_rises_past_the_knee(preset: str,
                                                                points: tuple[tuple[float, float], ...]) -> None:
    # 2000 requests: 500 arrive within 7 s at 70 QPS, too short a run for a queue to show past the knee
    p = get_preset(preset)
    cfg = ReplicaConfig(V1_ALPHA_SEQS, V1_ALPHA_TOKENS, p.kv_blocks)
    lat = [cal.replay(p.perf(), cfg, q, n=2000).mean_latency_s for q, _ in points]
    # published: +18% (8B, 1 -> 20 QPS) and +21% (70B, 1 -> 10 QPS) at the second point
    assert lat[1] < 1.4 * lat[0]
    # and rises past the published knee (7.9x and 5.2x the low-load latency at the last point)
    assert lat == sorted(lat) and lat[-1] > 2.5 * lat[0]
    # the knee where it was published: up to it (published growth at most 3x the low-load latency: 8B to 50
    # QPS, 70B to 25) the model's growth is within 30% of the published growth, so a replica that saturates
    # early (8B at 30 QPS would read 4x and more at 40-50) fails here
    for (q, published), got in zip(points, lat, strict=True):
        if published / points[0][1] <= 3.0:
            assert got / lat[0] == pytest.approx(published / points[0][1], rel=0.3), q


def test_l5_tpot_rises_with_concurrency_and_throughput_with_it() -> None:
    p = get_preset("llama-3.1-8b/h100")
    got = [cal.closed_loop(p.perf(), p.replica_config(), c, cal.L5_PROMPT, cal.L5_OUTPUT, 4 * c) for c, _, _ in cal.L5]
    (tok1, tpot1), (tok16, tpot16), (_tok64, tpot64) = got
    # published c1 TPOT 6.48 ms: the small-batch regime, within 25% (another engine version)
    assert tpot1 == pytest.approx(cal.L5[0][2], rel=0.25)
    # TPOT grows with the batch; throughput grows far less than 16x from c1 to c16 (published 11.3x)
    assert tpot1 < tpot16 < tpot64
    assert 6 * tok1 < tok16 < 16 * tok1


def test_the_small_batch_points_stay_where_they_are() -> None:
    """The points the model was fitted on before the loaded curves (scripts/validate_perf.py POINTS: one to
    eight requests on each preset's GPU, the docs' first calibration table) stay within 6% with the fitted
    efficiencies, and the held-out ones within the 30% they are at (the worst, 8B FP8's TTFT, -29.2%)."""
    from conftest import load_script

    vp = load_script("validate_perf")
    errors = {(p.role, p.key): vp.metric(p, vp.perf_for(p, FITTED)) / p.measured - 1 for p in vp.POINTS}
    assert {role for role, _ in errors} == {"fit", "validate"} and len(errors) >= 15
    for (role, key), err in errors.items():
        assert abs(err) <= (0.06 if role == "fit" else 0.30), (key, f"{100 * err:+.1f}%")
