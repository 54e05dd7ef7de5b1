"""A simulated libnvidia-ml, placed under the real pynvml bindings.

pynvml finds every C function with `getattr(pynvml.nvmlLib, name)`. `SimulatedNvml` is an
object whose attributes behave like those C functions: they take the ctypes arguments
pynvml passes (byref() out-parameters, c_uint, string buffers, struct pointers), write
results through them and return an `nvmlReturn_t` integer. A function it does not have
is a missing attribute, which pynvml turns into `NVMLError_FunctionNotFound`. So the
structs, units, exceptions and version fallbacks are pynvml's own, and anything written
against pynvml (the agent, gpustat, nvitop) runs on it unchanged.

Fleet simulation runs many nodes in one process: `install(DispatchingNvml())` once, then
each node's threads `bind()` their own `SimulatedNvml` in their contextvars context.
"""

from __future__ import annotations

import contextvars
import ctypes
import dataclasses
import itertools
import os
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Concatenate, ParamSpec

import pynvml

from agent.sim import scenarios
from agent.sim.gpu_model import (
    EVENT_DOUBLE_BIT_ECC,
    EVENT_XID,
    Activity,
    GpuEvent,
    SimulatedGpu,
    bar1_total_bytes,
)
from agent.sim.profiles import Profile, get_profile, gpu_pci_bus_id, nvswitch_pci_bus_id
from agent.sim.workload import Workload

# nvmlReturn_t (nvml.h); read from pynvml so the two never disagree
SUCCESS: int = pynvml.NVML_SUCCESS
ERROR_UNINITIALIZED: int = pynvml.NVML_ERROR_UNINITIALIZED
ERROR_INVALID_ARGUMENT: int = pynvml.NVML_ERROR_INVALID_ARGUMENT
ERROR_NOT_SUPPORTED: int = pynvml.NVML_ERROR_NOT_SUPPORTED
ERROR_NOT_FOUND: int = pynvml.NVML_ERROR_NOT_FOUND
ERROR_INSUFFICIENT_SIZE: int = pynvml.NVML_ERROR_INSUFFICIENT_SIZE
ERROR_TIMEOUT: int = pynvml.NVML_ERROR_TIMEOUT
ERROR_GPU_IS_LOST: int = pynvml.NVML_ERROR_GPU_IS_LOST
ERROR_ARGUMENT_VERSION_MISMATCH: int = pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
ERROR_UNKNOWN: int = pynvml.NVML_ERROR_UNKNOWN

# nvmlErrorString texts of the real library (NVML 12.x)
_ERROR_STRINGS = {
    0: "Success",
    1: "Uninitialized",
    2: "Invalid Argument",
    3: "Not Supported",
    4: "Insufficient Permissions",
    5: "Already Initialized",
    6: "Not Found",
    7: "Insufficient Size",
    8: "Insufficient External Power",
    9: "Driver Not Loaded",
    10: "Timeout",
    11: "Interrupt request issue",
    12: "NVML Shared Library Not Found",
    13: "Function Not Found",
    14: "Corrupted infoROM",
    15: "GPU is lost",
    16: "GPU requires restart",
    17: "The operating system has blocked the request.",
    18: "RM has detected an NVML/RM version mismatch.",
    19: "In use by another client",
    20: "Insufficient Memory",
    21: "No data",
    25: "Argument version mismatch",
    999: "Unknown Error",
}

_ARCHITECTURES = {
    "pascal": pynvml.NVML_DEVICE_ARCH_PASCAL,
    "volta": pynvml.NVML_DEVICE_ARCH_VOLTA,
    "turing": pynvml.NVML_DEVICE_ARCH_TURING,
    "ampere": pynvml.NVML_DEVICE_ARCH_AMPERE,
    "hopper": pynvml.NVML_DEVICE_ARCH_HOPPER,
}

# PCI device ids (pci.ids, vendor 10de); pciDeviceId is (device << 16) | vendor
_PCI_DEVICE_IDS = {
    "Tesla P100-SXM2-16GB": 0x15F9,
    "Tesla V100-SXM2-16GB": 0x1DB1,
    "Tesla V100-SXM2-32GB": 0x1DB5,
    "Tesla V100-DGXS-32GB": 0x1DB7,
    "NVIDIA A100-SXM4-40GB": 0x20B0,
    "NVIDIA H100 80GB HBM3": 0x2330,
    "Tesla T4": 0x1EB8,
    "NVIDIA GeForce GTX 1080 Ti": 0x1B06,
    "NVIDIA GeForce RTX 2080 Ti": 0x1E07,
}
# NVSwitch generations by the GPU generation they serve (pci.ids: GV100 NVSwitch 1ac1,
# GA100 NVSwitch 1af1, GH100 NVSwitch 22a3)
_NVSWITCH_DEVICE_IDS = {"volta": 0x1AC1, "ampere": 0x1AF1, "hopper": 0x22A3}
_NVIDIA_VENDOR = 0x10DE

# nvmlNvlinkVersion_t: NVLink 1.0 -> 1, 2.0 -> 2, 3.0 -> 4, 4.0 -> 6 (pynvml constants)
_NVLINK_VERSION_ENUM = {
    1: pynvml.NVML_NVLINK_VERSION_1_0,
    2: pynvml.NVML_NVLINK_VERSION_2_0,
    3: pynvml.NVML_NVLINK_VERSION_3_0,
    4: pynvml.NVML_NVLINK_VERSION_4_0,
}
_NVLINK_ERROR_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data", "ecc")  # DL_* 0..4

_ALL_REASONS = 0x1FF  # GpuIdle .. DisplayClockSetting
_NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId/computeInstanceId outside MIG
_TRAINING_PID_BASE = 20000

P = ParamSpec("P")

_handle_spaces = itertools.count(1)


# --- ctypes plumbing -------------------------------------------------------------------


def _target(ref: Any) -> Any:
    """The ctypes object behind a byref() or pointer() argument."""
    obj = getattr(ref, "_obj", None)  # CArgObject from byref()
    if obj is not None:
        return obj
    if isinstance(ref, ctypes._Pointer):
        return ref.contents
    return ref


def _set(ref: Any, value: int | float) -> None:
    _target(ref).value = value


def _int(arg: Any) -> int:
    return int(arg.value) if hasattr(arg, "value") else int(arg)


def _address(handle: Any) -> int | None:
    if handle is None:
        return None
    if isinstance(handle, int):
        return handle
    if isinstance(handle, ctypes.c_void_p):
        return handle.value
    try:
        value = ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None
    return int(value) if value is not None else None


def _write_pointer(ref: Any, address: int) -> None:
    ctypes.c_void_p.from_buffer(_target(ref)).value = address


def _write_string(buffer: Any, length: Any, text: str) -> int:
    encoded = text.encode()
    if len(encoded) + 1 > _int(length):
        return ERROR_INSUFFICIENT_SIZE
    buffer.value = encoded
    return SUCCESS


def _error_string(code: Any) -> bytes:
    return _ERROR_STRINGS.get(_int(code), "Unknown Error").encode()


# --- call decorators: init check, lazy integration, handle -> GPU ---------------------


def _lib_call(
    fn: Callable[Concatenate[SimulatedNvml, P], int],
) -> Callable[Concatenate[SimulatedNvml, P], int]:
    def call(self: SimulatedNvml, /, *args: P.args, **kwargs: P.kwargs) -> int:
        with self._lock:
            if not self._init_count:
                return ERROR_UNINITIALIZED
            self._advance_locked()
            return fn(self, *args, **kwargs)

    call.__name__ = fn.__name__
    call.__doc__ = fn.__doc__
    return call


def _device_call(
    fn: Callable[Concatenate[SimulatedNvml, SimulatedGpu, P], int],
) -> Callable[Concatenate[SimulatedNvml, Any, P], int]:
    def call(self: SimulatedNvml, handle: Any, /, *args: P.args, **kwargs: P.kwargs) -> int:
        with self._lock:
            if not self._init_count:
                return ERROR_UNINITIALIZED
            gpu = self._gpu_of(handle)
            if gpu is None:
                return ERROR_INVALID_ARGUMENT
            self._advance_locked()
            if gpu.lost:
                return ERROR_GPU_IS_LOST
            return fn(self, gpu, *args, **kwargs)

    call.__name__ = fn.__name__
    call.__doc__ = fn.__doc__
    return call


@dataclasses.dataclass
class _EventSet:
    registered: dict[int, int] = dataclasses.field(default_factory=dict)  # gpu -> mask
    # bounded like the driver's queue: a storm must not grow memory without limit
    queue: deque[GpuEvent] = dataclasses.field(default_factory=lambda: deque(maxlen=1024))


class SimulatedNvml:
    """The simulated C library of one node. Attributes named nvml* are the C functions."""

    def __init__(
        self,
        profile: Profile | str,
        *,
        scenario: str | None = None,
        gpu_scenarios: Mapping[int, str] | None = None,
        workload: Workload | None = None,
        seed: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.profile = get_profile(profile) if isinstance(profile, str) else profile
        self.scenario = scenarios.validate(scenario) if scenario is not None else None
        per_gpu = dict(gpu_scenarios or {})
        for index, name in per_gpu.items():
            scenarios.validate(name)
            if not 0 <= index < self.profile.gpu_count:
                raise ValueError(
                    f"gpu_scenarios: no GPU {index} in {self.profile.name} "
                    f"({self.profile.gpu_count} GPUs)"
                )
        self.workload = workload or Workload(
            kind=scenarios.workload_kind(self.scenario or "healthy-training"), seed=seed
        )
        self.seed = seed
        self.clock = clock
        self._lock = threading.RLock()
        self._events_changed = threading.Condition(self._lock)
        self._init_count = 0
        self._time = clock()
        # Timestamps NVML reports are CPU epoch microseconds. On the real clock, use the
        # real epoch; on an injected clock a fixed epoch keeps runs reproducible.
        if clock is time.monotonic:
            self._epoch_offset = time.time() - time.monotonic()
        else:
            self._epoch_offset = 1_700_000_000.0
        space = next(_handle_spaces) << 32
        self._handle_base = space + 0x1000
        self._next_object = itertools.count(space + 0x8000_0000, 0x10)
        self._event_sets: dict[int, _EventSet] = {}
        self._gpm_samples: dict[int, tuple[int, Activity] | None] = {}

        self.gpus: list[SimulatedGpu] = []
        for index, model in enumerate(self.profile.gpus):
            gpu_workload = self.workload
            own = per_gpu.get(index)
            if own is not None and own in ("idle", "healthy-training"):
                gpu_workload = dataclasses.replace(self.workload, kind=scenarios.workload_kind(own))
            self.gpus.append(
                SimulatedGpu(
                    index,
                    model,
                    self.profile.nvlinks[index],
                    gpu_workload,
                    seed=seed,
                    start_time=self._time,
                    node_name=self.profile.name,
                )
            )
        if self.scenario in scenarios.FAULT_SCENARIOS:
            victim = scenarios.default_victim(
                self.scenario, [len(links) for links in self.profile.nvlinks]
            )
            scenarios.apply(self.scenario, self.gpus[victim])
        for index, name in per_gpu.items():
            scenarios.apply(name, self.gpus[index])

    # --- time ------------------------------------------------------------------------

    def advance(self) -> None:
        """Integrate every GPU up to clock(); every C call does this lazily too."""
        with self._lock:
            self._advance_locked()

    def _advance_locked(self) -> None:
        now = self.clock()
        if now <= self._time:
            return
        self._time = now
        delivered = False
        for gpu in self.gpus:
            gpu.step(now)
            for event in gpu.drain_events():
                for event_set in self._event_sets.values():
                    if event_set.registered.get(event.gpu, 0) & event.event_type:
                        event_set.queue.append(event)
                        delivered = True
        if delivered:
            self._events_changed.notify_all()

    def _timestamp_us(self) -> int:
        return int((self._time + self._epoch_offset) * 1e6)

    # --- handles ---------------------------------------------------------------------

    def handle_address(self, index: int) -> int:
        """The opaque device-handle value of GPU `index` (distinct across libraries)."""
        return self._handle_base + 0x100 * index

    def _gpu_of(self, handle: Any) -> SimulatedGpu | None:
        address = _address(handle)
        if address is None:
            return None
        offset = address - self._handle_base
        if offset < 0 or offset % 0x100:
            return None
        index = offset // 0x100
        return self.gpus[index] if index < len(self.gpus) else None

    def _pci_device_id(self, name: str) -> int:
        return (_PCI_DEVICE_IDS.get(name, 0x1DB1) << 16) | _NVIDIA_VENDOR

    def _fill_pci(self, info: Any, bus_id: str, device_id: int) -> None:
        domain, bus, rest = bus_id.split(":")
        info.busId = bus_id.encode()
        info.busIdLegacy = bus_id[4:].encode()  # 4-digit domain form, 16-byte field
        info.domain = int(domain, 16)
        info.bus = int(bus, 16)
        info.device = int(rest.split(".")[0], 16)
        info.pciDeviceId = device_id
        info.pciSubSystemId = (device_id & 0xFFFF0000) | _NVIDIA_VENDOR  # ~ NVIDIA-built board

    # --- library / system ------------------------------------------------------------

    def nvmlInitWithFlags(self, flags: Any = 0) -> int:
        with self._lock:
            self._init_count += 1
            self._advance_locked()
        return SUCCESS

    def nvmlInit_v2(self) -> int:
        return self.nvmlInitWithFlags(0)

    def nvmlShutdown(self) -> int:
        with self._lock:
            if not self._init_count:
                return ERROR_UNINITIALIZED
            self._init_count -= 1
        return SUCCESS

    nvmlErrorString = staticmethod(_error_string)  # pynvml sets .restype on it

    @_lib_call
    def nvmlSystemGetDriverVersion(self, buffer: Any, length: Any) -> int:
        return _write_string(buffer, length, self.profile.driver_version)

    @_lib_call
    def nvmlSystemGetNVMLVersion(self, buffer: Any, length: Any) -> int:
        # e.g. "12.570.124.06": CUDA major, then the driver version
        major = self.profile.cuda_driver_version // 1000
        return _write_string(buffer, length, f"{major}.{self.profile.driver_version}")

    @_lib_call
    def nvmlSystemGetCudaDriverVersion(self, version: Any) -> int:
        _set(version, self.profile.cuda_driver_version)
        return SUCCESS

    @_lib_call
    def nvmlSystemGetCudaDriverVersion_v2(self, version: Any) -> int:
        _set(version, self.profile.cuda_driver_version)
        return SUCCESS

    @_lib_call
    def nvmlDeviceGetCount_v2(self, count: Any) -> int:
        _set(count, len(self.gpus))
        return SUCCESS

    def _write_handle(self, gpu: SimulatedGpu, device: Any) -> int:
        if gpu.lost:
            return ERROR_GPU_IS_LOST
        _write_pointer(device, self.handle_address(gpu.index))
        return SUCCESS

    @_lib_call
    def nvmlDeviceGetHandleByIndex_v2(self, index: Any, device: Any) -> int:
        i = _int(index)
        if not 0 <= i < len(self.gpus):
            return ERROR_INVALID_ARGUMENT
        return self._write_handle(self.gpus[i], device)

    @_lib_call
    def nvmlDeviceGetHandleByUUID(self, uuid: Any, device: Any) -> int:
        wanted = _target(uuid).value
        text = wanted.decode() if isinstance(wanted, bytes) else str(wanted)
        for gpu in self.gpus:
            if gpu.uuid == text:
                return self._write_handle(gpu, device)
        return ERROR_NOT_FOUND

    @_lib_call
    def nvmlDeviceGetHandleByPciBusId_v2(self, bus_id: Any, device: Any) -> int:
        wanted = _target(bus_id).value
        text = (wanted.decode() if isinstance(wanted, bytes) else str(wanted)).lower()
        try:
            key = _bus_key(text)
        except ValueError:
            return ERROR_INVALID_ARGUMENT
        for gpu in self.gpus:
            if _bus_key(gpu_pci_bus_id(self.profile, gpu.index)) == key:
                return self._write_handle(gpu, device)
        return ERROR_NOT_FOUND

    # --- identity --------------------------------------------------------------------

    @_device_call
    def nvmlDeviceGetIndex(self, gpu: SimulatedGpu, index: Any) -> int:
        _set(index, gpu.index)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetMinorNumber(self, gpu: SimulatedGpu, minor: Any) -> int:
        _set(minor, gpu.index)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetName(self, gpu: SimulatedGpu, buffer: Any, length: Any) -> int:
        return _write_string(buffer, length, gpu.model.name)

    @_device_call
    def nvmlDeviceGetUUID(self, gpu: SimulatedGpu, buffer: Any, length: Any) -> int:
        return _write_string(buffer, length, gpu.uuid)

    @_device_call
    def nvmlDeviceGetSerial(self, gpu: SimulatedGpu, buffer: Any, length: Any) -> int:
        if gpu.model.fan:  # GeForce boards have no board serial in the InfoROM
            return ERROR_NOT_SUPPORTED
        return _write_string(buffer, length, gpu.serial)

    @_device_call
    def nvmlDeviceGetVbiosVersion(self, gpu: SimulatedGpu, buffer: Any, length: Any) -> int:
        return _write_string(buffer, length, gpu.model.vbios_version)

    @_device_call
    def nvmlDeviceGetPciInfo_v3(self, gpu: SimulatedGpu, info: Any) -> int:
        bus_id = gpu_pci_bus_id(self.profile, gpu.index)
        self._fill_pci(_target(info), bus_id, self._pci_device_id(gpu.model.name))
        return SUCCESS

    @_device_call
    def nvmlDeviceGetArchitecture(self, gpu: SimulatedGpu, arch: Any) -> int:
        _set(arch, _ARCHITECTURES[gpu.model.architecture])
        return SUCCESS

    @_device_call
    def nvmlDeviceGetCudaComputeCapability(self, gpu: SimulatedGpu, major: Any, minor: Any) -> int:
        _set(major, gpu.model.cuda_compute_capability[0])
        _set(minor, gpu.model.cuda_compute_capability[1])
        return SUCCESS

    @_device_call
    def nvmlDeviceGetPersistenceMode(self, gpu: SimulatedGpu, mode: Any) -> int:
        # DGX OS enables persistence mode; desktops run without the daemon
        _set(mode, 0 if gpu.model.fan else 1)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetComputeMode(self, gpu: SimulatedGpu, mode: Any) -> int:
        _set(mode, pynvml.NVML_COMPUTEMODE_DEFAULT)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetDisplayMode(self, gpu: SimulatedGpu, mode: Any) -> int:
        # a workstation's first GeForce drives the monitor
        _set(mode, 1 if gpu.model.fan and gpu.index == 0 else 0)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetMigMode(self, gpu: SimulatedGpu, current: Any, pending: Any) -> int:
        if not gpu.model.mig:
            return ERROR_NOT_SUPPORTED
        _set(current, 0)
        _set(pending, 0)
        return SUCCESS

    # --- utilization and memory ------------------------------------------------------

    @_device_call
    def nvmlDeviceGetUtilizationRates(self, gpu: SimulatedGpu, utilization: Any) -> int:
        util = _target(utilization)
        util.gpu = round(100 * gpu.utilization)
        util.memory = round(100 * gpu.memory_utilization)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetEncoderUtilization(
        self, gpu: SimulatedGpu, utilization: Any, period_us: Any
    ) -> int:
        _set(utilization, 0)  # training jobs do not encode video
        _set(period_us, 167000)  # ~ the driver's encoder sampling period
        return SUCCESS

    @_device_call
    def nvmlDeviceGetDecoderUtilization(
        self, gpu: SimulatedGpu, utilization: Any, period_us: Any
    ) -> int:
        _set(utilization, 0)
        _set(period_us, 167000)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetMemoryInfo(self, gpu: SimulatedGpu, memory: Any) -> int:
        info = _target(memory)
        total = gpu.model.memory_bytes
        used = gpu.memory_used_bytes + gpu.memory_reserved_bytes  # v1 counts reserved as used
        info.total = total
        info.used = used
        info.free = total - used
        return SUCCESS

    @_device_call
    def nvmlDeviceGetMemoryInfo_v2(self, gpu: SimulatedGpu, memory: Any) -> int:
        info = _target(memory)
        if info.version != pynvml.nvmlMemory_v2:
            return ERROR_ARGUMENT_VERSION_MISMATCH
        total = gpu.model.memory_bytes
        info.total = total
        info.reserved = gpu.memory_reserved_bytes
        info.used = gpu.memory_used_bytes
        info.free = total - gpu.memory_reserved_bytes - gpu.memory_used_bytes
        return SUCCESS

    @_device_call
    def nvmlDeviceGetBAR1MemoryInfo(self, gpu: SimulatedGpu, memory: Any) -> int:
        info = _target(memory)
        total = bar1_total_bytes(gpu.model)
        used = 5 * 1024 * 1024 if gpu.memory_used_bytes else 2 * 1024 * 1024  # ~ nvidia-smi
        info.bar1Total = total
        info.bar1Used = used
        info.bar1Free = total - used
        return SUCCESS

    def _processes(self, gpu: SimulatedGpu) -> list[tuple[int, int]]:
        """(pid, bytes) of the compute processes: one job worker per GPU."""
        held = gpu.process_memory_bytes
        if not held:
            return []
        return [(_TRAINING_PID_BASE + 1000 * (self.seed % 40) + gpu.index, held)]

    def _write_processes(self, procs: list[tuple[int, int]], count: Any, infos: Any) -> int:
        available = _int(_target(count))
        _set(count, len(procs))
        if infos is None or available < len(procs):
            return ERROR_INSUFFICIENT_SIZE if procs else SUCCESS
        array = _target(infos)
        for i, (pid, used) in enumerate(procs):
            array[i].pid = pid
            array[i].usedGpuMemory = used
            array[i].gpuInstanceId = _NO_INSTANCE
            array[i].computeInstanceId = _NO_INSTANCE
        return SUCCESS

    @_device_call
    def nvmlDeviceGetComputeRunningProcesses_v3(
        self, gpu: SimulatedGpu, count: Any, infos: Any
    ) -> int:
        return self._write_processes(self._processes(gpu), count, infos)

    @_device_call
    def nvmlDeviceGetGraphicsRunningProcesses_v3(
        self, gpu: SimulatedGpu, count: Any, infos: Any
    ) -> int:
        return self._write_processes([], count, infos)

    # --- power and energy ------------------------------------------------------------

    @_device_call
    def nvmlDeviceGetPowerUsage(self, gpu: SimulatedGpu, power: Any) -> int:
        _set(power, round(gpu.power_w * 1000))
        return SUCCESS

    @_device_call
    def nvmlDeviceGetEnforcedPowerLimit(self, gpu: SimulatedGpu, limit: Any) -> int:
        _set(limit, round(gpu.power_limit_w * 1000))
        return SUCCESS

    @_device_call
    def nvmlDeviceGetPowerManagementLimit(self, gpu: SimulatedGpu, limit: Any) -> int:
        _set(limit, round(gpu.power_limit_w * 1000))
        return SUCCESS

    @_device_call
    def nvmlDeviceGetPowerManagementDefaultLimit(self, gpu: SimulatedGpu, limit: Any) -> int:
        _set(limit, round(gpu.model.tdp_watts * 1000))
        return SUCCESS

    @_device_call
    def nvmlDeviceGetPowerManagementLimitConstraints(
        self, gpu: SimulatedGpu, low: Any, high: Any
    ) -> int:
        _set(low, round(gpu.model.min_power_limit_watts * 1000))
        _set(high, round(gpu.model.max_power_limit_watts * 1000))
        return SUCCESS

    @_device_call
    def nvmlDeviceGetTotalEnergyConsumption(self, gpu: SimulatedGpu, energy: Any) -> int:
        if not gpu.model.energy_counter:
            return ERROR_NOT_SUPPORTED
        _set(energy, int(gpu.energy_mj))
        return SUCCESS

    @_device_call
    def nvmlDeviceGetPerformanceState(self, gpu: SimulatedGpu, pstate: Any) -> int:
        _set(pstate, gpu.pstate)
        return SUCCESS

    # --- temperature and fans --------------------------------------------------------

    def _temperature(self, gpu: SimulatedGpu, sensor: int) -> int | None:
        return round(gpu.temperature_c) if sensor == pynvml.NVML_TEMPERATURE_GPU else None

    @_device_call
    def nvmlDeviceGetTemperature(self, gpu: SimulatedGpu, sensor: Any, temp: Any) -> int:
        value = self._temperature(gpu, _int(sensor))
        if value is None:
            return ERROR_INVALID_ARGUMENT
        _set(temp, value)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetTemperatureV(self, gpu: SimulatedGpu, temperature: Any) -> int:
        info = _target(temperature)
        if info.version != pynvml.nvmlTemperature_v1:
            return ERROR_ARGUMENT_VERSION_MISMATCH
        value = self._temperature(gpu, int(info.sensorType))
        if value is None:
            return ERROR_INVALID_ARGUMENT
        info.temperature = value
        return SUCCESS

    @_device_call
    def nvmlDeviceGetTemperatureThreshold(self, gpu: SimulatedGpu, kind: Any, temp: Any) -> int:
        model = gpu.model
        thresholds: dict[int, int | None] = {
            pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: model.temp_shutdown_c,
            pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: model.temp_slowdown_c,
            pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX: model.temp_memory_max_c,
            pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: model.temp_gpu_max_c,
        }
        which = _int(kind)
        if which >= pynvml.NVML_TEMPERATURE_THRESHOLD_COUNT:
            return ERROR_INVALID_ARGUMENT
        value = thresholds.get(which)
        if value is None:
            return ERROR_NOT_SUPPORTED
        _set(temp, value)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetFanSpeed(self, gpu: SimulatedGpu, speed: Any) -> int:
        if not gpu.model.fan:
            return ERROR_NOT_SUPPORTED
        _set(speed, gpu.fan_percent)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetFanSpeed_v2(self, gpu: SimulatedGpu, fan: Any, speed: Any) -> int:
        if not gpu.model.fan:
            return ERROR_NOT_SUPPORTED
        if _int(fan) != 0:
            return ERROR_INVALID_ARGUMENT
        _set(speed, gpu.fan_percent)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetNumFans(self, gpu: SimulatedGpu, count: Any) -> int:
        if not gpu.model.fan:
            return ERROR_NOT_SUPPORTED
        _set(count, 1)  # multi-fan GeForce coolers are driven as one fan
        return SUCCESS

    # --- clocks and throttling -------------------------------------------------------

    def _clock(self, gpu: SimulatedGpu, clock_type: int, maximum: bool) -> int | None:
        if clock_type in (pynvml.NVML_CLOCK_GRAPHICS, pynvml.NVML_CLOCK_SM):
            return gpu.model.max_sm_clock_mhz if maximum else gpu.sm_clock_mhz
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return gpu.model.max_memory_clock_mhz if maximum else gpu.memory_clock_mhz
        if clock_type == pynvml.NVML_CLOCK_VIDEO:
            return gpu.max_video_clock_mhz if maximum else gpu.video_clock_mhz
        return None

    @_device_call
    def nvmlDeviceGetClockInfo(self, gpu: SimulatedGpu, clock_type: Any, mhz: Any) -> int:
        value = self._clock(gpu, _int(clock_type), maximum=False)
        if value is None:
            return ERROR_INVALID_ARGUMENT
        _set(mhz, value)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetMaxClockInfo(self, gpu: SimulatedGpu, clock_type: Any, mhz: Any) -> int:
        value = self._clock(gpu, _int(clock_type), maximum=True)
        if value is None:
            return ERROR_INVALID_ARGUMENT
        _set(mhz, value)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetClock(
        self, gpu: SimulatedGpu, clock_type: Any, clock_id: Any, mhz: Any
    ) -> int:
        which = _int(clock_id)
        if which >= pynvml.NVML_CLOCK_ID_COUNT:
            return ERROR_INVALID_ARGUMENT
        # application-clock targets and the boost max all sit at the board maximum
        value = self._clock(gpu, _int(clock_type), maximum=which != pynvml.NVML_CLOCK_ID_CURRENT)
        if value is None:
            return ERROR_INVALID_ARGUMENT
        _set(mhz, value)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetCurrentClocksEventReasons(self, gpu: SimulatedGpu, reasons: Any) -> int:
        _set(reasons, gpu.reasons)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, gpu: SimulatedGpu, reasons: Any) -> int:
        _set(reasons, gpu.reasons)
        return SUCCESS

    def _supported_reasons(self, gpu: SimulatedGpu) -> int:
        # sync boost is a data-centre feature; consumer boards never report it
        return _ALL_REASONS & ~0x10 if gpu.model.fan else _ALL_REASONS

    @_device_call
    def nvmlDeviceGetSupportedClocksEventReasons(self, gpu: SimulatedGpu, reasons: Any) -> int:
        _set(reasons, self._supported_reasons(gpu))
        return SUCCESS

    @_device_call
    def nvmlDeviceGetSupportedClocksThrottleReasons(self, gpu: SimulatedGpu, reasons: Any) -> int:
        _set(reasons, self._supported_reasons(gpu))
        return SUCCESS

    @_device_call
    def nvmlDeviceGetViolationStatus(self, gpu: SimulatedGpu, policy: Any, violation: Any) -> int:
        if not gpu.model.violation_counters:
            return ERROR_NOT_SUPPORTED
        which = _int(policy)
        if which >= pynvml.NVML_PERF_POLICY_COUNT:
            return ERROR_INVALID_ARGUMENT
        nanoseconds = {
            pynvml.NVML_PERF_POLICY_POWER: gpu.power_violation_ns,
            pynvml.NVML_PERF_POLICY_THERMAL: gpu.thermal_violation_ns,
            pynvml.NVML_PERF_POLICY_LOW_UTILIZATION: gpu.low_util_violation_ns,
        }.get(which, 0.0)
        info = _target(violation)
        info.referenceTime = self._timestamp_us()
        info.violationTime = int(nanoseconds)
        return SUCCESS

    # --- PCIe ------------------------------------------------------------------------

    @_device_call
    def nvmlDeviceGetPcieThroughput(self, gpu: SimulatedGpu, counter: Any, value: Any) -> int:
        which = _int(counter)
        if which == pynvml.NVML_PCIE_UTIL_TX_BYTES:
            _set(value, int(gpu.pcie_tx_rate / 1000))  # KB/s
        elif which == pynvml.NVML_PCIE_UTIL_RX_BYTES:
            _set(value, int(gpu.pcie_rx_rate / 1000))
        else:
            return ERROR_INVALID_ARGUMENT
        return SUCCESS

    @_device_call
    def nvmlDeviceGetPcieReplayCounter(self, gpu: SimulatedGpu, value: Any) -> int:
        _set(value, int(gpu.pcie_replays))
        return SUCCESS

    @_device_call
    def nvmlDeviceGetCurrPcieLinkGeneration(self, gpu: SimulatedGpu, value: Any) -> int:
        _set(value, gpu.pcie_generation_current)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetMaxPcieLinkGeneration(self, gpu: SimulatedGpu, value: Any) -> int:
        _set(value, gpu.model.pcie_generation)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetCurrPcieLinkWidth(self, gpu: SimulatedGpu, value: Any) -> int:
        _set(value, gpu.model.pcie_width)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetMaxPcieLinkWidth(self, gpu: SimulatedGpu, value: Any) -> int:
        _set(value, gpu.model.pcie_width)
        return SUCCESS

    # --- ECC, retired pages, row remapping -------------------------------------------

    def _ecc_total(self, gpu: SimulatedGpu, error_type: int, counter_type: int) -> int | None:
        ecc = gpu.ecc
        table = {
            (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC): (
                ecc.corrected_volatile
            ),
            (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC): (
                ecc.uncorrected_volatile
            ),
            (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_AGGREGATE_ECC): (
                ecc.corrected_aggregate
            ),
            (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_AGGREGATE_ECC): (
                ecc.uncorrected_aggregate
            ),
        }
        return table.get((error_type, counter_type))

    @_device_call
    def nvmlDeviceGetEccMode(self, gpu: SimulatedGpu, current: Any, pending: Any) -> int:
        if not gpu.model.ecc:
            return ERROR_NOT_SUPPORTED
        _set(current, pynvml.NVML_FEATURE_ENABLED)
        _set(pending, pynvml.NVML_FEATURE_ENABLED)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetTotalEccErrors(
        self, gpu: SimulatedGpu, error_type: Any, counter_type: Any, count: Any
    ) -> int:
        if not gpu.model.ecc:
            return ERROR_NOT_SUPPORTED
        value = self._ecc_total(gpu, _int(error_type), _int(counter_type))
        if value is None:
            return ERROR_INVALID_ARGUMENT
        _set(count, value)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetMemoryErrorCounter(
        self, gpu: SimulatedGpu, error_type: Any, counter_type: Any, location: Any, count: Any
    ) -> int:
        if not gpu.model.ecc:
            return ERROR_NOT_SUPPORTED
        value = self._ecc_total(gpu, _int(error_type), _int(counter_type))
        where = _int(location)
        if value is None or where >= pynvml.NVML_MEMORY_LOCATION_COUNT:
            return ERROR_INVALID_ARGUMENT
        # the simulated faults are all in device DRAM; caches and SRAM stay clean
        _set(count, value if where == pynvml.NVML_MEMORY_LOCATION_DEVICE_MEMORY else 0)
        return SUCCESS

    def _retired(self, gpu: SimulatedGpu, cause: int) -> list[tuple[int, float]] | None:
        if cause == pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS:
            return gpu.ecc.retired_sbe
        if cause == pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR:
            return gpu.ecc.retired_dbe
        return None

    def _page_retirement_supported(self, gpu: SimulatedGpu) -> bool:
        # Ampere+ replaced page retirement by row remapping: NVML says NotSupported
        return gpu.model.ecc and not gpu.model.row_remapping

    def _write_pages(
        self, gpu: SimulatedGpu, cause: Any, count: Any, addresses: Any, times: Any | None
    ) -> int:
        if not self._page_retirement_supported(gpu):
            return ERROR_NOT_SUPPORTED
        pages = self._retired(gpu, _int(cause))
        if pages is None:
            return ERROR_INVALID_ARGUMENT
        available = _int(_target(count))
        _set(count, len(pages))
        if addresses is None or available < len(pages):
            return ERROR_INSUFFICIENT_SIZE if pages else SUCCESS
        out = _target(addresses)
        for i, (address, when) in enumerate(pages):
            out[i] = address
            if times is not None:
                _target(times)[i] = int((when + self._epoch_offset) * 1e6)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetRetiredPages(
        self, gpu: SimulatedGpu, cause: Any, count: Any, addresses: Any
    ) -> int:
        return self._write_pages(gpu, cause, count, addresses, None)

    @_device_call
    def nvmlDeviceGetRetiredPages_v2(
        self, gpu: SimulatedGpu, cause: Any, count: Any, addresses: Any, times: Any = None
    ) -> int:
        # pynvml's size query passes only four arguments
        return self._write_pages(gpu, cause, count, addresses, times)

    @_device_call
    def nvmlDeviceGetRetiredPagesPendingStatus(self, gpu: SimulatedGpu, pending: Any) -> int:
        if not self._page_retirement_supported(gpu):
            return ERROR_NOT_SUPPORTED
        _set(pending, 1 if gpu.ecc.retired_pending else 0)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetRemappedRows(
        self, gpu: SimulatedGpu, correctable: Any, uncorrectable: Any, pending: Any, failure: Any
    ) -> int:
        if not gpu.model.row_remapping:
            return ERROR_NOT_SUPPORTED
        _set(correctable, gpu.ecc.remapped_correctable)
        _set(uncorrectable, gpu.ecc.remapped_uncorrectable)
        _set(pending, 1 if gpu.ecc.remap_pending else 0)
        _set(failure, 1 if gpu.ecc.remap_failure else 0)
        return SUCCESS

    # --- NVLink ----------------------------------------------------------------------

    def _link_check(self, gpu: SimulatedGpu, link: Any) -> int:
        """SUCCESS, or why this link cannot be queried."""
        which = _int(link)
        if gpu.model.nvlink_version == 0 or not gpu.links:
            return ERROR_NOT_SUPPORTED
        if which >= pynvml.NVML_NVLINK_MAX_LINKS or which < 0:
            return ERROR_INVALID_ARGUMENT
        if which >= len(gpu.links):
            return ERROR_NOT_SUPPORTED  # a link this board does not wire up
        return SUCCESS

    @_device_call
    def nvmlDeviceGetNvLinkState(self, gpu: SimulatedGpu, link: Any, active: Any) -> int:
        check = self._link_check(gpu, link)
        if check == SUCCESS:
            _set(active, 1 if gpu.links[_int(link)].up else 0)
        return check

    @_device_call
    def nvmlDeviceGetNvLinkVersion(self, gpu: SimulatedGpu, link: Any, version: Any) -> int:
        check = self._link_check(gpu, link)
        if check == SUCCESS:
            _set(version, _NVLINK_VERSION_ENUM[gpu.model.nvlink_version])
        return check

    @_device_call
    def nvmlDeviceGetNvLinkCapability(
        self, gpu: SimulatedGpu, link: Any, capability: Any, result: Any
    ) -> int:
        check = self._link_check(gpu, link)
        if check != SUCCESS:
            return check
        which = _int(capability)
        if which >= pynvml.NVML_NVLINK_CAP_COUNT:
            return ERROR_INVALID_ARGUMENT
        bridged = gpu.model.fan  # GeForce NVLink is an SLI bridge between two cards
        values = {
            pynvml.NVML_NVLINK_CAP_P2P_SUPPORTED: 1,
            pynvml.NVML_NVLINK_CAP_SYSMEM_ACCESS: 0 if bridged else 1,
            pynvml.NVML_NVLINK_CAP_P2P_ATOMICS: 1,
            pynvml.NVML_NVLINK_CAP_SYSMEM_ATOMICS: 0,
            pynvml.NVML_NVLINK_CAP_SLI_BRIDGE: 1 if bridged else 0,
            pynvml.NVML_NVLINK_CAP_VALID: 1,
        }
        _set(result, values[which])
        return SUCCESS

    @_device_call
    def nvmlDeviceGetNvLinkRemotePciInfo_v2(self, gpu: SimulatedGpu, link: Any, info: Any) -> int:
        check = self._link_check(gpu, link)
        if check != SUCCESS:
            return check
        end = gpu.links[_int(link)].end
        if end.remote_type == "gpu":
            remote = self.gpus[end.remote_index]
            bus_id = gpu_pci_bus_id(self.profile, end.remote_index)
            device_id = self._pci_device_id(remote.model.name)
        else:
            bus_id = nvswitch_pci_bus_id(end.remote_index)
            switch = _NVSWITCH_DEVICE_IDS.get(gpu.model.architecture, 0x1AC1)
            device_id = (switch << 16) | _NVIDIA_VENDOR
        self._fill_pci(_target(info), bus_id, device_id)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetNvLinkRemoteDeviceType(
        self, gpu: SimulatedGpu, link: Any, device_type: Any
    ) -> int:
        check = self._link_check(gpu, link)
        if check == SUCCESS:
            switch = gpu.links[_int(link)].end.remote_type == "switch"
            _set(
                device_type,
                pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
                if switch
                else pynvml.NVML_NVLINK_DEVICE_TYPE_GPU,
            )
        return check

    @_device_call
    def nvmlDeviceGetNvLinkErrorCounter(
        self, gpu: SimulatedGpu, link: Any, counter: Any, value: Any
    ) -> int:
        check = self._link_check(gpu, link)
        if check != SUCCESS:
            return check
        which = _int(counter)
        if which >= len(_NVLINK_ERROR_COUNTERS):
            return ERROR_INVALID_ARGUMENT
        kind = _NVLINK_ERROR_COUNTERS[which]
        if kind == "ecc" and gpu.model.nvlink_version < 3:
            return ERROR_NOT_SUPPORTED  # NVLink data ECC counters arrived with NVLink3
        _set(value, gpu.nvlink_error_count(_int(link), kind))
        return SUCCESS

    # --- field values ----------------------------------------------------------------

    @_device_call
    def nvmlDeviceGetFieldValues(self, gpu: SimulatedGpu, count: Any, values: Any) -> int:
        n = _int(count)
        array = _target(values)
        timestamp = self._timestamp_us()
        for i in range(n):
            entry = array[i]
            ret, value_type, value = _field_value(gpu, int(entry.fieldId), int(entry.scopeId))
            entry.timestamp = timestamp
            entry.latencyUsec = 0
            entry.nvmlReturn = ret
            if ret != SUCCESS:
                continue
            entry.valueType = value_type
            if value_type == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT:
                entry.value.uiVal = int(value)
            elif value_type == pynvml.NVML_VALUE_TYPE_DOUBLE:
                entry.value.dVal = float(value)
            else:
                entry.value.ullVal = int(value)
        return SUCCESS

    # --- events ----------------------------------------------------------------------

    def _supported_events(self, gpu: SimulatedGpu) -> int:
        ecc = (pynvml.nvmlEventTypeSingleBitEccError | EVENT_DOUBLE_BIT_ECC) if gpu.model.ecc else 0
        return int(pynvml.nvmlEventTypePState | EVENT_XID | pynvml.nvmlEventTypeClock | ecc)

    @_lib_call
    def nvmlEventSetCreate(self, event_set: Any) -> int:
        address = next(self._next_object)
        self._event_sets[address] = _EventSet()
        _write_pointer(event_set, address)
        return SUCCESS

    @_device_call
    def nvmlDeviceGetSupportedEventTypes(self, gpu: SimulatedGpu, types: Any) -> int:
        _set(types, self._supported_events(gpu))
        return SUCCESS

    @_device_call
    def nvmlDeviceRegisterEvents(self, gpu: SimulatedGpu, types: Any, event_set: Any) -> int:
        target = self._event_sets.get(_address(event_set) or 0)
        if target is None:
            return ERROR_INVALID_ARGUMENT
        mask = _int(types)
        if mask & ~self._supported_events(gpu):
            return ERROR_NOT_SUPPORTED
        target.registered[gpu.index] = target.registered.get(gpu.index, 0) | mask
        return SUCCESS

    def nvmlEventSetWait_v2(self, event_set: Any, data: Any, timeout_ms: Any) -> int:
        """Block up to timeout_ms of real time for an event (polling the injected clock)."""
        deadline = time.monotonic() + _int(timeout_ms) / 1000.0
        with self._events_changed:
            while True:
                if not self._init_count:
                    return ERROR_UNINITIALIZED
                target = self._event_sets.get(_address(event_set) or 0)
                if target is None:
                    return ERROR_INVALID_ARGUMENT
                self._advance_locked()
                if target.queue:
                    event = target.queue.popleft()
                    out = _target(data)
                    out.device = ctypes.cast(
                        ctypes.c_void_p(self.handle_address(event.gpu)), pynvml.c_nvmlDevice_t
                    )
                    out.eventType = event.event_type
                    out.eventData = event.data
                    out.gpuInstanceId = _NO_INSTANCE
                    out.computeInstanceId = _NO_INSTANCE
                    return SUCCESS
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return ERROR_TIMEOUT
                # wake early to notice an injected clock that moved without a C call
                self._events_changed.wait(min(remaining, 0.05))

    @_lib_call
    def nvmlEventSetFree(self, event_set: Any) -> int:
        if self._event_sets.pop(_address(event_set) or 0, None) is None:
            return ERROR_INVALID_ARGUMENT
        return SUCCESS

    # --- GPM (Hopper+) ---------------------------------------------------------------

    @_device_call
    def nvmlGpmQueryDeviceSupport(self, gpu: SimulatedGpu, support: Any) -> int:
        info = _target(support)
        if info.version != pynvml.NVML_GPM_SUPPORT_VERSION:
            return ERROR_ARGUMENT_VERSION_MISMATCH
        info.isSupportedDevice = 1 if gpu.model.gpm else 0
        return SUCCESS

    @_lib_call
    def nvmlGpmSampleAlloc(self, sample: Any) -> int:
        address = next(self._next_object)
        self._gpm_samples[address] = None
        _write_pointer(sample, address)
        return SUCCESS

    @_lib_call
    def nvmlGpmSampleFree(self, sample: Any) -> int:
        if self._gpm_samples.pop(_address(sample) or 0, 0) == 0:
            return ERROR_INVALID_ARGUMENT
        return SUCCESS

    @_device_call
    def nvmlGpmSampleGet(self, gpu: SimulatedGpu, sample: Any) -> int:
        if not gpu.model.gpm:
            return ERROR_NOT_SUPPORTED
        address = _address(sample) or 0
        if address not in self._gpm_samples:
            return ERROR_INVALID_ARGUMENT
        self._gpm_samples[address] = (gpu.index, gpu.activity())
        return SUCCESS

    @_lib_call
    def nvmlGpmMetricsGet(self, metrics_get: Any) -> int:
        request = _target(metrics_get)
        if request.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            return ERROR_ARGUMENT_VERSION_MISMATCH
        first = self._gpm_samples.get(_address(request.sample1) or 0)
        second = self._gpm_samples.get(_address(request.sample2) or 0)
        if first is None or second is None or first[0] != second[0]:
            return ERROR_INVALID_ARGUMENT
        a, b = first[1], second[1]
        if b.time <= a.time or request.numMetrics > len(request.metrics):
            return ERROR_INVALID_ARGUMENT
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            value = _gpm_metric(int(metric.metricId), a, b)
            if value is None:
                metric.nvmlReturn = ERROR_NOT_SUPPORTED
            else:
                metric.nvmlReturn = SUCCESS
                metric.value = value
        return SUCCESS


def _bus_key(bus_id: str) -> tuple[int, int, int, int]:
    """(domain, bus, device, function) of "0000:12:00.0" or "00000000:12:00.0"."""
    domain, bus, rest = bus_id.strip().split(":")
    device, function = rest.split(".")
    return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)


_MIB = 1024 * 1024


def _gpm_metric(metric_id: int, a: Activity, b: Activity) -> float | None:
    """A GPM metric over two samples, in NVML's units (percent, MiB/s)."""
    dt = b.time - a.time

    def percent(field: str) -> float:
        return 100.0 * float(getattr(b, field) - getattr(a, field)) / dt

    def mib_per_s(field: str) -> float:
        return float(getattr(b, field) - getattr(a, field)) / dt / _MIB

    table: dict[int, Callable[[], float]] = {
        pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: lambda: percent("graphics_active"),
        pynvml.NVML_GPM_METRIC_SM_UTIL: lambda: percent("sm_active"),
        pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: lambda: percent("sm_occupancy"),
        pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: lambda: percent("tensor_active"),
        pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: lambda: percent("dram_active"),
        # non-tensor pipes of a mixed-precision training step: mostly FP32 housekeeping
        pynvml.NVML_GPM_METRIC_FP64_UTIL: lambda: 0.01 * percent("sm_active"),
        pynvml.NVML_GPM_METRIC_FP32_UTIL: lambda: 0.15 * percent("sm_active"),
        pynvml.NVML_GPM_METRIC_FP16_UTIL: lambda: 0.05 * percent("sm_active"),
        pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: lambda: mib_per_s("pcie_tx_bytes"),
        pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: lambda: mib_per_s("pcie_rx_bytes"),
        pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: lambda: mib_per_s("nvlink_tx_bytes"),
        pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: lambda: mib_per_s("nvlink_rx_bytes"),
    }
    compute = table.get(metric_id)
    return compute() if compute is not None else None


# --- field values ----------------------------------------------------------------------

_UI = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
_ULL = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG


def _per_link_fields() -> dict[int, tuple[str, int | None]]:
    """NVLink error field ids -> (counter kind, link or None for the total)."""
    fields: dict[int, tuple[str, int | None]] = {}
    # (kind, first id for links 0-5, total id, first id for links 6-11) from nvml.h
    for kind, low, total, high in (
        ("crc_flit", 32, 38, 96),
        ("crc_data", 39, 45, 102),
        ("replay", 46, 52, 108),
        ("recovery", 53, 59, 114),
    ):
        for link in range(6):
            fields[low + link] = (kind, link)
            fields[high + link] = (kind, link + 6)
        fields[total] = (kind, None)
    for link in range(12):
        fields[148 + link] = ("ecc", link)  # NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_L0..
    fields[160] = ("ecc", None)
    return fields


_NVLINK_ERROR_FIELDS = _per_link_fields()
_KIB = 1024


def _field_value(gpu: SimulatedGpu, field_id: int, scope: int) -> tuple[int, int, float]:
    """(nvmlReturn, valueType, value) for one field of one GPU."""
    model = gpu.model
    ecc = gpu.ecc
    has_nvlink = bool(gpu.links) and model.nvlink_version > 0
    if field_id in _NVLINK_ERROR_FIELDS:
        kind, link = _NVLINK_ERROR_FIELDS[field_id]
        if not has_nvlink or (kind == "ecc" and model.nvlink_version < 3):
            return ERROR_NOT_SUPPORTED, _ULL, 0
        if link is None:
            total = sum(gpu.nvlink_error_count(i, kind) for i in range(len(gpu.links)))
            return SUCCESS, _ULL, total
        if link >= len(gpu.links):
            return ERROR_NOT_SUPPORTED, _ULL, 0
        return SUCCESS, _ULL, gpu.nvlink_error_count(link, kind)

    if field_id == pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT:
        if not has_nvlink:
            return ERROR_NOT_SUPPORTED, _UI, 0
        return SUCCESS, _UI, len(gpu.links)
    if field_id in (
        pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
        pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
        pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX,
        pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX,
        pynvml.NVML_FI_DEV_NVLINK_GET_SPEED,
        pynvml.NVML_FI_DEV_NVLINK_GET_STATE,
        pynvml.NVML_FI_DEV_NVLINK_GET_VERSION,
    ):
        if not has_nvlink:
            return ERROR_NOT_SUPPORTED, _UI, 0
        if scope >= len(gpu.links):
            return ERROR_INVALID_ARGUMENT, _UI, 0
        link_state = gpu.links[scope]
        if field_id == pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
            return SUCCESS, _ULL, int(link_state.tx_bytes) // _KIB
        if field_id == pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
            return SUCCESS, _ULL, int(link_state.rx_bytes) // _KIB
        # raw = data + ~ 6% flit header/CRC overhead (NVLink 128b data in 136b flits)
        if field_id == pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX:
            return SUCCESS, _ULL, int(link_state.tx_bytes * 1.0625) // _KIB
        if field_id == pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX:
            return SUCCESS, _ULL, int(link_state.rx_bytes * 1.0625) // _KIB
        if field_id == pynvml.NVML_FI_DEV_NVLINK_GET_SPEED:
            return SUCCESS, _UI, int(model.nvlink_bytes_per_second / 1e6)  # MB/s
        if field_id == pynvml.NVML_FI_DEV_NVLINK_GET_STATE:
            return SUCCESS, _UI, 1 if link_state.up else 0
        return SUCCESS, _UI, _NVLINK_VERSION_ENUM[model.nvlink_version]

    if field_id == pynvml.NVML_FI_DEV_MEMORY_TEMP:
        if not model.memory_temperature:
            return ERROR_NOT_SUPPORTED, _UI, 0
        return SUCCESS, _UI, round(gpu.memory_temperature_c)
    if field_id == pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
        if not model.energy_counter:
            return ERROR_NOT_SUPPORTED, _ULL, 0
        return SUCCESS, _ULL, int(gpu.energy_mj)
    if field_id == pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER:
        return SUCCESS, _UI, int(gpu.pcie_replays)
    if field_id == pynvml.NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER:
        return SUCCESS, _UI, 0
    if field_id == pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES:
        return SUCCESS, _ULL, int(gpu.pcie_tx_bytes)
    if field_id == pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES:
        return SUCCESS, _ULL, int(gpu.pcie_rx_bytes)

    ecc_fields = {
        pynvml.NVML_FI_DEV_ECC_CURRENT: 1,
        pynvml.NVML_FI_DEV_ECC_PENDING: 1,
        pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: ecc.corrected_volatile,
        pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: ecc.uncorrected_volatile,
        pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL: ecc.corrected_aggregate,
        pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: ecc.uncorrected_aggregate,
    }
    if field_id in ecc_fields:
        if not model.ecc:
            return ERROR_NOT_SUPPORTED, _ULL, 0
        return SUCCESS, _ULL, ecc_fields[field_id]
    retired_fields = {
        pynvml.NVML_FI_DEV_RETIRED_SBE: len(ecc.retired_sbe),
        pynvml.NVML_FI_DEV_RETIRED_DBE: len(ecc.retired_dbe),
        pynvml.NVML_FI_DEV_RETIRED_PENDING: int(ecc.retired_pending),
        pynvml.NVML_FI_DEV_RETIRED_PENDING_SBE: int(ecc.retired_pending and bool(ecc.retired_sbe)),
        pynvml.NVML_FI_DEV_RETIRED_PENDING_DBE: int(ecc.retired_pending and bool(ecc.retired_dbe)),
    }
    if field_id in retired_fields:
        if not model.ecc or model.row_remapping:
            return ERROR_NOT_SUPPORTED, _ULL, 0
        return SUCCESS, _ULL, retired_fields[field_id]
    remap_fields = {
        pynvml.NVML_FI_DEV_REMAPPED_COR: ecc.remapped_correctable,
        pynvml.NVML_FI_DEV_REMAPPED_UNC: ecc.remapped_uncorrectable,
        pynvml.NVML_FI_DEV_REMAPPED_PENDING: int(ecc.remap_pending),
        pynvml.NVML_FI_DEV_REMAPPED_FAILURE: int(ecc.remap_failure),
    }
    if field_id in remap_fields:
        if not model.row_remapping:
            return ERROR_NOT_SUPPORTED, _UI, 0
        return SUCCESS, _UI, remap_fields[field_id]
    return ERROR_NOT_SUPPORTED, _UI, 0


# --- installing under pynvml -----------------------------------------------------------


def install(lib: object) -> None:
    """Make `lib` the library pynvml calls into (idempotent)."""
    with pynvml.libLoadLock:
        pynvml.nvmlLib = lib
        pynvml._nvmlGetFunctionPointer_cache.clear()


def uninstall() -> None:
    """Return pynvml to "library not loaded"; the next nvmlInit() looks for the real one."""
    with pynvml.libLoadLock:
        pynvml.nvmlLib = None
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._nvmlLib_refcount = 0


current_nvml: contextvars.ContextVar[object | None] = contextvars.ContextVar(
    "current_nvml", default=None
)


def bind(lib: object) -> None:
    """Route DispatchingNvml calls made in this contextvars context to `lib`."""
    current_nvml.set(lib)


class DispatchingNvml:
    """One library object for a whole simulated fleet in one process.

    pynvml caches the attribute it gets once per function name, so each attribute is a
    forwarder that looks up the library bound in the caller's context at call time.
    """

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if not name.startswith("nvml") or not callable(getattr(SimulatedNvml, name, None)):
            raise AttributeError(name)
        if name == "nvmlErrorString":
            return _error_string

        def forward(*args: Any) -> Any:
            lib = current_nvml.get()
            if lib is None:
                return ERROR_UNINITIALIZED
            return getattr(lib, name)(*args)

        forward.__name__ = name
        return forward


DEFAULT_FAULT_CODES = (
    ERROR_UNKNOWN,
    ERROR_TIMEOUT,
    ERROR_NOT_SUPPORTED,
    ERROR_GPU_IS_LOST,
    pynvml.NVML_ERROR_NO_DATA,
)
# calls that decide whether there is a library at all; failing them tests nothing useful
_SPARED = frozenset({"nvmlInitWithFlags", "nvmlInit_v2", "nvmlShutdown", "nvmlErrorString"})


class FaultInjectingNvml:
    """Wraps a library so that a fraction `rate` of calls fail with a random NVML error."""

    def __init__(
        self,
        inner: object,
        rate: float,
        seed: int = 0,
        codes: Sequence[int] = DEFAULT_FAULT_CODES,
    ) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError("rate must be within 0..1")
        self.inner = inner
        self.rate = rate
        self.codes = tuple(codes)
        self.injected = 0  # how many calls were failed, for tests to check against
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.inner, name)  # AttributeError -> FunctionNotFound, as real
        if name in _SPARED or not callable(real):
            return real

        def maybe_fail(*args: Any) -> Any:
            with self._lock:
                fail = self._random.random() < self.rate
                code = self._random.choice(self.codes)
                if fail:
                    self.injected += 1
            return code if fail else real(*args)

        maybe_fail.__name__ = name
        return maybe_fail


# --- simulate exec: child Python processes get the simulated library ------------------

SHIM_DIR = Path(__file__).resolve().parent / "pynvml_shim"
REPO_ROOT = Path(__file__).resolve().parents[2]


def exec_environment(
    profile: str, scenario: str | None = None, *, seed: int | None = None
) -> dict[str, str]:
    """Environment additions so a child `python` importing pynvml sees simulated GPUs."""
    get_profile(profile)  # fail here, not silently in the child
    if scenario is not None:
        scenarios.validate(scenario)
    path = [str(SHIM_DIR), str(REPO_ROOT)]
    existing = os.environ.get("PYTHONPATH")
    if existing:
        path.append(existing)
    env = {
        "PYTHONPATH": os.pathsep.join(path),
        "NVWATCH_SIMULATE": profile,
        # where this interpreter's pynvml lives, for a child interpreter without one
        "NVWATCH_PYNVML_DIR": str(Path(pynvml.__file__).resolve().parent),
    }
    if scenario is not None:
        env["NVWATCH_SIMULATE_SCENARIO"] = scenario
    if seed is not None:
        env["NVWATCH_SIMULATE_SEED"] = str(seed)
    return env


def install_from_environment(environ: Mapping[str, str] = os.environ) -> SimulatedNvml | None:
    """Install a SimulatedNvml described by NVWATCH_SIMULATE* (used by the exec shim)."""
    profile = environ.get("NVWATCH_SIMULATE")
    if not profile:
        return None
    lib = SimulatedNvml(
        profile,
        scenario=environ.get("NVWATCH_SIMULATE_SCENARIO") or None,
        seed=int(environ.get("NVWATCH_SIMULATE_SEED", "0")),
    )
    install(lib)
    return lib
