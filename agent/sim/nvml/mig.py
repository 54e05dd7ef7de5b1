"""Multi-Instance GPU: MIG mode, GPU and compute instances, MIG device handles, per-instance
memory, processes and GPM, and what a GPU in MIG mode stops answering.

The state is `nvwatch.agent.sim.mig_state.GpuMig` per GPU (from the --mig layout). Handles:
a MIG device handle lies in its GPU's own 0x100 of handle space (core.py), so it is
never a GPU handle; GPU-instance and compute-instance handles lie in a range of their
own. What NVML answers, per its reference:
- on a MIG device handle: UUID (MIG-...), name, memory (the GPU instance's), processes,
  the instance ids, the parent's handle; anything GPU-wide (power, clocks, utilization,
  temperatures...) is NotSupported (core.device_call);
- on a GPU in MIG mode: utilization rates are NotSupported ("On MIG-enabled GPUs,
  querying device utilization rates is not currently supported"), and so is per-process
  utilization ("... querying process utilization ..."); memory is the whole board's,
  used being what the instances hold; processes carry their instance ids;
- GPM per GPU instance through nvmlGpmMigSampleGet (Hopper).
This class comes first in SimulatedNvml's bases: the calls it overrides fall through to
the GPU's own implementation (`super()`) for GPUs that are not in MIG mode.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar

import pynvml

from nvwatch.agent.sim.gpu_model import SimulatedGpu
from nvwatch.agent.sim.mig_profiles import (
    COMPUTE_PROFILE_OF_SLICES,
    MAX_MIG_DEVICES,
    GpuInstanceProfile,
    by_nvml_profile,
    profiles_for,
)
from nvwatch.agent.sim.mig_state import GpuMig, MigDevice
from nvwatch.agent.sim.nvml.abi import (
    ERROR_ARGUMENT_VERSION_MISMATCH,
    ERROR_DRIVER_NOT_LOADED,
    ERROR_GPU_IS_LOST,
    ERROR_INSUFFICIENT_SIZE,
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_FOUND,
    ERROR_NOT_SUPPORTED,
    ERROR_UNINITIALIZED,
    NO_INSTANCE,
    SUCCESS,
    address_of,
    as_int,
    deref,
    set_out,
    write_pointer,
    write_string,
)
from nvwatch.agent.sim.nvml.core import NvmlCore
from nvwatch.agent.sim.process_file import ProcessFile

P = ParamSpec("P")
M = TypeVar("M", bound="MigQueries")
# fn(self, gpu, its MIG state, the MIG device or None for the GPU itself, *args)
MigFn = Callable[Concatenate[M, SimulatedGpu, GpuMig | None, MigDevice | None, P], int]

_NOT_AVAILABLE: int = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value  # memory not known
_INSTANCE_SPACE = 0x4000_0000  # GPU- and compute-instance handles, past the device handles


def mig_call(
    *, parent: Literal["no", "mig_on", "named"] = "mig_on"
) -> Callable[[MigFn[M, P]], Callable[Concatenate[M, Any, P], int]]:
    """A C function answered here for MIG device handles and, by `parent`, for GPUs: "no"
    none, "mig_on" those in MIG mode now, "named" those the MIG layout names (pending
    too). Other handles go to the GPU's own implementation (the next class in the MRO);
    a MIG-only function, which has none, answers every handle here (device None)."""

    def wrap(fn: MigFn[M, P]) -> Callable[Concatenate[M, Any, P], int]:
        name = fn.__name__

        def call(self: M, handle: Any, /, *args: P.args, **kwargs: P.kwargs) -> int:
            with self._lock:
                slot = self._mig_slot(handle)
                gpu = self._gpu_of(handle) if slot is None else self.gpus[slot[0]]
                state = self.mig.get(gpu.index) if gpu is not None else None
                mine = state is not None and (parent == "named" or state.current)
                base = getattr(super(MigQueries, self), name, None)
                if slot is None and base is not None and not (parent != "no" and mine):
                    return int(base(handle, *args, **kwargs))
                self.call_counts[(name, gpu.index if gpu is not None else None)] += 1
                failed = self._refused(gpu)
                if failed is not None:
                    return failed
                assert gpu is not None
                device = state.devices[slot[1]] if state is not None and slot else None
                return fn(self, gpu, state, device, *args, **kwargs)

        call.__name__ = name
        call.__doc__ = fn.__doc__
        return call

    return wrap


class MigQueries(NvmlCore):
    # the real processes a file puts on the GPUs (memory.py sets out the same attribute)
    process_file: ProcessFile | None = None
    # real pids standing for each busy instance's job, by (GPU index, GPU instance id)
    # (agent/sim/workers.py, started by `serve --simulate`); others get placeholder pids
    mig_worker_pids: Mapping[tuple[int, int], int] = MappingProxyType({})

    # --- handles ------------------------------------------------------------------------

    def _refused(self, gpu: SimulatedGpu | None) -> int | None:
        """The checks every call makes (core.device_call's), else None; integrates time."""
        if self.driver_broken():
            return ERROR_DRIVER_NOT_LOADED
        if not self._init_count:
            return ERROR_UNINITIALIZED
        if gpu is None:
            return ERROR_INVALID_ARGUMENT
        self._advance_locked()
        return ERROR_GPU_IS_LOST if gpu.lost else None

    def instance_handle(self, index: int, gpu_instance_id: int, compute: int | None = None) -> int:
        """Handle of a GPU instance, or with `compute` of its compute instance."""
        address = self._handle_base + _INSTANCE_SPACE + (index << 16) + (gpu_instance_id << 8)
        return address if compute is None else address + 0x10 * (compute + 1)

    def _instance_of(self, handle: Any, *, compute: bool) -> tuple[SimulatedGpu, MigDevice] | None:
        address = address_of(handle)
        if address is None:
            return None
        offset = address - self._handle_base - _INSTANCE_SPACE
        if offset < 0:
            return None
        index, gi_id, low = offset >> 16, (offset >> 8) & 0xFF, offset & 0xFF
        state = self.mig.get(index)
        device = state.device(gi_id) if state is not None else None
        wanted = 0x10 * (device.compute_instance_id + 1) if compute and device else 0
        if device is None or low != wanted:
            return None
        return self.gpus[index], device

    def _instance_call(self, name: str, handle: Any, *, compute: bool) -> Any:
        """(gpu, device) for a GPU/compute-instance handle, or the error code to return."""
        found = self._instance_of(handle, compute=compute)
        self.call_counts[(name, found[0].index if found else None)] += 1
        failed = self._refused(found[0] if found else None)
        return failed if failed is not None else found

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
    def nvmlDeviceGetUtilizationRates(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, util: Any
    ) -> int:
        return ERROR_NOT_SUPPORTED  # on a MIG device, and on a GPU in MIG mode

    @mig_call()
    def nvmlDeviceGetProcessUtilization(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, samples: Any,
        count: Any, last_seen: Any,
    ) -> int:  # fmt: skip
        return ERROR_NOT_SUPPORTED  # "On MIG-enabled GPUs, querying process utilization..."

    @mig_call()
    def nvmlDeviceGetProcessesUtilizationInfo(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, info: Any
    ) -> int:
        return ERROR_NOT_SUPPORTED  # "... is not currently supported"

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

    # --- GPU instances -------------------------------------------------------------------

    @mig_call()
    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, profile: Any,
        info: Any,
    ) -> int:  # fmt: skip
        found = _mig_profile(gpu, state, device, as_int(profile))
        if found is None:
            return ERROR_NOT_SUPPORTED
        _fill_gi_profile(deref(info), found)
        return SUCCESS

    @mig_call()
    def nvmlDeviceGetGpuInstanceProfileInfoV(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, profile: Any,
        info: Any,
    ) -> int:  # fmt: skip
        out = deref(info)
        if out.version != pynvml.nvmlGpuInstanceProfileInfo_v2:
            return ERROR_ARGUMENT_VERSION_MISMATCH
        found = _mig_profile(gpu, state, device, as_int(profile))
        if found is None:
            return ERROR_NOT_SUPPORTED
        _fill_gi_profile(out, found)
        out.name = f"MIG {found.name}".encode()
        return SUCCESS

    @mig_call()
    def nvmlDeviceGetGpuInstances(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, profile: Any,
        instances: Any, count: Any,
    ) -> int:  # fmt: skip
        found = _mig_profile(gpu, state, device, as_int(profile))
        if found is None or state is None:
            return ERROR_NOT_SUPPORTED
        matching = [d for d in state.devices if d.placed.profile is found]
        set_out(count, len(matching))
        if matching and instances is None:
            return ERROR_INVALID_ARGUMENT
        array = deref(instances) if matching else None
        for i, d in enumerate(matching):
            address = self.instance_handle(gpu.index, d.gpu_instance_id)
            array[i] = ctypes.cast(address, pynvml.c_nvmlGpuInstance_t)  # type: ignore[index]
        return SUCCESS

    @mig_call()
    def nvmlDeviceGetGpuInstanceById(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, gi_id: Any,
        out: Any,
    ) -> int:  # fmt: skip
        if device is not None or state is None or not state.current:
            return ERROR_NOT_SUPPORTED
        found = state.device(as_int(gi_id))
        if found is None:
            return ERROR_NOT_FOUND
        write_pointer(out, self.instance_handle(gpu.index, found.gpu_instance_id))
        return SUCCESS

    def nvmlGpuInstanceGetInfo(self, instance: Any, info: Any) -> int:
        with self._lock:
            found = self._instance_call("nvmlGpuInstanceGetInfo", instance, compute=False)
            if isinstance(found, int):
                return found
            gpu, device = found
            out = deref(info)
            out.device = ctypes.cast(self.handle_address(gpu.index), pynvml.c_nvmlDevice_t)
            out.id = device.gpu_instance_id
            out.profileId = device.placed.profile.profile_id
            out.placement.start = device.placed.start
            out.placement.size = device.placed.profile.placement_size
            return SUCCESS

    # --- compute instances ---------------------------------------------------------------

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, instance: Any, profile: Any, engines: Any, info: Any
    ) -> int:
        return self._ci_profile_info(
            "nvmlGpuInstanceGetComputeInstanceProfileInfo", instance, profile, info
        )

    def nvmlGpuInstanceGetComputeInstanceProfileInfoV(
        self, instance: Any, profile: Any, engines: Any, info: Any
    ) -> int:
        if deref(info).version != pynvml.nvmlComputeInstanceProfileInfo_v2:
            return ERROR_ARGUMENT_VERSION_MISMATCH
        return self._ci_profile_info(
            "nvmlGpuInstanceGetComputeInstanceProfileInfoV", instance, profile, info
        )

    def _ci_profile_info(self, name: str, instance: Any, profile: Any, info: Any) -> int:
        with self._lock:
            found = self._instance_call(name, instance, compute=False)
            if isinstance(found, int):
                return found
            gi = found[1].placed.profile
            slices = _ci_slices(as_int(profile))
            if slices is None or slices > gi.compute_slices:
                return ERROR_NOT_SUPPORTED
            out = deref(info)
            out.id = as_int(profile)
            out.sliceCount = slices
            out.instanceCount = gi.compute_slices // slices
            out.multiprocessorCount = _ci_sm_count(found[0], gi, slices)
            out.sharedCopyEngineCount = gi.copy_engines
            out.sharedDecoderCount = gi.decoders
            out.sharedEncoderCount = 0
            out.sharedJpegCount = gi.jpegs
            out.sharedOfaCount = gi.ofas
            if hasattr(out, "name"):
                full = slices == gi.compute_slices
                out.name = f"MIG {'' if full else f'{slices}c.'}{gi.name}".encode()
            return SUCCESS

    def nvmlGpuInstanceGetComputeInstances(
        self, instance: Any, profile: Any, instances: Any, count: Any
    ) -> int:
        with self._lock:
            found = self._instance_call(
                "nvmlGpuInstanceGetComputeInstances", instance, compute=False
            )
            if isinstance(found, int):
                return found
            gpu, device = found
            # the one compute instance spans its GPU instance
            spans = _ci_slices(as_int(profile)) == device.placed.profile.compute_slices
            set_out(count, int(spans))
            if spans:
                address = self.instance_handle(gpu.index, device.gpu_instance_id, 0)
                deref(instances)[0] = ctypes.cast(address, pynvml.c_nvmlComputeInstance_t)
            return SUCCESS

    def nvmlGpuInstanceGetComputeInstanceById(self, instance: Any, ci_id: Any, out: Any) -> int:
        with self._lock:
            name = "nvmlGpuInstanceGetComputeInstanceById"
            found = self._instance_call(name, instance, compute=False)
            if isinstance(found, int):
                return found
            gpu, device = found
            if as_int(ci_id) != device.compute_instance_id:
                return ERROR_NOT_FOUND
            write_pointer(out, self.instance_handle(gpu.index, device.gpu_instance_id, 0))
            return SUCCESS

    def nvmlComputeInstanceGetInfo_v2(self, instance: Any, info: Any) -> int:
        with self._lock:
            found = self._instance_call("nvmlComputeInstanceGetInfo_v2", instance, compute=True)
            if isinstance(found, int):
                return found
            gpu, device = found
            gi_handle = self.instance_handle(gpu.index, device.gpu_instance_id)
            out = deref(info)
            out.device = ctypes.cast(self.handle_address(gpu.index), pynvml.c_nvmlDevice_t)
            out.gpuInstance = ctypes.cast(gi_handle, pynvml.c_nvmlGpuInstance_t)
            out.id = device.compute_instance_id
            out.profileId = COMPUTE_PROFILE_OF_SLICES[device.placed.profile.compute_slices]
            out.placement.start = 0
            out.placement.size = device.placed.profile.compute_slices
            return SUCCESS

    # --- GPM per GPU instance (Hopper) ---------------------------------------------------

    @mig_call()
    def nvmlGpmMigSampleGet(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, gi_id: Any,
        sample: Any,
    ) -> int:  # fmt: skip
        if device is not None or not gpu.model.gpm or state is None or not state.current:
            return ERROR_NOT_SUPPORTED
        found = state.device(as_int(gi_id))
        if found is None:
            return ERROR_NOT_FOUND
        address = address_of(sample) or 0
        if address not in self._gpm_samples:
            return ERROR_INVALID_ARGUMENT
        self._gpm_samples[address] = ((gpu.index, found.gpu_instance_id), state.activity(found))
        return SUCCESS


# --- helpers ---------------------------------------------------------------------------


def _memory(gpu: SimulatedGpu, state: GpuMig, device: MigDevice | None) -> tuple[int, int, int]:
    """(total, reserved, used) bytes: the GPU instance's, or the whole board's under MIG."""
    if device is not None:
        return device.placed.profile.memory_bytes, 0, state.memory_used_bytes(device)
    return gpu.model.memory_bytes, gpu.memory_reserved_bytes, state.memory_used_total_bytes()


def _mig_profile(
    gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, nvml_profile: int
) -> GpuInstanceProfile | None:
    """The profile a GPU in MIG mode offers under that NVML index (MIG off: none)."""
    if device is not None or state is None or not state.current:
        return None
    return by_nvml_profile(gpu.model.name, nvml_profile)


def _fill_gi_profile(out: Any, profile: GpuInstanceProfile) -> None:
    out.id = profile.profile_id
    out.isP2pSupported = 0
    out.sliceCount = profile.compute_slices
    out.instanceCount = profile.instance_count
    out.multiprocessorCount = profile.sm_count
    out.copyEngineCount = profile.copy_engines
    out.decoderCount = profile.decoders
    out.encoderCount = 0
    out.jpegCount = profile.jpegs
    out.ofaCount = profile.ofas
    out.memorySizeMB = profile.memory_mib


def _ci_slices(nvml_profile: int) -> int | None:
    for slices, index in COMPUTE_PROFILE_OF_SLICES.items():
        if index == nvml_profile:
            return slices
    return None


def _ci_sm_count(gpu: SimulatedGpu, gi: GpuInstanceProfile, slices: int) -> int:
    """SMs of a compute instance: the whole GPU instance's, or a 1g instance's per slice."""
    if slices == gi.compute_slices:
        return gi.sm_count
    return slices * min(p.sm_count for p in profiles_for(gpu.model.name))
