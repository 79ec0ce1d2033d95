"""Drive a real ExternalScaler gRPC server from the KEDA+HPA emulator, with KEDA's call pattern.

`GrpcExternalScaler` is the emulator's `ExternalScaler`, `PushSource` and `CallChainAware` over a
gRPC channel, through the generated stubs in `scaler.externalscaler` (imported when an instance is
made, so the emulator itself needs neither grpc nor the stubs). What it copies from KEDA
(project KEDA reference, sections 2.4, 2.5, 2.7):
- the polling path sets no deadline; the HPA path's whole chain (GetMetricSpec + GetMetrics +
  IsActive) runs under the metrics apiserver's 3 s deadline;
- a gRPC error of any code becomes `ScalerUnavailable(code, details)`, which KEDA treats as a scaler error;
- StreamIsActive is read in a background thread (this is I/O at the edge: the emulator stays
  single-threaded and drains the messages on each `advance_to`). The adapter does not reconnect a
  stream that ends; KEDA would, after 2 s (doubling to 60 s), and `stream_error` says how it ended.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from keda_llm.simulator.control.keda import CallPath, MetricSpec, MetricValue, ScaledObjectRef, ScalerUnavailable

HPA_PATH_DEADLINE_S = 3.0  # keda pkg/metricsservice/client.go methodConfig timeout


class GrpcExternalScaler:
    """An external scaler reached over gRPC. `channel` is a `grpc.Channel`; `clock`, if given, is told
    the simulated time at the start of each call chain (e.g. to move the server's fake clock)."""

    def __init__(self, channel: Any, *, clock: Callable[[float], None] | None = None,
                 hpa_deadline_s: float = HPA_PATH_DEADLINE_S) -> None:
        from keda_llm.scaler.externalscaler import externalscaler_pb2, externalscaler_pb2_grpc

        self._pb: Any = externalscaler_pb2
        stub_class: Any = externalscaler_pb2_grpc.ExternalScalerStub  # generated, untyped
        self._stub: Any = stub_class(channel)
        self._clock = clock
        self._hpa_deadline_s = hpa_deadline_s
        self._deadline: float | None = None
        self.path: CallPath | None = None
        self.calls: list[tuple[str, str]] = []  # (path, RPC) in call order
        self._messages: queue.Queue[bool] = queue.Queue()
        self._pending: list[bool] = []  # taken off the queue by wait_for_push, not yet drained
        self._stream: Any = None
        self._reader: threading.Thread | None = None
        self.stream_error: str | None = None

    # ------------------------------------------------------------------------ CallChainAware

    def begin(self, path: CallPath, now: float) -> None:
        self.path = path
        self._deadline = time.monotonic() + self._hpa_deadline_s if path == "hpa" else None
        if self._clock is not None:
            self._clock(now)

    def _timeout(self) -> float | None:
        if self._deadline is None:
            return None
        return max(self._deadline - time.monotonic(), 0.001)

    def _call(self, rpc: str, request: Any) -> Any:
        import grpc

        self.calls.append((self.path or "", rpc))
        try:
            return getattr(self._stub, rpc)(request, timeout=self._timeout())
        except grpc.RpcError as err:
            code = err.code()
            raise ScalerUnavailable(code.name if code is not None else "UNKNOWN", err.details() or "") from None

    def _ref(self, ref: ScaledObjectRef) -> Any:
        return self._pb.ScaledObjectRef(name=ref.name, namespace=ref.namespace,
                                        scalerMetadata=dict(ref.scaler_metadata))

    # ------------------------------------------------------------------------ ExternalScaler

    def get_metric_spec(self, ref: ScaledObjectRef) -> Sequence[MetricSpec]:
        got = self._call("GetMetricSpec", self._ref(ref))
        return [MetricSpec(s.metricName, s.targetSizeFloat, s.targetSize) for s in got.metricSpecs]

    def get_metrics(self, ref: ScaledObjectRef, metric_name: str) -> Sequence[MetricValue]:
        request = self._pb.GetMetricsRequest(scaledObjectRef=self._ref(ref), metricName=metric_name)
        got = self._call("GetMetrics", request)
        return [MetricValue(v.metricName, v.metricValueFloat, v.metricValue) for v in got.metricValues]

    def is_active(self, ref: ScaledObjectRef) -> bool:
        return bool(self._call("IsActive", self._ref(ref)).result)

    # ---------------------------------------------------------------------------- PushSource

    def open_stream(self, ref: ScaledObjectRef) -> None:
        """Open StreamIsActive for `ref`, as KEDA's push loop does for an `external-push` trigger."""
        if self._stream is not None:
            raise RuntimeError("a StreamIsActive stream is already open")
        self._stream = self._stub.StreamIsActive(self._ref(ref))
        self._reader = threading.Thread(target=self._read, name="StreamIsActive-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        import grpc

        try:
            for message in self._stream:
                self._messages.put(bool(message.result))
            self.stream_error = "EOF"  # KEDA: clean end, reconnect after 2 s
        except grpc.RpcError as err:
            code = err.code()
            self.stream_error = code.name if code is not None else "UNKNOWN"

    def wait_for_push(self, timeout_s: float) -> bool:
        """Block (wall clock) until a stream message is waiting; True if one is. For tests that need the
        push to have crossed the network before advancing the simulated clock."""
        if self._pending:
            return True
        try:
            self._pending.append(self._messages.get(timeout=timeout_s))
        except queue.Empty:
            return False
        return True

    def take_pushes(self) -> Sequence[bool]:
        out, self._pending = self._pending, []
        while True:
            try:
                out.append(self._messages.get_nowait())
            except queue.Empty:
                return out

    def close(self) -> None:
        """Cancel the stream (if any) and wait for its reader."""
        if self._stream is not None:
            self._stream.cancel()
        if self._reader is not None:
            self._reader.join(timeout=5.0)
        self._stream = self._reader = None
