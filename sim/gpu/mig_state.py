"""The MIG state of one simulated GPU: its mode, its instances and what runs on them.

Each MIG device (a GPU instance with its one compute instance) runs a share of the
node's workload: `load` is the fraction of its SMs a job keeps busy, drawn per seed, GPU
and instance (some instances sit idle, as on a shared inference node). The GPU's own
physics then run at the SM-weighted sum of those loads (`SimulatedGpu.mig_load`), so
power and temperature follow what the instances do, and each instance's GPM activity is
its load's share of the GPU's activity integrals. Memory is carved per instance: a busy
one holds what the workload's framework takes of its slice.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import uuid as uuid_module
from collections.abc import Mapping
from dataclasses import dataclass

from nvwatch.sim.gpu.mig_layout import GpuMigPlan, PlacedInstance, place
from nvwatch.sim.gpu.mig_profiles import COMPUTE_SLICES
from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.gpu.state import Activity

MIB = 1024 * 1024
CONTEXT_BYTES = 256 * MIB  # ~ a CUDA context on a MIG instance, outside the job's tensors
IDLE_SHARE = 0.2  # ~ fraction of instances with no job on them
# what a job's framework holds of its instance's memory, by workload kind (as model.py)
_MEMORY_SHARE = {"training": 0.85, "inference": 0.40, "idle": 0.0}
_PID_BASE = 40000


@dataclass(frozen=True)
class MigDevice:
    """One MIG device: GPU instance + compute instance, as nvidia-smi -L lists it."""

    placed: PlacedInstance
    uuid: str  # MIG-<uuid>, the form drivers since R470 report
    load: float  # 0..1 share of the instance's SMs a job keeps busy; 0: idle

    @property
    def gpu_instance_id(self) -> int:
        return self.placed.gpu_instance_id

    @property
    def compute_instance_id(self) -> int:
        return self.placed.compute_instance_id

    @property
    def profile_name(self) -> str:
        return self.placed.profile.name


class GpuMig:
    """MIG mode and instances of one GPU; the library's MIG calls read this."""

    def __init__(self, gpu: SimulatedGpu, plan: GpuMigPlan, *, seed: int) -> None:
        self.gpu = gpu
        self.current = plan.current
        self.pending = plan.pending
        placed = place(plan, gpu.model.name, gpu.index) if plan.current else ()
        self.devices: tuple[MigDevice, ...] = tuple(
            MigDevice(p, _mig_uuid(gpu.uuid, p), _draw_load(seed, gpu.index, p)) for p in placed
        )
        # the GPU runs what its instances run (MIG on: even with none, nothing runs)
        gpu.mig_load = self.load() if self.current else None

    def load(self) -> float:
        """Share of the GPU's SMs busy: each instance's load weighted by its slices."""
        return sum(d.load * d.placed.profile.compute_slices for d in self.devices) / COMPUTE_SLICES

    def device(self, gpu_instance_id: int) -> MigDevice | None:
        for device in self.devices:
            if device.gpu_instance_id == gpu_instance_id:
                return device
        return None

    # --- per-instance state ---------------------------------------------------------

    def memory_used_bytes(self, device: MigDevice) -> int:
        """What the instance's processes hold (NVML v2 `used`), whole MiB."""
        share = _MEMORY_SHARE.get(self.gpu.workload.kind, 0.0)
        if device.load == 0.0 or share == 0.0:
            return 0
        held = int(device.placed.profile.memory_bytes * share) // MIB * MIB
        return held + CONTEXT_BYTES

    def process_memory_bytes(self, device: MigDevice) -> int:
        """The instance's one job process: all but the context."""
        return max(0, self.memory_used_bytes(device) - CONTEXT_BYTES)

    def process_pid(self, device: MigDevice) -> int:
        return _PID_BASE + 100 * self.gpu.index + device.gpu_instance_id

    def memory_used_total_bytes(self) -> int:
        return sum(self.memory_used_bytes(d) for d in self.devices)

    def activity(self, device: MigDevice) -> Activity:
        """The instance's GPM integrals: its load's part of the GPU's, per its own SMs.

        The GPU integrates activity at `mig_load` x the workload's; an instance busy at
        `load` of its own SMs accumulated `load / mig_load` of that (as ratios of its
        own SMs, which is how nvmlGpmMigSampleGet reports them)."""
        whole = self.gpu.activity()
        mig_load = self.load()
        scale = device.load / mig_load if mig_load > 0 else 0.0
        return dataclasses.replace(
            whole,
            sm_active=whole.sm_active * scale,
            sm_occupancy=whole.sm_occupancy * scale,
            tensor_active=whole.tensor_active * scale,
            dram_active=whole.dram_active * scale,
            graphics_active=whole.graphics_active * scale,
            nvlink_tx_bytes=0.0,  # no NVLink under MIG
            nvlink_rx_bytes=0.0,
        )


def build(
    gpus: list[SimulatedGpu], plans: Mapping[int, GpuMigPlan], *, seed: int
) -> dict[int, GpuMig]:
    """MIG state for each planned GPU, in index order; MigLayoutError for a bad plan."""
    return {index: GpuMig(gpus[index], plans[index], seed=seed) for index in sorted(plans)}


def _mig_uuid(parent_uuid: str, placed: PlacedInstance) -> str:
    key = f"{parent_uuid}/{placed.gpu_instance_id}/{placed.compute_instance_id}"
    return "MIG-" + str(uuid_module.UUID(bytes=hashlib.sha256(key.encode()).digest()[:16]))


def _draw_load(seed: int, gpu: int, placed: PlacedInstance) -> float:
    draw = random.Random(f"mig:{seed}:{gpu}:{placed.gpu_instance_id}")
    if draw.random() < IDLE_SHARE:
        return 0.0
    return round(0.4 + 0.6 * draw.random(), 3)
