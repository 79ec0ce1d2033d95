"""The `exporters` metric source: scrape every node exporter directly, no Prometheus in the path.

Exporters are found through a headless Service's DNS (one A record per exporter pod) or a static
list. Each cycle scrapes all of them concurrently, each with a deadline and a body-size cap, and
merges what they report into one Observation per (namespace, model). An exporter that fails keeps
its last good answer until `forget_after_s`: its replicas then carry their old timestamps, so the
policy sees them as stale (hold) instead of gone (which would read as lost capacity).
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from keda_llm.scaler.model import Observation
from keda_llm.scaler.sources.clocks import TOLERANCE_S, clock_offset
from keda_llm.scaler.sources.common import BackgroundSource, ErrorCounts, ModelKey
from keda_llm.scaler.sources.errors import SourceError
from keda_llm.scaler.sources.exposition import (
    ParsedExposition,
    ReplicaKey,
    observations_from_replicas,
    parse_exposition,
)
from keda_llm.scaler.sources.http import fetch
from keda_llm.scaler.sources.promql import PrometheusClient

#: Returns the exporters' /metrics URLs; raises SourceError("dns") when it cannot tell.
Resolver = Callable[[], Sequence[str]]
#: The newest TLS context for https exporters (common.tls.ReloadingContext.get).
TLSContext = Callable[[], ssl.SSLContext]
GetAddrInfo = Callable[..., Sequence[tuple[object, object, object, object, tuple[object, ...]]]]

log = logging.getLogger(__name__)

DEFAULT_PORT = 9400
DEFAULT_MAX_BYTES = 32 * 1024 * 1024


def static_targets(urls: Iterable[str], scheme: str = "http") -> Resolver:
    """A fixed list of exporter URLs (`host:port` gets `<scheme>://` and `/metrics` added)."""
    fixed = sorted({u if "://" in u else f"{scheme}://{u}/metrics" for u in urls})
    return lambda: fixed


def dns_targets(
    name: str, port: int = DEFAULT_PORT, *, path: str = "/metrics", getaddrinfo: GetAddrInfo = socket.getaddrinfo,
    scheme: str = "http",
) -> Resolver:
    """Every address of a headless Service (e.g. `keda-llm-exporter.keda-llm-exporter.svc`), sorted, as URLs
    (`https` for exporters serving TLS: they are dialled by pod IP, so the caller's context checks the
    chain, not the name; common/tls.py)."""

    def resolve() -> Sequence[str]:
        try:
            infos = getaddrinfo(name, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise SourceError("dns", f"{name}: {exc}") from exc
        hosts = sorted({str(info[4][0]) for info in infos})
        return [f"{scheme}://[{h}]:{port}{path}" if ":" in h else f"{scheme}://{h}:{port}{path}" for h in hosts]

    return resolve


@dataclasses.dataclass(frozen=True)
class _Answer:
    at: float
    parsed: ParsedExposition


def merge_replicas(answers: Iterable[ParsedExposition]) -> dict[ReplicaKey, Mapping[str, float]]:
    """One entry per (namespace, model, pod): where two exporters report a pod, the fresher wins.

    Ties go to the first answer (callers pass answers in URL order), so the result is deterministic.
    """
    merged: dict[ReplicaKey, Mapping[str, float]] = {}
    for parsed in answers:
        for key, fields in parsed.replicas.items():
            held = merged.get(key)
            if held is None or fields.get("timestamp", 0.0) > held.get("timestamp", 0.0):
                merged[key] = fields
    return merged


class ExportersSource(BackgroundSource):
    """Background scraper of the exporters; see the module docstring. Implements MetricSource."""

    kind = "exporters"

    def __init__(
        self,
        resolver: Resolver,
        *,
        interval_s: float = 2.0,
        timeout_s: float = 2.0,
        max_bytes: int = DEFAULT_MAX_BYTES,
        forget_after_s: float = 300.0,
        max_workers: int = 8,
        activation: PrometheusClient | None = None,
        clock: Callable[[], float] = time.time,
        tls: TLSContext | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        super().__init__("exporters-source", interval_s, max_workers, "scrape-exporter", clock)
        self._resolver = resolver
        self._wall = wall  # this pod's real clock, which an exporter's `Date` header is compared with
        self._tls = tls
        self._timeout_s = timeout_s
        self._max_bytes = max_bytes
        self._forget_after_s = forget_after_s
        self._activation = activation
        self._targets: Sequence[str] = ()
        self._answers: dict[str, _Answer] = {}
        self._target_errors: dict[str, str | None] = {}
        self._offsets: dict[str, float] = {}  # the last clock offset reported, per exporter

    # -- the MetricSource interface ------------------------------------------------------------

    def watch(self, namespace: str, model: str, activation_query: str | None = None) -> None:
        if activation_query and self._activation is None:
            raise ValueError(f"activationQuery for {namespace}/{model} needs a Prometheus address (prometheusAddress)")
        super().watch(namespace, model, activation_query)

    def _target_health(self) -> dict[str, str | None]:
        return dict(self._target_errors)

    def known_models(self) -> list[ModelKey]:
        """Every (namespace, model) the last cycle saw or was asked to watch."""
        return sorted(self._latest)

    # -- one cycle -------------------------------------------------------------------------------

    def collect_once(self) -> list[Observation]:
        """Scrape every exporter once, publish and return the new Observations ([] if none answered and
        no activationQuery is watched)."""
        with self._cycle_lock:
            now = self._clock()
            errors: list[str] = []
            targets = self._resolve(errors)
            # Fetches run concurrently (I/O); parsing runs here, one body at a time: parsing is CPU under
            # the GIL, so parsing in every fetch thread at once would only crowd out the gRPC loop.
            fetches = [self._pool.submit(self._fetch, url) for url in targets]
            results = [self._parse(url, f.result()) for url, f in zip(targets, fetches, strict=True)]
            answered = self._record(now, targets, results, errors)
            self._ok = answered > 0
            self._last_error = errors[-1] if errors else None
            if answered:
                self._last_success_at = now
            elif not any(self._watches.snapshot().values()):
                return []
            # With no exporter answering, activationQuery demand is still read and published: a model at
            # zero may have no exporter at all (a GPU node pool scaled to zero runs no DaemonSet pod), and
            # the replicas last reported keep their old timestamps, so they read as stale (hold).
            observations = self._observations(now, errors)
            self._last_error = errors[-1] if errors else None
            self._latest = {(o.namespace, o.model): o for o in observations}
        self._subscribers.publish(observations)
        return observations

    def _resolve(self, errors: list[str]) -> Sequence[str]:
        try:
            self._targets = list(self._resolver())
            if not self._targets:
                errors.append("no exporters found (the Service has no ready endpoints?)")
        except SourceError as exc:
            self._errors.add(exc.reason)
            errors.append(f"{exc} (using the last {len(self._targets)} known exporters)")
        return self._targets

    def _fetch(self, url: str) -> tuple[bytes, float] | SourceError:
        """The body and the exporter's clock offset (clocks.py), or the error."""
        date: list[tuple[str | None, float]] = []  # the header, and when it came (before the body)
        try:
            tls = self._tls() if self._tls is not None and url.startswith("https:") else None
            sent = self._wall()
            body = fetch(url, timeout_s=self._timeout_s, max_bytes=self._max_bytes, tls=tls,
                         on_headers=lambda header: date.append((header("Date"), self._wall())))[1]
        except SourceError as exc:
            return exc
        header, received = date[0] if date else (None, sent)
        return body, clock_offset(header, sent, received)

    def _parse(self, url: str, fetched: tuple[bytes, float] | SourceError) -> ParsedExposition | SourceError:
        if isinstance(fetched, SourceError):
            return fetched
        body, offset = fetched
        try:
            parsed = parse_exposition(body.decode("utf-8"))
        except UnicodeDecodeError:
            return SourceError("parse", f"{url}: body is not UTF-8")
        except SourceError as exc:
            return SourceError(exc.reason, f"{url}: {exc.message}")
        if offset or url in self._offsets:
            self._skewed(url, offset)
        if offset:
            for fields in parsed.replicas.values():
                if fields.get("timestamp", 0.0) > 0:
                    fields["timestamp"] = max(fields["timestamp"] - offset, 1.0)  # 0 means "never": keep it > 0
        parsed.clock_offset = offset
        return parsed

    def _skewed(self, url: str, offset: float) -> None:
        """Say so, once per exporter and whenever its offset moves by more than the tolerance."""
        last = self._offsets.get(url)
        if not offset:
            self._offsets.pop(url, None)
            log.info("exporter %s: its clock agrees with this pod's again", url)
        elif last is None or abs(last - offset) > TOLERANCE_S:
            self._offsets[url] = offset
            log.warning("exporter %s: its clock is %+.1f s from this pod's (its Date header); its replicas' "
                        "timestamps are corrected by that much. Check the node's time sync (NTP).", url, offset)

    def _record(
        self, now: float, targets: Sequence[str], results: list[ParsedExposition | SourceError], errors: list[str]
    ) -> int:
        answered = 0
        # replaced whole (status() reads it from other threads); exporters gone from discovery drop out
        target_errors = {u: e for u, e in self._target_errors.items() if u in targets or u in self._answers}
        for url, result in zip(targets, results, strict=True):
            if isinstance(result, SourceError):
                self._errors.add(result.reason)
                target_errors[url] = str(result)
                errors.append(str(result))
                continue
            answered += 1
            self._errors.add("invalid_value", result.invalid_values)
            self._answers[url] = _Answer(now, result)
            target_errors[url] = None
        for url in [u for u, a in self._answers.items() if now - a.at > self._forget_after_s]:
            del self._answers[url]
            target_errors.pop(url, None)
        self._target_errors = target_errors
        self._offsets = {u: o for u, o in self._offsets.items() if u in targets}
        return answered

    def _observations(self, now: float, errors: list[str]) -> list[Observation]:
        merged = merge_replicas(self._answers[u].parsed for u in sorted(self._answers))
        observations = observations_from_replicas(merged.items(), now)
        watched = self._watches.snapshot()
        seen = {(o.namespace, o.model) for o in observations}
        observations += [Observation(namespace=ns, model=m, at=now) for ns, m in sorted(watched) if (ns, m) not in seen]
        queries = {key: q for key, q in watched.items() if q}
        if queries and self._activation is not None:
            demand = evaluate_activation(self._activation, queries, self._pool, self._errors, errors)
            observations = [
                dataclasses.replace(o, upstream_demand=demand.get((o.namespace, o.model))) for o in observations
            ]
        observations.sort(key=lambda o: (o.namespace, o.model))
        return observations


def evaluate_activation(
    client: PrometheusClient,
    queries: Mapping[ModelKey, str],
    pool: ThreadPoolExecutor,
    counts: ErrorCounts,
    messages: list[str],
) -> dict[ModelKey, float | None]:
    """Each model's activationQuery -> demand number, or None (unknown: counted, and named in `messages`)."""
    keys = sorted(queries)

    def one(key: ModelKey) -> float | None:
        try:
            return client.demand(queries[key])
        except SourceError as exc:
            counts.add(exc.reason)
            messages.append(f"activationQuery for {key[0]}/{key[1]}: {exc}")
            return None

    return dict(zip(keys, pool.map(one, keys), strict=True))
