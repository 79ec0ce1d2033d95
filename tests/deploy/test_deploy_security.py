"""Pod Security and seccomp, as manifest checks: each namespace enforces the strictest Pod Security Standard
its pods pass (the checks of kubernetes.io/docs/concepts/security/pod-security-standards for the fields
these manifests can set), every pod runs under a seccomp profile, and nothing asks for more than it uses.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_deploy_manifests import EXAMPLE_FILES, EXPORTER_NS, KUSTOMIZATIONS, NAMESPACE, build, load_docs

JSON = dict[str, Any]
LEVELS = ["restricted", "baseline", "privileged"]
#: Volume types the restricted profile allows.
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}
BASELINE_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
                 "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}


def pod_templates(objects: list[JSON]) -> Iterator[tuple[str, str, JSON]]:
    for o in objects:
        if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job"):
            yield o["metadata"]["namespace"], o["metadata"]["name"], o["spec"]["template"]["spec"]


def _containers(spec: JSON) -> list[JSON]:
    return list(spec.get("initContainers", [])) + list(spec["containers"])


def baseline_violations(spec: JSON) -> list[str]:
    out = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            out.append(key)
    out += [f"hostPath volume {v['name']}" for v in spec.get("volumes", []) if "hostPath" in v]
    for c in _containers(spec):
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            out.append(f"{c['name']}: privileged")
        added = set(sc.get("capabilities", {}).get("add", []))
        if added - BASELINE_CAPS:
            out.append(f"{c['name']}: capabilities {sorted(added - BASELINE_CAPS)}")
        out += [f"{c['name']}: hostPort" for p in c.get("ports", []) if p.get("hostPort")]
        if sc.get("procMount", "Default") != "Default":
            out.append(f"{c['name']}: procMount")
    for sc in [spec.get("securityContext", {})] + [c.get("securityContext", {}) for c in _containers(spec)]:
        if sc.get("seccompProfile", {}).get("type") == "Unconfined":
            out.append("seccomp Unconfined")
    return out


def restricted_violations(spec: JSON) -> list[str]:
    out = baseline_violations(spec)
    out += [f"volume {v['name']}" for v in spec.get("volumes", []) if not set(v) - {"name"} <= RESTRICTED_VOLUMES]
    pod_sc = spec.get("securityContext", {})
    for c in _containers(spec):
        sc = c.get("securityContext", {})
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{c['name']}: allowPrivilegeEscalation not false")
        if not sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")):
            out.append(f"{c['name']}: runAsNonRoot not true")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            out.append(f"{c['name']}: runAsUser 0")
        if "ALL" not in sc.get("capabilities", {}).get("drop", []):
            out.append(f"{c['name']}: capabilities not dropping ALL")
        if set(sc.get("capabilities", {}).get("add", [])) - {"NET_BIND_SERVICE"}:
            out.append(f"{c['name']}: adds capabilities")
        seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{c['name']}: seccomp {seccomp}")
    return out


def strictest_level(spec: JSON) -> str:
    if not restricted_violations(spec):
        return "restricted"
    return "baseline" if not baseline_violations(spec) else "privileged"


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: p.name)
def test_each_namespace_enforces_the_strictest_level_its_pods_pass(directory: Any) -> None:
    objects = build(directory)
    enforced = {o["metadata"]["name"]: o["metadata"].get("labels", {}).get("pod-security.kubernetes.io/enforce")
                for o in objects if o["kind"] == "Namespace"}
    assert enforced == {NAMESPACE: "restricted", EXPORTER_NS: "privileged"}
    needs: dict[str, str] = {}
    for ns, name, spec in pod_templates(objects):
        level = strictest_level(spec)
        assert LEVELS.index(level) <= LEVELS.index(enforced[ns]), \
            f"{name} needs {level} but {ns} enforces {enforced[ns]}: {restricted_violations(spec)}"
        needs[ns] = max(needs.get(ns, "restricted"), level, key=LEVELS.index)
    assert needs == enforced, "a namespace is labelled less strict than its pods need"


def test_only_the_exporter_needs_privileged_and_only_for_the_pod_resources_socket() -> None:
    objects = build(KUSTOMIZATIONS[0])
    for ns, name, spec in pod_templates(objects):
        if ns == EXPORTER_NS:
            assert name == "keda-llm-exporter"
            assert baseline_violations(spec) == ["hostPath volume pod-resources"]
            (c,) = spec["containers"]
            sc = c["securityContext"]
            assert sc["capabilities"]["drop"] == ["ALL"] and sc["allowPrivilegeEscalation"] is False
            assert sc["readOnlyRootFilesystem"] is True and not sc.get("privileged")
        else:
            assert restricted_violations(spec) == [], name


def all_pod_specs() -> Iterator[tuple[str, JSON]]:
    for directory in KUSTOMIZATIONS:
        for _, name, spec in pod_templates(build(directory)):
            yield f"{directory.name}/{name}", spec
    for path in EXAMPLE_FILES:
        for _, name, spec in pod_templates([d for d in load_docs(path) if "metadata" in d]):
            yield f"examples/{name}", spec


def test_every_pod_runs_under_runtime_default_seccomp() -> None:
    for where, spec in all_pod_specs():
        pod = spec.get("securityContext", {}).get("seccompProfile", {}).get("type")
        for c in _containers(spec):
            own = c.get("securityContext", {}).get("seccompProfile", {}).get("type")
            assert (own or pod) == "RuntimeDefault", f"{where}/{c['name']}: seccomp {own or pod}"


def test_every_container_drops_privilege_escalation_and_has_a_read_only_root() -> None:
    for directory in KUSTOMIZATIONS:
        for _, name, spec in pod_templates(build(directory)):
            for c in _containers(spec):
                sc = c.get("securityContext", {})
                assert sc.get("allowPrivilegeEscalation") is False and sc.get("readOnlyRootFilesystem") is True, name
                assert sc.get("capabilities", {}).get("drop") == ["ALL"], name


def test_the_checks_refuse_what_pod_security_refuses() -> None:
    ok = {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
          "containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": False,
                                                           "capabilities": {"drop": ["ALL"]}}}]}
    assert strictest_level(ok) == "restricted"
    root = {**ok, "securityContext": {"runAsUser": 0, "seccompProfile": {"type": "RuntimeDefault"}}}
    assert strictest_level(root) == "baseline"
    host = {**ok, "volumes": [{"name": "h", "hostPath": {"path": "/"}}]}
    assert strictest_level(host) == "privileged"
    no_seccomp = {**ok, "securityContext": {"runAsNonRoot": True}}
    assert strictest_level(no_seccomp) == "baseline"
