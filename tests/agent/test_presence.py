"""The PCI presence scan over real sysfs-shaped trees on disk: what counts as a device."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nvwatch.agent.sources import SourceAbsent, SourceUnavailable
from nvwatch.agent.sources.presence import PciFunction, rdma_verdict, scan_pci

NVIDIA_3D = ("0x10de", "0x030200")  # data-centre GPU: 3D controller
NVIDIA_VGA = ("0x10de", "0x030000")  # GeForce: VGA controller
NVIDIA_AUDIO = ("0x10de", "0x040300")  # a GeForce's HDMI audio function
NVIDIA_NVSWITCH = ("0x10de", "0x068000")  # bridge class: not a GPU
MLX_IB = ("0x15b3", "0x020700")
MLX_ETH = ("0x15b3", "0x020000")
INTEL_ETH = ("0x8086", "0x020000")


def add_function(
    root: Path, address: str, vendor: str, pci_class: str, driver: str | None = None
) -> Path:
    """A function as Linux lays it out: devices/pci…/<address>, linked from bus/pci/devices."""
    real = root / "devices" / "pci0000:00" / address
    real.mkdir(parents=True)
    (real / "vendor").write_text(vendor + "\n")
    (real / "class").write_text(pci_class + "\n")
    if driver is not None:
        drivers = root / "bus" / "pci" / "drivers" / driver
        drivers.mkdir(parents=True, exist_ok=True)
        (real / "driver").symlink_to(os.path.relpath(drivers, real))
    bus = root / "bus" / "pci" / "devices"
    bus.mkdir(parents=True, exist_ok=True)
    (bus / address).symlink_to(os.path.relpath(real, bus))
    return real


def test_gpus_of_both_display_classes_are_found_and_nothing_else_nvidia(tmp_path: Path) -> None:
    add_function(tmp_path, "0000:3b:00.0", *NVIDIA_3D, driver="nvidia")
    add_function(tmp_path, "0000:5e:00.0", *NVIDIA_VGA)  # no driver bound: still a GPU
    add_function(tmp_path, "0000:5e:00.1", *NVIDIA_AUDIO)
    add_function(tmp_path, "0000:c0:00.0", *NVIDIA_NVSWITCH)
    add_function(tmp_path, "0000:00:1f.6", *INTEL_ETH)
    scan = scan_pci(tmp_path)
    assert scan.listed and len(scan.functions) == 5
    assert [f.address for f in scan.nvidia_gpus()] == ["0000:3b:00.0", "0000:5e:00.0"]
    assert scan.nvidia_gpus()[0] == PciFunction("0000:3b:00.0", 0x10DE, 0x030200, "nvidia")
    assert scan.nvidia_gpus()[1].driver is None
    assert scan.infiniband_hcas() == () and scan.ethernet_rdma_nics() == ()


def test_no_gpu_on_a_cpu_node(tmp_path: Path) -> None:
    add_function(tmp_path, "0000:00:1f.6", *INTEL_ETH)
    scan = scan_pci(tmp_path)
    assert scan.listed and scan.nvidia_gpus() == ()


def test_mellanox_functions_by_mode(tmp_path: Path) -> None:
    add_function(tmp_path, "0000:13:00.0", *MLX_IB, driver="mlx5_core")
    add_function(tmp_path, "0000:13:00.1", *MLX_IB, driver="mlx5_core")
    add_function(tmp_path, "0000:a1:00.0", *MLX_ETH, driver="mlx5_core")
    scan = scan_pci(tmp_path)
    assert [f.address for f in scan.infiniband_hcas()] == ["0000:13:00.0", "0000:13:00.1"]
    assert [f.address for f in scan.ethernet_rdma_nics()] == ["0000:a1:00.0"]
    assert scan.nvidia_gpus() == ()


def test_functions_handed_to_a_vm_are_not_the_hosts(tmp_path: Path) -> None:
    add_function(tmp_path, "0000:3b:00.0", *NVIDIA_3D, driver="vfio-pci")
    add_function(tmp_path, "0000:13:00.0", *MLX_IB, driver="vfio-pci")
    scan = scan_pci(tmp_path)
    assert len(scan.functions) == 2
    assert scan.nvidia_gpus() == () and scan.infiniband_hcas() == ()


@pytest.mark.parametrize(
    ("vendor", "pci_class"),
    [
        ("garbage", "0x030200"),
        ("0x10de", "not a class"),
        ("", "0x030200"),
        ("0x10de", ""),
        ("0x10de0000", "0x030200"),  # wider than a vendor id
        ("0x10de", "0x1030200"),  # wider than a class code
        ("-0x10de", "0x030200"),
    ],
)
def test_a_garbage_attribute_is_not_a_device(tmp_path: Path, vendor: str, pci_class: str) -> None:
    add_function(tmp_path, "0000:3b:00.0", vendor, pci_class)
    add_function(tmp_path, "0000:5e:00.0", *NVIDIA_3D)
    scan = scan_pci(tmp_path)
    assert [f.address for f in scan.nvidia_gpus()] == ["0000:5e:00.0"]


def test_binary_garbage_is_not_a_device(tmp_path: Path) -> None:
    real = add_function(tmp_path, "0000:3b:00.0", *NVIDIA_3D)
    (real / "vendor").write_bytes(b"\xff\xfe\x00\x10")
    assert scan_pci(tmp_path).functions == ()


def test_unreadable_or_missing_attributes_are_not_a_device(tmp_path: Path) -> None:
    # EISDIR stands for any read error (tests run as root, where a mode of 000 reads fine)
    unreadable = add_function(tmp_path, "0000:3b:00.0", *NVIDIA_3D)
    (unreadable / "vendor").unlink()
    (unreadable / "vendor").mkdir()
    missing = add_function(tmp_path, "0000:5e:00.0", *NVIDIA_3D)
    (missing / "class").unlink()
    dangling = add_function(tmp_path, "0000:86:00.0", *NVIDIA_3D)
    (dangling / "vendor").unlink()
    (dangling / "vendor").symlink_to(dangling / "gone")
    bus = tmp_path / "bus" / "pci" / "devices"
    (bus / "0000:af:00.0").symlink_to(tmp_path / "nowhere")  # the function itself vanished
    (bus / ".hidden").mkdir()
    scan = scan_pci(tmp_path)
    assert scan.listed and scan.functions == ()


def test_empty_bus_is_listed_and_has_nothing(tmp_path: Path) -> None:
    (tmp_path / "bus" / "pci" / "devices").mkdir(parents=True)
    scan = scan_pci(tmp_path)
    assert scan.listed and scan.functions == ()


def test_no_bus_directory_is_unknown_not_empty(tmp_path: Path) -> None:
    scan = scan_pci(tmp_path)
    assert not scan.listed
    (tmp_path / "bus" / "pci").mkdir(parents=True)
    (tmp_path / "bus" / "pci" / "devices").write_text("not a directory")
    assert not scan_pci(tmp_path).listed


def test_rdma_verdicts(tmp_path: Path) -> None:
    no_devices = "/sys/class/infiniband does not exist"
    unknown = rdma_verdict(scan_pci(tmp_path), no_devices)
    assert isinstance(unknown, SourceUnavailable) and "cannot be listed" in str(unknown)
    (tmp_path / "bus" / "pci" / "devices").mkdir(parents=True)
    nothing = rdma_verdict(scan_pci(tmp_path), no_devices)
    assert isinstance(nothing, SourceAbsent) and "vendor 0x15b3" in str(nothing)
    add_function(tmp_path, "0000:a1:00.0", *MLX_ETH)
    ethernet = rdma_verdict(scan_pci(tmp_path), no_devices)
    assert isinstance(ethernet, SourceAbsent)
    assert "1 Mellanox Ethernet NIC without RDMA devices" in str(ethernet)
    add_function(tmp_path, "0000:13:00.0", *MLX_IB)
    add_function(tmp_path, "0000:13:00.1", *MLX_IB)
    down = rdma_verdict(scan_pci(tmp_path), no_devices)
    assert isinstance(down, SourceUnavailable)
    assert str(down) == (
        "2 Mellanox HCAs on PCI but /sys/class/infiniband does not exist: "
        "is the mlx5_ib driver loaded?"
    )
