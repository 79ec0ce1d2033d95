"""A fake `pynvml` module: the calls `exporter.nvml` makes, with nvidia-ml-py's exact contract.

Tests, the cycle benchmark and the demo run the NVML collector on machines without a GPU. The fake
keeps what the collector depends on faithful to nvidia-ml-py 13.x (`pynvml.py`):

- errors are the real `pynvml.NVMLError`: `NVMLError(code)` returns the generated subclass
  (`NVMLError_NotSupported`, `NVMLError_GpuIsLost`, ...) with `.value` = the code;
- results are the real ctypes structs (`c_nvmlMemory_t` with `.total/.free/.used` in bytes, `.used`
  counting what the driver reserves, and `c_nvmlMemory_v2_t` for `version=nvmlMemory_v2`, whose
  `.used` does not and whose `.reserved` says how much,
  `c_nvmlUtilization_t` with `.gpu/.memory` in percent, `c_nvmlDeviceAttributes`), and the raw
  units are NVML's: milliwatts, millijoules, MHz, degrees C;
- functions have pynvml's names and parameters, and a call before `nvmlInit` raises
  `NVML_ERROR_UNINITIALIZED`; a symbol the configured driver lacks raises
  `NVML_ERROR_FUNCTION_NOT_FOUND`, as pynvml does when `libnvidia-ml` has no such entry point;
- faults: `nvmlDeviceGetTotalEccErrors(handle, UNCORRECTED, VOLATILE_ECC)` returns the count;
  critical XIDs are pushed on `FakeGpu.xid_events` and read through an event set
  (`nvmlEventSetCreate`, `nvmlDeviceRegisterEvents`, `nvmlEventSetWait_v2`, which raises
  `NVML_ERROR_TIMEOUT` when none is pending, `nvmlEventSetFree`), data in pynvml's `c_nvmlEventData_t`;
- MIG: `nvmlDeviceGetMigMode` -> `[current, pending]`, NotSupported on GPUs without MIG;
  `nvmlDeviceGetMigDeviceHandleByIndex` raises `NVML_ERROR_NOT_FOUND` for empty slots; a MIG device's
  name is `"<parent name> MIG <profile>"` and its UUID `MIG-...`; utilization, power, energy,
  temperature and clocks are NotSupported on MIG handles (per physical GPU only).

Importing `pynvml` loads no library (that happens in `nvmlInit`), so this works without a driver.
Every call is counted in `FakeNvml.calls` by function name.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pynvml
from pynvml import NVMLError

#: Functions that NVML answers NotSupported for on a MIG device handle (they are per physical GPU).
MIG_UNSUPPORTED = frozenset({
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetTemperatureV",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceRegisterEvents",
})

GIB = 1024**3


@dataclass
class FakeMig:
    """One MIG device (a GPU instance with one compute instance) on a fake GPU."""

    uuid: str
    gpu_instance_id: int
    profile: str = "1g.10gb"
    compute_instance_id: int = 0
    slot: int | None = None  # index in nvmlDeviceGetMigDeviceHandleByIndex; None = position in the list
    memory_total: int = 10 * GIB  # bytes
    memory_used: int = 0  # bytes, the processes' (nvmlDeviceGetMemoryInfo v2's `used`)
    memory_reserved: int = 0  # bytes the driver keeps for itself: v1's `used` counts them, v2's does not
    slice_count: int = 1  # gpuInstanceSliceCount in nvmlDeviceGetAttributes
    unsupported: set[str] = field(default_factory=lambda: set(MIG_UNSUPPORTED))
    errors: dict[str, int] = field(default_factory=dict)  # function name -> NVML_ERROR_* it raises


@dataclass
class FakeGpu:
    """One physical GPU; values in NVML's raw units. Mutate fields between collections to animate it."""

    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    memory_total: int = 80 * GIB  # bytes
    memory_used: int = 0  # bytes, the processes' (nvmlDeviceGetMemoryInfo v2's `used`)
    memory_reserved: int = 0  # bytes the driver keeps for itself: v1's `used` counts them, v2's does not
    utilization_gpu: int = 0  # percent
    power_mw: int = 70_000  # milliwatts
    power_limit_mw: int = 700_000  # milliwatts
    energy_mj: int = 0  # millijoules since the driver loaded
    temperature_c: int = 30  # degrees C
    sm_clock_mhz: int = 1980  # MHz
    clocks_event_reasons: int = 0  # nvmlClocksEventReason* bit mask
    ecc_uncorrected_volatile: int = 0  # nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE_ECC)
    xid_events: list[int] = field(default_factory=list)  # critical XIDs pending for registered event sets
    unsupported: set[str] = field(default_factory=set)  # function names answering NotSupported
    errors: dict[str, int] = field(default_factory=dict)  # function name -> NVML_ERROR_* it raises
    lost: bool = False  # every call touching this GPU (or its MIG devices) raises GpuIsLost
    mig_capable: bool = False  # False: nvmlDeviceGetMigMode raises NotSupported
    mig_enabled: bool = False
    max_mig_devices: int = 7
    migs: list[FakeMig] = field(default_factory=list)


class _EventSet:
    """An opaque event set (pynvml's `c_nvmlEventSet_t`): the GPUs registered on it, and whether it was freed."""

    __slots__ = ("freed", "gpus", "pending")

    def __init__(self) -> None:
        self.gpus: list[int] = []
        self.pending: list[tuple[int, int]] = []  # (gpu, xid) delivered to this set, not yet read
        self.freed = False


class _Handle:
    """An opaque device handle, as pynvml's `c_nvmlDevice_t` pointer is to its callers."""

    __slots__ = ("gpu", "mig")

    def __init__(self, gpu: int, mig: FakeMig | None = None) -> None:
        self.gpu = gpu
        self.mig = mig


def fake_gpus(count: int, **values: Any) -> list[FakeGpu]:
    """`count` busy H100-like GPUs with distinct UUIDs; keyword arguments override every GPU's fields."""
    gpus = []
    for i in range(count):
        gpu = FakeGpu(
            uuid=f"GPU-{i:08x}-0000-4000-8000-{i:012x}",
            memory_used=60 * GIB + i * GIB,
            utilization_gpu=90,
            power_mw=450_000 + i * 1000,
            energy_mj=1_000_000_000 + i,
            temperature_c=60 + i,
            sm_clock_mhz=1755,
        )
        for key, value in values.items():
            setattr(gpu, key, value)
        gpus.append(gpu)
    return gpus


class FakeNvml:
    """Stands in for the `pynvml` module: pass an instance where the collector takes `nvml`."""

    # the module attributes the collector reads, from the real module
    NVMLError = pynvml.NVMLError
    NVML_ERROR_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_NO_PERMISSION = pynvml.NVML_ERROR_NO_PERMISSION
    NVML_ERROR_NOT_FOUND = pynvml.NVML_ERROR_NOT_FOUND
    NVML_ERROR_INVALID_ARGUMENT = pynvml.NVML_ERROR_INVALID_ARGUMENT
    NVML_ERROR_UNINITIALIZED = pynvml.NVML_ERROR_UNINITIALIZED
    NVML_ERROR_DRIVER_NOT_LOADED = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    NVML_ERROR_LIBRARY_NOT_FOUND = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    NVML_ERROR_FUNCTION_NOT_FOUND = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    NVML_ERROR_GPU_IS_LOST = pynvml.NVML_ERROR_GPU_IS_LOST
    NVML_ERROR_NO_DATA = pynvml.NVML_ERROR_NO_DATA
    NVML_ERROR_NOT_READY = pynvml.NVML_ERROR_NOT_READY
    NVML_ERROR_TIMEOUT = pynvml.NVML_ERROR_TIMEOUT
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = pynvml.NVML_VOLATILE_ECC
    nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE
    NVML_DEVICE_MIG_DISABLE = pynvml.NVML_DEVICE_MIG_DISABLE
    nvmlTemperature_v1 = pynvml.nvmlTemperature_v1

    def __init__(
        self,
        gpus: list[FakeGpu] | None = None,
        *,
        init_error: int | None = None,
        missing_functions: set[str] | None = None,
        driver_version: str = "570.133.20",
    ) -> None:
        """`init_error`: an NVML_ERROR_* code nvmlInit raises (e.g. LIBRARY_NOT_FOUND: no driver);
        `missing_functions`: entry points this driver lacks (FUNCTION_NOT_FOUND, an older driver), by
        the library's names (`nvmlDeviceGetMemoryInfo_v2` is the call with `version=nvmlMemory_v2`)."""
        self.gpus = gpus if gpus is not None else []
        self.init_error = init_error
        self.missing_functions = missing_functions or set()
        self.driver_version = driver_version
        self.calls: Counter[str] = Counter()
        self._refcount = 0
        self.event_sets: list[_EventSet] = []

    # --- the central check every call goes through ---

    def _enter(self, name: str) -> None:
        self.calls[name] += 1
        if self._refcount == 0:
            raise NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        if name in self.missing_functions:
            raise NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    def _gpu(self, name: str, handle: _Handle) -> FakeGpu:
        self._enter(name)
        if not isinstance(handle, _Handle) or not 0 <= handle.gpu < len(self.gpus):
            raise NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[handle.gpu]
        if gpu.lost:
            raise NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        device: FakeGpu | FakeMig = handle.mig if handle.mig is not None else gpu
        if name in device.unsupported:
            raise NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if name in device.errors:
            raise NVMLError(device.errors[name])
        return gpu

    # --- library ---

    def nvmlInitWithFlags(self, flags: int) -> None:
        self.calls["nvmlInitWithFlags"] += 1
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self._refcount += 1

    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self._refcount -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver_version

    # --- devices ---

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if self.gpus[index].lost:
            raise NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return _Handle(index)

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        gpu = self._gpu("nvmlDeviceGetUUID", handle)
        return handle.mig.uuid if handle.mig is not None else gpu.uuid

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        gpu = self._gpu("nvmlDeviceGetName", handle)
        return f"{gpu.name} MIG {handle.mig.profile}" if handle.mig is not None else gpu.name

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: int | None = None) -> Any:
        gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle)
        total, used, reserved = (handle.mig.memory_total, handle.mig.memory_used, 0) if handle.mig else (
            gpu.memory_total, gpu.memory_used, gpu.memory_reserved)
        free = total - used - reserved
        if not version:
            mem = pynvml.c_nvmlMemory_t()
            mem.total, mem.used, mem.free = total, used + reserved, free
        elif version == pynvml.nvmlMemory_v2:  # pynvml calls nvmlDeviceGetMemoryInfo_v2
            if "nvmlDeviceGetMemoryInfo_v2" in self.missing_functions:
                raise NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            mem = pynvml.c_nvmlMemory_v2_t()
            mem.version, mem.total, mem.reserved, mem.used, mem.free = version, total, reserved, used, free
        else:
            raise NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        return mem

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> Any:
        gpu = self._gpu("nvmlDeviceGetUtilizationRates", handle)
        util = pynvml.c_nvmlUtilization_t()
        util.gpu, util.memory = gpu.utilization_gpu, 0
        return util

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        return self._gpu("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:
        return self._gpu("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: _Handle) -> int:
        return self._gpu("nvmlDeviceGetTotalEnergyConsumption", handle).energy_mj

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        gpu = self._gpu("nvmlDeviceGetTemperature", handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature_c

    def nvmlDeviceGetTemperatureV(self, handle: _Handle, sensor: int, version: int = pynvml.nvmlTemperature_v1) -> int:
        gpu = self._gpu("nvmlDeviceGetTemperatureV", handle)
        if version != pynvml.nvmlTemperature_v1:
            raise NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature_c

    def nvmlDeviceGetClockInfo(self, handle: _Handle, type: int) -> int:  # pynvml's parameter name
        gpu = self._gpu("nvmlDeviceGetClockInfo", handle)
        if type != pynvml.NVML_CLOCK_SM:
            raise NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)  # only the SM clock is modelled
        return gpu.sm_clock_mhz

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> int:
        return self._gpu("nvmlDeviceGetCurrentClocksEventReasons", handle).clocks_event_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: _Handle) -> int:
        return self._gpu("nvmlDeviceGetCurrentClocksThrottleReasons", handle).clocks_event_reasons

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, errorType: int, counterType: int) -> int:
        gpu = self._gpu("nvmlDeviceGetTotalEccErrors", handle)
        if errorType != pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED or counterType != pynvml.NVML_VOLATILE_ECC:
            raise NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)  # only the volatile uncorrected count is modelled
        return gpu.ecc_uncorrected_volatile

    # --- events (critical XIDs) ---

    def nvmlEventSetCreate(self) -> _EventSet:
        self._enter("nvmlEventSetCreate")
        events = _EventSet()
        self.event_sets.append(events)
        return events

    def nvmlDeviceRegisterEvents(self, handle: _Handle, eventTypes: int, eventSet: _EventSet) -> None:
        self._gpu("nvmlDeviceRegisterEvents", handle)
        if eventTypes & ~pynvml.nvmlEventTypeXidCriticalError:
            raise NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)  # only critical XIDs are modelled
        if not isinstance(eventSet, _EventSet) or eventSet.freed:
            raise NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        eventSet.gpus.append(handle.gpu)

    def nvmlEventSetWait_v2(self, eventSet: _EventSet, timeoutms: int) -> Any:
        """The next event of a registered GPU; NVML_ERROR_TIMEOUT when none is pending (the fake never waits)."""
        self._enter("nvmlEventSetWait_v2")
        if not isinstance(eventSet, _EventSet) or eventSet.freed:
            raise NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        for gpu in eventSet.gpus:  # a GPU's new XIDs go to every set it is registered on
            eventSet.pending.extend((gpu, xid) for xid in self.gpus[gpu].xid_events)
        for gpu in eventSet.gpus:
            self.gpus[gpu].xid_events.clear()
        if not eventSet.pending:
            # the events raised as a GPU fell off the bus (XID 79 among them) are delivered first: that is
            # how DCGM and nvidia-smi learn of it; only a set with nothing pending says the GPU is lost
            if any(self.gpus[gpu].lost for gpu in eventSet.gpus):
                raise NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
            raise NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        _gpu, xid = eventSet.pending.pop(0)
        data = pynvml.c_nvmlEventData_t()
        data.eventType, data.eventData = pynvml.nvmlEventTypeXidCriticalError, xid
        return data

    def nvmlEventSetFree(self, eventSet: _EventSet) -> None:
        self._enter("nvmlEventSetFree")
        if not isinstance(eventSet, _EventSet) or eventSet.freed:
            raise NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        eventSet.freed = True

    # --- MIG ---

    def nvmlDeviceGetMigMode(self, device: _Handle) -> list[int]:
        gpu = self._gpu("nvmlDeviceGetMigMode", device)
        if not gpu.mig_capable:
            raise NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if gpu.mig_enabled else pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: _Handle) -> int:
        gpu = self._gpu("nvmlDeviceGetMaxMigDeviceCount", device)
        if not gpu.mig_capable:
            raise NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.max_mig_devices

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: _Handle, index: int) -> _Handle:
        gpu = self._gpu("nvmlDeviceGetMigDeviceHandleByIndex", device)
        if device.mig is not None or not gpu.mig_capable:
            raise NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if not 0 <= index < gpu.max_mig_devices:
            raise NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if gpu.mig_enabled:
            for position, mig in enumerate(gpu.migs):
                if (mig.slot if mig.slot is not None else position) == index:
                    return _Handle(device.gpu, mig)
        raise NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceIsMigDeviceHandle(self, device: _Handle) -> Any:
        self._gpu("nvmlDeviceIsMigDeviceHandle", device)
        return pynvml.c_uint(1 if device.mig is not None else 0)  # pynvml returns the c_uint itself

    def nvmlDeviceGetGpuInstanceId(self, device: _Handle) -> int:
        self._gpu("nvmlDeviceGetGpuInstanceId", device)
        if device.mig is None:
            raise NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return device.mig.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, device: _Handle) -> int:
        self._gpu("nvmlDeviceGetComputeInstanceId", device)
        if device.mig is None:
            raise NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return device.mig.compute_instance_id

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice: _Handle) -> _Handle:
        self._gpu("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", migDevice)
        if migDevice.mig is None:
            raise NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(migDevice.gpu)

    def nvmlDeviceGetAttributes(self, device: _Handle) -> Any:
        self._gpu("nvmlDeviceGetAttributes", device)
        attrs = pynvml.c_nvmlDeviceAttributes()
        if device.mig is not None:
            attrs.gpuInstanceSliceCount = device.mig.slice_count
            attrs.computeInstanceSliceCount = device.mig.slice_count
            attrs.memorySizeMB = device.mig.memory_total // (1024 * 1024)
        return attrs
