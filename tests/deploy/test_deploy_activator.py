"""deploy/overlays/activator: `keda-llm activator` as the manifests run it, checked against the activator's
own parser and flags, the scaler and example model it points at, and the Kubernetes API calls its
EndpointSlice watcher really makes (RBAC grants exactly those, read-only).
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from fakekube import FakeKube
from test_deploy_manifests import (
    ACTIVATOR,
    BASE,
    DEPLOY,
    NAMESPACE,
    build,
    container,
    container_port,
    find,
    granted,
    identity,
    load_docs,
    parse_cli,
    rbac_request,
    scaler_args,
    selects,
    service_port,
    split_service_dns,
)

from keda_llm.activator import cli as activator_cli
from keda_llm.activator.config import ActivatorConfig, KubeConfig, load, parse, with_flags
from keda_llm.activator.endpoints import EndpointSet, SliceWatcher
from keda_llm.simulator.control.scaledobject import settings_from_manifest

JSON = dict[str, Any]


@pytest.fixture(scope="module")
def overlay() -> list[JSON]:
    return build(ACTIVATOR)


def activator_config(objects: list[JSON]) -> ActivatorConfig:
    cm = find(objects, "ConfigMap", "keda-llm-activator", NAMESPACE)
    return parse(yaml.safe_load(cm["data"]["activator.yaml"]))


def activator_args(objects: list[JSON]) -> tuple[JSON, argparse.Namespace]:
    c = container(find(objects, "Deployment", "keda-llm-activator", NAMESPACE), "activator")
    return c, parse_cli(activator_cli.add_arguments, c["args"], "activator")


def example(kind: str, namespace: str, name: str) -> JSON:
    found = [d for p in sorted((DEPLOY / "examples").rglob("*.yaml")) for d in load_docs(p)
             if d["kind"] == kind and d["metadata"].get("namespace") == namespace and d["metadata"]["name"] == name]
    assert found, f"no example {kind} {namespace}/{name}"
    return found[0]


def test_overlay_is_the_base_plus_the_activator_objects(overlay: list[JSON]) -> None:
    base = build(BASE)
    assert [o for o in overlay if identity(o) in {identity(b) for b in base}] == base  # the base unchanged
    assert sorted(identity(o) for o in overlay if o not in base) == sorted([
        ("ServiceAccount", NAMESPACE, "keda-llm-activator"),
        ("ClusterRole", "", "keda-llm-activator"),
        ("ClusterRoleBinding", "", "keda-llm-activator"),
        ("ConfigMap", NAMESPACE, "keda-llm-activator"),
        ("Deployment", NAMESPACE, "keda-llm-activator"),
        ("Service", NAMESPACE, "keda-llm-activator"),
        ("PodDisruptionBudget", NAMESPACE, "keda-llm-activator"),
        ("NetworkPolicy", NAMESPACE, "keda-llm-activator"),
    ])


def test_the_command_line_and_config_run_through_the_activators_own_parsers(overlay: list[JSON],
                                                                            tmp_path: Path) -> None:
    dep = find(overlay, "Deployment", "keda-llm-activator", NAMESPACE)
    c, args = activator_args(overlay)
    # --config names the ConfigMap's key through the config volume's mount
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    config = PurePosixPath(args.config)
    assert volumes[mounts[str(config.parent)]["name"]]["configMap"]["name"] == "keda-llm-activator"
    cm = find(overlay, "ConfigMap", "keda-llm-activator", NAMESPACE)
    assert config.name in cm["data"]
    # the whole command line as `keda-llm activator` builds it (with_flags over the file)
    path = tmp_path / "activator.yaml"
    path.write_text(cm["data"][config.name])
    args.config = str(path)
    cfg = with_flags(load(args.config), vars(args))
    assert cfg == activator_config(overlay)
    proxy_port = int(cfg.listen.rpartition(":")[2])
    admin_port = int(args.admin_listen.rpartition(":")[2])
    assert (proxy_port, admin_port) == (container_port(c, "proxy"), container_port(c, "admin")) == (8080, 9092)
    # probes: readiness on /healthz (503 from SIGTERM on), liveness only the port (a drain is not a death)
    assert c["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    assert c["livenessProbe"]["tcpSocket"] == {"port": "admin"}
    # the pod outlives the drain: requests in flight get shutdown_grace, then the listeners close
    assert dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > cfg.shutdown_grace
    assert dep["spec"]["replicas"] == 2
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    svc = find(overlay, "Service", "keda-llm-activator", NAMESPACE)
    assert selects(svc["spec"]["selector"], dep["spec"]["template"]["metadata"]["labels"])
    assert service_port(svc, "proxy")["targetPort"] == "proxy"
    pdb = find(overlay, "PodDisruptionBudget", "keda-llm-activator", NAMESPACE)
    assert selects(pdb["spec"]["selector"]["matchLabels"], dep["spec"]["template"]["metadata"]["labels"])
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == "keda-llm-activator"


def test_the_config_points_at_the_scaler_and_the_example_model(overlay: list[JSON]) -> None:
    cfg = activator_config(overlay)
    # the scaler's activation endpoint: its Service's http port, which is the scaler's --http-address
    url = urlsplit(cfg.scaler)
    name, ns, _ = split_service_dns(url.hostname or "")
    svc = find(overlay, "Service", name, ns)
    assert url.scheme == "http" and service_port(svc, "http")["port"] == url.port
    _, scaler = scaler_args(overlay)
    assert int(scaler.http_address.rpartition(":")[2]) == url.port
    # each model: a Service with the named port, and a ScaledObject scaling that model by the same name
    (m,) = cfg.models
    model_svc = example("Service", m.namespace, m.service)
    service_port(model_svc, m.port_name)
    so = example("ScaledObject", m.namespace, m.scaled_object)
    (trig,) = settings_from_manifest(so).triggers
    assert trig.metadata["model"] == m.name
    assert trig.is_push  # the activation wakes the model at once only through external-push
    assert not cfg.exporters  # see activator-config.yaml: a headless name would reach one node's exporter


def test_pods_carry_the_labels_the_scaler_and_model_policies_admit(overlay: list[JSON]) -> None:
    labels = find(overlay, "Deployment", "keda-llm-activator", NAMESPACE)["spec"]["template"]["metadata"]["labels"]
    assert labels["keda-llm.io/activation-client"] == "true"  # base/networkpolicies.yaml: the scaler's 9091
    assert labels["keda-llm.io/model-client"] == "true"  # examples/networkpolicy-llm.yaml: the model's port


def test_activator_rbac_grants_exactly_what_the_endpointslice_watcher_calls(overlay: list[JSON],
                                                                           tmp_path: Path) -> None:
    """The real SliceWatcher, with the overlay's config, against the recording fake API server: it lists
    then watches each model Service's EndpointSlices. The ClusterRole must grant those and nothing more."""
    cfg = activator_config(overlay)
    token = tmp_path / "token"
    token.write_text("t")
    with FakeKube(token="t") as kube:
        for m in cfg.models:
            kube.objects[f"/apis/discovery.k8s.io/v1/namespaces/{m.namespace}/endpointslices"] = {
                "kind": "EndpointSliceList", "apiVersion": "discovery.k8s.io/v1",
                "metadata": {"resourceVersion": "7"}, "items": []}
        kube_cfg = KubeConfig(api_server=kube.url, token_file=str(token), ca_file="")
        watcher = SliceWatcher(kube_cfg, cfg.models, EndpointSet())

        async def run() -> None:
            stop = asyncio.Event()
            task = asyncio.create_task(watcher.run(stop))
            for _ in range(500):  # until every model has been listed and watched (no clock: a bounded count)
                seen = {rbac_request(r.path, r.query) for r in kube.requests}
                if len(seen) >= 2:
                    break
                await asyncio.sleep(0.01)
            stop.set()
            await task

        asyncio.run(run())
        needed = {rbac_request(r.path, r.query) for r in kube.requests}
        namespaces = {r.path.split("/")[5] for r in kube.requests}
    assert needed == {("list", "discovery.k8s.io", "endpointslices"), ("watch", "discovery.k8s.io", "endpointslices")}
    assert namespaces == {m.namespace for m in cfg.models}
    assert granted(overlay, "keda-llm-activator") == needed


def test_the_activator_podmonitor_scrapes_the_admin_port_where_metrics_are(overlay: list[JSON]) -> None:
    pm = example("PodMonitor", NAMESPACE, "keda-llm-activator")
    dep = find(overlay, "Deployment", "keda-llm-activator", NAMESPACE)
    assert selects(pm["spec"]["selector"]["matchLabels"], dep["spec"]["template"]["metadata"]["labels"])
    assert pm["spec"]["namespaceSelector"]["matchNames"] == [dep["metadata"]["namespace"]]
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    c, args = activator_args(overlay)
    assert endpoint["path"] == "/metrics"
    assert container_port(c, endpoint["port"]) == int(args.admin_listen.rpartition(":")[2])  # /metrics lives there
