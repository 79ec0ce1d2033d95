"""Opt-in (`--pod-deletion-cost`): mark the most degraded replica so that a scale-down removes it first.

The ReplicaSet controller, choosing which pods a scale-down deletes, ranks ready pods with a lower
`controller.kubernetes.io/pod-deletion-cost` annotation first (KEP-2255, beta and on by default since
Kubernetes 1.22: https://www.kubernetes.dev/resources/keps/2255/; the ReplicaSet page of the Kubernetes
docs, "Pod deletion cost"). The decision's details name each degraded replica's fraction
(`replica_fraction:<reason>:<pod>`, scaler/health.py); this marks the one with the smallest fraction of
each model with MARK and takes the annotation off a pod it marked once that pod recovers or another is
worse. It never touches a pod it did not mark.

Writes need `patch` on pods, which the base RBAC does not grant (the scaler only reads there): the
overlay deploy/overlays/pod-deletion-cost adds the rule and the flag. The patches run on a thread of
their own: a decision (answered to KEDA in milliseconds) never waits on the API server. A failed patch
is logged and tried again at the next decision that still wants it.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping
from typing import Any

from keda_llm.scaler.history import HistoryView
from keda_llm.scaler.kube import KubeError
from keda_llm.scaler.model import Decision, PolicyState, WorkloadState

log = logging.getLogger(__name__)

ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
#: The mark: below every unannotated pod (cost 0), far from the int32 floor that tools such as Karpenter use
#: for pods already being disrupted.
MARK = "-1000"
PREFIX = "replica_fraction:"

DecideFn = Callable[[Any, Any, PolicyState, WorkloadState, float], tuple[Decision, PolicyState]]
Patch = Callable[[str, Mapping[str, Any]], None]  # KubeClient.merge_patch


def worst_pod(details: Mapping[str, float]) -> str | None:
    """The degraded pod with the smallest fraction (ties: the first pod name), or None when none is."""
    found = [(value, key.split(":", 2)[2]) for key, value in details.items() if key.startswith(PREFIX)]
    return min(found)[1] if found else None


def pod_path(namespace: str, pod: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{pod}"


def annotation_patch(value: str | None) -> dict[str, Any]:
    """The merge patch that sets (or, with None, removes) the annotation."""
    return {"metadata": {"annotations": {ANNOTATION: value}}}


class DeletionCostMarker:
    """Keeps the MARK on each model's worst pod; `wrap(decide)` sees every decision."""

    def __init__(self, patch: Patch, *, background: bool = True) -> None:
        """`patch`: a merge-patch call (KubeClient.merge_patch); `background=False`: patches wait for `flush()`."""
        self._patch = patch
        self._lock = threading.Lock()
        self._marked: dict[tuple[str, str], str] = {}  # (namespace, model) -> the pod that carries the mark
        self._pending: queue.Queue[tuple[tuple[str, str], str | None, str | None]] = queue.Queue()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._run, name="pod-deletion-cost", daemon=True)
            self._thread.start()

    def wrap(self, decide: DecideFn) -> DecideFn:
        def marked(history: HistoryView, config: Any, state: PolicyState, workload: WorkloadState,
                   now: float) -> tuple[Decision, PolicyState]:
            decision, new_state = decide(history, config, state, workload, now)
            self.observe(history.namespace, history.model, decision.details)
            return decision, new_state

        return marked

    def observe(self, namespace: str, model: str, details: Mapping[str, float]) -> None:
        """Queue the patches that move the mark to this decision's worst pod (none when it is already there)."""
        key = (namespace, model)
        want = worst_pod(details)
        with self._lock:
            have = self._marked.get(key)
            if want == have:
                return
            if want is None:
                self._marked.pop(key, None)
            else:
                self._marked[key] = want
        self._pending.put((key, have, want))

    def flush(self) -> None:
        """Apply every queued move now (the background thread does this as they come)."""
        while True:
            try:
                item = self._pending.get_nowait()
            except queue.Empty:
                return
            self._apply(*item)

    def _run(self) -> None:
        while True:
            self._apply(*self._pending.get())

    def _apply(self, key: tuple[str, str], old: str | None, new: str | None) -> None:
        namespace = key[0]
        try:
            if old is not None:
                self._patch(pod_path(namespace, old), annotation_patch(None))
            if new is not None:
                self._patch(pod_path(namespace, new), annotation_patch(MARK))
        except KubeError as err:
            log.warning("pod-deletion-cost for %s/%s: %s (tried again at the next decision)", namespace, key[1], err)
            with self._lock:  # forget the mark, so the next decision that wants it queues it again
                if self._marked.get(key) == new:
                    self._marked.pop(key, None)
