"""MIG queries beyond `mig_devices` and `mig_instances`: profile info by profile ID,
placements, remaining capacity, and a MIG device's attributes, from the same MIG state
and profile tables.

A GPU not in MIG mode (or a board without MIG) answers NotSupported, as for the other
GPU-instance calls; nvmlDeviceGetAttributes answers only MIG device handles, per NVML's
reference ("currently only supports MIG device handles").
"""

from __future__ import annotations

from typing import Any

import pynvml

from nvwatch.sim.gpu.mig_profiles import GpuInstanceProfile, by_nvml_profile, profiles_for
from nvwatch.sim.gpu.mig_state import GpuMig, MigDevice
from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.nvml.abi import (
    ERROR_ARGUMENT_VERSION_MISMATCH,
    ERROR_INSUFFICIENT_SIZE,
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_SUPPORTED,
    SUCCESS,
    as_int,
    deref,
    set_out,
)
from nvwatch.sim.nvml.mig_handles import MigHandles, mig_call


def _offered(gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None) -> bool:
    """True for a GPU (not a MIG device) whose MIG mode is on."""
    return device is None and state is not None and bool(state.current)


def _by_id(gpu: SimulatedGpu, profile_id: int) -> GpuInstanceProfile | None:
    return next((p for p in profiles_for(gpu.model.name) if p.profile_id == profile_id), None)


def _free_starts(profile: GpuInstanceProfile, taken: list[tuple[int, int]]) -> list[int]:
    """Starts where one more instance of `profile` fits, placing greedily from slice 0
    (instances of one size packed from the left fit as many as any other order)."""
    placed = list(taken)
    starts = []
    for start in profile.starts:
        end = start + profile.placement_size
        if all(end <= lo or start >= hi for lo, hi in placed):
            placed.append((start, end))
            starts.append(start)
    return starts


class MigCapacityQueries(MigHandles):
    @mig_call()
    def nvmlDeviceGetGpuInstanceProfileInfoByIdV(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, profile_id: Any,
        info: Any,
    ) -> int:  # fmt: skip
        out = deref(info)
        if out.version != pynvml.nvmlGpuInstanceProfileInfo_v2:
            return ERROR_ARGUMENT_VERSION_MISMATCH
        found = _by_id(gpu, as_int(profile_id)) if _offered(gpu, state, device) else None
        if found is None:
            return ERROR_NOT_SUPPORTED
        out.id = found.profile_id
        out.isP2pSupported = 0
        out.sliceCount = found.compute_slices
        out.instanceCount = found.instance_count
        out.multiprocessorCount = found.sm_count
        out.copyEngineCount = found.copy_engines
        out.decoderCount, out.encoderCount = found.decoders, 0
        out.jpegCount, out.ofaCount = found.jpegs, found.ofas
        out.memorySizeMB = found.memory_mib
        out.name = f"MIG {found.name}".encode()
        return SUCCESS

    @mig_call()
    def nvmlDeviceGetGpuInstanceRemainingCapacity(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, profile: Any,
        count: Any,
    ) -> int:  # fmt: skip
        found = by_nvml_profile(gpu.model.name, as_int(profile))
        if found is None or state is None or not _offered(gpu, state, device):
            return ERROR_NOT_SUPPORTED
        taken = [
            (d.placed.start, d.placed.start + d.placed.profile.placement_size)
            for d in state.devices
        ]
        # where one fits, and how many the profile allows at all (a +me profile owns
        # the media engines: one at a time)
        same = sum(1 for d in state.devices if d.placed.profile is found)
        set_out(count, min(len(_free_starts(found, taken)), found.instance_count - same))
        return SUCCESS

    @mig_call()
    def nvmlDeviceGetGpuInstancePossiblePlacements_v2(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, profile: Any,
        placements: Any, count: Any,
    ) -> int:  # fmt: skip
        found = by_nvml_profile(gpu.model.name, as_int(profile))
        if found is None or not _offered(gpu, state, device):
            return ERROR_NOT_SUPPORTED
        starts = found.starts  # every place the profile may take on an empty GPU
        if placements is None:
            set_out(count, len(starts))
            return SUCCESS
        if as_int(deref(count)) < len(starts):
            set_out(count, len(starts))
            return ERROR_INSUFFICIENT_SIZE
        array = deref(placements)
        for i, start in enumerate(starts):
            array[i].start, array[i].size = start, found.placement_size
        set_out(count, len(starts))
        return SUCCESS

    @mig_call(parent="no")
    def nvmlDeviceGetAttributes_v2(
        self, gpu: SimulatedGpu, state: GpuMig | None, device: MigDevice | None, attributes: Any
    ) -> int:
        if device is None:
            return ERROR_NOT_SUPPORTED  # a GPU handle: only MIG device handles are answered
        if attributes is None:
            return ERROR_INVALID_ARGUMENT
        profile = device.placed.profile
        out = deref(attributes)
        out.multiprocessorCount = profile.sm_count
        out.sharedCopyEngineCount = profile.copy_engines
        out.sharedDecoderCount, out.sharedEncoderCount = profile.decoders, 0
        out.sharedJpegCount, out.sharedOfaCount = profile.jpegs, profile.ofas
        out.gpuInstanceSliceCount = profile.compute_slices
        out.computeInstanceSliceCount = profile.compute_slices  # one CI spans its GI
        out.memorySizeMB = profile.memory_mib
        return SUCCESS
