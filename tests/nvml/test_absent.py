"""NVML failing on a node without NVIDIA GPUs is absent; on a node with them it is down.

The PCI side is a real tree on disk (the simulator's, or hand-built functions); the NVML
side is either the real pynvml finding no libnvidia-ml (this machine has none, so
uninstalling the simulated library is enough) or the simulated library.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nvwatch.agent.sources import SourceAbsent, SourceUnavailable
from nvwatch.agent.sources.nvml import NvmlSource
from nvwatch.agent.sources.presence import scan_pci
from nvwatch.sim import nvml as sim_nvml
from nvwatch.sim.clock import ManualClock
from nvwatch.sim.fabric.fabric import SimulatedFabric
from nvwatch.sim.nvml.abi import SUCCESS, set_out
from nvwatch.sim.profiles import PROFILES
from tests.agent.test_presence import INTEL_ETH, NVIDIA_3D, NVIDIA_AUDIO, add_function
from tests.nvml.conftest import NodeFactory

NO_GPU = "no NVIDIA GPU on this node (no PCI function with vendor 0x10de in "


@pytest.fixture
def no_library() -> None:
    sim_nvml.uninstall()  # pynvml now looks for the real libnvidia-ml.so.1, and fails


def _collect_failure(source: NvmlSource) -> Exception:
    try:
        source.collect()
    except (SourceAbsent, SourceUnavailable) as exc:
        return exc
    finally:
        source.close()
    raise AssertionError("collect() succeeded")


@pytest.mark.usefixtures("no_library")
def test_no_library_and_no_nvidia_function_is_absent(tmp_path: Path) -> None:
    add_function(tmp_path, "0000:00:1f.6", *INTEL_ETH)
    add_function(tmp_path, "0000:5e:00.1", *NVIDIA_AUDIO)  # not a GPU
    failure = _collect_failure(NvmlSource(sysfs_root=tmp_path, clock=ManualClock(0.0)))
    assert isinstance(failure, SourceAbsent)
    assert str(failure) == NO_GPU + f"{tmp_path}/bus/pci/devices)"


@pytest.mark.usefixtures("no_library")
def test_no_library_with_nvidia_functions_is_down_with_the_reason(tmp_path: Path) -> None:
    add_function(tmp_path, "0000:3b:00.0", *NVIDIA_3D)
    add_function(tmp_path, "0000:5e:00.0", *NVIDIA_3D)
    failure = _collect_failure(NvmlSource(sysfs_root=tmp_path, clock=ManualClock(0.0)))
    assert isinstance(failure, SourceUnavailable)
    assert str(failure).startswith(
        "2 NVIDIA GPUs on PCI but NVML failed: NVML library not found: libnvidia-ml.so.1"
    )
    assert "\n" not in str(failure)


@pytest.mark.usefixtures("no_library")
def test_a_simulated_gpu_node_without_its_library_is_down(tmp_path: Path) -> None:
    SimulatedFabric("dgx-station", tmp_path, clock=ManualClock()).tick()
    failure = _collect_failure(NvmlSource(sysfs_root=tmp_path, clock=ManualClock(0.0)))
    assert isinstance(failure, SourceUnavailable)
    assert str(failure).startswith("4 NVIDIA GPUs on PCI but NVML failed")


@pytest.mark.usefixtures("no_library")
def test_without_a_pci_tree_presence_is_unknown_and_failure_is_down(tmp_path: Path) -> None:
    for root in (tmp_path, None):  # no bus/pci/devices, or no root given at all
        failure = _collect_failure(NvmlSource(sysfs_root=root, clock=ManualClock(0.0)))
        assert isinstance(failure, SourceUnavailable)
        assert str(failure).startswith("NVML library not found")


@pytest.mark.usefixtures("no_library")
def test_absent_stays_absent_while_backing_off(tmp_path: Path) -> None:
    (tmp_path / "bus" / "pci" / "devices").mkdir(parents=True)
    clock = ManualClock(0.0)
    source = NvmlSource(sysfs_root=tmp_path, clock=clock)
    try:
        for _ in range(6):  # inside and after back-off windows of 1 s, 2 s, ...
            with pytest.raises(SourceAbsent, match="no NVIDIA GPU on this node"):
                source.collect()
            clock.advance(0.7)
    finally:
        source.close()


def test_nvml_seeing_fewer_gpus_than_pci_is_down_until_it_sees_them_all(
    node: NodeFactory, tmp_path: Path
) -> None:
    eight = tmp_path / "eight"
    SimulatedFabric("dgx-h100", eight, clock=ManualClock()).tick()
    simulated = node("inference-t4")  # NVML answers for 4 GPUs
    source = simulated.source(sysfs_root=eight)
    with pytest.raises(SourceUnavailable, match=r"^8 NVIDIA GPUs on PCI but NVML sees only 4: "):
        source.collect()
    with pytest.raises(SourceUnavailable, match="NVML sees only 4"):
        source.collect()  # inside the back-off: the same answer, NVML not asked
    # four GPUs leave the bus (removed, or handed to a VM): PCI agrees with NVML again
    for gpu in scan_pci(eight).nvidia_gpus()[4:]:
        (eight / "bus" / "pci" / "devices" / gpu.address).unlink()
    simulated.clock.advance(1.0)  # past the first back-off: init is tried afresh
    assert [g.up for g in source.collect().gpus] == [True] * 4


class _NoGpus:
    """A library that initialises and counts no GPU (driver loaded, none attached)."""

    def __init__(self, inner: object) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def nvmlDeviceGetCount_v2(self, count: Any) -> int:
        set_out(count, 0)
        return SUCCESS


def test_nvml_with_no_gpu_and_none_on_pci_is_absent(node: NodeFactory, tmp_path: Path) -> None:
    (tmp_path / "bus" / "pci" / "devices").mkdir(parents=True)
    source = node("inference-t4", wrap=_NoGpus).source(sysfs_root=tmp_path)
    with pytest.raises(SourceAbsent, match="no NVIDIA GPU on this node"):
        source.collect()


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_simulated_node_has_its_gpus_on_pci(
    node: NodeFactory, tmp_path: Path, profile: str
) -> None:
    """The simulator's PCI tree and its NVML agree, so a simulated node is never down."""
    SimulatedFabric(profile, tmp_path, clock=ManualClock()).tick()
    simulated = node(profile)
    source = simulated.source(sysfs_root=tmp_path)
    gpus = source.collect().gpus
    assert len(gpus) == PROFILES[profile].gpu_count and all(g.up for g in gpus)
