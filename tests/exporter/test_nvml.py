"""NVML collector against the fake pynvml: units, NotSupported memo, lost GPUs, no driver, MIG.

Expected values are converted by hand from the raw NVML units set on the fake GPUs.
"""

from __future__ import annotations

import inspect
import logging

import pynvml
import pytest

from keda_llm.exporter.fake_nvml import GIB, FakeGpu, FakeMig, FakeNvml, fake_gpus
from keda_llm.exporter.model import GpuMetrics
from keda_llm.exporter.nvml import NVML_MEMORY_V2, NvmlCollector, mig_profile_from_name

UUID0 = "GPU-11111111-2222-3333-4444-555555555555"
MIG_A = "MIG-aaaaaaaa-0000-5000-8000-000000000001"
MIG_B = "MIG-bbbbbbbb-0000-5000-8000-000000000002"


class Clock:
    """A hand-moved monotonic clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def busy_gpu(uuid: str = UUID0, **values: object) -> FakeGpu:
    gpu = FakeGpu(
        uuid=uuid,
        name="NVIDIA H100 80GB HBM3",
        memory_total=85_899_345_920,  # 80 GiB
        memory_used=42_949_672_960,  # 40 GiB
        utilization_gpu=87,  # %
        power_mw=412_345,
        power_limit_mw=700_000,
        energy_mj=123_456_789,
        temperature_c=71,
        sm_clock_mhz=1980,
        clocks_event_reasons=0x4,  # SW power cap
    )
    for key, value in values.items():
        setattr(gpu, key, value)
    return gpu


def test_every_field_in_base_units() -> None:
    collector = NvmlCollector(FakeNvml([busy_gpu()]), clock=Clock())

    assert collector.collect() == [GpuMetrics(
        index="0",
        uuid=UUID0,
        gpu_model="NVIDIA H100 80GB HBM3",
        up=True,
        mig_profile="",
        memory_used_bytes=42_949_672_960.0,
        memory_total_bytes=85_899_345_920.0,
        utilization_ratio=0.87,  # 87 %
        power_watts=412.345,  # 412345 mW
        power_limit_watts=700.0,  # 700000 mW
        energy_joules_total=123_456.789,  # 123456789 mJ
        temperature_celsius=71.0,
        sm_clock_hertz=1_980_000_000.0,  # 1980 MHz
        throttled=1.0,
        clock_event_reasons=0x4,
        ecc_uncorrected_total=0.0,  # volatile uncorrectable ECC count
        xid_errors_total=0.0,  # event set registered, no XID yet
        last_xid=None,
        xid_active=0.0,
    )]


@pytest.mark.parametrize(("reasons", "throttled"), [
    (0x0, 0.0),  # none
    (0x1, 0.0),  # GPU idle: no work, not a limit
    (0x2, 0.0),  # applications clocks setting
    (0x10, 0.0),  # sync boost
    (0x100, 0.0),  # display clock setting
    (0x1 | 0x2 | 0x10 | 0x100, 0.0),
    (0x4, 1.0),  # SW power cap
    (0x8, 1.0),  # HW slowdown
    (0x20, 1.0),  # SW thermal slowdown
    (0x40, 1.0),  # HW thermal slowdown
    (0x80, 1.0),  # HW power brake
    (0x200, 1.0),  # board limit
    (0x400, 1.0),  # reliability
    (0x1 | 0x20, 1.0),  # idle and thermally held
])
def test_throttled_counts_only_held_down_reasons(reasons: int, throttled: float) -> None:
    collector = NvmlCollector(FakeNvml([busy_gpu(clocks_event_reasons=reasons)]), clock=Clock())
    assert collector.collect()[0].throttled == throttled


def test_not_supported_is_skipped_per_device_and_not_asked_again() -> None:
    nvml = FakeNvml([
        busy_gpu(unsupported={"nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetUtilizationRates"}),
        busy_gpu(uuid="GPU-other"),
    ])
    collector = NvmlCollector(nvml, clock=Clock())

    for _ in range(3):
        first, second = collector.collect()
        assert (first.energy_joules_total, first.utilization_ratio) == (None, None)
        assert (second.energy_joules_total, second.utilization_ratio) == (123_456.789, 0.87)
        assert first.up and first.power_watts == 412.345

    # GPU 0 was asked once, GPU 1 every cycle
    assert nvml.calls["nvmlDeviceGetTotalEnergyConsumption"] == 1 + 3
    assert nvml.calls["nvmlDeviceGetUtilizationRates"] == 1 + 3
    assert nvml.calls["nvmlDeviceGetPowerUsage"] == 3 + 3


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_NO_PERMISSION, pynvml.NVML_ERROR_INVALID_ARGUMENT])
def test_permission_and_invalid_argument_count_as_absent(code: int) -> None:
    nvml = FakeNvml([busy_gpu(errors={"nvmlDeviceGetPowerUsage": code})])
    collector = NvmlCollector(nvml, clock=Clock())
    for _ in range(2):
        gpu = collector.collect()[0]
        assert gpu.up and gpu.power_watts is None and gpu.power_limit_watts == 700.0
    assert nvml.calls["nvmlDeviceGetPowerUsage"] == 1


def test_no_data_skips_the_field_this_cycle_only() -> None:
    gpu = busy_gpu(errors={"nvmlDeviceGetTotalEnergyConsumption": pynvml.NVML_ERROR_NO_DATA})
    nvml = FakeNvml([gpu])
    collector = NvmlCollector(nvml, clock=Clock())
    assert collector.collect()[0].energy_joules_total is None
    gpu.errors.clear()
    assert collector.collect()[0].energy_joules_total == 123_456.789
    assert nvml.calls["nvmlDeviceGetTotalEnergyConsumption"] == 2


def test_an_older_driver_falls_back_to_the_older_calls_once() -> None:
    nvml = FakeNvml([busy_gpu(), busy_gpu(uuid="GPU-other", temperature_c=40, clocks_event_reasons=0)],
                    missing_functions={"nvmlDeviceGetTemperatureV", "nvmlDeviceGetCurrentClocksEventReasons"})
    collector = NvmlCollector(nvml, clock=Clock())

    for _ in range(2):
        first, second = collector.collect()
        assert (first.temperature_celsius, first.throttled) == (71.0, 1.0)
        assert (second.temperature_celsius, second.throttled) == (40.0, 0.0)

    # the missing entry point is tried once for the whole library, then the old one serves all GPUs
    assert nvml.calls["nvmlDeviceGetTemperatureV"] == 1
    assert nvml.calls["nvmlDeviceGetTemperature"] == 4
    assert nvml.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1
    assert nvml.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 4


RESERVED = 503_316_480  # what driver 580 reserved on an idle H100 80GB HBM3 (nvidia-smi: 480 MiB "Reserved")


def test_memory_used_leaves_out_what_the_driver_reserves() -> None:
    """As nvidia-smi's "Used" and DCGM's FB_USED: an idle H100 reads 0 used, not the driver's 480 MiB
    (version 1 of nvmlDeviceGetMemoryInfo counted them: seen on a real H100 with driver 580)."""
    assert pynvml.nvmlMemory_v2 == NVML_MEMORY_V2
    nvml = FakeNvml([busy_gpu(memory_used=0, memory_reserved=RESERVED),
                     busy_gpu(uuid="GPU-other", memory_reserved=RESERVED)])
    collector = NvmlCollector(nvml, clock=Clock())
    for _ in range(2):
        idle, busy = collector.collect()
        assert (idle.memory_used_bytes, idle.memory_total_bytes) == (0.0, 85_899_345_920.0)
        assert busy.memory_used_bytes == 42_949_672_960.0
    assert nvml.calls["nvmlDeviceGetMemoryInfo"] == 4  # one call per GPU per cycle


def test_a_driver_without_memory_info_v2_falls_back_to_v1_once() -> None:
    nvml = FakeNvml([busy_gpu(memory_reserved=RESERVED), busy_gpu(uuid="GPU-other", memory_reserved=RESERVED)],
                    missing_functions={"nvmlDeviceGetMemoryInfo_v2"})
    collector = NvmlCollector(nvml, clock=Clock())
    for _ in range(2):
        assert [g.memory_used_bytes for g in collector.collect()] == [42_949_672_960.0 + RESERVED] * 2
    assert nvml.calls["nvmlDeviceGetMemoryInfo"] == 1 + 4  # v2 tried once for the library, then v1


def test_a_struct_version_the_driver_does_not_know_falls_back_to_v1() -> None:
    class OldDriver(FakeNvml):
        def nvmlDeviceGetMemoryInfo(self, handle: object, version: int | None = None) -> object:
            if version:  # a driver older than nvmlMemory_v2 answers ArgumentVersionMismatch
                self.calls["nvmlDeviceGetMemoryInfo"] += 1
                raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
            return super().nvmlDeviceGetMemoryInfo(handle, version)

    collector = NvmlCollector(OldDriver([busy_gpu(memory_reserved=RESERVED)]), clock=Clock())
    for _ in range(2):
        gpu = collector.collect()[0]
        assert gpu.up and gpu.memory_used_bytes == 42_949_672_960.0 + RESERVED


def test_a_lost_gpu_is_reported_down_and_the_others_still_are() -> None:
    gpus = fake_gpus(3)
    clock = Clock()
    collector = NvmlCollector(FakeNvml(gpus), clock=clock, rediscover_s=60.0)
    assert [g.up for g in collector.collect()] == [True, True, True]

    gpus[1].lost = True
    for _ in range(2):  # the cycle it is lost, and the forced re-discovery after it
        clock.now += 5
        result = collector.collect()
        assert [g.up for g in result] == [True, False, True]
        assert result[1] == GpuMetrics(index="1", uuid=gpus[1].uuid, gpu_model="NVIDIA H100 80GB HBM3", up=False)
        assert result[2].memory_used_bytes == float(62 * GIB)  # fake_gpus: 60 GiB + index GiB

    gpus[1].lost = False  # reset and back: found again at the next scheduled discovery
    clock.now += 60
    result = collector.collect()
    assert [g.up for g in result] == [True, True, True]
    assert result[1].power_watts == 451.0  # fake_gpus: 450000 mW + 1000 mW per index


def test_any_other_error_on_the_handle_marks_the_gpu_down() -> None:
    gpus = [busy_gpu(errors={"nvmlDeviceGetClockInfo": pynvml.NVML_ERROR_UNKNOWN}), busy_gpu(uuid="GPU-other")]
    collector = NvmlCollector(FakeNvml(gpus), clock=Clock())
    first, second = collector.collect()
    assert not first.up and first.memory_used_bytes is None and first.uuid == UUID0
    assert second.up and second.sm_clock_hertz == 1_980_000_000.0


def test_a_gpu_lost_before_discovery_is_reported_by_index() -> None:
    gpus = fake_gpus(2)
    gpus[0].lost = True
    result = NvmlCollector(FakeNvml(gpus), clock=Clock()).collect()
    assert result[0] == GpuMetrics(index="0", uuid="", gpu_model="", up=False)
    assert result[1].up and result[1].uuid == gpus[1].uuid


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED])
def test_no_driver_yields_nothing_logs_once_and_retries_later(code: int, caplog: pytest.LogCaptureFixture) -> None:
    nvml = FakeNvml(fake_gpus(2), init_error=code)
    clock = Clock()
    collector = NvmlCollector(nvml, clock=clock, retry_init_s=300.0)
    caplog.set_level(logging.DEBUG, logger="keda_llm.exporter.nvml")

    for _ in range(5):
        assert collector.collect() == []
        clock.now += 10
    assert nvml.calls["nvmlInitWithFlags"] == 1  # not retried before retry_init_s
    clock.now += 300
    assert collector.collect() == []
    assert nvml.calls["nvmlInitWithFlags"] == 2
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "NVML unavailable" in warnings[0].getMessage()

    nvml.init_error = None  # the driver loads
    clock.now += 300
    assert [g.uuid for g in collector.collect()] == [nvml.gpus[0].uuid, nvml.gpus[1].uuid]


def test_the_real_pynvml_never_raises() -> None:
    """On a machine without a driver this is the no-GPU path of the real module; with one, the real GPUs."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        expected = 0
    else:
        expected = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    collector = NvmlCollector()
    try:
        assert len([g for g in collector.collect() if not g.mig_profile]) == expected
    finally:
        collector.close()


def mig_gpu() -> FakeGpu:
    return busy_gpu(
        name="NVIDIA A100-SXM4-80GB",
        mig_capable=True,
        mig_enabled=True,
        migs=[
            FakeMig(MIG_A, gpu_instance_id=2, profile="3g.40gb", slot=0,
                    memory_total=42_314_891_264, memory_used=1_073_741_824),
            FakeMig(MIG_B, gpu_instance_id=9, profile="1g.10gb", slot=3,  # slots 1, 2, 4-6 empty
                    memory_total=10_200_547_328, memory_used=0),
        ],
    )


def test_mig_slices_are_reported_with_profile_and_index_form() -> None:
    nvml = FakeNvml([mig_gpu()])
    collector = NvmlCollector(nvml, clock=Clock())

    for _ in range(2):
        parent, slice_a, slice_b = collector.collect()
        assert (parent.index, parent.mig_profile, parent.power_watts) == ("0", "", 412.345)
        assert slice_a == GpuMetrics(index="0/2", uuid=MIG_A, gpu_model="NVIDIA A100-SXM4-80GB",
                                     mig_profile="3g.40gb", memory_used_bytes=1_073_741_824.0,
                                     memory_total_bytes=42_314_891_264.0)
        assert slice_b == GpuMetrics(index="0/9", uuid=MIG_B, gpu_model="NVIDIA A100-SXM4-80GB",
                                     mig_profile="1g.10gb", memory_used_bytes=0.0,
                                     memory_total_bytes=10_200_547_328.0)

    # per-physical-GPU fields: asked once per slice, then remembered as unsupported there
    assert nvml.calls["nvmlDeviceGetUtilizationRates"] == 2 + 2
    assert nvml.calls["nvmlDeviceGetMemoryInfo"] == 2 * 3
    # the layout is enumerated once (7 slots), not every cycle
    assert nvml.calls["nvmlDeviceGetMigDeviceHandleByIndex"] == 7


def test_mig_disabled_or_unsupported_gives_only_the_gpu() -> None:
    disabled = busy_gpu(mig_capable=True, mig_enabled=False)
    incapable = busy_gpu(uuid="GPU-other")
    nvml = FakeNvml([disabled, incapable])
    clock = Clock()
    collector = NvmlCollector(nvml, clock=clock, rediscover_s=60.0)
    assert [g.index for g in collector.collect()] == ["0", "1"]
    clock.now += 60
    assert [g.index for g in collector.collect()] == ["0", "1"]
    # NotSupported for MIG on GPU 1 is remembered; GPU 0 is asked again at each discovery
    assert nvml.calls["nvmlDeviceGetMigMode"] == 2 + 1


def test_a_mig_reconfiguration_is_seen_at_the_next_discovery() -> None:
    gpu = mig_gpu()
    clock = Clock()
    collector = NvmlCollector(FakeNvml([gpu]), clock=clock, rediscover_s=60.0)
    assert [g.index for g in collector.collect()] == ["0", "0/2", "0/9"]
    gpu.migs = gpu.migs[:1]
    clock.now += 60
    assert [g.index for g in collector.collect()] == ["0", "0/2"]


def test_a_lost_mig_parent_takes_its_slices_down() -> None:
    gpu = mig_gpu()
    clock = Clock()
    collector = NvmlCollector(FakeNvml([gpu]), clock=clock)
    collector.collect()
    gpu.lost = True
    clock.now += 5
    assert [(g.index, g.uuid, g.mig_profile, g.up) for g in collector.collect()] == [
        ("0", UUID0, "", False), ("0/2", MIG_A, "3g.40gb", False), ("0/9", MIG_B, "1g.10gb", False)]


@pytest.mark.parametrize(("name", "profile"), [
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "1g.5gb"),
    ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", "3g.40gb"),
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", "1g.10gb+me"),
    ("NVIDIA H100 80GB HBM3", ""),
])
def test_mig_profile_from_the_device_name(name: str, profile: str) -> None:
    assert mig_profile_from_name(name) == profile


def test_close_shuts_nvml_down_and_a_later_collect_starts_again() -> None:
    nvml = FakeNvml(fake_gpus(1))
    collector = NvmlCollector(nvml, clock=Clock())
    assert len(collector.collect()) == 1
    collector.close()
    assert nvml.calls["nvmlShutdown"] == 1
    with pytest.raises(pynvml.NVMLError_Uninitialized):  # the fake, like NVML, refuses calls after shutdown
        nvml.nvmlDeviceGetCount()
    assert len(collector.collect()) == 1
    assert nvml.calls["nvmlInitWithFlags"] == 2


def test_the_fake_has_the_real_modules_names_signatures_and_constants() -> None:
    """Every nvml* function of the fake exists in nvidia-ml-py with the same parameters and defaults."""
    fake = FakeNvml()
    functions = [n for n in dir(FakeNvml) if n.startswith("nvml") and callable(getattr(FakeNvml, n))]
    assert len(functions) >= 25
    for name in functions:
        real = inspect.signature(getattr(pynvml, name)).parameters.values()
        mine = inspect.signature(getattr(fake, name)).parameters.values()
        assert [(p.name, p.default) for p in mine] == [(p.name, p.default) for p in real], name
    for name in dir(FakeNvml):
        if name.startswith(("NVML_", "nvmlTemperature_")):
            assert getattr(FakeNvml, name) == getattr(pynvml, name), name
    assert FakeNvml.NVMLError is pynvml.NVMLError


def test_the_fake_returns_the_real_structs_and_errors() -> None:
    nvml = FakeNvml([busy_gpu(unsupported={"nvmlDeviceGetPowerUsage"})])
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    assert isinstance(nvml.nvmlDeviceGetMemoryInfo(handle), pynvml.c_nvmlMemory_t)
    v2 = nvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    assert isinstance(v2, pynvml.c_nvmlMemory_v2_t) and v2.version == pynvml.nvmlMemory_v2
    assert isinstance(nvml.nvmlDeviceGetUtilizationRates(handle), pynvml.c_nvmlUtilization_t)
    with pytest.raises(pynvml.NVMLError_NotSupported) as raised:
        nvml.nvmlDeviceGetPowerUsage(handle)
    assert raised.value.value == pynvml.NVML_ERROR_NOT_SUPPORTED and str(raised.value) == "Not Supported"
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetMigMode(handle)  # a GPU without MIG
