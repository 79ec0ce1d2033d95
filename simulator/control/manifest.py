"""A ScaledObject model back to the manifest KEDA reads: the inverse of `scaledobject_from_dict`.

The tuner simulates exactly what it writes: it builds each candidate as the one ScaledObject model, writes it
with `scaledobject_manifest`, and the simulator runs the manifest read back through the same validating
loader users' files go through (simulator/control/scaledobject.py). Fields left at KEDA's defaults are
written anyway where a reader would look for them (scaleTargetRef, polling, cooldown, min and max), and
left out where they are optional (fallback, idleReplicaCount, initialCooldownPeriod, tolerance).
"""

from __future__ import annotations

from typing import Any

from keda_llm.scaler.scaledobject import (
    DEFAULT_INITIAL_COOLDOWN_PERIOD_S,
    DEFAULT_METRIC_TYPE,
    ScaledObject,
    ScalingRules,
)
from keda_llm.simulator.control.scaledobject import API_VERSION


def _rules(r: ScalingRules) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if r.stabilization_window_seconds is not None:
        out["stabilizationWindowSeconds"] = r.stabilization_window_seconds
    if r.select_policy is not None:
        out["selectPolicy"] = r.select_policy
    if r.policies is not None:
        out["policies"] = [{"type": p.type, "value": p.value, "periodSeconds": p.period_seconds} for p in r.policies]
    if r.tolerance is not None:  # KEDA >= 2.18 and Kubernetes >= 1.33 only (deploy/README.md)
        out["tolerance"] = f"{r.tolerance:g}"
    return out


def scaledobject_manifest(so: ScaledObject) -> dict[str, Any]:
    """The `keda.sh/v1alpha1` ScaledObject document for `so` (plain dicts and lists, ready for yaml.safe_dump)."""
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": so.target_api_version, "kind": so.target_kind, "name": so.target_name},
        "pollingInterval": so.polling_interval_s,
        "cooldownPeriod": so.cooldown_period_s,
    }
    if so.initial_cooldown_period_s != DEFAULT_INITIAL_COOLDOWN_PERIOD_S:
        spec["initialCooldownPeriod"] = so.initial_cooldown_period_s
    if so.idle_replicas is not None:
        spec["idleReplicaCount"] = so.idle_replicas
    spec["minReplicaCount"] = so.min_replicas
    spec["maxReplicaCount"] = so.max_replicas
    if so.fallback is not None:
        spec["fallback"] = {"failureThreshold": so.fallback.failure_threshold, "replicas": so.fallback.replicas,
                            "behavior": so.fallback.behavior}
    if so.behavior is not None:
        behavior: dict[str, Any] = {}
        if so.behavior.scale_up is not None:
            behavior["scaleUp"] = _rules(so.behavior.scale_up)
        if so.behavior.scale_down is not None:
            behavior["scaleDown"] = _rules(so.behavior.scale_down)
        spec["advanced"] = {"horizontalPodAutoscalerConfig": {"behavior": behavior}}
    triggers: list[dict[str, Any]] = []
    for t in so.triggers:
        trig: dict[str, Any] = {"type": t.type}
        if t.name:
            trig["name"] = t.name
        if t.metric_type != DEFAULT_METRIC_TYPE:
            trig["metricType"] = t.metric_type
        if t.use_cached_metrics:
            trig["useCachedMetrics"] = True
        trig["metadata"] = dict(t.metadata)
        triggers.append(trig)
    spec["triggers"] = triggers
    return {"apiVersion": API_VERSION, "kind": "ScaledObject",
            "metadata": {"name": so.name, "namespace": so.namespace}, "spec": spec}
