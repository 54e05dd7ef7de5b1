"""GPU <-> HCA affinity from the PCIe tree in sysfs, named like `nvidia-smi topo -m`.

A device's place in the PCIe hierarchy is the chain of directories sysfs puts above it:
/sys/devices/pci0000:00/0000:00:01.0/0000:10:00.0/0000:11:01.0/0000:13:00.0 is host
bridge, root port, switch upstream port, switch downstream port, endpoint. That chain is a
`PciPath` (a tuple of those names). Two devices' relation follows from their deepest
common ancestor, so the functions below are pure over paths; `Resolver` is the only part
that reads sysfs, and it is rooted at a configurable mount point like every source.

Relations, nearest first (nvidia-smi's legend):
  X     the same device
  PIX   through at most one PCIe switch (common ancestor is that switch)
  PXB   through several PCIe switches, without the host bridge
  PHB   through a root port / host bridge (common ancestor is the root port)
  NODE  between root ports or host bridges of one NUMA node / root complex
  SYS   across the inter-socket link (different root complexes and NUMA nodes)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from nvwatch.agent.sources.pci_address import sysfs_bus_id
from nvwatch.agent.sources.sysfs_read import read_attribute

PciPath = tuple[str, ...]


def _common_depth(a: PciPath, b: PciPath) -> int:
    depth = 0
    for x, y in zip(a, b, strict=False):  # paths differ in length
        if x != y:
            break
        depth += 1
    return depth


def _deepest_switch(path: PciPath) -> int:
    """Index of the switch the endpoint hangs off; -1 when it sits on a root port.

    Below the root port (index 1) sysfs alternates switch upstream port, downstream
    port, ...; the element at index i >= 2 belongs to switch (i - 2) // 2. The endpoint's
    parent is at len - 2.
    """
    parent = len(path) - 2
    return (parent - 2) // 2 if parent >= 2 else -1


def pcie_relation(
    a: PciPath, b: PciPath, *, numa_a: int | None = None, numa_b: int | None = None
) -> str:
    """The nvidia-smi topo relation between two devices given their sysfs PCI paths.

    Paths start at the host bridge ("pci0000:00"). `numa_a`/`numa_b` (the devices'
    numa_node files) tell NODE from SYS for devices on different host bridges; without
    them, different host bridges count as different sockets (SYS).
    """
    if a == b:
        return "X"
    depth = _common_depth(a, b)
    if depth == 0:
        same_node = numa_a is not None and numa_a >= 0 and numa_a == numa_b
        return "NODE" if same_node else "SYS"
    if depth == 1:
        return "NODE"  # same host bridge, different root ports
    if depth == 2:
        return "PHB"  # the root port is the closest thing they share
    common_switch = (depth - 1 - 2) // 2
    if _deepest_switch(a) == common_switch and _deepest_switch(b) == common_switch:
        return "PIX"
    return "PXB"


def nearest_gpus(hca_path: PciPath, gpu_paths: Sequence[PciPath | None]) -> list[int]:
    """Indices of the GPUs that share the deepest PCIe ancestor with the HCA (ties all).

    `gpu_paths[i]` is GPU i's path, or None where it could not be resolved (skipped).
    Empty when no GPU path is known.
    """
    depths = [
        (index, _common_depth(hca_path, path))
        for index, path in enumerate(gpu_paths)
        if path is not None
    ]
    if not depths:
        return []
    best = max(depth for _, depth in depths)
    return [index for index, depth in depths if depth == best]


class Resolver:
    """Reads PCI paths and NUMA nodes out of a sysfs tree rooted at `sysfs_root`."""

    def __init__(self, sysfs_root: Path) -> None:
        self._devices = os.path.realpath(os.path.join(sysfs_root, "devices"))
        self._root = sysfs_root

    def _path_of(self, link: str) -> PciPath | None:
        try:
            target = os.path.realpath(link, strict=True)
        except OSError:
            return None
        relative = os.path.relpath(target, self._devices)
        if relative.startswith(".."):
            return None  # a link out of the tree is not a PCI device we can place
        parts = tuple(relative.split(os.sep))
        return parts if parts and parts[0].startswith("pci") else None

    def hca_path(self, device: str) -> PciPath | None:
        """class/infiniband/<device>/device -> ("pci0000:00", ..., "0000:13:00.0")."""
        return self._path_of(os.path.join(self._root, "class", "infiniband", device, "device"))

    def gpu_path(self, bus_id: str) -> PciPath | None:
        """bus/pci/devices/<bus id> for an NVML- or sysfs-style bus id; None if malformed."""
        try:
            name = sysfs_bus_id(bus_id)
        except ValueError:
            return None
        return self._path_of(os.path.join(self._root, "bus", "pci", "devices", name))

    def numa_node(self, path: PciPath) -> int | None:
        """The device's numa_node file; -1 (no NUMA information) and errors are None."""
        try:
            # non-blocking, regular files only: a FIFO here must not hang the caller
            raw = read_attribute(os.path.join(self._devices, *path, "numa_node"), 32)
            node = int(raw.strip() or b"-1")
        except (OSError, ValueError):
            return None
        return node if node >= 0 else None

    def relation(self, a: PciPath, b: PciPath) -> str:
        return pcie_relation(a, b, numa_a=self.numa_node(a), numa_b=self.numa_node(b))
