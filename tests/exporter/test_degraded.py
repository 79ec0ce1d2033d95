"""GPU faults from NVML (clock event reasons, critical XIDs, uncorrectable ECC) and `llm_replica_degraded`.

Against the faithful fake pynvml (exporter/fake_nvml.py): faults cannot be induced on a real GPU.
"""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from keda_llm.exporter.collect import Snapshot, TargetState
from keda_llm.exporter.degraded import replica_reasons
from keda_llm.exporter.fake_nvml import FakeMig, FakeNvml, fake_gpus
from keda_llm.exporter.model import EngineMetrics, GpuMetrics, Target
from keda_llm.exporter.nvml import NvmlCollector
from keda_llm.exporter.render import render


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_xid_events_are_counted_and_held_for_the_hold_time() -> None:
    gpus = fake_gpus(2)
    clock = Clock()
    collector = NvmlCollector(FakeNvml(gpus), clock=clock, xid_hold_s=600.0)
    first = collector.collect()
    assert [(g.xid_errors_total, g.last_xid, g.xid_active) for g in first] == [(0.0, None, 0.0)] * 2
    gpus[1].xid_events += [79, 48]  # fallen off the bus, then a double-bit ECC error
    clock.now += 5
    second = collector.collect()
    assert (second[0].xid_errors_total, second[0].xid_active) == (0.0, 0.0)
    assert (second[1].xid_errors_total, second[1].last_xid, second[1].xid_active) == (2.0, 48.0, 1.0)
    clock.now += 599  # 599 s after the events: still within the hold
    assert collector.collect()[1].xid_active == 1.0
    clock.now += 1  # 600 s after: released; the count and the last code stay
    third = collector.collect()[1]
    assert (third.xid_errors_total, third.last_xid, third.xid_active) == (2.0, 48.0, 0.0)


def test_at_most_64_events_per_cycle_the_rest_next_cycle() -> None:
    gpus = fake_gpus(1)
    collector = NvmlCollector(FakeNvml(gpus), clock=Clock())
    collector.collect()
    gpus[0].xid_events += [13] * 70
    assert collector.collect()[0].xid_errors_total == 64.0
    assert collector.collect()[0].xid_errors_total == 70.0


def test_no_event_sets_in_this_binding_or_driver_means_no_xid_series() -> None:
    nvml = FakeNvml(fake_gpus(1))
    del_binding = NvmlCollector(FakeNvml(fake_gpus(1), missing_functions={"nvmlEventSetCreate"}), clock=Clock())
    assert del_binding.collect()[0].xid_errors_total is None  # FUNCTION_NOT_FOUND from the driver
    gpus = fake_gpus(1)
    gpus[0].unsupported.add("nvmlDeviceRegisterEvents")
    unsupported = NvmlCollector(FakeNvml(gpus), clock=Clock())
    out = unsupported.collect()[0]
    assert (out.xid_errors_total, out.last_xid, out.xid_active) == (None, None, None)
    assert out.memory_used_bytes is not None  # the rest is still read
    collector = NvmlCollector(nvml, clock=Clock())
    collector.collect()
    collector.close()
    assert all(s.freed for s in nvml.event_sets)  # close frees the sets before nvmlShutdown


def test_ecc_volatile_uncorrected_count() -> None:
    gpus = fake_gpus(2)
    gpus[1].ecc_uncorrected_volatile = 3
    gpus[0].unsupported.add("nvmlDeviceGetTotalEccErrors")  # a GPU without ECC (consumer card)
    out = NvmlCollector(FakeNvml(gpus), clock=Clock()).collect()
    assert [g.ecc_uncorrected_total for g in out] == [None, 3.0]


def gpu(index: str, pod: str = "", *, reasons: int | None = 0, xid: float | None = 0.0, ecc: float | None = 0.0,
        namespace: str = "llm") -> GpuMetrics:
    return GpuMetrics(index=index, uuid=f"GPU-{index}", gpu_model="H100", clock_event_reasons=reasons,
                      xid_active=xid, ecc_uncorrected_total=ecc,
                      attribution={"namespace": namespace, "pod": pod, "container": "vllm"} if pod else {})


def test_replica_reasons() -> None:
    got = replica_reasons([
        gpu("0", "a", reasons=0x4),  # SW power cap alone: a busy GPU at its limit, not degraded
        gpu("1", "b", reasons=0x8 | 0x4),  # HW slowdown
        gpu("2", "c", reasons=0x40),  # HW thermal
        gpu("3", "d", xid=1.0),
        gpu("4", "e", ecc=2.0),
        gpu("5", "f", reasons=0x1),  # idle
        gpu("6", "g", reasons=0x80), gpu("7", "g"),  # a TP=2 pod: one GPU with a power brake degrades it
        gpu("8", "", reasons=0x8),  # unattributed: no pod to blame
        gpu("9", "h", reasons=None, xid=None, ecc=None),  # nothing known: not degraded, but present
    ])
    none = {"gpu_throttled": False, "gpu_xid": False, "gpu_ecc": False}
    assert got == {
        ("llm", "a"): none,
        ("llm", "b"): {**none, "gpu_throttled": True},
        ("llm", "c"): {**none, "gpu_throttled": True},
        ("llm", "d"): {**none, "gpu_xid": True},
        ("llm", "e"): {**none, "gpu_ecc": True},
        ("llm", "f"): none,
        ("llm", "g"): {**none, "gpu_throttled": True},
        ("llm", "h"): none,
    }


def test_a_mig_slice_takes_its_parents_faults() -> None:
    parent = gpu("0", reasons=0x20)  # SW thermal on the physical GPU, which no pod holds whole
    slice_a = GpuMetrics(index="0/1", uuid="MIG-a", gpu_model="H100", mig_profile="3g.40gb",
                         attribution={"namespace": "llm", "pod": "small-0", "container": "vllm"})
    assert replica_reasons([parent, slice_a])[("llm", "small-0")]["gpu_throttled"] is True


def test_mig_handles_are_not_registered_for_events() -> None:
    gpus = fake_gpus(1, mig_capable=True, mig_enabled=True)
    gpus[0].migs = [FakeMig(uuid="MIG-1", gpu_instance_id=1)]
    nvml = FakeNvml(gpus)
    out = NvmlCollector(nvml, clock=Clock()).collect()
    assert [g.index for g in out] == ["0", "0/1"]
    assert out[0].xid_errors_total == 0.0 and out[1].xid_errors_total is None
    assert out[1].ecc_uncorrected_total is None  # per physical GPU only


def test_render_gpu_faults_and_replica_degraded() -> None:
    target = Target(url="http://10.0.0.7:8000/metrics", namespace="llm", pod="llama-0", node="n1")
    other = Target(url="http://10.0.0.8:8000/metrics", namespace="llm", pod="llama-1", node="n1")
    static = Target(url="http://127.0.0.1:8001/metrics")  # no pod: no GPU can be attributed to it
    states = tuple(TargetState(target=t, up=True, metrics=(EngineMetrics(engine="vllm", model="m"),),
                               identities=(("m", "vllm", "unified"),), last_success=99.0)
                   for t in (target, other, static))
    gpus = (GpuMetrics(index="0", uuid="GPU-0", gpu_model="H100", throttled=1.0, clock_event_reasons=0x8 | 0x4,
                       ecc_uncorrected_total=0.0, xid_errors_total=1.0, last_xid=79.0, xid_active=1.0,
                       attribution={"namespace": "llm", "pod": "llama-0", "container": "vllm"}),)
    text = render(Snapshot(node="n1", targets=states, gpus=gpus, cycle_seconds=0.1, discovery_errors=0, at=100.0))
    got = {(s.name, s.labels.get("pod", ""), s.labels.get("reason", "")): s.value
           for f in text_string_to_metric_families(text) for s in f.samples}
    assert {k[2]: v for k, v in got.items() if k[0] == "llm_gpu_clock_event_active"} == {
        "sw_power_cap": 1.0, "hw_slowdown": 1.0, "sw_thermal": 0.0, "hw_thermal": 0.0, "hw_power_brake": 0.0}
    assert got[("llm_gpu_ecc_uncorrected_errors_total", "llama-0", "")] == 0.0
    assert got[("llm_gpu_xid_errors_total", "llama-0", "")] == 1.0
    assert got[("llm_gpu_last_xid", "llama-0", "")] == 79.0
    assert got[("llm_gpu_throttled", "llama-0", "")] == 1.0  # the existing series is unchanged
    degraded = {k[1:]: v for k, v in got.items() if k[0] == "llm_replica_degraded"}
    # only llama-0 holds an attributed GPU; llama-1 and the static target are unknown, so absent
    assert degraded == {("llama-0", "gpu_throttled"): 1.0, ("llama-0", "gpu_xid"): 1.0, ("llama-0", "gpu_ecc"): 0.0}
    assert "# TYPE llm_replica_degraded gauge" in text


def test_no_gpus_no_degraded_family() -> None:
    target = Target(url="http://10.0.0.7:8000/metrics", namespace="llm", pod="llama-0")
    state = TargetState(target=target, up=True, metrics=(EngineMetrics(engine="vllm", model="m"),),
                        identities=(("m", "vllm", "unified"),), last_success=99.0)
    text = render(Snapshot(node="n1", targets=(state,), gpus=(), cycle_seconds=0.1, discovery_errors=0, at=100.0))
    assert "llm_replica_degraded" not in text and "llm_gpu_clock_event_active" not in text


def test_the_nvml_dump_script_prints_each_gpu_and_its_faults(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from conftest import load_script

    gpus = fake_gpus(2)
    gpus[1].clocks_event_reasons = 0x4 | 0x40  # SW power cap + HW thermal
    gpus[1].ecc_uncorrected_volatile = 1
    assert load_script("nvml_dump").main([], nvml=FakeNvml(gpus)) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["uuid"] for r in rows] == [g.uuid for g in gpus]
    assert rows[0]["clock_events"] == [] and rows[0]["degraded_reasons"] == []
    assert rows[1]["clock_events"] == ["sw_power_cap", "hw_thermal"]
    assert rows[1]["degraded_reasons"] == ["gpu_throttled", "gpu_ecc"]
    assert rows[1]["ecc_uncorrected_total"] == 1.0 and rows[1]["xid_errors_total"] == 0.0
    assert load_script("nvml_dump").main([], nvml=FakeNvml([])) == 1
