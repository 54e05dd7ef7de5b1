"""The MIG part of `nvwatch topology`: how each GPU is partitioned.

One block per GPU that has MIG (Ampere+): its mode, then one line per MIG device, as
`nvidia-smi mig -lgi` and `nvidia-smi -L` show them together: GPU-instance id, compute
instance id, profile, the memory slices it holds (of 8) and its MIG UUID, and the slices
left free. GPUs without MIG are left out; without any, the section is empty. Read with
the NVML source's own MIG reader (agent/sources/nvml/mig.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nvwatch.agent.sources.nvml.device import Device, NvmlSession
from nvwatch.agent.sources.nvml.mig import MigInstance, MigReader

MEMORY_SLICES = 8


@dataclass(frozen=True)
class GpuPartition:
    index: int
    current: bool
    pending: bool
    instances: tuple[MigInstance, ...]


def read_partitions(handles: Sequence[Any]) -> tuple[GpuPartition, ...]:
    """Each MIG-capable GPU's mode and MIG devices, from NVML (initialised by the caller)."""
    session = NvmlSession(clock=time.monotonic, reprobe_interval=300.0)
    found = []
    for index, handle in enumerate(handles):
        reader = MigReader(Device(session, index, handle))
        try:
            mode, instances = reader.layout()
        finally:
            reader.close()
        if mode is not None:
            found.append(GpuPartition(index, mode[0], mode[1], instances))
    return tuple(found)


def format_partitions(partitions: Sequence[GpuPartition]) -> str:
    """The section's text ("" without MIG-capable GPUs)."""
    if not partitions:
        return ""
    lines = ["MIG partitioning (GPU instance, compute instance, profile, memory slices of 8):"]
    for gpu in partitions:
        lines += _gpu_lines(gpu)
    return "\n".join(lines) + "\n"


def _gpu_lines(gpu: GpuPartition) -> list[str]:
    name = f"GPU{gpu.index}"
    if not gpu.current:
        after = "enabled after the next reset" if gpu.pending else "MIG disabled"
        return [f"  {name:<6} {after}"]
    if gpu.pending is False:
        head = f"  {name:<6} MIG enabled (disabled after the next reset)"
    else:
        head = f"  {name:<6} MIG enabled"
    if not gpu.instances:
        return [f"{head}, no instances"]
    lines = [head]
    used: set[int] = set()
    for instance in gpu.instances:
        slices = "?"
        if instance.placement is not None:
            start, size = instance.placement
            used.update(range(start, start + size))
            slices = str(start) if size == 1 else f"{start}-{start + size - 1}"
        lines.append(
            f"         GI {instance.gpu_instance_id:>2}  CI {instance.compute_instance_id:>2}  "
            f"{instance.profile or '?':<11} slices {slices:<5} {instance.mig_uuid}"
        )
    free = [i for i in range(MEMORY_SLICES) if i not in used]
    lines.append(f"         free slices: {_ranges(free) or 'none'}")
    return lines


def _ranges(values: Sequence[int]) -> str:
    """[0, 1, 2, 6] -> "0-2,6"."""
    parts: list[str] = []
    start = prev = None
    for value in [*values, None]:
        if value is not None and prev is not None and value == prev + 1:
            prev = value
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = value
    return ",".join(parts)
