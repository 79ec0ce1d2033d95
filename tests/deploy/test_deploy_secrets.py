"""Bearer tokens reach the code from Kubernetes Secrets, as the manifests wire them.

A small kubelet: for a pod template, each Secret volume is written out under a temporary root the way
the kubelet projects it (the listed `items`, or every key), `secretKeyRef` env values are read from the
Secret, and a required Secret that does not exist stops the pod (as CreateContainerConfigError does).
Then the real code reads its tokens from what the manifests gave it: the scaler's activation token
(env KEDA_LLM_ACTIVATION_TOKEN, read by its argparse default) and warm token file, the exporter's warm
token file (its Warmer's authorize), the activator's activation and admin token files (read_token).
A manifest that names another Secret, key or path than the code reads fails here. And every Secret that
nothing in deploy/ creates has its `kubectl create secret` line in deploy/README.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from test_deploy_manifests import (
    ACTIVATOR,
    DEPLOY,
    EXPORTER_NS,
    KUSTOMIZATIONS,
    NAMESPACE,
    build,
    container,
    expand_env,
    find,
    parse_cli,
)

from keda_llm.activator import cli as activator_cli
from keda_llm.activator.config import load as load_activator_config
from keda_llm.activator.config import read_token
from keda_llm.exporter.config import parse_config
from keda_llm.exporter.warm import Warmer, WarmError
from keda_llm.scaler import cli as scaler_cli
from keda_llm.scaler.warm import TokenFile

JSON = dict[str, Any]
ACTIVATION = "activation-token-0123456789abcdef"
WARM = "warm-token-fedcba9876543210"
ADMIN = "admin-token-5555"
#: The Secrets an operator creates (deploy/README.md, "Secrets"), by (namespace, name): their data.
SECRETS = {(NAMESPACE, "keda-llm-activation-token"): {"token": ACTIVATION},
           (NAMESPACE, "keda-llm-warm-token"): {"token": WARM},
           (EXPORTER_NS, "keda-llm-warm-token"): {"token": WARM},
           (NAMESPACE, "keda-llm-activator-admin"): {"token": ADMIN}}
#: What cert-manager makes in overlays/tls (the contents do not matter here).
CERT_MANAGER_MADE = {(NAMESPACE, "keda-llm-scaler-tls"): {"tls.crt": "c", "tls.key": "k", "ca.crt": "a"}}


class PodStartError(Exception):
    """What the kubelet would report instead of starting the container."""


def run_container(workload: JSON, name: str, secrets: dict[tuple[str, str], dict[str, str]], root: Path,
                  config_maps: list[JSON]) -> tuple[dict[str, str], Callable[[str], str]]:
    """(env, local): the container's env as the kubelet resolves it (literal values, secretKeyRef), and
    a function from a path inside the container to where this kubelet wrote that file."""
    ns = workload["metadata"]["namespace"]
    spec = workload["spec"]["template"]["spec"]
    c = container(workload, name)
    env: dict[str, str] = {}
    for e in c.get("env", []):
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref is None:
            env[e["name"]] = e.get("value", "")
            continue
        data = secrets.get((ns, ref["name"]))
        if data is None or ref["key"] not in data:
            if ref.get("optional"):
                continue
            raise PodStartError(f"secret {ns}/{ref['name']} key {ref['key']!r} not found")
        env[e["name"]] = data[ref["key"]]
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts: dict[str, Path] = {}
    for m in c.get("volumeMounts", []):
        vol = volumes[m["name"]]
        target = root / m["mountPath"].lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        mounts[m["mountPath"]] = target
        if "secret" in vol:
            src = vol["secret"]
            data = secrets.get((ns, src["secretName"]))
            if data is None:
                if src.get("optional"):
                    continue
                raise PodStartError(f"secret {ns}/{src['secretName']} not found")
        elif "configMap" in vol:
            src = vol["configMap"]
            data = next(cm["data"] for cm in config_maps if cm["metadata"]["name"] == src["name"]
                        and cm["metadata"]["namespace"] == ns)
        else:
            continue
        items = src.get("items") or [{"key": k, "path": k} for k in data]
        for item in items:
            if item["key"] not in data:
                raise PodStartError(f"{src} has no key {item['key']!r}")
            (target / item["path"]).write_text(data[item["key"]])

    def local(path: str) -> str:
        p = PurePosixPath(path)
        for mount, where in mounts.items():
            if p.is_relative_to(mount):
                return str(where / p.relative_to(mount))
        raise AssertionError(f"{path} is in no volume of container {name}")

    return env, local


def config_maps(objects: list[JSON]) -> list[JSON]:
    return [o for o in objects if o["kind"] == "ConfigMap"]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("KEDA_LLM_"):
            monkeypatch.delenv(name)


@pytest.mark.parametrize("directory", [KUSTOMIZATIONS[0], KUSTOMIZATIONS[1], ACTIVATOR],
                         ids=lambda p: p.relative_to(DEPLOY).as_posix())
def test_the_scaler_reads_its_activation_and_warm_tokens_from_the_secrets(directory: Path, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    objects = build(directory)
    dep = find(objects, "Deployment", "keda-llm-scaler", NAMESPACE)
    c = container(dep, "scaler")
    assert not any(ACTIVATION in a or "token=" in a.lower() for a in c["args"])  # no token on the command line
    secrets = {**SECRETS, **CERT_MANAGER_MADE}
    env, local = run_container(dep, "scaler", secrets, tmp_path, config_maps(objects))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    args = parse_cli(scaler_cli.add_arguments, expand_env(c["args"], c, {"POD_IP": "10.0.0.1"}), "scaler")
    settings = scaler_cli.settings_from_args(args)
    assert settings.activation_token == ACTIVATION  # the env the scaler's --activation-token defaults from
    assert settings.warm_token_file is not None
    assert TokenFile(local(settings.warm_token_file)).read() == WARM
    # the activation token is required: without its Secret the scaler does not start unauthenticated
    without = {k: v for k, v in secrets.items() if k[1] != "keda-llm-activation-token"}
    with pytest.raises(PodStartError, match="keda-llm-activation-token"):
        run_container(dep, "scaler", without, tmp_path / "again", config_maps(objects))
    # the warm token is optional (warm is opt-in): without it the scaler starts and makes no warm call
    no_warm = {k: v for k, v in secrets.items() if k[1] != "keda-llm-warm-token"}
    _, local2 = run_container(dep, "scaler", no_warm, tmp_path / "no-warm", config_maps(objects))
    assert TokenFile(local2(settings.warm_token_file)).read() is None


def test_the_exporter_checks_warm_calls_against_the_same_token(tmp_path: Path) -> None:
    objects = build(KUSTOMIZATIONS[0])
    ds = find(objects, "DaemonSet", "keda-llm-exporter", EXPORTER_NS)
    _, local = run_container(ds, "exporter", SECRETS, tmp_path, config_maps(objects))
    cm = find(objects, "ConfigMap", "keda-llm-exporter", EXPORTER_NS)
    cfg = parse_config(yaml.safe_load(cm["data"]["exporter.yaml"]), {"NODE_NAME": "n"})
    assert not cfg.warm.enabled  # off until warm.directories names the node's model directories
    models = tmp_path / "models"
    models.mkdir()
    warmer = Warmer(type(cfg.warm)(directories=(str(models),), token_file=local(cfg.warm.token_file)))
    warmer.authorize(f"Bearer {WARM}")  # what the scaler sends, from its copy of the Secret
    with pytest.raises(WarmError) as refused:
        warmer.authorize(f"Bearer {ACTIVATION}")
    assert refused.value.status == 401
    # the two copies (one per namespace: a pod mounts Secrets of its own namespace only) hold one token
    assert SECRETS[(NAMESPACE, "keda-llm-warm-token")] == SECRETS[(EXPORTER_NS, "keda-llm-warm-token")]


def test_the_activator_reads_the_scalers_activation_token_and_its_admin_token(tmp_path: Path) -> None:
    objects = build(ACTIVATOR)
    dep = find(objects, "Deployment", "keda-llm-activator", NAMESPACE)
    c = container(dep, "activator")
    _, local = run_container(dep, "activator", SECRETS, tmp_path, config_maps(objects))
    args = parse_cli(activator_cli.add_arguments, c["args"], "activator")
    assert args.activation_token_file is None and args.admin_token_file is None  # paths come from the file
    cfg = load_activator_config(local(args.config))
    assert cfg is not None
    assert read_token(local(cfg.activation_token_file), "activation_token_file") == ACTIVATION
    assert read_token(local(cfg.admin_token_file), "admin_token_file") == ADMIN
    for missing in ("keda-llm-activation-token", "keda-llm-activator-admin"):
        with pytest.raises(PodStartError, match=missing):
            run_container(dep, "activator", {k: v for k, v in SECRETS.items() if k[1] != missing},
                          tmp_path / missing, config_maps(objects))


def referenced_secrets(objects: list[JSON]) -> set[tuple[str, str, str]]:
    """(namespace, name, key) of every Secret a pod template reads (env or volume)."""
    out = set()
    for o in objects:
        if o["kind"] not in ("Deployment", "DaemonSet"):
            continue
        ns, spec = o["metadata"]["namespace"], o["spec"]["template"]["spec"]
        for c in spec["containers"]:
            for e in c.get("env", []):
                if ref := e.get("valueFrom", {}).get("secretKeyRef"):
                    out.add((ns, ref["name"], ref["key"]))
        for v in spec.get("volumes", []):
            if "secret" in v:
                for item in v["secret"].get("items") or [{"key": "*"}]:
                    out.add((ns, v["secret"]["secretName"], item["key"]))
    return out


def test_every_secret_nothing_creates_has_its_create_command_in_the_readme() -> None:
    readme = (DEPLOY / "README.md").read_text()
    assert "### Secrets" in readme
    section = readme[readme.index("### Secrets"):]
    section = section[:section.index("\n## ", 1) if "\n## " in section[1:] else len(section)]
    commands = set(re.findall(r"kubectl -n (\S+) create secret generic (\S+) --from-literal=(\w[\w.-]*)=", section))
    made: set[tuple[str, str]] = set()
    wanted: set[tuple[str, str, str]] = set()
    for directory in KUSTOMIZATIONS:
        objects = build(directory)
        made |= {(o["metadata"]["namespace"], o["spec"]["secretName"]) for o in objects if o["kind"] == "Certificate"}
        wanted |= referenced_secrets(objects)
    user_made = {s for s in wanted if (s[0], s[1]) not in made}
    assert user_made == set(SECRETS_KEYS), "a Secret the manifests read: add it to SECRETS and the README"
    assert user_made <= commands, f"no `kubectl create secret` line in deploy/README.md for {user_made - commands}"


SECRETS_KEYS = {(ns, name, key) for (ns, name), data in SECRETS.items() for key in data}


def test_the_kubelet_here_refuses_what_the_kubelet_refuses(tmp_path: Path) -> None:
    """Sanity of run_container: a required Secret or key that is missing stops the pod; optional ones do not."""
    pod = {"metadata": {"namespace": "a"}, "spec": {"template": {"spec": {
        "containers": [{"name": "c", "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
                        "volumeMounts": [{"name": "v", "mountPath": "/v"}]}],
        "volumes": [{"name": "v", "secret": {"secretName": "s", "items": [{"key": "k", "path": "f"}]}}]}}}}
    env, local = run_container(pod, "c", {("a", "s"): {"k": "x"}}, tmp_path / "1", [])
    assert env == {"T": "x"} and Path(local("/v/f")).read_text() == "x"
    with pytest.raises(PodStartError):
        run_container(pod, "c", {}, tmp_path / "2", [])
    with pytest.raises(PodStartError):
        run_container(pod, "c", {("a", "s"): {"other": "x"}}, tmp_path / "3", [])
    with pytest.raises(PodStartError):
        run_container(pod, "c", {("b", "s"): {"k": "x"}}, tmp_path / "4", [])  # another namespace's Secret
