"""A fake Kubernetes API server on loopback: real HTTP, the real v1 PodList JSON.

Serves `GET /api/v1/pods` (and `/api/v1/namespaces/<ns>/pods`) with `fieldSelector=spec.nodeName=X`
filtering as the API server does, answers 401 with a v1 Status when the Bearer token is wrong,
and records every request's path, query and headers so tests can assert what the client sent.
`pod(...)` builds a Pod object in the shape the API returns (metadata, spec.containers[].ports,
status.phase/podIP/containerStatuses[].state.running.startedAt).

Reusable: start it with `with FakeKube(token="t") as kube:`, put pods in `kube.pods`, point the
client at `kube.url`.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Request:
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]


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


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


class FakeKube:
    """The API server: `pods` is the cluster's pod list; `requests` what clients sent."""

    def __init__(self, token: str = "test-token") -> None:
        self.token = token
        self.pods: list[dict[str, Any]] = []
        self.requests: list[Request] = []
        self.fail_with: int | None = None  # answer every request with this HTTP status
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = parse_qs(parts.query)
                with fake._lock:
                    fake.requests.append(Request(parts.path, query, dict(self.headers.items())))
                    pods = list(fake.pods)
                if fake.fail_with is not None:
                    return self._json(fake.fail_with, _status(fake.fail_with, "InternalError", "injected failure"))
                if self.headers.get("Authorization") != f"Bearer {fake.token}":
                    return self._json(401, _status(401, "Unauthorized", "Unauthorized"))
                segments = parts.path.strip("/").split("/")
                if segments[:2] != ["api", "v1"] or segments[-1] != "pods":
                    return self._json(404, _status(404, "NotFound", "the server could not find the requested resource"))
                if len(segments) == 5 and segments[2] == "namespaces":
                    pods = [p for p in pods if p["metadata"]["namespace"] == segments[3]]
                for selector in query.get("fieldSelector", []):
                    for term in selector.split(","):
                        field, _, value = term.partition("=")
                        if field == "spec.nodeName":
                            pods = [p for p in pods if p["spec"].get("nodeName") == value]
                        else:
                            return self._json(400, _status(400, "BadRequest",
                                                           f'field label not supported: {field}'))
                self._json(200, {"kind": "PodList", "apiVersion": "v1",
                                 "metadata": {"resourceVersion": "12345"}, "items": pods})

            def _json(self, code: int, obj: dict[str, Any]) -> None:
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeKube:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
