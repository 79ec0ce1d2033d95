"""NVML collector: each GPU and MIG slice on this node as `GpuMetrics`, in base units.

A thin adapter over nvidia-ml-py's `pynvml` (injectable, so tests and the demo pass
`exporter.fake_nvml.FakeNvml`). What it guarantees, because a node exporter must never die with
its GPUs:

- No driver or no GPU: `nvmlInit` failing is logged once and `collect()` returns `[]`; init is
  retried every `retry_init_s` (the driver may load after the exporter starts).
- A field NVML answers NotSupported (also InvalidArgument, NoPermission) for is skipped for that
  device and never asked again: MIG slices, consumer cards and old GPUs lack several.
- A GPU that errors in any other way (GpuIsLost, Unknown, ResetRequired, ...) is reported with
  `up=False` and no values, the other GPUs still are, and devices are re-enumerated next cycle.
- Units are converted here, once: mW -> W, mJ -> J, MHz -> Hz, percent -> ratio.
- Faults: the clock event reasons are kept as NVML's bit mask (`clock_event_reasons`); uncorrectable
  ECC errors are NVML's volatile count; critical XIDs come from one NVML event set per GPU, drained
  without waiting every cycle (`nvmlEventSetWait_v2` with a 0 ms timeout), and a GPU counts as
  faulted (`xid_active`) for `xid_hold_s` after one. A driver or GPU without event sets gets no XID
  series.

`collect()` runs every few seconds: devices, handles and MIG layout are enumerated once and then
every `rediscover_s`, so a cycle is one NVML call per supported field per device.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from keda_llm.exporter.model import GpuMetrics

log = logging.getLogger(__name__)

# Values from nvml.h (stable ABI); read as numbers so any pynvml-compatible module works.
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_DEVICE_MIG_ENABLE = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_NO_DATA = 21
NVML_ERROR_NOT_READY = 27
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_TIMEOUT = 10
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_EVENT_TYPE_XID_CRITICAL_ERROR = 0x8  # nvmlEventTypeXidCriticalError
#: nvmlMemory_v2 = NVML_STRUCT_VERSION(Memory, 2): sizeof(nvmlMemory_v2_t) (40) | 2 << 24. Version 2's
#: `used` leaves out the memory the driver reserves for itself (480 MiB on an idle H100 80GB HBM3 with
#: driver 580, read on one), as nvidia-smi's "Used" and DCGM's FB_USED do; version 1's counts it.
NVML_MEMORY_V2 = 40 | 2 << 24
#: Events drained from one GPU's event set per cycle at most (a storm of XIDs must not stall a cycle).
MAX_EVENTS_PER_CYCLE = 64

#: Clock event ("throttle") reasons that mean the clocks are held down by a limit, from nvml.h
#: (`nvmlClocksEventReason*` / `nvmlClocksThrottleReason*`, same bits): SW power cap 0x4,
#: HW slowdown 0x8, SW thermal 0x20, HW thermal 0x40, HW power brake 0x80, board limit 0x200,
#: reliability 0x400. Not counted: GPU idle 0x1 (no work, not a limit), applications clocks
#: setting 0x2 and display clock setting 0x100 (configuration, not a limit), sync boost 0x10 (held
#: to match a sync-boost group by the administrator's choice).
THROTTLE_REASONS_HELD_DOWN = 0x4 | 0x8 | 0x20 | 0x40 | 0x80 | 0x200 | 0x400

#: NotSupported-like codes: the field is absent on this device for good.
_ABSENT = frozenset({NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NO_PERMISSION})
#: The driver is older than the call: use the next (older) one for every GPU from now on.
_OLDER_DRIVER = frozenset({NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_ARGUMENT_VERSION_MISMATCH})
#: Transient codes: skip the field this cycle only.
_TRANSIENT = frozenset({NVML_ERROR_NO_DATA, NVML_ERROR_NOT_READY})

_MIG_NAME = re.compile(r"\sMIG\s+(\S+)\s*$")  # NVML names a MIG device "<GPU name> MIG 1g.10gb"


def _set_memory(m: GpuMetrics, mem: Any) -> None:
    m.memory_used_bytes = float(mem.used)
    m.memory_total_bytes = float(mem.total)


def _set_utilization(m: GpuMetrics, util: Any) -> None:
    m.utilization_ratio = util.gpu / 100.0


def _set_power(m: GpuMetrics, milliwatts: int) -> None:
    m.power_watts = milliwatts / 1000.0


def _set_power_limit(m: GpuMetrics, milliwatts: int) -> None:
    m.power_limit_watts = milliwatts / 1000.0


def _set_energy(m: GpuMetrics, millijoules: int) -> None:
    m.energy_joules_total = millijoules / 1000.0


def _set_temperature(m: GpuMetrics, celsius: int) -> None:
    m.temperature_celsius = float(celsius)


def _set_sm_clock(m: GpuMetrics, mhz: int) -> None:
    m.sm_clock_hertz = mhz * 1e6


def _set_throttled(m: GpuMetrics, reasons: int) -> None:
    m.throttled = 1.0 if reasons & THROTTLE_REASONS_HELD_DOWN else 0.0
    m.clock_event_reasons = int(reasons)


def _set_ecc(m: GpuMetrics, count: int) -> None:
    m.ecc_uncorrected_total = float(count)


@dataclass(frozen=True)
class _Reader:
    """One NVML query: the functions that answer it, newest first (older drivers lack the newer)."""

    name: str
    calls: tuple[tuple[str, tuple[int, ...]], ...]  # (pynvml function, arguments after the handle)
    apply: Callable[[GpuMetrics, Any], None]


READERS: tuple[_Reader, ...] = (
    _Reader("memory", (("nvmlDeviceGetMemoryInfo", (NVML_MEMORY_V2,)), ("nvmlDeviceGetMemoryInfo", ())), _set_memory),
    _Reader("utilization", (("nvmlDeviceGetUtilizationRates", ()),), _set_utilization),
    _Reader("power", (("nvmlDeviceGetPowerUsage", ()),), _set_power),
    _Reader("power_limit", (("nvmlDeviceGetEnforcedPowerLimit", ()),), _set_power_limit),
    _Reader("energy", (("nvmlDeviceGetTotalEnergyConsumption", ()),), _set_energy),
    _Reader("temperature", (("nvmlDeviceGetTemperatureV", (NVML_TEMPERATURE_GPU,)),
                            ("nvmlDeviceGetTemperature", (NVML_TEMPERATURE_GPU,))), _set_temperature),
    _Reader("sm_clock", (("nvmlDeviceGetClockInfo", (NVML_CLOCK_SM,)),), _set_sm_clock),
    _Reader("throttled", (("nvmlDeviceGetCurrentClocksEventReasons", ()),
                          ("nvmlDeviceGetCurrentClocksThrottleReasons", ())), _set_throttled),
    _Reader("ecc_uncorrected", (("nvmlDeviceGetTotalEccErrors",
                                 (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)),), _set_ecc),
)


@dataclass
class _Device:
    """A GPU or MIG slice found at discovery; `handle` None = unreachable then."""

    index: str
    uuid: str
    gpu_model: str
    mig_profile: str = ""
    handle: Any = None
    children: list[_Device] = field(default_factory=list)
    events: Any = None  # this GPU's NVML event set for critical XIDs; None = not registered (or unsupported)


class _DeviceDown(Exception):
    """An NVML error that means this device cannot be read now."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _unreachable(device: _Device) -> _Device:
    """`device` and its MIG slices without handles: reported down under the identity they had."""
    return _Device(device.index, device.uuid, device.gpu_model, device.mig_profile,
                   children=[_unreachable(c) for c in device.children])


def _code(error: Exception) -> int:
    value = getattr(error, "value", None)
    return value if isinstance(value, int) else -1


def mig_profile_from_name(name: str) -> str:
    """`"NVIDIA A100-SXM4-40GB MIG 1g.5gb"` -> `"1g.5gb"`; `""` if the name carries no profile."""
    match = _MIG_NAME.search(name)
    return match.group(1) if match else ""


class NvmlCollector:
    """Reads every GPU and MIG slice through NVML; see the module docstring for the failure rules."""

    def __init__(
        self,
        nvml: ModuleType | Any | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        retry_init_s: float = 300.0,
        rediscover_s: float = 60.0,
        xid_hold_s: float = 600.0,
    ) -> None:
        """`nvml`: the pynvml module or a stand-in (None: import pynvml on first use);
        `clock`: monotonic seconds, for the init retry and re-discovery schedules;
        `xid_hold_s`: how long a GPU counts as faulted (`xid_active`) after a critical XID."""
        self._nvml: Any = nvml  # the pynvml module or a stand-in; None until imported
        self._clock = clock
        self._retry_init_s = retry_init_s
        self._rediscover_s = rediscover_s
        self._lock = threading.Lock()
        self._initialized = False
        self._init_failures = 0
        self._next_init_at = float("-inf")
        self._devices: list[_Device] = []
        self._next_discovery_at = float("-inf")
        self._absent: set[tuple[str, str]] = set()  # (device uuid, reader name): never ask again
        self._variant: dict[str, int] = {}  # reader name -> index of the first call this driver has
        self._down_logged: set[str] = set()
        self._xid_hold_s = xid_hold_s
        self._xids: dict[str, tuple[int, float, float]] = {}  # uuid -> (events seen, last code, seen at)

    # --- public ---

    def collect(self) -> list[GpuMetrics]:
        """One sample of every GPU and MIG slice; `[]` while NVML is unavailable. Never raises NVML errors."""
        with self._lock:
            now = self._clock()
            if not self._initialized and not self._init(now):
                return []
            if now >= self._next_discovery_at:
                self._discover(now)
            out: list[GpuMetrics] = []
            for device in self._devices:
                parent = self._read(device, now)
                out.append(parent)
                for child in device.children:
                    out.append(self._read(child, now) if parent.up else self._down(child, now))
            return out

    def close(self) -> None:
        """Shut NVML down (its init is ref-counted); a later `collect()` initializes again."""
        with self._lock:
            if self._initialized and self._nvml is not None:
                for device in self._devices:
                    if device.events is not None:
                        self._free_events(device.events)
                try:
                    self._nvml.nvmlShutdown()
                except Exception as error:  # shutting down: nothing to recover
                    log.debug("nvmlShutdown failed: %s", error)
            self._initialized = False
            self._devices = []
            self._next_init_at = float("-inf")
            self._next_discovery_at = float("-inf")

    # --- init and discovery ---

    def _init(self, now: float) -> bool:
        if now < self._next_init_at:
            return False
        try:
            if self._nvml is None:
                import pynvml

                self._nvml = pynvml
            self._nvml.nvmlInit()
        except Exception as error:  # no library, no driver, no GPU: export no GPU series
            self._init_failures += 1
            self._next_init_at = now + self._retry_init_s
            if self._init_failures == 1:
                log.warning("NVML unavailable (%s): no GPU metrics; retrying every %.0f s",
                            error, self._retry_init_s)
            else:
                log.debug("NVML still unavailable: %s", error)
            return False
        if self._init_failures:
            log.info("NVML initialized after %d failed attempts", self._init_failures)
        self._initialized = True
        self._init_failures = 0
        self._next_discovery_at = float("-inf")
        return True

    def _discover(self, now: float) -> None:
        nvml = self._nvml
        self._next_discovery_at = now + self._rediscover_s
        known = {d.index: d for d in self._devices}
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as error:
            log.warning("nvmlDeviceGetCount failed (%s): reporting the known GPUs as down", error)
            for device in self._devices:
                device.handle = None
            return
        devices = []
        for i in range(count):
            index = str(i)
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                uuid = str(nvml.nvmlDeviceGetUUID(handle))
                name = str(nvml.nvmlDeviceGetName(handle))
            except nvml.NVMLError as error:
                before = known.get(index)
                self._log_down(before.uuid if before else index, error)
                devices.append(_unreachable(before) if before else _Device(index, "", ""))
                continue
            try:
                children = self._discover_migs(handle, index, uuid, name)
            except nvml.NVMLError as error:  # the parent's own read says whether it is lost
                log.warning("GPU %s: listing MIG devices failed: %s", uuid, error)
                children = []
            before = known.get(index)
            events = before.events if before is not None and before.uuid == uuid else None
            device = _Device(index, uuid, name, handle=handle, children=children, events=events)
            if device.events is None:
                device.events = self._register_xid(device)
            devices.append(device)
        for old in self._devices:  # event sets of GPUs gone or re-enumerated under another UUID
            if old.events is not None and all(d.events is not old.events for d in devices):
                self._free_events(old.events)
        self._devices = devices

    def _register_xid(self, device: _Device) -> Any:
        """A new event set with this GPU's critical XIDs registered; None where the driver or GPU cannot."""
        nvml = self._nvml
        if (device.uuid, "xid") in self._absent or getattr(nvml, "nvmlEventSetCreate", None) is None:
            return None
        try:
            events = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as error:
            log.debug("GPU %s: no NVML event set (%s): no XID series", device.uuid, error)
            self._absent.add((device.uuid, "xid"))
            return None
        try:
            nvml.nvmlDeviceRegisterEvents(device.handle, NVML_EVENT_TYPE_XID_CRITICAL_ERROR, events)
        except nvml.NVMLError as error:
            log.debug("GPU %s: critical XID events not supported (%s)", device.uuid, error)
            self._free_events(events)
            if _code(error) in _ABSENT or _code(error) == NVML_ERROR_FUNCTION_NOT_FOUND:
                self._absent.add((device.uuid, "xid"))
            return None
        self._xids.setdefault(device.uuid, (0, -1, -math.inf))
        return events

    def _free_events(self, events: Any) -> None:
        try:
            self._nvml.nvmlEventSetFree(events)
        except Exception as error:  # freeing: nothing to recover
            log.debug("nvmlEventSetFree failed: %s", error)

    def _drain_xid(self, device: _Device, now: float) -> None:
        """Read the critical XIDs that arrived since the last cycle (never waits), into `_xids`."""
        nvml = self._nvml
        count, code, at = self._xids.get(device.uuid, (0, -1, -math.inf))
        for _ in range(MAX_EVENTS_PER_CYCLE):
            try:
                data = nvml.nvmlEventSetWait_v2(device.events, 0)
            except nvml.NVMLError as error:
                if _code(error) != NVML_ERROR_TIMEOUT:  # TIMEOUT: no event pending, the usual answer
                    log.debug("GPU %s: reading XID events failed (%s); registering again", device.uuid, error)
                    self._free_events(device.events)
                    device.events = None
                    self._next_discovery_at = now
                break
            if int(data.eventType) & NVML_EVENT_TYPE_XID_CRITICAL_ERROR:
                count, code, at = count + 1, int(data.eventData), now
                log.warning("GPU %s: critical XID %d", device.uuid, code)
        self._xids[device.uuid] = (count, code, at)

    def _set_xids(self, metrics: GpuMetrics, uuid: str, now: float) -> None:
        """The XID fields of `metrics` from what was seen on `uuid`; left None where no event set ever was."""
        seen = self._xids.get(uuid) if uuid else None
        if seen is None:
            return
        count, code, at = seen
        metrics.xid_errors_total = float(count)
        metrics.last_xid = float(code) if code >= 0 else None
        metrics.xid_active = 1.0 if now - at < self._xid_hold_s else 0.0

    def _discover_migs(self, handle: Any, index: str, uuid: str, name: str) -> list[_Device]:
        nvml = self._nvml
        if (uuid, "mig") in self._absent:
            return []
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        except nvml.NVMLError as error:
            if _code(error) in _ABSENT or _code(error) == NVML_ERROR_FUNCTION_NOT_FOUND:
                self._absent.add((uuid, "mig"))
                return []
            raise
        if current != NVML_DEVICE_MIG_ENABLE:
            return []
        children = []
        for slot in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except nvml.NVMLError as error:
                if _code(error) == NVML_ERROR_NOT_FOUND:  # an empty slot
                    continue
                raise
            gi = int(nvml.nvmlDeviceGetGpuInstanceId(mig))
            mig_uuid = str(nvml.nvmlDeviceGetUUID(mig))
            profile = mig_profile_from_name(str(nvml.nvmlDeviceGetName(mig))) or "unknown"
            children.append(_Device(f"{index}/{gi}", mig_uuid, name, mig_profile=profile, handle=mig))
        return children

    # --- reading ---

    def _read(self, device: _Device, now: float) -> GpuMetrics:
        if device.handle is None:
            return self._down(device, now)
        metrics = GpuMetrics(index=device.index, uuid=device.uuid, gpu_model=device.gpu_model,
                             mig_profile=device.mig_profile)
        try:
            for reader in READERS:
                if (device.uuid, reader.name) not in self._absent:
                    self._read_field(device, reader, metrics)
        except _DeviceDown as down:
            self._log_down(device.uuid or device.index, down.error)
            self._next_discovery_at = now  # it may come back with a new handle, or MIG was reconfigured
            if device.events is not None:  # the XID that says why (79: fallen off the bus) is pending now
                self._drain_xid(device, now)
            return self._down(device, now)
        if device.events is not None:
            self._drain_xid(device, now)
        self._set_xids(metrics, device.uuid, now)
        self._down_logged.discard(device.uuid or device.index)
        return metrics

    def _read_field(self, device: _Device, reader: _Reader, metrics: GpuMetrics) -> None:
        nvml = self._nvml
        variant = self._variant.get(reader.name, 0)
        while variant < len(reader.calls):
            function_name, args = reader.calls[variant]
            function = getattr(nvml, function_name, None)
            if function is None:  # an older nvidia-ml-py without this binding
                variant = self._next_variant(reader, variant)
                continue
            try:
                value = function(device.handle, *args)
            except nvml.NVMLError as error:
                code = _code(error)
                if code in _OLDER_DRIVER:  # the driver lacks this entry point or struct version
                    variant = self._next_variant(reader, variant)
                    continue
                if code in _ABSENT:
                    self._absent.add((device.uuid, reader.name))
                    log.debug("GPU %s: %s not supported (%s); not asking again", device.uuid, reader.name, error)
                    return
                if code in _TRANSIENT:
                    return
                raise _DeviceDown(error) from error
            reader.apply(metrics, value)
            return
        self._absent.add((device.uuid, reader.name))  # no call this driver offers answers it

    def _next_variant(self, reader: _Reader, variant: int) -> int:
        self._variant[reader.name] = variant + 1
        return variant + 1

    def _down(self, device: _Device, now: float) -> GpuMetrics:
        """`device` reported down: no values, but the critical XIDs already seen on it, and their hold.

        A GPU often becomes unreadable right after a critical XID (a double-bit ECC error that needs a
        reset, a GPU fallen off the bus): dropping the XID fields then would end its `gpu_xid` hold at
        the moment the fault is worst, and make its XID counter vanish. A down GPU that never had one
        carries no XID series, as before."""
        metrics = GpuMetrics(index=device.index, uuid=device.uuid, gpu_model=device.gpu_model, up=False,
                             mig_profile=device.mig_profile)
        if self._xids.get(device.uuid, (0,))[0] > 0:
            self._set_xids(metrics, device.uuid, now)
        return metrics

    def _log_down(self, key: str, error: Exception) -> None:
        if key not in self._down_logged:
            self._down_logged.add(key)
            log.warning("GPU %s is down: %s (%s)", key, error, type(error).__name__)
