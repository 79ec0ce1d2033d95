"""A ScaledObject as KEDA and the HPA it creates read it: the one model, its defaults and its parser.

The scaler's Kubernetes reader (scaler/kube.py) and the simulator's manifest loader
(simulator/control/scaledobject.py, which adds the CRD-schema validation) both build `ScaledObject`
with `scaledobject_from_dict`, and every KEDA and HPA default is named here, once.

Defaults: KEDA's for a ScaledObject that leaves a field out (project KEDA reference, section 2.12;
kedacore/keda apis/keda/v1alpha1/scaledobject_types.go and pkg/scaling/executor), the HPA API's for
`behavior` (kubernetes pkg/apis/autoscaling/v2/defaults.go) and the kube-controller-manager's flags
(pkg/controller/podautoscaler/config/v1alpha1/defaults.go).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import InitVar, dataclass
from typing import Any, Literal, cast

MetricType = Literal["AverageValue", "Value"]
PolicyType = Literal["Pods", "Percent"]
SelectPolicy = Literal["Max", "Min", "Disabled"]
FallbackBehavior = Literal["static", "currentReplicas", "currentReplicasIfHigher", "currentReplicasIfLower"]

# -- KEDA's defaults (a ScaledObject that leaves the field out) -------------------------------------
DEFAULT_NAMESPACE = "default"
DEFAULT_TARGET_API_VERSION = "apps/v1"  # scaleTargetRef.apiVersion
DEFAULT_TARGET_KIND = "Deployment"  # scaleTargetRef.kind
DEFAULT_POLLING_INTERVAL_S = 30  # pollingInterval
DEFAULT_COOLDOWN_PERIOD_S = 300  # cooldownPeriod
DEFAULT_INITIAL_COOLDOWN_PERIOD_S = 0  # initialCooldownPeriod
DEFAULT_MIN_REPLICAS = 0  # minReplicaCount
DEFAULT_MAX_REPLICAS = 100  # maxReplicaCount
DEFAULT_METRIC_TYPE: MetricType = "AverageValue"  # triggers[].metricType
DEFAULT_FALLBACK_BEHAVIOR: FallbackBehavior = "static"  # fallback.behavior
#: KEDA's GetHPAMinReplicas: minReplicaCount if > 0, else this (the HPA never goes below 1)
HPA_MIN_REPLICAS_FLOOR = 1

# -- the HPA's defaults -----------------------------------------------------------------------------
#: kube-controller-manager flags: --horizontal-pod-autoscaler-sync-period, -tolerance,
#: -downscale-stabilization
DEFAULT_SYNC_PERIOD_S = 15.0
DEFAULT_TOLERANCE = 0.1
DEFAULT_DOWNSCALE_STABILIZATION_S = 300
#: behavior.scaleUp.stabilizationWindowSeconds when not set (scale-down's comes from the flag above)
DEFAULT_UPSCALE_STABILIZATION_S = 0
DEFAULT_SELECT_POLICY: SelectPolicy = "Max"


@dataclass(frozen=True)
class ScalingPolicy:
    """One HPAScalingPolicy: change at most `value` pods (or percent) within `period_seconds`."""

    type: PolicyType
    value: int
    period_seconds: int


#: autoscaling/v2 defaults.go: scale-up 4 pods or 100 % per 15 s, Max, no stabilization
DEFAULT_SCALE_UP_POLICIES = (ScalingPolicy("Pods", 4, 15), ScalingPolicy("Percent", 100, 15))
#: scale-down: 100 % per 15 s, Max, stabilization = the controller's window (300 s)
DEFAULT_SCALE_DOWN_POLICIES = (ScalingPolicy("Percent", 100, 15),)


@dataclass(frozen=True)
class ScalingRules:
    """HPAScalingRules as written by the user; None = "not set" (Kubernetes fills a default)."""

    stabilization_window_seconds: int | None = None
    select_policy: SelectPolicy | None = None
    policies: tuple[ScalingPolicy, ...] | None = None
    tolerance: float | None = None  # needs the HPAConfigurableTolerance feature gate (k8s >= 1.33)


@dataclass(frozen=True)
class Behavior:
    """`spec.behavior` of the HPA (KEDA copies `advanced.horizontalPodAutoscalerConfig.behavior`)."""

    scale_up: ScalingRules | None = None
    scale_down: ScalingRules | None = None


@dataclass(frozen=True)
class HPAConfig:
    """The HPA KEDA creates for a ScaledObject, plus the kube-controller-manager's flags."""

    min_replicas: int = HPA_MIN_REPLICAS_FLOOR  # KEDA: minReplicaCount if > 0, else 1 (GetHPAMinReplicas)
    max_replicas: int = DEFAULT_MAX_REPLICAS
    behavior: Behavior | None = None
    tolerance: float = DEFAULT_TOLERANCE  # --horizontal-pod-autoscaler-tolerance
    downscale_stabilization_s: int = DEFAULT_DOWNSCALE_STABILIZATION_S
    sync_period_s: float = DEFAULT_SYNC_PERIOD_S
    #: HPAConfigurableTolerance feature gate: alpha in 1.33, beta (on by default) in 1.34. Off here unless
    #: asked for, so behavior.*.tolerance is ignored as on clusters without the gate.
    configurable_tolerance: bool = False

    def __post_init__(self) -> None:
        if self.min_replicas < 1:
            raise ValueError(f"HPA min_replicas must be >= 1 (KEDA never gives the HPA 0), got {self.min_replicas}")
        if self.max_replicas < self.min_replicas:
            raise ValueError(f"HPA max_replicas {self.max_replicas} is below min_replicas {self.min_replicas}")

    def tolerances(self) -> tuple[float, float]:
        """(scale-up, scale-down) tolerance, per `tolerancesForHpa`."""
        up = down = self.tolerance
        if self.configurable_tolerance and self.behavior is not None:
            if self.behavior.scale_up is not None and self.behavior.scale_up.tolerance is not None:
                up = self.behavior.scale_up.tolerance
            if self.behavior.scale_down is not None and self.behavior.scale_down.tolerance is not None:
                down = self.behavior.scale_down.tolerance
        return up, down


@dataclass(frozen=True)
class Trigger:
    """One `spec.triggers[]` entry. `metadata` is exactly what KEDA sends the scaler as scalerMetadata."""

    type: str
    metadata: Mapping[str, str]
    name: str | None = None
    metric_type: MetricType = DEFAULT_METRIC_TYPE
    use_cached_metrics: bool = False

    @property
    def is_push(self) -> bool:
        """`external-push`: polled like `external`, plus a StreamIsActive stream."""
        return self.type == "external-push"


@dataclass(frozen=True)
class Fallback:
    """`spec.fallback`: replicas to fall back to after more than `failure_threshold` failures in a row."""

    failure_threshold: int
    replicas: int
    behavior: FallbackBehavior = DEFAULT_FALLBACK_BEHAVIOR


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a ScaledObject: where (a dotted path) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ScaledObjectError(ValueError):
    """The ScaledObject is not one KEDA would accept (or the emulator could run); lists every problem."""

    def __init__(self, problems: Sequence[Problem], source: str = "<input>") -> None:
        self.problems = tuple(problems)
        self.source = source
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{source}: invalid ScaledObject ({len(self.problems)} problem(s)):\n{lines}")


class ScaledObjectFormatError(ValueError):
    """A field of a ScaledObject document has the wrong shape; the message names the field."""


@dataclass(frozen=True)
class ScaledObject:
    """What KEDA and its HPA take from a ScaledObject (defaults are KEDA's).

    Built with `checked` (the default), KEDA's rules on the spec are enforced (`problems`), named by their
    YAML keys; the Kubernetes reader builds it unchecked: it reads what the API server holds.
    """

    name: str = "model"
    namespace: str = DEFAULT_NAMESPACE
    target_name: str = "model"
    target_kind: str = DEFAULT_TARGET_KIND
    triggers: tuple[Trigger, ...] = ()
    polling_interval_s: int = DEFAULT_POLLING_INTERVAL_S
    cooldown_period_s: int = DEFAULT_COOLDOWN_PERIOD_S
    initial_cooldown_period_s: int = DEFAULT_INITIAL_COOLDOWN_PERIOD_S
    min_replicas: int = DEFAULT_MIN_REPLICAS
    max_replicas: int = DEFAULT_MAX_REPLICAS
    idle_replicas: int | None = None
    fallback: Fallback | None = None
    behavior: Behavior | None = None
    target_api_version: str = DEFAULT_TARGET_API_VERSION
    checked: InitVar[bool] = True

    def __post_init__(self, checked: bool) -> None:
        if checked:
            found = list(problems(self))
            if found:
                raise ScaledObjectError(found, source=f"ScaledObject {self.namespace}/{self.name}")

    @property
    def hpa_min_replicas(self) -> int:
        """KEDA's `GetHPAMinReplicas`: minReplicaCount if > 0, else 1. The HPA never goes below 1."""
        return self.min_replicas if self.min_replicas > 0 else HPA_MIN_REPLICAS_FLOOR

    def hpa_config(self, **controller_flags: Any) -> HPAConfig:
        """The HPA KEDA creates for this ScaledObject; `controller_flags` are HPAConfig's cluster-wide
        fields (tolerance, downscale_stabilization_s, sync_period_s, configurable_tolerance)."""
        return HPAConfig(min_replicas=self.hpa_min_replicas, max_replicas=self.max_replicas,
                         behavior=self.behavior, **controller_flags)


def problems(s: ScaledObject) -> Iterator[Problem]:
    """KEDA's rules on a ScaledObject's spec (its CRD, CEL rule and webhook), named by their YAML keys."""
    if s.polling_interval_s < 1:
        yield Problem("spec.pollingInterval", f"must be >= 1, got {s.polling_interval_s}")
    for key, value in (("cooldownPeriod", s.cooldown_period_s), ("initialCooldownPeriod", s.initial_cooldown_period_s),
                       ("minReplicaCount", s.min_replicas)):
        if value < 0:
            yield Problem(f"spec.{key}", f"must be >= 0, got {value}")
    if s.max_replicas < 1:
        yield Problem("spec.maxReplicaCount", f"must be >= 1, got {s.max_replicas}")
    if s.min_replicas > s.max_replicas:
        yield Problem("spec.minReplicaCount",
                      f"minReplicaCount ({s.min_replicas}) must be <= maxReplicaCount ({s.max_replicas})")
    if s.idle_replicas is not None and not 0 <= s.idle_replicas < s.min_replicas:
        yield Problem("spec.idleReplicaCount",
                      f"idleReplicaCount ({s.idle_replicas}) must be >= 0 and < minReplicaCount ({s.min_replicas})")
    if s.fallback is not None and (s.fallback.failure_threshold < 0 or s.fallback.replicas < 0):
        yield Problem("spec.fallback", f"failureThreshold and replicas must be >= 0, got {s.fallback}")
    for i, t in enumerate(s.triggers):
        if t.metric_type not in ("AverageValue", "Value"):
            yield Problem(f"spec.triggers[{i}].metricType", f"must be AverageValue or Value, got {t.metric_type!r}")


# -------------------------------------------------------------------------------------------- parsing

_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:([KMGTPE]i)|([numkMGTPE])|[eE]([+-]?\d+))?$")
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


def parse_quantity(value: int | float | str) -> float:
    """A Kubernetes resource.Quantity (`0.05`, `50m`, `1`) as a float; raises ValueError if malformed."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 0.05 or 50m)")
    number, binary, decimal, exponent = m.groups()
    if binary:
        return float(number) * 2.0 ** _BINARY[binary]
    if exponent:
        return float(number) * 10.0 ** int(exponent)
    return float(number) * 10.0 ** _DECIMAL[decimal or ""]


def _int(obj: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = obj.get(key, default)
    if isinstance(value, float) and value.is_integer():  # JSON has numbers; the CRD's `integer` takes 30.0
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScaledObjectFormatError(f"{where}.{key} is {value!r}, expected an integer")
    return value


def _opt_int(obj: Mapping[str, Any], key: str, where: str) -> int | None:
    return None if obj.get(key) is None else _int(obj, key, where)


def _obj(obj: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = obj.get(key) or {}
    if not isinstance(value, Mapping):
        raise ScaledObjectFormatError(f"{where}.{key} is {value!r}, expected an object")
    return value


def _rules(behavior: Mapping[str, Any], key: str, where: str) -> ScalingRules | None:
    if behavior.get(key) is None:
        return None
    raw = _obj(behavior, key, where)
    at = f"{where}.{key}"
    policies = raw.get("policies")
    if policies is not None and not isinstance(policies, list):
        raise ScaledObjectFormatError(f"{at}.policies is {policies!r}, expected a list")
    parsed: list[ScalingPolicy] = []
    for i, p in enumerate(policies or ()):
        if not isinstance(p, Mapping):
            raise ScaledObjectFormatError(f"{at}.policies[{i}] is {p!r}, expected an object")
        parsed.append(ScalingPolicy(cast(PolicyType, p.get("type")), _int(p, "value", f"{at}.policies[{i}]"),
                                    _int(p, "periodSeconds", f"{at}.policies[{i}]")))
    tolerance = raw.get("tolerance")
    try:
        tol = None if tolerance is None else parse_quantity(tolerance)
    except ValueError as exc:
        raise ScaledObjectFormatError(f"{at}.tolerance: {exc}") from None
    return ScalingRules(
        stabilization_window_seconds=_opt_int(raw, "stabilizationWindowSeconds", at),
        select_policy=cast(SelectPolicy | None, raw.get("selectPolicy")),
        policies=None if policies is None else tuple(parsed),
        tolerance=tol,
    )


def _triggers(spec: Mapping[str, Any], where: str) -> tuple[Trigger, ...]:
    raw = spec.get("triggers") or []
    if not isinstance(raw, list):
        raise ScaledObjectFormatError(f"{where}.triggers is {raw!r}, expected a list")
    out: list[Trigger] = []
    for i, t in enumerate(raw):
        at = f"{where}.triggers[{i}]"
        if not isinstance(t, Mapping):
            raise ScaledObjectFormatError(f"{at} is {t!r}, expected an object")
        metadata = _obj(t, "metadata", at)
        out.append(Trigger(type=str(t.get("type") or ""), metadata={str(k): str(v) for k, v in metadata.items()},
                           name=t.get("name") or None,
                           metric_type=cast(MetricType, t.get("metricType") or DEFAULT_METRIC_TYPE),
                           use_cached_metrics=bool(t.get("useCachedMetrics", False))))
    return tuple(out)


def scaledobject_from_dict(doc: Mapping[str, Any], *, checked: bool = True) -> ScaledObject:
    """A ScaledObject document (the API server's JSON, or a manifest's YAML) -> ScaledObject, KEDA's
    defaults filled in. Raises ScaledObjectFormatError naming a field of the wrong shape, and (when
    `checked`) ScaledObjectError for a spec KEDA would refuse."""
    meta = _obj(doc, "metadata", "ScaledObject")
    where = f"ScaledObject {meta.get('namespace', '?')}/{meta.get('name', '?')}"
    spec = _obj(doc, "spec", where)
    at = f"{where} spec"
    ref = _obj(spec, "scaleTargetRef", at)
    target = ref.get("name")
    if not isinstance(target, str) or not target:
        raise ScaledObjectFormatError(f"{at}.scaleTargetRef.name is {target!r}, expected a name")
    fallback = None
    if spec.get("fallback") is not None:
        fb = _obj(spec, "fallback", at)
        fallback = Fallback(
            failure_threshold=_int(fb, "failureThreshold", f"{at}.fallback"),
            replicas=_int(fb, "replicas", f"{at}.fallback"),
            behavior=cast(FallbackBehavior, str(fb.get("behavior") or DEFAULT_FALLBACK_BEHAVIOR)),
        )
    hpa = _obj(_obj(spec, "advanced", at), "horizontalPodAutoscalerConfig", f"{at}.advanced")
    behavior = None
    if hpa.get("behavior") is not None:
        raw = _obj(hpa, "behavior", f"{at}.advanced.horizontalPodAutoscalerConfig")
        b_at = f"{at}.advanced.horizontalPodAutoscalerConfig.behavior"
        behavior = Behavior(scale_up=_rules(raw, "scaleUp", b_at), scale_down=_rules(raw, "scaleDown", b_at))
    return ScaledObject(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace") or DEFAULT_NAMESPACE),
        target_name=target,
        target_kind=str(ref.get("kind") or DEFAULT_TARGET_KIND),
        target_api_version=str(ref.get("apiVersion") or DEFAULT_TARGET_API_VERSION),
        triggers=_triggers(spec, at),
        polling_interval_s=_int(spec, "pollingInterval", at, DEFAULT_POLLING_INTERVAL_S),
        cooldown_period_s=_int(spec, "cooldownPeriod", at, DEFAULT_COOLDOWN_PERIOD_S),
        initial_cooldown_period_s=_int(spec, "initialCooldownPeriod", at, DEFAULT_INITIAL_COOLDOWN_PERIOD_S),
        min_replicas=_int(spec, "minReplicaCount", at, DEFAULT_MIN_REPLICAS),
        max_replicas=_int(spec, "maxReplicaCount", at, DEFAULT_MAX_REPLICAS),
        idle_replicas=_opt_int(spec, "idleReplicaCount", at),
        fallback=fallback,
        behavior=behavior,
        checked=checked,
    )
