"""Which hardware exists on this node, read from the PCI functions in sysfs.

A source that cannot read its subsystem must tell "this node has no such hardware"
(absent: nothing to report, no page) from "the hardware is there and cannot be read"
(down: page). The driver cannot be asked, since the driver may be what is broken; the
kernel's PCI core can: it lists every function under `<root>/bus/pci/devices/<address>`
with its `vendor` and `class`, whether a driver is bound to it or not.

Pure functions over a root path. A file that is missing, unreadable, garbage or not a
regular file (a FIFO, which would block a plain open) makes only that function unknown
(it is not counted as a device), never an exception. A PCI tree that cannot be listed at
all leaves presence unknown, which is reported as down: silence about a broken device
costs more than a question about a missing one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nvwatch.agent.sources import SourceAbsent, SourceUnavailable
from nvwatch.agent.sources.sysfs_read import read_attribute

PCI_VENDOR_NVIDIA = 0x10DE
PCI_VENDOR_MELLANOX = 0x15B3  # NVIDIA networking (ConnectX, BlueField) keeps this id

# class codes are 24 bits: base class, subclass, programming interface
_BASE_CLASS_DISPLAY = 0x03  # VGA 0x0300 and 3D controller 0x0302 alike
_SUBCLASS_ETHERNET = 0x0200
_SUBCLASS_INFINIBAND = 0x0207

# Drivers that hand a function to a virtual machine: the host is not meant to drive it,
# so its NVML or RDMA stack not seeing the device is the configuration, not a fault.
PASSTHROUGH_DRIVERS = frozenset({"vfio-pci", "pci-stub"})

# vendor and class are a short line each ("0x10de\n"); a longer read is not sysfs
_MAX_ATTRIBUTE = 64


@dataclass(frozen=True)
class PciFunction:
    address: str  # the sysfs name, "0000:3b:00.0"
    vendor: int
    device_class: int  # 24 bits, e.g. 0x030200 for a 3D controller
    driver: str | None  # name of the bound driver, None when none is bound

    @property
    def passed_through(self) -> bool:
        return self.driver in PASSTHROUGH_DRIVERS


@dataclass(frozen=True)
class PciScan:
    """The PCI functions found; `listed` is False when the directory could not be read,
    i.e. presence is unknown (a container without /sys/bus/pci), not "nothing there"."""

    directory: str
    listed: bool
    functions: tuple[PciFunction, ...]

    def nvidia_gpus(self) -> tuple[PciFunction, ...]:
        """NVIDIA display-class functions the host drives (not NVSwitches, not HDMI audio)."""
        return self._host_owned(PCI_VENDOR_NVIDIA, lambda c: c >> 16 == _BASE_CLASS_DISPLAY)

    def infiniband_hcas(self) -> tuple[PciFunction, ...]:
        """Mellanox functions in InfiniBand mode: useless without the RDMA stack."""
        return self._host_owned(PCI_VENDOR_MELLANOX, lambda c: c >> 8 == _SUBCLASS_INFINIBAND)

    def ethernet_rdma_nics(self) -> tuple[PciFunction, ...]:
        """Mellanox functions in Ethernet mode: RoCE-capable, but also plain NICs."""
        return self._host_owned(PCI_VENDOR_MELLANOX, lambda c: c >> 8 == _SUBCLASS_ETHERNET)

    def _host_owned(
        self, vendor: int, class_matches: Callable[[int], bool]
    ) -> tuple[PciFunction, ...]:
        return tuple(
            f
            for f in self.functions
            if f.vendor == vendor and class_matches(f.device_class) and not f.passed_through
        )


def pci_devices_dir(sysfs_root: Path | str) -> str:
    return os.path.join(sysfs_root, "bus", "pci", "devices")


def scan_pci(sysfs_root: Path | str) -> PciScan:
    """Every readable PCI function under `<sysfs_root>/bus/pci/devices`, in address order."""
    directory = pci_devices_dir(sysfs_root)
    try:
        names = sorted(n for n in os.listdir(directory) if not n.startswith("."))
    except OSError:
        return PciScan(directory=directory, listed=False, functions=())
    functions = []
    for name in names:
        found = read_function(os.path.join(directory, name))
        if found is not None:
            functions.append(found)
    return PciScan(directory=directory, listed=True, functions=tuple(functions))


def read_function(path: str) -> PciFunction | None:
    """One function directory; None when its vendor or class cannot be read as a number."""
    vendor = _read_hex(os.path.join(path, "vendor"), bits=16)
    device_class = _read_hex(os.path.join(path, "class"), bits=24)
    if vendor is None or device_class is None:
        return None
    return PciFunction(
        address=os.path.basename(path),
        vendor=vendor,
        device_class=device_class,
        driver=_driver(path),
    )


def _read_hex(path: str, *, bits: int) -> int | None:
    try:
        # non-blocking, regular files only: a FIFO here must not hang the source
        raw = read_attribute(path, _MAX_ATTRIBUTE)
        value = int(raw.decode("ascii").strip(), 16)
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return value if 0 <= value < 1 << bits else None


def _driver(path: str) -> str | None:
    """The bound driver's name: the `driver` link points at bus/pci/drivers/<name>."""
    try:
        target = os.readlink(os.path.join(path, "driver"))
    except OSError:
        return None
    return os.path.basename(target.rstrip("/")) or None


def plural(count: int, noun: str) -> str:
    """A count and its noun ("1 NVIDIA GPU", "2 NVIDIA GPUs") for operator messages."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def rdma_verdict(scan: PciScan, no_devices: str) -> Exception:
    """Why an RDMA source has no devices (`no_devices`: "/sys/class/infiniband is empty").

    Mellanox functions in Ethernet mode without RDMA devices are absent, not down: they
    are as often plain NICs as RoCE ports, and a page on every node with a ConnectX
    Ethernet NIC would teach people to ignore the page. InfiniBand-mode functions are
    useless without the RDMA stack, so there its absence is a fault.
    """
    if not scan.listed:
        return SourceUnavailable(
            f"no InfiniBand devices: {no_devices}, and {scan.directory} cannot be listed "
            "to tell whether this node has HCAs"
        )
    hcas = scan.infiniband_hcas()
    if hcas:
        return SourceUnavailable(
            f"{plural(len(hcas), 'Mellanox HCA')} on PCI but {no_devices}: "
            "is the mlx5_ib driver loaded?"
        )
    nics = scan.ethernet_rdma_nics()
    if nics:
        return SourceAbsent(
            f"no InfiniBand HCA on this node: {plural(len(nics), 'Mellanox Ethernet NIC')} "
            f"without RDMA devices ({no_devices}; RoCE would need mlx5_ib)"
        )
    return SourceAbsent(
        f"no InfiniBand or RoCE HCA on this node (no PCI function with vendor "
        f"0x{PCI_VENDOR_MELLANOX:04x} in {scan.directory})"
    )
