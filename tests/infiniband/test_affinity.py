"""GPU <-> HCA PCIe affinity: pure relations over paths, and resolution from sysfs."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvwatch.agent.sources.infiniband import InfinibandSource
from nvwatch.agent.sources.pci_address import sysfs_bus_id
from nvwatch.agent.sources.pci_affinity import PciPath, Resolver, nearest_gpus, pcie_relation
from nvwatch.sim.clock import ManualClock
from nvwatch.sim.fabric.fabric import SimulatedFabric
from nvwatch.sim.profiles import PROFILES, get_profile, gpu_pci_bus_id, pci_path

from .sysfs_tree import add_device, add_pci_device, healthy_port, link_hca

HB0, HB1 = "pci0000:00", "pci0000:80"


def _under_switch(hb: str, root_port: str, up: str, down: str, endpoint: str) -> PciPath:
    return (hb, root_port, up, down, endpoint)


# Two PCIe switches on one socket, each with 2 GPUs and 1 HCA (a DGX-1 quarter pair).
GPU0 = _under_switch(HB0, "0000:00:01.0", "0000:10:00.0", "0000:11:00.0", "0000:12:00.0")
GPU1 = _under_switch(HB0, "0000:00:01.0", "0000:10:00.0", "0000:11:01.0", "0000:13:00.0")
HCA0 = _under_switch(HB0, "0000:00:01.0", "0000:10:00.0", "0000:11:02.0", "0000:14:00.0")
GPU2 = _under_switch(HB0, "0000:00:02.0", "0000:20:00.0", "0000:21:00.0", "0000:22:00.0")
GPU3 = _under_switch(HB0, "0000:00:02.0", "0000:20:00.0", "0000:21:01.0", "0000:23:00.0")
HCA1 = _under_switch(HB0, "0000:00:02.0", "0000:20:00.0", "0000:21:02.0", "0000:24:00.0")
GPU_FAR = _under_switch(HB1, "0000:80:01.0", "0000:90:00.0", "0000:91:00.0", "0000:92:00.0")


@pytest.mark.parametrize(
    ("bus_id", "expected"),
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),  # nvmlPciInfo_t.busId: 8-digit domain
        ("0000:3B:00.0", "0000:3b:00.0"),  # busIdLegacy: 4-digit domain
        ("0000:3b:00.0", "0000:3b:00.0"),  # sysfs
        ("00010000:3B:00.0", "10000:3b:00.0"),  # NVML, GPU behind a VMD controller
        ("10000:3b:00.0", "10000:3b:00.0"),  # sysfs names it with %04x: all 5 digits
        ("00000001:AB:1F.3", "0001:ab:1f.3"),
        ("FFFFFFFF:ff:1f.7", "ffffffff:ff:1f.7"),  # the largest address there is
        ("12:00.0", "0000:12:00.0"),  # no domain: domain 0
        (" 0000:C1:00.0\n", "0000:c1:00.0"),  # as read from a file
    ],
)
def test_sysfs_bus_id(bus_id: str, expected: str) -> None:
    assert sysfs_bus_id(bus_id) == expected
    assert sysfs_bus_id(expected) == expected  # the sysfs form is a fixed point


@pytest.mark.parametrize(
    "bus_id",
    [
        "",
        "gpu0",
        "N/A",
        "0000:12:00",  # no function
        "100000000:12:00.0",  # a 9-digit domain: more than NVML's 32 bits
        "0000:12:00.8",  # functions are 0-7
        "0000:12:20.0",  # devices are 5 bits: 00-1f
        "0000:3g:00.0",
        "0000:3b:0.0",
        "0000:3b:00.0.0",
        "0000:3b:00.0 trailing",
        ":3b:00.0",
    ],
)
def test_sysfs_bus_id_rejects(bus_id: str) -> None:
    with pytest.raises(
        ValueError, match=r"^not a PCI bus id \(domain:bus:device\.function\): "
    ) as info:
        sysfs_bus_id(bus_id)
    assert "\n" not in str(info.value)


def test_relations() -> None:
    assert pcie_relation(GPU0, GPU0) == "X"
    assert pcie_relation(GPU0, HCA0) == "PIX"
    assert pcie_relation(GPU0, GPU1) == "PIX"
    assert pcie_relation(GPU0, GPU2) == "NODE"  # same host bridge, different root ports
    assert pcie_relation(GPU0, GPU_FAR) == "SYS"
    # different host bridges on one NUMA node: NODE, as nvidia-smi reports
    assert pcie_relation(GPU0, GPU_FAR, numa_a=0, numa_b=0) == "NODE"
    assert pcie_relation(GPU0, GPU_FAR, numa_a=0, numa_b=1) == "SYS"
    assert pcie_relation(GPU0, GPU_FAR, numa_a=-1, numa_b=-1) == "SYS"


def test_phb_and_pxb() -> None:
    on_root_port = (HB0, "0000:00:01.0", "0000:05:00.0")
    assert pcie_relation(on_root_port, GPU0) == "PHB"
    # a second-level switch under switch 0's downstream port 11:03.0
    nested = (HB0, "0000:00:01.0", "0000:10:00.0", "0000:11:03.0", "0000:30:00.0",
              "0000:31:00.0", "0000:32:00.0")  # fmt: skip
    assert pcie_relation(nested, GPU0) == "PXB"
    nested_peer = (*nested[:-2], "0000:31:01.0", "0000:33:00.0")
    assert pcie_relation(nested, nested_peer) == "PIX"


def test_relation_is_symmetric() -> None:
    paths = [GPU0, GPU1, HCA0, GPU2, GPU3, HCA1, GPU_FAR]
    for a in paths:
        for b in paths:
            assert pcie_relation(a, b) == pcie_relation(b, a)


def test_nearest_gpus_pure() -> None:
    gpus: list[PciPath | None] = [GPU0, GPU1, GPU2, GPU3]
    assert nearest_gpus(HCA0, gpus) == [0, 1]
    assert nearest_gpus(HCA1, gpus) == [2, 3]
    assert nearest_gpus(HCA0, [None, GPU1, GPU2]) == [1]
    assert nearest_gpus(HCA0, []) == []
    assert nearest_gpus(HCA0, [None]) == []
    # nothing shared with any GPU: every GPU ties at depth 0
    assert nearest_gpus(HCA0, [GPU_FAR, GPU_FAR]) == [0, 1]


def _two_switch_tree(root: Path) -> list[str]:
    for gpu in (GPU0, GPU1, GPU2, GPU3):
        add_pci_device(root, gpu, numa_node=0)
    link_hca(root, "mlx5_0", HCA0)
    link_hca(root, "mlx5_1", HCA1)
    add_device(root, "mlx5_0", ports={"1": healthy_port()})
    add_device(root, "mlx5_1", ports={"1": healthy_port()})
    return ["0000" + gpu[-1] for gpu in (GPU0, GPU1, GPU2, GPU3)]  # NVML-style ids


def test_resolver_on_a_real_tree(tmp_path: Path) -> None:
    bus_ids = _two_switch_tree(tmp_path)
    resolver = Resolver(tmp_path)
    assert resolver.hca_path("mlx5_0") == HCA0
    assert resolver.gpu_path(bus_ids[2]) == GPU2
    assert resolver.gpu_path("00000000:99:00.0") is None  # no such device
    assert resolver.gpu_path("not a bus id") is None
    assert resolver.hca_path("mlx5_9") is None
    assert resolver.numa_node(GPU0) == 0
    assert resolver.numa_node(HCA0) is None  # no numa_node file
    assert resolver.relation(GPU0, HCA0) == "PIX"


def test_resolver_finds_a_gpu_behind_vmd(tmp_path: Path) -> None:
    # Intel VMD puts its devices in PCI domain 0x10000 and up: NVML reports the GPU as
    # 00010000:3B:00.0, sysfs names it 10000:3b:00.0 under the VMD controller's bridge
    gpu = (HB0, "0000:00:0e.0", "pci10000:00", "10000:00:02.0", "10000:3b:00.0")
    hca = (HB0, "0000:00:0e.0", "pci10000:00", "10000:00:02.0", "10000:3c:00.0")
    add_pci_device(tmp_path, gpu, numa_node=0)
    link_hca(tmp_path, "mlx5_0", hca)
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port()})
    assert Resolver(tmp_path).gpu_path("00010000:3B:00.0") == gpu
    # and not the domain-0 device a 4-digit cut would name
    assert Resolver(tmp_path).gpu_path("0000:3b:00.0") is None
    sample = InfinibandSource(tmp_path, gpu_bus_ids=lambda: ["00010000:3B:00.0"]).collect()
    assert sample.devices[0].ports[0].nearest_gpus == (0,)


def test_source_labels_each_port_with_its_two_gpus(tmp_path: Path) -> None:
    bus_ids = _two_switch_tree(tmp_path)
    sample = InfinibandSource(tmp_path, gpu_bus_ids=lambda: bus_ids).collect()
    nearest = {d.name: d.ports[0].nearest_gpus for d in sample.devices}
    assert nearest == {"mlx5_0": (0, 1), "mlx5_1": (2, 3)}


def test_source_without_gpu_ids_has_no_nearest(tmp_path: Path) -> None:
    _two_switch_tree(tmp_path)
    for source in (InfinibandSource(tmp_path), InfinibandSource(tmp_path, gpu_bus_ids=list)):
        assert all(d.ports[0].nearest_gpus == () for d in source.collect().devices)


def test_source_follows_gpu_list_changes(tmp_path: Path) -> None:
    bus_ids = _two_switch_tree(tmp_path)
    current = bus_ids[:2]
    source = InfinibandSource(tmp_path, gpu_bus_ids=lambda: current, relist_every=1000)

    def mlx5_1() -> tuple[int, ...]:
        return next(d for d in source.collect().devices if d.name == "mlx5_1").ports[0].nearest_gpus

    # only GPUs 0 and 1 known: both tie for mlx5_1, sharing just the host bridge
    assert mlx5_1() == (0, 1)
    current = bus_ids
    assert mlx5_1() == (2, 3)


def test_simulated_dgx_h100_affinity(tmp_path: Path) -> None:
    fabric = SimulatedFabric("dgx-h100", tmp_path, clock=ManualClock())
    fabric.tick()
    sample = InfinibandSource(tmp_path, gpu_bus_ids=fabric.gpu_bus_ids).collect()
    nearest = {d.name: ",".join(map(str, d.ports[0].nearest_gpus)) for d in sample.devices}
    assert nearest == {
        "mlx5_0": "0,1",
        "mlx5_1": "0,1",
        "mlx5_2": "2,3",
        "mlx5_3": "2,3",
        "mlx5_4": "4,5",
        "mlx5_5": "4,5",
        "mlx5_6": "6,7",
        "mlx5_7": "6,7",
    }
    resolver = Resolver(tmp_path)
    hca0 = resolver.hca_path("mlx5_0")
    assert hca0 is not None
    gpu_paths = [resolver.gpu_path(b) for b in fabric.gpu_bus_ids()]
    relations = [resolver.relation(hca0, p) for p in gpu_paths if p is not None]
    assert relations == ["PIX", "PIX", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"]


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_simulated_tree_matches_profile_paths(tmp_path: Path, name: str) -> None:
    profile = get_profile(name)
    fabric = SimulatedFabric(profile, tmp_path, clock=ManualClock())
    fabric.write()
    resolver = Resolver(tmp_path)
    for index in range(profile.gpu_count):
        assert resolver.gpu_path(gpu_pci_bus_id(profile, index)) == pci_path(profile, "gpu", index)
    for index, nic in enumerate(profile.nics):
        assert resolver.hca_path(nic.device) == pci_path(profile, "nic", index)
    for index, nic in enumerate(profile.nics):
        # every NIC's nearest GPUs are the ones on its own PCIe switch
        gpu_paths = [resolver.gpu_path(b) for b in fabric.gpu_bus_ids()]
        hca = resolver.hca_path(nic.device)
        assert hca is not None
        expected = [g for g, s in enumerate(profile.gpu_pcie_switch) if s == nic.pcie_switch]
        assert nearest_gpus(hca, gpu_paths) == expected, (name, index)
