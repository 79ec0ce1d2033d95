"""A fake Kubernetes API server on loopback for the scaler's read-only view (scaler/kube.py).

It speaks the JSON the real API serves (shapes after kubernetes/api and kedacore/keda types):
a keda.sh/v1alpha1 ScaledObject with spec and status, apps/v1 Deployments and StatefulSets, their
`/scale` subresource as an autoscaling/v1 Scale derived from the object the way the API server
derives it (spec.replicas, status.replicas, status.selector), and `Status` objects for errors.
It checks the Bearer token (401 otherwise) and records every request's path and Authorization
header, so tests can assert what was asked and how. Optional TLS with a certificate the test makes.
"""

from __future__ import annotations

import copy
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

JSON = dict[str, Any]

KIND_OF_RESOURCE = {"deployments": ("apps/v1", "Deployment"), "statefulsets": ("apps/v1", "StatefulSet")}


def status_json(code: int, reason: str, message: str) -> JSON:
    """A meta/v1 Status, as the API server answers errors."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


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
    """A Deployment or StatefulSet; `ready=None` leaves readyReplicas out (the API omits zero values)."""
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
    """The autoscaling/v1 Scale the API server derives from a Deployment/StatefulSet."""
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
    """Serves `objects` (API path -> JSON) on 127.0.0.1; `fail[path] = code` answers that path with an error."""

    def __init__(self, token: str = "sa-token-1", tls: tuple[Path, Path] | None = None) -> None:
        self.token = token
        self.objects: dict[str, JSON] = {}
        self.fail: dict[str, int] = {}
        self.requests: list[tuple[str, str | None]] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                code, doc = outer._answer(self.path, self.headers.get("Authorization"))
                payload = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        scheme = "http"
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(tls[0]), str(tls[1]))
            self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
            scheme = "https"
        self.host, self.port = "127.0.0.1", int(self._server.server_address[1])
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    def _answer(self, path: str, auth: str | None) -> tuple[int, JSON]:
        with self._lock:
            self.requests.append((path, auth))
            if auth != f"Bearer {self.token}":
                return 401, status_json(401, "Unauthorized", "Unauthorized")
            if path in self.fail:
                code = self.fail[path]
                return code, status_json(code, "InternalError", f"etcdserver: request timed out ({path})")
            if path in self.objects:
                return 200, copy.deepcopy(self.objects[path])
            if path.endswith("/scale") and path.removesuffix("/scale") in self.objects:
                return 200, scale_of(self.objects[path.removesuffix("/scale")])
        parts = path.strip("/").split("/")
        return 404, status_json(404, "NotFound", f'{parts[-2] if len(parts) > 1 else "?"} "{parts[-1]}" not found')

    def paths(self) -> list[str]:
        with self._lock:
            return [p for p, _ in self.requests]

    def put_scaled_object(self, namespace: str, name: str, spec: JSON, status: JSON | None = None) -> None:
        self.objects[f"/apis/keda.sh/v1alpha1/namespaces/{namespace}/scaledobjects/{name}"] = scaled_object(
            namespace, name, spec, status)

    def put_workload(self, resource: str, namespace: str, name: str, *, replicas: int, status_replicas: int,
                     ready: int | None) -> None:
        self.objects[f"/apis/apps/v1/namespaces/{namespace}/{resource}/{name}"] = workload(
            resource, namespace, name, replicas=replicas, status_replicas=status_replicas, ready=ready)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
