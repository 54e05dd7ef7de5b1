"""GPU x GPU (and GPU x HCA) connection matrix, like `nvidia-smi topo -m`.

NVLink from NVML: two GPUs wired to each other directly show NV<n> for the n active
links between them (the DGX-1 hybrid cube-mesh: NV1/NV2). GPUs that reach each other
through NVSwitches (DGX-2, DGX A100, DGX H100) show NV<n> with n the smaller of the two
GPUs' active switch-link counts, what nvidia-smi prints (NV18 between any two H100s of
a DGX H100, NV12 on a DGX A100). Pairs without NVLink get their PCIe relation
(PIX/PXB/PHB/NODE/SYS) from the device paths under the sysfs root, with NVML's
nvmlDeviceGetTopologyCommonAncestor as the fallback when sysfs does not place a GPU.

HCAs are pluggable: pass (name, pci_bus_id) pairs and they get PCIe relations to every
GPU and to each other, from sysfs only (NVML does not know NICs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pynvml

from nvwatch.agent.sources import SourceUnavailable
from nvwatch.agent.sources.nvml.device import error_name, init_reason, text
from nvwatch.agent.sources.pci_address import sysfs_bus_id as normalise_bus_id
from nvwatch.agent.sources.pci_affinity import PciPath, Resolver
from nvwatch.agent.topology_mig import GpuPartition, format_partitions, read_partitions

# nvmlGpuTopologyLevel_t -> nvidia-smi's legend
_NVML_LEVELS = {
    pynvml.NVML_TOPOLOGY_INTERNAL: "X",
    pynvml.NVML_TOPOLOGY_SINGLE: "PIX",
    pynvml.NVML_TOPOLOGY_MULTIPLE: "PXB",
    pynvml.NVML_TOPOLOGY_HOSTBRIDGE: "PHB",
    pynvml.NVML_TOPOLOGY_NODE: "NODE",
    pynvml.NVML_TOPOLOGY_SYSTEM: "SYS",
}
UNKNOWN = "N/A"

LEGEND = """Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges
         within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
  N/A  = Relation unknown (device not found in sysfs and NVML could not tell)"""


@dataclass(frozen=True)
class TopologyGpu:
    index: int
    name: str
    uuid: str
    pci_bus_id: str  # NVML form
    pci_path: PciPath | None  # sysfs chain from the host bridge, None if not found
    direct_links: tuple[int, ...]  # [peer index] -> active NVLinks straight to that GPU
    switch_links: int  # active NVLinks to NVSwitches


@dataclass(frozen=True)
class TopologyHca:
    name: str
    pci_bus_id: str
    pci_path: PciPath | None


@dataclass(frozen=True)
class Topology:
    gpus: tuple[TopologyGpu, ...]
    hcas: tuple[TopologyHca, ...]
    gpu_matrix: tuple[tuple[str, ...], ...]  # [i][j]: "X", "NV<n>", or a PCIe relation
    gpu_hca: tuple[tuple[str, ...], ...]  # [gpu][hca]: PCIe relation
    hca_matrix: tuple[tuple[str, ...], ...]  # [hca][hca]
    mig: tuple[GpuPartition, ...] = ()  # MIG-capable GPUs' partitioning

    def nvlinks_between(self, a: int, b: int) -> int:
        """NVLinks usable between GPUs a and b: direct links, else shared switch links."""
        if a == b:
            return 0
        direct = self.gpus[a].direct_links[b]
        if direct:
            return direct
        return min(self.gpus[a].switch_links, self.gpus[b].switch_links)


def build_topology(sysfs_root: Path, hcas: Sequence[tuple[str, str]] = ()) -> Topology:
    """Read the node's GPUs from NVML and place them (and `hcas`) in the PCIe tree.

    Raises SourceUnavailable when NVML cannot be initialised.
    """
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        raise SourceUnavailable(init_reason(err)) from err
    try:
        return _build(Resolver(sysfs_root), hcas)
    except pynvml.NVMLError as err:
        raise SourceUnavailable(f"NVML could not list the GPUs: {error_name(err)}") from err
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _build(resolver: Resolver, hca_ids: Sequence[tuple[str, str]]) -> Topology:
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    bus_ids = [_bus_id(h) for h in handles]
    index_of = {normalise_bus_id(b): i for i, b in enumerate(bus_ids) if b}
    gpus = []
    for index, handle in enumerate(handles):
        direct = [0] * len(handles)
        switch = 0
        for remote_type, remote_bus in _active_links(handle):
            peer = index_of.get(normalise_bus_id(remote_bus)) if remote_bus else None
            if remote_type == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH:
                switch += 1
            elif peer is not None and peer != index:
                direct[peer] += 1
        gpus.append(
            TopologyGpu(
                index=index,
                name=_safe_text(pynvml.nvmlDeviceGetName, handle),
                uuid=_safe_text(pynvml.nvmlDeviceGetUUID, handle),
                pci_bus_id=bus_ids[index],
                pci_path=resolver.gpu_path(bus_ids[index]) if bus_ids[index] else None,
                direct_links=tuple(direct),
                switch_links=switch,
            )
        )
    hcas = tuple(
        TopologyHca(name=name, pci_bus_id=bus, pci_path=resolver.gpu_path(bus))
        for name, bus in hca_ids
    )
    partial = Topology(tuple(gpus), hcas, (), (), ())
    gpu_matrix = tuple(
        tuple(_gpu_relation(partial, resolver, handles, a, b) for b in range(len(gpus)))
        for a in range(len(gpus))
    )
    gpu_hca = tuple(
        tuple(_pcie(resolver, gpu.pci_path, hca.pci_path) for hca in hcas) for gpu in gpus
    )
    hca_matrix = tuple(tuple(_pcie(resolver, a.pci_path, b.pci_path) for b in hcas) for a in hcas)
    mig = read_partitions(handles)
    return Topology(tuple(gpus), hcas, gpu_matrix, gpu_hca, hca_matrix, mig)


def _gpu_relation(
    topology: Topology, resolver: Resolver, handles: Sequence[Any], a: int, b: int
) -> str:
    if a == b:
        return "X"
    links = topology.nvlinks_between(a, b)
    if links:
        return f"NV{links}"
    relation = _pcie(resolver, topology.gpus[a].pci_path, topology.gpus[b].pci_path)
    if relation != UNKNOWN:
        return relation
    try:
        level = pynvml.nvmlDeviceGetTopologyCommonAncestor(handles[a], handles[b])
    except pynvml.NVMLError:
        return UNKNOWN
    return _NVML_LEVELS.get(level, UNKNOWN)


def _pcie(resolver: Resolver, a: PciPath | None, b: PciPath | None) -> str:
    if a is None or b is None:
        return UNKNOWN
    return resolver.relation(a, b)


def _bus_id(handle: Any) -> str:
    try:
        return text(pynvml.nvmlDeviceGetPciInfo_v3(handle).busId)
    except pynvml.NVMLError:
        return ""


def _safe_text(fn: Any, handle: Any) -> str:
    try:
        return text(fn(handle))
    except pynvml.NVMLError:
        return ""


def _active_links(handle: Any) -> list[tuple[int | None, str]]:
    """(remote device type or None, remote bus id) for each NVLink that is up."""
    result: list[tuple[int | None, str]] = []
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        try:
            active = pynvml.nvmlDeviceGetNvLinkState(handle, link)
        except pynvml.NVMLError:
            break  # NotSupported / InvalidArgument: no (more) links
        if not active:
            continue
        try:
            remote_type: int | None = pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
        except pynvml.NVMLError:
            remote_type = None
        try:
            remote_bus = text(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
        except pynvml.NVMLError:
            remote_bus = ""
        result.append((remote_type, remote_bus))
    return result


def format_matrix(topology: Topology) -> str:
    """The matrix as text, laid out like `nvidia-smi topo -m`, with the legend."""
    names = [f"GPU{g.index}" for g in topology.gpus] + [h.name for h in topology.hcas]
    rows: list[list[str]] = []
    for g, gpu_row in enumerate(topology.gpu_matrix):
        rows.append([names[g], *gpu_row, *topology.gpu_hca[g]])
    for h, hca_row in enumerate(topology.hca_matrix):
        to_gpus = [topology.gpu_hca[g][h] for g in range(len(topology.gpus))]
        rows.append([topology.hcas[h].name, *to_gpus, *hca_row])
    width = max([len(n) for n in names] + [len(c) for row in rows for c in row] + [4]) + 2
    lines = [" " * width + "".join(n.ljust(width) for n in names).rstrip()]
    lines += ["".join(cell.ljust(width) for cell in row).rstrip() for row in rows]
    text = "\n".join(lines) + "\n\n" + LEGEND + "\n"
    partitions = format_partitions(topology.mig)
    return text + "\n" + partitions if partitions else text
