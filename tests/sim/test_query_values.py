"""The values behind the queries the simulator once left unanswered, checked against
another view of the same simulated hardware: the node's sysfs tree (as the agent's PCI
code reads it), NVML's own per-link NVLink answers, its utilization and process lists,
field values."""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from nvwatch.agent.config import parse_scenario
from nvwatch.agent.sources.pci_affinity import Resolver
from nvwatch.sim.clock import ManualClock
from nvwatch.sim.node.node import SimulatedNode
from nvwatch.sim.nvml import install, uninstall
from nvwatch.sim.profiles import PROFILES

# pynvml's NVML_P2P_CAPS_INDEX_READ is the tuple (0,), which ctypes cannot pass
READ = 0
# nvidia-smi's names for NVML's topology levels, as the agent's sysfs code gives them
LEVEL_NAMES = {
    pynvml.NVML_TOPOLOGY_SINGLE: "PIX",
    pynvml.NVML_TOPOLOGY_MULTIPLE: "PXB",
    pynvml.NVML_TOPOLOGY_HOSTBRIDGE: "PHB",
    pynvml.NVML_TOPOLOGY_NODE: "NODE",
    pynvml.NVML_TOPOLOGY_SYSTEM: "SYS",
}


Make = Callable[[str], SimulatedNode]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Make]:
    """node(profile): a simulated node on a manual clock, its NVML installed and up."""
    made: list[SimulatedNode] = []

    def make(profile: str) -> SimulatedNode:
        sim = SimulatedNode(profile, clock=ManualClock(), sysfs_root=tmp_path / profile)
        made.append(sim)
        install(sim.nvml)
        pynvml.nvmlInit()
        return sim

    yield make
    for sim in made:
        sim.close()
    uninstall()


def handles() -> list[object]:
    return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]


def gpu_paths(sim: SimulatedNode) -> tuple[Resolver, list[tuple[str, ...]]]:
    resolver = Resolver(sim.sysfs_root)
    paths = []
    for handle in handles():
        path = resolver.gpu_path(pynvml.nvmlDeviceGetPciInfo(handle).busId)
        assert path is not None
        paths.append(path)
    return resolver, paths


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_common_ancestor_agrees_with_the_sysfs_tree(node: Make, profile: str) -> None:
    resolver, paths = gpu_paths(node(profile))
    devices = handles()
    for a, first in enumerate(devices):
        for b, second in enumerate(devices):
            level = pynvml.nvmlDeviceGetTopologyCommonAncestor(first, second)
            if a == b:
                assert level == pynvml.NVML_TOPOLOGY_INTERNAL
            else:
                assert LEVEL_NAMES[level] == resolver.relation(paths[a], paths[b]), (a, b)


@pytest.mark.parametrize("profile", ["dgx-a100", "inference-t4", "dgx2"])
def test_nearest_gpus_are_those_within_the_level(node: Make, profile: str) -> None:
    node(profile)
    devices = handles()
    for level in (pynvml.NVML_TOPOLOGY_SINGLE, pynvml.NVML_TOPOLOGY_NODE):
        for a, first in enumerate(devices):
            near = {
                pynvml.nvmlDeviceGetIndex(h)
                for h in pynvml.nvmlDeviceGetTopologyNearestGpus(first, level)
            }
            expected = {
                b
                for b, second in enumerate(devices)
                if b != a and pynvml.nvmlDeviceGetTopologyCommonAncestor(first, second) <= level
            }
            assert near == expected


def nvlink_peers(handle: object) -> tuple[set[str], bool]:
    """Bus ids of the GPUs wired to `handle` and whether it reaches NVSwitches, from NVML's
    per-link answers."""
    peers: set[str] = set()
    switched = False
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        try:
            kind = pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
        except pynvml.NVMLError:
            break
        if kind == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH:
            switched = True
        else:
            peers.add(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
    return peers, switched


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_p2p_over_nvlink_where_nvml_shows_a_link_path(node: Make, profile: str) -> None:
    node(profile)
    devices = handles()
    links = [nvlink_peers(h) for h in devices]
    for a, first in enumerate(devices):
        for b, second in enumerate(devices):
            if a == b:
                continue
            bus_b = pynvml.nvmlDeviceGetPciInfo(second).busId
            linked = bus_b in links[a][0] or (links[a][1] and links[b][1])
            status = pynvml.nvmlDeviceGetP2PStatus(first, second, pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
            assert (status == pynvml.NVML_P2P_STATUS_OK) == linked, (a, b)
            read = pynvml.nvmlDeviceGetP2PStatus(first, second, READ)
            if linked:
                assert read == pynvml.NVML_P2P_STATUS_OK


def test_p2p_over_pcie_stops_at_the_socket_and_at_geforce(node: Make) -> None:
    node("inference-t4")  # T4 pairs: two per PCIe switch, switches on two sockets
    devices = handles()
    same_switch = pynvml.nvmlDeviceGetP2PStatus(devices[0], devices[1], READ)
    across = pynvml.nvmlDeviceGetP2PStatus(devices[0], devices[2], READ)
    assert (
        pynvml.nvmlDeviceGetTopologyCommonAncestor(devices[0], devices[2])
        == pynvml.NVML_TOPOLOGY_SYSTEM
    )
    assert same_switch == pynvml.NVML_P2P_STATUS_OK
    assert across == pynvml.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED
    uninstall()
    node("geforce-workstation")  # GPUs 2 and 3 share an NVLink bridge, 0 and 1 do not
    devices = handles()
    assert (
        pynvml.nvmlDeviceGetP2PStatus(devices[0], devices[1], READ)
        == pynvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED
    )
    assert pynvml.nvmlDeviceGetP2PStatus(devices[2], devices[3], READ) == pynvml.NVML_P2P_STATUS_OK


def cpus(mask: Any) -> set[int]:
    """The bit numbers set in an array of unsigned longs."""
    return {
        64 * word + bit for word, value in enumerate(mask) for bit in range(64) if value >> bit & 1
    }


@pytest.mark.parametrize("profile", ["dgx-h100", "dgx1-v100", "inference-t4", "dgx-station"])
def test_cpu_and_memory_affinity_follow_the_numa_node_in_sysfs(node: Make, profile: str) -> None:
    resolver, paths = gpu_paths(node(profile))
    numa = [resolver.numa_node(path) for path in paths]
    masks = [cpus(pynvml.nvmlDeviceGetCpuAffinity(h, 8)) for h in handles()]
    for a, first in enumerate(handles()):
        memory = cpus(pynvml.nvmlDeviceGetMemoryAffinity(first, 1, pynvml.NVML_AFFINITY_SCOPE_NODE))
        assert memory == {numa[a]}
        scoped = pynvml.nvmlDeviceGetCpuAffinityWithinScope(
            first, 8, pynvml.NVML_AFFINITY_SCOPE_NODE
        )
        assert cpus(scoped) == masks[a]
        for b in range(len(paths)):
            assert (masks[a] == masks[b]) == (numa[a] == numa[b])
            if numa[a] != numa[b]:
                assert not masks[a] & masks[b]
    assert all(masks)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_linux_answers_for_driver_model_numa_node_and_display(node: Make, profile: str) -> None:
    node(profile)
    for handle in handles():
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetDriverModel(handle)  # Windows only
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetNumaNodeId(handle)  # GPU memory is no NUMA node here
        assert pynvml.nvmlDeviceGetDisplayActive(handle) == pynvml.nvmlDeviceGetDisplayMode(handle)


def test_process_utilization_is_the_workers_share_of_the_gpu(node: Make) -> None:
    node("dgx-a100")
    for handle in handles():
        (process,) = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
        (sample,) = pynvml.nvmlDeviceGetProcessUtilization(handle, 0)
        assert (sample.pid, sample.smUtil, sample.memUtil) == (process.pid, rates.gpu, rates.memory)
        (info,) = pynvml.nvmlDeviceGetProcessesUtilizationInfo(handle, 0)
        assert (info.pid, info.smUtil, info.memUtil) == (process.pid, rates.gpu, rates.memory)
        with pytest.raises(pynvml.NVMLError_NotFound):  # nothing newer than that sample
            pynvml.nvmlDeviceGetProcessUtilization(handle, sample.timeStamp)
        (detail,) = pynvml.nvmlDeviceGetRunningProcessDetailList(
            handle, pynvml.nvmlProcessDetailList_v1, pynvml.NVML_PROCESS_MODE_COMPUTE
        )
        assert (detail.pid, detail.usedGpuMemory) == (process.pid, process.usedGpuMemory)


def test_an_idle_gpu_has_no_process_samples(tmp_path: Path) -> None:
    sim = SimulatedNode(
        "dgx-a100", [parse_scenario("idle")], clock=ManualClock(), sysfs_root=tmp_path
    )
    install(sim.nvml)
    pynvml.nvmlInit()
    try:
        with pytest.raises(pynvml.NVMLError_NotFound):
            pynvml.nvmlDeviceGetProcessUtilization(handles()[0], 0)
    finally:
        sim.close()
        uninstall()


def test_legacy_nvlink_counters_match_the_throughput_fields_on_volta(node: Make) -> None:
    sim = node("dgx1-v100")
    clock = sim.nvml.clock
    assert isinstance(clock, ManualClock)
    clock.advance(30)
    handle = handles()[0]
    for link in range(6):
        rx, tx = pynvml.nvmlDeviceGetNvLinkUtilizationCounter(handle, link, 0)
        fields = pynvml.nvmlDeviceGetFieldValues(
            handle,
            [
                (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, link),
                (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, link),
            ],
        )
        assert (tx, rx) == (fields[0].value.ullVal, fields[1].value.ullVal)
        assert tx > 0
        control = pynvml.nvmlDeviceGetNvLinkUtilizationControl(handle, link, 0)
        assert control.units == pynvml.NVML_NVLINK_COUNTER_UNIT_BYTES


@pytest.mark.parametrize("profile", ["dgx-a100", "dgx-h100"])
def test_legacy_nvlink_counters_are_not_supported_from_nvlink3(node: Make, profile: str) -> None:
    node(profile)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetNvLinkUtilizationCounter(handles()[0], 0, 0)


def test_samples_are_the_current_readings(node: Make) -> None:
    node("dgx-h100")
    handle = handles()[3]
    kind, (power,) = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_TOTAL_POWER_SAMPLES, 0)
    assert kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    assert power.sampleValue.uiVal == pynvml.nvmlDeviceGetPowerUsage(handle)
    _, (util,) = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    assert util.sampleValue.uiVal == pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
    _, (clock,) = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_PROCESSOR_CLK_SAMPLES, 0)
    assert clock.sampleValue.uiVal == pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)


def test_fabric_registration_on_an_nvswitch_hopper_node_only(node: Make) -> None:
    node("dgx-h100")
    info = pynvml.c_nvmlGpuFabricInfo_v3_t()
    info.version = pynvml.nvmlGpuFabricInfo_v3
    pynvml.nvmlDeviceGetGpuFabricInfoV(handles()[0], pynvml.byref(info))
    assert info.state == pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
    assert info.healthSummary == pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY
    uninstall()
    node("dgx-a100")
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuFabricInfoV(handles()[0], pynvml.byref(info))


def test_clock_tables_hold_the_clocks_the_gpu_runs_at(node: Make) -> None:
    node("dgx-a100")
    handle = handles()[0]
    (memory,) = pynvml.nvmlDeviceGetSupportedMemoryClocks(handle)
    assert memory == pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM)
    graphics = pynvml.nvmlDeviceGetSupportedGraphicsClocks(handle, memory)
    top = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_GRAPHICS)
    assert (
        graphics[0]
        == top
        == pynvml.nvmlDeviceGetApplicationsClock(handle, pynvml.NVML_CLOCK_GRAPHICS)
    )
    low, high = pynvml.nvmlDeviceGetMinMaxClockOfPState(handle, pynvml.NVML_CLOCK_GRAPHICS, 0)
    assert high == top and low <= graphics[-1] + 15
    assert low <= pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_GRAPHICS) <= high


def test_remapped_rows_v2_repeats_v1(node: Make) -> None:
    sim = node("dgx-a100")
    sim.nvml.gpus[1].ecc.remapped_correctable = 3
    handle = handles()[1]
    corrected, uncorrected, _, _ = pynvml.nvmlDeviceGetRemappedRows(handle)
    rows = pynvml.c_nvmlRemappedRowsInfo_v2_t()
    pynvml.nvmlDeviceGetRemappedRows_v2(handle, pynvml.byref(rows))
    assert (rows.corrActiveRemaps, rows.uncActiveRemaps) == (corrected, uncorrected) == (3, 0)
    histogram = pynvml.nvmlDeviceGetRowRemapperHistogram(handle)
    assert histogram.high == 3


def test_pynvmls_tuple_read_index_fails_as_it_does_on_a_real_driver(node: Make) -> None:
    node("dgx-a100")
    first, second = handles()[:2]
    with pytest.raises(ctypes.ArgumentError):
        pynvml.nvmlDeviceGetP2PStatus(first, second, pynvml.NVML_P2P_CAPS_INDEX_READ)
