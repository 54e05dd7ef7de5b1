"""Utilization, memory (framebuffer and BAR1) and the processes that hold it."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pynvml

from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.node.process_file import ProcessFile
from nvwatch.sim.nvml.abi import (
    ERROR_ARGUMENT_VERSION_MISMATCH,
    ERROR_INSUFFICIENT_SIZE,
    NO_INSTANCE,
    SUCCESS,
    as_int,
    deref,
    set_out,
)
from nvwatch.sim.nvml.core import NvmlCore, device_call
from nvwatch.sim.profiles import GIB, MIB, GpuModel

_TRAINING_PID_BASE = 20000


# usedGpuMemory of a process whose memory is not known (pynvml reads it as None)
MEMORY_NOT_AVAILABLE: int = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value


def bar1_total_bytes(model: GpuModel) -> int:
    """BAR1 aperture: data-centre SXM boards map all memory (next power of two), others 256 MiB.

    ~ nvidia-smi readings: H100 SXM 131072 MiB, A100 40GB 65536 MiB, V100 32GB 32768 MiB,
    P100 16384 MiB, T4 and GeForce 256 MiB.
    """
    if model.nvlink_version and not model.fan:
        size = GIB
        while size < model.memory_bytes:
            size *= 2
        return size
    return 256 * MIB


class MemoryQueries(NvmlCore):
    # Real processes that also use the GPUs (`--sim-process-file`, NVWATCH_SIM_PROCESS_FILE),
    # set by whoever builds the library: `agent.runtime`, `simulate exec`'s child.
    process_file: ProcessFile | None = None
    # Real pids standing for the simulated job's worker, by GPU index (sim/node/workers.py,
    # started by `serve --simulate` and `simulate exec`); other GPUs get placeholder pids.
    worker_pids: Mapping[int, int] = MappingProxyType({})

    @device_call
    def nvmlDeviceGetUtilizationRates(self, gpu: SimulatedGpu, utilization: Any) -> int:
        util = deref(utilization)
        util.gpu = round(100 * gpu.utilization)
        util.memory = round(100 * gpu.memory_utilization)
        return SUCCESS

    @device_call
    def nvmlDeviceGetEncoderUtilization(
        self, gpu: SimulatedGpu, utilization: Any, period_us: Any
    ) -> int:
        set_out(utilization, 0)  # training jobs do not encode video
        set_out(period_us, 167000)  # ~ the driver's encoder sampling period
        return SUCCESS

    @device_call
    def nvmlDeviceGetDecoderUtilization(
        self, gpu: SimulatedGpu, utilization: Any, period_us: Any
    ) -> int:
        set_out(utilization, 0)
        set_out(period_us, 167000)
        return SUCCESS

    @device_call
    def nvmlDeviceGetMemoryInfo(self, gpu: SimulatedGpu, memory: Any) -> int:
        info = deref(memory)
        total = gpu.model.memory_bytes
        used = gpu.memory_used_bytes + gpu.memory_reserved_bytes  # v1 counts reserved as used
        info.total = total
        info.used = used
        info.free = total - used
        return SUCCESS

    @device_call
    def nvmlDeviceGetMemoryInfo_v2(self, gpu: SimulatedGpu, memory: Any) -> int:
        info = deref(memory)
        if info.version != pynvml.nvmlMemory_v2:
            return ERROR_ARGUMENT_VERSION_MISMATCH
        total = gpu.model.memory_bytes
        info.total = total
        info.reserved = gpu.memory_reserved_bytes
        info.used = gpu.memory_used_bytes
        info.free = total - gpu.memory_reserved_bytes - gpu.memory_used_bytes
        return SUCCESS

    @device_call
    def nvmlDeviceGetBAR1MemoryInfo(self, gpu: SimulatedGpu, memory: Any) -> int:
        info = deref(memory)
        total = bar1_total_bytes(gpu.model)
        used = 5 * 1024 * 1024 if gpu.memory_used_bytes else 2 * 1024 * 1024  # ~ nvidia-smi
        info.bar1Total = total
        info.bar1Used = used
        info.bar1Free = total - used
        return SUCCESS

    # --- processes -------------------------------------------------------------------

    def _processes(self, gpu: SimulatedGpu) -> list[tuple[int, int | None]]:
        """(pid, bytes or None) of the compute processes: one job worker per busy GPU, and
        the real processes the process file puts on it."""
        procs: list[tuple[int, int | None]] = []
        held = gpu.process_memory_bytes
        if held:
            procs.append((self.worker_pid(gpu.index), held))
        if self.process_file is not None:
            procs += self.process_file.processes(gpu.index, self._time)
        return procs

    def worker_pid(self, index: int) -> int:
        """The pid of the simulated job's worker on GPU `index`."""
        placeholder = _TRAINING_PID_BASE + 1000 * (self.seed % 40) + index
        return self.worker_pids.get(index, placeholder)

    def _write_processes(self, procs: list[tuple[int, int | None]], count: Any, infos: Any) -> int:
        available = as_int(deref(count))
        set_out(count, len(procs))
        if infos is None or available < len(procs):
            return ERROR_INSUFFICIENT_SIZE if procs else SUCCESS
        array = deref(infos)
        for i, (pid, used) in enumerate(procs):
            array[i].pid = pid
            array[i].usedGpuMemory = MEMORY_NOT_AVAILABLE if used is None else used
            array[i].gpuInstanceId = NO_INSTANCE
            array[i].computeInstanceId = NO_INSTANCE
        return SUCCESS

    @device_call
    def nvmlDeviceGetComputeRunningProcesses_v3(
        self, gpu: SimulatedGpu, count: Any, infos: Any
    ) -> int:
        return self._write_processes(self._processes(gpu), count, infos)

    @device_call
    def nvmlDeviceGetGraphicsRunningProcesses_v3(
        self, gpu: SimulatedGpu, count: Any, infos: Any
    ) -> int:
        return self._write_processes([], count, infos)
