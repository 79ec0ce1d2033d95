"""Read a real ScaledObject manifest into the scaler's ScaledObject, after validating it as Kubernetes would.

Users backtest the ScaledObject they deploy, so the loader takes the same YAML (several documents in
one file are fine; the ScaledObject is picked by kind and, if needed, name) and checks it against
KEDA's own CRD schema (vendored next to this module, see KEDA-CRD.md), the CRD's CEL rule, KEDA's
admission-webhook checks and the HPA API's checks on `behavior`. Every problem is reported with
its path (`spec.triggers[0].metadata.model`) and all problems are reported at once.

The result is the one ScaledObject model the scaler's Kubernetes reader also builds
(scaler/scaledobject.py `ScaledObject`, here under its old name `KedaSettings`), parsed by the same
`scaledobject_from_dict`; KEDA's and the HPA's defaults are named there, once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, cast

import yaml

from keda_llm.common import yamltext
from keda_llm.scaler.scaledobject import (
    DEFAULT_MAX_REPLICAS,
    DEFAULT_MIN_REPLICAS,
    Fallback,
    FallbackBehavior,
    Problem,
    ScaledObject,
    ScaledObjectError,
    ScaledObjectFormatError,
    Trigger,
    parse_quantity,
    scaledobject_from_dict,
)

CRD_PATH = Path(__file__).with_name("keda.sh_scaledobjects.yaml")
API_VERSION = "keda.sh/v1alpha1"
#: trigger types the emulator drives (KEDA's external scaler contract)
EMULATED_TRIGGER_TYPES = ("external", "external-push")

#: What KEDA and its HPA take from a ScaledObject: the scaler's one model, under the simulator's old name.
KedaSettings = ScaledObject


# ---------------------------------------------------------------------------------------------- schema


@lru_cache(maxsize=1)
def crd_schema() -> Mapping[str, Any]:
    """The `openAPIV3Schema` of the vendored CRD's served version."""
    crd = yaml.safe_load(CRD_PATH.read_text())
    for version in crd["spec"]["versions"]:
        if version["name"] == "v1alpha1":
            return cast(Mapping[str, Any], version["schema"]["openAPIV3Schema"])
    raise RuntimeError(f"{CRD_PATH.name} has no v1alpha1 schema")


def _path(parts: Sequence[str | int]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _schema_problems(doc: Mapping[str, Any]) -> list[Problem]:
    import jsonschema  # imported here: only manifests need it (a runtime dependency of `keda-llm simulate`)

    checker = jsonschema.FormatChecker()

    def _int32(value: object) -> bool:
        return not isinstance(value, int) or -(2**31) <= value < 2**31

    checker.checks("int32")(_int32)

    validator = jsonschema.Draft7Validator(crd_schema(), format_checker=checker)
    problems = [Problem(_path(list(e.absolute_path)), _hint(list(e.absolute_path), e.message))
                for e in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))]
    problems.extend(_unknown_fields(doc, crd_schema(), []))
    return problems


def _hint(at: list[str | int], message: str) -> str:
    if len(at) == 5 and at[1] == "triggers" and at[3] == "metadata" and "is not of type 'string'" in message:
        return f"{message} (trigger metadata values are strings: quote it)"
    return message


def _unknown_fields(value: Any, schema: Mapping[str, Any], at: list[str | int]) -> Iterator[Problem]:
    """Fields the structural schema does not know: the API server drops them, `kubectl apply` (strict
    field validation) refuses them; usually a typo such as `pollingIntervall`."""
    if isinstance(value, Mapping) and "properties" in schema and "additionalProperties" not in schema:
        props = schema["properties"]
        for key, sub in value.items():
            if key not in props:
                yield Problem(_path([*at, key]), "unknown field (not in the ScaledObject CRD schema)")
            else:
                yield from _unknown_fields(sub, props[key], [*at, key])
    elif isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            yield from _unknown_fields(item, schema["items"], [*at, i])


# ------------------------------------------------------------------------------------------ semantics

def _rules_problems(rules: Mapping[str, Any], at: str) -> Iterator[Problem]:
    """The HPA API's validation of HPAScalingRules (k8s pkg/apis/autoscaling/validation): KEDA copies the
    behavior verbatim, so a bad one makes the HPA create/update fail."""
    window = rules.get("stabilizationWindowSeconds")
    if isinstance(window, int) and not 0 <= window <= 3600:
        yield Problem(f"{at}.stabilizationWindowSeconds", f"must be within [0, 3600], got {window}")
    select = rules.get("selectPolicy")
    if select is not None and select not in ("Max", "Min", "Disabled"):
        yield Problem(f"{at}.selectPolicy", f"must be Max, Min or Disabled, got {select!r}")
    policies = rules.get("policies")
    if isinstance(policies, list):
        if not policies and select != "Disabled":
            yield Problem(f"{at}.policies", "must have at least one policy unless selectPolicy is Disabled")
        for i, policy in enumerate(policies):
            if not isinstance(policy, Mapping):
                continue
            if policy.get("type") not in ("Pods", "Percent"):
                yield Problem(f"{at}.policies[{i}].type", f"must be Pods or Percent, got {policy.get('type')!r}")
            value, period = policy.get("value"), policy.get("periodSeconds")
            if isinstance(value, int) and value <= 0:
                yield Problem(f"{at}.policies[{i}].value", f"must be greater than zero, got {value}")
            if isinstance(period, int) and not 0 < period <= 1800:
                yield Problem(f"{at}.policies[{i}].periodSeconds", f"must be within (0, 1800], got {period}")
    if "tolerance" in rules:
        try:
            tol = parse_quantity(rules["tolerance"])
        except ValueError as exc:
            yield Problem(f"{at}.tolerance", str(exc))
        else:
            if tol < 0:
                yield Problem(f"{at}.tolerance", f"must be greater than or equal to zero, got {rules['tolerance']!r}")


def _semantic_problems(doc: Mapping[str, Any]) -> Iterator[Problem]:
    """Checks outside the schema: the CRD's CEL rule, KEDA's webhook, the HPA API, and what the emulator runs."""
    if doc.get("apiVersion") != API_VERSION:
        yield Problem("apiVersion", f"must be {API_VERSION}, got {doc.get('apiVersion')!r}")
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        yield Problem("metadata.name", "is required")
    elif len(name) > 63:
        yield Problem("metadata.name", f"must be at most 63 characters (KEDA >= 2.20), got {len(name)}")
    spec = doc.get("spec")
    if not isinstance(spec, Mapping):
        return
    min_r, max_r, idle = spec.get("minReplicaCount"), spec.get("maxReplicaCount"), spec.get("idleReplicaCount")
    if isinstance(min_r, int) and min_r > (max_r if isinstance(max_r, int) else DEFAULT_MAX_REPLICAS):
        yield Problem("spec.minReplicaCount",
                      f"minReplicaCount ({min_r}) must be less than or equal to maxReplicaCount "
                      f"({max_r if isinstance(max_r, int) else f'{DEFAULT_MAX_REPLICAS}, the default'})")
    if isinstance(idle, int) and idle >= (min_r if isinstance(min_r, int) else DEFAULT_MIN_REPLICAS):
        yield Problem("spec.idleReplicaCount", f"idleReplicaCount ({idle}) must be less than minReplicaCount "
                                               f"({min_r if min_r else DEFAULT_MIN_REPLICAS})")
    triggers = spec.get("triggers")
    if isinstance(triggers, list):
        names: dict[str, int] = {}
        for i, trig in enumerate(triggers):
            if not isinstance(trig, Mapping):
                continue
            at = f"spec.triggers[{i}]"
            ttype = trig.get("type")
            if isinstance(ttype, str) and ttype and ttype not in EMULATED_TRIGGER_TYPES:
                yield Problem(f"{at}.type", f"the emulator runs only {' and '.join(EMULATED_TRIGGER_TYPES)} "
                                            f"triggers (KEDA's external scaler contract), got {ttype!r}")
            mtype = trig.get("metricType")
            if mtype is not None and mtype not in ("AverageValue", "Value"):
                yield Problem(f"{at}.metricType", f"external metrics support AverageValue or Value, got {mtype!r}")
            metadata = trig.get("metadata")
            if isinstance(metadata, Mapping) and ttype in EMULATED_TRIGGER_TYPES and not metadata.get("scalerAddress"):
                yield Problem(f"{at}.metadata.scalerAddress", "is required for external triggers (host:port)")
            tname = trig.get("name")
            if isinstance(tname, str) and tname:
                if tname in names:
                    yield Problem(f"{at}.name", f"trigger name {tname!r} is also used by spec.triggers[{names[tname]}]")
                names.setdefault(tname, i)
    advanced = spec.get("advanced")
    if isinstance(advanced, Mapping):
        if advanced.get("scalingModifiers"):
            yield Problem("spec.advanced.scalingModifiers",
                          "scalingModifiers (formula) is not modelled by the emulator")
        hpa = advanced.get("horizontalPodAutoscalerConfig")
        behavior = hpa.get("behavior") if isinstance(hpa, Mapping) else None
        if isinstance(behavior, Mapping):
            for direction in ("scaleUp", "scaleDown"):
                rules = behavior.get(direction)
                if isinstance(rules, Mapping):
                    at = f"spec.advanced.horizontalPodAutoscalerConfig.behavior.{direction}"
                    yield from _rules_problems(rules, at)
    fallback = spec.get("fallback")
    if isinstance(fallback, Mapping) and fallback.get("behavior") == "scalingModifiers":
        yield Problem("spec.fallback.behavior", "scalingModifiers fallback is not modelled by the emulator")


def validate_scaledobject(doc: Mapping[str, Any]) -> list[Problem]:
    """Every problem with one ScaledObject document (empty list = valid)."""
    if not isinstance(doc, Mapping):
        return [Problem("", f"a ScaledObject must be a mapping, got {type(doc).__name__}")]
    problems = _schema_problems(doc)
    problems.extend(_semantic_problems(doc))
    return problems


# -------------------------------------------------------------------------------------------- parsing


def settings_from_manifest(doc: Mapping[str, Any], source: str = "<input>") -> KedaSettings:
    """Validate one ScaledObject document and convert it; raises ScaledObjectError listing every problem."""
    problems = validate_scaledobject(doc)
    if problems:
        raise ScaledObjectError(problems, source)
    try:
        return scaledobject_from_dict(doc)
    except ScaledObjectFormatError as exc:  # the schema let a shape through that the model cannot take
        raise ScaledObjectError([Problem("", str(exc))], source) from exc


def parse_scaledobjects(text: str, source: str = "<input>") -> list[KedaSettings]:
    """Every ScaledObject in a (multi-document) YAML text, validated; other kinds are skipped."""
    try:
        docs = yamltext.load_all(text)
    except yamltext.YAMLTextError as exc:
        raise ScaledObjectError([Problem("", f"not valid YAML: {exc}")], source) from None
    out: list[KedaSettings] = []
    problems: list[Problem] = []
    for i, doc in enumerate(docs):
        if not isinstance(doc, Mapping):
            problems.append(Problem(f"document {i}", f"expected a mapping, got {type(doc).__name__}"))
        elif doc.get("kind") == "ScaledObject":
            try:
                out.append(settings_from_manifest(doc, source))
            except ScaledObjectError as exc:
                name = (doc.get("metadata") or {}).get("name", "?") if isinstance(doc.get("metadata"), Mapping) else "?"
                problems.extend(Problem(f"document {i} ({name}): {p.path}" if p.path else f"document {i} ({name})",
                                        p.message) for p in exc.problems)
    if problems:
        raise ScaledObjectError(problems, source)
    return out


def load_scaledobject(path: str | Path, name: str | None = None) -> KedaSettings:
    """The ScaledObject in a YAML file (pick one by `name` when the file holds several)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ScaledObjectError([Problem("", f"cannot read {p}: {exc.strerror or exc}")], str(p)) from exc
    found = parse_scaledobjects(text, str(p))
    if name is not None:
        found = [s for s in found if s.name == name]
        if not found:
            raise ScaledObjectError([Problem("", f"no ScaledObject named {name!r}")], str(p))
    if not found:
        raise ScaledObjectError([Problem("", "no document of kind ScaledObject")], str(p))
    if len(found) > 1:
        names = ", ".join(s.name for s in found)
        raise ScaledObjectError([Problem("", f"{len(found)} ScaledObjects ({names}); pass name= to pick one")], str(p))
    return found[0]


__all__ = [
    "CRD_PATH",
    "Fallback",
    "FallbackBehavior",
    "KedaSettings",
    "Problem",
    "ScaledObject",
    "ScaledObjectError",
    "Trigger",
    "crd_schema",
    "load_scaledobject",
    "parse_quantity",
    "parse_scaledobjects",
    "settings_from_manifest",
    "validate_scaledobject",
]
