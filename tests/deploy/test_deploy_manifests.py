"""deploy/: the kustomize base, its overlays and the examples, checked against the code they configure.

kubectl or kustomize may not be installed, so a small builder resolves each kustomization (resources,
directories, strategic-merge patches) the way kustomize does for the subset these files use, and refuses
anything else; where kubectl is installed, test_builder_agrees_with_real_kustomize compares the two.
The builds are then checked with the project's own parsers: the exporter's config and argparse, the
scaler's argparse and metadata parser, KEDA's ScaledObject CRD through simulator/control, and the RBAC
rules against the API requests the real Kubernetes clients send to a recording API server.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from fakekube import KIND_OF_RESOURCE, FakeKube

from keda_llm.exporter import cli as exporter_cli
from keda_llm.exporter.config import parse_config
from keda_llm.exporter.discovery import KubeClient as ExporterKubeClient
from keda_llm.exporter.discovery import pod_to_target
from keda_llm.scaler import cli as scaler_cli
from keda_llm.scaler.config import parse_metadata
from keda_llm.scaler.kube import RESOURCE_OF_KIND, KubeClient, KubeConfig, WorkloadReader
from keda_llm.simulator.control.scaledobject import settings_from_manifest, validate_scaledobject

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BASE = DEPLOY / "base"
TLS = DEPLOY / "overlays" / "tls"
PROM_OP = DEPLOY / "overlays" / "prometheus-operator"
PROM_OP_TLS = PROM_OP / "tls"  # overlays/tls plus the monitors, the scaler scraped over https
ACTIVATOR = DEPLOY / "overlays" / "activator"  # the base plus `keda-llm activator` (test_deploy_activator.py)
KUSTOMIZATIONS = [BASE, TLS, PROM_OP, PROM_OP_TLS, ACTIVATOR]
EXAMPLE_FILES = sorted((DEPLOY / "examples").rglob("*.yaml"))
NAMESPACE = "keda-llm"  # the scaler's (Pod Security restricted)
EXPORTER_NS = "keda-llm-exporter"  # the exporter's own (privileged: a hostPath, root)

JSON = dict[str, Any]

# ------------------------------------------------------------------------------- a small kustomize

#: Kustomization fields the builder understands; any other field fails the build (and this test)
#: instead of being silently ignored.
KUSTOMIZATION_FIELDS = {"apiVersion", "kind", "resources", "patches"}
#: Strategic-merge keys of the lists these patches touch (k8s.io/api core/v1 `patchMergeKey` tags).
MERGE_KEYS = {"containers": "name", "initContainers": "name", "volumes": "name", "volumeMounts": "mountPath",
              "env": "name"}
#: Kinds that live in no namespace.
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "ClusterIssuer", "ClusterTriggerAuthentication"}


def strategic_merge(base: Any, patch: Any) -> Any:
    """Kubernetes strategic-merge patch, for the subset used here: maps merge, `null` deletes a key,
    lists named in MERGE_KEYS merge item by item on their key, other lists are replaced. Items only the
    patch has come first, in the patch's order, then the base's (merged) items: kustomize's (kyaml's)
    order, which test_builder_agrees_with_real_kustomize checks where kubectl is installed."""
    if not isinstance(base, dict) or not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if str(key).startswith("$"):
            raise ValueError(f"patch directive {key!r} is not supported by this builder")
        if value is None:
            out.pop(key, None)
        elif isinstance(value, list) and key in MERGE_KEYS and isinstance(out.get(key), list):
            merge_key = MERGE_KEYS[key]
            items = list(out[key])
            added = []
            for item in value:
                at = next((i for i, old in enumerate(items) if old.get(merge_key) == item.get(merge_key)), None)
                if at is None:
                    added.append(copy.deepcopy(item))
                else:
                    items[at] = strategic_merge(items[at], item)
            out[key] = added + items
        else:
            out[key] = strategic_merge(out.get(key), value)
    return out


def identity(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace", ""), meta["name"]


def load_docs(path: Path) -> list[JSON]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def build(directory: Path) -> list[JSON]:
    """The objects `kustomize build directory` would print (for the features listed above)."""
    k = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(k) - KUSTOMIZATION_FIELDS
    assert not unknown, f"{directory}/kustomization.yaml uses {sorted(unknown)}, which this test cannot build"
    objects: list[JSON] = []
    for entry in k.get("resources") or []:
        path = directory / entry
        assert path.exists(), f"{directory.name}/kustomization.yaml lists {entry}, which does not exist"
        objects.extend(build(path) if path.is_dir() else load_docs(path))
    for patch_entry in k.get("patches") or []:
        assert set(patch_entry) == {"path"}, f"only `patches: - path:` is supported, got {patch_entry}"
        path = directory / patch_entry["path"]
        assert path.exists(), f"{directory.name}/kustomization.yaml patches with {path.name}, which does not exist"
        (patch,) = load_docs(path)
        matches = [i for i, o in enumerate(objects) if identity(o) == identity(patch)]
        assert len(matches) == 1, f"{path.name} must match exactly one object, matched {len(matches)}"
        objects[matches[0]] = strategic_merge(objects[matches[0]], patch)
    return objects


def find(objects: list[JSON], kind: str, name: str, namespace: str | None = None) -> JSON:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name
             and (namespace is None or o["metadata"].get("namespace") == namespace)]
    assert len(found) == 1, f"expected one {kind} {namespace}/{name}, found {len(found)}"
    return found[0]


def container(workload: JSON, name: str) -> JSON:
    found: list[JSON] = [c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    assert len(found) == 1, f"{workload['metadata']['name']} has no single container {name!r}"
    return found[0]


def container_port(c: JSON, name: str) -> int:
    ports = [p["containerPort"] for p in c.get("ports", []) if p.get("name") == name]
    assert len(ports) == 1, f"container {c['name']} has no single port named {name!r}"
    return int(ports[0])


def expand_env(args: list[str], c: JSON, values: Mapping[str, str]) -> list[str]:
    """The kubelet's $(VAR) expansion in args: only names defined in the container's env expand."""
    defined = {e["name"] for e in c.get("env", [])}

    def sub(m: re.Match[str]) -> str:
        assert m.group(1) in defined, f"args use $({m.group(1)}), which the container's env does not define"
        return values[m.group(1)]

    return [re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, a) for a in args]


def parse_cli(add_arguments: Any, args: list[str], command: str) -> argparse.Namespace:
    """Parse a manifest's container args as `keda-llm <command> ...` would (ENTRYPOINT is keda-llm)."""
    assert args[0] == command, f"the image's entrypoint is keda-llm: args must start with {command!r}"
    parser = argparse.ArgumentParser(prog=f"keda-llm {command}", exit_on_error=False)
    add_arguments(parser)
    return parser.parse_args(args[1:])


def service_port(svc: JSON, name: str) -> JSON:
    ports: list[JSON] = [p for p in svc["spec"]["ports"] if p["name"] == name]
    assert len(ports) == 1, f"Service {svc['metadata']['name']} has no single port named {name!r}"
    return ports[0]


def selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def split_service_dns(address: str) -> tuple[str, str, int | None]:
    """`name.namespace.svc[.cluster.local][:port]` -> (name, namespace, port)."""
    host, _, port = address.rpartition(":") if re.search(r":\d+$", address) else (address, "", "")
    parts = host.split(".")
    assert len(parts) >= 3 and parts[2] == "svc", f"{address!r} is not <service>.<namespace>.svc[:port]"
    return parts[0], parts[1], int(port) if port else None


@pytest.fixture(scope="module")
def base() -> list[JSON]:
    return build(BASE)


@pytest.fixture(scope="module")
def tls() -> list[JSON]:
    return build(TLS)


@pytest.fixture(scope="module")
def prom_op() -> list[JSON]:
    return build(PROM_OP)


@pytest.fixture(scope="module")
def prom_op_tls() -> list[JSON]:
    return build(PROM_OP_TLS)


@pytest.fixture(autouse=True)
def _no_scaler_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """scaler.cli reads defaults from the environment: keep the test's own out of the parse."""
    import os

    for name in list(os.environ):
        if name.startswith("KEDA_LLM_") or name == "POD_IP":
            monkeypatch.delenv(name)


# ------------------------------------------------------------------------------- the builder itself


def test_strategic_merge_merges_named_items_deletes_nulls_and_replaces_plain_lists() -> None:
    base = {"spec": {"containers": [{"name": "a", "args": ["x", "y"], "readinessProbe": {"grpc": {"port": 1}},
                                     "volumeMounts": [{"name": "c", "mountPath": "/c"}]},
                                    {"name": "b", "image": "b:1"}],
                     "volumes": [{"name": "c", "configMap": {"name": "c"}}]}}
    patch = {"spec": {"containers": [{"name": "a", "args": ["z"],
                                      "readinessProbe": {"grpc": None, "httpGet": {"port": "http"}},
                                      "volumeMounts": [{"name": "t", "mountPath": "/t"}]}],
                      "volumes": [{"name": "t", "secret": {"secretName": "t"}}]}}
    assert strategic_merge(base, patch) == {"spec": {
        "containers": [{"name": "a", "args": ["z"], "readinessProbe": {"httpGet": {"port": "http"}},
                        "volumeMounts": [{"name": "t", "mountPath": "/t"}, {"name": "c", "mountPath": "/c"}]},
                       {"name": "b", "image": "b:1"}],
        "volumes": [{"name": "t", "secret": {"secretName": "t"}}, {"name": "c", "configMap": {"name": "c"}}]}}


def _kustomize_command() -> list[str]:
    if tool := shutil.which("kustomize"):
        return [tool, "build"]
    if tool := shutil.which("kubectl"):
        return [tool, "kustomize"]
    pytest.skip("neither kustomize nor kubectl is installed")


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: p.relative_to(DEPLOY).as_posix())
def test_builder_agrees_with_real_kustomize(directory: Path) -> None:
    """Where a kustomize is installed, the builder above must print exactly what it prints."""
    out = subprocess.run([*_kustomize_command(), str(directory)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    theirs = sorted((d for d in yaml.safe_load_all(out.stdout) if d is not None), key=identity)
    assert sorted(build(directory), key=identity) == theirs


# ------------------------------------------------------------------------------- builds


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: p.relative_to(DEPLOY).as_posix())
def test_build_has_well_formed_unique_objects(directory: Path) -> None:
    objects = build(directory)
    assert objects
    for obj in objects:
        assert obj.get("apiVersion") and obj.get("kind") and obj.get("metadata", {}).get("name"), obj
        namespaced = obj["kind"] not in CLUSTER_SCOPED
        assert bool(obj["metadata"].get("namespace")) == namespaced, f"{identity(obj)}: namespace set wrongly"
    ids = [identity(o) for o in objects]
    assert sorted({i for i in ids if ids.count(i) > 1}) == []


def test_base_contents_and_namespace(base: list[JSON]) -> None:
    assert sorted(identity(o) for o in base) == sorted([
        ("Namespace", "", NAMESPACE),
        ("Namespace", "", EXPORTER_NS),
        ("ServiceAccount", EXPORTER_NS, "keda-llm-exporter"),
        ("ClusterRole", "", "keda-llm-exporter"),
        ("ClusterRoleBinding", "", "keda-llm-exporter"),
        ("ConfigMap", EXPORTER_NS, "keda-llm-exporter"),
        ("DaemonSet", EXPORTER_NS, "keda-llm-exporter"),
        ("Service", EXPORTER_NS, "keda-llm-exporter"),
        ("ServiceAccount", NAMESPACE, "keda-llm-scaler"),
        ("ClusterRole", "", "keda-llm-scaler"),
        ("ClusterRoleBinding", "", "keda-llm-scaler"),
        ("Deployment", NAMESPACE, "keda-llm-scaler"),
        ("Service", NAMESPACE, "keda-llm-scaler"),
        ("Service", NAMESPACE, "keda-llm-scaler-peers"),
        ("PodDisruptionBudget", NAMESPACE, "keda-llm-scaler"),
        ("NetworkPolicy", NAMESPACE, "default-deny"),
        ("NetworkPolicy", NAMESPACE, "keda-llm-scaler"),
        ("NetworkPolicy", EXPORTER_NS, "default-deny"),
        ("NetworkPolicy", EXPORTER_NS, "keda-llm-exporter"),
    ])


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: p.relative_to(DEPLOY).as_posix())
def test_workload_selectors_match_their_templates_and_services_select_pods(directory: Path) -> None:
    objects = build(directory)
    templates = {}
    for w in (o for o in objects if o["kind"] in ("Deployment", "DaemonSet")):
        sel = w["spec"]["selector"]["matchLabels"]
        labels = w["spec"]["template"]["metadata"]["labels"]
        assert selects(sel, labels), f"{w['metadata']['name']}: selector {sel} does not match {labels}"
        templates[w["metadata"]["name"]] = labels
    for svc in (o for o in objects if o["kind"] == "Service"):
        hits = [n for n, labels in templates.items() if selects(svc["spec"]["selector"], labels)]
        assert len(hits) == 1, f"Service {svc['metadata']['name']} selects {hits}"
    pdb = find(objects, "PodDisruptionBudget", "keda-llm-scaler")
    assert selects(pdb["spec"]["selector"]["matchLabels"], templates["keda-llm-scaler"])
    assert pdb["spec"]["minAvailable"] == 1


# ------------------------------------------------------------------------------- exporter


def test_exporter_config_parses_with_the_real_parser(base: list[JSON]) -> None:
    cm = find(base, "ConfigMap", "keda-llm-exporter", EXPORTER_NS)
    cfg = parse_config(yaml.safe_load(cm["data"]["exporter.yaml"]), {"NODE_NAME": "gpu-node-7"})
    assert cfg.node_name == "gpu-node-7"
    assert cfg.listen_address == ("", 9400)
    assert (cfg.interval, cfg.timeout, cfg.max_body_bytes) == (5.0, 2.0, 8 * 1024 * 1024)
    assert cfg.kubernetes.enabled and cfg.kubernetes.refresh_interval == 15.0
    assert cfg.gpu.nvml
    assert cfg.gpu.pod_resources_socket == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert cfg.targets == ()


def test_exporter_daemonset_args_env_ports_and_mounts(base: list[JSON], tmp_path: Path) -> None:
    ds = find(base, "DaemonSet", "keda-llm-exporter", EXPORTER_NS)
    pod = ds["spec"]["template"]["spec"]
    c = container(ds, "exporter")
    args = parse_cli(exporter_cli.add_arguments, c["args"], "exporter")

    # --config names the ConfigMap's key through the config volume's mount
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    config_dir = PurePosixPath(args.config).parent
    (config_mount,) = [m for m in mounts.values() if PurePosixPath(m["mountPath"]) == config_dir]
    assert volumes[config_mount["name"]]["configMap"]["name"] == "keda-llm-exporter"
    cm = find(base, "ConfigMap", "keda-llm-exporter", EXPORTER_NS)
    assert PurePosixPath(args.config).name in cm["data"]

    # the whole command line, file included, through the exporter's own build_config
    config_file = tmp_path / "exporter.yaml"
    config_file.write_text(cm["data"][PurePosixPath(args.config).name])
    args.config = str(config_file)
    cfg = exporter_cli.build_config(args, {"NODE_NAME": "gpu-node-7"})
    assert cfg.listen_address[1] == container_port(c, "metrics") == 9400

    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    assert "nvidia.com/gpu" not in json.dumps(c.get("resources", {}))  # reads NVML, holds no GPU

    # the kubelet socket's directory, from the host, read-only, where the config looks for it
    socket_dir = str(PurePosixPath(cfg.gpu.pod_resources_socket).parent)
    (pr_mount,) = [m for m in mounts.values() if m["mountPath"] == socket_dir]
    assert pr_mount["readOnly"] is True
    assert volumes[pr_mount["name"]]["hostPath"] == {"path": socket_dir, "type": "Directory"}
    assert all(m.get("readOnly") is True for m in mounts.values())

    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert pod["serviceAccountName"] == "keda-llm-exporter"


def test_exporter_service_is_headless_on_the_metrics_port(base: list[JSON]) -> None:
    svc = find(base, "Service", "keda-llm-exporter", EXPORTER_NS)
    c = container(find(base, "DaemonSet", "keda-llm-exporter", EXPORTER_NS), "exporter")
    assert svc["spec"]["clusterIP"] == "None"
    port = service_port(svc, "metrics")
    assert port["port"] == 9400 and port["targetPort"] == "metrics" and container_port(c, "metrics") == 9400


# ------------------------------------------------------------------------------- scaler


def scaler_args(objects: list[JSON]) -> tuple[JSON, argparse.Namespace]:
    c = container(find(objects, "Deployment", "keda-llm-scaler", NAMESPACE), "scaler")
    return c, parse_cli(scaler_cli.add_arguments, expand_env(c["args"], c, {"POD_IP": "10.4.0.17"}), "scaler")


def test_scaler_deployment_args_ports_and_services_agree(base: list[JSON]) -> None:
    dep = find(base, "Deployment", "keda-llm-scaler", NAMESPACE)
    c, args = scaler_args(base)
    assert dep["spec"]["replicas"] == 2
    assert args.pod_ip == "10.4.0.17"
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert (args.tls_cert, args.tls_key, args.tls_client_ca, args.no_kube) == (None, None, None, False)
    assert (args.http_tls_cert, args.http_tls_key, args.http_tls_ca) == (None, None, None)

    grpc_port = int(args.grpc_address.rpartition(":")[2])
    http_port = int(args.http_address.rpartition(":")[2])
    assert (grpc_port, http_port) == (container_port(c, "grpc"), container_port(c, "http")) == (9090, 9091)
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["grpc"] == {"port": 9090}, probe  # native gRPC probe, service "" (set SERVING)

    svc = find(base, "Service", "keda-llm-scaler", NAMESPACE)
    assert svc["spec"]["type"] == "ClusterIP"
    assert service_port(svc, "grpc")["port"] == 9090 and service_port(svc, "grpc")["targetPort"] == "grpc"
    assert service_port(svc, "http")["port"] == 9091 and service_port(svc, "http")["targetPort"] == "http"

    # --exporters-service: the headless exporter Service, on its port
    name, ns, port = split_service_dns(args.exporters_service)
    exporters = find(base, "Service", name, ns)
    assert exporters["spec"]["clusterIP"] == "None" and port == service_port(exporters, "metrics")["port"]
    # --peers-service: a headless Service over the scaler pods themselves (peers are dialled on the
    # pod IPs it resolves to, at this pod's own --http-address port)
    name, ns, port = split_service_dns(args.peers_service)
    peers = find(base, "Service", name, ns)
    assert port is None and peers["spec"]["clusterIP"] == "None"
    assert selects(peers["spec"]["selector"], dep["spec"]["template"]["metadata"]["labels"])
    assert service_port(peers, "http")["targetPort"] == "http"


def test_scaler_pods_spread_over_nodes(base: list[JSON]) -> None:
    pod = find(base, "Deployment", "keda-llm-scaler", NAMESPACE)["spec"]["template"]
    labels = pod["metadata"]["labels"]
    spread = {t["topologyKey"]: t for t in pod["spec"]["topologySpreadConstraints"]}
    assert spread["kubernetes.io/hostname"]["maxSkew"] == 1
    assert selects(spread["kubernetes.io/hostname"]["labelSelector"]["matchLabels"], labels)
    (anti,) = pod["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert selects(anti["podAffinityTerm"]["labelSelector"]["matchLabels"], labels)
    assert pod["spec"]["serviceAccountName"] == "keda-llm-scaler"


def test_tls_overlay_serves_the_cert_manager_secret_and_probes_over_https(base: list[JSON], tls: list[JSON]) -> None:
    dep = find(tls, "Deployment", "keda-llm-scaler", NAMESPACE)
    c, args = scaler_args(tls)
    _, base_args = scaler_args(base)
    # everything but the TLS flags is the base's (the patch repeats the whole list)
    def without_tls(ns: argparse.Namespace) -> dict[str, Any]:
        return {k: v for k, v in vars(ns).items() if not k.startswith(("tls_", "http_tls_", "exporters_tls_"))}

    assert without_tls(args) == without_tls(base_args)
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    cert = find(tls, "Certificate", "keda-llm-scaler-tls", NAMESPACE)
    for path, key in ((args.tls_cert, "tls.crt"), (args.tls_key, "tls.key"), (args.tls_client_ca, "ca.crt"),
                      (args.http_tls_cert, "tls.crt"), (args.http_tls_key, "tls.key"), (args.http_tls_ca, "ca.crt"),
                      (args.exporters_tls_ca, "ca.crt")):
        p = PurePosixPath(path)
        assert p.name == key
        (mount,) = [m for m in mounts.values() if PurePosixPath(m["mountPath"]) == p.parent]
        assert mount["readOnly"] is True
        assert volumes[mount["name"]]["secret"]["secretName"] == cert["spec"]["secretName"]
    # the HTTP port is TLS too, and relays to peers (found by the headless Service) go over https with the CA
    settings = scaler_cli.settings_from_args(args)
    assert settings.http_tls is not None and settings.peers_service
    assert settings.http_tls.peer_ca == args.http_tls_ca
    # the kubelet's gRPC probe speaks plaintext only: no gRPC probe may remain against a TLS port; the
    # HTTP probes speak HTTPS (the kubelet does not verify the certificate)
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "http", "scheme": "HTTPS"}
        assert "grpc" not in c[probe]
        assert container_port(c, "http") == int(args.http_address.rpartition(":")[2])
    assert "server auth" in cert["spec"]["usages"]
    client = find(tls, "Certificate", "keda-llm-keda-client", "keda")
    assert "client auth" in client["spec"]["usages"]
    assert cert["spec"]["issuerRef"]["name"] == client["spec"]["issuerRef"]["name"] == "keda-llm-ca"
    issuer = find(tls, "ClusterIssuer", "keda-llm-ca")
    ca = find(tls, "Certificate", issuer["spec"]["ca"]["secretName"], "cert-manager")
    assert ca["spec"]["isCA"] is True and ca["spec"]["secretName"] == issuer["spec"]["ca"]["secretName"]
    auth = find(tls, "ClusterTriggerAuthentication", "keda-llm-scaler-tls")
    assert {(r["parameter"], r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]} == {
        ("caCert", "keda-llm-keda-client", "ca.crt"),
        ("tlsClientCert", "keda-llm-keda-client", "tls.crt"),
        ("tlsClientKey", "keda-llm-keda-client", "tls.key"),
    }
    assert client["spec"]["secretName"] == "keda-llm-keda-client"


# ------------------------------------------------------------------------------- RBAC


READ_VERBS = {"get", "list", "watch"}


def test_rbac_is_read_only_everywhere() -> None:
    for directory in KUSTOMIZATIONS:
        for role in (o for o in build(directory) if o["kind"] in ("Role", "ClusterRole")):
            for rule in role["rules"]:
                assert set(rule["verbs"]) <= READ_VERBS, f"{role['metadata']['name']}: {rule}"
                for field in ("verbs", "resources", "apiGroups"):
                    assert "*" not in rule[field], f"{role['metadata']['name']}: wildcard in {field}"


def granted(objects: list[JSON], service_account: str, namespace: str = NAMESPACE) -> set[tuple[str, str, str]]:
    """(verb, apiGroup, resource) the ServiceAccount holds through ClusterRoleBindings in the build."""
    out: set[tuple[str, str, str]] = set()
    find(objects, "ServiceAccount", service_account, namespace)
    for b in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if {"kind": "ServiceAccount", "name": service_account, "namespace": namespace} not in b["subjects"]:
            continue
        assert b["kind"] == "ClusterRoleBinding", "reads span every namespace: a RoleBinding would not do"
        role = find(objects, b["roleRef"]["kind"], b["roleRef"]["name"])
        for rule in role["rules"]:
            assert "resourceNames" not in rule
            out |= {(v, g, r) for v in rule["verbs"] for g in rule["apiGroups"] for r in rule["resources"]}
    return out


def rbac_request(path: str, query: Mapping[str, list[str]]) -> tuple[str, str, str]:
    """The RBAC (verb, apiGroup, resource[/subresource]) of a GET, as the API server authorizes it."""
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    if len(rest) > 1:
        return "get", group, resource
    return ("watch" if query.get("watch") == ["true"] else "list"), group, resource


@pytest.fixture
def recording_api() -> Iterator[FakeKube]:
    """The fake API server (tests/fakekube.py) holding, per scale-target kind scaler/kube.py knows, a
    ScaledObject `so-<kind>` in `llm` whose target `target` has 2 replicas, 1 ready; and no pods."""
    with FakeKube(token="t") as kube:
        for kind, resource in RESOURCE_OF_KIND.items():
            api_version = KIND_OF_RESOURCE[resource][0]
            kube.put_scaled_object("llm", f"so-{kind.lower()}", {
                "scaleTargetRef": {"apiVersion": api_version, "kind": kind, "name": "target"}})
            kube.put_workload(resource, "llm", "target", replicas=2, status_replicas=2, ready=1)
        yield kube


def test_scaler_rbac_grants_exactly_what_the_scaler_reads(base: list[JSON], recording_api: FakeKube,
                                                          tmp_path: Path) -> None:
    assert set(RESOURCE_OF_KIND.values()) == set(KIND_OF_RESOURCE), \
        "a new scale-target kind: add its API version to KIND_OF_RESOURCE in tests/fakekube.py"
    token = tmp_path / "token"
    token.write_text("t")
    recording_api.objects["/api/v1/namespaces/llm/events"] = {"kind": "EventList", "apiVersion": "v1", "items": []}
    reader = WorkloadReader(KubeClient(KubeConfig(base_url=recording_api.url, token_path=str(token), ca_path=None)))
    try:
        for kind in RESOURCE_OF_KIND:
            reading = reader.read("llm", f"so-{kind.lower()}")
            assert reading.error is None and reading.state is not None, reading.error
            assert (reading.state.current_replicas, reading.state.ready_replicas) == (2, 1)
            assert reader.read_phases("llm", f"so-{kind.lower()}") is not None  # pods and events: cold-start phases
    finally:
        reader.stop()
    needed = {rbac_request(r.path, r.query) for r in recording_api.requests}
    assert {r for r in needed if r[1] == "apps"} == {
        ("get", "apps", "deployments"), ("get", "apps", "deployments/scale"),
        ("get", "apps", "statefulsets"), ("get", "apps", "statefulsets/scale"),
        ("get", "apps", "replicasets"), ("get", "apps", "replicasets/scale")}
    assert ("get", "keda.sh", "scaledobjects") in needed
    assert granted(base, "keda-llm-scaler") == needed


def test_exporter_rbac_grants_exactly_what_discovery_reads(base: list[JSON], recording_api: FakeKube,
                                                           tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    client = ExporterKubeClient(recording_api.url, str(token), str(tmp_path / "no-ca"), timeout=2.0)
    listed = client.list_pods("gpu-node-7")
    assert (listed["kind"], listed["items"]) == ("PodList", [])
    needed = {rbac_request(r.path, r.query) for r in recording_api.requests}
    assert needed == {("list", "", "pods")}
    assert granted(base, "keda-llm-exporter", EXPORTER_NS) == needed


def test_workloads_run_as_their_bound_service_accounts(base: list[JSON]) -> None:
    for kind, name, ns in (("DaemonSet", "keda-llm-exporter", EXPORTER_NS),
                           ("Deployment", "keda-llm-scaler", NAMESPACE)):
        sa = find(base, kind, name, ns)["spec"]["template"]["spec"]["serviceAccountName"]
        assert granted(base, sa, ns), f"{name} runs as {sa}, which no binding grants anything"


# ------------------------------------------------------------------------------- examples


def example_docs() -> list[tuple[Path, JSON]]:
    return [(p, d) for p in EXAMPLE_FILES for d in load_docs(p)]


def scaled_objects() -> list[tuple[Path, JSON]]:
    return [(p, d) for p, d in example_docs() if d["kind"] == "ScaledObject"]


def test_examples_hold_the_expected_scaled_objects() -> None:
    names = sorted((p.relative_to(DEPLOY / "examples").as_posix(), d["metadata"]["name"]) for p, d in scaled_objects())
    assert names == [("keda-2.18/llama-70b-h100-tp4.yaml", "llama-70b"),  # the backtests' `ours`
                     ("keda-2.18/vllm-scaledobject.yaml", "llama-8b"), ("llamacpp-dev.yaml", "smollm2"),
                     ("pools-prefill-decode.yaml", "llama-70b-decode"),
                     ("pools-prefill-decode.yaml", "llama-70b-prefill"), ("pools-variants.yaml", "llama-8b-h100"),
                     ("pools-variants.yaml", "llama-8b-l4"), ("sglang-scaledobject.yaml", "qwen-32b"),
                     ("tls/vllm-scaledobject-tls.yaml", "llama-8b"),
                     ("tuned/vllm-llama-8b.yaml", "llama-8b"),  # keda-llm tune's output (test_tune_example.py)
                     ("vllm-scaledobject.yaml", "llama-8b"), ("warm-capacity.yaml", "llama-8b-warm-capacity"),
                     ("warm-windows.yaml", "llama-8b")]


@pytest.mark.parametrize("path_doc", scaled_objects(), ids=lambda pd: pd[0].name)
def test_example_scaled_object_is_valid_for_keda_and_the_scaler(path_doc: tuple[Path, JSON], base: list[JSON],
                                                                tls: list[JSON]) -> None:
    path, doc = path_doc
    assert validate_scaledobject(doc) == []
    settings = settings_from_manifest(doc, str(path))
    assert settings.target_kind in RESOURCE_OF_KIND  # the scaler can read it (and RBAC covers it)
    scaler = container(find(base, "Deployment", "keda-llm-scaler", NAMESPACE), "scaler")
    for trig in settings.triggers:
        cfg = parse_metadata(trig.metadata)
        assert trig.metric_type == "AverageValue"
        name, ns, port = split_service_dns(trig.metadata["scalerAddress"])
        svc = find(base, "Service", name, ns)
        (svc_port,) = [p for p in svc["spec"]["ports"] if p["port"] == port]
        assert svc_port["name"] == "grpc" and container_port(scaler, svc_port["targetPort"]) == 9090
        if cfg.scale_to_zero and not cfg.variants:
            assert settings.min_replicas == 0
        # a variant's ScaledObjects repeat one set of keys (docs/pools.md): scaleToZero lets the variants at 0
        # go, and the one holding the model's last replica says so with its minReplicaCount
        if trig.metadata.get("enableTLS") == "true":
            raw = next(t for t in doc["spec"]["triggers"] if t.get("name") == trig.name)
            ref = raw["authenticationRef"]
            find(tls, ref["kind"], ref["name"])
            host = trig.metadata["scalerAddress"].rpartition(":")[0]
            assert host in find(tls, "Certificate", "keda-llm-scaler-tls", NAMESPACE)["spec"]["dnsNames"]


def example(relative: str) -> JSON:
    (doc,) = [d for p, d in scaled_objects() if p == DEPLOY / "examples" / relative]
    return doc


def test_recommended_vllm_scaled_object() -> None:
    doc = example("vllm-scaledobject.yaml")
    s = settings_from_manifest(doc)
    (trig,) = s.triggers
    cfg = parse_metadata(trig.metadata)
    assert trig.is_push and cfg.scale_to_zero and s.min_replicas == 0
    assert cfg.activation_query and cfg.prometheus_address == "http://prometheus-operated.monitoring.svc:9090"
    assert cfg.idle_timeout == 1800.0
    b = s.behavior
    assert b is not None and b.scale_up is not None and b.scale_down is not None
    # no `tolerance` here: it validates on KEDA 2.17 and Kubernetes 1.27 (test_deploy_validate.py)
    assert (b.scale_up.stabilization_window_seconds, b.scale_up.tolerance) == (0, None)
    assert (b.scale_down.stabilization_window_seconds, b.scale_down.tolerance) == (30, None)
    # the KEDA >= 2.18 variant is the same ScaledObject with the HPA's tolerance at 0
    newer = example("keda-2.18/vllm-scaledobject.yaml")
    rules = newer["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert rules["scaleUp"].pop("tolerance") == rules["scaleDown"].pop("tolerance") == "0"
    assert newer == doc
    # the TLS variant is the same ScaledObject plus TLS
    tls_doc = example("tls/vllm-scaledobject-tls.yaml")
    tls_trig = tls_doc["spec"]["triggers"][0]
    plain = copy.deepcopy(tls_doc)
    plain["spec"]["triggers"][0] = {k: v for k, v in tls_trig.items() if k != "authenticationRef"}
    plain["spec"]["triggers"][0]["metadata"] = {k: v for k, v in tls_trig["metadata"].items() if k != "enableTLS"}
    assert plain == doc


def test_sglang_example_uses_the_concurrency_policy() -> None:
    doc = example("sglang-scaledobject.yaml")
    cfg = parse_metadata(settings_from_manifest(doc).triggers[0].metadata)
    assert (cfg.policy, cfg.target_concurrency, cfg.scale_to_zero) == ("concurrency", 48.0, False)


def flag(args: list[str], name: str) -> str:
    values = [a.split("=", 1)[1] for a in args if a.startswith(name + "=")]
    assert len(values) == 1, f"expected one {name}=... in {args}"
    return values[0]


def running_pod(deployment: JSON, ip: str) -> JSON:
    """A pod of this Deployment as the API lists it once it runs (for the exporter's discovery)."""
    tmpl = deployment["spec"]["template"]
    return {"metadata": {"namespace": deployment["metadata"]["namespace"], "name": "p-0", **tmpl["metadata"]},
            "spec": tmpl["spec"],
            "status": {"phase": "Running", "podIP": ip, "containerStatuses": [
                {"name": c["name"], "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}
                for c in tmpl["spec"]["containers"]]}}


def test_example_engines_are_discovered_as_their_scaled_objects_expect() -> None:
    deployments = {(d["metadata"]["namespace"], d["metadata"]["name"]): d
                   for _, d in example_docs() if d["kind"] == "Deployment"}
    # vLLM: labelled by --served-model-name; batch limit repeated from --max-num-seqs
    vllm = deployments[("llm", "llama-8b")]
    c = container(vllm, "vllm")
    t = pod_to_target(running_pod(vllm, "10.8.0.5"), "gpu-node-7")
    assert t is not None
    assert t.url == f"http://10.8.0.5:{flag(c['args'], '--port')}/metrics" == "http://10.8.0.5:8000/metrics"
    assert (t.namespace, t.engine, t.model) == ("llm", "vllm", None)
    assert t.max_running == float(flag(c["args"], "--max-num-seqs")) == 128.0
    assert t.container_start is not None
    so = example("vllm-scaledobject.yaml")
    assert so["spec"]["triggers"][0]["metadata"]["model"] == flag(c["args"], "--served-model-name")
    assert so["spec"]["scaleTargetRef"]["name"] == "llama-8b" and so["metadata"]["namespace"] == "llm"
    assert "replicas" not in vllm["spec"]  # KEDA owns the count
    # llama.cpp: no model name and no batch limit in its metrics, so both come from annotations
    lcpp = deployments[("llm-dev", "smollm2")]
    c = container(lcpp, "llama-server")
    t = pod_to_target(running_pod(lcpp, "10.8.0.6"), "node-1")
    assert t is not None and t.url == "http://10.8.0.6:8080/metrics" and t.engine == "llamacpp"
    assert "--metrics" in c["args"]
    assert t.max_running == float(flag(c["args"], "--parallel")) == 4.0
    so = example("llamacpp-dev.yaml")
    assert t.model == so["spec"]["triggers"][0]["metadata"]["model"] == flag(c["args"], "--alias")
    for d in deployments.values():
        assert selects(d["spec"]["selector"]["matchLabels"], d["spec"]["template"]["metadata"]["labels"])


# ------------------------------------------------------------------------------- prometheus-operator


def _sync_rules_module() -> Any:
    spec = importlib.util.spec_from_file_location("sync_rules", PROM_OP / "sync_rules.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_prometheus_rule_carries_exactly_the_rules_file(prom_op: list[JSON]) -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "rules.yaml").read_text())
    rule = find(prom_op, "PrometheusRule", "keda-llm", NAMESPACE)
    assert rule["spec"]["groups"] == rules["groups"], (
        "prometheusrule.yaml is stale: python deploy/overlays/prometheus-operator/sync_rules.py")
    sync = _sync_rules_module()
    rendered = sync.render((DEPLOY / "prometheus" / "rules.yaml").read_text())
    assert (PROM_OP / "monitors" / "prometheusrule.yaml").read_text() == rendered


def test_monitors_select_the_exporter_service_and_scaler_pods(prom_op: list[JSON]) -> None:
    sm = find(prom_op, "ServiceMonitor", "keda-llm-exporter", EXPORTER_NS)
    svcs = [o for o in prom_op if o["kind"] == "Service" and selects(sm["spec"]["selector"]["matchLabels"],
                                                                     o["metadata"]["labels"])]
    assert [s["metadata"]["name"] for s in svcs] == ["keda-llm-exporter"]
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["honorLabels"] is True and endpoint["path"] == "/metrics"
    service_port(svcs[0], endpoint["port"])
    assert sm["spec"]["namespaceSelector"]["matchNames"] == [EXPORTER_NS] == [sm["metadata"]["namespace"]]

    pm = find(prom_op, "PodMonitor", "keda-llm-scaler", NAMESPACE)
    dep = find(prom_op, "Deployment", "keda-llm-scaler", NAMESPACE)
    assert selects(pm["spec"]["selector"]["matchLabels"], dep["spec"]["template"]["metadata"]["labels"])
    (pod_endpoint,) = pm["spec"]["podMetricsEndpoints"]
    assert container_port(container(dep, "scaler"), pod_endpoint["port"]) == 9091
    assert pod_endpoint["path"] == "/metrics"


def test_tls_monitors_scrape_the_scaler_over_https_with_its_ca(prom_op: list[JSON], prom_op_tls: list[JSON],
                                                                 tls: list[JSON]) -> None:
    """overlays/prometheus-operator/tls: overlays/tls as it is, the same monitors, the scaler's PodMonitor
    on https verified against the CA in the scaler's own secret under a name its certificate carries."""
    assert find(prom_op_tls, "Deployment", "keda-llm-scaler", NAMESPACE) == find(tls, "Deployment",
                                                                                   "keda-llm-scaler", NAMESPACE)
    assert find(prom_op_tls, "PrometheusRule", "keda-llm", NAMESPACE) == find(prom_op, "PrometheusRule", "keda-llm",
                                                                               NAMESPACE)
    plain = find(prom_op, "PodMonitor", "keda-llm-scaler", NAMESPACE)
    pm = find(prom_op_tls, "PodMonitor", "keda-llm-scaler", NAMESPACE)
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    (plain_endpoint,) = plain["spec"]["podMetricsEndpoints"]
    assert endpoint["scheme"] == "https" and "scheme" not in plain_endpoint
    tls_config = endpoint["tlsConfig"]
    # the patch replaces the endpoint list whole: everything else must still be the plain one's
    assert {k: v for k, v in endpoint.items() if k not in ("scheme", "tlsConfig")} == plain_endpoint
    assert {k: v for k, v in pm["spec"].items() if k != "podMetricsEndpoints"} == {
        k: v for k, v in plain["spec"].items() if k != "podMetricsEndpoints"}
    cert = find(prom_op_tls, "Certificate", "keda-llm-scaler-tls", NAMESPACE)
    # the Prometheus Operator reads tlsConfig secrets from the monitor's own namespace
    assert pm["metadata"]["namespace"] == cert["metadata"]["namespace"]
    assert tls_config["ca"] == {"secret": {"name": cert["spec"]["secretName"], "key": "ca.crt"}}
    assert tls_config["serverName"] in cert["spec"]["dnsNames"]
    assert not tls_config.get("insecureSkipVerify")
    assert set(tls_config) == {"ca", "serverName"}  # no client certificate: /metrics needs none
    dep = find(prom_op_tls, "Deployment", "keda-llm-scaler", NAMESPACE)
    assert container_port(container(dep, "scaler"), endpoint["port"]) == 9091
    _, args = scaler_args(prom_op_tls)
    assert args.http_tls_cert and args.http_tls_key  # the port it scrapes over https does speak TLS


def test_tls_monitors_scrape_the_exporters_over_https_with_their_ca(prom_op: list[JSON], prom_op_tls: list[JSON],
                                                                    tls: list[JSON], tmp_path: Path) -> None:
    plain = find(prom_op, "ServiceMonitor", "keda-llm-exporter", EXPORTER_NS)
    sm = find(prom_op_tls, "ServiceMonitor", "keda-llm-exporter", EXPORTER_NS)
    (endpoint,) = sm["spec"]["endpoints"]
    (plain_endpoint,) = plain["spec"]["endpoints"]
    assert endpoint["scheme"] == "https" and "scheme" not in plain_endpoint
    assert {k: v for k, v in endpoint.items() if k not in ("scheme", "tlsConfig")} == plain_endpoint
    assert {k: v for k, v in sm["spec"].items() if k != "endpoints"} == {
        k: v for k, v in plain["spec"].items() if k != "endpoints"}
    cert = find(tls, "Certificate", "keda-llm-exporter-tls", EXPORTER_NS)
    assert sm["metadata"]["namespace"] == cert["metadata"]["namespace"]  # where the Operator reads the CA
    assert endpoint["tlsConfig"] == {"ca": {"secret": {"name": cert["spec"]["secretName"], "key": "ca.crt"}},
                                     "serverName": "keda-llm-exporter.keda-llm-exporter.svc"}
    assert endpoint["tlsConfig"]["serverName"] in cert["spec"]["dnsNames"]
    assert find(prom_op_tls, "DaemonSet", "keda-llm-exporter", EXPORTER_NS) == find(
        tls, "DaemonSet", "keda-llm-exporter", EXPORTER_NS)
    # the port it scrapes over https does speak TLS: the exporter's own flags say so
    c = container(find(prom_op_tls, "DaemonSet", "keda-llm-exporter", EXPORTER_NS), "exporter")
    args = parse_cli(exporter_cli.add_arguments, c["args"], "exporter")
    assert args.tls_cert and args.tls_key


def test_tls_overlay_serves_the_exporters_over_https_and_the_scaler_reads_them_so(base: list[JSON], tls: list[JSON],
                                                                                  tmp_path: Path) -> None:
    ds = find(tls, "DaemonSet", "keda-llm-exporter", EXPORTER_NS)
    base_ds = find(base, "DaemonSet", "keda-llm-exporter", EXPORTER_NS)
    c = container(ds, "exporter")
    args = parse_cli(exporter_cli.add_arguments, c["args"], "exporter")
    cm = find(tls, "ConfigMap", "keda-llm-exporter", EXPORTER_NS)
    config_file = tmp_path / "exporter.yaml"
    config_file.write_text(cm["data"][PurePosixPath(args.config).name])
    args.config = str(config_file)
    cfg = exporter_cli.build_config(args, {"NODE_NAME": "gpu-node-7"})
    base_args = parse_cli(exporter_cli.add_arguments, container(base_ds, "exporter")["args"], "exporter")
    assert {k: v for k, v in vars(args).items() if not k.startswith("tls_") and k != "config"} == {
        k: v for k, v in vars(base_args).items() if not k.startswith("tls_") and k != "config"}
    assert cfg.tls.enabled
    cert = find(tls, "Certificate", "keda-llm-exporter-tls", EXPORTER_NS)
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    for path, key in ((cfg.tls.cert_file, "tls.crt"), (cfg.tls.key_file, "tls.key")):
        p = PurePosixPath(path)
        assert p.name == key
        (mount,) = [m for m in mounts.values() if PurePosixPath(m["mountPath"]) == p.parent]
        assert mount["readOnly"] is True
        assert volumes[mount["name"]]["secret"]["secretName"] == cert["spec"]["secretName"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "metrics", "scheme": "HTTPS"}
    # everything else is the base's DaemonSet
    def without_tls(d: JSON) -> JSON:
        d = copy.deepcopy(d)
        spec = d["spec"]["template"]["spec"]
        spec["volumes"] = [v for v in spec["volumes"] if v["name"] != "tls"]
        (ctr,) = spec["containers"]
        ctr["volumeMounts"] = [m for m in ctr["volumeMounts"] if m["name"] != "tls"]
        for key in ("args", "readinessProbe", "livenessProbe"):
            ctr.pop(key)
        return d
    assert without_tls(ds) == without_tls(base_ds)
    assert "server auth" in cert["spec"]["usages"] and cert["spec"]["issuerRef"]["name"] == "keda-llm-ca"
    # the scaler reads the exporters over https, verifying them against the CA of the same issuer
    _, scaler = scaler_args(tls)
    assert scaler.exporters_tls_ca and PurePosixPath(scaler.exporters_tls_ca).name == "ca.crt"
    settings = scaler_cli.settings_from_args(scaler)
    assert settings.exporters_tls_ca == scaler.exporters_tls_ca
    scaler_cert = find(tls, "Certificate", "keda-llm-scaler-tls", NAMESPACE)
    assert scaler_cert["spec"]["issuerRef"] == cert["spec"]["issuerRef"]
    _, base_scaler = scaler_args(base)
    assert base_scaler.exporters_tls_ca is None  # the base's exporters speak plain http


#: example ScaledObjects for an engine the user runs (no Deployment of it ships), and why
USERS_OWN_WORKLOAD = {
    "llama-70b": "the backtests' 70B TP4 default: the user's own 70B Deployment",
    "llama-70b-prefill": "disaggregated pools: the user's own prefill and decode Deployments",
    "llama-70b-decode": "disaggregated pools: the user's own prefill and decode Deployments",
    "llama-8b-h100": "variants on two GPU types: the user's own Deployment per type",
    "llama-8b-l4": "variants on two GPU types: the user's own Deployment per type",
    "qwen-32b": "SGLang: the user's own Deployment",
}


def served_models(workload: JSON) -> set[str]:
    """The model names the exporter labels this workload's series with: the pod's keda-llm.io/model
    annotation, else vLLM's --served-model-name (its metrics' model_name), else its --model."""
    template = workload["spec"]["template"]
    annotated = template["metadata"].get("annotations", {}).get("keda-llm.io/model")
    if annotated:
        return {annotated}
    names: dict[str, set[str]] = {"--served-model-name": set(), "--model": set()}
    for c in template["spec"]["containers"]:
        args = [str(a) for a in c.get("args", [])]
        for i, arg in enumerate(args):
            flag, _, value = arg.partition("=")
            if flag in names:
                names[flag].add(value or (args[i + 1] if i + 1 < len(args) else ""))
    return names["--served-model-name"] or names["--model"]


def test_every_example_scales_a_shipped_workload_by_the_model_it_serves_or_says_it_is_the_users() -> None:
    # A ScaledObject pointed at a Deployment nobody ships, or naming a model the Deployment does not serve,
    # applies cleanly and then never scales: KEDA finds no target, or the scaler finds no series for the model
    # (the tuned 8B example once named both the Deployment and the model differently from vllm-deployment.yaml).
    workloads = {(d["metadata"].get("namespace"), d["metadata"]["name"]): d for _, d in example_docs()
                 if d["kind"] in ("Deployment", "StatefulSet")}
    for path, so in scaled_objects():
        ref, ns, name = so["spec"]["scaleTargetRef"], so["metadata"].get("namespace"), so["metadata"]["name"]
        target = workloads.get((ns, ref["name"]))
        if target is None:
            assert name in USERS_OWN_WORKLOAD, f"{path.name}: {name} scales {ref['name']}, which no example ships"
            continue
        served = served_models(target)
        if not served:
            continue  # no engine: warm capacity's placeholders, scaled on the model's demand (warm-capacity.yaml)
        for trig in so["spec"]["triggers"]:
            assert trig["metadata"]["model"] in served, (path.name, trig["metadata"]["model"], served)
