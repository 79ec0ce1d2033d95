"""The field's autoscalers (simulator.control.anchors): each decision rule worked by hand on small inputs, then one
short run each on a shipped trace window."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from sim_helpers import config, run, trace

from keda_llm.simulator.control import ScalingPolicy
from keda_llm.simulator.control.anchors import ANCHORS, AnchorContext, build_anchor
from keda_llm.simulator.control.anchors.aibrix import AibrixAutoscaler, apa_desired, kpa_desired
from keda_llm.simulator.control.anchors.base import Signals
from keda_llm.simulator.control.anchors.dynamo import (
    ArimaPredictor,
    ConstantPredictor,
    DynamoPlanner,
    KalmanPredictor,
    ProphetPredictor,
)
from keda_llm.simulator.control.anchors.keda_driven import (
    WVA_HPA_BEHAVIOR,
    KvUsageScaler,
    WvaScaler,
    k2_from_engine,
    wva_anchor,
    wva_v1_target,
    wva_v2_target,
)
from keda_llm.simulator.control.anchors.knative import KnativeKpa, KpaDecider
from keda_llm.simulator.control.anchors.ray_serve import RayServe, ray_desired
from keda_llm.simulator.control.policies import POLICIES, build_controller, parse_policy
from keda_llm.simulator.hardware.perf import ConstantPerf
from keda_llm.simulator.hardware.replica import ReplicaConfig


def _sig(running: list[float], waiting: list[float], kv: list[float], pending: float = 0.0,
         at: float = 0.0) -> Signals:
    return Signals(at, tuple(f"p{i}" for i in range(len(running))), tuple(running), tuple(waiting), tuple(kv),
                   1000.0, pending)


# -- Knative KPA --------------------------------------------------------------------------------------
def test_kpa_panics_at_twice_the_target_and_never_decreases_while_panicking() -> None:
    d = KpaDecider(target=10.0)
    # 2 ready pods, panic-window concurrency 30 -> dppc 3, 3 / 2 = 1.5 < 2: stable, dspc = ceil(20 / 10) = 2
    assert d.desired(0.0, stable=20.0, panic=30.0, ready=2) == 2 and not d.panicking
    # panic 40 -> dppc 4, 4 / 2 = 2.0 >= 200%: panic; max(dspc 2, dppc 4) = 4
    assert d.desired(2.0, stable=20.0, panic=40.0, ready=2) == 4 and d.panicking
    # load falls (dppc 1, clamped to floor(4 / 2) = 2): still panicking, never below the panic peak 4
    assert d.desired(4.0, stable=5.0, panic=5.0, ready=4) == 4
    # a full stable window (60 s) after the last over-threshold tick (t=2): back to the stable count
    assert d.desired(61.0, stable=5.0, panic=5.0, ready=4) == 4
    assert d.desired(62.0, stable=5.0, panic=5.0, ready=4) == 2 and not d.panicking  # max(ceil(0.5), floor(4/2))


def test_kpa_scale_rates_clamp() -> None:
    d = KpaDecider(target=1.0, max_scale_up_rate=2.0, max_scale_down_rate=2.0)
    assert d.desired(0.0, stable=100.0, panic=1.0, ready=3) == 6  # at most ready x 2
    d = KpaDecider(target=1.0)
    assert d.desired(0.0, stable=0.0, panic=0.0, ready=8) == 4  # at least floor(8 / 2)
    assert d.desired(0.0, stable=0.0, panic=0.0, ready=1) == 0  # floor(1 / 2): the decider may reach 0


def test_knative_scales_to_zero_after_stable_window_and_grace_then_activator_wakes_it() -> None:
    # 4 requests at 0 finish by ~6 s (1 s iterations, 5 tokens). The 60 s stable window is all zeros from
    # about t=66; the last pod goes 30 s (grace) later. A request at 300 finds no pod: the activator holds
    # it and pokes the autoscaler, which asks for one pod at once (cold start 60 s); it is served.
    ctl = KnativeKpa(target=70.0)
    res = run(trace([0.0] * 4 + [300.0]), config(max_num_seqs=4), ctl)
    zero = [e for e in ctl.events if e[3] == 0]
    assert len(zero) == 1 and 90.0 <= zero[0][0] <= 100.0
    wake = [e for e in ctl.events if e[2] == 0]
    assert wake[0][0] == 300.0 and wake[0][3] == 1 and wake[0][4] == "activator"
    assert not res.dropped_timeout and all(r.finish_s is not None for r in res.requests)
    assert res.zero_seconds > 150.0


# -- AIBrix -----------------------------------------------------------------------------------------
def _aibrix_step(ctl: AibrixAutoscaler, at: float, spec: int, kv: list[float]) -> int | None:
    """One resync: `spec` replicas, of which the pods in `kv` are ready (the rest loading)."""
    pods = [SimpleNamespace(phase=SimpleNamespace(value="ready"))] * len(kv)
    pods += [SimpleNamespace(phase=SimpleNamespace(value="loading"))] * (spec - len(kv))
    sim: Any = SimpleNamespace(now=at, desired=spec, cluster=SimpleNamespace(active=lambda: pods))
    ctl.sample(sim, _sig([0.0] * len(kv), [0.0] * len(kv), kv, at=at))
    return ctl.decide(sim)


def test_apa_tolerance_band_and_rates() -> None:
    assert apa_desired(4, 0.54, 0.5) == 4  # r = 1.08, inside [0.9, 1.1]: no change
    assert apa_desired(4, 0.46, 0.5) == 4  # r = 0.92
    assert apa_desired(4, 0.56, 0.5) == 5  # r = 1.12 -> ceil(4.48)
    assert apa_desired(4, 0.40, 0.5) == 4  # r = 0.8 -> ceil(3.2) = 4
    assert apa_desired(4, 0.30, 0.5) == 3  # r = 0.6 -> ceil(2.4)
    assert apa_desired(4, 2.0, 0.5) == 8  # r = 4 -> 16, capped at 4 x 2
    assert apa_desired(4, 0.05, 0.5) == 2  # r = 0.1 -> 1, floored at 4 / 2


def test_aibrix_scale_down_takes_the_lowest_recommendation_of_300_s_and_blocks_nothing() -> None:
    # a 1 s stable window: each resync's value is that resync's per-pod mean (r = mean / 0.5)
    ctl = AibrixAutoscaler("apa", stable_window_s=1.0)
    assert _aibrix_step(ctl, 0.0, 4, [0.25] * 4) == 2  # r 0.5: ceil(4 x 0.5) = 2
    assert _aibrix_step(ctl, 10.0, 2, [1.0] * 2) == 4  # r 2: ceil(2 x 2) = 4; scale-up window 0 s
    # r 0.75 recommends ceil(4 x 0.75) = 3, but 2 (t=0) is the lowest of the last 300 s: 2, at once
    assert _aibrix_step(ctl, 20.0, 4, [0.375] * 4) == 2
    assert _aibrix_step(ctl, 30.0, 2, [1.0] * 2) == 4
    assert _aibrix_step(ctl, 290.0, 4, [0.5] * 4) == 4  # r 1: no change (recorded as 4)
    # recommends 3; kept (t > 300 - 300): 4, 3, 4, 4, 3 -> 3 (the 2 of t=0 has just left the window)
    assert _aibrix_step(ctl, 300.0, 4, [0.375] * 4) == 3


def test_aibrix_kpa_judges_panic_every_reconcile_with_no_hold_and_a_tolerance_band() -> None:
    # target 0.5: band [0.45, 0.55]; counts are ceil(value / target), clamped to [floor(n / 2), ceil(2n)]
    assert kpa_desired(4, 0.54, 0.50, 0.5) == (4, False)  # both inside the band: keep the 4
    assert kpa_desired(4, 0.56, 0.56, 0.5) == (2, False)  # ceil(1.12) = 2, no factor of the pods, >= 4 / 2
    assert kpa_desired(2, 0.25, 0.50, 0.5) == (1, False)  # panic / stable = 2 exactly: not over 2
    # panic 0.9 / stable 0.3 = 3 > 2: max(stable ceil(0.6) = 1, panic ceil(1.8) = 2) = 2 ...
    assert kpa_desired(1, 0.3, 0.9, 0.5) == (2, True)
    # ... and the next reconcile judges afresh: 0.6 / 0.4 = 1.5, stable ceil(0.8) = 1: down to 1 at once
    assert kpa_desired(2, 0.4, 0.6, 0.5) == (1, False)
    # panicking does not stop a decrease: 0.7 / 0.3 > 2, max(1 -> 2, ceil(1.4) = 2) = 2 < 4
    assert kpa_desired(4, 0.3, 0.7, 0.5) == (2, True)
    assert kpa_desired(8, 0.0, 0.0, 0.5) == (4, True)  # stable <= 0 counts as panic; floor(8 / 2)
    assert kpa_desired(1, 0.9, 0.9, 0.1) == (2, False)  # ceil(9) capped at ceil(2 x 1)
    # through the controller: Knative's decider would hold the panic peak (2) for 180 s; AIBrix drops to 1
    ctl = AibrixAutoscaler("kpa", stable_window_s=20.0, panic_window_s=1.0, scale_down_window_s=0.0)
    assert _aibrix_step(ctl, 0.0, 1, [0.1]) == 1  # 0.1 / 0.1 = 1: stable, ceil(0.2) = 1 = the current count
    assert _aibrix_step(ctl, 10.0, 1, [0.1]) == 1
    assert _aibrix_step(ctl, 20.0, 1, [1.0]) == 2  # stable 0.4, panic 1.0: 2.5 > 2, ceil(2) = 2
    assert _aibrix_step(ctl, 30.0, 2, [0.2, 0.2]) == 1  # stable 0.4333, panic 0.2: stable, ceil(0.87) = 1


def test_aibrix_sizes_from_the_per_pod_mean() -> None:
    # 4 pods at 90% KV: the KPA sees the mean 0.9 (not the total 3.6): ceil(1.8) = 2, within [2, 8]
    assert _aibrix_step(AibrixAutoscaler("kpa"), 0.0, 4, [0.9] * 4) == 2
    # uneven pods: mean 0.6 -> ceil(1.2) = 2 = the current count (the total 1.2 would ask ceil(2.4) = 3)
    assert _aibrix_step(AibrixAutoscaler("kpa"), 0.0, 2, [0.2, 1.0]) == 2
    assert _aibrix_step(AibrixAutoscaler("apa"), 0.0, 2, [0.2, 1.0]) == 3  # ceil(2 x 0.6 / 0.5) = 3


def test_aibrix_sizes_from_spec_replicas_so_a_cold_start_compounds() -> None:
    # one ready pod full, the new ones still loading: each resync doubles spec.replicas, not the ready count
    ctl = AibrixAutoscaler("apa")
    assert [_aibrix_step(ctl, 10.0 * i, spec, [1.0]) for i, spec in enumerate((1, 2, 4, 8))] == [2, 4, 8, 16]
    # the KPA keeps spec inside its band: 4 asked for, 1 ready at 0.5 -> 4 (ready-based would give 1)
    assert _aibrix_step(AibrixAutoscaler("kpa"), 0.0, 4, [0.5]) == 4
    assert _aibrix_step(AibrixAutoscaler("kpa"), 0.0, 4, []) is None  # no pod answers: no decision


# -- llm-d WVA --------------------------------------------------------------------------------------------
def test_wva_v1_one_step_up_when_spare_kv_low_and_safe_step_down() -> None:
    assert wva_v1_target([0.75, 0.75], [0, 0], 2) == 3  # spare KV 0.05 < 0.10
    assert wva_v1_target([0.2, 0.2], [3, 3], 2) == 3  # spare queue 2 < 3
    assert wva_v1_target([0.85], [0], 1) == 2  # every pod saturated (KV >= 0.80)
    assert wva_v1_target([0.1, 0.1, 0.1], [0, 0, 0], 3) == 2  # 0.3 over 2 pods: spare 0.65, queue 5: safe
    assert wva_v1_target([0.4, 0.4], [0, 0], 2) == 2  # 0.8 on one pod leaves no spare: hold
    assert wva_v1_target([0.1], [0], 1) == 1  # never below one by scale-down (needs >= 2 non-saturated)
    assert wva_v1_target([0.75, 0.75], [0, 0], 2, kv_threshold=0.9) == 2  # the knob: spare 0.15


def test_wva_v2_token_capacity() -> None:
    # demand 900 tokens against 1000 per pod: 900 / 0.85 - 1000 = 58.8 > 0 -> one more pod
    assert wva_v2_target(900.0, 1, 0, 1000.0) == 2
    # 3000 tokens on 1 pod: 3529 - 1000 = 2529 -> ceil(2.53) = 3 more at once
    assert wva_v2_target(3000.0, 1, 0, 1000.0) == 4
    # a starting pod counts as supply for scale-up: 1700 / 0.85 = 2000 = 2 pods' worth, no more
    assert wva_v2_target(1700.0, 1, 1, 1000.0) == 2
    # scale-down removes floor(spare / capacity) at once: 100 tokens on 4 pods, spare 4000 - 143 -> 3 fewer
    assert wva_v2_target(100.0, 4, 0, 1000.0) == 1
    # ... keeping one pod, and counting only ready pods as spare: 2 ready + 2 starting, spare 2000 - 143 -> 1
    assert wva_v2_target(100.0, 2, 2, 1000.0) == 3
    assert wva_v2_target(1500.0, 3, 0, 1000.0) == 3  # spare 3000 - 2143 < 1000: hold
    assert wva_v2_target(0.0, 1, 0, 1000.0) == 1


def test_wva_v2_k2_from_the_engine_limits() -> None:
    # B 8192, S 256, I 1000, O 200: min(8192 x 200 / 1200 = 1365, 256) = 256 sequences of I + O / 2 = 1100
    assert k2_from_engine(8192, 256, 1000.0, 200.0) == 256 * 1100
    # long prompts, short answers: 8192 x 20 / 2020 = 81.1 sequences x 2010 tokens
    assert k2_from_engine(8192, 256, 2000.0, 20.0) == float(int(8192 * 20 / 2020 * 2010))
    assert k2_from_engine(8192, 256, 1000.0, 0.0) == 0.0  # no output seen yet: unknown


def _wva_state(at: float, kv: list[float], waiting: list[float], finished: float) -> object:
    from keda_llm.scaler.model import Observation, ReplicaSample
    from keda_llm.simulator.cluster.engine import ObservedState

    reps = tuple(ReplicaSample(f"p{i}", at, kv_usage_ratio=k, running=1, waiting=w, kv_capacity_tokens=100_000,
                               prompt_tokens_total=2000.0 * finished, generation_tokens_total=20.0 * finished,
                               requests_finished_total=finished)
                 for i, (k, w) in enumerate(zip(kv, waiting, strict=True)))
    return ObservedState(Observation("d", "m", at, reps), (), 0)


class _Sim:
    def __init__(self, desired: int) -> None:
        self.desired = desired
        self.config = SimpleNamespace(replica=ReplicaConfig(max_num_seqs=256, max_num_batched_tokens=8192,
                                                            kv_blocks=6250))


def test_wva_v2_scales_on_the_compute_bound_when_it_is_below_the_kv_bound() -> None:
    """k1 is 80,000 tokens (100,000 x 0.8), but a pod whose queue reached the threshold (5) held only 30,000:
    that observed k2 is the capacity from then on, while the queue is short again too."""
    wva = WvaScaler("tokens", reconcile_s=60.0)
    sim = _Sim(2)
    # 0 s: the first reconcile has no history of finished requests; both pods have a queue of 6 at 30% KV
    assert wva.observe(_wva_state(0.0, [0.3, 0.3], [6.0, 6.0], 10.0), sim) is False  # type: ignore[arg-type]
    # demand 2 x (30,000 + 6 x 0 mean input) on a capacity of 30,000 per pod (observed k2): 70,588 - 60,000 -> +1
    assert wva.desired == 3
    # a minute later the queues have drained and the KV is 10% (peak over the last minute still 30% and 6)
    wva.history.clear()
    sim.desired = 3
    wva.observe(_wva_state(60.0, [0.1, 0.1, 0.1], [0.0, 0.0, 0.0], 20.0), sim)  # type: ignore[arg-type]
    # k2 is the observed mean, 30,000 (not k1 80,000): demand 30,000, spare 90,000 - 42,857 -> one fewer
    assert wva.desired == 2


def test_wva_v2_has_no_pending_guard_but_v1_does() -> None:
    for mode, expected in (("tokens", 5), ("saturation", 4)):
        wva = WvaScaler(mode)  # type: ignore[arg-type]
        sim = _Sim(4)
        # three ready pods, KV-full (95,000 tokens each against a capacity of 80,000), one starting: V2 counts
        # the starting one as supply (285,000 / 0.85 = 335,294 > 4 x 80,000) and adds one; V1 waits for it
        wva.observe(_wva_state(0.0, [0.95] * 3, [8.0] * 3, 10.0), sim)  # type: ignore[arg-type]
        assert wva.desired == expected, mode


def test_wva_runs_with_the_charts_hpa_behavior() -> None:
    for mode in ("saturation", "tokens"):
        so, _ = wva_anchor(8, mode)  # type: ignore[arg-type]
        assert so.behavior == WVA_HPA_BEHAVIOR
        assert so.behavior.scale_up is not None and so.behavior.scale_up.stabilization_window_seconds == 240
        down = so.behavior.scale_down
        assert down is not None and down.policies == (ScalingPolicy("Pods", 10, 150),)


# -- HPA on KV usage ---------------------------------------------------------------------------------------
def test_hpa_kv_reports_the_sum_at_its_scrape_interval() -> None:
    from keda_llm.scaler.model import Observation, ReplicaSample
    from keda_llm.simulator.cluster.engine import ObservedState

    def state(at: float, kv: float) -> ObservedState:
        obs = Observation("d", "m", at, (ReplicaSample("a", at, kv_usage_ratio=kv, running=1, waiting=0),
                                          ReplicaSample("b", at, kv_usage_ratio=kv, running=1, waiting=0)))
        return ObservedState(obs, (), 0)

    s = KvUsageScaler(target=0.8)
    s.observe(state(0.0, 0.5), None)  # type: ignore[arg-type]
    assert s.value() == 1.0
    s.observe(state(5.0, 0.9), None)  # type: ignore[arg-type]
    assert s.value() == 1.0  # the next scrape is at 15 s
    s.observe(state(15.0, 0.9), None)  # type: ignore[arg-type]
    assert s.value() == pytest.approx(1.8)  # the HPA: ceil(1.8 / 0.8) = 3 pods


# -- Dynamo ---------------------------------------------------------------------------------------------
def test_dynamo_predictors() -> None:
    c, k = ConstantPredictor(), KalmanPredictor()
    for v in (0.0, 0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0):
        c.add(v)
        k.add(v)
    assert c.predict() == 60.0
    assert 65.0 <= k.predict() <= 72.0  # the linear trend continues (leading zeros skipped)
    short = KalmanPredictor()
    for v in (5.0, 7.0, 9.0):
        short.add(v)
    assert short.predict() == 9.0  # fewer than 5 points: the last value


def test_dynamo_predictors_skip_the_idle_start_and_read_a_non_finite_value_as_zero() -> None:
    # the planner's base predictor: zeros before the first non-zero value are an idle start, not load
    for make in (ConstantPredictor, KalmanPredictor):
        p = make()
        for v in (0.0, float("nan"), 0.0, 4.0, float("inf"), 0.0):
            p.add(v)
        assert p.values == [4.0, 0.0, 0.0]
    assert ConstantPredictor().predict() == 0.0


def test_dynamo_arima_predictor_fits_once_then_updates_as_the_planner_does() -> None:
    """Dynamo's default predictor (core/load/predictors.py): the last value until there are 5, a flat history's
    own value (pmdarima would forecast 0), then auto_arima fitted once on the whole history and updated with each
    new value, its order kept; a first fit of order (0, d, 0) is fitted again on log1p of the values."""
    pmdarima = pytest.importorskip("pmdarima")
    a = ArimaPredictor()
    for v in (5.0, 7.0, 9.0, 11.0):
        a.add(v)
    assert a.predict() == 11.0  # fewer than 5 points: the last value
    flat = ArimaPredictor()
    for _ in range(6):
        flat.add(40.0)
    assert flat.predict() == 40.0 and flat.model is None
    rng = np.random.default_rng(3)
    ar = [500.0]
    for _ in range(59):  # an AR(1) series: a first fit with p > 0, kept in the raw space
        ar.append(500.0 + 0.8 * (ar[-1] - 500.0) + float(rng.normal(0.0, 20.0)))
    p = ArimaPredictor()
    for v in ar[:40]:
        p.add(v)
    first = p.predict()
    want = pmdarima.auto_arima(np.array(ar[:40]), suppress_warnings=True, error_action="ignore")
    assert want.order[0] + want.order[2] > 0 and not p.log and p.model.order == want.order
    assert first == pytest.approx(max(0.0, float(want.predict(n_periods=1)[0])))
    for v in ar[40:]:
        p.add(v)
    want.update(ar[40:])
    assert p.predict() == pytest.approx(max(0.0, float(want.predict(n_periods=1)[0])))
    assert p.model.order == want.order  # updated, not searched again
    noise = ArimaPredictor()  # white noise: order (0, 0, 0), so the planner's log1p fallback
    values = [float(v) for v in 500.0 + rng.normal(0.0, 20.0, 30)]
    for v in values:
        noise.add(v)
    got = noise.predict()
    assert pmdarima.auto_arima(np.array(values), suppress_warnings=True, error_action="ignore").order[::2] == (0, 0)
    log = pmdarima.auto_arima(np.log1p(values), suppress_warnings=True, error_action="ignore")
    assert noise.log and got == pytest.approx(float(np.expm1(log.predict(n_periods=1)[0])))


def test_dynamo_prophet_predictor_is_prophet_on_the_last_50_intervals(capfd: pytest.CaptureFixture[str]) -> None:
    """Dynamo's Prophet predictor: Prophet with its defaults on the last 50 values, stamped one throughput
    interval apart, asked for the next stamp; the last value until there are 5; never below 0."""
    prophet = pytest.importorskip("prophet")
    import pandas as pd

    p = ProphetPredictor()
    for v in (5.0, 7.0, 9.0, 11.0):
        p.add(v)
    assert p.predict() == 11.0
    rng = np.random.default_rng(5)
    values = [float(v) for v in 300.0 + 4.0 * np.arange(70) + rng.normal(0.0, 10.0, 70)]
    for v in values:
        p.add(v)
    assert p.values == values[-50:]  # 74 added: the window holds the last 50
    stamps = pd.Timestamp("2024-01-01") + pd.to_timedelta(180 * np.arange(24, 75), unit="s")
    model = prophet.Prophet().fit(pd.DataFrame({"ds": stamps[:-1], "y": values[-50:]}))
    want = float(model.predict(pd.DataFrame({"ds": stamps[-1:]}))["yhat"].iloc[0])
    got = p.predict()
    assert got == pytest.approx(want, rel=1e-6) and got > values[-1] - 30.0  # the trend goes on
    falling = ProphetPredictor()
    for v in (50.0, 40.0, 30.0, 20.0, 10.0, 1.0):
        falling.add(v)
    assert falling.predict() == 0.0  # a trend through zero: the planner's max(0, yhat)
    out, err = capfd.readouterr()
    assert "cmdstanpy" not in err + out and "plotly" not in err + out  # no lines a fit from the libraries


def test_dynamo_sla_runs_each_documented_predictor() -> None:
    """`dynamo-sla` (Kalman), `dynamo-sla-constant` and `dynamo-sla-arima` build the same planner with their
    predictor; on a step in the request rate the constant floor follows one interval late, as Dynamo's does."""
    from keda_llm.simulator.hardware.presets import get_preset

    p = get_preset("llama-3.1-8b/h100")
    ctx = AnchorContext(8, 2.0, 0.1, p.perf(), p.replica_config())
    for name, kind in (("dynamo-sla", KalmanPredictor), ("dynamo-sla-constant", ConstantPredictor),
                       ("dynamo-sla-arima", ArimaPredictor), ("dynamo-sla-prophet", ProphetPredictor)):
        if kind in (ArimaPredictor, ProphetPredictor):
            pytest.importorskip("pmdarima" if kind is ArimaPredictor else "prophet")
        ctl = build_anchor(name, ctx)
        assert isinstance(ctl, DynamoPlanner) and ctl.name == name
        assert type(ctl.pred_req) is kind and type(ctl.pred_isl) is kind and type(ctl.pred_osl) is kind
    with pytest.raises(ValueError, match="predictor must be one of"):
        DynamoPlanner("sla", perf=p.perf(), config=p.replica_config(), predictor="moving-average")
    c = build_anchor("dynamo-sla-constant", ctx)
    assert isinstance(c, DynamoPlanner)
    for n in (100.0, 100.0, 4000.0):
        c.pred_req.add(n)
    assert c.pred_req.predict() == 4000.0


@pytest.mark.parametrize(("policy", "module", "extra", "make"), [
    ("dynamo-sla-arima", "pmdarima", "arima", ArimaPredictor),
    ("dynamo-sla-prophet", "prophet", "prophet", ProphetPredictor)])
def test_a_predictor_variant_without_its_extra_is_one_clear_error(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], policy: str, module: str, extra: str,
        make: type[ConstantPredictor]) -> None:
    import sys

    monkeypatch.setitem(sys.modules, module, None)  # what an environment without the extra gives: ImportError
    from keda_llm.cli import main

    assert main(["simulate", "--trace", "azure2023-conv", "--window", "0:60", "--policies", policy,
                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"pip install 'keda-llm[{extra}]'" in err[0], err
    with pytest.raises(ValueError, match=rf"pip install 'keda-llm\[{extra}\]'"):
        make()


def _planner(mode: str = "load", **kw: float) -> DynamoPlanner:
    cfg = ReplicaConfig(max_num_seqs=4, max_num_batched_tokens=64, kv_blocks=10_000, block_size=16,
                        enable_prefix_caching=False)
    return DynamoPlanner(mode, perf=ConstantPerf(base_s=1.0), config=cfg, **kw)  # type: ignore[arg-type]


def test_dynamo_load_rule_all_engines() -> None:
    # ConstantPerf: every iteration 1 s, prefill 1/64 s per token. ITL estimate 1 s per engine.
    p = _planner(ttft_sla_s=5.0, itl_sla_s=2.0)
    assert p.load_step(_sig([2, 2], [0, 0], [0.1, 0.1]), 2, isl=10) == -1  # all under 80% of both SLAs
    p = _planner(ttft_sla_s=5.0, itl_sla_s=0.5)
    assert p.load_step(_sig([2, 2], [0, 0], [0.1, 0.1]), 2, isl=10) == 1  # every engine's ITL 1 s > 0.5
    p = _planner(ttft_sla_s=1.5, itl_sla_s=2.0)
    # TTFT: (waiting + 1) x 64 tokens / 64 per s + 1 s: engine a 2 s > 1.5, engine b 9 s: all over -> +1
    assert p.load_step(_sig([1, 1], [0, 7], [0.1, 0.1]), 2, isl=64) == 1
    p = _planner(ttft_sla_s=2.5, itl_sla_s=2.0)
    assert p.load_step(_sig([1, 1], [0, 7], [0.1, 0.1]), 2, isl=64) == 0  # only one engine over: hold


def test_dynamo_adjustment_interval_and_pending_guard() -> None:
    # ITL SLA far below the 1 s iteration: every allowed load tick adds one pod. Ticks are every 5 s; a step
    # waits for the previous pods to be ready (cold start 10 + 50 s), so +1 at 0, then at 60, 120.
    ctl = _planner(ttft_sla_s=100.0, itl_sla_s=0.01)
    run(trace(list(np.arange(0.0, 150.0, 0.5)), output=20), config(max_num_seqs=4), ctl)
    ups = [(e[0], e[2], e[3]) for e in ctl.events]
    assert ups[:3] == [(0.0, 1, 2), (60.0, 2, 3), (120.0, 3, 4)]
    assert all(t % 5.0 == 0.0 for t, _, _ in ups)


def test_dynamo_sla_throughput_floor() -> None:
    p = _planner("sla", ttft_sla_s=10.0, itl_sla_s=2.0)
    # 360 requests in 180 s = 2/s; prefill 64 tokens at 64 tok/s -> 2 engine-s/s; decode 16 tokens at the
    # best batch within 2 s (4 seqs per 1 s step: 4 tok/s) -> 8 engine-s/s; ceil(2 + 8) = 10 replicas
    assert p.throughput_replicas(360.0, 64.0, 16.0) == 10
    assert p.throughput_replicas(0.0, 64.0, 16.0) == 1


# -- Ray Serve ------------------------------------------------------------------------------------------------
def test_ray_serve_formula() -> None:
    assert ray_desired(10.0, 2, 2.0) == 5
    assert ray_desired(10.0, 2, 2.0, smoothing=0.5) == 4  # ceil(2 x (1 + 1.5 x 0.5))
    assert ray_desired(1.0, 4, 2.0) == 1
    assert ray_desired(3.0, 0, 2.0) == 1


def test_ray_serve_upscale_delay() -> None:
    # 20 requests at 0, 1 s iterations, batch 4: ongoing 20 against 2 per replica wants 10. The decision
    # must hold for upscale_delay_s 30 s: the first scale-up is at 30.
    ctl = RayServe(target=2.0, max_replicas=16)
    run(trace([0.0] * 20, output=40), config(max_num_seqs=4), ctl)
    assert ctl.events[0][0] == 30.0 and ctl.events[0][2] == 1 and ctl.events[0][3] == 10


# -- registry ---------------------------------------------------------------------------------------------------
def test_names_and_knobs() -> None:
    assert set(ANCHORS) <= set(POLICIES)
    assert parse_policy("knative-kpa@35") == ("knative-kpa", 35.0)
    with pytest.raises(ValueError, match="takes no knob"):
        parse_policy("static@3")
    with pytest.raises(ValueError, match="unknown policy"):
        parse_policy("kpa")
    ctl = build_controller("knative-kpa@35", model="m", max_replicas=4, concurrency_target=8, static_replicas=1)
    assert isinstance(ctl, KnativeKpa) and ctl.decider.target == 35.0
    with pytest.raises(ValueError, match="performance model"):
        build_anchor("dynamo-sla", AnchorContext(4))


# -- one short run each on a shipped trace ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def window() -> object:
    from keda_llm.simulator.workload.traces import load_shipped

    return load_shipped("azure2023-conv", seed=0).window(0, 600)


@pytest.mark.parametrize("name", ANCHORS)
def test_anchor_on_a_shipped_window(name: str, window: object) -> None:
    """The first 10 minutes of the Azure 2023 conversation trace on Llama-3.1-8B / L4 (one L4 cannot carry
    it): every request is served and every anchor scales up."""
    from keda_llm.simulator.hardware.presets import get_preset
    from keda_llm.simulator.run import Backtest, run_policies

    (res,), _ = run_policies(window, Backtest(get_preset("llama-3.1-8b/l4"), max_replicas=16), [name])  # type: ignore[arg-type]
    tab = res.request_table()
    assert int(np.isfinite(tab.ttft_s).sum()) == len(tab.ttft_s)
    assert max(res.timeline.desired) > 1
    assert res.timeline.desired[0] == 1
