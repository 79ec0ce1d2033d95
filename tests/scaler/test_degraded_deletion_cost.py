"""--pod-deletion-cost (scaler/deletion_cost.py): the worst degraded pod carries the annotation, over real
HTTP against the fake API server (tests/fakekube.py), through the real KubeClient."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakekube import FakeKube, pod

from keda_llm.scaler import cli as scaler_cli
from keda_llm.scaler.deletion_cost import ANNOTATION, MARK, DeletionCostMarker, worst_pod
from keda_llm.scaler.kube import KubeClient, KubeConfig
from keda_llm.scaler.model import Decision, PolicyState, WorkloadState


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[tuple[FakeKube, DeletionCostMarker]]:
    token = tmp_path / "token"
    token.write_text("t")
    with FakeKube(token="t") as api:
        api.pods = [pod(f"llama-{i}", namespace="llm") for i in range(4)]
        client = KubeClient(KubeConfig(base_url=api.url, token_path=str(token), ca_path=None))
        yield api, DeletionCostMarker(client.merge_patch, background=False)
        client.close()


def marks(api: FakeKube) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["annotations"][ANNOTATION] for p in api.pods
            if ANNOTATION in p["metadata"].get("annotations", {})}


def test_worst_pod() -> None:
    assert worst_pod({"capacity_deficit": 0.0}) is None
    assert worst_pod({"replica_fraction:gpu_xid:b": 0.5, "replica_fraction:slow:a": 0.25, "x": 0.0}) == "a"
    assert worst_pod({"replica_fraction:gpu_xid:b": 0.5, "replica_fraction:gpu_ecc:a": 0.5}) == "a"  # tie: name


def test_the_mark_follows_the_worst_pod_and_comes_off(kube: tuple[FakeKube, DeletionCostMarker]) -> None:
    api, marker = kube
    marker.observe("llm", "llama", {"replica_fraction:gpu_throttled:llama-1": 0.5,
                                    "replica_fraction:slow:llama-2": 0.25})
    marker.flush()
    assert marks(api) == {"llama-2": MARK}
    patches = len(api.requests)
    marker.observe("llm", "llama", {"replica_fraction:gpu_throttled:llama-1": 0.5,
                                    "replica_fraction:slow:llama-2": 0.3})
    marker.flush()
    assert len(api.requests) == patches  # the same pod is still the worst: no call
    marker.observe("llm", "llama", {"replica_fraction:gpu_throttled:llama-1": 0.5})  # llama-2 recovered
    marker.flush()
    assert marks(api) == {"llama-1": MARK}
    marker.observe("llm", "llama", {"capacity_deficit": 0.0})  # all healthy: nothing marked
    marker.flush()
    assert marks(api) == {}
    assert {r.method for r in api.requests} == {"PATCH"}


def test_a_pod_it_did_not_mark_keeps_its_own_cost(kube: tuple[FakeKube, DeletionCostMarker]) -> None:
    api, marker = kube
    api.pods[3]["metadata"]["annotations"] = {ANNOTATION: "500"}  # a user's own choice
    marker.observe("llm", "llama", {"replica_fraction:gpu_xid:llama-0": 0.5})
    marker.flush()
    marker.observe("llm", "llama", {})
    marker.flush()
    assert marks(api) == {"llama-3": "500"}


def test_a_failed_patch_is_tried_again_at_the_next_decision(kube: tuple[FakeKube, DeletionCostMarker]) -> None:
    api, marker = kube
    api.fail["/api/v1/namespaces/llm/pods/llama-0"] = 500
    marker.observe("llm", "llama", {"replica_fraction:gpu_xid:llama-0": 0.5})
    marker.flush()
    assert marks(api) == {}
    del api.fail["/api/v1/namespaces/llm/pods/llama-0"]
    marker.observe("llm", "llama", {"replica_fraction:gpu_xid:llama-0": 0.5})
    marker.flush()
    assert marks(api) == {"llama-0": MARK}


def test_wrap_sees_every_decision(kube: tuple[FakeKube, DeletionCostMarker]) -> None:
    api, marker = kube

    class History:
        namespace, model = "llm", "llama"

    def decide(history: object, config: object, state: PolicyState, workload: WorkloadState,
               now: float) -> tuple[Decision, PolicyState]:
        return Decision(3, "steady", True, {"replica_fraction:slow:llama-3": 0.4}), state

    decision, _ = marker.wrap(decide)(History(), None, PolicyState(), WorkloadState(3, 3), 0.0)
    marker.flush()
    assert decision.replicas == 3 and marks(api) == {"llama-3": MARK}


def test_the_flag_needs_the_kubernetes_api() -> None:
    parser = argparse.ArgumentParser()
    scaler_cli.add_arguments(parser)
    args = parser.parse_args(["--no-kube", "--pod-deletion-cost", "--exporters", ""])
    assert args.pod_deletion_cost is True
    with pytest.raises(scaler_cli.StartError, match="drop --no-kube"):
        scaler_cli._assemble(args, background=False)
    assert parser.parse_args(["--exporters", ""]).pod_deletion_cost is False  # off by default
