"""Read-only Kubernetes view of a ScaledObject and its scale target -> scaler.model.WorkloadState.

KEDA does not pass the ScaledObject's settings or the target's replica counts to an external
scaler, yet the pending-replica guard, advisory mode and the forecast horizon need them. Per
tracked ScaledObject this reads, with the pod's service-account token:

- the ScaledObject (keda.sh/v1alpha1), into the one ScaledObject model (scaler/scaledobject.py, KEDA's
  defaults filled in): scaleTargetRef, pollingInterval, cooldownPeriod, min/maxReplicaCount,
  advanced.horizontalPodAutoscalerConfig.behavior, fallback, triggers;
- the target's `/scale` subresource (autoscaling/v1 Scale): spec.replicas, status.replicas;
- the target object itself for status.readyReplicas (a Scale carries no readiness);
- `read_phases`: the target's pods (list, by /scale's selector) and the namespace's kubelet `Pulled`
  events (list), for the cold-start phases each pod went through (scaler/phases.py).

Reads run in the background; an API error keeps the last known value, with its age and the error
(never an exception into an RPC handler).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import requests

from keda_llm.common.periodic import Periodic
from keda_llm.scaler.model import WorkloadState
from keda_llm.scaler.phases import PodTimes, matches, pod_times, pulled_times
from keda_llm.scaler.scaledobject import ScaledObject, ScaledObjectFormatError, scaledobject_from_dict

log = logging.getLogger(__name__)

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SA_TOKEN = f"{SA_DIR}/token"
SA_CA = f"{SA_DIR}/ca.crt"

KEDA_GROUP_VERSION = "keda.sh/v1alpha1"
#: Resource (plural) of a scale target's kind, where the ScaledObject's status.scaleTargetGVKR does not say.
RESOURCE_OF_KIND: Mapping[str, str] = {
    "Deployment": "deployments",
    "StatefulSet": "statefulsets",
    "ReplicaSet": "replicasets",
    "Rollout": "rollouts",  # argoproj.io/v1alpha1
    "LeaderWorkerSet": "leaderworkersets",  # leaderworkerset.x-k8s.io/v1
}

JSON = dict[str, Any]


class KubeError(Exception):
    """An API read failed or answered something unusable; `status` is the HTTP status, if any."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class KubeConfig:
    """Where the API server is and how to prove who we are. Paths are injectable for tests."""

    base_url: str
    token_path: str = SA_TOKEN
    ca_path: str | None = SA_CA  # None: the system trust store (or plain http in tests)
    timeout_s: float = 5.0

    @classmethod
    def in_cluster(
        cls, env: Mapping[str, str] = os.environ, token_path: str = SA_TOKEN, ca_path: str = SA_CA
    ) -> KubeConfig:
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
        if not host or not port:
            raise KubeError("not in a cluster: KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT are not set")
        host = f"[{host}]" if ":" in host else host
        return cls(base_url=f"https://{host}:{port}", token_path=token_path, ca_path=ca_path)


#: An answer larger than this is refused, not read. The largest the scaler asks for is a namespace's
#: `Pulled` events (about 1 KiB each; events live an hour) or a target's pods (POD_LIMIT of some 10-50
#: KiB): a few MiB. Past this it is a misbehaving server or proxy, and reading it whole would hold the
#: scaler's memory limit hostage.
MAX_ANSWER_BYTES = 64 << 20
_CHUNK = 1 << 16


class KubeClient:
    """GET JSON from the API server with a Bearer token (re-read from its file: bound tokens rotate)."""

    TOKEN_TTL_S = 60.0

    def __init__(self, config: KubeConfig, session: requests.Session | None = None,
                 max_bytes: int = MAX_ANSWER_BYTES) -> None:
        self.config = config
        self.max_bytes = max_bytes
        self._session = session or requests.Session()
        # per request, not on the session: requests lets REQUESTS_CA_BUNDLE override a session's verify
        self._verify: str | bool = config.ca_path if config.ca_path else True
        self._token: tuple[float, str] | None = None

    def close(self) -> None:
        self._session.close()

    def _bearer(self) -> str:
        now = time.monotonic()
        if self._token is None or now - self._token[0] > self.TOKEN_TTL_S:
            try:
                with open(self.config.token_path) as f:
                    self._token = (now, f.read().strip())
            except OSError as exc:
                raise KubeError(f"service-account token {self.config.token_path}: {exc}") from exc
        return self._token[1]

    def get(self, path: str, params: Mapping[str, str] | None = None) -> JSON:
        url = self.config.base_url.rstrip("/") + path
        try:
            with self._session.get(
                url, headers={"Authorization": f"Bearer {self._bearer()}", "Accept": "application/json"},
                timeout=self.config.timeout_s, verify=self._verify, params=dict(params) if params else None,
                stream=True,
            ) as resp:
                status, body = resp.status_code, self._body(resp, path)
        except requests.RequestException as exc:  # a refused connection, a timeout, a body cut short
            raise KubeError(f"GET {path}: {type(exc).__name__}: {exc}") from exc
        text = body.decode("utf-8", "replace")
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        except RecursionError:  # JSON nested past the parser's depth: no API object is
            raise KubeError(f"GET {path}: the answer nests too deep to be an API object", status) from None
        if status != 200:
            message = str(doc.get("message", text[:200])) if isinstance(doc, dict) else text[:200]
            raise KubeError(f"GET {path}: HTTP {status}: {message}", status)
        if doc is None:
            raise KubeError(f"GET {path}: answer is not JSON: {text[:80]!r}")
        if not isinstance(doc, dict):
            raise KubeError(f"GET {path}: answer is not a JSON object")
        return doc

    def _body(self, resp: requests.Response, path: str) -> bytes:
        """The answer's body (content-decoded), refused past `max_bytes` without reading the rest."""
        out = bytearray()
        for chunk in resp.iter_content(_CHUNK):
            out += chunk
            if len(out) > self.max_bytes:
                raise KubeError(f"GET {path}: the answer is over {self.max_bytes} bytes; not read (the last good "
                                "value stands)", resp.status_code)
        return bytes(out)

    def merge_patch(self, path: str, body: Mapping[str, Any]) -> None:
        """PATCH `path` with a JSON merge patch (RFC 7386; a null value deletes the key). Only the opt-in
        pod-deletion-cost marker writes (scaler/deletion_cost.py); it needs `patch` on pods."""
        url = self.config.base_url.rstrip("/") + path
        try:
            resp = self._session.patch(
                url, data=json.dumps(body), timeout=self.config.timeout_s, verify=self._verify,
                headers={"Authorization": f"Bearer {self._bearer()}", "Accept": "application/json",
                         "Content-Type": "application/merge-patch+json"},
            )
        except requests.RequestException as exc:
            raise KubeError(f"PATCH {path}: {type(exc).__name__}: {exc}") from exc
        if resp.status_code != 200:
            message = resp.text[:200]
            with contextlib.suppress(ValueError, AttributeError):
                message = str(resp.json().get("message", message))
            raise KubeError(f"PATCH {path}: HTTP {resp.status_code}: {message}", resp.status_code)


# -- the objects, as plain data -------------------------------------------------------------------


@dataclass(frozen=True)
class ScaleTarget:
    """Where a ScaledObject points, as an API address: API group/version, kind, plural resource, name."""

    api_version: str
    kind: str
    resource: str
    name: str

    def path(self, namespace: str) -> str:
        prefix = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        return f"{prefix}/namespaces/{namespace}/{self.resource}/{self.name}"


@dataclass(frozen=True)
class Scale:
    """An autoscaling/v1 Scale: replicas asked for, replicas that exist, the pods' selector."""

    spec_replicas: int
    status_replicas: int
    selector: str = ""


def _int(obj: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = obj.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise KubeError(f"{where}.{key} is {value!r}, expected an integer")
    return value


def _obj(obj: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = obj.get(key) or {}
    if not isinstance(value, dict):
        raise KubeError(f"{where}.{key} is {value!r}, expected an object")
    return value


def scaled_object_from_json(doc: Mapping[str, Any]) -> ScaledObject:
    """A ScaledObject as the API serves it -> the one ScaledObject model. Raises KubeError naming a bad field.

    Built unchecked: the reader takes what the API server holds (KEDA's webhook, which refuses e.g. an
    idleReplicaCount not below minReplicaCount, is optional), as KEDA itself then reads it."""
    try:
        return scaledobject_from_dict(doc, checked=False)
    except ScaledObjectFormatError as exc:
        raise KubeError(str(exc)) from None


def scale_target_from_json(doc: Mapping[str, Any], so: ScaledObject | None = None) -> ScaleTarget:
    """Where the ScaledObject `doc` points, with the plural resource from its status.scaleTargetGVKR (KEDA
    resolves it) or, before KEDA has, from RESOURCE_OF_KIND. Raises KubeError for a kind it cannot place."""
    so = so if so is not None else scaled_object_from_json(doc)
    where = f"ScaledObject {so.namespace}/{so.name}"
    gvkr = _obj(_obj(doc, "status", where), "scaleTargetGVKR", f"{where} status")
    kind = so.target_kind
    resource = str(gvkr.get("resource") or RESOURCE_OF_KIND.get(kind) or "")
    if not resource:
        raise KubeError(f"{where}: no resource known for scaleTargetRef.kind {kind!r} (add it to RESOURCE_OF_KIND)")
    return ScaleTarget(api_version=so.target_api_version, kind=kind, resource=resource, name=so.target_name)


def scale_from_json(doc: Mapping[str, Any], where: str = "Scale") -> Scale:
    """An autoscaling/v1 Scale -> Scale. A Scale with no status yet (a new object) reads 0 replicas."""
    if doc.get("kind") not in (None, "Scale"):
        raise KubeError(f"{where}: kind is {doc.get('kind')!r}, expected Scale")
    spec = _obj(doc, "spec", where)
    status = _obj(doc, "status", where)
    return Scale(
        spec_replicas=_int(spec, "replicas", f"{where} spec", 0),
        status_replicas=_int(status, "replicas", f"{where} status", 0),
        selector=str(status.get("selector", "")),
    )


def ready_from_json(doc: Mapping[str, Any], where: str = "target") -> int:
    """status.readyReplicas of a Deployment/StatefulSet (the API leaves it out when 0)."""
    return _int(_obj(doc, "status", where), "readyReplicas", f"{where} status", 0)


def workload_state(so: ScaledObject, scale: Scale, ready: int) -> WorkloadState:
    """The policy's view. current = spec.replicas: what is asked for, started or not, so pods still
    loading count as supply that is coming (the pending-replica guard)."""
    return WorkloadState(
        current_replicas=scale.spec_replicas,
        ready_replicas=ready,
        min_replicas=so.min_replicas,
        max_replicas=so.max_replicas,
        polling_interval_s=float(so.polling_interval_s),
        cooldown_period_s=float(so.cooldown_period_s),
    )


def scaled_object_path(namespace: str, name: str) -> str:
    return f"/apis/{KEDA_GROUP_VERSION}/namespaces/{namespace}/scaledobjects/{name}"


def pods_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


def events_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/events"


#: The events the phases need: the kubelet's image pulls, of pods (a server-side field selector).
PULLED_EVENTS = "involvedObject.kind=Pod,reason=Pulled"
#: Pods listed per read at most (the API server pages; a target's pods fit in one page).
POD_LIMIT = "500"


def _items(doc: Mapping[str, Any], where: str) -> list[Mapping[str, Any]]:
    items = doc.get("items")
    if not isinstance(items, list):
        raise KubeError(f"{where}: items is {type(items).__name__}, expected a list")
    return [i for i in items if isinstance(i, dict)]


# -- the cache ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkloadReading:
    """The last good read of one ScaledObject and its target, and the error since, if any."""

    state: WorkloadState | None = None  # None until a first full read succeeds
    scaled_object: ScaledObject | None = None
    target: ScaleTarget | None = None  # where scaled_object points (its API address)
    scale: Scale | None = None
    read_at: float | None = None  # when `state` was read
    error: str | None = None  # the last read's error; None when it succeeded
    errors: int = 0  # failed reads since tracking began

    def age(self, now: float) -> float | None:
        return None if self.read_at is None else now - self.read_at


@dataclass
class _Entry:
    reading: WorkloadReading = field(default_factory=WorkloadReading)


class WorkloadReader:
    """Tracked ScaledObjects, re-read every `refresh_s` in the background; `get` answers from memory."""

    def __init__(
        self,
        client: KubeClient,
        *,
        refresh_s: float = 15.0,
        max_workers: int = 4,
        clock: Callable[[], float] = time.time,
        on_pods: Callable[[str, str, list[PodTimes]], None] | None = None,
    ) -> None:
        self._client = client
        self._on_pods = on_pods
        self.phase_errors = 0  # failed pod/event reads (the ScaledObject reading itself is unaffected)
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="kube-read")
        self._loop = Periodic("kube-reader", refresh_s, self.refresh_once)

    def start(self) -> None:
        self._loop.start()

    def observe_pods(self, on_pods: Callable[[str, str, list[PodTimes]], None] | None) -> None:
        """After each refresh, hand every tracked ScaledObject's pods' times to `on_pods(ns, name, pods)`."""
        self._on_pods = on_pods

    def stop(self) -> None:
        self._loop.stop()
        self._pool.shutdown(wait=True)
        self._client.close()

    def track(self, namespace: str, name: str) -> None:
        """Read this ScaledObject from now on (the first read comes with the next refresh)."""
        with self._lock:
            self._entries.setdefault((namespace, name), _Entry())

    def untrack(self, namespace: str, name: str) -> None:
        with self._lock:
            self._entries.pop((namespace, name), None)

    def get(self, namespace: str, name: str) -> WorkloadReading | None:
        entry = self._entries.get((namespace, name))
        return None if entry is None else entry.reading

    def exists(self, namespace: str, name: str) -> bool | None:
        """Whether the ScaledObject exists: True when tracked (KEDA asked about it), else one API read;
        None when the API cannot tell (down, forbidden): a caller must then not refuse on it."""
        with self._lock:
            if (namespace, name) in self._entries:
                return True
        try:
            self._client.get(scaled_object_path(namespace, name))
        except KubeError as err:
            return False if err.status == 404 else None
        return True

    def state(self, namespace: str, name: str) -> WorkloadState | None:
        """The last known WorkloadState (possibly old: see `get(...).age(now)`), None before a first read."""
        reading = self.get(namespace, name)
        return None if reading is None else reading.state

    def refresh_once(self) -> None:
        """Re-read every tracked ScaledObject (concurrently); errors land in each reading."""
        with self._lock:
            keys = sorted(self._entries)
        list(self._pool.map(lambda k: self.read(*k), keys))
        if self._on_pods is not None:
            for key in keys:
                pods = self.read_phases(*key)
                if pods is not None:
                    self._note_unscheduled(key, pods)
                    self._on_pods(key[0], key[1], pods)

    def _note_unscheduled(self, key: tuple[str, str], pods: list[PodTimes]) -> None:
        """The target's pods the scheduler has not placed, and since when (a GPU shortfall: scaler/pools.py)."""
        entry = self._entries.get(key)
        state = entry.reading.state if entry is not None else None
        if entry is None or state is None:
            return
        # not placed: no PodScheduled=True, and nothing since (a started or ready container implies a node)
        waiting = [p.created for p in pods
                   if p.scheduled is None and p.started is None and p.ready is None and p.created is not None]
        entry.reading = dataclasses.replace(entry.reading, state=dataclasses.replace(
            state, unscheduled=len(waiting), unscheduled_since=min(waiting) if waiting else None))

    def read_phases(self, namespace: str, name: str) -> list[PodTimes] | None:
        """The lifecycle times of the pods of this ScaledObject's target (by the selector its last /scale
        read gave), from a list of the namespace's pods and of its `Pulled` events. None when no selector
        is known yet or a list failed (counted in `phase_errors`, logged at debug: phases are optional)."""
        reading = self.get(namespace, name)
        selector = reading.scale.selector if reading is not None and reading.scale is not None else ""
        if not selector:
            return None
        try:
            pods = _items(self._client.get(pods_path(namespace), {"labelSelector": selector, "limit": POD_LIMIT}),
                          pods_path(namespace))
            pods = [p for p in pods if matches(selector, (p.get("metadata") or {}).get("labels") or {})]
            events = self._client.get(events_path(namespace), {"fieldSelector": PULLED_EVENTS})
            pulled = pulled_times(_items(events, events_path(namespace)))
        except KubeError as exc:
            self.phase_errors += 1
            log.debug("cold-start phases of %s/%s: %s", namespace, name, exc)
            return None
        return [pod_times(p, pulled) for p in pods]

    def read(self, namespace: str, name: str) -> WorkloadReading:
        """Read one ScaledObject and its target now; keep the last good values on error."""
        now = self._clock()
        with self._lock:
            entry = self._entries.setdefault((namespace, name), _Entry())
        old = entry.reading
        try:
            doc = self._client.get(scaled_object_path(namespace, name))
            so = scaled_object_from_json(doc)
            target = scale_target_from_json(doc, so)
            target_path = target.path(namespace)
            scale = scale_from_json(self._client.get(target_path + "/scale"), f"{target_path}/scale")
            ready = ready_from_json(self._client.get(target_path), target_path)
        except KubeError as exc:
            new = WorkloadReading(
                state=old.state, scaled_object=old.scaled_object, target=old.target, scale=old.scale,
                read_at=old.read_at, error=str(exc), errors=old.errors + 1,
            )
        else:
            state = workload_state(so, scale, ready)
            if old.state is not None:  # the pods' last read (refresh_once) stands until the next one
                state = dataclasses.replace(state, unscheduled=old.state.unscheduled,
                                            unscheduled_since=old.state.unscheduled_since)
            new = WorkloadReading(
                state=state, scaled_object=so, target=target, scale=scale, read_at=now, errors=old.errors
            )
        entry.reading = new
        return new
