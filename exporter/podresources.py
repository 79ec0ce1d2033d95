"""GPU -> pod attribution through the kubelet pod-resources API (v1 `PodResourcesLister.List`).

The kubelet knows which container holds which device-plugin device; it serves that on a unix socket
(default `/var/lib/kubelet/pod-resources/kubelet.sock`, root-only, so the DaemonSet mounts
`/var/lib/kubelet/pod-resources` from the host). As NVIDIA's dcgm-exporter does
(`internal/pkg/transformation/kubernetes.go`), we keep the devices of the resources `nvidia.com/gpu`
and `nvidia.com/mig-*` (plus configured names such as a time-slicing `nvidia.com/gpu.shared`) and
match their device IDs to the UUIDs NVML reports:

- `GPU-<uuid>`: a whole GPU (also MIG devices under the device plugin's `single` strategy, whose IDs
  are `MIG-<uuid>` under `nvidia.com/gpu`);
- `MIG-<uuid>`: a MIG slice, matched to the slice's own UUID;
- `MIG-GPU-<parent uuid>/<gi>/<ci>`: the pre-R470 MIG ID form, matched to the parent GPU's slice
  with GPU instance `<gi>`;
- `<id>::<n>`: a time-slicing replica (and EKS's MIG suffix); the suffix is dropped, so a shared GPU
  is attributed to one of its pods (the first by namespace/pod/container), as dcgm-exporter does by
  default.

Failures (no socket, kubelet down, timeout) are logged and leave GPUs unattributed, never raise.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, NamedTuple, TypeVar

import grpc

from keda_llm.exporter.config import POD_RESOURCES_SOCKET
from keda_llm.exporter.model import GpuMetrics
from keda_llm.exporter.podresources_v1 import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)

DEFAULT_SOCKET = POD_RESOURCES_SOCKET
DEFAULT_TIMEOUT_S = 10.0  # dcgm-exporter's dial timeout
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"

_OLD_MIG_ID = re.compile(r"^MIG-(GPU-[0-9A-Za-z-]+)/(\d+)/(\d+)$")


class Owner(NamedTuple):
    """The container a device is allocated to."""

    namespace: str
    pod: str
    container: str


def normalize_device_id(device_id: str) -> str:
    """Drop a time-slicing replica or EKS suffix: `GPU-abc::3` -> `GPU-abc`."""
    return device_id.split("::", 1)[0]


def is_gpu_resource(resource_name: str, extra_names: Iterable[str] = ()) -> bool:
    """True for `nvidia.com/gpu`, any `nvidia.com/mig-*` and configured names."""
    return (resource_name == GPU_RESOURCE or resource_name.startswith(MIG_RESOURCE_PREFIX)
            or resource_name in extra_names)


def gpu_owners(response: Any, extra_resource_names: Iterable[str] = ()) -> dict[str, Owner]:
    """Device ID -> owner from a `ListPodResourcesResponse`; a shared device keeps its first owner."""
    extra = frozenset(extra_resource_names)
    owners: dict[str, Owner] = {}
    for pod in response.pod_resources:
        for container in pod.containers:
            owner = Owner(pod.namespace, pod.name, container.name)
            for devices in container.devices:
                if not is_gpu_resource(devices.resource_name, extra):
                    continue
                for device_id in devices.device_ids:
                    _keep_first(owners, normalize_device_id(device_id), owner)
    return owners


_Owner = TypeVar("_Owner", bound=tuple[str, str, str])


def _keep_first(table: dict[str, _Owner], key: str, owner: _Owner) -> None:
    """A device shared by several containers (time-slicing) goes to the first by namespace/pod/container."""
    if key not in table or owner < table[key]:
        table[key] = owner


def attribute(gpus: list[GpuMetrics], owners: Mapping[str, tuple[str, str, str]]) -> list[GpuMetrics]:
    """Copies of `gpus` with `attribution` set from `owners` (device ID -> namespace, pod, container).

    Pure: GPUs without an owner get an empty attribution; the input list is not modified.
    """
    by_uuid: dict[str, tuple[str, str, str]] = {}
    parent_index = {g.uuid: g.index for g in gpus if not g.mig_profile and g.uuid}
    by_index: dict[str, tuple[str, str, str]] = {}
    for device_id, device_owner in owners.items():
        key = normalize_device_id(device_id)
        old = _OLD_MIG_ID.match(key)
        if old and old.group(1) in parent_index:
            _keep_first(by_index, f"{parent_index[old.group(1)]}/{old.group(2)}", device_owner)
        else:
            _keep_first(by_uuid, key, device_owner)
    out = []
    for gpu in gpus:
        owner = by_uuid.get(gpu.uuid) if gpu.uuid else None
        if owner is None and gpu.mig_profile:
            owner = by_index.get(gpu.index)
        attribution = {"namespace": owner[0], "pod": owner[1], "container": owner[2]} if owner else {}
        out.append(replace(gpu, attribution=attribution))
    return out


class PodResourcesClient:
    """Asks the kubelet which container holds which GPU. One channel, reused; failures return `{}`."""

    def __init__(
        self,
        socket_path: str = DEFAULT_SOCKET,
        timeout: float = DEFAULT_TIMEOUT_S,
        extra_resource_names: Iterable[str] = (),
    ) -> None:
        """`extra_resource_names`: more resource names that carry NVIDIA devices (`nvidia.com/gpu.shared`)."""
        self.socket_path = socket_path
        self.timeout = timeout
        self.extra_resource_names = frozenset(extra_resource_names)
        self._channel: grpc.Channel | None = None
        self._stub: api_pb2_grpc.PodResourcesListerStub | None = None
        self._failing = False

    def list_gpu_owners(self) -> dict[str, Owner]:
        """Device ID (suffix-free, see module doc) -> owner; `{}` when the kubelet cannot be asked."""
        problem = self._socket_problem()
        if problem:
            self._failed(problem)
            return {}
        try:
            response = self._lister().List(api_pb2.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.RpcError as error:
            self._failed(f"List failed: {error.code().name}: {error.details()}")
            self._close_channel()  # next time dial afresh instead of waiting out gRPC's reconnect backoff
            return {}
        if self._failing:
            log.info("kubelet pod-resources at %s answers again", self.socket_path)
            self._failing = False
        return gpu_owners(response, self.extra_resource_names)

    @property
    def failing(self) -> bool:
        """The last ask failed (its `{}` is no answer, not a node without GPU pods)."""
        return self._failing

    def close(self) -> None:
        self._close_channel()

    def __enter__(self) -> PodResourcesClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _socket_problem(self) -> str:
        try:
            mode = os.stat(self.socket_path).st_mode
        except OSError as error:
            return f"cannot stat the socket: {error.strerror}"
        return "" if stat.S_ISSOCK(mode) else "the path is not a unix socket"

    def _lister(self) -> api_pb2_grpc.PodResourcesListerStub:
        if self._stub is None:
            self._channel = grpc.insecure_channel(f"unix:{self.socket_path}")  # unix:path, relative or absolute
            self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)  # type: ignore[no-untyped-call]
        return self._stub

    def _close_channel(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = None
        self._stub = None

    def _failed(self, why: str) -> None:
        if not self._failing:
            log.warning("kubelet pod-resources at %s unavailable (%s): GPUs stay unattributed",
                        self.socket_path, why)
            self._failing = True
        else:
            log.debug("kubelet pod-resources at %s still unavailable: %s", self.socket_path, why)


#: seconds the last answer of the kubelet stands in for one that failed
HOLD_LAST_ANSWER_S = 60.0


def attributor(
    socket_path: str = DEFAULT_SOCKET,
    timeout: float = 2.0,
    extra_resource_names: Iterable[str] = (),
    clock: Callable[[], float] = time.monotonic,
) -> Callable[[list[GpuMetrics]], list[GpuMetrics]]:
    """For the collection loop: a callable that asks the kubelet once per call and sets each GPU's
    `attribution` in place (returning the same list). The timeout is short because it runs inside a
    collection cycle. A failed ask uses the last answer for up to HOLD_LAST_ANSWER_S: one timeout left
    every GPU unattributed for a cycle, which relabeled every GPU series and dropped the replicas'
    `llm_replica_degraded` for it (the scaler then saw a degraded replica as whole). Longer than that,
    the GPUs are unattributed (pods may have moved)."""
    client = PodResourcesClient(socket_path, timeout, extra_resource_names)
    last: tuple[float, Mapping[str, tuple[str, str, str]]] | None = None

    def apply(gpus: list[GpuMetrics]) -> list[GpuMetrics]:
        nonlocal last
        if not gpus:
            return gpus
        owners: Mapping[str, tuple[str, str, str]] = client.list_gpu_owners()
        now = clock()
        if not client.failing:
            last = (now, owners)
        elif last is not None and now - last[0] <= HOLD_LAST_ANSWER_S:
            owners = last[1]
        for gpu, attributed in zip(gpus, attribute(gpus, owners), strict=True):
            gpu.attribution = attributed.attribution
        return gpus

    return apply
