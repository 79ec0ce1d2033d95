"""An in-process ExternalScaler for the simulator and the demo: a decision function on the simulated clock.

keda-llm's scaler answers GetMetricSpec with target 1 and GetMetrics with the desired replica count
(DESIGN.md, "Decision semantics"); this adapter gives a policy running in the same process the same
contract, so the emulator applies KEDA's and the HPA's rules to it exactly as to the real server.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from keda_llm.simulator.control.keda import CallPath, MetricSpec, MetricValue, ScaledObjectRef, ScalerUnavailable

#: (desired replicas, active) at a time, or None for "no usable data" (answered UNAVAILABLE)
DecideFn = Callable[[float], "tuple[int, bool] | None"]


@dataclass
class CallbackScaler:
    """ExternalScaler + CallChainAware: asks `decide(now)` once per call chain and answers from it."""

    decide: DecideFn
    metric_name: str = "desired-replicas"
    now: float = 0.0
    _answer: tuple[int, bool] | None = None

    def begin(self, path: CallPath, now: float) -> None:
        self.now = now
        self._answer = self.decide(now)

    def _current(self) -> tuple[int, bool]:
        if self._answer is None:
            raise ScalerUnavailable("UNAVAILABLE", f"no usable data at t={self.now:g}s")
        return self._answer

    def get_metric_spec(self, ref: ScaledObjectRef) -> Sequence[MetricSpec]:
        return [MetricSpec(self.metric_name, target_size_float=1.0, target_size=1)]

    def get_metrics(self, ref: ScaledObjectRef, metric_name: str) -> Sequence[MetricValue]:
        replicas, _ = self._current()
        return [MetricValue(self.metric_name, metric_value_float=float(replicas), metric_value=replicas)]

    def is_active(self, ref: ScaledObjectRef) -> bool:
        return self._current()[1]
