"""`SimulatedNvml`: the simulated C library of one node, composed from its areas.

pynvml finds every C function with `getattr(pynvml.nvmlLib, name)`. `SimulatedNvml` is an
object whose attributes behave like those C functions: they take the ctypes arguments
pynvml passes (byref() out-parameters, c_uint, string buffers, struct pointers), write
results through them and return an `nvmlReturn_t` integer. A function it does not have
is a missing attribute, which pynvml turns into `NVMLError_FunctionNotFound`. So the
structs, units, exceptions and version fallbacks are pynvml's own, and anything written
against pynvml (the agent, gpustat, nvitop) runs on it unchanged.

Each base class below holds the C functions of one area, in the module of that name;
`NvmlCore` (core.py) holds the state they share.
"""

from __future__ import annotations

from nvwatch.sim.nvml.coverage import CoverageQueries
from nvwatch.sim.nvml.ecc import EccQueries
from nvwatch.sim.nvml.events import EventQueries
from nvwatch.sim.nvml.fields import FieldValueQueries
from nvwatch.sim.nvml.gpm import GpmQueries
from nvwatch.sim.nvml.identity import IdentityQueries
from nvwatch.sim.nvml.memory import MemoryQueries
from nvwatch.sim.nvml.mig_capacity import MigCapacityQueries
from nvwatch.sim.nvml.mig_devices import MigDeviceQueries
from nvwatch.sim.nvml.mig_instances import MigInstanceQueries
from nvwatch.sim.nvml.nvlink import NvLinkQueries
from nvwatch.sim.nvml.power_thermal import ClockQueries, PowerQueries, ThermalQueries
from nvwatch.sim.nvml.system import SystemCalls


class SimulatedNvml(
    # first: under MIG they answer some calls in place of the areas below (mig_handles)
    MigCapacityQueries,  # profile info by ID, placements, capacity, a MIG device's attributes
    MigDeviceQueries,  # MIG mode, MIG device handles, what MIG mode changes on a GPU
    MigInstanceQueries,  # GPU and compute instances, GPM per GPU instance
    CoverageQueries,  # before MemoryQueries: its ProcessQueries extends it (coverage.py)
    SystemCalls,
    IdentityQueries,
    MemoryQueries,
    PowerQueries,
    ThermalQueries,
    ClockQueries,
    EccQueries,
    NvLinkQueries,
    FieldValueQueries,
    EventQueries,
    GpmQueries,
):
    """The simulated C library of one node. Attributes named nvml* are the C functions."""
