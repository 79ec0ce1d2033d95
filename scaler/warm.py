"""The weights lever, scaler side: ask the exporters of the nodes likely to get the next pod to read the
model's weights into their page cache (`POST /v1/warm`, exporter/warm.py) before the pod loads them.

When: a scale-up is decided for a ScaledObject with `warmPath` (forecast or reactive: the decision asks
for more replicas than the target has), or the model is woken from zero (an activation). At most once
per model per cold start: a second trigger within the model's cold start is dropped.

Where: the exporters report every GPU with the pod that holds it (`llm_gpu_up{gpu_model, node, pod}`;
`pod=""` is free) and every replica with its node (`llm_engine_up{model, node}`). Candidates are nodes
with a free GPU of the kind the model requests (`warmGpuModel`, else the kind its replicas were seen
holding, else any); those that ran the model most recently come first (a node keeps the model's files
in its page cache, and the scheduler's image locality favours it), then those with the most free
GPUs, then by name. At most `warmNodes` nodes, and at most `--warm-max-nodes` whatever the metadata says.

How: never on the RPC path. A trigger is put on a bounded queue (full: dropped and counted); one
worker thread scrapes the exporters, picks the nodes and posts, each call with a timeout. The bearer
token is read from `--warm-token-file` (re-read when the file changes: a rotated Secret needs no
restart). A periodic scan (`--warm-scan-interval`) keeps the "ran the model recently" memory while
the model runs, so a wake from zero still knows where it ran. Failures are logged and counted
(`keda_llm_scaler_warm_requests_total{node, result}`), never raised into a decision.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import queue
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Counter

from keda_llm.common.periodic import Periodic
from keda_llm.common.vocabulary import ENGINE_UP, GPU_UP
from keda_llm.scaler.sources.errors import SourceError
from keda_llm.scaler.sources.http import fetch

log = logging.getLogger(__name__)

ModelKey = tuple[str, str]  # (namespace, model)
#: ScaledObject config fields the planner reads (duck-typed: scaler.config.ScalerConfig)
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
MAX_BODY = 32 * 1024 * 1024


def _labels(text: str) -> dict[str, str]:
    return {k: v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\") for k, v in _LABEL.findall(text)}


@dataclass
class NodeView:
    """What one exporter says of its node: free GPUs by kind, the models it runs, the GPU kind each uses."""

    node: str
    base_url: str  # the exporter, scheme://host:port
    free: dict[str, int] = field(default_factory=dict)  # GPU kind -> free GPUs (or MIG slices) of that kind
    models: set[ModelKey] = field(default_factory=set)
    kinds: dict[ModelKey, set[str]] = field(default_factory=dict)  # the GPU kinds the model's pods hold here


def gpu_kind(labels: Mapping[str, str]) -> str:
    """`gpu_model`, with `/<profile>` for a MIG slice: a 3g.40gb slice is not a whole H100."""
    profile = labels.get("mig_profile", "")
    return labels.get("gpu_model", "") + (f"/{profile}" if profile else "")


def scan_body(text: str, base_url: str) -> NodeView | None:
    """An exporter's /metrics body -> its NodeView (None: no node label anywhere, nothing to place)."""
    gpus: list[tuple[dict[str, str], float]] = []
    engines: list[dict[str, str]] = []
    for line in text.splitlines():
        if not (line.startswith(GPU_UP + "{") or line.startswith(ENGINE_UP + "{")):
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        labels = _labels(m.group(2))
        if m.group(1) == GPU_UP:
            gpus.append((labels, value))
        elif value == 1:
            engines.append(labels)
    node = next((lab.get("node", "") for lab, _ in gpus if lab.get("node")), "") or next(
        (lab.get("node", "") for lab in engines if lab.get("node")), "")
    if not node:
        return None
    view = NodeView(node, base_url)
    pods: dict[tuple[str, str], ModelKey] = {}
    for lab in engines:
        key = (lab.get("namespace", ""), lab.get("model", ""))
        view.models.add(key)
        pods[(lab.get("namespace", ""), lab.get("pod", ""))] = key
    # a MIG parent is not a free GPU: its slices are what pods get
    parents = {lab["gpu"].split("/", 1)[0] for lab, _ in gpus if "/" in lab.get("gpu", "")}
    for lab, up in gpus:
        if lab.get("gpu", "") in parents:
            continue
        kind = gpu_kind(lab)
        if lab.get("pod"):
            model = pods.get((lab.get("namespace", ""), lab["pod"]))
            if model is not None:
                view.kinds.setdefault(model, set()).add(kind)
        elif up == 1:
            view.free[kind] = view.free.get(kind, 0) + 1
    return view


def choose_nodes(views: Iterable[NodeView], kind: str | None, recent: Mapping[str, float], n: int) -> list[NodeView]:
    """At most `n` nodes with a free GPU of `kind` (None: any): most recently running the model first,
    then most free GPUs of that kind, then by name."""
    def free(v: NodeView) -> int:
        return sum(v.free.values()) if kind is None else v.free.get(kind, 0)

    candidates = [v for v in views if free(v) > 0]
    candidates.sort(key=lambda v: (-recent.get(v.node, float("-inf")), -free(v), v.node))
    return candidates[:max(0, n)]


def exporter_base(metrics_url: str) -> str:
    """`http://10.0.0.5:9400/metrics` -> `http://10.0.0.5:9400`."""
    scheme, _, rest = metrics_url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


@dataclass(frozen=True)
class WarmRequest:
    key: ModelKey
    path: str
    nodes: int
    gpu_model: str  # "" : learned
    resolve: Callable[[], Sequence[str]]  # the exporters' /metrics URLs
    reason: str  # scale_up | wake


class TokenFile:
    """A bearer token from a file, re-read when its mtime changes (a rotated Secret)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._cached: tuple[float, str] | None = None

    def read(self) -> str | None:
        if not self.path:
            return None
        try:
            mtime = os.stat(self.path).st_mtime
            if self._cached is None or self._cached[0] != mtime:
                with open(self.path) as f:
                    self._cached = (mtime, f.read().strip())
        except OSError as err:
            log.warning("warm token file %s: %s", self.path, err.strerror)
            return None
        return self._cached[1] or None


class WarmPlanner:
    """Triggers -> a bounded queue -> one worker: scan the exporters, choose nodes, POST /v1/warm.

    `background=False` runs no thread: a test calls `run_pending()` (and `scan_once()`) itself."""

    def __init__(self, *, token_file: str | None, registry: CollectorRegistry | None = None,
                 clock: Callable[[], float] = time.time, max_nodes: int = 4, timeout_s: float = 3.0,
                 recent_s: float = 6 * 3600.0, queue_size: int = 64, scan_interval_s: float = 60.0,
                 background: bool = True, tls: Callable[[], ssl.SSLContext] | None = None) -> None:
        r = registry or CollectorRegistry()
        self.requests_total = Counter("keda_llm_scaler_warm_requests", "POST /v1/warm calls made, by node and "
                                      "result (accepted, http_<status>, connection, no_token)",
                                      ["node", "result"], registry=r)
        self.triggers = Counter("keda_llm_scaler_warm_triggers", "Warm triggers by outcome (queued, "
                                "deduplicated: within the model's cold start, dropped: queue full, no_nodes, "
                                "no_exporters)", ["namespace", "model", "outcome"], registry=r)
        self._token = TokenFile(token_file)
        self._clock = clock
        self.max_nodes = max_nodes
        self.timeout_s = timeout_s
        self.recent_s = recent_s
        self._queue: queue.Queue[WarmRequest] = queue.Queue(maxsize=queue_size)
        self._lock = threading.Lock()
        self._last: dict[ModelKey, float] = {}  # when each model was last triggered
        self._recent: dict[ModelKey, dict[str, float]] = {}  # model -> node -> when last seen running it
        self._kinds: dict[ModelKey, set[str]] = {}  # model -> GPU kinds its replicas were seen holding
        self._watched: dict[ModelKey, Callable[[], Sequence[str]]] = {}
        self._tls = tls  # https exporters: the context that checks their chain (common/tls.py)
        self._background = background
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None
        self._scanner = Periodic("warm-scan", scan_interval_s, self.scan_once, first_now=False)
        self.done: list[tuple[ModelKey, str, str]] = []  # (model, node, result) of the last 256 calls

    # -- life -----------------------------------------------------------------------------------------

    def start(self) -> None:
        if not self._background or self._worker is not None:
            return
        self._worker = threading.Thread(target=self._work, name="warm-planner", daemon=True)
        self._worker.start()
        self._scanner.start()

    def stop(self) -> None:
        self._stop.set()
        self._scanner.stop()
        if self._worker is not None:
            self._worker.join(5.0)

    def watch(self, key: ModelKey, resolve: Callable[[], Sequence[str]]) -> None:
        """Keep track of where this model runs (the periodic scan), so a wake from zero knows."""
        with self._lock:
            self._watched[key] = resolve

    # -- triggers (any thread, never blocking) ---------------------------------------------------------

    def request(self, req: WarmRequest, cold_start_s: float) -> bool:
        """Queue a warm unless this model was triggered within its cold start; True when queued."""
        now = self._clock()
        ns, model = req.key
        with self._lock:
            last = self._last.get(req.key)
            if last is not None and 0 <= now - last < cold_start_s:
                self.triggers.labels(ns, model, "deduplicated").inc()
                return False
            self._last[req.key] = now
        try:
            self._queue.put_nowait(req)
        except queue.Full:
            self.triggers.labels(ns, model, "dropped").inc()
            log.warning("warm queue full: %s/%s not warmed", ns, model)
            return False
        self.triggers.labels(ns, model, "queued").inc()
        return True

    # -- the worker ------------------------------------------------------------------------------------

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                req = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            self._run(req)

    def run_pending(self) -> int:
        """Carry out every queued request now, on this thread; returns how many."""
        n = 0
        while True:
            try:
                req = self._queue.get_nowait()
            except queue.Empty:
                return n
            self._run(req)
            n += 1

    def _run(self, req: WarmRequest) -> None:
        try:
            self._warm(req)
        except Exception:  # a bug here must not end the worker
            log.exception("warming %s/%s", *req.key)

    def _scan(self, urls: Sequence[str]) -> list[NodeView]:
        views: list[NodeView] = []
        for url in urls:
            try:
                _, body = fetch(url, timeout_s=self.timeout_s, max_bytes=MAX_BODY, tls=self._context(url))
            except SourceError as err:
                log.debug("warm: scraping %s: %s", url, err)
                continue
            view = scan_body(body.decode("utf-8", "replace"), exporter_base(url))
            if view is not None:
                views.append(view)
        self._remember(views)
        return views

    def _remember(self, views: Iterable[NodeView]) -> None:
        now = self._clock()
        with self._lock:
            for v in views:
                for key in v.models:
                    nodes = self._recent.setdefault(key, {})
                    nodes[v.node] = now
                    for node, at in list(nodes.items()):
                        if now - at > self.recent_s:
                            del nodes[node]
                for key, kinds in v.kinds.items():
                    self._kinds.setdefault(key, set()).update(kinds)

    def scan_once(self) -> None:
        """Scrape the exporters of every watched model once (the "ran it recently" memory)."""
        with self._lock:
            resolvers = {id(r): r for r in self._watched.values()}
        for resolve in resolvers.values():
            try:
                self._scan(resolve())
            except SourceError as err:
                log.debug("warm scan: %s", err)

    def recent_nodes(self, key: ModelKey) -> dict[str, float]:
        with self._lock:
            return dict(self._recent.get(key, {}))

    def _warm(self, req: WarmRequest) -> None:
        ns, model = req.key
        try:
            urls = req.resolve()
        except SourceError as err:
            urls = []
            log.warning("warm %s/%s: cannot find the exporters: %s", ns, model, err)
        views = self._scan(urls) if urls else []
        if not views:
            self.triggers.labels(ns, model, "no_exporters").inc()
            return
        with self._lock:
            learned = sorted(self._kinds.get(req.key, ()))
        kind = req.gpu_model or (learned[0] if len(learned) == 1 else None)
        chosen = choose_nodes(views, kind, self.recent_nodes(req.key), min(req.nodes, self.max_nodes))
        if not chosen:
            self.triggers.labels(ns, model, "no_nodes").inc()
            log.info("warm %s/%s: no node has a free %s GPU", ns, model, kind or "")
            return
        token = self._token.read()
        for view in chosen:
            result = self._post(view, req.path, token)
            self.requests_total.labels(view.node, result).inc()
            self.done = [*self.done[-255:], (req.key, view.node, result)]
            if result != "accepted":
                log.warning("warm %s/%s on node %s (%s): %s", ns, model, view.node, req.path, result)
            else:
                log.info("warm %s/%s on node %s (%s): accepted (%s)", ns, model, view.node, req.path, req.reason)

    def _post(self, view: NodeView, path: str, token: str | None) -> str:
        if token is None:
            return "no_token"
        parts = urlsplit(view.base_url)
        try:
            conn: http.client.HTTPConnection
            if parts.scheme == "https":
                conn = http.client.HTTPSConnection(parts.hostname or "", parts.port or 443, timeout=self.timeout_s,
                                                   context=self._context(view.base_url))
            else:
                conn = http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=self.timeout_s)
            try:
                conn.request("POST", "/v1/warm", body=json.dumps({"path": path}),
                             headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
                status = conn.getresponse().status
            finally:
                conn.close()
        except (OSError, http.client.HTTPException):
            return "connection"
        return "accepted" if status in (200, 202) else f"http_{status}"

    def _context(self, url: str) -> ssl.SSLContext | None:
        return self._tls() if self._tls is not None and url.startswith("https:") else None
