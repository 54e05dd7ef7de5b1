"""A simulated node's kernel log: its XIDs as the driver would print them to /dev/kmsg.

The agent counts XIDs from the kernel log (agent/sources/nvml/kmsg.py), so the simulator
writes one record per XID that a simulated GPU raises, in /dev/kmsg's record format
(``<prio>,<seq>,<usec since boot>,<flags>;<message>``), to a file the agent reads with
`--kmsg-path`. The record is written when the simulated library hands the XID to its
event sets, before any waiter sees the event, as the driver logs an XID as it raises it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from nvwatch.sim.gpu.state import EVENT_XID, GpuEvent
from nvwatch.sim.profiles import Profile, gpu_pci_bus_id

#: How long the simulated node had been up when the simulation started.
UPTIME_AT_START_S = 600.0
_PRIO_WARNING = 4  # facility kern (0) << 3 | KERN_WARNING, as NVRM's Xid lines carry
_PRIO_INFO = 6
_APP_PROCESS = "pid=4242, name=python3"  # XIDs a CUDA application causes name it
_NO_PROCESS = "pid='<unknown>', name=<unknown>"  # hardware XIDs have no process
# What R535-era drivers print after the code, for the XIDs the scenarios raise.
_DETAILS = {
    13: (_APP_PROCESS, "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Illegal Address"),
    31: (
        _APP_PROCESS,
        "channel 0x00000010, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 "
        "faulted @ 0x7f3a_12340000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    ),
    43: (_APP_PROCESS, "channel 0x00000008"),
    48: (
        _NO_PROCESS,
        "An uncorrectable double bit error (DBE) has been detected on GPU in the "
        "framebuffer at partition 1, subpartition 0.",
    ),
    63: (_NO_PROCESS, "Row Remapper: New row marked for remapping, reset gpu to activate."),
    74: (_NO_PROCESS, "NVLink: fatal error detected on link 0(0x0, 0x0, 0x10000, 0x0, 0x0)"),
    79: (_NO_PROCESS, "GPU has fallen off the bus."),
}


def kernel_pci(bus_id: str) -> str:
    """The kernel's name of a GPU in NVRM lines: "00000000:3B:00.0" -> "0000:3b:00"."""
    domain, bus, device_function = bus_id.lower().split(":")
    return f"{int(domain, 16):04x}:{bus}:{device_function.split('.')[0]}"


def xid_message(pci: str, xid: int) -> str:
    process, detail = _DETAILS.get(xid, (_NO_PROCESS, "Xid event"))
    return f"NVRM: Xid (PCI:{pci}): {xid}, {process}, {detail}"


class SimulatedKernelLog:
    """The node's /dev/kmsg as a file: a few boot records, then one record per XID."""

    def __init__(
        self, profile: Profile, clock: Callable[[], float], directory: Path | None = None
    ) -> None:
        self.profile = profile
        fd, name = tempfile.mkstemp(
            prefix=f"nvwatch-sim-{profile.name}-", suffix=".kmsg", dir=directory
        )
        os.close(fd)
        self.path = Path(name)
        self._boot = clock() - UPTIME_AT_START_S
        self._seq = 0
        self._pci = [kernel_pci(gpu_pci_bus_id(profile, i)) for i in range(profile.gpu_count)]
        self.append(f"Linux version 6.8.0-nvwatch-sim ({profile.name})", self._boot, _PRIO_INFO)
        self.append(
            f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {profile.driver_version}  "
            "Release Build",
            self._boot + 3.2,
            _PRIO_INFO,
        )

    def on_event(self, event: GpuEvent) -> None:
        """An event the simulated library delivers: XIDs go to the log, others do not."""
        if event.event_type & EVENT_XID:
            message = xid_message(self._pci[event.gpu], event.data)
            self.append(message, event.time, _PRIO_WARNING)

    def append(self, message: str, at: float, prio: int = _PRIO_INFO) -> None:
        """One record at simulated time `at`; one write, so a reader sees whole lines."""
        usec = max(0, round((at - self._boot) * 1_000_000))
        with open(self.path, "ab") as log:
            log.write(f"{prio},{self._seq},{usec},-;{message}\n".encode())
        self._seq += 1

    def close(self) -> None:
        self.path.unlink(missing_ok=True)
