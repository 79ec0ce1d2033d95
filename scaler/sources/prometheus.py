"""The `prometheus` metric source: the same per-replica signals, read with PromQL.

One instant query per signal covers every model at once (`max by (namespace, model, pod)`), so a
cycle costs a dozen queries whatever the cluster size. `max`, not `sum`: each pod has one series
per signal (the exporter already summed data-parallel ranks), and `max` stays right when two
scrape jobs collect the same exporter, where `sum` would double the demand.

Where Prometheus scraped the exporter without `honor_labels: true`, its own target labels win and
the exporter's become `exported_namespace` / `exported_pod`; both spellings are read.

Every query of a cycle is evaluated at one time on Prometheus' clock: ours plus the offset measured with
`time()` at its own now (once a minute; offsets within clocks.TOLERANCE_S read as none). A Prometheus
whose clock ran 30 s behind the scaler's was asked about its future, where a 6 s panic window holds no
samples; one ahead, about its past, 30 s late.

A cycle is all or nothing: if any signal query fails, no Observation is published (`latest()` keeps
the previous one, whose timestamps age) and `status()` names the error. Half a replica (running
known, KV missing) would look like a real, smaller load.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping

from keda_llm.scaler.model import Observation
from keda_llm.scaler.sources.clocks import TOLERANCE_S
from keda_llm.scaler.sources.common import BackgroundSource
from keda_llm.scaler.sources.errors import SourceError
from keda_llm.scaler.sources.exporters import evaluate_activation
from keda_llm.scaler.sources.exposition import (
    DEGRADED,
    FIELD_OF,
    ROLE_FIELD,
    ReplicaKey,
    degraded_field,
    observations_from_replicas,
    role_code,
)
from keda_llm.scaler.sources.promql import PrometheusClient, VectorSample

GROUP_BY = "namespace, exported_namespace, model, pod, exported_pod, role"  # role: one per pod (pools.py)
OFFSET_EVERY_S = 60.0  # how often Prometheus' clock is compared with ours: clocks drift slowly


def signal_queries(selector: str = "") -> dict[str, str]:
    """ReplicaSample field -> the PromQL that reads it for every replica. `selector`: extra matchers."""
    matchers = f"{{{selector}}}" if selector else ""
    return {fname: f"max by ({GROUP_BY}{', reason' if fname == DEGRADED else ''}) ({name}{matchers})"
            for name, fname in FIELD_OF.items()}


def replica_key(labels: Mapping[str, str]) -> ReplicaKey | None:
    """(namespace, model, pod) of a series; None without a model (it belongs to no ScaledObject)."""
    model = labels.get("model", "")
    if not model:
        return None
    namespace = labels.get("exported_namespace") or labels.get("namespace", "")
    return namespace, model, labels.get("exported_pod") or labels.get("pod", "")


def observations_from_vectors(results: Mapping[str, list[VectorSample]], now: float) -> tuple[list[Observation], int]:
    """{field: vector} -> (Observations, number of NaN/Inf/negative values dropped)."""
    replicas: dict[ReplicaKey, dict[str, float]] = {}
    invalid = 0
    for fname in sorted(results):
        for sample in results[fname]:
            key = replica_key(sample.labels)
            if key is None:
                continue
            fields = replicas.setdefault(key, {})
            code = role_code(sample.labels)
            if code is not None:
                fields[ROLE_FIELD] = code
            if not math.isfinite(sample.value) or sample.value < 0:
                invalid += 1
                continue
            fields[degraded_field(sample.labels.get("reason", "")) if fname == DEGRADED else fname] = sample.value
    return observations_from_replicas(replicas.items(), now), invalid


class PrometheusSource(BackgroundSource):
    """Background PromQL poller; implements MetricSource (see scaler.sources.common)."""

    kind = "prometheus"

    def __init__(
        self,
        client: PrometheusClient,
        *,
        interval_s: float = 5.0,
        selector: str = "",
        max_workers: int = 4,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__("prometheus-source", interval_s, max_workers, "promql", clock)
        self._client = client
        self._queries = signal_queries(selector)
        self.clock_offset = 0.0  # Prometheus' clock minus ours, as last measured (measure_clock_offset)
        self._offset_at: float | None = None

    def measure_clock_offset(self) -> float:
        """Prometheus' clock minus ours, from `time()` evaluated at its own now and our clock around the query;
        re-measured every OFFSET_EVERY_S. Within TOLERANCE_S plus half the round trip it is 0 (what the estimate
        can tell); a failed, odd or slow (round trip over TOLERANCE_S) answer keeps the last (the cycle's own
        queries report a failure). Behind a querier (Thanos, Mimir) it is the querier's clock, which is the one
        that evaluates the queries."""
        sent = time.time()
        if self._offset_at is not None and 0 <= sent - self._offset_at < OFFSET_EVERY_S:
            return self.clock_offset
        self._offset_at = sent  # tried: a Prometheus that is down is asked again in a minute, not every cycle
        try:
            kind, value = self._client.query("time()")
        except SourceError:
            return self.clock_offset
        received = time.time()
        if kind != "scalar" or not isinstance(value, float) or not math.isfinite(value) or received < sent:
            return self.clock_offset
        if received - sent > TOLERANCE_S:  # too slow an answer to tell: the last estimate stands
            return self.clock_offset
        offset = value - (sent + received) / 2
        self.clock_offset = offset if abs(offset) > TOLERANCE_S + (received - sent) / 2 else 0.0
        return self.clock_offset

    def _target_health(self) -> dict[str, str | None]:
        return {self._client.url: self._last_error}

    def collect_once(self) -> list[Observation]:
        """Run every signal query once; publish and return the Observations ([] when a query failed)."""
        with self._cycle_lock:
            now = self._clock()
            fields = sorted(self._queries)
            # every signal at one evaluation time: run at Prometheus' own "now" each, a scrape landing
            # between two of them mixed two scrapes in one observation (a panic-window TTFT read double)
            at = time.time() + self.measure_clock_offset()
            answers = list(self._pool.map(lambda f: self._vector(f, at), fields))
            failed = [a for a in answers if isinstance(a, SourceError)]
            for exc in failed:
                self._errors.add(exc.reason)
            self._ok = not failed
            if failed:
                self._last_error = str(failed[0])
                return []
            results = {f: a for f, a in zip(fields, answers, strict=True) if not isinstance(a, SourceError)}
            observations, invalid = observations_from_vectors(results, now)
            self._errors.add("invalid_value", invalid)
            watched = self._watches.snapshot()
            seen = {(o.namespace, o.model) for o in observations}
            observations += [Observation(namespace=ns, model=m, at=now) for ns, m in watched if (ns, m) not in seen]
            queries = {key: q for key, q in watched.items() if q}
            messages: list[str] = []
            if queries:
                demand = evaluate_activation(self._client, queries, self._pool, self._errors, messages)
                observations = [
                    dataclasses.replace(o, upstream_demand=demand.get((o.namespace, o.model))) for o in observations
                ]
            observations.sort(key=lambda o: (o.namespace, o.model))
            self._last_error = messages[-1] if messages else None
            self._last_success_at = now
            self._latest = {(o.namespace, o.model): o for o in observations}
        self._subscribers.publish(observations)
        return observations

    def _vector(self, fname: str, at: float) -> list[VectorSample] | SourceError:
        try:
            return self._client.vector(self._queries[fname], at)
        except SourceError as exc:
            return exc

