"""Which engines to scrape: the static list from config, plus annotated pods on this node.

Kubernetes discovery lists the pods bound to this node (`fieldSelector=spec.nodeName=<node>`) with
the service-account token, and keeps the ones that opt in with annotations:

    keda-llm.io/scrape: "true"        required, opt-in
    keda-llm.io/port: "8000"          default: the serving container's first containerPort
    keda-llm.io/path: "/metrics"      default /metrics
    keda-llm.io/scheme: "http"        http or https
    keda-llm.io/container: "vllm"     the serving container (its start time measures the cold start);
                                      default: the container that declares the port, else the first
    keda-llm.io/model, keda-llm.io/engine, keda-llm.io/role, keda-llm.io/max-running
                                      as the static target keys

`pods_to_targets` is pure (PodList JSON in, Targets out); `KubeClient` is the thin HTTP edge.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import os
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from keda_llm.common.times import iso_seconds
from keda_llm.common.vocabulary import ENGINES, ROLES
from keda_llm.exporter.config import ExporterConfig, KubernetesConfig
from keda_llm.exporter.model import Target

log = logging.getLogger(__name__)

ANNOTATION_PREFIX = "keda-llm.io/"
SCRAPE = ANNOTATION_PREFIX + "scrape"
PORT = ANNOTATION_PREFIX + "port"
PATH = ANNOTATION_PREFIX + "path"
SCHEME = ANNOTATION_PREFIX + "scheme"
CONTAINER = ANNOTATION_PREFIX + "container"
MODEL = ANNOTATION_PREFIX + "model"
ENGINE = ANNOTATION_PREFIX + "engine"
ROLE = ANNOTATION_PREFIX + "role"
MAX_RUNNING = ANNOTATION_PREFIX + "max-running"


class DiscoveryError(Exception):
    """The pod list could not be read; the previous list stays in use."""


def parse_time(text: str) -> float:
    """Unix seconds from a Kubernetes RFC 3339 timestamp ("2025-01-02T03:04:05Z")."""
    return iso_seconds(text)


def _serving_container(pod: Mapping[str, Any], ann: Mapping[str, str]) -> Mapping[str, Any] | None:
    containers: list[Mapping[str, Any]] = pod.get("spec", {}).get("containers") or []
    if not containers:
        return None
    if CONTAINER in ann:
        return next((c for c in containers if c.get("name") == ann[CONTAINER]), None)
    if PORT in ann:
        for c in containers:
            for p in c.get("ports") or []:
                if str(p.get("containerPort")) == ann[PORT] or p.get("name") == ann[PORT]:
                    return c
    return containers[0]


def _container_start(pod: Mapping[str, Any], name: str) -> float | None:
    for status in pod.get("status", {}).get("containerStatuses") or []:
        if status.get("name") == name:
            started = (status.get("state") or {}).get("running", {}).get("startedAt")
            return parse_time(started) if started else None
    return None


def _port(container: Mapping[str, Any], annotated: str | None) -> str | None:
    """The port number: the annotation's (a number, or a containerPort's name), else the first declared."""
    ports = container.get("ports") or []
    if annotated is not None and not annotated.isdigit():
        port = next((str(p.get("containerPort")) for p in ports if p.get("name") == annotated), None)
    elif annotated is None:
        port = str(ports[0].get("containerPort")) if ports else None
    else:
        port = annotated
    # ASCII digits of a real port: `isdigit()` alone took '²' and other scripts' digits, and 0 or 99999 made
    # a URL no scrape could reach
    return port if port and port.isascii() and port.isdigit() and len(port) <= 5 and 0 < int(port) <= 65535 \
        else None


def pod_to_target(pod: Mapping[str, Any], node: str) -> Target | None:
    """The target for one opted-in, running pod; None (with a debug log) when it cannot be scraped yet."""
    meta = pod.get("metadata") or {}
    ann: Mapping[str, str] = meta.get("annotations") or {}
    if ann.get(SCRAPE, "").lower() != "true":
        return None
    name = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    status = pod.get("status") or {}
    ip = status.get("podIP")
    if status.get("phase") != "Running" or not ip:
        log.debug("pod %s: not running or no IP yet", name)
        return None
    container = _serving_container(pod, ann)
    if container is None:
        log.warning("pod %s: %s names no container of this pod", name, CONTAINER)
        return None
    port = _port(container, ann.get(PORT))
    if port is None:
        log.warning("pod %s: no port (set %s or declare a containerPort)", name, PORT)
        return None
    scheme = str(ann.get(SCHEME, "http")).strip().lower()
    if scheme not in ("http", "https"):
        log.warning("pod %s: %s=%r is not http or https; skipped", name, SCHEME, ann.get(SCHEME))
        return None
    path = str(ann.get(PATH, "/metrics"))
    if not path.startswith("/"):
        path = "/" + path
    host = f"[{ip}]" if ":" in ip else ip
    engine = ann.get(ENGINE)
    role = ann.get(ROLE)
    max_running: float | None = None
    if MAX_RUNNING in ann:
        try:
            max_running = float(ann[MAX_RUNNING])
        except (TypeError, ValueError):
            max_running = None
        if max_running is None or not (math.isfinite(max_running) and max_running > 0):
            log.warning("pod %s: %s=%r is not a positive number; ignored", name, MAX_RUNNING, ann[MAX_RUNNING])
            max_running = None
    if engine is not None and engine not in ENGINES:
        log.warning("pod %s: %s=%r is not one of %s; detecting from the body", name, ENGINE, engine, ENGINES)
        engine = None
    if role is not None and role not in ROLES:
        log.warning("pod %s: %s=%r is not one of %s; ignored", name, ROLE, role, ROLES)
        role = None
    return Target(
        url=f"{scheme}://{host}:{port}{path}",
        namespace=str(meta.get("namespace", "")),
        pod=str(meta.get("name", "")),
        node=node,
        model=ann.get(MODEL),
        engine=engine,
        role=role,
        max_running=max_running,
        container_start=_container_start(pod, str(container.get("name", ""))),
    )


def pods_to_targets(pod_list: Mapping[str, Any], node: str) -> list[Target]:
    """Targets from a v1 PodList, in a stable order."""
    if pod_list.get("kind") != "PodList":
        raise DiscoveryError(f"expected kind PodList, got {pod_list.get('kind')!r}")
    targets = []
    for pod in pod_list.get("items") or []:
        try:
            target = pod_to_target(pod, node)
        except (TypeError, ValueError, AttributeError, KeyError) as err:  # one odd pod costs itself, not the node
            meta = pod.get("metadata") if isinstance(pod, dict) else None
            who = f"{meta.get('namespace', '')}/{meta.get('name', '')}" if isinstance(meta, dict) else "?"
            log.warning("pod %s: cannot read it (%s: %s); skipped", who, type(err).__name__, err)
            continue
        if target is not None:
            targets.append(target)
    return sorted(targets, key=lambda t: t.key)


#: A node's pod list larger than this is refused, not read: about 110 pods a node (the kubelet's default
#: maxPods) of some 10-50 KiB each is a few MiB; an answer past this is a misbehaving server or proxy, and
#: reading it whole would hold the DaemonSet pod's memory limit hostage.
MAX_POD_LIST_BYTES = 64 << 20


@dataclass(frozen=True)
class KubeClient:
    """Reads pods from the API server with the pod's service-account token.

    The token file is re-read on every call: projected tokens rotate (about hourly) and a cached one
    would start failing with 401.
    """

    api_server: str
    token_file: str
    ca_file: str
    timeout: float = 5.0
    max_bytes: int = MAX_POD_LIST_BYTES

    @classmethod
    def from_config(cls, cfg: KubernetesConfig, env: Mapping[str, str] | None = None,
                    timeout: float = 5.0) -> KubeClient:
        env = os.environ if env is None else env
        server = cfg.api_server
        if not server:
            host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
            if not host:
                raise DiscoveryError("kubernetes.api_server is empty and KUBERNETES_SERVICE_HOST is not set "
                                     "(not running in a pod?)")
            server = f"https://{f'[{host}]' if ':' in host else host}:{port}"
        return cls(server.rstrip("/"), cfg.token_file, cfg.ca_file, timeout)

    def _context(self) -> ssl.SSLContext | None:
        if not self.api_server.startswith("https://"):
            return None
        return ssl.create_default_context(cafile=self.ca_file if os.path.exists(self.ca_file) else None)

    def list_pods(self, node: str) -> dict[str, Any]:
        """GET /api/v1/pods for this node. `resourceVersion=0` lets the API server answer from its
        watch cache instead of etcd: one DaemonSet pod per node polls this, so it must stay cheap."""
        query = urllib.parse.urlencode({"fieldSelector": f"spec.nodeName={node}", "resourceVersion": "0"})
        request = urllib.request.Request(f"{self.api_server}/api/v1/pods?{query}",
                                         headers={"Accept": "application/json"})
        try:
            with open(self.token_file) as f:
                request.add_header("Authorization", f"Bearer {f.read().strip()}")
        except OSError as e:
            raise DiscoveryError(f"cannot read the service-account token {self.token_file}: {e.strerror}") from e
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self._context()) as resp:
                body = resp.read(self.max_bytes + 1)
                if len(body) > self.max_bytes:
                    raise DiscoveryError(f"listing pods on {node}: the answer is over {self.max_bytes} bytes; "
                                         "not read (the last good list stands)")
                data = json.loads(body)
        except urllib.error.HTTPError as e:
            raise DiscoveryError(f"listing pods on {node}: HTTP {e.code} {e.reason}") from e
        except (OSError, ValueError, http.client.HTTPException) as e:  # HTTPException: a body cut short
            raise DiscoveryError(f"listing pods on {node}: {type(e).__name__}: {e}") from e
        except RecursionError:  # JSON nested past the parser's depth
            raise DiscoveryError(f"listing pods on {node}: the answer nests too deep to be a pod list") from None
        if not isinstance(data, dict):
            raise DiscoveryError("listing pods: the answer is not a JSON object")
        return data


class Discovery:
    """The current target list: static targets plus the last good Kubernetes listing.

    `refresh()` does the I/O and may fail; `targets()` only reads, so the collection loop never waits
    on the API server.
    """

    def __init__(self, cfg: ExporterConfig, list_pods: Callable[[str], Mapping[str, Any]] | None = None) -> None:
        self._static = list(cfg.targets)
        self._static_urls = frozenset(t.url for t in cfg.targets)  # a static target wins over a pod
        self._node = cfg.node_name
        self._list_pods = list_pods
        self._kube: list[Target] = []
        self._lock = threading.Lock()
        self.errors = 0
        self.last_error = ""

    @property
    def kubernetes(self) -> bool:
        return self._list_pods is not None

    def refresh(self) -> None:
        """Re-read the pod list; on failure keep the previous one and count the error."""
        if self._list_pods is None:
            return
        try:
            found = pods_to_targets(self._list_pods(self._node), self._node)
        except (DiscoveryError, KeyError, TypeError, AttributeError, ValueError) as e:
            with self._lock:
                self.errors += 1
                self.last_error = str(e)
            log.warning("kubernetes discovery failed (keeping %d known pods): %s", len(self._kube), e)
            return
        with self._lock:
            self._kube = found
            self.last_error = ""

    def targets(self) -> list[Target]:
        with self._lock:
            kube = self._kube
        return self._static + [t for t in kube if t.url not in self._static_urls]
