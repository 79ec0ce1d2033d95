"""Helpers for the fault tests: a ClusterIP Service on loopback and a KEDA-like StreamIsActive holder.

`Service`: a TCP forwarder standing for a Kubernetes ClusterIP Service in front of the scaler pods. Each
new connection goes to the first listed pod that accepts it (kube-proxy sends new connections to ready
endpoints only); a connection already made stays on its pod, and when that pod dies the connection is
closed, as a killed pod's TCP peer sees it.

`PushHolder`: what KEDA's `external-push` scaler does with StreamIsActive (kedacore/keda
pkg/scalers/external_scaler.go runStreamIsActive): one long-lived channel to the Service, one stream per
trigger, every message recorded; when the stream ends (an error or a clean end), wait the backoff (2 s,
doubling per reconnect up to 60 s; KEDA never resets it) and open it again on the same channel.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from keda_llm.scaler.externalscaler import externalscaler_pb2 as pb
from keda_llm.scaler.externalscaler import externalscaler_pb2_grpc as pb_grpc

#: KEDA's reconnect backoff for a push stream: 2 s, doubling, capped at 60 s.
KEDA_BACKOFF_S = (2.0, 4.0, 8.0, 16.0, 32.0, 60.0)


class Service:
    """A ClusterIP Service on 127.0.0.1:<port> over `backends` (host, port), first accepting one wins."""

    def __init__(self, backends: Sequence[tuple[str, int]]) -> None:
        self.backends = list(backends)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self.address = f"127.0.0.1:{self.port}"
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self.routed: list[tuple[str, int]] = []  # the backend each accepted connection went to
        threading.Thread(target=self._accept, name="service-accept", daemon=True).start()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = None
            for backend in self.backends:
                try:
                    upstream = socket.create_connection(backend, timeout=1.0)
                except OSError:
                    continue
                upstream.settimeout(None)
                with self._lock:
                    self.routed.append(backend)
                break
            if upstream is None:  # no endpoint: the Service refuses, as kube-proxy's REJECT rule does
                client.close()
                continue
            with self._lock:
                self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closing.set()
        self._listener.close()
        with self._lock:
            for s in self._open:
                with contextlib.suppress(OSError):
                    s.close()


@dataclass
class StreamLog:
    """What one trigger's holder saw: every message (True/False) and every stream end, in order."""

    messages: list[bool] = field(default_factory=list)
    ends: list[str] = field(default_factory=list)  # the status code name (or "ended") of each stream end
    opened: int = 0
    events: list[tuple[float, str]] = field(default_factory=list)


class PushHolder:
    """KEDA holding StreamIsActive for some triggers through one channel, reconnecting with its backoff."""

    def __init__(self, target: str, refs: Sequence[pb.ScaledObjectRef]) -> None:
        self.channel = grpc.insecure_channel(target)
        self.client: Any = pb_grpc.ExternalScalerStub(self.channel)  # type: ignore[no-untyped-call]
        self.logs = {r.name: StreamLog() for r in refs}
        self._calls: dict[str, Any] = {}
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._threads = [threading.Thread(target=self._hold, args=(r,), daemon=True) for r in refs]
        for t in self._threads:
            t.start()

    def _hold(self, so: pb.ScaledObjectRef) -> None:
        log = self.logs[so.name]
        failures = 0
        while not self._stop.is_set():
            call = self.client.StreamIsActive(so)
            with self._cond:
                self._calls[so.name] = call
                log.opened += 1
                log.events.append((time.monotonic(), "open"))
                self._cond.notify_all()
            end = "ended"
            try:
                for msg in call:
                    with self._cond:
                        log.messages.append(msg.result)
                        log.events.append((time.monotonic(), f"message {msg.result}"))
                        self._cond.notify_all()
            except grpc.RpcError as err:
                end = err.code().name
            with self._cond:
                log.ends.append(end)
                log.events.append((time.monotonic(), f"end {end}"))
                self._cond.notify_all()
            if self._stop.wait(KEDA_BACKOFF_S[min(failures, len(KEDA_BACKOFF_S) - 1)]):
                return
            failures += 1

    def wait(self, name: str, predicate: Any, timeout: float = 20.0) -> StreamLog:
        """Wait until `predicate(log)` holds for trigger `name`; fails the test on timeout."""
        log = self.logs[name]
        with self._cond:
            if not self._cond.wait_for(lambda: predicate(log), timeout):
                raise AssertionError(f"{name}: condition not met within {timeout} s; saw {log}")
        return log

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            calls = list(self._calls.values())
        for call in calls:
            call.cancel()
        for t in self._threads:
            t.join(10)
        self.channel.close()
