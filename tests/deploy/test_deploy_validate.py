"""Strict validation of every object deploy/ ships, on every version deploy/README.md supports.

- Kubernetes objects (the kustomize builds and the examples) against the API's own JSON schemas of each
  supported Kubernetes minor, offline, from the `kubernetes-validate` package, in its strict mode (an
  unknown field is an error, as `kubectl apply --validate=strict` and server-side field validation make it).
- ScaledObjects against KEDA's CRD of each supported KEDA version (../shared/keda: v2.17.3, v2.18.0 and
  the newest), with unknown fields refused as the API server's strict field validation refuses them; and
  the HPA KEDA makes from each (its `behavior` is copied verbatim) against each Kubernetes version.
- An example that needs newer versions says so in MIN_VERSIONS, and the test shows the older ones
  really refuse it (so the requirement written in the README is the true one, not a guess).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from test_deploy_manifests import DEPLOY, EXAMPLE_FILES, KUSTOMIZATIONS, ROOT, build, identity, load_docs

kv_utils = pytest.importorskip("kubernetes_validate.utils", reason="pip install -e '.[dev]' (kubernetes-validate)")

JSON = dict[str, Any]

#: The supported Kubernetes minors (deploy/README.md, "Support matrix"). Every one must have its own schema
#: in kubernetes-validate (no silent fallback to an older one).
K8S_VERSIONS = [f"1.{m}" for m in range(27, 38)]
#: KEDA releases whose ScaledObject CRD every example is checked against; "newest" is main (schema of v2.20.2).
KEDA_DIR = Path(os.environ.get("KEDA_CRD_DIR", ROOT.parent / "shared" / "keda"))
KEDA_CRDS = {"2.17.3": "keda.sh_scaledobjects-v2.17.3.yaml", "2.18.0": "keda.sh_scaledobjects-v2.18.0.yaml",
             "newest": "keda.sh_scaledobjects.yaml"}
KEDA_ORDER = list(KEDA_CRDS)
#: Examples that need more than the minimum: path prefix under deploy/examples -> (KEDA, Kubernetes) minimum.
MIN_VERSIONS = {"keda-2.18/": ("2.18.0", "1.33")}
#: Custom resources with no schema available offline: checked structurally in test_deploy_manifests.py and
#: listed here so that a new kind must be looked at (and added) before it ships.
UNVALIDATED_CRS = {
    ("cert-manager.io/v1", "Certificate"), ("cert-manager.io/v1", "ClusterIssuer"),
    ("keda.sh/v1alpha1", "ClusterTriggerAuthentication"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PodMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


# ------------------------------------------------------------------------------- what deploy/ ships


def shipped() -> list[tuple[str, JSON]]:
    """(where, object) for every object of every kustomize build and every example file."""
    out: list[tuple[str, JSON]] = []
    seen: set[tuple[str, str, str]] = set()
    for directory in KUSTOMIZATIONS:
        for obj in build(directory):
            key = identity(obj)
            if key not in seen:  # the base repeats in each overlay; a patched copy is checked separately below
                seen.add(key)
                out.append((directory.relative_to(DEPLOY).as_posix(), obj))
            elif obj not in [o for w, o in out if identity(o) == key]:
                out.append((directory.relative_to(DEPLOY).as_posix(), obj))
    for path in EXAMPLE_FILES:
        for doc in load_docs(path):
            out.append((path.relative_to(DEPLOY).as_posix(), doc))
    return out


def example_minimum(where: str) -> tuple[str, str]:
    for prefix, minimum in MIN_VERSIONS.items():
        if where.startswith("examples/" + prefix):
            return minimum
    return KEDA_ORDER[0], K8S_VERSIONS[0]


def keda_supported(keda: str, minimum: str) -> bool:
    return KEDA_ORDER.index(keda) >= KEDA_ORDER.index(minimum)


def k8s_supported(k8s: str, minimum: str) -> bool:
    return _version_key(k8s) >= _version_key(minimum)


def test_every_manifest_file_under_deploy_is_built_or_an_example() -> None:
    """No YAML object under deploy/ escapes these checks (e.g. a file left out of its kustomization)."""
    covered = {p.resolve() for p in EXAMPLE_FILES}
    for directory in (k.parent for k in DEPLOY.rglob("kustomization.yaml")):
        k = yaml.safe_load((directory / "kustomization.yaml").read_text())
        covered |= {(directory / e).resolve() for e in k.get("resources") or [] if (directory / e).is_file()}
        covered |= {(directory / p["path"]).resolve() for p in k.get("patches") or []}
    for path in sorted(DEPLOY.rglob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
        if any("apiVersion" in d and "kind" in d for d in docs) and path.name != "kustomization.yaml":
            assert path.resolve() in covered, f"{path.relative_to(DEPLOY)} is in no kustomization and not an example"


# ------------------------------------------------------------------------------- Kubernetes schemas


def test_kubernetes_validate_has_a_schema_for_every_supported_version() -> None:
    have = {kv_utils.major_minor(v) for v in kv_utils.all_versions()}
    assert set(K8S_VERSIONS) <= have, f"kubernetes-validate lacks {sorted(set(K8S_VERSIONS) - have)}"


@functools.cache
def k8s_validator(version: str, api_version: str, kind: str) -> jsonschema.protocols.Validator | None:
    """The strict validator for (apiVersion, kind) at this Kubernetes minor, or None if the API has no such kind."""
    import re

    from referencing import Registry, Resource

    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema_dir = f"v{version}.0-local-strict"
    try:
        schema = kv_utils.schema_contents(f"kubernetes-json-schema/{schema_dir}/{kind.lower()}-{group_version}.json",
                                          version)
    except FileNotFoundError:
        return None
    # as kubernetes_validate.utils.validate builds it: both documents carry their own $id
    registry = Resource.from_contents(schema) @ Registry()
    registry = Resource.from_contents(_definitions(schema_dir, version)) @ registry
    return jsonschema.Draft202012Validator(schema, registry=registry)


@functools.cache
def _definitions(schema_dir: str, version: str) -> Any:
    return kv_utils.schema_contents(f"kubernetes-json-schema/{schema_dir}/_definitions.json", version)


def k8s_errors(obj: JSON, version: str) -> list[str] | None:
    validator = k8s_validator(version, obj["apiVersion"], obj["kind"])
    if validator is None:
        return None
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]


def test_the_strict_validator_refuses_an_unknown_field() -> None:
    """The check below is only worth something if strict mode really refuses unknown fields."""
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {}, "bogus": 1}
    errors = k8s_errors(cm, K8S_VERSIONS[0])
    assert errors and any("bogus" in e for e in errors)


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_kubernetes_object_validates_strictly(version: str) -> None:
    problems: list[str] = []
    crs: set[tuple[str, str]] = set()
    for where, obj in shipped():
        errors = k8s_errors(obj, version)
        if errors is None:
            crs.add((obj["apiVersion"], obj["kind"]))
            continue
        _, k8s_min = example_minimum(where)
        if k8s_supported(version, k8s_min):
            problems += [f"{where} {identity(obj)}: {e}" for e in errors]
    assert problems == [], "\n".join(problems)
    assert crs - {("keda.sh/v1alpha1", "ScaledObject")} <= UNVALIDATED_CRS, \
        f"new custom resource kinds without a schema check: {sorted(crs - UNVALIDATED_CRS)}"


# ------------------------------------------------------------------------------- KEDA's CRD


@functools.cache
def keda_schema(keda: str) -> JSON:
    path = KEDA_DIR / KEDA_CRDS[keda]
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{path} is missing: KEDA's CRDs live in shared/keda beside the checkout")
        pytest.skip(f"{path} not found (set KEDA_CRD_DIR)")
    crd = yaml.safe_load(path.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema: JSON = version["schema"]["openAPIV3Schema"]
    return schema


def unknown_fields(value: Any, schema: JSON, at: str = "") -> Iterator[str]:
    """Fields the API server's strict field validation refuses: not in `properties`, where the schema
    neither preserves unknown fields nor allows additionalProperties. `metadata` is the API's, not the CRD's."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            where = f"{at}.{key}" if at else str(key)
            if props is not None and key in props:
                if where != "metadata":
                    yield from unknown_fields(item, props[key], where)
            elif isinstance(extra, dict):
                yield from unknown_fields(item, extra, where)
            elif props is not None or extra is False:
                yield f"{where}: unknown field"
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            yield from unknown_fields(item, schema["items"], f"{at}[{i}]")


def keda_errors(doc: JSON, keda: str) -> list[str]:
    schema = keda_schema(keda)
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
              for e in jsonschema.Draft7Validator(schema).iter_errors(doc)]
    return errors + list(unknown_fields(doc, schema))


def hpa_of(so: JSON) -> JSON:
    """The HorizontalPodAutoscaler KEDA creates for a ScaledObject, as far as the API validates it."""
    spec = so["spec"]
    hpa_spec: JSON = {
        "scaleTargetRef": {k: spec["scaleTargetRef"][k] for k in ("apiVersion", "kind", "name")},
        "minReplicas": max(1, spec.get("minReplicaCount", 0)),
        "maxReplicas": spec.get("maxReplicaCount", 100),
        "metrics": [{"type": "External", "external": {
            "metric": {"name": f"s{i}-llm", "selector": {"matchLabels": {"scaledobject.keda.sh/name": "x"}}},
            "target": {"type": "AverageValue", "averageValue": "1"}}} for i, _ in enumerate(spec["triggers"])],
    }
    behavior = spec.get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior")
    if behavior is not None:
        hpa_spec["behavior"] = behavior
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": f"keda-hpa-{so['metadata']['name']}", "namespace": so["metadata"]["namespace"]},
            "spec": hpa_spec}


def scaled_objects() -> list[tuple[str, JSON]]:
    return [(w, o) for w, o in shipped() if o["kind"] == "ScaledObject"]


def test_the_crd_check_refuses_an_unknown_field() -> None:
    where, so = scaled_objects()[0]
    bad = {**so, "spec": {**so["spec"], "bogusField": 1}}
    assert any("bogusField" in e for e in keda_errors(bad, "newest")), where


@pytest.mark.parametrize("keda", KEDA_ORDER)
def test_every_scaled_object_validates_on_every_supported_keda(keda: str) -> None:
    problems = []
    for where, so in scaled_objects():
        keda_min, _ = example_minimum(where)
        if keda_supported(keda, keda_min):
            problems += [f"{where}: {e}" for e in keda_errors(so, keda)]
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_hpa_each_scaled_object_makes_validates_on_every_supported_kubernetes(version: str) -> None:
    problems = []
    for where, so in scaled_objects():
        _, k8s_min = example_minimum(where)
        if k8s_supported(version, k8s_min):
            errors = k8s_errors(hpa_of(so), version)
            problems += [f"{where}: {e}" for e in (["no HPA schema"] if errors is None else errors)]
    assert problems == [], "\n".join(problems)


def test_examples_needing_newer_versions_are_refused_by_the_older_ones() -> None:
    """MIN_VERSIONS is the truth: each such example fails on the version just below its minimum."""
    limited = [(w, so) for w, so in scaled_objects() if example_minimum(w) != (KEDA_ORDER[0], K8S_VERSIONS[0])]
    assert limited, "MIN_VERSIONS names no shipped example"
    for where, so in limited:
        keda_min, k8s_min = example_minimum(where)
        older_keda = KEDA_ORDER[KEDA_ORDER.index(keda_min) - 1]
        assert any("tolerance" in e for e in keda_errors(so, older_keda)), where
        older_k8s = K8S_VERSIONS[K8S_VERSIONS.index(k8s_min) - 1]
        assert any("tolerance" in e for e in k8s_errors(hpa_of(so), older_k8s) or []), where


def test_every_example_validating_everywhere_has_no_version_limited_field() -> None:
    """The examples without a MIN_VERSIONS entry carry no field that only newer versions know."""
    for where, so in scaled_objects():
        if example_minimum(where) == (KEDA_ORDER[0], K8S_VERSIONS[0]):
            assert "tolerance" not in yaml.safe_dump(so), where


def test_the_readmes_full_example_needs_keda_2_18_as_the_readme_says() -> None:
    """README: the recommended behavior's `tolerance` needs KEDA 2.18+ and the full example is for 2.18+; found by a
    review, the example sat outside deploy/examples and no test read it against the CRDs."""
    path = ROOT / "tests" / "fixtures" / "scaledobjects" / "vllm-push-recommended.yaml"
    docs = [d for d in load_docs(path) if d.get("kind") == "ScaledObject"]
    assert docs
    readme = (ROOT / "README.md").read_text()
    assert "vllm-push-recommended.yaml` (KEDA 2.18+)" in readme
    for so in docs:
        for keda in KEDA_ORDER:
            errors = keda_errors(so, keda)
            if keda_supported(keda, "2.18.0"):
                assert errors == [], (keda, errors)
            else:
                assert any("tolerance" in e for e in errors), keda
