"""Cold-start phases measured per pod, from pod status and the kubelet's events -> metrics and a p90.

A replica's cold start is node (scheduled), image (pulled), container (started) and engine (ready):
each has its own lever (placeholder capacity, pre-pulled images, a warm page cache, compile caches;
docs/design.md). Per pod of a ScaledObject's target, from what the API server already holds:

- created:  metadata.creationTimestamp
- scheduled: the PodScheduled condition's lastTransitionTime (the node was found or provisioned)
- pulled:   the latest kubelet `Pulled` event of the pod (image pulled, or already present)
- started:  the engine container's state.running.startedAt (the first container if none is named)
- ready:    the Ready condition's lastTransitionTime, when it is True

Phase durations: `scheduled` = scheduled - created, `image_pulled` = pulled - scheduled,
`container_started` = started - pulled (started - scheduled without an event: the image phase is then
not known), `engine_ready` = ready - started (weights and engine init), `cold_start` = ready - created.
A pod is measured once, when it is ready; a pod that restarted is skipped (its times describe the
restart, not a cold start). The scaler's horizon uses the p90 of `cold_start` per model where the
ScaledObject sets no `coldStart` (scaler/levers.py).
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Histogram

from keda_llm.common.times import iso_seconds

PHASES = ("scheduled", "image_pulled", "container_started", "engine_ready", "cold_start")
#: Histogram buckets (seconds): a phase takes from under a second (a cached image) to many minutes (a node).
BUCKETS = (1, 2, 5, 10, 20, 30, 45, 60, 90, 120, 180, 240, 300, 450, 600, 900, 1200, 1800, math.inf)
#: Cold starts kept per model for the p90 (the most recent ones: a new image or node pool shows soon).
KEEP = 64


def timestamp(text: Any) -> float | None:
    """An RFC 3339 time as the API serves it (`2025-06-01T10:00:00Z`, with or without fractions) -> epoch s."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return iso_seconds(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class PodTimes:
    """One pod's lifecycle times (epoch seconds; None: not there yet or not known)."""

    uid: str
    name: str
    created: float | None
    scheduled: float | None
    pulled: float | None
    started: float | None
    ready: float | None
    restarted: bool = False

    def phases(self) -> dict[str, float] | None:
        """The phase durations, or None until the pod is ready (or when its times do not add up)."""
        c, s, p, st, r = self.created, self.scheduled, self.pulled, self.started, self.ready
        if self.restarted or c is None or s is None or st is None or r is None:
            return None
        if not c <= s <= st <= r:
            return None
        out = {"scheduled": s - c, "engine_ready": r - st, "cold_start": r - c}
        if p is not None and s <= p <= st:
            out["image_pulled"] = p - s
            out["container_started"] = st - p
        else:
            out["container_started"] = st - s
        return out


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in status.get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == kind:
            return cond
    return None


def pulled_times(events: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Pod name -> the latest kubelet `Pulled` event's time (a v1 EventList's items)."""
    out: dict[str, float] = {}
    for ev in events:
        obj = ev.get("involvedObject") or {}
        if ev.get("reason") != "Pulled" or not isinstance(obj, dict) or obj.get("kind") != "Pod":
            continue
        at = timestamp(ev.get("lastTimestamp")) or timestamp(ev.get("eventTime")) or timestamp(ev.get("firstTimestamp"))
        name = obj.get("name")
        if at is not None and isinstance(name, str):
            out[name] = max(at, out.get(name, at))
    return out


def pod_times(pod: Mapping[str, Any], pulled: Mapping[str, float], container: str | None = None) -> PodTimes:
    """A v1 Pod (and its pull time, by name) -> PodTimes. `container`: the engine's; default the first."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    name = str(meta.get("name", ""))
    sched = _condition(status, "PodScheduled")
    ready = _condition(status, "Ready")
    statuses = [c for c in status.get("containerStatuses") or () if isinstance(c, dict)]
    engine = next((c for c in statuses if c.get("name") == container), statuses[0] if statuses else None)
    started = None
    restarted = False
    if engine is not None:
        started = timestamp(((engine.get("state") or {}).get("running") or {}).get("startedAt"))
        restarted = bool(engine.get("restartCount"))
    return PodTimes(
        uid=str(meta.get("uid") or name), name=name, created=timestamp(meta.get("creationTimestamp")),
        scheduled=timestamp(sched.get("lastTransitionTime")) if sched and sched.get("status") == "True" else None,
        pulled=pulled.get(name), started=started,
        ready=timestamp(ready.get("lastTransitionTime")) if ready and ready.get("status") == "True" else None,
        restarted=restarted)


def matches(selector: str, labels: Mapping[str, str]) -> bool:
    """Whether labels satisfy an equality selector as /scale's status.selector spells it (`a=b,c=d`).
    Set-based terms (`in`, `!`) are left to the API server: they pass here."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        key, sep, value = term.partition("=")
        if not sep or " " in key or key.endswith("!"):
            continue
        if labels.get(key.strip()) != value.lstrip("=").strip():
            return False
    return True


def p90(values: Iterable[float]) -> float | None:
    """Nearest-rank 90th percentile (of 10 values, the 9th smallest); None for none."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


class PhaseTracker:
    """Per (namespace, model): each ready pod's phases, once, as histograms, and the recent cold starts' p90.

    Thread-safe: the Kubernetes reader's threads observe, the decision path reads `p90`."""

    def __init__(self, registry: CollectorRegistry | None = None, keep: int = KEEP) -> None:
        r = registry or CollectorRegistry()
        self.histogram = Histogram("keda_llm_scaler_cold_start_phase_seconds",
                                   "Measured cold-start phase per pod (pod status and kubelet events): scheduled, "
                                   "image_pulled, container_started, engine_ready, and the whole cold_start",
                                   ["namespace", "model", "phase"], buckets=BUCKETS, registry=r)
        self.last = Gauge("keda_llm_scaler_cold_start_phase_last_seconds", "The last measured pod's phase",
                          ["namespace", "model", "phase"], registry=r)
        self.p90_gauge = Gauge("keda_llm_scaler_cold_start_p90_seconds",
                               "p90 of the recent measured cold starts: the horizon where coldStart is unset",
                               ["namespace", "model"], registry=r)
        self._keep = keep
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], set[str]] = {}
        self._totals: dict[tuple[str, str], deque[float]] = {}

    def observe(self, namespace: str, model: str, pods: Iterable[PodTimes]) -> int:
        """Record every ready pod not recorded yet; returns how many were new."""
        new = 0
        key = (namespace, model)
        with self._lock:
            seen = self._seen.setdefault(key, set())
            totals = self._totals.setdefault(key, deque(maxlen=self._keep))
            for pod in pods:
                phases = pod.phases() if pod.uid not in seen else None
                if phases is None:
                    continue
                seen.add(pod.uid)
                if len(seen) > 16 * self._keep:  # bounded: forget the oldest half (uids of long-gone pods)
                    for uid in list(seen)[: len(seen) // 2]:
                        seen.discard(uid)
                    seen.add(pod.uid)
                for phase, seconds in phases.items():
                    self.histogram.labels(namespace, model, phase).observe(seconds)
                    self.last.labels(namespace, model, phase).set(seconds)
                totals.append(phases["cold_start"])
                new += 1
            value = p90(totals)
        if value is not None:
            self.p90_gauge.labels(namespace, model).set(value)
        return new

    def p90(self, namespace: str, model: str) -> float | None:
        with self._lock:
            totals = self._totals.get((namespace, model))
            return p90(totals) if totals else None
