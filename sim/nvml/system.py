"""Library and system calls: init/shutdown, versions, device count, finding a handle."""

from __future__ import annotations

from typing import Any

from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.nvml.abi import (
    ERROR_DRIVER_NOT_LOADED,
    ERROR_GPU_IS_LOST,
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_FOUND,
    ERROR_UNINITIALIZED,
    SUCCESS,
    as_int,
    deref,
    error_string,
    set_out,
    write_pointer,
    write_string,
)
from nvwatch.sim.nvml.core import NvmlCore, lib_call
from nvwatch.sim.profiles import gpu_pci_bus_id


def _bus_key(bus_id: str) -> tuple[int, int, int, int]:
    """(domain, bus, device, function) of "0000:12:00.0" or "00000000:12:00.0"."""
    domain, bus, rest = bus_id.strip().split(":")
    device, function = rest.split(".")
    return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)


def _text(arg: Any) -> str:
    """A `const char *` argument as text."""
    wanted = deref(arg).value
    return wanted.decode() if isinstance(wanted, bytes) else str(wanted)


class SystemCalls(NvmlCore):
    # init and shutdown take no GPU and count nesting, as the real library does; without
    # its kernel module init fails, while shutdown still releases what an earlier init got

    def nvmlInitWithFlags(self, flags: Any = 0) -> int:
        with self._lock:
            if self.driver_broken():
                return ERROR_DRIVER_NOT_LOADED
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

    nvmlErrorString = staticmethod(error_string)  # pynvml sets .restype on it

    @lib_call
    def nvmlSystemGetDriverVersion(self, buffer: Any, length: Any) -> int:
        return write_string(buffer, length, self.profile.driver_version)

    @lib_call
    def nvmlSystemGetNVMLVersion(self, buffer: Any, length: Any) -> int:
        # e.g. "12.570.124.06": CUDA major, then the driver version
        major = self.profile.cuda_driver_version // 1000
        return write_string(buffer, length, f"{major}.{self.profile.driver_version}")

    @lib_call
    def nvmlSystemGetCudaDriverVersion(self, version: Any) -> int:
        set_out(version, self.profile.cuda_driver_version)
        return SUCCESS

    @lib_call
    def nvmlSystemGetCudaDriverVersion_v2(self, version: Any) -> int:
        set_out(version, self.profile.cuda_driver_version)
        return SUCCESS

    @lib_call
    def nvmlDeviceGetCount_v2(self, count: Any) -> int:
        set_out(count, len(self.gpus))
        return SUCCESS

    # --- handles ---------------------------------------------------------------------

    def _write_handle(self, gpu: SimulatedGpu, device: Any) -> int:
        if gpu.lost:
            return ERROR_GPU_IS_LOST
        write_pointer(device, self.handle_address(gpu.index))
        return SUCCESS

    @lib_call
    def nvmlDeviceGetHandleByIndex_v2(self, index: Any, device: Any) -> int:
        i = as_int(index)
        if not 0 <= i < len(self.gpus):
            return ERROR_INVALID_ARGUMENT
        return self._write_handle(self.gpus[i], device)

    @lib_call
    def nvmlDeviceGetHandleByUUID(self, uuid: Any, device: Any) -> int:
        text = _text(uuid)
        for gpu in self.gpus:
            if gpu.uuid == text:
                return self._write_handle(gpu, device)
        return ERROR_NOT_FOUND

    @lib_call
    def nvmlDeviceGetHandleByPciBusId_v2(self, bus_id: Any, device: Any) -> int:
        text = _text(bus_id).lower()
        try:
            key = _bus_key(text)
        except ValueError:
            return ERROR_INVALID_ARGUMENT
        for gpu in self.gpus:
            if _bus_key(gpu_pci_bus_id(self.profile, gpu.index)) == key:
                return self._write_handle(gpu, device)
        return ERROR_NOT_FOUND
