"""GPU -> pod attribution against a real gRPC PodResourcesLister on a unix socket, and the vendored stubs.

The server is the generated servicer answering a ListPodResourcesResponse shaped as a kubelet on a
GPU node answers (several pods, CPU/memory/topology fields, non-GPU devices, DRA claims).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from keda_llm.exporter.fake_nvml import FakeGpu, FakeMig, FakeNvml
from keda_llm.exporter.model import GpuMetrics
from keda_llm.exporter.nvml import NvmlCollector
from keda_llm.exporter.podresources import Owner, PodResourcesClient, attribute, attributor, gpu_owners
from keda_llm.exporter.podresources_v1 import api_pb2, api_pb2_grpc
from keda_llm.exporter.podresources_v1.generate import GENERATED, PACKAGE_DIR, generate

GPU0 = "GPU-0a1b2c3d-0000-4000-8000-000000000000"
GPU1 = "GPU-1a1b2c3d-0000-4000-8000-000000000001"  # MIG enabled
GPU2 = "GPU-2a1b2c3d-0000-4000-8000-000000000002"  # time-sliced
GPU3 = "GPU-3a1b2c3d-0000-4000-8000-000000000003"  # free
MIG_A = "MIG-aaaaaaaa-0000-5000-8000-000000000001"
MIG_B = "MIG-bbbbbbbb-0000-5000-8000-000000000002"


def numa(node: int) -> Any:
    return api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=node)])


def kubelet_response() -> Any:
    pb = api_pb2
    return pb.ListPodResourcesResponse(pod_resources=[
        pb.PodResources(name="vllm-llama-0", namespace="inference", containers=[
            pb.ContainerResources(
                name="vllm",
                devices=[
                    pb.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=[GPU0], topology=numa(0)),
                    pb.ContainerDevices(resource_name="rdma/hca_shared_devices_a", device_ids=["mlx5_0"]),
                ],
                cpu_ids=[2, 3, 66, 67],
                memory=[pb.ContainerMemory(memory_type="memory", size=68_719_476_736, topology=numa(0))],
            ),
            pb.ContainerResources(name="metrics-sidecar"),
        ]),
        pb.PodResources(name="qwen-small-7f9c", namespace="team-a", containers=[
            pb.ContainerResources(name="server", devices=[
                pb.ContainerDevices(resource_name="nvidia.com/mig-3g.40gb", device_ids=[MIG_A], topology=numa(1)),
            ]),
        ]),
        pb.PodResources(name="embedder-0", namespace="team-b", containers=[
            pb.ContainerResources(name="tei", devices=[  # pre-R470 MIG ID form
                pb.ContainerDevices(resource_name="nvidia.com/mig-1g.10gb", device_ids=[f"MIG-{GPU1}/9/0"]),
            ]),
        ]),
        pb.PodResources(name="notebook-b", namespace="research", containers=[
            pb.ContainerResources(name="jupyter", devices=[
                pb.ContainerDevices(resource_name="nvidia.com/gpu.shared", device_ids=[f"{GPU2}::1"]),
            ]),
        ]),
        pb.PodResources(name="notebook-a", namespace="research", containers=[
            pb.ContainerResources(name="jupyter", devices=[
                pb.ContainerDevices(resource_name="nvidia.com/gpu.shared", device_ids=[f"{GPU2}::0"]),
            ]),
        ]),
        pb.PodResources(name="dra-job", namespace="batch", containers=[
            pb.ContainerResources(name="main", dynamic_resources=[pb.DynamicResource(
                claim_name="gpu-claim", claim_namespace="batch", claim_resources=[pb.ClaimResource(
                    driver_name="gpu.nvidia.com", pool_name="node-1", device_name="gpu-3",
                    cdi_devices=[pb.CDIDevice(name="k8s.gpu.nvidia.com/device=gpu-3")])])]),
        ]),
        pb.PodResources(name="coredns-5d78c9869d-abcde", namespace="kube-system", containers=[
            pb.ContainerResources(name="coredns", cpu_ids=[0]),
        ]),
    ])


class Lister(api_pb2_grpc.PodResourcesListerServicer):
    """The kubelet's side: answers List with a fixed response; can be made to hang."""

    def __init__(self, response: Any) -> None:
        self.response = response
        self.calls = 0
        self.hang = False
        self.release = threading.Event()

    def List(self, request: Any, context: Any) -> Any:  # the RPC's name, as the servicer defines it
        self.calls += 1
        if self.hang:
            self.release.wait(10)
        return self.response


@pytest.fixture
def socket_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pr")  # short: a unix socket path must fit in 107 bytes


def serve(path: Path, lister: Lister) -> Any:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(lister, server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"unix:{path}")
    server.start()
    return server


@pytest.fixture
def kubelet(socket_dir: Path) -> Iterator[tuple[Path, Lister]]:
    path = socket_dir / "kubelet.sock"
    lister = Lister(kubelet_response())
    server = serve(path, lister)
    yield path, lister
    lister.release.set()
    server.stop(None)


EXPECTED_OWNERS = {
    GPU0: Owner("inference", "vllm-llama-0", "vllm"),
    MIG_A: Owner("team-a", "qwen-small-7f9c", "server"),
    f"MIG-{GPU1}/9/0": Owner("team-b", "embedder-0", "tei"),
}


def test_list_gpu_owners_over_a_real_unix_socket(kubelet: tuple[Path, Lister]) -> None:
    path, lister = kubelet
    with PodResourcesClient(str(path), timeout=5.0) as client:
        assert client.list_gpu_owners() == EXPECTED_OWNERS
        assert client.list_gpu_owners() == EXPECTED_OWNERS  # the channel is reused
    assert lister.calls == 2


def test_configured_resource_names_and_time_slicing_replicas(kubelet: tuple[Path, Lister]) -> None:
    path, _ = kubelet
    with PodResourcesClient(str(path), timeout=5.0, extra_resource_names=["nvidia.com/gpu.shared"]) as client:
        owners = client.list_gpu_owners()
    # both replicas GPU2::0 and GPU2::1 map to GPU2; the first pod by namespace/pod/container keeps it
    assert owners == {**EXPECTED_OWNERS, GPU2: Owner("research", "notebook-a", "jupyter")}


def node_gpus() -> list[GpuMetrics]:
    """What the NVML collector reports for the node the kubelet response describes."""
    gpus = [
        FakeGpu(uuid=GPU0),
        FakeGpu(uuid=GPU1, name="NVIDIA A100-SXM4-80GB", mig_capable=True, mig_enabled=True, migs=[
            FakeMig(MIG_A, gpu_instance_id=2, profile="3g.40gb"),
            FakeMig(MIG_B, gpu_instance_id=9, profile="1g.10gb"),
        ]),
        FakeGpu(uuid=GPU2),
        FakeGpu(uuid=GPU3),
    ]
    return NvmlCollector(FakeNvml(gpus)).collect()


def test_full_gpus_and_mig_slices_are_attributed(kubelet: tuple[Path, Lister]) -> None:
    path, _ = kubelet
    with PodResourcesClient(str(path), timeout=5.0) as client:
        attributed = attribute(node_gpus(), client.list_gpu_owners())

    assert [(g.index, g.uuid, g.mig_profile, g.attribution) for g in attributed] == [
        ("0", GPU0, "", {"namespace": "inference", "pod": "vllm-llama-0", "container": "vllm"}),
        ("1", GPU1, "", {}),  # the MIG parent is shared by its slices' pods
        ("1/2", MIG_A, "3g.40gb", {"namespace": "team-a", "pod": "qwen-small-7f9c", "container": "server"}),
        ("1/9", MIG_B, "1g.10gb", {"namespace": "team-b", "pod": "embedder-0", "container": "tei"}),
        ("2", GPU2, "", {}),  # gpu.shared is not a configured resource name here
        ("3", GPU3, "", {}),
    ]


def test_attribute_is_pure_and_clears_stale_owners() -> None:
    gpus = [GpuMetrics(index="0", uuid=GPU0, gpu_model="m", attribution={"namespace": "old", "pod": "gone",
                                                                          "container": "c"}),
            GpuMetrics(index="1", uuid=GPU1, gpu_model="m")]
    result = attribute(gpus, {f"{GPU1}::0": ("ns", "pod", "ctr")})
    assert [g.attribution for g in result] == [{}, {"namespace": "ns", "pod": "pod", "container": "ctr"}]
    assert gpus[0].attribution == {"namespace": "old", "pod": "gone", "container": "c"}  # input untouched
    assert gpus[1].attribution == {}


def test_attribute_matches_eks_mig_suffix_and_ignores_unknown_ids() -> None:
    gpus = [GpuMetrics(index="0", uuid=GPU0, gpu_model="m"),
            GpuMetrics(index="0/3", uuid=MIG_A, gpu_model="m", mig_profile="2g.20gb")]
    owners = {f"{MIG_A}::7": ("ns", "p", "c"), "GPU-not-on-this-node": ("x", "y", "z"),
              f"MIG-{GPU3}/3/0": ("x", "y", "z")}  # an old MIG ID of another node's GPU
    assert [g.attribution for g in attribute(gpus, owners)] == [{}, {"namespace": "ns", "pod": "p",
                                                                      "container": "c"}]


def test_gpu_owners_ignores_dra_and_non_gpu_devices() -> None:
    response = api_pb2.ListPodResourcesResponse(pod_resources=[
        p for p in kubelet_response().pod_resources if p.name in ("dra-job", "coredns-5d78c9869d-abcde")])
    assert gpu_owners(response) == {}


def test_a_missing_socket_leaves_gpus_unattributed_and_logs_once(
        socket_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="keda_llm.exporter.podresources")
    client = PodResourcesClient(str(socket_dir / "absent.sock"), timeout=1.0)
    for _ in range(3):
        owners = client.list_gpu_owners()
        assert owners == {}
    assert [g.attribution for g in attribute(node_gpus(), owners)] == [{}] * 6
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "absent.sock" in warnings[0] and "No such file" in warnings[0]


def test_a_path_that_is_not_a_socket(socket_dir: Path) -> None:
    path = socket_dir / "kubelet.sock"
    path.write_text("")
    assert PodResourcesClient(str(path), timeout=1.0).list_gpu_owners() == {}


def test_a_stale_socket_with_no_kubelet_behind_it(socket_dir: Path) -> None:
    path = socket_dir / "kubelet.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stale:
        stale.bind(str(path))  # bound, never listening: connect() is refused, as after a kubelet crash
        assert PodResourcesClient(str(path), timeout=2.0).list_gpu_owners() == {}


def test_a_hanging_kubelet_times_out(kubelet: tuple[Path, Lister]) -> None:
    path, lister = kubelet
    lister.hang = True
    client = PodResourcesClient(str(path), timeout=0.2)
    assert client.list_gpu_owners() == {}
    lister.hang = False
    lister.release.set()
    assert client.list_gpu_owners() == EXPECTED_OWNERS  # a fresh channel after the failure
    client.close()


def test_the_kubelet_coming_up_later_is_picked_up(socket_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="keda_llm.exporter.podresources")
    path = socket_dir / "kubelet.sock"
    client = PodResourcesClient(str(path), timeout=5.0)
    assert client.list_gpu_owners() == {}
    server = serve(path, Lister(kubelet_response()))
    try:
        assert client.list_gpu_owners() == EXPECTED_OWNERS
    finally:
        client.close()
        server.stop(None)
    assert any("answers again" in r.getMessage() for r in caplog.records)


def test_the_vendored_proto_keeps_the_kubelet_wire_contract() -> None:
    """Names and field numbers from upstream api.proto (kubernetes 95f08499), written out by hand."""
    file = api_pb2.DESCRIPTOR
    assert file.package == "v1"
    service = file.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    assert sorted(m.name for m in service.methods) == ["Get", "GetAllocatableResources", "List"]
    numbers = {
        "ListPodResourcesResponse": {"pod_resources": 1},
        "PodResources": {"name": 1, "namespace": 2, "containers": 3},
        "ContainerResources": {"name": 1, "devices": 2, "cpu_ids": 3, "memory": 4, "dynamic_resources": 5},
        "ContainerDevices": {"resource_name": 1, "device_ids": 2, "topology": 3},
        "DynamicResource": {"claim_name": 2, "claim_namespace": 3, "claim_resources": 4},
        "ClaimResource": {"cdi_devices": 1, "driver_name": 2, "pool_name": 3, "device_name": 4},
    }
    for message, fields in numbers.items():
        descriptor = file.message_types_by_name[message]
        assert {f.name: f.number for f in descriptor.fields} == fields, message


def test_regenerating_the_stubs_changes_nothing(tmp_path: Path) -> None:
    regenerated = generate(tmp_path)
    assert [p.name for p in regenerated] == list(GENERATED)
    for path in regenerated:
        committed = PACKAGE_DIR / path.name
        assert path.read_bytes() == committed.read_bytes(), f"{path.name} differs: run the generator"


def test_the_attributor_for_the_collection_loop_sets_owners_in_place(kubelet: tuple[Path, Lister]) -> None:
    path, lister = kubelet
    apply = attributor(str(path))
    assert apply([]) == [] and lister.calls == 0  # no GPU: the kubelet is not asked
    gpus = node_gpus()
    assert apply(gpus) is gpus
    assert {g.uuid: g.attribution.get("pod", "") for g in gpus} == {
        GPU0: "vllm-llama-0", GPU1: "", MIG_A: "qwen-small-7f9c", MIG_B: "embedder-0", GPU2: "", GPU3: ""}
    assert lister.calls == 1


def test_the_attributor_holds_the_last_answer_through_a_failed_ask(kubelet: tuple[Path, Lister]) -> None:
    # one kubelet timeout left every GPU unattributed for a cycle: every GPU series relabeled, and the
    # replicas' llm_replica_degraded gone for that cycle
    path, lister = kubelet
    now = [0.0]
    apply = attributor(str(path), timeout=0.2, clock=lambda: now[0])
    pods = {GPU0: "vllm-llama-0", GPU1: "", MIG_A: "qwen-small-7f9c", MIG_B: "embedder-0", GPU2: "", GPU3: ""}
    assert {g.uuid: g.attribution.get("pod", "") for g in apply(node_gpus())} == pods
    lister.hang = True
    now[0] = 30.0
    assert {g.uuid: g.attribution.get("pod", "") for g in apply(node_gpus())} == pods  # the last answer
    now[0] = 61.0
    assert all(not g.attribution for g in apply(node_gpus()))  # too old: pods may have moved
    lister.hang = False
    lister.release.set()
    now[0] = 62.0
    assert {g.uuid: g.attribution.get("pod", "") for g in apply(node_gpus())} == pods
