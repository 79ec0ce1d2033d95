"""One ScaledObject model (scaler/scaledobject.py): the scaler's Kubernetes reader and the simulator's
manifest loader build the very same class from the same object, and every default is named once."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import yaml
from fakekube import scaled_object

from keda_llm.scaler import model, scaledobject
from keda_llm.scaler.kube import KubeError, scaled_object_from_json
from keda_llm.scaler.scaledobject import ScaledObject, ScaledObjectError, scaledobject_from_dict
from keda_llm.simulator.control import hpa
from keda_llm.simulator.control.scaledobject import KedaSettings, parse_scaledobjects

SPEC: dict[str, Any] = {
    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama-8b"},
    "pollingInterval": 10,
    "cooldownPeriod": 120,
    "initialCooldownPeriod": 600,
    "minReplicaCount": 1,
    "maxReplicaCount": 8,
    "idleReplicaCount": 0,
    "fallback": {"failureThreshold": 3, "replicas": 2, "behavior": "currentReplicasIfHigher"},
    "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {
        "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "tolerance": "0",
                    "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15}]},
        "scaleDown": {"stabilizationWindowSeconds": 60, "tolerance": "50m",
                      "policies": [{"type": "Percent", "value": 50, "periodSeconds": 30}]}}}},
    "triggers": [
        {"type": "external-push", "name": "llm", "metadata": {
            "scalerAddress": "keda-llm-scaler.keda-llm:9090", "model": "meta-llama/Llama-3.1-8B-Instruct"}},
        {"type": "external", "metricType": "Value", "useCachedMetrics": True, "metadata": {
            "scalerAddress": "keda-llm-scaler.keda-llm:9090", "model": "other", "scaleToZero": "true"}},
    ],
}


@pytest.mark.parametrize("spec", [SPEC, {"scaleTargetRef": {"name": "llama-8b"}, "triggers": [
    {"type": "external", "metadata": {"scalerAddress": "a:1"}}]}], ids=["everything", "defaults"])
def test_the_kube_reader_and_the_simulator_loader_build_the_same_object(spec: dict[str, Any]) -> None:
    served = scaled_object("llm", "llama", spec)  # as the API server returns it, status included
    from_api = scaled_object_from_json(served)
    manifest = {k: v for k, v in served.items() if k != "status"}
    manifest["metadata"] = {"name": "llama", "namespace": "llm"}
    [from_yaml] = parse_scaledobjects(yaml.safe_dump(manifest))
    assert type(from_api) is type(from_yaml) is ScaledObject is KedaSettings
    assert dataclasses.asdict(from_api) == dataclasses.asdict(from_yaml)
    assert from_api == from_yaml


def test_defaults_are_keda_s_and_named_once() -> None:
    so = scaled_object_from_json(scaled_object("llm", "x", {"scaleTargetRef": {"name": "x"}}))
    assert (so.polling_interval_s, so.cooldown_period_s, so.initial_cooldown_period_s, so.min_replicas,
            so.max_replicas, so.target_api_version, so.target_kind) == (30, 300, 0, 0, 100, "apps/v1", "Deployment")
    assert so == ScaledObject(name="x", namespace="llm", target_name="x")
    # the scaler's workload view, the HPA emulator and the HPA KEDA makes take the same numbers
    w = model.WorkloadState(current_replicas=0, ready_replicas=0)
    assert (w.min_replicas, w.max_replicas, w.polling_interval_s, w.cooldown_period_s) == (
        scaledobject.DEFAULT_MIN_REPLICAS, scaledobject.DEFAULT_MAX_REPLICAS,
        scaledobject.DEFAULT_POLLING_INTERVAL_S, scaledobject.DEFAULT_COOLDOWN_PERIOD_S)
    assert hpa.DEFAULT_SYNC_PERIOD_S is scaledobject.DEFAULT_SYNC_PERIOD_S
    assert hpa.DEFAULT_SCALE_UP_POLICIES is scaledobject.DEFAULT_SCALE_UP_POLICIES
    assert hpa.HPAConfig is scaledobject.HPAConfig and hpa.Behavior is scaledobject.Behavior
    config = so.hpa_config()
    assert (config.min_replicas, config.max_replicas, config.tolerance, config.downscale_stabilization_s,
            config.sync_period_s) == (1, 100, 0.1, 300, 15.0)


def test_checked_by_default_and_unchecked_for_what_the_api_server_holds() -> None:
    doc = scaled_object("llm", "x", {"scaleTargetRef": {"name": "x"}, "minReplicaCount": 1, "idleReplicaCount": 1})
    with pytest.raises(ScaledObjectError, match=r"spec\.idleReplicaCount: idleReplicaCount \(1\) must be >= 0 and < "):
        scaledobject_from_dict(doc)
    assert scaled_object_from_json(doc).idle_replicas == 1  # KEDA's webhook is optional: read what is there
    with pytest.raises(KubeError, match=r"ScaledObject llm/x spec\.advanced\.horizontalPodAutoscalerConfig\.behavior"
                                        r"\.scaleUp\.policies\[0\]\.value is 'four', expected an integer"):
        scaled_object_from_json(scaled_object("llm", "x", {"scaleTargetRef": {"name": "x"}, "advanced": {
            "horizontalPodAutoscalerConfig": {"behavior": {"scaleUp": {"policies": [
                {"type": "Pods", "value": "four", "periodSeconds": 15}]}}}}}))
