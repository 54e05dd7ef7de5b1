"""Writing the simulated sysfs tree: the static PCI and HCA structure, and atomic files.

`SimulatedFabric` (sim/fabric/fabric.py) decides what the counter files say; this module
only knows how a sysfs tree is laid out and how to replace a file so that a reader
polling concurrently never sees half a number.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from nvwatch.sim.profiles import Profile, pci_path

PCI_VENDOR_NVIDIA = "0x10de"
PCI_VENDOR_MELLANOX = "0x15b3"
PCI_VENDOR_BRIDGE = "0x8086"  # root ports and PCIe switch ports
PCI_CLASS_3D_CONTROLLER = "0x030200"
PCI_CLASS_INFINIBAND = "0x020700"
PCI_CLASS_BRIDGE = "0x060400"


class TreeWriter:
    """Writes files under `root`, skipping any whose text is what it last wrote."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._written: dict[str, str] = {}

    def put(self, path: Path, text: str) -> None:
        key = str(path)
        if self._written.get(key) == text:
            return
        # A dot-file in the same directory, so os.replace is an atomic rename on one
        # filesystem and readers (which skip dot-files when listing) never see it.
        tmp = path.with_name(f".{path.name}.tmp")
        # os-level calls, not write_text: a fleet rewrites thousands of counters per
        # interval, and the text layer's setup cost more than the write itself
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, text.encode("ascii"))
        finally:
            os.close(fd)
        os.replace(tmp, path)
        self._written[key] = text


def write_structure(writer: TreeWriter, profile: Profile, seed: int) -> None:
    """The parts of the tree that never change: PCI devices, bus links, HCA attributes."""
    _write_pci(writer, profile)
    _write_hcas(writer, profile, seed)


def _write_pci(writer: TreeWriter, profile: Profile) -> None:
    """devices/pci0000:NN/<root port>/<switch up>/<switch down>/<endpoint>, each function
    with vendor, class and numa_node, and bus/pci/devices/<bus id> links into it."""
    devices = writer.root / "devices"
    bus = writer.root / "bus" / "pci" / "devices"
    bus.mkdir(parents=True, exist_ok=True)
    endpoints = [
        (pci_path(profile, "gpu", i), PCI_VENDOR_NVIDIA, PCI_CLASS_3D_CONTROLLER)
        for i in range(profile.gpu_count)
    ] + [
        (pci_path(profile, "nic", i), PCI_VENDOR_MELLANOX, PCI_CLASS_INFINIBAND)
        for i in range(len(profile.nics))
    ]
    for path, vendor, pci_class in endpoints:
        numa = "0" if path[0] == "pci0000:00" else "1"
        for depth in range(1, len(path) + 1):
            node = devices.joinpath(*path[:depth])
            node.mkdir(parents=True, exist_ok=True)
            if depth == 1:
                continue  # the host bridge is not a PCI function
            is_endpoint = depth == len(path)
            writer.put(node / "vendor", (vendor if is_endpoint else PCI_VENDOR_BRIDGE) + "\n")
            writer.put(node / "class", (pci_class if is_endpoint else PCI_CLASS_BRIDGE) + "\n")
            writer.put(node / "numa_node", numa + "\n")
            target = os.path.join("..", "..", "..", "devices", *path[:depth])
            _symlink(target, bus / path[depth - 1])


def _write_hcas(writer: TreeWriter, profile: Profile, seed: int) -> None:
    """class/infiniband/mlx5_N: the HCA's attributes, its PCI device link, port dirs."""
    ib = writer.root / "class" / "infiniband"
    for index, nic in enumerate(profile.nics):
        device_dir = ib / nic.device
        device_dir.mkdir(parents=True, exist_ok=True)
        writer.put(device_dir / "board_id", nic.board_id + "\n")
        writer.put(device_dir / "fw_ver", nic.firmware_version + "\n")
        writer.put(device_dir / "hca_type", nic.hca_type + "\n")
        writer.put(device_dir / "node_guid", node_guid(seed, index) + "\n")
        writer.put(device_dir / "node_type", "1: CA\n")
        path = pci_path(profile, "nic", index)
        _symlink(os.path.join("..", "..", "..", "devices", *path), device_dir / "device")
        for sub in ("counters", "hw_counters"):
            (device_dir / "ports" / "1" / sub).mkdir(parents=True, exist_ok=True)


def node_guid(seed: int, index: int) -> str:
    # Mellanox OUI 0c:42:a1, then a per-node, per-HCA serial, printed as the kernel
    # does: four groups of four hex digits.
    serial = (random.Random(f"guid:{seed}").getrandbits(32) << 8) | index
    raw = f"0c42a103{serial & 0xFFFFFFFF:08x}"
    return ":".join(raw[i : i + 4] for i in range(0, 16, 4))


def _symlink(target: str, link: Path) -> None:
    if link.is_symlink():
        if os.readlink(link) == target:
            return
        link.unlink()
    os.symlink(target, link)
