"""KEDA's ExternalScaler service over grpc.aio: a thin adapter of scaler/protocol.py to gRPC.

The protocol's rules (the target of 1, the metric-name check, which error is which status code and
its message) live in scaler/protocol.py; this module puts its answers in protobuf messages and its
StatusError on the call (`context.abort` with grpc.StatusCode[code]), and counts every call. What only
gRPC has is here:
- INTERNAL: an unexpected exception (logged);
- RESOURCE_EXHAUSTED: a StreamIsActive replaced by a newer stream for the same ScaledObject;
- UNIMPLEMENTED: StreamMetricSpec (KEDA then polls GetMetricSpec, as every released KEDA does).

All handlers are coroutines on one event loop and answer from memory, so an open StreamIsActive costs
an idle coroutine, not a thread: thousands of streams cannot starve the unary calls.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, NoReturn

import grpc

from keda_llm.scaler import protocol
from keda_llm.scaler.activation import ScaledObjectKey
from keda_llm.scaler.externalscaler import externalscaler_pb2 as pb
from keda_llm.scaler.externalscaler import externalscaler_pb2_grpc as pb_grpc
from keda_llm.scaler.service import ScalerService

log = logging.getLogger(__name__)

SERVICE_NAME = "externalscaler.ExternalScaler"
TARGET = protocol.TARGET


def _key(ref: pb.ScaledObjectRef) -> ScaledObjectKey:
    return ScaledObjectKey(ref.namespace, ref.name)



MAX_STATUS_MESSAGE = 2000  # characters of a status message: gRPC carries it in a header (grpc-message)


def _capped(message: str) -> str:
    """A status message short enough to travel: a 20 KB metadata key or model name quoted in one made the
    grpc-message header pass the client's 16 KB limit, and KEDA saw RESOURCE_EXHAUSTED "Stream removed"
    instead of the INVALID_ARGUMENT or UNAVAILABLE that says what is wrong."""
    if len(message) <= MAX_STATUS_MESSAGE:
        return message
    return message[:MAX_STATUS_MESSAGE - 40] + f"... ({len(message):,} characters)"

class ExternalScalerServicer(pb_grpc.ExternalScalerServicer):
    """One instance per server; stateless apart from the ScalerService it asks."""

    def __init__(self, service: ScalerService, config_error: type[Exception] = ValueError,
                 client_sans: Sequence[str] = ()) -> None:
        self.service = service
        self._config_error = config_error
        self._client_sans = frozenset(client_sans)

    def _check_peer(self, context: grpc.aio.ServicerContext) -> None:
        """With pinned client identities, refuse a peer whose certificate names none of them."""
        if not self._client_sans:
            return
        auth = context.auth_context() or {}
        names = {v.decode(errors="replace") for v in auth.get("x509_subject_alternative_name", [])}
        if not names & self._client_sans:
            shown = ", ".join(sorted(names)) or "none"
            raise protocol.StatusError("UNAUTHENTICATED", f"client certificate names {shown}; this scaler serves "
                                       f"only {', '.join(sorted(self._client_sans))} (--tls-client-san)")

    async def _fail(self, context: grpc.aio.ServicerContext, method: str, err: Exception) -> NoReturn:
        """Abort the call with the protocol's status for `err` (INTERNAL for anything unexpected)."""
        status = protocol.status_of(err, self._config_error)
        if status is None:
            log.exception("%s failed", method, exc_info=err)
            status = protocol.StatusError(grpc.StatusCode.INTERNAL.name, f"{type(err).__name__}: {err}")
        self.service.metrics.rpc(method, status.code)
        await context.abort(grpc.StatusCode[status.code], _capped(status.message))
        raise AssertionError("unreachable: context.abort raises")  # pragma: no cover

    def _ok(self, method: str) -> None:
        self.service.metrics.rpc(method, "OK")

    async def IsActive(self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext) -> pb.IsActiveResponse:
        try:
            self._check_peer(context)
            active = protocol.is_active(self.service, _key(request), request.scalerMetadata,
                                        config_error=self._config_error)
        except Exception as err:
            await self._fail(context, "IsActive", err)
        self._ok("IsActive")
        return pb.IsActiveResponse(result=active)

    async def GetMetricSpec(self, request: pb.ScaledObjectRef,
                            context: grpc.aio.ServicerContext) -> pb.GetMetricSpecResponse:
        try:
            self._check_peer(context)
            answer = protocol.get_metric_spec(self.service, _key(request), request.scalerMetadata,
                                              config_error=self._config_error)
        except Exception as err:
            await self._fail(context, "GetMetricSpec", err)
        self._ok("GetMetricSpec")
        spec = pb.MetricSpec(metricName=answer.metric_name, targetSize=answer.target,
                             targetSizeFloat=float(answer.target))
        return pb.GetMetricSpecResponse(metricSpecs=[spec])

    async def GetMetrics(self, request: pb.GetMetricsRequest,
                         context: grpc.aio.ServicerContext) -> pb.GetMetricsResponse:
        ref = request.scaledObjectRef
        metadata: Mapping[str, str] = ref.scalerMetadata
        try:
            self._check_peer(context)
            answer = protocol.get_metrics(self.service, _key(ref), metadata, request.metricName,
                                          config_error=self._config_error)
        except Exception as err:
            await self._fail(context, "GetMetrics", err)
        self._ok("GetMetrics")
        # Both fields carry the same whole number (KEDA reads a float of exactly 0 as "unset", see
        # protocol.MetricValueAnswer).
        value = pb.MetricValue(metricName=answer.metric_name, metricValue=answer.replicas,
                               metricValueFloat=float(answer.replicas))
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
            self._check_peer(context)
            protocol.open_stream(self.service, key, metadata, config_error=self._config_error)
        except Exception as err:
            await self._fail(context, "StreamIsActive", err)
        self._ok("StreamIsActive")
        sub = self.service.bus.subscribe(key)
        self.service.metrics.streams.inc()
        try:
            if protocol.stream_first_answer(self.service, key, metadata):  # no data yet: False, and wait
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
