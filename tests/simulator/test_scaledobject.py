"""Reading real ScaledObject YAML: KEDA's defaults, the CRD schema, and clear errors with paths."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from keda_llm.simulator.control.hpa import Behavior, ScalingPolicy, ScalingRules
from keda_llm.simulator.control.keda import ScaledObjectRef
from keda_llm.simulator.control.loop import KedaHpaLoop
from keda_llm.simulator.control.scaledobject import (
    CRD_PATH,
    Fallback,
    KedaSettings,
    ScaledObjectError,
    Trigger,
    crd_schema,
    load_scaledobject,
    parse_quantity,
    parse_scaledobjects,
    validate_scaledobject,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "scaledobjects"
ADDRESS = "keda-llm-scaler.keda-llm.svc:9090"


def test_vllm_external_with_keda_defaults() -> None:
    s = load_scaledobject(FIXTURES / "vllm-external.yaml")  # the Deployment document is skipped
    assert s == KedaSettings(
        name="llama-8b", namespace="llm", target_name="llama-8b", target_kind="Deployment",
        triggers=(Trigger("external", {
            "scalerAddress": ADDRESS, "model": "meta-llama/Llama-3.1-8B-Instruct", "policy": "tokens",
            "targetKVUtilization": "0.8", "scaleToZero": "true", "idleTimeout": "10m"}),),
        polling_interval_s=15, cooldown_period_s=300, initial_cooldown_period_s=0, min_replicas=0, max_replicas=8,
    )
    assert s.hpa_min_replicas == 1
    assert s.hpa_config().max_replicas == 8


def test_recommended_push_object_with_behavior_and_fallback() -> None:
    s = load_scaledobject(FIXTURES / "vllm-push-recommended.yaml")
    assert s.triggers[0].is_push and s.triggers[0].name == "llm"
    assert (s.polling_interval_s, s.cooldown_period_s, s.initial_cooldown_period_s) == (10, 120, 600)
    assert s.fallback == Fallback(3, 2, "currentReplicasIfHigher")
    assert s.behavior == Behavior(
        scale_up=ScalingRules(0, "Max", (ScalingPolicy("Pods", 16, 15),), 0.0),
        scale_down=ScalingRules(30, None, (ScalingPolicy("Percent", 100, 15),), 0.0),
    )


def test_all_defaults() -> None:
    doc = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "x"},
           "spec": {"scaleTargetRef": {"name": "x"}, "triggers": [{"type": "external",
                                                                    "metadata": {"scalerAddress": "a:1"}}]}}
    [s] = parse_scaledobjects(yaml.safe_dump(doc))
    got = (s.namespace, s.polling_interval_s, s.cooldown_period_s, s.initial_cooldown_period_s, s.min_replicas,
           s.max_replicas, s.idle_replicas, s.fallback, s.behavior)
    assert got == ("default", 30, 300, 0, 0, 100, None, None, None)
    assert s.triggers[0].metric_type == "AverageValue"


def test_pick_by_name() -> None:
    assert load_scaledobject(FIXTURES / "two-scaledobjects.yaml", name="large").min_replicas == 1
    with pytest.raises(ScaledObjectError, match=r"2 ScaledObjects \(small, large\); pass name="):
        load_scaledobject(FIXTURES / "two-scaledobjects.yaml")
    with pytest.raises(ScaledObjectError, match="no ScaledObject named 'medium'"):
        load_scaledobject(FIXTURES / "two-scaledobjects.yaml", name="medium")


@pytest.mark.parametrize(("fixture", "problems"), [
    ("invalid-unquoted-metadata.yaml", [
        "spec.triggers[0].metadata.scaleToZero: True is not of type 'string' (trigger metadata values are strings: "
        "quote it)",
        "spec.triggers[0].metadata.targetKVUtilization: 0.8 is not of type 'string' (trigger metadata values are "
        "strings: quote it)"]),
    ("invalid-typo-and-bounds.yaml", [
        "spec.pollingInterval: 0 is less than the minimum of 1",
        "spec.cooldownPeriods: unknown field (not in the ScaledObject CRD schema)",
        "spec.minReplicaCount: minReplicaCount (5) must be less than or equal to maxReplicaCount (2)"]),
    ("invalid-missing-fields.yaml", [
        "spec: 'scaleTargetRef' is a required property",
        "spec.fallback: 'replicas' is a required property",
        "spec.triggers[0].type: '' should be non-empty",
        "spec.triggers[1]: 'metadata' is a required property"]),
    ("invalid-behavior.yaml", [
        f"spec.advanced.horizontalPodAutoscalerConfig.behavior.{m}" for m in (
            "scaleUp.selectPolicy: must be Max, Min or Disabled, got 'Maximum'",
            "scaleUp.policies[0].type: must be Pods or Percent, got 'Replicas'",
            "scaleDown.stabilizationWindowSeconds: must be within [0, 3600], got 7200",
            "scaleDown.policies[0].value: must be greater than zero, got 0",
            "scaleDown.policies[0].periodSeconds: must be within (0, 1800], got 3600",
            "scaleDown.tolerance: must be greater than or equal to zero, got '-0.1'")]),
    ("invalid-prometheus-trigger.yaml", [
        "spec.triggers[0].type: the emulator runs only external and external-push triggers (KEDA's external "
        "scaler contract), got 'prometheus'"]),
])
def test_invalid_fixtures_list_every_problem(fixture: str, problems: list[str]) -> None:
    with pytest.raises(ScaledObjectError) as info:
        load_scaledobject(FIXTURES / fixture)
    assert [str(p) for p in info.value.problems] == [f"document 0 (llama-8b): {p}" for p in problems]
    assert str(info.value).startswith(f"{FIXTURES / fixture}: invalid ScaledObject ({len(problems)} problem(s))")


def _doc(**spec: object) -> dict[str, object]:
    base: dict[str, object] = {"scaleTargetRef": {"name": "t"},
                               "triggers": [{"type": "external", "metadata": {"scalerAddress": ADDRESS}}]}
    base.update(spec)
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "so"}, "spec": base}


@pytest.mark.parametrize(("doc", "problem"), [
    (_doc(idleReplicaCount=1, minReplicaCount=1), "spec.idleReplicaCount: idleReplicaCount (1) must be less than "
                                                  "minReplicaCount (1)"),
    (_doc(minReplicaCount=101), "spec.minReplicaCount: minReplicaCount (101) must be less than or equal to "
                                "maxReplicaCount (100, the default)"),
    (_doc(maxReplicaCount=0), "spec.maxReplicaCount: 0 is less than the minimum of 1"),
    (_doc(pollingInterval=2**31), f"spec.pollingInterval: {2**31} is not a 'int32'"),
    (_doc(fallback={"failureThreshold": 3, "replicas": 2, "behavior": "sometimes"}),
     "spec.fallback.behavior: 'sometimes' is not one of ['static', 'currentReplicas', 'currentReplicasIfHigher', "
     "'currentReplicasIfLower', 'scalingModifiers']"),
    (_doc(triggers=[{"type": "external", "metadata": {"model": "m"}}]),
     "spec.triggers[0].metadata.scalerAddress: is required for external triggers (host:port)"),
    (_doc(triggers=[{"type": "external", "metadata": {"scalerAddress": "a:1"}, "metricType": "Utilization"}]),
     "spec.triggers[0].metricType: external metrics support AverageValue or Value, got 'Utilization'"),
    (_doc(triggers=[{"type": "external", "name": "a", "metadata": {"scalerAddress": "a:1"}},
                    {"type": "external", "name": "a", "metadata": {"scalerAddress": "b:1"}}]),
     "spec.triggers[1].name: trigger name 'a' is also used by spec.triggers[0]"),
    (_doc(advanced={"scalingModifiers": {"formula": "a + b", "target": "2"}}),
     "spec.advanced.scalingModifiers: scalingModifiers (formula) is not modelled by the emulator"),
    ({**_doc(), "apiVersion": "keda.sh/v1"}, "apiVersion: must be keda.sh/v1alpha1, got 'keda.sh/v1'"),
    ({**_doc(), "metadata": {"name": "x" * 64}}, "metadata.name: must be at most 63 characters (KEDA >= 2.20), got 64"),
])
def test_validation_table(doc: dict[str, object], problem: str) -> None:
    assert [str(p) for p in validate_scaledobject(doc)] == [problem]


def test_not_yaml_and_not_a_scaledobject() -> None:
    with pytest.raises(ScaledObjectError, match="not valid YAML"):
        parse_scaledobjects("spec: [unclosed")
    with pytest.raises(ScaledObjectError, match="no document of kind ScaledObject"):
        _load_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")
    with pytest.raises(ScaledObjectError, match="cannot read"):
        load_scaledobject(FIXTURES / "missing.yaml")


def _load_text(text: str) -> KedaSettings:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "so.yaml"
        path.write_text(text)
        return load_scaledobject(path)


def test_settings_built_in_code_are_checked_too() -> None:
    with pytest.raises(ScaledObjectError, match=r"spec.minReplicaCount: minReplicaCount \(3\) must be <= "
                                                r"maxReplicaCount \(2\)"):
        KedaSettings(min_replicas=3, max_replicas=2)
    with pytest.raises(ScaledObjectError, match=r"spec\.pollingInterval: must be >= 1, got 0"):
        KedaSettings(polling_interval_s=0)


@pytest.mark.parametrize(("text", "value"), [("0", 0.0), ("0.05", 0.05), ("50m", 0.05), (".5", 0.5), ("1e-2", 0.01),
                                              ("1Ki", 1024.0), (0, 0.0)])
def test_parse_quantity(text: str | int, value: float) -> None:
    assert parse_quantity(text) == pytest.approx(value)


def test_vendored_crd_is_keda_scaledobject_v1alpha1() -> None:
    crd = yaml.safe_load(CRD_PATH.read_text())
    assert (crd["spec"]["group"], crd["spec"]["names"]["kind"]) == ("keda.sh", "ScaledObject")
    assert crd_schema()["properties"]["spec"]["required"] == ["scaleTargetRef", "triggers"]


def test_a_loaded_object_drives_the_emulator() -> None:
    """The metadata KEDA would send reaches the scaler verbatim, with the ScaledObject's identity."""
    s = load_scaledobject(FIXTURES / "vllm-external.yaml")
    seen: list[ScaledObjectRef] = []

    class Scaler:
        def get_metric_spec(self, ref: ScaledObjectRef) -> list[object]:
            from keda_llm.simulator.control.keda import MetricSpec

            seen.append(ref)
            return [MetricSpec("llama", 1.0, 1)]

        def get_metrics(self, ref: ScaledObjectRef, metric_name: str) -> list[object]:
            from keda_llm.simulator.control.keda import MetricValue

            return [MetricValue(metric_name, 3.0, 3)]

        def is_active(self, ref: ScaledObjectRef) -> bool:
            return True

    loop = KedaHpaLoop(s, Scaler())  # type: ignore[arg-type]
    loop.advance_to(0)
    assert seen[0] == ScaledObjectRef("llama-8b", "llm", dict(s.triggers[0].metadata))
    assert loop.keda.hpa_metrics is not None and loop.keda.hpa_metrics[0].name == "s0-llama"
    assert loop.spec_replicas == 3  # KEDA 0 -> 1, then the HPA 1 -> 3 at the same instant
