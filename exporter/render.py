"""Rendering: a collection Snapshot -> the Prometheus text exposition format (version 0.0.4).

Written as text directly rather than through prometheus_client collectors: it runs once per cycle
over data that is already normalized, and skipping the client's per-sample objects is several times
cheaper (bench/bench_cycle.py measures both). Metric names, types and help come from
keda_llm.common.vocabulary; nothing here invents a name except the exporter's own health metrics below.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence

from keda_llm.common.vocabulary import (
    CLOCK_EVENT_REASONS,
    DEGRADED_REASONS,
    ENGINE_INFO,
    ENGINE_LABELS,
    ENGINE_LAST_SUCCESS,
    ENGINE_METRICS,
    ENGINE_STARTUP,
    ENGINE_UP,
    EXPORTER_CYCLE_DURATION,
    EXPORTER_DISCOVERY_ERRORS,
    EXPORTER_SCRAPE_DURATION,
    EXPORTER_SCRAPE_ERRORS,
    EXPORTER_TARGETS,
    GPU_CLOCK_EVENT,
    GPU_FAULT_METRICS,
    GPU_LABELS,
    GPU_METRICS,
    GPU_UP,
    REPLICA_DEGRADED,
)
from keda_llm.exporter.collect import Snapshot, TargetState
from keda_llm.exporter.degraded import replica_reasons
from keda_llm.exporter.errors import REASONS
from keda_llm.exporter.model import EngineMetrics, GpuMetrics, Histogram

#: Labels of the per-target health series: the target is known before its body says its model.
TARGET_LABELS = ("target", "namespace", "pod", "node")


def escape(value: str) -> str:
    """Escape a label value: backslash, double quote and line feed, as the text format requires."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def fmt(value: float) -> str:
    """A sample value as Go's ParseFloat and prometheus_client both read it."""
    if value != value:
        return "NaN"
    if value in (math.inf, -math.inf):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class LabelSet:
    """The text of one label set (`a="x",b="y"`), names and order fixed once: `LabelSet(names)(*values)`."""

    def __init__(self, names: Sequence[str]) -> None:
        self._arity = len(names)
        self._template = ",".join(f'{name}="{{}}"' for name in names)

    def __call__(self, *values: str) -> str:
        if len(values) != self._arity:
            raise ValueError(f"{len(values)} label values for {self._arity} names: {values!r}")
        return self._template.format(*map(escape, values))


_ENGINE_LABELSET = LabelSet(ENGINE_LABELS)
_GPU_LABELSET = LabelSet(GPU_LABELS)
_TARGET_LABELSET = LabelSet(TARGET_LABELS)


def _family(out: list[str], name: str, mtype: str, help_text: str, lines: Iterable[str]) -> None:
    """HELP and TYPE, then the samples; a family with no samples is left out whole."""
    body = list(lines)
    if body:
        help_text = help_text.replace("\\", "\\\\").replace("\n", "\\n")
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} {mtype}\n")
        out.extend(body)


def _engine_labels(model: str, engine: str, role: str, st: TargetState, node: str) -> str:
    t = st.target
    return _ENGINE_LABELSET(model, engine, role, t.namespace, t.pod, t.node or node)


def _histogram(name: str, labels: str, h: Histogram) -> Iterator[str]:
    for bound, count in h.buckets:
        yield f'{name}_bucket{{{labels},le="{fmt(bound)}"}} {fmt(count)}\n'
    yield f"{name}_sum{{{labels}}} {fmt(h.sum)}\n{name}_count{{{labels}}} {fmt(h.count)}\n"


def _engine_series(snapshot: Snapshot) -> tuple[list[tuple[str, EngineMetrics, TargetState]],
                                                 list[tuple[str, TargetState]]]:
    """(labels, metrics, state) for each live series, and (labels, state) for each up/last-success
    series. An up target's series are its metrics (its `identities` are derived from them); a down
    one keeps the identities of its last success. A label set already claimed (two targets saying
    the same model and pod, or an adapter repeating one) is dropped with its series, so the
    exposition never carries a duplicate; each label set is formatted once."""
    live: list[tuple[str, EngineMetrics, TargetState]] = []
    status: list[tuple[str, TargetState]] = []
    seen: set[str] = set()
    for st in snapshot.targets:
        if st.up and st.metrics:
            for m in st.metrics:
                labels = _engine_labels(m.model, m.engine, m.role, st, snapshot.node)
                if labels not in seen:
                    seen.add(labels)
                    status.append((labels, st))
                    live.append((labels, m, st))
            continue
        for model, engine, role in st.identities or (st.fallback_identity(),):
            labels = _engine_labels(model, engine, role, st, snapshot.node)
            if labels not in seen:
                seen.add(labels)
                status.append((labels, st))
    return live, status


def _render_engines(out: list[str], snapshot: Snapshot) -> None:
    live, status = _engine_series(snapshot)
    _family(out, ENGINE_UP, "gauge", "1 if the last scrape of this engine succeeded and parsed.",
            (f"{ENGINE_UP}{{{labels}}} {'1' if st.up else '0'}\n" for labels, st in status))
    _family(out, ENGINE_LAST_SUCCESS, "gauge", "Unix time of the last successful scrape of this engine.",
            (f"{ENGINE_LAST_SUCCESS}{{{labels}}} {fmt(st.last_success)}\n"
             for labels, st in status if st.last_success is not None))
    _family(out, ENGINE_INFO, "gauge", "Engine type and version (value 1).",
            (f'{ENGINE_INFO}{{{labels},version="{escape(m.version or "")}"}} 1\n' for labels, m, _ in live))
    _family(out, ENGINE_STARTUP, "gauge", "Measured cold start: container start to the first successful scrape.",
            (f"{ENGINE_STARTUP}{{{labels}}} {fmt(st.startup_seconds)}\n"
             for labels, _, st in live if st.startup_seconds is not None))
    for metric in ENGINE_METRICS:
        lines: list[str] = []
        for labels, m, _ in live:
            value = getattr(m, metric.field)
            if value is None:
                continue
            if metric.type == "histogram":
                lines.extend(_histogram(metric.name, labels, value))
            else:
                lines.append(f"{metric.name}{{{labels}}} {fmt(value)}\n")
        _family(out, metric.name, metric.type, metric.help, lines)
    _render_degraded(out, snapshot, live)


def _render_degraded(out: list[str], snapshot: Snapshot, live: list[tuple[str, EngineMetrics, TargetState]]) -> None:
    """llm_replica_degraded{engine labels, reason}: 0/1 per reason, for replicas holding an attributed GPU."""
    if not snapshot.gpus:
        return
    reasons = replica_reasons(snapshot.gpus)
    lines: list[str] = []
    for labels, _, st in live:
        held = reasons.get((st.target.namespace, st.target.pod)) if st.target.pod else None
        if held is not None:
            lines.extend(f'{REPLICA_DEGRADED}{{{labels},reason="{r}"}} {1 if held[r] else 0}\n'
                         for r in DEGRADED_REASONS)
    _family(out, REPLICA_DEGRADED, "gauge",
            "1 while a GPU this replica's pod holds has the fault named by reason (exporter/degraded.py).", lines)


def _gpu_labels(g: GpuMetrics, node: str) -> str:
    a = g.attribution
    return _GPU_LABELSET(g.index, g.uuid, g.gpu_model, g.mig_profile, node, a.get("namespace", ""),
                         a.get("pod", ""), a.get("container", ""))


def _render_gpus(out: list[str], snapshot: Snapshot) -> None:
    labels = [(_gpu_labels(g, snapshot.node), g) for g in snapshot.gpus]
    _family(out, GPU_UP, "gauge", "1 if NVML answered for this GPU in the last cycle.",
            (f"{GPU_UP}{{{lab}}} {'1' if g.up else '0'}\n" for lab, g in labels))
    for metric in GPU_METRICS:
        _family(out, metric.name, metric.type, metric.help,
                (f"{metric.name}{{{lab}}} {fmt(v)}\n" for lab, g in labels
                 if (v := getattr(g, metric.field)) is not None))
    _family(out, GPU_CLOCK_EVENT, "gauge", "1 while this NVML clock event reason holds the clocks down, else 0.",
            (f'{GPU_CLOCK_EVENT}{{{lab},reason="{name}"}} {1 if mask & bit else 0}\n'
             for lab, g in labels if (mask := g.clock_event_reasons) is not None
             for name, bit in CLOCK_EVENT_REASONS))
    for metric in GPU_FAULT_METRICS:
        _family(out, metric.name, metric.type, metric.help,
                (f"{metric.name}{{{lab}}} {fmt(v)}\n" for lab, g in labels
                 if (v := getattr(g, metric.field)) is not None))


def _render_health(out: list[str], snapshot: Snapshot) -> None:
    target_labels = [(_TARGET_LABELSET(st.target.shown_url, st.target.namespace, st.target.pod,
                                       st.target.node or snapshot.node), st) for st in snapshot.targets]
    _family(out, EXPORTER_SCRAPE_DURATION, "gauge", "How long the last scrape of this target took (fetch + parse).",
            (f"{EXPORTER_SCRAPE_DURATION}{{{lab}}} {fmt(st.last_duration)}\n"
             for lab, st in target_labels if st.last_duration is not None))
    _family(out, EXPORTER_SCRAPE_ERRORS, "counter", "Failed scrapes of this target, by reason.",
            (f'{EXPORTER_SCRAPE_ERRORS}{{{lab},reason="{r}"}} {st.errors.get(r, 0)}\n'
             for lab, st in target_labels for r in REASONS))
    node = escape(snapshot.node)
    up = sum(1 for st in snapshot.targets if st.up)
    _family(out, EXPORTER_TARGETS, "gauge", "Targets in the last cycle (state=all), and how many were up (state=up).",
            [f'{EXPORTER_TARGETS}{{node="{node}",state="all"}} {len(snapshot.targets)}\n',
             f'{EXPORTER_TARGETS}{{node="{node}",state="up"}} {up}\n'])
    _family(out, EXPORTER_CYCLE_DURATION, "gauge", "Wall time of the last collection cycle.",
            [f'{EXPORTER_CYCLE_DURATION}{{node="{node}"}} {fmt(snapshot.cycle_seconds)}\n']
            if snapshot.cycle_seconds is not None else [])
    _family(out, EXPORTER_DISCOVERY_ERRORS, "counter", "Failed Kubernetes pod listings.",
            [f'{EXPORTER_DISCOVERY_ERRORS}{{node="{node}"}} {snapshot.discovery_errors}\n'])


def render(snapshot: Snapshot) -> str:
    """The whole exposition for one cycle."""
    out: list[str] = []
    _render_engines(out, snapshot)
    _render_gpus(out, snapshot)
    _render_health(out, snapshot)
    return "".join(out)
