"""`nvidia-smi topo -m` from the simulated NVML and the simulated sysfs PCI tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvwatch.agent.sources import SourceUnavailable
from nvwatch.agent.topology import Topology, build_topology, format_matrix
from nvwatch.sim import nvml as sim_nvml
from nvwatch.sim.fabric.fabric import SimulatedFabric
from nvwatch.sim.profiles import get_profile, pci_path
from tests.nvml.conftest import NodeFactory


def _topology(node: NodeFactory, tmp_path: Path, profile: str) -> Topology:
    SimulatedFabric(profile, tmp_path).write()
    node(profile)
    spec = get_profile(profile)
    hcas = [(nic.device, "0000" + pci_path(spec, "nic", i)[-1]) for i, nic in enumerate(spec.nics)]
    return build_topology(tmp_path, hcas)


def test_dgx1_v100_cube_mesh(node: NodeFactory, tmp_path: Path) -> None:
    topo = _topology(node, tmp_path, "dgx1-v100")
    assert topo.gpu_matrix[0] == ("X", "NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS")
    for a in range(8):
        assert topo.gpu_matrix[a][a] == "X"
        assert sum(topo.nvlinks_between(a, b) for b in range(8)) == 6  # 6 links per V100
        for b in range(8):
            assert topo.gpu_matrix[a][b] == topo.gpu_matrix[b][a]
    # GPUs 0 and 1 share mlx5_0's PCIe switch
    assert topo.gpu_hca[0][0] == "PIX" and topo.gpu_hca[1][0] == "PIX"
    text = format_matrix(topo)
    assert text.splitlines()[0].split() == [f"GPU{i}" for i in range(8)] + [
        f"mlx5_{i}" for i in range(4)
    ]
    assert "NV#  = Connection traversing a bonded set of # NVLinks" in text


def test_dgx_h100_nvswitch_is_nv18(node: NodeFactory, tmp_path: Path) -> None:
    topo = _topology(node, tmp_path, "dgx-h100")
    for a in range(8):
        assert topo.gpus[a].switch_links == 18
        for b in range(8):
            assert topo.gpu_matrix[a][b] == ("X" if a == b else "NV18")
    assert len(topo.hcas) == 8 and topo.hca_matrix[0][0] == "X"
    assert "NV18" in format_matrix(topo)


def test_pcie_only_system_and_nvml_fallback(node: NodeFactory, tmp_path: Path) -> None:
    topo = _topology(node, tmp_path, "inference-t4")
    assert topo.gpu_matrix[0][1] == "PIX" and topo.gpu_matrix[0][2] == "SYS"
    # without a sysfs tree, the relation comes from NVML or says N/A
    empty = tmp_path / "empty"
    empty.mkdir()
    bare = build_topology(empty)
    assert bare.hcas == ()
    assert all(
        cell in ("X", "PIX", "PXB", "PHB", "NODE", "SYS", "N/A")
        for row in bare.gpu_matrix
        for cell in row
    )


def test_without_nvml_topology_is_unavailable(tmp_path: Path) -> None:
    sim_nvml.uninstall()
    with pytest.raises(SourceUnavailable, match="NVML"):
        build_topology(tmp_path)
