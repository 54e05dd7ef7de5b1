"""Per-process views: utilization samples, process detail lists, older process-list
versions, MPS, accounting, and the driver's sample buffers.

The processes are the ones `MemoryQueries._processes` lists (the simulated job's worker
per busy GPU, and the real pids of the process file). Only the worker does the GPU's
work, so utilization samples are the worker's: NVML samples a process only while it
runs kernels, and the simulation gives no activity to a process it was merely told of.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pynvml

from nvwatch.sim.gpu.model import SimulatedGpu
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
)
from nvwatch.sim.nvml.core import device_call
from nvwatch.sim.nvml.memory import MEMORY_NOT_AVAILABLE, MemoryQueries
from nvwatch.sim.nvml.unsupported import answers_not_supported, because

# nvmlSamplingType_t: what nvmlDeviceGetSamples can return, as a function of the GPU
_SAMPLERS: dict[int, Callable[[SimulatedGpu], int]] = {
    pynvml.NVML_TOTAL_POWER_SAMPLES: lambda gpu: round(gpu.power_w * 1000),  # mW
    pynvml.NVML_GPU_UTILIZATION_SAMPLES: lambda gpu: round(100 * gpu.utilization),
    pynvml.NVML_MEMORY_UTILIZATION_SAMPLES: lambda gpu: round(100 * gpu.memory_utilization),
    pynvml.NVML_ENC_UTILIZATION_SAMPLES: lambda gpu: 0,  # training jobs do not encode
    pynvml.NVML_DEC_UTILIZATION_SAMPLES: lambda gpu: 0,
    pynvml.NVML_PROCESSOR_CLK_SAMPLES: lambda gpu: gpu.sm_clock_mhz,
    pynvml.NVML_MEMORY_CLK_SAMPLES: lambda gpu: gpu.memory_clock_mhz,
}


PROCESSES_NOT_SUPPORTED = because(
    "with accounting disabled (nvmlDeviceGetAccountingMode) NVML answers NotSupported "
    "for its buffer, pids and stats",
    "nvmlDeviceGetAccountingBufferSize",
    "nvmlDeviceGetAccountingPids",
    "nvmlDeviceGetAccountingStats",
    "nvmlDeviceGetAccountingStats_v2",
)


@answers_not_supported(PROCESSES_NOT_SUPPORTED)
class ProcessQueries(MemoryQueries):
    def _busy_samples(self, gpu: SimulatedGpu, last_seen: int) -> list[tuple[int, int, int]]:
        """(pid, sm %, memory %) of the processes sampled after `last_seen` (µs)."""
        if not gpu.process_memory_bytes or self._timestamp_us() <= last_seen:
            return []
        sm = round(100 * gpu.utilization)
        memory = round(100 * gpu.memory_utilization)
        return [(self.worker_pid(gpu.index), sm, memory)]

    @device_call
    def nvmlDeviceGetProcessUtilization(
        self, gpu: SimulatedGpu, samples: Any, count: Any, last_seen: Any
    ) -> int:
        rows = self._busy_samples(gpu, as_int(last_seen))
        if not rows:
            set_out(count, 0)
            return ERROR_NOT_FOUND  # no sample newer than last_seen
        if samples is None or as_int(deref(count)) < len(rows):
            set_out(count, len(rows))
            return ERROR_INSUFFICIENT_SIZE
        array = deref(samples)
        for i, (pid, sm, memory) in enumerate(rows):
            array[i].pid = pid
            array[i].timeStamp = self._timestamp_us()
            array[i].smUtil, array[i].memUtil = sm, memory
            array[i].encUtil = array[i].decUtil = 0
        set_out(count, len(rows))
        return SUCCESS

    @device_call
    def nvmlDeviceGetProcessesUtilizationInfo(self, gpu: SimulatedGpu, info: Any) -> int:
        util = deref(info)
        if util.version != pynvml.ProcessesUtilizationInfo_v1:
            return ERROR_ARGUMENT_VERSION_MISMATCH
        rows = self._busy_samples(gpu, int(util.lastSeenTimeStamp))
        if not rows:
            util.processSamplesCount = 0
            return ERROR_NOT_FOUND
        if not util.procUtilArray or util.processSamplesCount < len(rows):
            util.processSamplesCount = len(rows)
            return ERROR_INSUFFICIENT_SIZE
        for i, (pid, sm, memory) in enumerate(rows):
            sample = util.procUtilArray[i]
            sample.timeStamp, sample.pid = self._timestamp_us(), pid
            sample.smUtil, sample.memUtil = sm, memory
            sample.encUtil = sample.decUtil = sample.jpgUtil = sample.ofaUtil = 0
        util.processSamplesCount = len(rows)
        return SUCCESS

    @device_call
    def nvmlDeviceGetRunningProcessDetailList(self, gpu: SimulatedGpu, details: Any) -> int:
        listing = deref(details)
        if listing.version != pynvml.nvmlProcessDetailList_v1:
            return ERROR_ARGUMENT_VERSION_MISMATCH
        mode = int(listing.mode)
        if mode == pynvml.NVML_PROCESS_MODE_COMPUTE:
            procs = self._processes(gpu)
        elif mode in (pynvml.NVML_PROCESS_MODE_GRAPHICS, pynvml.NVML_PROCESS_MODE_MPS):
            procs = []  # no graphics clients, no MPS server
        else:
            return ERROR_INVALID_ARGUMENT
        if not listing.procArray or listing.numProcArrayEntries < len(procs):
            listing.numProcArrayEntries = len(procs)
            return ERROR_INSUFFICIENT_SIZE if procs else SUCCESS
        for i, (pid, used) in enumerate(procs):
            entry = listing.procArray[i]
            entry.pid = pid
            entry.usedGpuMemory = MEMORY_NOT_AVAILABLE if used is None else used
            entry.gpuInstanceId = entry.computeInstanceId = NO_INSTANCE
            entry.usedGpuCcProtectedMemory = 0  # confidential computing is off
        listing.numProcArrayEntries = len(procs)
        return SUCCESS

    # the v2 lists carry the same fields as v3 for what the simulation knows
    @device_call
    def nvmlDeviceGetComputeRunningProcesses_v2(
        self, gpu: SimulatedGpu, count: Any, infos: Any
    ) -> int:
        return self._write_processes(self._processes(gpu), count, infos)

    @device_call
    def nvmlDeviceGetGraphicsRunningProcesses_v2(
        self, gpu: SimulatedGpu, count: Any, infos: Any
    ) -> int:
        return self._write_processes([], count, infos)

    @device_call
    def nvmlDeviceGetMPSComputeRunningProcesses_v2(
        self, gpu: SimulatedGpu, count: Any, infos: Any
    ) -> int:
        return self._write_processes([], count, infos)  # no MPS server runs

    @device_call
    def nvmlDeviceGetMPSComputeRunningProcesses_v3(
        self, gpu: SimulatedGpu, count: Any, infos: Any
    ) -> int:
        return self._write_processes([], count, infos)

    # --- accounting: off by default; data-centre boards only ----------------------------

    @device_call
    def nvmlDeviceGetAccountingMode(self, gpu: SimulatedGpu, mode: Any) -> int:
        if gpu.model.fan:
            return ERROR_NOT_SUPPORTED
        set_out(mode, pynvml.NVML_FEATURE_DISABLED)
        return SUCCESS

    # --- the driver's sample buffers ------------------------------------------------------

    @device_call
    def nvmlDeviceGetSamples(
        self,
        gpu: SimulatedGpu,
        sampling_type: Any,
        last_seen: Any,
        value_type: Any,
        count: Any,
        samples: Any,
    ) -> int:
        sampler = _SAMPLERS.get(as_int(sampling_type))
        if sampler is None:
            return ERROR_NOT_SUPPORTED  # module power (Grace), JPG/OFA samples
        now = self._timestamp_us()
        fresh = 1 if now > as_int(last_seen) else 0  # one sample: the current reading
        set_out(value_type, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT)
        if samples is None:
            set_out(count, fresh)
            return SUCCESS
        if as_int(deref(count)) < fresh:
            set_out(count, fresh)
            return ERROR_INSUFFICIENT_SIZE
        if fresh:
            sample = deref(samples)[0]
            sample.timeStamp = now
            sample.sampleValue.uiVal = int(sampler(gpu))
        set_out(count, fresh)
        return SUCCESS
