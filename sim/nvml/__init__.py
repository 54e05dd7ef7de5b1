"""A simulated libnvidia-ml, placed under the real pynvml bindings.

Where things are:
- `library`: `SimulatedNvml`, composed of one class per area:
  `system` (init, versions, handles), `identity` (names, PCI info, PCIe link),
  `memory` (utilization, memory, processes), `power_thermal` (power, temperatures,
  fans, clocks, throttle reasons), `ecc` (ECC, retired pages, remapped rows),
  `nvlink`, `fields` (nvmlDeviceGetFieldValues), `events` (event sets, XIDs), `gpm`,
  MIG in `mig_devices`, `mig_instances` and `mig_capacity` (handles: `mig_handles`), and
  `coverage` for the rest of the device queries; what each area answers NotSupported is
  a table beside it (the mechanism: `unsupported`);
- `core`: the state they share and the wrappers that make a method a C entry point;
- `abi`: return codes and the ctypes argument helpers;
- `installation`: install()/uninstall() under pynvml, `DispatchingNvml` + bind() for
  a fleet in one process; `faults`: `FaultInjectingNvml`; `exec_env`: child processes.
"""

from nvwatch.sim.nvml.exec_env import exec_environment, install_from_environment
from nvwatch.sim.nvml.faults import DEFAULT_FAULT_CODES, FaultInjectingNvml
from nvwatch.sim.nvml.installation import (
    DispatchingNvml,
    bind,
    current_nvml,
    install,
    uninstall,
)
from nvwatch.sim.nvml.library import SimulatedNvml

__all__ = [
    "DEFAULT_FAULT_CODES",
    "DispatchingNvml",
    "FaultInjectingNvml",
    "SimulatedNvml",
    "bind",
    "current_nvml",
    "exec_environment",
    "install",
    "install_from_environment",
    "uninstall",
]
