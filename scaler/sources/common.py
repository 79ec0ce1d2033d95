"""What both metric sources share: the interface the service uses, health, and the loop.

A source collects in the background and hands each Observation to its subscribers (the
service's history); RPC handlers only ever call `latest()`, which reads memory.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from keda_llm.common.periodic import Periodic
from keda_llm.scaler.model import Observation
from keda_llm.scaler.sources.errors import SourceReason

log = logging.getLogger(__name__)

Subscriber = Callable[[Observation], None]
ModelKey = tuple[str, str]  # (namespace, model)


@dataclass(frozen=True)
class SourceStatus:
    """A source's health: is its last cycle good, since when does it have data, what failed."""

    kind: str  # "exporters" | "prometheus"
    ok: bool  # the last cycle collected replica data (for exporters: at least one answered)
    last_success_at: float | None  # when replica data was last collected; None = never
    last_error: str | None = None  # the most recent error message, None once a cycle is clean
    errors: Mapping[SourceReason, int] = field(default_factory=dict)  # since start, by reason
    targets: Mapping[str, str | None] = field(default_factory=dict)  # endpoint -> its last error (None = ok)


class MetricSource(Protocol):
    """What scaler/service.py calls; ExportersSource and PrometheusSource implement it."""

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def watch(self, namespace: str, model: str, activation_query: str | None = None) -> None: ...
    def unwatch(self, namespace: str, model: str) -> None: ...
    def subscribe(self, callback: Subscriber) -> None: ...
    def latest(self, namespace: str, model: str) -> Observation | None: ...
    def collect_once(self) -> list[Observation]: ...
    def status(self) -> SourceStatus: ...
    @property
    def last_success_at(self) -> float | None: ...


class ErrorCounts:
    """Thread-safe count of errors by reason."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[SourceReason] = Counter()

    def add(self, reason: SourceReason, n: int = 1) -> None:
        if n:
            with self._lock:
                self._counts[reason] += n

    def snapshot(self) -> dict[SourceReason, int]:
        with self._lock:
            return dict(self._counts)


class Subscribers:
    """Fan-out of new Observations; a failing subscriber is logged, never stops collection."""

    def __init__(self) -> None:
        self._callbacks: list[Subscriber] = []

    def add(self, callback: Subscriber) -> None:
        self._callbacks = [*self._callbacks, callback]

    def publish(self, observations: list[Observation]) -> None:
        for callback in self._callbacks:
            for obs in observations:
                try:
                    callback(obs)
                except Exception:
                    log.exception("metric source subscriber %r failed on %s/%s", callback, obs.namespace, obs.model)


class Watches:
    """Models the service asked for: they get an Observation every cycle, even with no replica."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queries: dict[ModelKey, str | None] = {}

    def add(self, namespace: str, model: str, activation_query: str | None) -> None:
        with self._lock:
            self._queries = {**self._queries, (namespace, model): activation_query}

    def remove(self, namespace: str, model: str) -> None:
        with self._lock:
            self._queries = {k: q for k, q in self._queries.items() if k != (namespace, model)}

    def snapshot(self) -> dict[ModelKey, str | None]:
        return self._queries  # replaced, never mutated: safe to read without the lock


class BackgroundSource:
    """The MetricSource plumbing both sources share: the loop, the pool, watches, subscribers, the latest
    Observation per model and health. A subclass supplies `collect_once` and the per-target health."""

    kind = ""

    def __init__(self, name: str, interval_s: float, max_workers: int, thread_prefix: str,
                 clock: Callable[[], float]) -> None:
        self._clock = clock
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=thread_prefix)
        self._loop = Periodic(name, interval_s, self.collect_once)
        self._cycle_lock = threading.Lock()
        self._subscribers = Subscribers()
        self._watches = Watches()
        self._errors = ErrorCounts()
        self._latest: dict[ModelKey, Observation] = {}
        self._ok = False
        self._last_success_at: float | None = None
        self._last_error: str | None = None

    def collect_once(self) -> list[Observation]:
        raise NotImplementedError

    def _target_health(self) -> dict[str, str | None]:
        """Each target's last error (None: answered)."""
        raise NotImplementedError

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()
        self._pool.shutdown(wait=True)

    def watch(self, namespace: str, model: str, activation_query: str | None = None) -> None:
        self._watches.add(namespace, model, activation_query)

    def unwatch(self, namespace: str, model: str) -> None:
        self._watches.remove(namespace, model)

    def subscribe(self, callback: Subscriber) -> None:
        self._subscribers.add(callback)

    def latest(self, namespace: str, model: str) -> Observation | None:
        return self._latest.get((namespace, model))

    @property
    def last_success_at(self) -> float | None:
        """When replica data was last collected (None: never): `status()`'s field without its copies of the
        error counts and target health, for the decision path, which asks it per ScaledObject per tick."""
        return self._last_success_at

    def status(self) -> SourceStatus:
        return SourceStatus(
            kind=self.kind, ok=self._ok, last_success_at=self._last_success_at, last_error=self._last_error,
            errors=self._errors.snapshot(), targets=self._target_health(),
        )
