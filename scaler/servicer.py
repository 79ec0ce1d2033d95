"""KEDA's ExternalScaler service over grpc.aio: translates RPCs to ScalerService calls and errors to codes.

Status codes carry meaning for KEDA and the HPA:
- INVALID_ARGUMENT: bad trigger metadata; the message names the key and the value.
- UNAVAILABLE: no usable data; KEDA and the HPA hold the replica count (KEDA's `fallback` applies only
  where the ScaledObject configures one).
- NOT_FOUND: GetMetrics asked for a metric name this ScaledObject does not have.
- RESOURCE_EXHAUSTED: a StreamIsActive replaced by a newer stream for the same ScaledObject.
- UNIMPLEMENTED: StreamMetricSpec (KEDA then polls GetMetricSpec, as every released KEDA does).

All handlers are coroutines on one event loop and answer from memory, so an open StreamIsActive costs
an idle coroutine, not a thread: thousands of streams cannot starve the unary calls.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any, NoReturn

import grpc

from keda_llm.scaler.activation import ScaledObjectKey
from keda_llm.scaler.externalscaler import externalscaler_pb2 as pb
from keda_llm.scaler.externalscaler import externalscaler_pb2_grpc as pb_grpc
from keda_llm.scaler.names import matches
from keda_llm.scaler.service import NoUsableData, ScalerService

log = logging.getLogger(__name__)

SERVICE_NAME = "externalscaler.ExternalScaler"
#: GetMetricSpec's target; GetMetrics answers the desired replica count, so the HPA's AverageValue
#: arithmetic (ceil(sum / target)) lands on our count.
TARGET = 1


def _key(ref: pb.ScaledObjectRef) -> ScaledObjectKey:
    return ScaledObjectKey(ref.namespace, ref.name)


def _describe_config_error(err: Exception) -> str:
    key = getattr(err, "key", None)
    value = getattr(err, "value", None)
    text = str(err)
    if key is not None and str(key) not in text:
        text = f"metadata key {key!r} (value {value!r}): {text}"
    return f"invalid ScaledObject metadata: {text}"


class ExternalScalerServicer(pb_grpc.ExternalScalerServicer):
    """One instance per server; stateless apart from the ScalerService it asks."""

    def __init__(self, service: ScalerService, config_error: type[Exception] = ValueError) -> None:
        self.service = service
        self._config_error = config_error

    async def _fail(self, context: grpc.aio.ServicerContext, method: str, err: Exception) -> NoReturn:
        """Map an exception to the status KEDA understands and abort the call."""
        if isinstance(err, self._config_error):
            code, message = grpc.StatusCode.INVALID_ARGUMENT, _describe_config_error(err)
        elif isinstance(err, NoUsableData):
            code, message = grpc.StatusCode.UNAVAILABLE, str(err)
        else:
            log.exception("%s failed", method, exc_info=err)
            code, message = grpc.StatusCode.INTERNAL, f"{type(err).__name__}: {err}"
        self.service.metrics.rpc(method, code.name)
        await context.abort(code, message)
        raise AssertionError("unreachable: context.abort raises")  # pragma: no cover

    def _ok(self, method: str) -> None:
        self.service.metrics.rpc(method, "OK")

    async def IsActive(self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext) -> pb.IsActiveResponse:
        try:
            active = self.service.is_active(_key(request), request.scalerMetadata)
        except Exception as err:
            await self._fail(context, "IsActive", err)
        self._ok("IsActive")
        return pb.IsActiveResponse(result=active)

    async def GetMetricSpec(self, request: pb.ScaledObjectRef,
                            context: grpc.aio.ServicerContext) -> pb.GetMetricSpecResponse:
        try:
            name = self.service.metric_spec(_key(request), request.scalerMetadata)
        except Exception as err:
            await self._fail(context, "GetMetricSpec", err)
        self._ok("GetMetricSpec")
        spec = pb.MetricSpec(metricName=name, targetSize=TARGET, targetSizeFloat=float(TARGET))
        return pb.GetMetricSpecResponse(metricSpecs=[spec])

    async def GetMetrics(self, request: pb.GetMetricsRequest,
                         context: grpc.aio.ServicerContext) -> pb.GetMetricsResponse:
        ref = request.scaledObjectRef
        key = _key(ref)
        metadata: Mapping[str, str] = ref.scalerMetadata
        try:
            entry = self.service.entry(key, metadata)
        except Exception as err:
            await self._fail(context, "GetMetrics", err)
        ours = entry.metric_name
        if not matches(request.metricName, ours):
            self.service.metrics.rpc("GetMetrics", "NOT_FOUND")
            await context.abort(grpc.StatusCode.NOT_FOUND,
                                f"ScaledObject {key} has metric {ours!r}, not {request.metricName!r}")
        try:
            answer = self.service.answer_for(entry)
        except Exception as err:
            await self._fail(context, "GetMetrics", err)
        self._ok("GetMetrics")
        replicas = int(answer.decision.replicas)
        # Both fields carry the same whole number. KEDA reads a float of exactly 0 as "unset" and falls
        # back to the int field, so a desired 0 is sent as 0 in both (kedacore/keda external_scaler.go).
        value = pb.MetricValue(metricName=ours, metricValue=replicas, metricValueFloat=float(replicas))
        return pb.GetMetricsResponse(metricValues=[value])

    async def StreamIsActive(self, request: pb.ScaledObjectRef,
                             context: grpc.aio.ServicerContext) -> AsyncIterator[pb.IsActiveResponse]:
        """Push `true` on open (when active) and on every activation; never `false`, never return.

        Protocol traps (kedacore/keda external_scaler.go runStreamIsActive):
        - a stream that ends, even cleanly, makes KEDA reconnect in a loop (2 s doubling to 60 s), so
          this handler only ends when the client goes away, the server stops, or a newer stream for the
          same ScaledObject evicts it;
        - KEDA before v2.18 deactivated the workload on `false`, whatever its other triggers said, so
          deactivation is left to the polled IsActive.
        """
        key = _key(request)
        metadata: dict[str, str] = dict(request.scalerMetadata)
        try:
            self.service.config(key, metadata)
        except Exception as err:
            await self._fail(context, "StreamIsActive", err)
        self._ok("StreamIsActive")
        sub = self.service.bus.subscribe(key)
        self.service.metrics.streams.inc()
        try:
            try:
                active_now = self.service.is_active(key, metadata)
            except NoUsableData:
                active_now = False  # no data yet: wait for an activation rather than fail the stream
            if active_now:
                yield pb.IsActiveResponse(result=True)
            while True:
                await sub.wait()
                if sub.evicted:
                    await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                        f"too many StreamIsActive streams for {key}; this one was replaced")
                yield pb.IsActiveResponse(result=True)
        finally:
            sub.close()
            self.service.metrics.streams.dec()

    async def StreamMetricSpec(self, request: pb.ScaledObjectRef,
                               context: grpc.aio.ServicerContext) -> AsyncIterator[pb.GetMetricSpecResponse]:
        """Not built: UNIMPLEMENTED makes KEDA (main) fall back to polling GetMetricSpec for good."""
        self.service.metrics.rpc("StreamMetricSpec", "UNIMPLEMENTED")
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "StreamMetricSpec is not implemented; poll GetMetricSpec")
        yield pb.GetMetricSpecResponse()  # pragma: no cover - makes this an async generator


def add_to_server(servicer: ExternalScalerServicer, server: Any) -> None:
    pb_grpc.add_ExternalScalerServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
