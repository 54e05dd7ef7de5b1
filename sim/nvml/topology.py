"""Where a GPU sits: PCIe ancestry, peer-to-peer, CPU and NUMA affinity, the board.

All answers come from the profile's layout (sim/profiles.py): each PCIe switch has
its own root port on its CPU socket's host bridge, a socket is a NUMA node, GPUs with
NVLink reach their peers directly or through NVSwitches. The simulated sysfs tree is
written from the same layout, so `nvwatch topology` reading either agrees.
"""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml

from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.nvml.abi import (
    ERROR_ARGUMENT_VERSION_MISMATCH,
    ERROR_INSUFFICIENT_SIZE,
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_SUPPORTED,
    SUCCESS,
    as_int,
    deref,
    set_out,
)
from nvwatch.sim.nvml.core import NvmlCore, device_call
from nvwatch.sim.nvml.identity import fill_pci, pci_device_id
from nvwatch.sim.nvml.unsupported import answers_not_supported, because
from nvwatch.sim.profiles import Profile, gpu_pci_bus_id

# Logical CPUs per socket (cores x 2 hyperthreads) of each system's CPUs: DGX-1 2x E5-2698
# v4 (20 cores), DGX Station 1x E5-2698 v4, DGX-2 2x Xeon 8168 (24), DGX A100 2x EPYC
# 7742 (64), DGX H100 2x Xeon 8480C (56); the workstation and the T4 server as typical
# builds (~). Linux numbers the first thread of every core socket by socket, then the
# second threads in the same order; that is what the affinity masks below reproduce.
_CORES_PER_SOCKET = {
    "dgx1-p100": 20,
    "dgx1-v100": 20,
    "dgx-station": 20,
    "dgx2": 24,
    "dgx-a100": 64,
    "dgx-h100": 56,
    "hgx-h200": 56,  # ~ as the DGX H200 (the DGX H100 chassis)
    "geforce-workstation": 16,
    "inference-t4": 20,
}
_DEFAULT_CORES_PER_SOCKET = 16
_MASK_BITS = 64  # the cpuSet / nodeSet arrays are of unsigned long

# nvmlGpuTopologyLevel_t and nvmlGpuP2PStatus_t values, typed
TOPOLOGY_INTERNAL: int = pynvml.NVML_TOPOLOGY_INTERNAL
TOPOLOGY_SINGLE: int = pynvml.NVML_TOPOLOGY_SINGLE
TOPOLOGY_NODE: int = pynvml.NVML_TOPOLOGY_NODE
TOPOLOGY_SYSTEM: int = pynvml.NVML_TOPOLOGY_SYSTEM
P2P_OK: int = pynvml.NVML_P2P_STATUS_OK
P2P_NOT_SUPPORTED: int = pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
P2P_GPU_NOT_SUPPORTED: int = pynvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED
P2P_TOPOLOGY_NOT_SUPPORTED: int = pynvml.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED
# nvmlGpuP2PCapsIndex_t; READ is 0 (pynvml spells it as the tuple (0,))
P2P_READ = 0
_CAPS_OVER_PCIE = (P2P_READ, pynvml.NVML_P2P_CAPS_INDEX_WRITE, pynvml.NVML_P2P_CAPS_INDEX_PCI)


def sockets(profile: Profile) -> int:
    """CPU sockets (= NUMA nodes) of the system."""
    used = list(profile.pcie_switch_socket) + list(profile.gpu_socket_without_switch)
    return max(used, default=0) + 1


def common_ancestor(profile: Profile, a: int, b: int) -> int:
    """nvmlGpuTopologyLevel_t between GPUs a and b over PCIe."""
    if a == b:
        return TOPOLOGY_INTERNAL
    switch = profile.gpu_pcie_switch[a]
    if switch is not None and switch == profile.gpu_pcie_switch[b]:
        return TOPOLOGY_SINGLE  # one PCIe switch between them
    if profile.gpu_socket(a) == profile.gpu_socket(b):
        return TOPOLOGY_NODE  # separate root ports of one socket
    return TOPOLOGY_SYSTEM  # across the inter-socket link


def nvlinked(profile: Profile, a: int, b: int) -> bool:
    """True when a and b reach each other over NVLink (wired directly or via NVSwitch)."""
    ends_a, ends_b = profile.nvlinks[a], profile.nvlinks[b]
    if any(end.remote_type == "gpu" and end.remote_index == b for end in ends_a):
        return True
    on_switch_a = any(end.remote_type == "switch" for end in ends_a)
    return on_switch_a and any(end.remote_type == "switch" for end in ends_b)


def p2p_status(profile: Profile, a: int, b: int, capability: int) -> int:
    """nvmlGpuP2PStatus_t for `capability` between GPUs a and b."""
    if a == b:
        return P2P_OK
    over_nvlink = nvlinked(profile, a, b)
    if capability == pynvml.NVML_P2P_CAPS_INDEX_NVLINK:
        return P2P_OK if over_nvlink else P2P_NOT_SUPPORTED
    if over_nvlink and capability in (*_CAPS_OVER_PCIE, pynvml.NVML_P2P_CAPS_INDEX_ATOMICS):
        return P2P_OK  # peer access and atomics go over NVLink
    if capability == pynvml.NVML_P2P_CAPS_INDEX_ATOMICS:
        return P2P_NOT_SUPPORTED  # no peer atomics over PCIe
    if profile.gpus[a].fan or profile.gpus[b].fan:
        return P2P_GPU_NOT_SUPPORTED  # GeForce: no PCIe peer access
    if profile.gpu_socket(a) != profile.gpu_socket(b):
        return P2P_TOPOLOGY_NOT_SUPPORTED
    return P2P_OK


def _cpus_of_socket(profile: Profile, socket: int) -> list[int]:
    cores = _CORES_PER_SOCKET.get(profile.name, _DEFAULT_CORES_PER_SOCKET)
    first = socket * cores
    second = sockets(profile) * cores + socket * cores  # the hyperthread siblings
    return [*range(first, first + cores), *range(second, second + cores)]


def _write_mask(array: Any, size: int, bits: list[int]) -> int:
    """Write `bits` into an array of `size` unsigned longs; InsufficientSize if they do
    not fit."""
    if bits and max(bits) >= size * _MASK_BITS:
        return ERROR_INSUFFICIENT_SIZE
    words = [0] * size
    for bit in bits:
        words[bit // _MASK_BITS] |= 1 << (bit % _MASK_BITS)
    target = deref(array)
    for i, word in enumerate(words):
        target[i] = word
    return SUCCESS


def _is_sxm(gpu: SimulatedGpu) -> bool:
    """An SXM module on a baseboard (NVLink, no fan of its own), not a PCIe card."""
    return gpu.model.nvlink_version > 0 and not gpu.model.fan


TOPOLOGY_NOT_SUPPORTED = because(
    "only where GPU memory is itself a NUMA node (coherent Grace platforms); every "
    "simulated system hangs its GPUs off PCIe, so NVML has no node to report",
    "nvmlDeviceGetNumaNodeId",
)


@answers_not_supported(TOPOLOGY_NOT_SUPPORTED)
class TopologyQueries(NvmlCore):
    def _peer(self, handle: Any) -> SimulatedGpu | None:
        return self._gpu_of(handle)

    @device_call
    def nvmlDeviceGetTopologyCommonAncestor(self, gpu: SimulatedGpu, other: Any, level: Any) -> int:
        peer = self._peer(other)
        if peer is None:
            return ERROR_INVALID_ARGUMENT
        set_out(level, common_ancestor(self.profile, gpu.index, peer.index))
        return SUCCESS

    @device_call
    def nvmlDeviceGetTopologyNearestGpus(
        self, gpu: SimulatedGpu, level: Any, count: Any, devices: Any
    ) -> int:
        limit = as_int(level)
        near = [
            other.index
            for other in self.gpus
            if other.index != gpu.index
            and common_ancestor(self.profile, gpu.index, other.index) <= limit
        ]
        if devices is None:
            set_out(count, len(near))
            return SUCCESS
        if as_int(deref(count)) < len(near):
            set_out(count, len(near))
            return ERROR_INSUFFICIENT_SIZE
        array = deref(devices)
        slot = ctypes.sizeof(ctypes.c_void_p)
        for i, index in enumerate(near):
            ctypes.c_void_p.from_buffer(array, i * slot).value = self.handle_address(index)
        set_out(count, len(near))
        return SUCCESS

    @device_call
    def nvmlDeviceGetP2PStatus(
        self, gpu: SimulatedGpu, other: Any, capability: Any, status: Any
    ) -> int:
        if isinstance(capability, tuple):
            # pynvml defines NVML_P2P_CAPS_INDEX_READ as the tuple (0,); ctypes refuses it
            # before the real library is reached, so a caller passing it fails the same way
            raise ctypes.ArgumentError(
                "argument 3: TypeError: Don't know how to convert parameter 3"
            )
        peer = self._peer(other)
        which = as_int(capability)
        if peer is None or not 0 <= which < pynvml.NVML_P2P_CAPS_INDEX_UNKNOWN:
            return ERROR_INVALID_ARGUMENT
        set_out(status, p2p_status(self.profile, gpu.index, peer.index, which))
        return SUCCESS

    @device_call
    def nvmlDeviceGetCpuAffinity(self, gpu: SimulatedGpu, size: Any, cpu_set: Any) -> int:
        socket = self.profile.gpu_socket(gpu.index)
        return _write_mask(cpu_set, as_int(size), _cpus_of_socket(self.profile, socket))

    @device_call
    def nvmlDeviceGetCpuAffinityWithinScope(
        self, gpu: SimulatedGpu, size: Any, cpu_set: Any, scope: Any
    ) -> int:
        if as_int(scope) not in (
            pynvml.NVML_AFFINITY_SCOPE_NODE,
            pynvml.NVML_AFFINITY_SCOPE_SOCKET,
        ):
            return ERROR_INVALID_ARGUMENT
        socket = self.profile.gpu_socket(gpu.index)  # one NUMA node per socket
        return _write_mask(cpu_set, as_int(size), _cpus_of_socket(self.profile, socket))

    @device_call
    def nvmlDeviceGetMemoryAffinity(
        self, gpu: SimulatedGpu, size: Any, node_set: Any, scope: Any
    ) -> int:
        if as_int(scope) not in (
            pynvml.NVML_AFFINITY_SCOPE_NODE,
            pynvml.NVML_AFFINITY_SCOPE_SOCKET,
        ):
            return ERROR_INVALID_ARGUMENT
        return _write_mask(node_set, as_int(size), [self.profile.gpu_socket(gpu.index)])

    # --- the board and its PCIe function --------------------------------------------------

    @device_call
    def nvmlDeviceOnSameBoard(self, gpu: SimulatedGpu, other: Any, same: Any) -> int:
        peer = self._peer(other)
        if peer is None:
            return ERROR_INVALID_ARGUMENT
        set_out(same, 1 if peer.index == gpu.index else 0)  # no multi-GPU boards here
        return SUCCESS

    @device_call
    def nvmlDeviceGetMultiGpuBoard(self, gpu: SimulatedGpu, multi: Any) -> int:
        set_out(multi, 0)
        return SUCCESS

    @device_call
    def nvmlDeviceGetBoardId(self, gpu: SimulatedGpu, board: Any) -> int:
        # unique per board, as NVML's is: derived from where the board sits on PCI
        domain, bus, rest = gpu_pci_bus_id(self.profile, gpu.index).split(":")
        set_out(board, (int(domain, 16) << 16) | (int(bus, 16) << 8) | int(rest[:2], 16))
        return SUCCESS

    @device_call
    def nvmlDeviceGetModuleId(self, gpu: SimulatedGpu, module: Any) -> int:
        if not _is_sxm(gpu):
            return ERROR_NOT_SUPPORTED  # a PCIe card has no baseboard position
        set_out(module, gpu.index % 8 + 1)  # baseboard positions count from 1
        return SUCCESS

    @device_call
    def nvmlDeviceGetBusType(self, gpu: SimulatedGpu, bus_type: Any) -> int:
        set_out(bus_type, pynvml.NVML_BUS_TYPE_PCIE)
        return SUCCESS

    @device_call
    def nvmlDeviceGetIrqNum(self, gpu: SimulatedGpu, irq: Any) -> int:
        set_out(irq, 0)  # MSI-X: the legacy IRQ line is unused and reads 0
        return SUCCESS

    @device_call
    def nvmlDeviceGetBridgeChipInfo(self, gpu: SimulatedGpu, hierarchy: Any) -> int:
        deref(hierarchy).bridgeCount = 0  # single-GPU boards carry no bridge chip
        return SUCCESS

    @device_call
    def nvmlDeviceGetPciInfoExt(self, gpu: SimulatedGpu, info: Any) -> int:
        ext = deref(info)
        if ext.version != pynvml.nvmlPciInfoExt_v1:
            return ERROR_ARGUMENT_VERSION_MISMATCH
        fill_pci_ext(ext, gpu_pci_bus_id(self.profile, gpu.index), pci_device_id(gpu.model.name))
        return SUCCESS

    @device_call
    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, gpu: SimulatedGpu, generation: Any) -> int:
        set_out(generation, gpu.model.pcie_generation)
        return SUCCESS

    @device_call
    def nvmlDeviceGetPcieSpeed(self, gpu: SimulatedGpu, speed: Any) -> int:
        set_out(speed, _PCIE_MBPS[gpu.pcie_generation_current])  # current link, MT/s per lane
        return SUCCESS

    @device_call
    def nvmlDeviceGetPcieLinkMaxSpeed(self, gpu: SimulatedGpu, speed: Any) -> int:
        set_out(speed, _PCIE_MAX_SPEED_ENUM[gpu.model.pcie_generation])
        return SUCCESS


# PCIe transfer rate per lane by generation, and its nvmlPcieLinkMaxSpeed_t
_PCIE_MBPS = {1: 2500, 2: 5000, 3: 8000, 4: 16000, 5: 32000, 6: 64000}
_PCIE_MAX_SPEED_ENUM = {
    1: pynvml.NVML_PCIE_LINK_MAX_SPEED_2500MBPS,
    2: pynvml.NVML_PCIE_LINK_MAX_SPEED_5000MBPS,
    3: pynvml.NVML_PCIE_LINK_MAX_SPEED_8000MBPS,
    4: pynvml.NVML_PCIE_LINK_MAX_SPEED_16000MBPS,
    5: pynvml.NVML_PCIE_LINK_MAX_SPEED_32000MBPS,
    6: pynvml.NVML_PCIE_LINK_MAX_SPEED_64000MBPS,
}
_PCI_CLASS_DISPLAY = 0x03
_PCI_SUBCLASS_3D = 0x02  # a compute GPU without display outputs
_PCI_SUBCLASS_VGA = 0x00


def fill_pci_ext(info: Any, bus_id: str, device_id: int) -> None:
    """Fill an nvmlPciInfoExt_v1_t: nvmlPciInfo_t's fields plus the PCI class."""
    scratch = pynvml.nvmlPciInfo_t()
    fill_pci(scratch, bus_id, device_id)
    info.domain, info.bus, info.device = scratch.domain, scratch.bus, scratch.device
    info.pciDeviceId, info.pciSubSystemId = scratch.pciDeviceId, scratch.pciSubSystemId
    info.busId = scratch.busId
    info.baseClass = _PCI_CLASS_DISPLAY
    info.subClass = _PCI_SUBCLASS_3D
