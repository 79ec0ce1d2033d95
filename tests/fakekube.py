"""A fake Kubernetes API server on loopback: real HTTP, the JSON the real API serves.

One server for both readers of the API in this project:
- the exporter's discovery: `GET /api/v1/pods` (and `/api/v1/namespaces/<ns>/pods`) answers the
  v1 PodList of `pods`, filtered by `fieldSelector=spec.nodeName=X` as the API server does (any
  other field selector is a 400). `pod(...)` builds a Pod in the shape the API returns (metadata,
  spec.containers[].ports, status.phase/podIP/containerStatuses[].state.running.startedAt).
- the scaler's read-only view (scaler/kube.py): `objects` maps API paths to JSON, filled by
  `put_scaled_object` (a keda.sh/v1alpha1 ScaledObject with spec and status) and `put_workload`
  (a Deployment, StatefulSet, ReplicaSet, Rollout or LeaderWorkerSet); `<object>/scale` answers
  the autoscaling/v1 Scale derived from the object the way the API server derives it
  (spec.replicas, status.replicas, status.selector). Shapes after kubernetes/api and kedacore/keda.

Errors are meta/v1 `Status` objects: 401 when the Bearer token is not `token`, 404 for what is not
there, `fail[path] = code` for one path, `fail_with = code` for every request (before the token
check). `PATCH` of a pod (JSON merge patch of its annotations) is the one write it takes. Every request
is recorded in `requests`: each compares equal to its (path, Authorization)
pair and carries `.path`, `.query`, `.headers` and `.method`. Optional TLS with a certificate the
test makes.

    with FakeKube(token="t") as kube:       # serving from construction; close() or the block ends it
        kube.pods = [pod("vllm-1")]
        ... point the client at kube.url ...
"""

from __future__ import annotations

import copy
import json
import threading
from pathlib import Path
from typing import Any

from httpstub import HttpStub, Response, json_response
from httpstub import Request as HttpRequest

JSON = dict[str, Any]

#: resource (plural) -> (apiVersion, kind) of the scale-target kinds put_workload makes.
KIND_OF_RESOURCE = {
    "deployments": ("apps/v1", "Deployment"),
    "statefulsets": ("apps/v1", "StatefulSet"),
    "replicasets": ("apps/v1", "ReplicaSet"),
    "rollouts": ("argoproj.io/v1alpha1", "Rollout"),
    "leaderworkersets": ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
}


class Request(tuple[str, "str | None"]):
    """One request the API server saw: equal to the pair (path, Authorization header or None),
    with the query, the headers as sent and the method alongside."""

    method: str
    query: dict[str, list[str]]
    headers: dict[str, str]

    def __new__(cls, seen: HttpRequest) -> Request:
        self = super().__new__(cls, (seen.path, seen.header("Authorization")))
        self.method, self.query, self.headers = seen.method, seen.query, seen.headers
        return self

    @property
    def path(self) -> str:
        return self[0]

    @property
    def authorization(self) -> str | None:
        return self[1]


def status_json(code: int, reason: str, message: str) -> JSON:
    """A meta/v1 Status, as the API server answers errors."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def api_path(api_version: str, namespace: str, resource: str, name: str) -> str:
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{prefix}/namespaces/{namespace}/{resource}/{name}"


def pod(
    name: str,
    namespace: str = "default",
    node: str = "node-a",
    ip: str | None = "10.0.0.1",
    annotations: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    started_at: dict[str, str] | None = None,
    phase: str = "Running",
    uid: str | None = None,
) -> dict[str, Any]:
    """A v1 Pod as the API server serializes it. `started_at` maps container name -> RFC 3339 time of
    its running state; containers not in it are reported waiting (ContainerCreating)."""
    containers = containers if containers is not None else [
        {"name": "engine", "image": "vllm/vllm-openai:v0.32.0",
         "ports": [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]}]
    started_at = started_at or {}
    statuses = []
    for c in containers:
        if c["name"] in started_at:
            state: dict[str, Any] = {"running": {"startedAt": started_at[c["name"]]}}
        else:
            state = {"waiting": {"reason": "ContainerCreating"}}
        statuses.append({
            "name": c["name"], "state": state, "lastState": {}, "ready": c["name"] in started_at,
            "restartCount": 0, "image": c.get("image", ""), "imageID": "", "started": c["name"] in started_at,
            **({"containerID": f"containerd://{name}-{c['name']}"} if c["name"] in started_at else {}),
        })
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if phase == "Running" else "False",
                        "lastProbeTime": None, "lastTransitionTime": "2025-06-01T10:00:00Z"}],
        "hostIP": "192.168.1.10",
        "startTime": "2025-06-01T09:59:58Z",
        "containerStatuses": statuses,
        "qosClass": "Burstable",
    }
    if ip is not None:
        status["podIP"] = ip
        status["podIPs"] = [{"ip": ip}]
    return {
        "metadata": {
            "name": name,
            "generateName": name.rsplit("-", 1)[0] + "-",
            "namespace": namespace,
            "uid": uid or f"00000000-0000-4000-8000-{abs(hash(namespace + name)) % 10**12:012d}",
            "resourceVersion": "12345",
            "creationTimestamp": "2025-06-01T09:59:58Z",
            "labels": {"app": name.rsplit("-", 1)[0]},
            "annotations": annotations or {},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name.rsplit("-", 1)[0],
                                 "uid": "11111111-0000-4000-8000-000000000000", "controller": True,
                                 "blockOwnerDeletion": True}],
        },
        "spec": {
            "containers": containers,
            "nodeName": node,
            "restartPolicy": "Always",
            "serviceAccountName": "default",
        },
        "status": status,
    }


def scaled_object(namespace: str, name: str, spec: JSON, status: JSON | None = None) -> JSON:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}", "generation": 1,
                     "resourceVersion": "4711", "creationTimestamp": "2026-01-01T00:00:00Z",
                     "labels": {"scaledobject.keda.sh/name": name}},
        "spec": spec,
        "status": status if status is not None else {
            "conditions": [{"type": "Ready", "status": "True", "reason": "ScaledObjectReady"}],
            "externalMetricNames": ["s0-llm-meta-llama-3-1-8b-instruct"],
            "originalReplicaCount": 1,
        },
    }


def workload(
    resource: str, namespace: str, name: str, *, replicas: int, status_replicas: int, ready: int | None
) -> JSON:
    """A scale target of `resource` (see KIND_OF_RESOURCE), Deployment-shaped whatever its kind;
    `ready=None` leaves readyReplicas out (the API omits zero values)."""
    api_version, kind = KIND_OF_RESOURCE[resource]
    status: JSON = {"observedGeneration": 3, "replicas": status_replicas, "updatedReplicas": status_replicas}
    if ready is not None:
        status["readyReplicas"] = ready
        status["availableReplicas"] = ready
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": "99",
                     "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.32.0"}]}}},
        "status": status,
    }


def scale_of(obj: JSON) -> JSON:
    """The autoscaling/v1 Scale the API server derives from a workload (its /scale subresource)."""
    meta = obj["metadata"]
    selector = ",".join(f"{k}={v}" for k, v in sorted(obj["spec"]["selector"]["matchLabels"].items()))
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")},
        "spec": {"replicas": obj["spec"].get("replicas", 0)},
        "status": {"replicas": obj["status"].get("replicas", 0), "selector": selector},
    }


class FakeKube:
    """The API server: `pods` is the cluster's pod list, `objects` (API path -> JSON) everything else."""

    def __init__(self, token: str = "test-token", tls: tuple[Path, Path] | None = None) -> None:
        self.token = token
        self.pods: list[JSON] = []
        self.objects: dict[str, JSON] = {}
        self.fail: dict[str, int] = {}  # answer this path with this HTTP status
        self.fail_with: int | None = None  # answer every request with this HTTP status
        self._lock = threading.Lock()
        self._stub = HttpStub(self._answer, tls=tls)
        self.host, self.port, self.url = self._stub.host, self._stub.port, self._stub.url

    @property
    def requests(self) -> list[Request]:
        return [Request(r) for r in self._stub.requests]

    def paths(self) -> list[str]:
        return [r.path for r in self._stub.requests]

    def put_scaled_object(self, namespace: str, name: str, spec: JSON, status: JSON | None = None) -> None:
        with self._lock:
            self.objects[api_path("keda.sh/v1alpha1", namespace, "scaledobjects", name)] = scaled_object(
                namespace, name, spec, status)

    def put_workload(self, resource: str, namespace: str, name: str, *, replicas: int, status_replicas: int,
                     ready: int | None) -> None:
        with self._lock:
            self.objects[api_path(KIND_OF_RESOURCE[resource][0], namespace, resource, name)] = workload(
                resource, namespace, name, replicas=replicas, status_replicas=status_replicas, ready=ready)

    def close(self) -> None:
        self._stub.close()

    def __enter__(self) -> FakeKube:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _answer(self, req: HttpRequest) -> Response:
        code, doc = self._serve(req)
        return json_response(code, doc)

    def _serve(self, req: HttpRequest) -> tuple[int, JSON]:
        if self.fail_with is not None:
            return self.fail_with, status_json(self.fail_with, "InternalError", "injected failure")
        if req.header("Authorization") != f"Bearer {self.token}":
            return 401, status_json(401, "Unauthorized", "Unauthorized")
        if req.method == "PATCH":
            return self._patch_pod(req)
        if req.method != "GET":
            return 405, status_json(405, "MethodNotAllowed", "the server does not allow this method")
        path = req.path
        with self._lock:
            code = self.fail.get(path)
            pods = list(self.pods)
            found = copy.deepcopy(self.objects.get(path))
            target = copy.deepcopy(self.objects.get(path.removesuffix("/scale"))) if path.endswith("/scale") else None
        if code is not None:
            return code, status_json(code, "InternalError", f"etcdserver: request timed out ({path})")
        segments = path.strip("/").split("/")
        if segments[:2] == ["api", "v1"] and segments[-1] == "pods" and len(segments) in (3, 5):
            return self._pod_list(segments, req.query, pods)
        if found is not None:
            return 200, found
        if target is not None:
            return 200, scale_of(target)
        return 404, _not_found(segments)

    def _patch_pod(self, req: HttpRequest) -> tuple[int, JSON]:
        """A JSON merge patch (RFC 7386) of one pod's metadata.annotations, the only write this project makes
        (scaler/deletion_cost.py); any other PATCH is refused as the API server would not take it here."""
        code = self.fail.get(req.path)
        if code is not None:
            return code, status_json(code, "InternalError", f"etcdserver: request timed out ({req.path})")
        segments = req.path.strip("/").split("/")
        if segments[:3] != ["api", "v1", "namespaces"] or len(segments) != 6 or segments[4] != "pods":
            return 405, status_json(405, "MethodNotAllowed", "the fake takes PATCH on pods only")
        if req.header("Content-Type") != "application/merge-patch+json":
            return 415, status_json(415, "UnsupportedMediaType", f"unsupported patch type {req.header('Content-Type')}")
        patch = json.loads(req.body)
        with self._lock:
            found = [p for p in self.pods if p["metadata"]["namespace"] == segments[3]
                     and p["metadata"]["name"] == segments[5]]
            if not found:
                return 404, status_json(404, "NotFound", f'pods "{segments[5]}" not found')
            annotations = found[0]["metadata"].setdefault("annotations", {})
            for key, value in patch.get("metadata", {}).get("annotations", {}).items():
                if value is None:
                    annotations.pop(key, None)
                else:
                    annotations[key] = value
            return 200, copy.deepcopy(found[0])

    @staticmethod
    def _pod_list(segments: list[str], query: dict[str, list[str]], pods: list[JSON]) -> tuple[int, JSON]:
        if len(segments) == 5:
            if segments[2] != "namespaces":
                return 404, _not_found(segments)
            pods = [p for p in pods if p["metadata"]["namespace"] == segments[3]]
        for selector in query.get("fieldSelector", []):
            for term in selector.split(","):
                field, _, value = term.partition("=")
                if field != "spec.nodeName":
                    return 400, status_json(400, "BadRequest", f"field label not supported: {field}")
                pods = [p for p in pods if p["spec"].get("nodeName") == value]
        return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "12345"}, "items": pods}


def _not_found(segments: list[str]) -> JSON:
    """A named object (.../namespaces/<ns>/<resource>/<name>[/<subresource>]) is `<resource> "<name>" not
    found`, as the API server says it; any other path is an unknown resource."""
    rest = segments[2:] if segments[:1] == ["api"] else segments[3:]
    if len(rest) in (4, 5) and rest[0] == "namespaces":
        return status_json(404, "NotFound", f'{rest[2]} "{rest[3]}" not found')
    return status_json(404, "NotFound", "the server could not find the requested resource")
