"""Multi-Instance GPU, per device: MIG mode, MIG device handles, and what a MIG device
answers and a GPU in MIG mode stops answering.

The state is `nvwatch.sim.gpu.mig_state.GpuMig` per GPU (from the --mig layout); how a
handle finds it is `mig_handles`. What NVML answers, per its reference:
- on a MIG device handle: UUID (MIG-...), name, memory (the GPU instance's), processes,
  the instance ids, the parent's handle; anything GPU-wide (power, clocks, utilization,
  temperatures...) is NotSupported (core.device_call);
- on a GPU in MIG mode: utilization rates and per-process utilization are NotSupported
  (MIG_NOT_SUPPORTED); memory is the whole board's, used being what the instances hold;
  processes carry their instance ids.
GPU and compute instances, and GPM per GPU instance, are `mig_instances`. The calls
answered here fall through to the GPU's own implementation (`mig_call`) for GPUs that
are not in MIG mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pynvml

from nvwatch.sim.gpu.mig_profiles import MAX_MIG_DEVICES
from nvwatch.sim.gpu.mig_state import GpuMig, MigDevice
from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.node.process_file import ProcessFile
from nvwatch.sim.nvml.abi import (
    ERROR_ARGUMENT_VERSION_MISMATCH,
    ERROR_INSUFFICIENT_SIZE,
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_FOUND,
    ERROR_NOT_SUPPORTED,
    NO_INSTANCE,
    SUCCESS,
    as_int,
    deref,
    set_out,
    write_pointer,
    write_string,
)
from nvwatch.sim.nvml.mig_handles import MigHandles, mig_call
from nvwatch.sim.nvml.unsupported import answers_not_supported, because

_NOT_AVAILABLE: int = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value  # memory not known

# on a MIG device handle, and on a GPU in MIG mode (other GPUs answer as without MIG)
MIG_NOT_SUPPORTED = {
    **because(
        "On MIG-enabled GPUs, querying device utilization rates is not currently supported"
        " (NVML reference); nor on a MIG device",
        "nvmlDeviceGetUtilizationRates",
    ),
    **because(
        "On MIG-enabled GPUs, querying process utilization is not currently supported"
        " (NVML reference); nor on a MIG device",
        "nvmlDeviceGetProcessUtilization",
        "nvmlDeviceGetProcessesUtilizationInfo",
    ),
}


@answers_not_supported(MIG_NOT_SUPPORTED, via=mig_call())
class MigDeviceQueries(MigHandles):
    # the real processes a file puts on the GPUs (memory.py sets out the same attribute)
    process_file: ProcessFile | None = None
    # real pids standing for each busy instance's job, by (GPU index, GPU instance id)
    # (sim/node/workers.py, started by `serve --simulate`); others get placeholder pids
    mig_worker_pids: Mapping[tuple[int, int], int] = MappingProxyType({})

    # --- mode and MIG device handles ---------------------------------------------------

    @mig_call(parent="named")
    def nvmlDeviceGetMigMode(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, current: Any,
        pending: Any,
    ) -> int:  # fmt: skip
        if device is not None or not gpu.model.mig:
            return ERROR_NOT_SUPPORTED
        set_out(current, int(state is not None and state.current))
        set_out(pending, int(state is not None and state.pending))
        return SUCCESS

    @mig_call()
    def nvmlDeviceIsMigDeviceHandle(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, answer: Any
    ) -> int:
        set_out(answer, int(device is not None))
        return SUCCESS

    @mig_call()
    def nvmlDeviceGetMaxMigDeviceCount(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, count: Any
    ) -> int:
        if device is not None or not gpu.model.mig:
            return ERROR_NOT_SUPPORTED
        set_out(count, MAX_MIG_DEVICES if state is not None and state.current else 0)
        return SUCCESS

    @mig_call()
    def nvmlDeviceGetMigDeviceHandleByIndex(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, index: Any,
        out: Any,
    ) -> int:  # fmt: skip
        if device is not None or state is None or not state.current:
            return ERROR_NOT_SUPPORTED
        which = as_int(index)
        if which >= MAX_MIG_DEVICES:
            return ERROR_INVALID_ARGUMENT
        if which >= len(state.devices):
            return ERROR_NOT_FOUND
        write_pointer(out, self.mig_handle_address(gpu.index, which))
        return SUCCESS

    @mig_call()
    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, out: Any
    ) -> int:
        if device is None:
            return ERROR_INVALID_ARGUMENT
        write_pointer(out, self.handle_address(gpu.index))
        return SUCCESS

    @mig_call()
    def nvmlDeviceGetGpuInstanceId(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, out: Any
    ) -> int:
        if device is None:
            return ERROR_NOT_SUPPORTED
        set_out(out, device.gpu_instance_id)
        return SUCCESS

    @mig_call()
    def nvmlDeviceGetComputeInstanceId(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, out: Any
    ) -> int:
        if device is None:
            return ERROR_NOT_SUPPORTED
        set_out(out, device.compute_instance_id)
        return SUCCESS

    # --- what a MIG device answers, and what MIG mode changes on the GPU ---------------

    @mig_call(parent="no")
    def nvmlDeviceGetUUID(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, buffer: Any,
        length: Any,
    ) -> int:  # fmt: skip
        assert device is not None
        return write_string(buffer, length, device.uuid)

    @mig_call(parent="no")
    def nvmlDeviceGetName(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, buffer: Any,
        length: Any,
    ) -> int:  # fmt: skip
        assert device is not None
        return write_string(buffer, length, f"{gpu.model.name} MIG {device.profile_name}")

    @mig_call()
    def nvmlDeviceGetMemoryInfo(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, memory: Any
    ) -> int:
        assert state is not None
        total, reserved, used = _memory(gpu, state, device)
        info = deref(memory)
        info.total, info.used, info.free = total, used + reserved, total - used - reserved
        return SUCCESS

    @mig_call()
    def nvmlDeviceGetMemoryInfo_v2(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, memory: Any
    ) -> int:
        assert state is not None
        info = deref(memory)
        if info.version != pynvml.nvmlMemory_v2:
            return ERROR_ARGUMENT_VERSION_MISMATCH
        total, reserved, used = _memory(gpu, state, device)
        info.total, info.reserved, info.used = total, reserved, used
        info.free = total - reserved - used
        return SUCCESS

    @mig_call()
    def nvmlDeviceGetComputeRunningProcesses_v3(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, count: Any,
        infos: Any,
    ) -> int:  # fmt: skip
        assert state is not None
        procs = self._mig_processes(gpu, state, device)
        available = as_int(deref(count))
        set_out(count, len(procs))
        if infos is None or available < len(procs):
            return ERROR_INSUFFICIENT_SIZE if procs else SUCCESS
        array = deref(infos)
        for i, (pid, used, gi_id, ci_id) in enumerate(procs):
            array[i].pid = pid
            array[i].usedGpuMemory = _NOT_AVAILABLE if used is None else used
            array[i].gpuInstanceId = gi_id
            array[i].computeInstanceId = ci_id
        return SUCCESS

    def _mig_processes(
        self, gpu: SimulatedGpu, state: GpuMig, device: MigDevice | None
    ) -> list[tuple[int, int | None, int, int]]:
        """(pid, bytes, GPU instance, compute instance) on a MIG device, or on the whole
        GPU: each busy instance's job, and the process file's processes in it."""
        procs: list[tuple[int, int | None, int, int]] = []
        for d in state.devices if device is None else (device,):
            ids = (d.gpu_instance_id, d.compute_instance_id)
            if state.process_memory_bytes(d):
                pid = self.mig_worker_pids.get((gpu.index, d.gpu_instance_id))
                pid = state.process_pid(d) if pid is None else pid
                procs.append((pid, state.process_memory_bytes(d), *ids))
            claimed = self._claimed(gpu, d.gpu_instance_id)
            procs += [(pid, used, *ids) for pid, used in claimed]
        if device is None:  # claimed for the GPU itself: in no instance
            procs += [(pid, used, NO_INSTANCE, NO_INSTANCE) for pid, used in self._claimed(gpu)]
        return procs

    def _claimed(
        self, gpu: SimulatedGpu, gpu_instance_id: int | None = None
    ) -> list[tuple[int, int | None]]:
        """The process file's live processes on `gpu` (in that GPU instance)."""
        if self.process_file is None:
            return []
        return self.process_file.processes(gpu.index, self._time, gpu_instance_id)


def _memory(gpu: SimulatedGpu, state: GpuMig, device: MigDevice | None) -> tuple[int, int, int]:
    """(total, reserved, used) bytes: the GPU instance's, or the whole board's under MIG."""
    if device is not None:
        return device.placed.profile.memory_bytes, 0, state.memory_used_bytes(device)
    return gpu.model.memory_bytes, gpu.memory_reserved_bytes, state.memory_used_total_bytes()
