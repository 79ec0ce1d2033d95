"""NVIDIA Dynamo's planner (ai-dynamo/dynamo planner docs at 063cc94: docs planner-guide.md and
planner-design.md; components/planner core/load/predictors.py, planner_core.py, defaults.py), for an
aggregated deployment (one engine does prefill and decode, as the simulator's replicas do).

Two loops, each on its own adjustment interval (planner-guide.md, PlannerConfig):

- load-based (reactive; `dynamo-load`), every `load_adjustment_interval` 5 s: for every engine, estimate
  TTFT and ITL at its current load from its forward-pass metrics (an online regression of iteration time on
  scheduled tokens and KV tokens; the aggregated mode fits both). Scale +1 when *every* engine's estimate
  exceeds the SLA (TTFT or ITL); -1 when every engine is below SLA x `load_scaling_down_sensitivity` 80%.
  No new step while a previous one is pending (pods starting).
- throughput-based (predictive; with the load loop in `dynamo-sla`, as planner-guide.md recommends for
  bursty traffic: "throughput-based provides a capacity floor, load-based handles bursts above it"), every
  `throughput_adjustment_interval` 180 s: forecast the next interval's request count, mean ISL and mean
  OSL from the frontend's metrics with a predictor (`constant`, `arima` default, `kalman`, `prophet`);
  replicas = prefill load / profiled prefill throughput + decode load / profiled decode throughput at the
  ITL SLA (the aggregated engine time-shares both), rounded up, at least `min_endpoint` 1, at most the GPU
  budget. The result is a floor the load loop can only exceed.

Predictors (components/src/dynamo/planner/core/load/predictors.py at 260b6ae, config/defaults.py): each
skips the zeros before the first non-zero value (an idle start) and reads a non-finite value as 0.
`constant` (next = last); `kalman`, a local linear-trend Kalman filter (state level and trend; q_level 1.0,
q_trend 0.1, r 10; the planner's filter forecasts from its first point, here fewer than `kalman_min_points` 5
give the last value: a run's first four intervals, inside the backtests' lead-in); `arima`, the documented
default: pmdarima's `auto_arima` with its defaults, fitted once on the history when it holds 5 values that
are not all equal, then updated with each new value, refitted on log1p of the values where the first fit is
of order (0, d, 0); `prophet`: Prophet with its defaults refitted every interval on the last 50 values
(`prophet_window_size`). ARIMA and Prophet run the libraries the planner calls (the `arima` and `prophet`
extras). `dynamo-sla` runs the Kalman filter and `dynamo-sla-constant` the constant one, both in the
frontier tables; `dynamo-sla-arima` and `dynamo-sla-prophet` are measured beside them (bench/README.md: their
cost per fit). SLA defaults TTFT 500 ms,
ITL 50 ms (planner-guide.md); the backtest passes its own SLO, as a user configures theirs. The ITL SLA is
the knob.

Simplified: the forward-pass regression is replaced by the simulator's own performance model evaluated at
each engine's batch and KV (what the regression converges to), and TTFT is estimated as the prefill of its
queue (queued requests + 1 at the mean ISL) plus one iteration; the profiles come from the same model (the
profiler's role); frontend request counts and ISL/OSL are read from the trace's arrivals (a request's OSL is
known at arrival here, at completion in Dynamo); no correction factors, KV-hit or speculative features;
`max_gpu_budget` (8 by default, a cluster size) is set to the backtest's replica cap.
"""

from __future__ import annotations

import logging
import math
import warnings
from typing import Any, Literal

import numpy as np

from keda_llm.simulator.cluster.engine import Simulation
from keda_llm.simulator.control.anchors.base import OwnLoopController, Signals
from keda_llm.simulator.hardware.perf import PerfModel
from keda_llm.simulator.hardware.replica import ReplicaConfig

LOAD_INTERVAL_S = 5.0
THROUGHPUT_INTERVAL_S = 180.0
DOWN_SENSITIVITY = 0.8
TTFT_SLA_S = 0.5
ITL_SLA_S = 0.05
KALMAN_Q_LEVEL, KALMAN_Q_TREND, KALMAN_R, KALMAN_MIN_POINTS = 1.0, 0.1, 10.0, 5
ARIMA_MIN_POINTS = 5  # predictors.py: minimum_data_points (ARIMA's and Prophet's)
PROPHET_WINDOW = 50  # defaults.py: prophet_window_size


class ConstantPredictor:
    """Next value = the last one seen (0 before any). As every predictor of the planner's: a non-finite
    value counts as 0, and the zeros before the first non-zero value (the idle start) are skipped."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def add(self, value: float) -> None:
        value = float(value) if math.isfinite(value) else 0.0
        if value == 0.0 and not any(self.values):
            return
        self.values.append(value)

    def predict(self) -> float:
        return self.values[-1] if self.values else 0.0


def _missing(module: str, extra: str) -> ValueError:
    """What a predictor whose library is not installed says: the extra that brings it."""
    return ValueError(f"the {extra} predictor runs {module} (as Dynamo's planner does), which is not installed: "
                      f"pip install 'keda-llm[{extra}]'")


class ArimaPredictor(ConstantPredictor):
    """pmdarima's `auto_arima` with its defaults, fitted once on every value so far when there are
    ARIMA_MIN_POINTS and they are not all equal (all equal: that value; fewer: the last), then updated with
    each new value (`update`, the order kept); one step ahead, at least 0. A first fit of order (0, d, 0) is
    fitted again on log1p of the values and forecasts in that space (the planner's fallback for spiky series).
    A fit or forecast that fails, or gives no finite number, gives the last value, as the planner's does."""

    def __init__(self) -> None:
        super().__init__()
        try:  # the `arima` extra: imported only where the predictor is asked for
            import pmdarima  # type: ignore[import-untyped]
        except ImportError:
            raise _missing("pmdarima", "arima") from None
        self._pm: Any = pmdarima
        self.model: Any = None
        self.log = False
        self._pending: list[float] = []

    def add(self, value: float) -> None:
        n = len(self.values)
        super().add(value)
        if len(self.values) > n:
            self._pending.append(max(0.0, self.values[-1]))

    def predict(self) -> float:
        vals = self.values
        if len(vals) < ARIMA_MIN_POINTS:
            return super().predict()
        if len(set(vals)) == 1:
            return vals[0]
        with warnings.catch_warnings():  # "completely constant", convergence: the planner suppresses them too
            warnings.simplefilter("ignore")
            try:
                if self.model is None:
                    self.log, self.model = False, self._fit(vals)
                    p, _, q = self.model.order
                    if p == 0 and q == 0:  # swapped in only once fitted, as the planner does
                        self.log, self.model = True, self._fit([math.log1p(v) for v in vals])
                elif self._pending:
                    self.model.update([math.log1p(v) for v in self._pending] if self.log else self._pending)
                self._pending = []
                value = float(np.asarray(self.model.predict(n_periods=1))[0])
            except Exception:  # the planner falls back to the last value on any failure here
                self._pending = []
                return super().predict()
        value = math.expm1(value) if self.log else value
        return max(0.0, value) if math.isfinite(value) else super().predict()

    def _fit(self, values: list[float]) -> Any:
        return self._pm.auto_arima(np.array(values), suppress_warnings=True, error_action="ignore")


class ProphetPredictor(ConstantPredictor):
    """Prophet with its defaults fitted on the last PROPHET_WINDOW values, each stamped one throughput interval
    after the one before from a fixed start, and asked for the next stamp; at least 0. Fewer than
    ARIMA_MIN_POINTS values (the planner's minimum for both): the last one. Refitted at every interval."""

    def __init__(self, interval_s: float = THROUGHPUT_INTERVAL_S) -> None:
        super().__init__()
        logging.getLogger("prophet.plot").disabled = True  # "Importing plotly failed": no plots are drawn here
        for name in ("prophet", "cmdstanpy"):  # two INFO lines a fit otherwise; the planner silences them too
            log = logging.getLogger(name)
            if not log.handlers:  # cmdstanpy sets its logger to DEBUG with an INFO handler only where it has none
                log.addHandler(logging.NullHandler())
            log.setLevel(logging.WARNING)
        try:  # the `prophet` extra (pandas comes with it)
            import pandas  # type: ignore[import-untyped]
            import prophet
        except ImportError:
            raise _missing("prophet", "prophet") from None
        self._prophet: Any = prophet
        self._pd: Any = pandas
        self.interval_s = interval_s
        self.step = 0  # the stamp of the next value, in intervals

    def add(self, value: float) -> None:
        n = len(self.values)
        super().add(value)
        if len(self.values) > n:
            self.step += 1
            del self.values[:-PROPHET_WINDOW]

    def predict(self) -> float:
        if len(self.values) < ARIMA_MIN_POINTS:
            return super().predict()
        start = np.datetime64("2024-01-01T00:00:00")
        stamps = start + (np.arange(self.step - len(self.values), self.step + 1) * self.interval_s).astype(
            "timedelta64[s]")
        with warnings.catch_warnings():  # the library's own deprecations, once a fit
            warnings.simplefilter("ignore")
            model = self._prophet.Prophet()
            model.fit(self._pd.DataFrame({"ds": stamps[:-1], "y": self.values}))
            value = float(model.predict(self._pd.DataFrame({"ds": stamps[-1:]}))["yhat"].iloc[0])
        return max(0.0, value) if math.isfinite(value) else super().predict()


class KalmanPredictor(ConstantPredictor):
    """Local linear-trend Kalman filter; one step ahead. Leading zeros are skipped; fewer than 5 points
    fall back to the last value."""

    def predict(self) -> float:
        ys = self.values
        if len(ys) < KALMAN_MIN_POINTS:
            return ys[-1] if ys else 0.0
        f = np.array([[1.0, 1.0], [0.0, 1.0]])
        q = np.diag([KALMAN_Q_LEVEL, KALMAN_Q_TREND])
        x = np.array([ys[0], 0.0])
        p = np.eye(2) * 1e3
        for y in ys[1:]:
            x = f @ x
            p = f @ p @ f.T + q
            s = p[0, 0] + KALMAN_R
            k = p[:, 0] / s
            x = x + k * (y - x[0])
            p = p - np.outer(k, p[0, :])
        return max(0.0, float(x[0] + x[1]))


#: the predictors the planner documents that run here, by the name its config gives them
PREDICTORS: dict[str, type[ConstantPredictor]] = {"constant": ConstantPredictor, "kalman": KalmanPredictor,
                                                  "arima": ArimaPredictor, "prophet": ProphetPredictor}


def prefill_tokens_per_s(perf: PerfModel, isl: float) -> float:
    """Profiled prefill throughput of one engine for prompts of `isl` tokens."""
    n = max(1.0, isl)
    t = float(perf.step_times(np.array([n]), np.array([0.0]), np.array([n * (n + 1) / 2]))[0])
    return n / max(t, 1e-9)


def decode_tokens_per_s(perf: PerfModel, config: ReplicaConfig, context: float, itl_s: float) -> float:
    """Profiled decode throughput of one engine at the largest batch whose iteration meets the ITL SLA."""
    b = np.arange(1, config.max_num_seqs + 1, dtype=np.float64)
    kv = b * max(1.0, context)
    t = perf.step_times(b, kv, kv + b)
    ok = (t <= itl_s) & (kv <= config.kv_capacity_tokens)
    best = int(b[ok].max()) if ok.any() else 1
    return best / max(float(t[best - 1]), 1e-9)


def disaggregated_replicas(perf: PerfModel, config: ReplicaConfig, rate: float, isl: float, osl: float,
                           itl_sla_s: float) -> tuple[int, int]:
    """The throughput planner in disaggregated mode (planner-design.md): each pool on its own profile,
    prefill replicas = rate x ISL / profiled prefill tokens/s, decode replicas = rate x OSL / profiled decode
    tokens/s at the ITL SLA, each rounded up, at least 1 (the aggregated planner above sums the two into
    one pool). As above: no correction factors. simulator/pools.py runs it every throughput interval."""
    if rate <= 0:
        return 1, 1
    p = math.ceil(rate * isl / prefill_tokens_per_s(perf, isl) - 1e-9)
    d = math.ceil(rate * osl / decode_tokens_per_s(perf, config, isl + osl / 2, itl_sla_s) - 1e-9)
    return max(1, p), max(1, d)


class DynamoPlanner(OwnLoopController):
    """Dynamo's planner: `mode="load"` (load loop only) or `"sla"` (throughput floor + load loop)."""

    def __init__(self, mode: Literal["load", "sla"], *, perf: PerfModel, config: ReplicaConfig,
                 ttft_sla_s: float = TTFT_SLA_S, itl_sla_s: float = ITL_SLA_S, max_replicas: int = 64,
                 predictor: str = "kalman", load_interval_s: float = LOAD_INTERVAL_S,
                 throughput_interval_s: float = THROUGHPUT_INTERVAL_S) -> None:
        if mode not in ("load", "sla"):
            raise ValueError(f"Dynamo planner mode must be load or sla, got {mode!r}")
        if not (ttft_sla_s > 0 and itl_sla_s > 0):
            raise ValueError(f"Dynamo SLA targets must be > 0, got {ttft_sla_s}, {itl_sla_s}")
        suffix = "" if mode == "load" or predictor == "kalman" else f"-{predictor}"  # the anchor's name
        super().__init__(f"dynamo-{mode}{suffix}", scrape_s=load_interval_s, tick_s=load_interval_s, initial_replicas=1,
                         min_replicas=1, max_replicas=max_replicas)
        self.mode = mode
        self.perf, self.config = perf, config
        self.ttft_sla, self.itl_sla = ttft_sla_s, itl_sla_s
        self.throughput_s = throughput_interval_s
        if predictor not in PREDICTORS:
            raise ValueError(f"Dynamo predictor must be one of {', '.join(PREDICTORS)}, got {predictor!r}")
        make = PREDICTORS[predictor]
        args = (throughput_interval_s,) if make is ProphetPredictor else ()  # its stamps are the intervals
        self.pred_req, self.pred_isl, self.pred_osl = make(*args), make(*args), make(*args)
        self.floor = 1
        self._next_throughput = 0.0
        self._latest: Signals | None = None
        budget = float(config.max_num_batched_tokens)
        self._prefill_s_per_token = float(perf.step_times(np.array([budget]), np.array([0.0]),
                                                          np.array([budget * (budget + 1) / 2]))[0]) / budget

    def sample(self, sim: Simulation, sig: Signals) -> None:
        self._latest = sig

    def _frontend(self, sim: Simulation, start: float, end: float) -> tuple[int, float, float]:
        """Requests that reached the frontend in (start, end], their mean ISL and OSL."""
        arr = sim.trace.arrival_s
        lo, hi = int(np.searchsorted(arr, start, "right")), int(np.searchsorted(arr, end, "right"))
        if hi <= lo:
            return 0, 0.0, 0.0
        return (hi - lo, float(np.mean(sim.trace.prompt_tokens[lo:hi])),
                float(np.mean(np.maximum(1, sim.trace.output_tokens[lo:hi]))))

    def throughput_replicas(self, requests: float, isl: float, osl: float) -> int:
        """planner_core: prefill + decode load over the interval against the profiled per-engine rates."""
        if requests <= 0:
            return 1
        rate = requests / self.throughput_s
        prefill = rate * isl / prefill_tokens_per_s(self.perf, isl)
        decode = rate * osl / decode_tokens_per_s(self.perf, self.config, isl + osl / 2, self.itl_sla)
        return max(1, math.ceil(prefill + decode - 1e-9))

    def estimates(self, sig: Signals, isl: float) -> tuple[list[float], list[float]]:
        """Per engine: (estimated TTFT, estimated ITL) at its current batch and KV."""
        cap = sig.kv_capacity_tokens
        ttft, itl = [], []
        for run, wait, kv in zip(sig.running, sig.waiting, sig.kv, strict=True):
            kv_tok = kv * cap
            step = float(self.perf.step_times(np.array([max(1.0, run)]), np.array([kv_tok]),
                                              np.array([kv_tok + run]))[0])
            itl.append(step)
            ttft.append((wait + 1.0) * max(1.0, isl) * self._prefill_s_per_token + step)
        return ttft, itl

    def load_step(self, sig: Signals, spec: int, isl: float) -> int:
        """+1 when every engine misses the SLA, -1 when every engine is under SLA x 80%, else 0."""
        if not sig.ready:
            return 1 if sig.gateway_pending > 0 else 0
        ttft, itl = self.estimates(sig, isl)
        if all(t > self.ttft_sla for t in ttft) or all(i > self.itl_sla for i in itl):
            return 1
        if all(t < self.ttft_sla * DOWN_SENSITIVITY for t in ttft) and all(
                i < self.itl_sla * DOWN_SENSITIVITY for i in itl):
            return -1
        return 0

    def decide(self, sim: Simulation) -> int | None:
        now = sim.now
        spec, ready = self.counts(sim)
        if self.mode == "sla" and now >= self._next_throughput - 1e-9:
            n, isl, osl = self._frontend(sim, now - self.throughput_s, now)
            self.pred_req.add(n)
            if n:
                self.pred_isl.add(isl)
                self.pred_osl.add(osl)
            self.floor = min(self.max_replicas, self.throughput_replicas(
                self.pred_req.predict(), self.pred_isl.predict(), self.pred_osl.predict()))
            self._next_throughput = now + self.throughput_s
            if self.floor > spec:
                self.reason = "throughput floor"
                return self.floor
        if spec > ready or self._latest is None:
            return None  # a previous step is pending
        _, isl, _ = self._frontend(sim, now - 60.0, now)
        step = self.load_step(self._latest, spec, isl)
        want = max(self.floor if self.mode == "sla" else 1, spec + step)
        self.reason = {1: "load +1", -1: "load -1", 0: "load hold"}[step]
        return want
