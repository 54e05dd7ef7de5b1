"""The compute processes on one GPU: their memory, their utilization, who they are.

Two NVML reads per GPU per poll, one driver call each:
- nvmlDeviceGetComputeRunningProcesses_v3 (`nvidia-smi --query-compute-apps=pid,
  used_memory`): every compute process and the memory it holds; on a GPU in MIG mode
  with the GPU and compute instance it runs in.
- nvmlDeviceGetProcessUtilization (`nvidia-smi pmon -s u`, sm and mem): NVML keeps a
  buffer of samples per GPU and answers with those newer than a time stamp the caller
  passes (CPU time, µs), one per process "that had some non-zero utilization during the
  last sample period". Each GPU keeps the newest time stamp it has seen and asks only for
  what came after it, the poll's window; a listed process with no sample in the window
  did no work (0), and NVML_ERROR_NOT_FOUND says that no process did. Absent, never 0,
  where NVML cannot say: NotSupported (a GPU in MIG mode, "On MIG-enabled GPUs, querying
  process utilization is not currently supported"; older boards), or a failed call.
  GPUs without a compute process are not asked.

Why not pynvml's wrappers: each asks the driver for the count first and then for the
entries, two calls where one does. The list offers room up front (process_list.py); the
utilization read offers a buffer sized for this poll's processes and falls back to the
wrapper only when NVML has more samples than that; pynvml still resolves the function (a
missing one is FunctionNotFound, as through its wrapper) and raises its errors.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import psutil
import pynvml

from nvwatch.agent.sources.nvml.device import Device, plain_int
from nvwatch.agent.sources.nvml.process_list import compute_processes
from nvwatch.agent.sources.nvml.samples import ProcessAttribution, ProcessSample
from nvwatch.agent.sources.nvml.units import percent

#: processes per GPU that get series (the most memory first): bounds the pid label
MAX_PROCESSES = 8
# room in the utilization buffer past the compute processes: graphics clients have samples
_SPARE_SAMPLES = 4


@dataclass(frozen=True)
class RunningProcess:
    """One entry of NVML's compute-process list; instance ids None outside MIG."""

    pid: int
    memory_bytes: int | None
    gpu_instance_id: int | None
    compute_instance_id: int | None


@dataclass(frozen=True)
class ProcessUtilization:
    """One pid's most recent sample in the window, as ratios 0..1."""

    sm_ratio: float | None
    memory_ratio: float | None


#: pid -> its utilization this poll; None for the whole GPU: not supported or not read
Utilizations = Mapping[int, ProcessUtilization] | None

_IDLE = ProcessUtilization(0.0, 0.0)
_UNKNOWN = ProcessUtilization(None, None)


class ProcessReader:
    """One GPU's process reads, and what they keep between polls: the newest utilization
    sample seen."""

    def __init__(self) -> None:
        self.last_seen_us = 0  # 0: everything in NVML's sample buffer, on the first read

    def running(self, dev: Device) -> tuple[RunningProcess, ...]:
        """Every compute process, the most memory first."""
        procs = dev.call("processes", compute_processes)
        rows = []
        for proc in procs or ():
            pid = plain_int(getattr(proc, "pid", None))
            if pid is None:
                continue
            rows.append(
                RunningProcess(
                    pid,
                    plain_int(getattr(proc, "usedGpuMemory", None)),  # None: not available
                    plain_int(getattr(proc, "gpuInstanceId", None)),  # all ones outside MIG
                    plain_int(getattr(proc, "computeInstanceId", None)),
                )
            )
        rows.sort(key=lambda row: (-(row.memory_bytes or 0), row.pid))
        return tuple(rows)

    def utilization(self, dev: Device, pids: tuple[int, ...]) -> Utilizations:
        """Utilization of `pids` since the previous read: pids without a sample did no
        work (0); None where NVML does not give per-process utilization."""
        if not pids:
            return MappingProxyType({})  # no call: a GPU without processes costs nothing
        slots = len(pids) + _SPARE_SAMPLES
        samples = dev.call("process_utilization", _utilization_samples, self.last_seen_us, slots)
        if samples is None:
            return None
        newest: dict[int, tuple[int, ProcessUtilization]] = {}
        for sample in samples:
            pid, stamp = plain_int(sample.pid), plain_int(sample.timeStamp)
            if pid is None or stamp is None:
                continue
            self.last_seen_us = max(self.last_seen_us, stamp)
            if pid not in newest or stamp >= newest[pid][0]:
                newest[pid] = (
                    stamp,
                    ProcessUtilization(percent(sample.smUtil), percent(sample.memUtil)),
                )
        return MappingProxyType({pid: newest[pid][1] if pid in newest else _IDLE for pid in pids})


class ProcessOwners:
    """Name and user of each listed pid, read from /proc once per process, not per poll.

    A pid's entry holds while its /proc/<pid> directory is the same inode (its ctime):
    a pid reused by a new process has a new directory, and procfs dating a directory
    again after a cache eviction only costs a re-read. Entries of pids not asked for in
    a poll are dropped at its end (`end_poll`), so the cache never outgrows one poll's
    processes.
    """

    def __init__(self) -> None:
        self._known: dict[int, tuple[int, dict[str, str]]] = {}
        self._asked: set[int] = set()

    def of(self, pid: int) -> dict[str, str]:
        self._asked.add(pid)
        try:
            started = os.stat(f"{psutil.PROCFS_PATH}/{pid}").st_ctime_ns
        except (OSError, ValueError):
            # not in this /proc: exited, or another pid namespace (an agent in a pod
            # without hostPID sees none of the GPU's processes); psutil, which reads the
            # same directory, could only fail too, at several times the cost, every poll
            return {"name": "", "user": ""}
        known = self._known.get(pid)
        if known is not None and known[0] == started:
            return known[1]
        owner = _process_owner(pid)
        if owner["name"]:  # a process we could read; a failed read is tried again
            self._known[pid] = (started, owner)
        return owner

    def end_poll(self) -> None:
        self._known = {pid: v for pid, v in self._known.items() if pid in self._asked}
        self._asked = set()


def processes(
    running: tuple[RunningProcess, ...],
    attribution: ProcessAttribution | None = None,
    utilization: Utilizations = None,
    owners: ProcessOwners | None = None,
) -> tuple[ProcessSample, ...]:
    """The MAX_PROCESSES of `running` holding the most memory, with process name and user
    (from `owners` when given), job or pod from attribution's cache, and utilization
    where NVML gives it."""
    owner_of = owners.of if owners is not None else _process_owner
    rows = []
    for row in running[:MAX_PROCESSES]:
        used = utilization.get(row.pid, _UNKNOWN) if utilization is not None else _UNKNOWN
        rows.append(
            ProcessSample(
                pid=row.pid,
                memory_bytes=row.memory_bytes,
                **owner_of(row.pid),
                **_job_labels(row.pid, attribution),
                gpu_instance_id=row.gpu_instance_id,
                compute_instance_id=row.compute_instance_id,
                sm_utilization_ratio=used.sm_ratio,
                memory_utilization_ratio=used.memory_ratio,
            )
        )
    return tuple(rows)


def _job_labels(pid: int, attribution: ProcessAttribution | None) -> dict[str, str]:
    labels = attribution.labels_of(pid) if attribution is not None else None
    if labels is None:
        return {}
    return {"job": labels.job, "pod": labels.pod, "namespace": labels.namespace}


def _process_owner(pid: int) -> dict[str, str]:
    """Process name and user from psutil; "" when the process is gone or not ours to read."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            name = proc.name()
            try:
                user = proc.username()
            except (KeyError, psutil.Error):
                user = ""
        return {"name": name, "user": user}
    except (psutil.Error, OSError, ValueError):
        return {"name": "", "user": ""}


# --- the driver calls -------------------------------------------------------------------


def _utilization_samples(handle: Any, last_seen_us: int, slots: int) -> list[Any]:
    """nvmlDeviceGetProcessUtilization's samples newer than `last_seen_us` ([] when none)."""
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetProcessUtilization")
    buffer = (pynvml.c_nvmlProcessUtilizationSample_t * slots)()
    count = ctypes.c_uint(slots)
    ret = fn(handle, buffer, ctypes.byref(count), ctypes.c_ulonglong(last_seen_us))
    if ret == pynvml.NVML_ERROR_NOT_FOUND:
        return []  # no sample since last_seen_us: no process ran kernels in the window
    if ret == pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
        # more samples than room: pynvml's wrapper, which asks for the count first
        try:
            return list(pynvml.nvmlDeviceGetProcessUtilization(handle, last_seen_us))
        except pynvml.NVMLError_NotFound:
            return []  # the samples aged out between the two calls
    pynvml._nvmlCheckReturn(ret)  # any other error: pynvml's NVMLError, for Device.call
    return list(buffer[: min(count.value, slots)])
