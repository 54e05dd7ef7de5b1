"""How a MIG-aware C function finds what its handle names: `mig_call`, and the handle
space of GPU and compute instances, shared by the MIG areas (mig_devices,
mig_instances, mig_capacity).

A MIG device handle lies in its GPU's own 0x100 of handle space (core.py), so it is
never a GPU handle; GPU-instance and compute-instance handles lie in a range of their
own, past the device handles. The MIG area classes come first in SimulatedNvml's bases:
a call `mig_call` does not answer falls through to the GPU's own implementation, the
next class after `MigHandles` in the MRO.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar

from nvwatch.sim.gpu.mig_state import GpuMig, MigDevice
from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.nvml.abi import (
    ERROR_DRIVER_NOT_LOADED,
    ERROR_GPU_IS_LOST,
    ERROR_INVALID_ARGUMENT,
    ERROR_UNINITIALIZED,
    address_of,
)
from nvwatch.sim.nvml.core import NvmlCore

P = ParamSpec("P")
M = TypeVar("M", bound="MigHandles")
# fn(self, gpu, its MIG state, the MIG device or None for the GPU itself, *args)
MigFn = Callable[Concatenate[M, SimulatedGpu, GpuMig | None, MigDevice | None, P], int]

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
                base = getattr(super(MigHandles, self), name, None)
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


class MigHandles(NvmlCore):
    """What the MIG areas share: the checks of a call, and GPU/compute-instance handles."""

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
