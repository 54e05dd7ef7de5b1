"""Multi-Instance GPU, per instance: GPU instances (profiles, handles, info), their
compute instances, and GPM per GPU instance (Hopper, nvmlGpmMigSampleGet).

Each GPU instance has one compute instance spanning it (gpu.mig_layout). The handles are
`mig_handles`'; a GPU not in MIG mode answers NotSupported, as NVML's reference says.
"""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml

from nvwatch.sim.gpu.mig_profiles import (
    COMPUTE_PROFILE_OF_SLICES,
    GpuInstanceProfile,
    by_nvml_profile,
    profiles_for,
)
from nvwatch.sim.gpu.mig_state import GpuMig, MigDevice
from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.nvml.abi import (
    ERROR_ARGUMENT_VERSION_MISMATCH,
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_FOUND,
    ERROR_NOT_SUPPORTED,
    SUCCESS,
    address_of,
    as_int,
    deref,
    set_out,
    write_pointer,
)
from nvwatch.sim.nvml.mig_handles import MigHandles, mig_call


class MigInstanceQueries(MigHandles):
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
