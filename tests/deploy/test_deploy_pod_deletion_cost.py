"""deploy/overlays/pod-deletion-cost: the one write the scaler makes, granted only there, exactly.

The RBAC a call needs is derived from the calls the marker (scaler/deletion_cost.py) makes against the
fake API server, as test_deploy_manifests.py does for the reads: the base must not grant it (the
scaler's base RBAC stays read-only), the overlay must grant the base's rules plus exactly it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fakekube import FakeKube, pod
from test_deploy_manifests import BASE, DEPLOY, build, container, find, granted, rbac_request

from keda_llm.scaler import cli as scaler_cli
from keda_llm.scaler.deletion_cost import DeletionCostMarker
from keda_llm.scaler.kube import KubeClient, KubeConfig

OVERLAY = DEPLOY / "overlays" / "pod-deletion-cost"


def rbac_of(req_method: str, path: str, query: dict[str, list[str]]) -> tuple[str, str, str]:
    verb, group, resource = rbac_request(path, query)
    return ("patch", group, resource) if req_method == "PATCH" else (verb, group, resource)


def test_the_overlay_grants_exactly_the_patch_the_marker_makes(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    with FakeKube(token="t") as api:
        api.pods = [pod("llama-0", namespace="llm"), pod("llama-1", namespace="llm")]
        client = KubeClient(KubeConfig(base_url=api.url, token_path=str(token), ca_path=None))
        marker = DeletionCostMarker(client.merge_patch, background=False)
        marker.observe("llm", "llama", {"replica_fraction:gpu_xid:llama-0": 0.5})
        marker.observe("llm", "llama", {"replica_fraction:slow:llama-1": 0.2})
        marker.flush()
        needed = {rbac_of(r.method, r.path, r.query) for r in api.requests}
        client.close()
    assert needed == {("patch", "", "pods")}
    base, overlay = build(BASE), build(OVERLAY)
    assert not needed <= granted(base, "keda-llm-scaler")  # without the overlay the call has no rule
    assert granted(overlay, "keda-llm-scaler") == granted(base, "keda-llm-scaler") | needed


def test_the_overlay_adds_the_flag_to_the_base_args() -> None:
    base = container(find(build(BASE), "Deployment", "keda-llm-scaler", "keda-llm"), "scaler")
    overlay = container(find(build(OVERLAY), "Deployment", "keda-llm-scaler", "keda-llm"), "scaler")
    assert overlay["args"] == [*base["args"], "--pod-deletion-cost"]  # the patch replaces the list: kept in step
    parser = argparse.ArgumentParser()
    scaler_cli.add_arguments(parser)
    assert parser.parse_args(overlay["args"][1:]).pod_deletion_cost is True
