"""KEDA's ExternalScaler RPCs, transport-neutral: a request in, an answer or a `StatusError` out.

The one place for the rules of KEDA's protocol, whatever carries it: the gRPC servicer
(scaler/servicer.py) and the simulator's in-process scaler (simulator/control/scaler.py) are adapters that
call these functions and put the answer, or the status, on their transport.

- GetMetricSpec: one metric, named after the model (scaler/names.py), with target `TARGET` = 1;
- GetMetrics: the desired replica count, a whole number; a metric name this ScaledObject does not
  have is NOT_FOUND (matched as KEDA sends it, scaler/names.py `matches`);
- IsActive: the decision's activity (always true without `scaleToZero`);
- StreamIsActive: the trigger metadata is checked when the stream opens; its first message is the
  current activity, with "no data yet" read as inactive (the stream then waits for an activation).

Errors -> status codes (the code's name, as grpc.StatusCode spells it):
- INVALID_ARGUMENT: bad trigger metadata; the message names the key and the value.
- UNAVAILABLE: no usable data (NoUsableData); KEDA and the HPA hold the replica count (KEDA's
  `fallback` applies only where the ScaledObject configures one).
- NOT_FOUND: GetMetrics asked for a metric name this ScaledObject does not have.
Anything else is a bug, not a status of the protocol: it propagates (the servicer answers INTERNAL).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from keda_llm.scaler.activation import ScaledObjectKey
from keda_llm.scaler.config import ConfigError, shown
from keda_llm.scaler.names import matches
from keda_llm.scaler.service import NoUsableData, ScalerService

#: GetMetricSpec's target; GetMetrics answers the desired replica count, so the HPA's AverageValue
#: arithmetic (ceil(sum / target)) lands on our count.
TARGET = 1

INVALID_ARGUMENT = "INVALID_ARGUMENT"
UNAVAILABLE = "UNAVAILABLE"
NOT_FOUND = "NOT_FOUND"


class StatusError(Exception):
    """A call answered with a status other than OK: `code` is a grpc.StatusCode name, `message` its details."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class MetricSpecAnswer:
    """GetMetricSpec's one MetricSpec: send `target` as both targetSize and targetSizeFloat."""

    metric_name: str
    target: int = TARGET


@dataclass(frozen=True)
class MetricValueAnswer:
    """GetMetrics' one MetricValue: `replicas` goes into both the int and the float field (KEDA reads a
    float of exactly 0 as "unset" and falls back to the int field, so a desired 0 is 0 in both;
    kedacore/keda pkg/scalers/external_scaler.go). `active` is the same tick's IsActive."""

    metric_name: str
    replicas: int
    active: bool


def describe_config_error(err: Exception) -> str:
    """INVALID_ARGUMENT's message: names the metadata key and its value."""
    key = getattr(err, "key", None)
    value = getattr(err, "value", None)
    text = str(err)
    if key is not None and str(key) not in text:
        text = f"metadata key {key!r} (value {shown(str(value))}): {text}"
    return f"invalid ScaledObject metadata: {text}"


def status_of(err: Exception, config_error: type[Exception] = ConfigError) -> StatusError | None:
    """The status KEDA understands for an error of the service, or None for anything else (a bug)."""
    if isinstance(err, StatusError):
        return err
    if isinstance(err, config_error):
        return StatusError(INVALID_ARGUMENT, describe_config_error(err))
    if isinstance(err, NoUsableData):
        return StatusError(UNAVAILABLE, str(err))
    return None


def _raise_status(err: Exception, config_error: type[Exception]) -> None:
    status = status_of(err, config_error)
    if status is not None and status is not err:
        raise status from None


def is_active(service: ScalerService, key: ScaledObjectKey, metadata: Mapping[str, str], *,
              config_error: type[Exception] = ConfigError) -> bool:
    """IsActive: always true without scaleToZero, else this tick's decision."""
    try:
        return service.is_active(key, metadata)
    except Exception as err:
        _raise_status(err, config_error)
        raise


def get_metric_spec(service: ScalerService, key: ScaledObjectKey, metadata: Mapping[str, str], *,
                    config_error: type[Exception] = ConfigError) -> MetricSpecAnswer:
    """GetMetricSpec: the metric name depends only on the metadata, never on live data."""
    try:
        return MetricSpecAnswer(service.metric_spec(key, metadata))
    except Exception as err:
        _raise_status(err, config_error)
        raise


def get_metrics(service: ScalerService, key: ScaledObjectKey, metadata: Mapping[str, str], metric_name: str, *,
                config_error: type[Exception] = ConfigError) -> MetricValueAnswer:
    """GetMetrics for `metric_name` (as KEDA sends it): this tick's desired replica count."""
    try:
        entry = service.entry(key, metadata)
    except Exception as err:
        _raise_status(err, config_error)
        raise
    ours = entry.metric_name
    if not matches(metric_name, ours):
        raise StatusError(NOT_FOUND, f"ScaledObject {key} has metric {ours!r}, not {metric_name!r}")
    try:
        answer = service.answer_for(entry)
    except Exception as err:
        _raise_status(err, config_error)
        raise
    return MetricValueAnswer(ours, int(answer.decision.replicas), answer.active)


def open_stream(service: ScalerService, key: ScaledObjectKey, metadata: Mapping[str, str], *,
                config_error: type[Exception] = ConfigError) -> None:
    """StreamIsActive's opening check: the metadata must parse (INVALID_ARGUMENT otherwise)."""
    try:
        service.config(key, metadata)
    except Exception as err:
        _raise_status(err, config_error)
        raise


def stream_first_answer(service: ScalerService, key: ScaledObjectKey, metadata: Mapping[str, str]) -> bool:
    """StreamIsActive's first message: the current activity; no usable data yet reads as inactive (the
    stream waits for an activation rather than fail). Ask after subscribing, so no activation is missed."""
    try:
        return service.is_active(key, metadata)
    except NoUsableData:
        return False
