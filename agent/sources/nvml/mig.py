"""MIG: one GPU's MIG mode and MIG devices, with each instance's memory and GPM activity.

What is static and what is read each poll:
- the mode (nvmlDeviceGetMigMode; NotSupported before Ampere, remembered by Device) and
  the layout, each MIG device's handle, UUID, instance ids and profile name, change only
  when an administrator repartitions (`nvidia-smi mig -cgi/-dgi`, a mode change and
  reset): read at the first poll and again every STATIC_REFRESH_S, or at the next poll
  when a MIG device stops answering (destroyed), like the other static readings;
- per poll and MIG device: nvmlDeviceGetMemoryInfo on its handle (the GPU instance's
  memory; nvidia-smi's "MIG devices" table) and, on Hopper, the GPU instance's GPM
  (nvmlGpmMigSampleGet) through the same two-sample GpmSampler as the GPU's.
So a MIG GPU with N instances costs N memory calls and N GPM pairs per poll.

Profile names come from nvmlDeviceGetGpuInstanceProfileInfo (v2 has "MIG 3g.40gb"),
matched by the profile ID nvmlGpuInstanceGetInfo gives each GPU instance.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pynvml

from nvwatch.agent.sources.nvml.device import Device, error_name, plain_int, text
from nvwatch.agent.sources.nvml.gpm import GpmSampler
from nvwatch.agent.sources.nvml.processes import RunningProcess
from nvwatch.agent.sources.nvml.samples import MigDeviceSample
from nvwatch.agent.sources.nvml.static import STATIC_REFRESH_S

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class MigInstance:
    """What is static about one MIG device (`nvidia-smi mig -lgi` and `-L`)."""

    handle: Any
    gpu_instance_id: int
    compute_instance_id: int
    mig_uuid: str
    profile: str
    # the GPU instance's place: (first memory slice, memory slices); None if unknown
    placement: tuple[int, int] | None = None


@dataclass(frozen=True)
class MigReading:
    """GpuSample fields from the MIG reader (names match GpuSample's)."""

    mig_mode_current: bool | None = None
    mig_mode_pending: bool | None = None
    mig_devices: tuple[MigDeviceSample, ...] = ()


class MigReader:
    """One GPU's MIG state between polls."""

    def __init__(self, device: Device) -> None:
        self._device = device
        self._mode: tuple[bool, bool] | None = None
        self._entries: tuple[MigInstance, ...] = ()
        self._read_at: float | None = None
        self._gpm: dict[int, GpmSampler] = {}  # GPU instance id -> its sampler

    def layout(self) -> tuple[tuple[bool, bool] | None, tuple[MigInstance, ...]]:
        """(current, pending) mode or None without MIG, and the MIG devices; re-read from
        NVML when due (the static cadence, or after an instance vanished)."""
        now = self._device.session.clock()
        if self._read_at is None or now - self._read_at >= STATIC_REFRESH_S:
            self._refresh_layout()
            self._read_at = now
        return self._mode, self._entries

    def read(self) -> MigReading:
        self.layout()
        if self._mode is None:
            return MigReading()
        current, pending = self._mode
        devices = []
        for entry in self._entries:
            sample = self._read_device(entry)
            if sample is None:
                self._read_at = None  # the layout changed under us: list it again next poll
                continue
            devices.append(sample)
        return MigReading(current, pending, tuple(devices))

    def close(self) -> None:
        for sampler in self._gpm.values():
            sampler.close()
        self._gpm = {}

    # --- the static part ---------------------------------------------------------------

    def _refresh_layout(self) -> None:
        """Mode and MIG devices (handle, UUID, ids, profile), from NVML now."""
        dev = self._device
        mode = dev.call("mig_mode", pynvml.nvmlDeviceGetMigMode)
        if mode is None or len(mode) != 2:
            self._mode, self._entries = None, ()
            self.close()
            return
        self._mode = (bool(mode[0]), bool(mode[1]))
        self._entries = self._list_devices() if self._mode[0] else ()
        wanted = {e.gpu_instance_id for e in self._entries}
        for gi_id in list(self._gpm):
            if gi_id not in wanted:
                self._gpm.pop(gi_id).close()
        for gi_id in wanted - set(self._gpm):
            self._gpm[gi_id] = GpmSampler(dev, gpu_instance_id=gi_id)

    def _list_devices(self) -> tuple[MigInstance, ...]:
        dev = self._device
        count = plain_int(dev.call("mig_max", pynvml.nvmlDeviceGetMaxMigDeviceCount)) or 0
        names = self._profile_names()
        entries = []
        for index in range(count):
            handle = self._mig(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, dev.handle, index)
            if handle is None:
                continue  # NotFound: no MIG device at this index
            gi_id = plain_int(self._mig(pynvml.nvmlDeviceGetGpuInstanceId, handle))
            ci_id = plain_int(self._mig(pynvml.nvmlDeviceGetComputeInstanceId, handle))
            uuid = text(self._mig(pynvml.nvmlDeviceGetUUID, handle))
            if gi_id is None or ci_id is None or not uuid:
                continue
            profile, placement = self._instance_of(gi_id, names)
            entries.append(MigInstance(handle, gi_id, ci_id, uuid, profile, placement))
        return tuple(sorted(entries, key=lambda e: (e.gpu_instance_id, e.compute_instance_id)))

    def _profile_names(self) -> dict[int, str]:
        """GPU-instance profile ID -> name ("3g.40gb") for the profiles this GPU offers."""
        names: dict[int, str] = {}
        for profile in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            info = self._mig(
                pynvml.nvmlDeviceGetGpuInstanceProfileInfo, self._device.handle, profile
            )
            if info is not None:
                names[int(info.id)] = text(info.name).removeprefix("MIG ")
        return names

    def _instance_of(self, gi_id: int, names: dict[int, str]) -> tuple[str, tuple[int, int] | None]:
        """The GPU instance's profile name and placement (nvmlGpuInstanceGetInfo)."""
        instance = self._mig(pynvml.nvmlDeviceGetGpuInstanceById, self._device.handle, gi_id)
        info = self._mig(pynvml.nvmlGpuInstanceGetInfo, instance) if instance is not None else None
        if info is None:
            return "", None
        placement = (int(info.placement.start), int(info.placement.size))
        return names.get(int(info.profileId), ""), placement

    # --- per poll ----------------------------------------------------------------------

    def _read_device(self, entry: MigInstance) -> MigDeviceSample | None:
        """The device's memory and GPM now; None when its handle no longer answers."""
        memory = self._mig(pynvml.nvmlDeviceGetMemoryInfo, entry.handle, pynvml.nvmlMemory_v2)
        if memory is None:
            return None
        sampler = self._gpm.get(entry.gpu_instance_id)
        gpm = dataclasses.asdict(sampler.read()) if sampler is not None else {}
        return MigDeviceSample(
            gpu_instance_id=entry.gpu_instance_id,
            compute_instance_id=entry.compute_instance_id,
            mig_uuid=entry.mig_uuid,
            profile=entry.profile,
            memory_total_bytes=plain_int(memory.total),
            memory_used_bytes=plain_int(memory.used),
            **gpm,
        )

    def _mig(self, fn: Callable[..., T], *args: Any) -> T | None:
        """A MIG call on any handle: the value, or None (GpuDown when the GPU is lost).

        Not Device.call: its NotSupported memory is per GPU and key, and a MIG device
        that was destroyed must be seen at once, not after the reprobe interval."""
        try:
            return fn(*args)
        except pynvml.NVMLError as err:
            self._device.raise_if_down(err)
            if not isinstance(err, pynvml.NVMLError_NotFound):
                self._device.session.log_once(
                    f"mig:{getattr(fn, '__name__', fn)}:{err.value}",
                    logging.DEBUG,
                    "GPU %d: %s failed with %s",
                    self._device.index,
                    getattr(fn, "__name__", fn),
                    error_name(err),
                )
            return None


def with_pids(
    devices: tuple[MigDeviceSample, ...], running: tuple[RunningProcess, ...]
) -> tuple[MigDeviceSample, ...]:
    """Each MIG device with the pids the GPU's process list places in its instance."""
    return tuple(
        dataclasses.replace(
            device,
            pids=tuple(
                row.pid
                for row in running
                if row.gpu_instance_id == device.gpu_instance_id
                and row.compute_instance_id == device.compute_instance_id
            ),
        )
        for device in devices
    )
