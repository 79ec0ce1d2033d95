"""examples/warm-capacity.yaml: the placeholders hold the nodes the model's pod needs, make the cluster
autoscaler add them, and give way to the model's pod.

The facts checked, from the Kubernetes and cluster-autoscaler documentation:
- the scheduler preempts only pods of strictly lower priority, and only for a pod whose
  preemptionPolicy is not Never (kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption);
  a pod with no priorityClassName gets the globalDefault class's value, or 0 when there is none;
- for an extended resource (nvidia.com/gpu) a container's request defaults to its limit, and the two
  must be equal (kubernetes.io/docs/concepts/configuration/manage-resources-containers, "Extended
  resources");
- the cluster autoscaler neither scales up for nor protects pods below --expendable-pods-priority-cutoff,
  -10 by default (kubernetes/autoscaler cluster-autoscaler/FAQ.md, "How does Cluster Autoscaler work with
  Pod Priority and Preemption?").
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from test_deploy_manifests import DEPLOY, EXAMPLE_FILES, load_docs

JSON = dict[str, Any]
CA_EXPENDABLE_CUTOFF = -10
PLAIN_RESOURCES = ("cpu", "memory", "ephemeral-storage")


def examples() -> list[JSON]:
    return [d for p in EXAMPLE_FILES for d in load_docs(p)]


def one(kind: str, name: str, docs: list[JSON]) -> JSON:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def priority(pod: JSON, classes: list[JSON]) -> tuple[int, str]:
    """(priority, preemptionPolicy) the admission controller gives a pod template's pods."""
    name = pod.get("priorityClassName")
    if name is None:
        default = [c for c in classes if c.get("globalDefault")]
        assert len(default) <= 1
        return (default[0]["value"], default[0].get("preemptionPolicy", "PreemptLowerPriority")) if default else (
            0, "PreemptLowerPriority")
    pc = one("PriorityClass", name, classes)
    return pc["value"], pc.get("preemptionPolicy", "PreemptLowerPriority")


def extended_requests(pod: JSON) -> Counter[str]:
    """What the pod requests of each extended resource (a request defaults to the limit; they must agree)."""
    out: Counter[str] = Counter()
    for c in pod["containers"]:
        limits, requests = c.get("resources", {}).get("limits", {}), c.get("resources", {}).get("requests", {})
        for name in set(limits) | set(requests):
            if name in PLAIN_RESOURCES or name.startswith("hugepages-"):
                continue
            if name in limits and name in requests:
                assert str(limits[name]) == str(requests[name]), f"{c['name']}: {name} request != limit"
            out[name] += int(limits.get(name, requests.get(name)))
    return out


def preempts(preemptor: tuple[int, str], victim: tuple[int, str]) -> bool:
    return preemptor[1] != "Never" and victim[0] < preemptor[0]


@pytest.fixture(scope="module")
def world() -> tuple[JSON, JSON, JSON, list[JSON]]:
    docs = examples()
    classes = [d for d in docs if d["kind"] == "PriorityClass"]
    so = one("ScaledObject", "llama-8b-warm-capacity", docs)
    placeholder = one("Deployment", so["spec"]["scaleTargetRef"]["name"], docs)
    assert placeholder["metadata"]["namespace"] == so["metadata"]["namespace"]
    model_so = [d for d in docs if d["kind"] == "ScaledObject" and d["metadata"]["name"] != so["metadata"]["name"]
                and d["spec"]["triggers"][0]["metadata"].get("model") == so["spec"]["triggers"][0]["metadata"]["model"]
                and d["metadata"]["namespace"] == so["metadata"]["namespace"]]
    assert model_so, "the placeholders stand in for a model some example ScaledObject scales"
    model = one("Deployment", model_so[0]["spec"]["scaleTargetRef"]["name"],
                [d for d in docs if d["metadata"].get("namespace") == so["metadata"]["namespace"]])
    return placeholder["spec"]["template"]["spec"], model["spec"]["template"]["spec"], so, classes


def test_placeholders_rank_below_the_model_and_never_preempt(world: Any) -> None:
    placeholder, model, _, classes = world
    ph, mo = priority(placeholder, classes), priority(model, classes)
    assert ph[1] == "Never"  # a placeholder evicts nothing
    assert preempts(mo, ph), f"the model's pods {mo} cannot preempt the placeholders {ph}"
    assert not preempts(ph, mo)
    pc = one("PriorityClass", placeholder["priorityClassName"], classes)
    assert pc["globalDefault"] is False  # never the class of pods that name none


def test_placeholders_still_make_the_cluster_autoscaler_add_nodes(world: Any) -> None:
    placeholder, _, _, classes = world
    value, _ = priority(placeholder, classes)
    assert CA_EXPENDABLE_CUTOFF <= value < 0


def test_placeholders_request_the_models_gpus_and_land_where_the_model_can(world: Any) -> None:
    placeholder, model, _, _ = world
    gpus = extended_requests(model)
    assert gpus == Counter({"nvidia.com/gpu": 1})  # the example: one GPU
    assert extended_requests(placeholder) == gpus  # the same resource names and counts: one node's worth
    # never on a node the model could not use: same node selection, no toleration the model lacks
    assert placeholder.get("nodeSelector") == model.get("nodeSelector")
    assert placeholder.get("affinity") == model.get("affinity")
    assert all(t in model.get("tolerations", []) for t in placeholder.get("tolerations", []))
    # and it gives way at once
    assert placeholder["terminationGracePeriodSeconds"] == 0


def test_the_preemption_rule_refuses_what_the_scheduler_refuses() -> None:
    assert preempts((0, "PreemptLowerPriority"), (-1, "Never"))
    assert not preempts((0, "PreemptLowerPriority"), (0, "Never"))  # equal priority: no preemption
    assert not preempts((0, "Never"), (-1, "Never"))  # a Never pod waits
    pod = {"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": 2, "memory": "1Gi"}}},
                          {"name": "b", "resources": {"requests": {"nvidia.com/gpu": "1"},
                                                      "limits": {"nvidia.com/gpu": "1"}}}]}
    assert extended_requests(pod) == Counter({"nvidia.com/gpu": 3})
    assert (DEPLOY / "examples" / "warm-capacity.yaml").exists()
