"""KEDA + HPA control loop emulator: how a ScaledObject's replica count evolves, on a simulated clock.

`scaledobject` reads and validates real ScaledObject YAML, `keda` is the KEDA operator's side
(polling, activation, cooldown, fallback, pushes), `hpa` the HPA controller's algorithm, `loop` puts
them on one clock, and `grpc_scaler` drives a real ExternalScaler gRPC server through the same calls.
"""

from keda_llm.simulator.control.hpa import Behavior, HPAConfig, HPAResult, HPAState, ScalingPolicy, ScalingRules
from keda_llm.simulator.control.inprocess import CallbackScaler
from keda_llm.simulator.control.keda import (
    ControlEvent,
    ExternalScaler,
    MetricSpec,
    MetricValue,
    ScaledObjectRef,
    ScalerUnavailable,
)
from keda_llm.simulator.control.loop import KedaHpaLoop, WorkloadStatus
from keda_llm.simulator.control.scaledobject import (
    Fallback,
    KedaSettings,
    ScaledObjectError,
    Trigger,
    load_scaledobject,
    parse_scaledobjects,
)

__all__ = [
    "Behavior",
    "CallbackScaler",
    "ControlEvent",
    "ExternalScaler",
    "Fallback",
    "HPAConfig",
    "HPAResult",
    "HPAState",
    "KedaHpaLoop",
    "KedaSettings",
    "MetricSpec",
    "MetricValue",
    "ScaledObjectError",
    "ScaledObjectRef",
    "ScalerUnavailable",
    "ScalingPolicy",
    "ScalingRules",
    "Trigger",
    "WorkloadStatus",
    "load_scaledobject",
    "parse_scaledobjects",
]
