"""The fluid mode agrees with the detailed mode on the shipped one-hour Azure traces: GPU-hours within 5%
(relative) and SLO attainment within 1 percentage point, for our policy and every baseline.

Four cases on the bursty code trace are compared as ensembles: KEDA's Prometheus scaler on
num_requests_waiting > 5, ours without and with its latency targets, and concurrency. Their outcome hangs on a
few threshold crossings, so the detailed mode itself moves by more than the tolerance (the queue baseline by
40% in GPU-hours) when the arrivals shift by half a second against the control loop's phase (a test below
shows it); the mean over 24 shifts spread across the HPA's 15 s period is what both modes must agree on. The
compiled kernel's arithmetic is checked on hand-computed cases (preemption, the wait for the iteration in flight
and finishes inside the prefill phase among them). A short window per preset (static under the 2024 week's
busiest 10 minutes, concurrency and ours on 20 minutes of azure2023-conv) covers every preset; the full matrix
is scripts/fluid_agreement.py (docs/simulator-results.md, "Fluid vs detailed"), and the discrepancies still
open there are strict xfails here."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sim_helpers import busiest

import keda_llm.simulator.cluster.fluid as fluid
import keda_llm.simulator.cluster.fluid_kernel as k
from keda_llm.simulator.cluster.engine import GAUGE_TIMINGS, Controller, GaugeTiming
from keda_llm.simulator.cluster.fluid import own_prefill
from keda_llm.simulator.control.controllers import PodPlan, ScheduleController
from keda_llm.simulator.control.policies import build_controller
from keda_llm.simulator.hardware.perf import ConstantPerf, step_time
from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.report.summary import Slo, summarize
from keda_llm.simulator.run import Backtest, concurrency_target, simulate
from keda_llm.simulator.workload.traces import Trace, load_shipped

SLO = Slo(ttft_s=2.0, itl_s=0.1)


def _controller(policy: str) -> Controller:
    if policy == "static":
        return ScheduleController("static", [PodPlan(0.0, math.inf, 0.0)] * 2)
    return build_controller(policy, model="m", max_replicas=64, concurrency_target=64, static_replicas=1)


def _as_backtested(policy: str, trace: Trace, bt: Backtest) -> Controller:
    """`policy` as run_policies builds it for the backtests (its cold start, latency targets from the SLO)."""
    p = bt.preset
    return build_controller(policy, model=p.model.name, max_replicas=64,
                            concurrency_target=concurrency_target(trace, bt), static_replicas=1,
                            cold_start_s=p.cold_start(bt.cold_start).quantile(0.9), slo=(SLO.ttft_s, SLO.itl_s))


def _run(trace: Trace, policy: str, mode: str, gauges: GaugeTiming = "leading") -> tuple[float, float, int]:
    bt = Backtest(get_preset("llama-3.1-8b/h100"), slo=SLO, gauges=gauges)
    s = summarize(simulate(trace, bt, _controller(policy), mode), SLO)  # type: ignore[arg-type]
    return s.gpu_hours, s.slo_attainment, s.requests


POLICIES = ("ours", "static", "concurrency", "queue", "gpu")


# concurrency joined them when the prefill cost stopped freezing under a backlog: over six shifts the detailed
# mode's SLO spans 69.8-71.7% and the means agree (fluid -4.1% GPU-h, +0.14 points), one run is 1.02 points off
# queue left them when 8B H100's slice went from 0.25 s to its own 0.102 s (fluid.slice_for): queue scales on the
# engines' waiting count, and a slice admits once per slice, so the count it reports under a burst follows the
# slice. With the sample seeing the slice's arrivals and admission inside a slice (2026-11-30) it stood at
# -8.3% GPU-h / +0.95 points over six shifts of 0-2.5 s, a sixth of the control loop's phase; over SHIFTS_S,
# the whole 15 s period, -1.9% / +0.43 (2026-12-03; ours +0.0% / +0.64, concurrency +0.3% / +0.79).
# docs/simulator-results.md, "Fluid vs detailed".
ENSEMBLE_CASES = (("azure2023-code", "queue"), ("azure2023-code", "ours"), ("azure2023-code", "concurrency"))
ENSEMBLES = list(ENSEMBLE_CASES)


@pytest.mark.parametrize("trace, policy", [
    (t, p) for t in ("azure2023-code", "azure2023-conv") for p in POLICIES if (t, p) not in ENSEMBLE_CASES
])
def test_fluid_agrees_with_detailed(trace: str, policy: str) -> None:
    tr = load_shipped(trace)
    d_gpu_h, d_slo, d_n = _run(tr, policy, "detailed")
    f_gpu_h, f_slo, f_n = _run(tr, policy, "fluid")
    assert f_n == d_n == len(tr)
    assert abs(f_gpu_h - d_gpu_h) <= 0.05 * d_gpu_h
    assert abs(f_slo - d_slo) <= 0.01


#: The arrivals shifted against the control loop's phase: 24 points spread over the HPA's 15 s sync period (the
#: queue baseline's polling interval too), every 0.625 s. Six shifts of 0-2.5 s sampled a sixth of that phase
#: (queue -8.3% GPU-h there, -1.9% over these); twelve every 1.25 s still leave ours with its latency targets
#: at -5.6% / -0.44 or -0.8% / -1.24 depending on the offset, so a run's path noise needs all 24.
SHIFTS_S = tuple(0.625 * k for k in range(24))


def _shifted(trace: Trace, by_s: float) -> Trace:
    return Trace(trace.name, trace.arrival_s + by_s, trace.prompt_tokens, trace.output_tokens)


# and in both gauge timings (SimConfig.gauges): the fluid mode's published counterpart
# (fluid_kernel.published_totals) against the detailed engine's as vLLM publishes them
@pytest.mark.parametrize("gauges", GAUGE_TIMINGS)
@pytest.mark.parametrize("trace, policy", ENSEMBLES)
def test_fluid_agrees_with_detailed_over_control_phases(trace: str, policy: str, gauges: GaugeTiming) -> None:
    tr = load_shipped(trace)
    detailed = [_run(_shifted(tr, by), policy, "detailed", gauges) for by in SHIFTS_S]
    fluid = [_run(_shifted(tr, by), policy, "fluid", gauges) for by in SHIFTS_S]
    d_gpu_h, d_slo = [g for g, _, _ in detailed], [s for _, s, _ in detailed]
    # why an ensemble: a control loop on bursty traffic can make one detailed run alone undetermined within
    # the tolerance (a poll a second earlier starts a replica a burst earlier); the means are what agree
    d_mean, f_mean = float(np.mean(d_gpu_h)), float(np.mean([g for g, _, _ in fluid]))
    assert abs(f_mean - d_mean) <= 0.05 * d_mean
    assert abs(np.mean([s for _, s, _ in fluid]) - np.mean(d_slo)) <= 0.01


def test_ours_with_its_latency_targets_agrees_over_control_phases() -> None:
    # ours as the backtests run it (targets at half the SLO, its cold start) on 8B H100: over six shifts of 0-2.5 s
    # the fluid mode spent 19.8% more GPU-hours (-1.23 points) at first. At the first burst the panic window's mean
    # ITL was 3.064x its target in the detailed mode and 2.995x in the fluid one: 4 replicas against 3, and the
    # paths parted there. Since the kernel admits a prompt arriving inside a slice at the iteration after it
    # (2026-11-30): +3.9% / -1.35; since the panic window's ITL steps by its square root (scaler/slo.py PANIC_STEP,
    # 2026-12-03): -5.5% / -0.19 over those six. A single run's path moves by up to 20% in GPU-hours and 5 points
    # with the phase, so twelve shifts every 1.25 s still swing (-5.6% / -0.44, or -0.8% / -1.24 offset by
    # 0.625 s); over all 24 of SHIFTS_S: -3.2% / -0.84 (docs/simulator-results.md, "Fluid vs detailed")
    tr = load_shipped("azure2023-code")
    bt = Backtest(get_preset("llama-3.1-8b/h100"), cold_start="typical", slo=SLO)
    shifted = [_shifted(tr, by) for by in SHIFTS_S]
    runs = {mode: [summarize(simulate(t, bt, _as_backtested("ours", t, bt), mode), SLO)  # type: ignore[arg-type]
                   for t in shifted] for mode in ("detailed", "fluid")}
    (d_gpu, d_slo), (f_gpu, f_slo) = ((np.mean([s.gpu_hours for s in r]), np.mean([s.slo_attainment for s in r]))
                                      for r in runs.values())
    assert abs(f_gpu - d_gpu) <= 0.05 * d_gpu
    assert abs(f_slo - d_slo) <= 0.01


def test_coefficients_reproduce_step_times() -> None:
    cases = np.array([[1, 100, 101], [300, 5e5, 5e5 + 300], [8192, 1e4, 3e7]], dtype=np.float64)
    for perf in (get_preset("llama-3.1-8b/h100").perf(), get_preset("llama-3.1-70b/h100-tp4").perf(),
                 ConstantPerf(base_s=0.01, per_token_s=1e-5, per_kv_token_s=1e-8)):
        want = perf.step_times(cases[:, 0], cases[:, 1], cases[:, 2])
        coef = k.coefficients(perf)
        got = [k.step_time(coef, *row) for row in cases.tolist()]
        assert got == pytest.approx(want.tolist(), rel=1e-12)


def test_fluid_mode_refuses_a_perf_model_it_cannot_compile() -> None:
    # the kernel compiles whatever the model's coefficients() says, never its type; a model without them,
    # or with another number of them, is refused
    class Other:
        request_latency_s = 0.0

        def step_times(self, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
            return np.asarray(a)

    class Short(Other):
        def coefficients(self) -> np.ndarray:
            return np.zeros(7)

    for perf in (Other(), Short()):
        with pytest.raises(ValueError, match=r"coefficients\(\) of 12 numbers"):
            k.coefficients(perf)  # type: ignore[arg-type]


class Engines:
    """The kernel's arrays for `slots` replicas and a trace of (arrival, prompt, output) rows, with a
    ConstantPerf of 10 ms an iteration: hand-computable. `slack` is the KV a running request holds beyond
    its context (the block rounding; 0: 1-token blocks)."""

    def __init__(self, rows: list[tuple[float, int, int]], slots: int = 1, budget: float = 8192.0,
                 seqs: float = 256.0, kv_cap: float = 1e6, base_s: float = 0.01, per_token_s: float = 0.0,
                 slack: float = 0.0) -> None:
        self.arr = np.array([r[0] for r in rows], dtype=np.float64)
        self.p = np.array([r[1] for r in rows], dtype=np.float64)
        self.o = np.array([r[2] for r in rows], dtype=np.float64)
        perf = ConstantPerf(base_s=base_s, per_token_s=per_token_s)
        self.coef = k.coefficients(perf)
        self.budget, self.seqs, self.kv_cap, self.slack = budget, seqs, kv_cap, slack
        self.own = own_prefill(perf, self.p, budget)  # a prompt's prefill alone: the floor of its TTFT
        self.ints = np.zeros(k.N_INTS, dtype=np.int64)
        self.run_i = np.zeros((2, 64), dtype=np.int64)
        self.run_f = np.zeros((3, 64))
        self.wait_i = np.zeros((2, 64), dtype=np.int64)
        self.wait_f = np.zeros((2, 64))
        self.gain = np.zeros(64)
        self.slots = np.zeros((k.N_SLOT_ROWS, slots))
        self.sc = np.zeros((k.N_SCRATCH, slots))
        self.ttft = np.full(len(rows), np.inf, dtype=np.float32)
        self.tpot = np.full(len(rows), np.nan, dtype=np.float32)

    def route(self, idx: list[int], ready: list[int], rule: int = k.RULE_LEAST) -> None:
        self.ints[k.OPEN] += len(idx)
        k.route(np.array(idx, dtype=np.int64), np.array(ready, dtype=np.int64), rule, self.ints, self.wait_i,
                self.wait_f, self.slots, self.p, self.o, self.kv_cap)

    def step(self, t: float, dt: float = 0.25) -> bool:
        return bool(k.step_slice(t, dt, self.budget, self.seqs, self.kv_cap, self.slack, 0.0, self.coef, self.ints,
                                 self.run_i, self.run_f, self.wait_i, self.wait_f, self.gain, self.slots, self.sc,
                                 self.slots.shape[1], self.p, self.o, self.arr, self.arr, self.own, self.ttft,
                                 self.tpot))

    def advance(self, t: float, t_event: float, ready: list[int], held_n: int = 0,
                dt: float = 0.25) -> tuple[float, int, int, float]:
        out: tuple[float, int, int, float] = k.advance(
            t, dt, t_event, 1e9, held_n, np.array(ready, dtype=np.int64), k.RULE_LEAST, self.budget, self.seqs,
            self.kv_cap, self.slack, 0.0, self.coef, self.ints, self.run_i, self.run_f, self.wait_i, self.wait_f,
            self.gain, self.slots, self.sc, self.slots.shape[1], self.p, self.o, self.arr, self.arr, self.own,
            self.ttft, self.tpot)
        return out

    def decoding_on_slot_0(self, rows: list[tuple[int, float, float]]) -> None:
        """Put trace rows (row, tokens generated, first token time) in flight on slot 0, decoding."""
        for j, (i, gen, first) in enumerate(rows):
            self.run_i[:, j] = (i, 0)
            self.run_f[:, j] = (0.0, gen, first)
        self.ints[k.N_RUN] = len(rows)
        self.ints[k.OPEN] += len(rows)
        self.slots[k.OUTSTANDING, 0] += len(rows)

    def waiting(self) -> list[int]:
        head = int(self.ints[k.HEAD])
        rows = self.wait_i[:, head:head + int(self.ints[k.N_WAIT])]
        # each slot's count of waiting rows (what admission's scan relies on) is the rows' own
        assert self.slots[k.WAITING].tolist() == np.bincount(rows[1], minlength=self.slots.shape[1]).tolist()
        return rows[0].tolist()

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


def test_a_head_blocked_by_the_batch_limit_starts_after_the_first_finisher_inside_the_slice() -> None:
    # two requests decode (batch limit 2); row 0 has 5 tokens left: it finishes after 5 decode iterations of
    # 10 ms, the engine admits the queue's head in the iteration after, and its 100-token prompt takes one
    # 10 ms iteration: first token at 60 ms, inside the slice (not at the next slice's start, 260 ms)
    e = Engines([(0.0, 100, 11), (0.0, 100, 1000), (0.0, 100, 1000)], seqs=2.0)
    e.decoding_on_slot_0([(0, 5.0, 0.0), (1, 5.0, 0.0)])
    e.route([2], [0])
    e.step(0.0)
    assert e.running() == [1, 2] and e.waiting() == []
    assert e.run_f[2, 1] == pytest.approx(0.06)
    assert e.tpot[0] == pytest.approx(0.005)  # row 0's last token at 50 ms (its first set at 0, 10 tokens before)
    # where the first finisher is past the slice's end (30 iterations), the head waits for the next slice
    late = Engines([(0.0, 100, 36), (0.0, 100, 1000), (0.0, 100, 1000)], seqs=2.0)
    late.decoding_on_slot_0([(0, 5.0, 0.0), (1, 5.0, 0.0)])
    late.route([2], [0])
    late.step(0.0)
    assert late.running() == [0, 1] and late.waiting() == [2]


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
    small.wait_f = np.zeros((2, 8))
    assert small.advance(0.0, np.inf, [0])[1] == k.GROW and small.ints[k.NEXT] == 0


def test_an_iteration_longer_than_the_slice_keeps_its_chunk_and_duration() -> None:
    # request 0 decodes (5 tokens done) when the 1000-token prompt of request 1 is admitted; one mixed
    # iteration of 1 + 1000 tokens takes 0.01 + 1e-4 x 1001 = 0.1101 s, longer than the 0.05 s slices
    e = Engines([(-1.0, 10, 1000), (0.0, 1000, 1000)], per_token_s=1e-4)
    e.run_i[:, 0] = (0, 0)
    e.run_f[:, 0] = (0.0, 5.0, -0.9)  # prefilled, 5 tokens after the first, first token at -0.9 s
    e.ints[k.N_RUN] = 1
    e.ints[k.OPEN] = 1
    e.slots[k.OUTSTANDING, 0] = 1.0
    e.route([1], [0])
    tau = 0.01 + 1e-4 * 1001
    e.step(0.0, dt=0.05)
    assert e.running() == [0, 1]  # admitted for the next iteration although the slice is shorter
    assert e.run_f[1, 0] == pytest.approx(5.0 + 0.05 / tau)
    assert e.slots[k.ITER_C, 0] == pytest.approx(1000.0) and e.slots[k.ITER_TAU, 0] == pytest.approx(tau)
    e.step(0.05, dt=0.05)
    assert e.run_f[1, 0] == pytest.approx(5.0 + 0.10 / tau)  # the same iteration: not re-planned smaller
    e.step(0.10, dt=0.05)
    # the iteration ends at tau: request 1's first token, request 0's sixth; then decode iterations of
    # 2 tokens (0.01 + 1e-4 x 2 s) to the slice's end
    assert e.run_f[2, 1] == pytest.approx(tau)
    assert e.run_f[1, 0] == pytest.approx(6.0 + (0.15 - tau) / 0.0102)
    assert e.run_f[1, 1] == pytest.approx((0.15 - tau) / 0.0102)
    assert e.slots[k.ITER_X, 0] == 0.0


def test_an_idle_replica_is_busy_from_its_requests_arrival_not_the_slice_start() -> None:
    # arrives at 0.2 s into an idle replica: first token 0.21 s, second (last) 0.22 s; busy 0.2-0.22 s
    e = Engines([(0.2, 100, 2)])
    e.route([0], [0])
    e.step(0.0)
    assert e.ttft[0] == pytest.approx(0.01) and e.tpot[0] == pytest.approx(0.01)
    assert e.slots[k.BUSY, 0] == pytest.approx(0.02)


@pytest.mark.parametrize("dt_s", [0.1, 0.05])
def test_shorter_slices_converge_on_the_detailed_mode(dt_s: float) -> None:
    # slices shorter than a long prefill iteration once let decoding requests beside it speed up (the
    # iteration re-planned smaller every slice): +3.8 points of SLO at 0.05 s on this trace
    tr = load_shipped("azure2023-code")
    d_gpu_h, d_slo, _ = _run(tr, "static", "detailed")
    bt = Backtest(get_preset("llama-3.1-8b/h100"), slo=SLO, fluid_dt_s=dt_s)
    f = summarize(simulate(tr, bt, _controller("static"), "fluid"), SLO)
    assert abs(f.slo_attainment - d_slo) <= 0.01
    assert f.gpu_hours == pytest.approx(d_gpu_h, rel=1e-3)


def test_the_kernel_compiles_where_numba_has_nowhere_to_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    # a read-only install under a user without a home: numba refuses cache=True; compile per process instead
    from numba.core import caching

    monkeypatch.setattr(caching.CacheImpl, "_locator_classes", [])

    def plus_one(x: float) -> float:
        return x + 1.0

    assert k._jit(plus_one)(1.0) == 2.0


def test_a_prompt_over_the_budget_is_timed_chunk_by_chunk() -> None:
    # budget 1000: the 1500-token prompt runs as 1000 tokens (0.01 + 1e-4 x 1000 = 0.11 s) then the 500 left
    # (0.06 s): first token at 0.17 s, whatever the slice. With slices shorter than the first iteration it is
    # carried into the next slices, but only until it ends: the one after is planned afresh (500 tokens, 0.06
    # s). Handing the carried chunk and duration on to it gave 0.22 s at 0.05 s slices, and under a backlog
    # froze the prefill cost at one prompt's for seconds (docs/simulator-results.md, "Fluid vs detailed").
    for dt in (0.25, 0.5, 0.1, 0.05):
        e = Engines([(0.0, 1500, 2)], budget=1000.0, per_token_s=1e-4)
        assert e.own[0] == pytest.approx(0.17)
        e.route([0], [0])
        t = 0.0
        while e.ints[k.OPEN] and t < 1.0:
            e.step(t, dt=dt)
            t = round(t + dt, 9)
        assert e.ttft[0] == pytest.approx(0.17), dt
        assert e.tpot[0] == pytest.approx(0.0101)  # one decode iteration of 1 token after it
        assert e.slots[k.PROMPT_TOK, 0] == pytest.approx(1500.0)


def test_prompts_sharing_iterations_get_first_tokens_at_iteration_ends() -> None:
    # 800 + 700 tokens, budget 1000: iteration 1 = the 800 and 200 of the 700 (0.11 s); iteration 2 = the
    # 500 left (0.06 s): first tokens at 0.11 and 0.17 s
    e = Engines([(0.0, 800, 2), (0.0, 700, 2)], budget=1000.0, per_token_s=1e-4)
    e.route([0, 1], [0])
    for t in (0.0, 0.25):
        e.step(t)
    assert e.ttft.tolist() == pytest.approx([0.11, 0.17])


def test_first_tokens_of_an_iteration_longer_than_the_slice_land_at_its_end() -> None:
    # 300 + 700 in one 1000-token iteration of 0.11 s, slices of 0.05 s: both first tokens at 0.11 s
    e = Engines([(0.0, 300, 5), (0.0, 700, 5)], budget=1000.0, per_token_s=1e-4)
    e.route([0, 1], [0])
    for t in (0.0, 0.05, 0.10):
        e.step(t, dt=0.05)
    assert e.run_f[2, :2].tolist() == pytest.approx([0.11, 0.11])


def test_own_prefill_is_the_detailed_engines_chunks() -> None:
    perf = get_preset("llama-3.1-70b/h100-tp4").perf()
    p = np.array([4096.0, 8193.0, 17203.0])
    want = []
    for prompt in p:  # chunk k: n new tokens reading the k x 8192 cached, n x offset + n(n+1)/2 pairs
        total, off = 0.0, 0.0
        while off < prompt:
            n = min(8192.0, prompt - off)
            total += float(perf.step_times(np.array([n]), np.array([off]), np.array([n * off + n * (n + 1) / 2]))[0])
            off += 8192.0
        want.append(total)
    assert own_prefill(perf, p, 8192.0).tolist() == pytest.approx(want, rel=1e-12)


def test_requests_held_for_a_replica_get_no_first_token_before_it_is_ready() -> None:
    # arrived at 0.0 and held at the gateway; the replica came up at 0.2 s inside the slice [0, 0.25):
    # prefill from 0.2 s (0.01 s), first token 0.21 s, busy from 0.2 s
    e = Engines([(0.0, 100, 2)])
    e.slots[k.READY_AT, 0] = 0.2
    e.route([0], [0])
    e.step(0.0)
    assert e.ttft[0] == pytest.approx(0.21)
    assert e.slots[k.BUSY, 0] == pytest.approx(0.02)


def test_a_replica_out_of_kv_preempts_its_latest_request_and_recomputes_it_later() -> None:
    # KV 250 tokens, 10 ms iterations, 0.25 s slices (25 iterations). Two decoding requests hold 100 + 20 and
    # 100 + 10 tokens: with one slice of decoding (25 tokens each) they need 280 > 250, so the later one is
    # preempted (vLLM recompute: to the head of the queue, first token and its 10 tokens kept); a slice that
    # preempted admits nobody (vLLM V1: the freed blocks go to the running), so it waits. The first finishes its 39
    # tokens at 0.19 s; in the next slice the second recomputes 110 tokens (one 10 ms iteration, which gives
    # its next token) and decodes 24 more.
    e = Engines([(0.0, 100, 40), (0.0, 100, 100)], kv_cap=250.0)
    e.run_i[:, :2] = [[0, 1], [0, 0]]
    e.run_f[:, 0] = (0.0, 20.0, -0.5)  # first tokens before this slice
    e.run_f[:, 1] = (0.0, 10.0, -0.4)
    e.ints[k.N_RUN] = 2
    e.ints[k.OPEN] = 2
    e.slots[k.OUTSTANDING, 0] = 2.0
    e.step(0.0)
    assert e.ints[k.PREEMPTED] == 1 and e.running() == [] and e.waiting() == [1]
    assert e.wait_f[:, 0].tolist() == [10.0, pytest.approx(-0.4)]
    assert e.ttft[0] == pytest.approx(-0.5) and e.tpot[0] == pytest.approx((0.19 + 0.5) / 39)
    e.step(0.25)
    assert e.running() == [1] and e.ints[k.N_WAIT] == 0
    assert e.run_f[:, 0].tolist() == pytest.approx([0.0, 10.0 + 1.0 + 24.0, -0.4])
    assert e.slots[k.PROMPT_TOK, 0] == pytest.approx(110.0)  # the recomputation counts as prompt tokens (vLLM)


def test_a_replica_that_preempts_admits_only_after_the_decode_iteration_that_preempted() -> None:
    # KV 210 tokens, 10 ms iterations, 0.25 s slices (25 iterations). Decoding requests holding 100 + 20 and
    # 40 + 10 tokens need 170 + 2 x 25 = 220 with a slice of decoding: the later one is preempted. vLLM V1
    # admits no waiting request in the step that preempted (the freed blocks go to the running): that step is
    # one decode iteration of the first (0-10 ms). Then the second fits again beside it (120 + 25 + 50 = 195):
    # it recomputes its 50 tokens in the next iteration (10-20 ms, its next token) and decodes 23 more. When
    # a slice that preempted admitted nobody, a KV-bound L4 replica spent half its time decoding alone and
    # recomputed 2.03x its prompts' tokens against the detailed engine's 2.78x (tests below); when it
    # admitted at the slice's start, the recompute came an iteration early (35 tokens here).
    e = Engines([(0.0, 100, 100), (0.0, 40, 100)], kv_cap=210.0)
    e.decoding_on_slot_0([(0, 20.0, -0.5), (1, 10.0, -0.4)])
    e.step(0.0)
    assert e.ints[k.PREEMPTED] == 1 and e.running() == [0, 1] and e.waiting() == []
    assert e.run_f[:, 1].tolist() == pytest.approx([0.0, 10.0 + 1.0 + 23.0, -0.4])
    assert e.run_f[1, 0] == pytest.approx(20.0 + 1.0 + 1.0 + 23.0)
    assert e.slots[k.PROMPT_TOK, 0] == pytest.approx(50.0)


def test_a_prompt_preempted_inside_an_iteration_leaves_no_iteration_behind() -> None:
    # 5 ms slices, 10 ms iterations, budget 64. A 100-token prompt is admitted beside a decode (150 + 5 of
    # 219 tokens held) and computes half its first chunk (31.5 of 63); the next slice preempts it (the cache
    # cannot hold the rest beside the decode) while the decode finishes. Readmitted at 10 ms on the emptied
    # replica it takes two fresh iterations (64 + 36 tokens): first token at 30 ms. The iteration it was
    # preempted in must not carry over to it (it did when no replica had a prompt pending in between: 35 ms)
    e = Engines([(0.0, 150, 7), (0.0, 100, 10)], kv_cap=219.0, budget=64.0)
    e.decoding_on_slot_0([(0, 5.0, -0.1)])
    e.route([1], [0])
    for n in range(6):
        e.step(0.005 * n, dt=0.005)
        if n == 1:
            assert e.ints[k.PREEMPTED] == 1 and e.running() == [] and e.waiting() == [1]
    assert e.run_f[2, 0] == pytest.approx(0.03)


def test_admission_leaves_the_kv_that_a_slice_of_decoding_takes() -> None:
    # one request decoding with 200 tokens held grows by 25 in the slice: a 30-token prompt fits the 250-token
    # cache now (230) but not beside that growth (255), so it waits instead of being preempted a slice later
    # (admitting into that room only churned: a 70B replica under 500-token prompts at 15/s preempted 1,414
    # times against the detailed engine's 729)
    e = Engines([(0.0, 190, 100), (0.0, 30, 10)], kv_cap=250.0)
    e.decoding_on_slot_0([(0, 10.0, 0.0)])
    e.route([1], [0])
    e.step(0.0)
    assert e.running() == [0] and e.waiting() == [1] and e.ints[k.PREEMPTED] == 0


def test_admission_counts_the_half_block_a_running_request_holds_beyond_its_context() -> None:
    # the case above with a 260-token cache: the 30-token prompt fits beside the decode's 200 tokens and its
    # slice of growth (255) with 1-token blocks, and runs to its end in the slice; with 16-token blocks the
    # running request holds 7.5 more in the mean (262.5), so it waits (counting contexts alone, a KV-bound L4
    # preempted half as often as the engine)
    def beside_one_decoding(slack: float) -> Engines:
        e = Engines([(0.0, 190, 100), (0.0, 30, 10)], kv_cap=260.0, slack=slack)
        e.decoding_on_slot_0([(0, 10.0, 0.0)])
        e.route([1], [0])
        e.step(0.0)
        return e

    e = beside_one_decoding(0.0)
    assert e.waiting() == [] and np.isfinite(e.ttft[1]) and np.isfinite(e.tpot[1])
    e = beside_one_decoding(7.5)
    assert e.running() == [0] and e.waiting() == [1] and e.ints[k.PREEMPTED] == 0


def test_a_long_prompt_is_admitted_when_its_first_chunk_fits() -> None:
    # a slice of one 10 ms iteration, budget 64: 195 tokens held of 270 and the decode's next token, a
    # 100-token prompt's first chunk (63 beside the decode) fits (259) where the whole prompt does not (296);
    # it is admitted and its last 37 tokens wait for the next iteration, as vLLM V1 allocates blocks chunk by
    # chunk. A cache one token short of that chunk (258) holds it back.
    def beside_one_decoding(kv_cap: float) -> Engines:
        e = Engines([(0.0, 190, 100), (0.0, 100, 10)], kv_cap=kv_cap, budget=64.0)
        e.decoding_on_slot_0([(0, 5.0, 0.0)])
        e.route([1], [0])
        e.step(0.0, dt=0.01)
        return e

    e = beside_one_decoding(270.0)
    assert e.running() == [0, 1] and e.run_f[0, 1] == pytest.approx(37.0)
    e = beside_one_decoding(258.0)
    assert e.running() == [0] and e.waiting() == [1]


def test_a_request_arriving_at_a_busy_replica_waits_for_the_iteration_in_flight() -> None:
    # one request decodes in iterations of 0.01 + 1e-4 x 1 = 0.0101 s from the slice's start; a 100-token prompt
    # arriving at 0.1 s waits for the iteration ending at 0.101 s (the 10th), then shares one with the decode:
    # 0.01 + 1e-4 x 101 = 0.0201 s, first token at 0.1211 s (the detailed engine's time), where prefilling it
    # alone at its arrival gave 0.12 s
    e = Engines([(-2.0, 10, 1000), (0.1, 100, 50)], per_token_s=1e-4)
    e.run_i[:, 0] = (0, 0)
    e.run_f[:, 0] = (0.0, 5.0, -1.0)
    e.ints[k.N_RUN] = 1
    e.ints[k.OPEN] = 1
    e.slots[k.OUTSTANDING, 0] = 1.0
    e.route([1], [0])
    e.step(0.0)
    assert e.running() == [0, 1]
    assert e.run_f[2, 1] == pytest.approx(0.1211)
    # an idle replica: the prompt starts at its arrival, alone (0.02 s)
    idle = Engines([(0.1, 100, 50)], per_token_s=1e-4)
    idle.route([0], [0])
    idle.step(0.0)
    assert idle.run_f[2, 0] == pytest.approx(0.12)


# -- a short window per preset (the full matrix: scripts/fluid_agreement.py, docs/simulator-results.md) -----

_WEEK_PEAK: list[Trace] = []


def _peak_10_minutes() -> Trace:
    """The busiest 10 minutes of the Azure 2024 code week (52k requests, 87 per second)."""
    if not _WEEK_PEAK:
        _WEEK_PEAK.append(busiest(load_shipped("azure2024-code"), 10))
    return _WEEK_PEAK[0]


def _run_on(preset: str, trace: Trace, ctl: Controller, mode: str) -> tuple[float, float]:
    bt = Backtest(get_preset(preset), slo=SLO)
    s = summarize(simulate(trace, bt, ctl, mode), SLO)  # type: ignore[arg-type]
    return s.gpu_hours, s.slo_attainment


# static at a count that keeps the replicas loaded (83-99% of the SLO in the fluid mode): the engine model
# under load, with no control loop to turn a small difference into another path. L4 cannot serve the week's
# peak with 64 replicas: it gets the conversation trace's first 20 minutes.
STATIC_CASES = (("llama-3.1-8b/h100", "peak", 10), ("llama-3.1-8b/a100", "peak", 24),
                ("llama-3.1-8b/l4", "conv", 24), ("llama-3.1-70b/h100-tp4", "peak", 24))
# On the 8B presets under the week's peak load the fluid mode's TPOT was high at 0.25 s slices (short outputs
# decoding beside prompts that arrive later in the slice, prefilled from its start), 1.8 and 4.0 SLO points low;
# each preset now gets its own slice (fluid.slice_for: 0.102 s on 8B H100, 0.0592 s on A100): -0.17 and -0.51.
# 70B TP4 agrees at 0.25 s since a carried iteration no longer freezes the prefill cost.


@pytest.mark.parametrize("preset, window, replicas", STATIC_CASES)
def test_fluid_agrees_with_detailed_under_load_on_every_preset(preset: str, window: str, replicas: int) -> None:
    tr = _peak_10_minutes() if window == "peak" else load_shipped("azure2023-conv").window(0.0, 1200.0)
    res = [_run_on(preset, tr, ScheduleController("static", [PodPlan(0.0, math.inf, 0.0)] * replicas), mode)
           for mode in ("detailed", "fluid")]
    (d_gpu_h, d_slo), (f_gpu_h, f_slo) = res
    assert abs(f_gpu_h - d_gpu_h) <= 0.05 * d_gpu_h
    assert abs(f_slo - d_slo) <= 0.01


def test_replicas_out_of_kv_thrash_as_the_detailed_engine_does() -> None:
    """Seven L4 replicas (30,816 KV tokens each) under the conversation trace's first 20 minutes: overloaded
    and out of KV. vLLM V1 admits a prompt when its first chunk fits and preempts the latest as decodes and
    prefills grow; when the fluid mode held a whole prompt's KV from admission beside a slice of decoding
    (V0's rule) it preempted a fraction as often and served the backlog fast: 23.5% of the SLO against the
    detailed engine's 7.7%, mean TPOT 0.107 s against 0.146. With V1's rules: 8.5%, 0.128 s; since a replica
    that preempted admits after the decode iteration that preempted, not a whole slice later: 7.95%, 0.137 s."""
    tr = load_shipped("azure2023-conv").window(0.0, 1200.0)
    bt = Backtest(get_preset("llama-3.1-8b/l4"), slo=SLO)
    runs = [simulate(tr, bt, ScheduleController("static", [PodPlan(0.0, math.inf, 0.0)] * 7), mode)
            for mode in ("detailed", "fluid")]
    (d_slo, f_slo) = (summarize(r, SLO).slo_attainment for r in runs)
    d_tpot, f_tpot = (float(np.nanmean(r.request_table().tpot_s)) for r in runs)
    assert d_slo < 0.15  # the regime: deep in overload
    assert abs(f_slo - d_slo) <= 0.01
    assert abs(f_tpot - d_tpot) <= 0.10 * d_tpot


# (preset, median prompt, median output, requests/s, longest prompt): one L4 replica (30,816 KV tokens,
# 2,048-token chunks) and one 70B TP4 replica (423,856 tokens, 8,192) fed long prompts
LONG_PROMPT_CASES = (("llama-3.1-8b/l4", 2000, 100, 0.8, 8000), ("llama-3.1-70b/h100-tp4", 12000, 400, 1.5, 100_000))


@pytest.mark.parametrize("preset, prompt_tok, output_tok, rate, longest", LONG_PROMPT_CASES)
def test_a_replica_out_of_kv_under_long_prompts_recomputes_as_the_detailed_engine_does(
        preset: str, prompt_tok: int, output_tok: int, rate: float, longest: int) -> None:
    """300 s of long prompts (lognormal, sigma 0.8) on one replica: the cache holds a prompt's first chunk beside
    the decodes but not the rest, so the detailed engine admits it, computes a chunk, preempts it and admits
    it again (L4: 497 preemptions, 2.78x the prompts' tokens prefilled; 70B: 1,523, 3.70x). While a slice
    that preempted admitted nobody the fluid replica decoded alone for the rest of the slice and thrashed
    less (L4: 291, 2.03x; 70B: 408, 1.78x), its mean TPOT 16% and 43% low; admitting after the one decode
    iteration that preempted: 485, 2.58x and 1,461, 3.33x, 4% and 2% low."""
    rng = np.random.default_rng(0)
    n = int(300 * rate)
    arr = np.cumsum(rng.exponential(1 / rate, n))
    prompt = np.clip(rng.lognormal(math.log(prompt_tok), 0.8, n), 16, longest).astype(np.int32)
    output = np.clip(rng.lognormal(math.log(output_tok), 0.8, n), 2, 2000).astype(np.int32)
    tr = Trace("long-prompts", arr, prompt, output)
    bt = Backtest(get_preset(preset), slo=SLO)
    out = []
    for mode in ("detailed", "fluid"):
        res = simulate(tr, bt, ScheduleController("static", [PodPlan(0.0, math.inf, 0.0)]), mode)  # type: ignore[arg-type]
        preempted, computed = res.engine_totals
        out.append((float(np.nanmean(res.request_table().tpot_s)), preempted, computed / float(prompt.sum())))
    (d_tpot, d_pre, d_x), (f_tpot, f_pre, f_x) = out
    assert abs(f_tpot - d_tpot) <= 0.06 * d_tpot
    assert abs(f_pre - d_pre) <= 0.10 * d_pre  # the engine counters the exporter reads agree too
    assert abs(f_x - d_x) <= 0.12 * d_x


@pytest.mark.parametrize("prompt, rate", [(2048, 8.0), (500, 30.0)])
def test_a_prefill_backlog_fills_every_iteration_after_a_carried_one(prompt: int, rate: float) -> None:
    """One 70B TP4 replica behind a prefill backlog (more prompt tokens per second than it prefills; 28-token
    answers): in the detailed engine every iteration carries a full chunk (8,192 tokens, ~0.6 s), so each
    answer's tokens come 0.6 s apart. A slice (0.25 s) ends inside such an iteration; the iteration after the
    carried one is filled from the queue as vLLM fills it. When admission counted the carried remainder
    against the fresh chunk, the next iteration ran short, so fast: TPOT came out 17% low, TTFT 3% high."""
    rng = np.random.default_rng(1)
    arr = np.sort(rng.uniform(0.0, 300.0, int(rate * 300.0)))
    tr = Trace("backlog", arr, np.full(len(arr), prompt, np.int32), np.full(len(arr), 28, np.int32))
    bt = Backtest(get_preset("llama-3.1-70b/h100-tp4"), slo=SLO)
    tabs = [simulate(tr, bt, ScheduleController("one", [PodPlan(0.0, math.inf, 0.0)]), mode).request_table()
            for mode in ("detailed", "fluid")]
    (d_ttft, d_tpot), (f_ttft, f_tpot) = ((np.median(t.ttft_s), np.mean(t.tpot_s)) for t in tabs)
    assert d_tpot > 0.55  # the regime: every decode step beside a full chunk
    assert abs(f_tpot - d_tpot) <= 0.03 * d_tpot
    assert abs(f_ttft - d_ttft) <= 0.03 * d_ttft


# Open: on L4 (a 30,816-token KV cache) concurrency runs its replicas out of KV; the detailed engine preempts
# more often than the fluid mode (which keeps a slice of decoding free) and the path moves (-15% GPU-h).
# ours joined it when its queue became work to drain at the measured prefill rate (scaler/policy.py
# backlog_replicas) instead of KV to hold (fewer L4 replicas, out of KV: detailed 19.1 GPU-h, fluid 13.4),
# left it when its TTFT target (half the SLO, as the backtests run it) came to hold enough replicas for
# first tokens that they no longer ran out of KV, and joined it again when a TTFT over its target came to
# step by its square root (scaler/slo.py TTFT_STEP: detailed 17.47 GPU-h, fluid 13.03). Part of the gap was
# the detailed engine's: it re-admitted the request an iteration had just preempted, which vLLM V1 does not
# (replica.py); with that fixed ours was -2.8% GPU-h and +8.07 points, concurrency -13.7% and -5.48 (were
# -37.7% / +10.48 and -16.5% / -5.81). The fluid mode then took vLLM V1's admission at the edge of the cache
# (a first chunk must fit beside a slice of decoding, not a whole prompt; fluid_kernel._preempt): concurrency
# -6.1% / -1.85 (-4.6% / -2.48 over six shifts of 0.5 s), ours +9.9% / +12.11 in this one run, +4.8% / +3.47
# over six cold-start seeds, where the detailed mode alone spans 11.0-14.2 GPU-h and 56-74% of the SLO. Since
# a replica that preempted admits after that one decode iteration, not a slice later: concurrency -7.2% /
# -0.42 (-3.5% / -1.11 over six shifts), ours +7.6% / +11.60 in this run and +0.2% / +1.71 over seeds 1-6
# (the detailed mode alone 54.6-73.7% of the SLO). Since a slice admits inside it where the engine does (an
# arrival at the iteration after it; a head blocked by the cache or the batch limit after the first requests
# to finish, 2026-11-30): concurrency -1.3% / -0.37 (within the tolerance, no longer an xfail), ours +5.7% /
# +11.61 in this one run. Since the panic window's ITL step (2026-12-03): ours -21.8% / +11.26 in this run, and
# over the 24 shifts of SHIFTS_S -4.3% / +2.89 (the fluid SLO the higher in 17 of 24; over 48, -1.5% / +2.80,
# higher in 40 of 48, about four standard errors): not path noise alone,
# the fluid mode was optimistic for ours at the edge of L4's cache. Since each running request holds half a
# block beyond its context in the kernel's KV sum (the engine's rounding to 16-token blocks; 2026-12-04):
# +2.8% / +0.71 over 24 shifts, and this case passes (docs/simulator-results.md, "Fluid vs detailed").
AUTOSCALER_PARAMS = [(p, pol) for pol in ("concurrency", "ours") for p in (c[0] for c in STATIC_CASES)]
# 70B ours runs one replica or two here since its ITL target moved to 0.56 of the SLO (2026-12-06), and when
# the second one starts turns on the control loop's phase: unshifted, fluid -5.4% GPU-h (1.344 against
# 1.422, both modes far under the 1.72-1.84 of the other 23 shifts); over SHIFTS_S -0.3% / +0.08 points.
AUTOSCALER_ENSEMBLES = {("llama-3.1-70b/h100-tp4", "ours")}


@pytest.mark.parametrize("preset, policy", AUTOSCALER_PARAMS)
def test_fluid_agrees_with_detailed_for_autoscalers_on_every_preset(preset: str, policy: str) -> None:
    # the first 20 minutes of the conversation trace, each policy as run_policies builds it
    tr = load_shipped("azure2023-conv").window(0.0, 1200.0)
    bt = Backtest(get_preset(preset), slo=SLO)
    shifts = SHIFTS_S if (preset, policy) in AUTOSCALER_ENSEMBLES else (0.0,)
    runs = {m: [_run_on(preset, t, _as_backtested(policy, t, bt), m) for t in (_shifted(tr, by) for by in shifts)]
            for m in ("detailed", "fluid")}
    (d_gpu_h, d_slo), (f_gpu_h, f_slo) = ((float(np.mean([g for g, _ in r])), float(np.mean([a for _, a in r])))
                                          for r in runs.values())
    assert abs(f_gpu_h - d_gpu_h) <= 0.05 * d_gpu_h
    assert abs(f_slo - d_slo) <= 0.01


def test_a_request_done_inside_the_prefill_phase_finishes_at_its_mixed_iteration() -> None:
    # 0.5 s slices, budget 1000: a decoding request needing its last token beside a 2500-token prompt (chunks of
    # 999 beside it, 0.01 + 1e-4 x 1000 = 0.11 s each) gets it at the end of the first mixed iteration, 0.11 s;
    # the slice then goes on to decode (0.0102 s iterations). Placing it back from the slice's end at the decode
    # pace put it at 0.26 s.
    e = Engines([(-1.0, 10, 10), (0.0, 2500, 50)], budget=1000.0, per_token_s=1e-4)
    e.run_i[:, 0] = (0, 0)
    e.run_f[:, 0] = (0.0, 8.0, -0.9)
    e.ints[k.N_RUN] = 1
    e.ints[k.OPEN] = 1
    e.slots[k.OUTSTANDING, 0] = 1.0
    e.route([1], [0])
    e.step(0.0, dt=0.5)
    assert e.ttft[0] == pytest.approx(0.1)  # first token at -0.9 s
    assert e.tpot[0] == pytest.approx((0.11 + 0.9) / 9)


def test_each_preset_gets_a_slice_of_at_most_a_share_of_its_full_prefill_iteration() -> None:
    # ConstantPerf: 0.01 s + 1e-4 s per token computed; a 1,000-token budget fills in 0.11 s -> 0.4 x 0.11 = 0.044 s
    perf = ConstantPerf(base_s=0.01, per_token_s=1e-4)
    assert fluid.slice_for(perf, 1000) == pytest.approx(0.044)
    assert fluid.slice_for(perf, 10_000) == 0.25  # 1.01 s: capped at the longest slice
    assert fluid.slice_for(perf, 10_000, longest=0.5) == 0.404
    # the presets: 70B TP4 keeps 0.25 s (one 8,192-token iteration, 0.63 s); the 8B presets get their own
    for name in ("llama-3.1-70b/h100-tp4", "llama-3.1-8b/h100", "llama-3.1-8b/a100"):
        p = get_preset(name)
        budget = p.max_num_batched_tokens
        full = step_time(p.perf(), float(budget), 0.0, budget * (budget + 1) / 2.0)
        want = min(0.25, float(f"{fluid.SLICE_OF_FULL_ITERATION * full:.3g}"))
        assert Backtest(p).fluid_slice_s == pytest.approx(want, rel=1e-3)
    assert Backtest(get_preset("llama-3.1-70b/h100-tp4")).fluid_slice_s == 0.25
    assert Backtest(get_preset("llama-3.1-8b/h100")).fluid_slice_s < 0.125
    # an explicit slice wins; a slice that is not > 0 is refused
    assert Backtest(get_preset("llama-3.1-8b/h100"), fluid_dt_s=0.5).fluid_slice_s == 0.5
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="fluid time slice"):
            Backtest(get_preset("llama-3.1-8b/h100"), fluid_dt_s=bad)


def test_a_sample_inside_a_slice_sees_the_requests_that_arrived_before_it() -> None:
    # one 8B H100 replica behind a prefill backlog (60 prompts of 8,000 tokens at once, about 16 s of prefill);
    # ten more arrive just before the collection at 5 s, inside the slice that collection falls in. The
    # detailed engine has them in its queue at the sample; the fluid mode handles the collection at the
    # slice's start and routed a slice's arrivals only when it stepped the slice, so its sample missed them
    # (10 fewer waiting than the detailed engine's; queue scales on that count)
    bt = Backtest(get_preset("llama-3.1-8b/h100"), slo=SLO)
    dt, at = bt.fluid_slice_s, 5.0
    late = math.floor(at / dt) * dt + 0.5 * (at - math.floor(at / dt) * dt)  # in the slice, before the sample
    arr = np.concatenate([np.zeros(60), np.full(10, late)])
    tr = Trace("backlog", arr, np.full(70, 8000, np.int32), np.full(70, 50, np.int32))
    waiting = []
    for mode in ("detailed", "fluid"):
        tl = simulate(tr, bt, ScheduleController("one", [PodPlan(0.0, math.inf, 0.0)]), mode).timeline  # type: ignore[arg-type]
        waiting.append(tl.waiting[tl.t.index(at)])
    d, f = waiting
    assert d >= 30  # the regime: a backlog the late ten join
    assert abs(f - d) <= 2


def test_the_waiting_rows_behind_a_moving_head_are_the_queue_compacted_each_slice() -> None:
    """Admission scans a replica's queue only until it blocks, and the queue's rows start at a head that moves
    as its front is admitted (preempted requests go in front of it). A twin whose queue is moved back to the
    pool's start after every slice must see the same run: the same first tokens and TPOTs, the same rows
    running and waiting in the same order, the same preemptions; and each slot's count of waiting rows
    (which stops the scan) must be its rows' own throughout. Three replicas short of KV under a runaway
    stream of mixed prompts (seeded) preempt, block and admit in every combination."""
    rng = np.random.default_rng(7)
    n = 600
    arr = np.sort(rng.uniform(0.0, 30.0, n))
    rows = [(float(a), int(rng.integers(20, 400)), int(rng.integers(5, 120))) for a in arr]
    a, b = (Engines(rows, slots=3, budget=256.0, seqs=16.0, kv_cap=1500.0, per_token_s=2e-5) for _ in range(2))
    for e in (a, b):
        e.wait_i, e.wait_f = np.zeros((2, n + 8), dtype=np.int64), np.zeros((2, n + 8))
        e.run_i, e.run_f, e.gain = np.zeros((2, n + 8), np.int64), np.zeros((3, n + 8)), np.zeros(n + 8)
    nxt, t, moved = 0, 0.0, False
    while t < 60.0:
        hi = int(np.searchsorted(arr, t + 0.25))
        for e in (a, b):
            if hi > nxt:
                e.route(list(range(nxt, hi)), [0, 1, 2])
            e.step(t)
        nxt = max(nxt, hi)
        moved = moved or int(a.ints[k.HEAD]) > 0  # the twin's head is always 0
        k.compact(b.ints, b.wait_i, b.wait_f)
        assert a.waiting() == b.waiting() and a.running() == b.running()
        for x, y in ((a.wait_f, b.wait_f), (a.run_f, b.run_f)):
            hx = int(a.ints[k.HEAD]) if x is a.wait_f else 0
            m = int(a.ints[k.N_WAIT] if x is a.wait_f else a.ints[k.N_RUN])
            assert np.array_equal(x[:, hx:hx + m], y[:, :m], equal_nan=True)
        t += 0.25
    assert a.ints[k.PREEMPTED] == b.ints[k.PREEMPTED] > 0 and moved
    assert np.array_equal(a.ttft, b.ttft, equal_nan=True) and np.array_equal(a.tpot, b.tpot, equal_nan=True)
    assert np.isfinite(a.ttft).sum() > n // 2  # the run served most of the stream, with a queue behind it
