"""The fluid mode agrees with the detailed mode on the shipped one-hour Azure traces: GPU-hours within 5%
(relative) and SLO attainment within 1 percentage point, for our policy, static provisioning and the
concurrency baseline. (The queue and GPU-utilization baselines' threshold rules amplify small
differences on the bursty code trace; docs/simulator-results.md gives those figures.)"""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.controllers import PodPlan, ScheduleController
from simulator.engine import Controller
from simulator import fluid_kernel as k
from simulator.perf import ConstantPerf
from simulator.policies import build_controller
from simulator.presets import get_preset
from simulator.report import Slo, summarize
from simulator.run import Backtest, simulate
from simulator.traces import load_shipped

SLO = Slo(ttft_s=2.0, itl_s=0.1)


def _controller(policy: str) -> Controller:
    if policy == "static":
        return ScheduleController("static", [PodPlan(0.0, math.inf, 0.0)] * 2)
    return build_controller(policy, model="m", max_replicas=64, concurrency_target=64, static_replicas=1)


@pytest.mark.parametrize("trace, policy", [
    ("azure2023-code", "ours"), ("azure2023-code", "static"), ("azure2023-code", "concurrency"),
    ("azure2023-conv", "ours"), ("azure2023-conv", "static"),
])
def test_fluid_agrees_with_detailed(trace: str, policy: str) -> None:
    tr = load_shipped(trace)
    bt = Backtest(get_preset("llama-3.1-8b/h100"), slo=SLO)
    detailed = summarize(simulate(tr, bt, _controller(policy), "detailed"), SLO)
    fluid = summarize(simulate(tr, bt, _controller(policy), "fluid"), SLO)
    assert fluid.requests == detailed.requests == len(tr)
    assert abs(fluid.gpu_hours - detailed.gpu_hours) <= 0.05 * detailed.gpu_hours
    assert abs(fluid.slo_attainment - detailed.slo_attainment) <= 0.01


def test_coefficients_reproduce_step_times() -> None:
    cases = np.array([[1, 100, 101], [300, 5e5, 5e5 + 300], [8192, 1e4, 3e7]], dtype=np.float64)
    for perf in (get_preset("llama-3.1-8b/h100").perf(), get_preset("llama-3.1-70b/h100-tp4").perf(),
                 ConstantPerf(base_s=0.01, per_token_s=1e-5, per_kv_token_s=1e-8)):
        want = perf.step_times(cases[:, 0], cases[:, 1], cases[:, 2])
        coef = k.coefficients(perf)
        got = [k.step_time(coef, *row) for row in cases.tolist()]
        assert got == pytest.approx(want.tolist(), rel=1e-12)


def test_fluid_mode_refuses_a_perf_model_it_cannot_compile() -> None:
    class Other:
        request_latency_s = 0.0

        def step_times(self, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
            return np.asarray(a)

    with pytest.raises(ValueError, match="PhysicsPerf or ConstantPerf"):
        k.coefficients(Other())  # type: ignore[arg-type]


class Engines:
    """The kernel's arrays for `slots` replicas and a trace of (arrival, prompt, output) rows, with a
    ConstantPerf of 10 ms an iteration: hand-computable."""

    def __init__(self, rows: list[tuple[float, int, int]], slots: int = 1, budget: float = 8192.0,
                 seqs: float = 256.0, kv_cap: float = 1e6, base_s: float = 0.01) -> None:
        self.arr = np.array([r[0] for r in rows], dtype=np.float64)
        self.p = np.array([r[1] for r in rows], dtype=np.float64)
        self.o = np.array([r[2] for r in rows], dtype=np.float64)
        self.coef = k.coefficients(ConstantPerf(base_s=base_s))
        self.budget, self.seqs, self.kv_cap = budget, seqs, kv_cap
        self.own = base_s * np.ceil(self.p / budget)  # a prompt's own prefill, alone, in chunks of the budget
        self.ints = np.zeros(k.N_INTS, dtype=np.int64)
        self.run_i = np.zeros((2, 64), dtype=np.int64)
        self.run_f = np.zeros((3, 64))
        self.wait_i = np.zeros((2, 64), dtype=np.int64)
        self.gain = np.zeros(64)
        self.slots = np.zeros((k.N_SLOT_ROWS, slots))
        self.sc = np.zeros((k.N_SCRATCH, slots))
        self.ttft = np.full(len(rows), np.inf, dtype=np.float32)
        self.tpot = np.full(len(rows), np.nan, dtype=np.float32)

    def route(self, idx: list[int], ready: list[int], rule: int = k.RULE_LEAST) -> None:
        self.ints[k.OPEN] += len(idx)
        k.route(np.array(idx, dtype=np.int64), np.array(ready, dtype=np.int64), rule, self.ints, self.wait_i,
                self.slots, self.p, self.o, self.kv_cap)

    def step(self, t: float, dt: float = 0.25) -> bool:
        return bool(k.step_slice(t, dt, self.budget, self.seqs, self.kv_cap, 0.0, self.coef, self.ints, self.run_i,
                                 self.run_f, self.wait_i, self.gain, self.slots, self.sc, self.slots.shape[1], self.p,
                                 self.o, self.arr, self.own, self.ttft, self.tpot))

    def advance(self, t: float, t_event: float, ready: list[int], held_n: int = 0,
                dt: float = 0.25) -> tuple[float, int, int, float]:
        out: tuple[float, int, int, float] = k.advance(
            t, dt, t_event, 1e9, held_n, np.array(ready, dtype=np.int64), k.RULE_LEAST, self.budget, self.seqs,
            self.kv_cap, 0.0, self.coef, self.ints, self.run_i, self.run_f, self.wait_i, self.gain, self.slots,
            self.sc, self.slots.shape[1], self.p, self.o, self.arr, self.own, self.ttft, self.tpot)
        return out

    def waiting(self) -> list[int]:
        return self.wait_i[0, :self.ints[k.N_WAIT]].tolist()

    def running(self) -> list[int]:
        return self.run_i[0, :self.ints[k.N_RUN]].tolist()


def test_one_request_gets_its_first_token_and_finishes_inside_the_slice() -> None:
    # prompt 100 in one 10 ms iteration (first token at 10 ms), then 10 decode iterations of 10 ms: done at 110 ms
    e = Engines([(0.0, 100, 11)])
    e.route([0], [0])
    assert e.slots[k.OUTSTANDING, 0] == 1.0 and e.waiting() == [0]
    assert e.step(0.0) is False
    assert e.ttft[0] == pytest.approx(0.01) and e.tpot[0] == pytest.approx(0.01)
    assert e.ints[k.N_RUN] == 0 and e.ints[k.N_WAIT] == 0 and e.ints[k.OPEN] == 0
    s = e.slots[:, 0]
    assert s[k.PROMPT_TOK] == pytest.approx(100.0) and s[k.GEN_TOK] == pytest.approx(11.0)
    assert s[k.FINISHED] == 1.0 and s[k.OUTSTANDING] == 0.0
    assert s[k.BUSY] == pytest.approx(0.11)  # idle after its last token, not the whole slice
    assert s[k.TTFT_SUM] == pytest.approx(0.01) and s[k.TTFT_N] == 1.0
    assert s[k.ITL_SUM] == pytest.approx(0.10) and s[k.ITL_N] == 10.0


def test_chunked_prefill_takes_two_iterations_for_a_prompt_over_the_budget() -> None:
    # budget 64: the 100-token prompt needs chunks of 64 + 36, first token after 2 iterations (20 ms)
    e = Engines([(0.0, 100, 50)], budget=64.0)
    e.route([0], [0])
    e.step(0.0)
    assert e.running() == [0]
    assert e.run_f[0, 0] == 0.0 and e.run_f[2, 0] == pytest.approx(0.02)
    # decoding from 20 ms to the slice's end: 23 tokens after the first
    assert e.run_f[1, 0] == pytest.approx(23.0)
    e.step(0.25)  # 25 more: 48 of the 49 after the first
    assert e.run_f[1, 0] == pytest.approx(48.0) and e.ttft[0] == np.inf
    e.step(0.5)
    assert e.ttft[0] == pytest.approx(0.02) and e.tpot[0] == pytest.approx(0.01)  # last token at 0.51 s


def test_admission_stops_at_the_batch_limit_fifo() -> None:
    e = Engines([(0.0, 10, 1000)] * 3, seqs=2.0)
    e.route([0, 1, 2], [0])
    e.step(0.0)
    assert e.running() == [0, 1] and e.waiting() == [2]


def test_admission_stops_where_the_kv_cache_is_full() -> None:
    e = Engines([(0.0, 100, 50)] * 3, kv_cap=250.0)
    e.route([0, 1, 2], [0])
    e.step(0.0)
    assert e.running() == [0, 1] and e.waiting() == [2]  # 100 + 100 fit in 250, a third does not


def test_a_request_bigger_than_the_whole_kv_cache_is_dropped_at_routing() -> None:
    e = Engines([(0.0, 200, 100), (0.0, 10, 10)], kv_cap=250.0)
    e.route([0, 1], [0])
    assert e.ints[k.DROPPED] == 1 and e.ints[k.OPEN] == 1 and e.waiting() == [1]


def test_least_outstanding_routing_ties_to_the_oldest_and_round_robin_cycles() -> None:
    e = Engines([(0.0, 10, 10)] * 4, slots=3)
    e.slots[k.OUTSTANDING, :] = [2.0, 0.0, 1.0]
    e.route([0, 1, 2, 3], [0, 1, 2])
    assert e.wait_i[1, :4].tolist() == [1, 1, 2, 0]
    assert e.slots[k.OUTSTANDING].tolist() == [3.0, 2.0, 2.0]
    rr = Engines([(0.0, 10, 10)] * 4, slots=3)
    rr.route([0, 1, 2, 3], [0, 1, 2], k.RULE_ROUND_ROBIN)
    assert rr.wait_i[1, :4].tolist() == [0, 1, 2, 0] and rr.ints[k.RR] == 1


def test_a_draining_replica_reports_when_its_last_request_finishes() -> None:
    e = Engines([(0.0, 100, 11)])
    e.route([0], [0])
    e.slots[k.DRAINING, 0] = 1.0
    assert e.step(0.0) is True
    assert e.slots[k.DRAINED, 0] == 1.0 and e.slots[k.LAST_BUSY, 0] == pytest.approx(0.11)


def test_advance_stops_for_events_held_arrivals_room_and_the_end() -> None:
    e = Engines([(0.1, 100, 11), (2.0, 100, 11)])
    # no ready replica: the first arrival is held, after its slice
    t, reason, flags, at = e.advance(0.0, np.inf, [])
    assert (t, reason, flags, at) == (0.25, k.AFTER_SLICE, k.HELD, 0.0)
    assert (e.ints[k.HELD_LO], e.ints[k.HELD_HI]) == (0, 1)
    e.ints[k.OPEN] -= 1  # the gateway dropped it (as the simulation would after max_wait_s)
    # idle: skips whole slices to the next arrival's, but stops for an event due first
    t, reason, _, _ = e.advance(0.25, 1.3, [0])
    assert (t, reason) == (1.25, k.EVENT)
    t, reason, flags, at = e.advance(1.25, np.inf, [0])
    assert reason == k.AFTER_SLICE and flags == k.DONE and at == 2.0 and t == 2.25
    assert e.ttft[1] == pytest.approx(0.01) and e.ttft[0] == np.inf
    small = Engines([(0.0, 10, 10)] * 100)
    small.run_i, small.run_f, small.wait_i = np.zeros((2, 8), np.int64), np.zeros((3, 8)), np.zeros((2, 8), np.int64)
    assert small.advance(0.0, np.inf, [0])[1] == k.GROW and small.ints[k.NEXT] == 0
