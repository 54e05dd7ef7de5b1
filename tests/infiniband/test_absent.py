"""No InfiniBand devices: absent when the PCI bus has no HCA, down when it has or had.

Real trees on disk: the simulator's full node tree where a whole node is meant, small
hand-built trees (tests/agent/test_presence.add_function) for single PCI functions.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from nvwatch.agent.sources import SourceAbsent, SourceUnavailable
from nvwatch.agent.sources.infiniband import InfinibandSource
from nvwatch.sim.clock import ManualClock
from nvwatch.sim.fabric.fabric import SimulatedFabric
from tests.agent.test_presence import INTEL_ETH, MLX_ETH, MLX_IB, NVIDIA_3D, add_function
from tests.infiniband.sysfs_tree import add_device, healthy_port


def test_no_class_dir_and_no_hca_on_pci_is_absent(tmp_path: Path) -> None:
    add_function(tmp_path, "0000:3b:00.0", *NVIDIA_3D)
    add_function(tmp_path, "0000:00:1f.6", *INTEL_ETH)
    with pytest.raises(SourceAbsent, match=r"no InfiniBand or RoCE HCA on this node \(no PCI"):
        InfinibandSource(tmp_path).collect()


def test_hcas_on_pci_without_the_class_dir_are_down(tmp_path: Path) -> None:
    add_function(tmp_path, "0000:13:00.0", *MLX_IB, driver="mlx5_core")
    add_function(tmp_path, "0000:13:00.1", *MLX_IB, driver="mlx5_core")
    with pytest.raises(SourceUnavailable) as raised:
        InfinibandSource(tmp_path).collect()
    class_dir = tmp_path / "class" / "infiniband"
    assert str(raised.value) == (
        f"2 Mellanox HCAs on PCI but {class_dir} does not exist: is the mlx5_ib driver loaded?"
    )


def test_ethernet_mode_nics_without_rdma_are_absent(tmp_path: Path) -> None:
    # a ConnectX used as a plain Ethernet NIC: no page on every such node
    add_function(tmp_path, "0000:a1:00.0", *MLX_ETH, driver="mlx5_core")
    with pytest.raises(SourceAbsent, match="1 Mellanox Ethernet NIC without RDMA devices"):
        InfinibandSource(tmp_path).collect()


def test_an_hca_appearing_on_pci_is_noticed_within_relist_every(tmp_path: Path) -> None:
    (tmp_path / "bus" / "pci" / "devices").mkdir(parents=True)
    source = InfinibandSource(tmp_path, relist_every=3)
    with pytest.raises(SourceAbsent):
        source.collect()
    add_function(tmp_path, "0000:13:00.0", *MLX_IB)
    outcomes = []
    for _ in range(3):
        try:
            source.collect()
        except (SourceAbsent, SourceUnavailable) as exc:
            outcomes.append(type(exc))
    assert outcomes[-1] is SourceUnavailable


@pytest.fixture
def fabric(tmp_path: Path) -> SimulatedFabric:
    node = SimulatedFabric("dgx-h100", tmp_path, clock=ManualClock())
    node.tick()
    return node


def test_devices_vanishing_after_a_good_poll_are_down(fabric: SimulatedFabric) -> None:
    source = InfinibandSource(fabric.root, gpu_bus_ids=fabric.gpu_bus_ids)
    assert len(source.collect().devices) == len(fabric.devices) > 0
    class_dir = fabric.root / "class" / "infiniband"
    shutil.rmtree(class_dir)  # what unloading mlx5_ib does; the PCI functions stay
    with pytest.raises(SourceUnavailable, match=r"InfiniBand devices gone: mlx5_0, mlx5_1"):
        source.collect()
    class_dir.mkdir()  # ib_core still loaded: the class is there, empty
    with pytest.raises(SourceUnavailable, match="InfiniBand devices gone"):
        source.collect()
    shutil.rmtree(fabric.root / "bus")  # HCAs gone from PCI too: still down, we had them
    with pytest.raises(SourceUnavailable, match="InfiniBand devices gone"):
        source.collect()


def test_devices_vanishing_then_returning_are_up_again(fabric: SimulatedFabric) -> None:
    source = InfinibandSource(fabric.root)
    source.collect()
    class_dir = fabric.root / "class" / "infiniband"
    kept = fabric.root / "kept"
    class_dir.rename(kept)
    with pytest.raises(SourceUnavailable):
        source.collect()
    kept.rename(class_dir)  # driver reloaded
    assert len(source.collect().devices) == len(fabric.devices)


def test_one_device_vanishing_keeps_the_others_served_and_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for device in ("mlx5_0", "mlx5_1"):
        add_device(tmp_path, device, ports={"1": healthy_port()})
    source = InfinibandSource(tmp_path)
    assert [d.name for d in source.collect().devices] == ["mlx5_0", "mlx5_1"]
    shutil.rmtree(tmp_path / "class" / "infiniband" / "mlx5_1")
    with caplog.at_level(logging.WARNING, logger="nvwatch.agent.sources.infiniband"):
        assert [d.name for d in source.collect().devices] == ["mlx5_0"]
    assert any("gone: mlx5_1" in r.getMessage() for r in caplog.records)
