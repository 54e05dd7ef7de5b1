"""NvmlSample -> nvwatch_gpu_* and nvwatch_nvlink_* families, by looping over the catalogue.

A lost GPU keeps its identity (`nvwatch_gpu_info`) and `nvwatch_gpu_up 0`, nothing else:
no fake zeros that would make rate() see resets. Every per-GPU series carries `gpu` (the
NVML index) and `uuid`.

With `sample.nvlink_detail == "gpu"` the NVLink families get one series per GPU with
link="all" (see NvmlSource): bytes and errors summed over links, nvwatch_nvlink_up the
number of links up, the speed summed over links that are up, no remote_info. A sum is
omitted when any link lacks the value this poll, so aggregate counters never dip.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nvwatch.agent.catalogue import Scope, of_scope
from nvwatch.agent.exposition.families import FamilySet
from nvwatch.agent.exposition.series import compiled_families
from nvwatch.agent.sources.nvml.samples import (
    NVLINK_ERROR_TYPES,
    GpuSample,
    NvLinkSample,
    NvmlSample,
)

_SCOPES = (Scope.GPU, Scope.PROCESS, Scope.NVLINK, Scope.MIG)
# each family with the position of its scope in _objects(): a tuple index per family and
# GPU is cheaper than hashing the scope
_PLANS = tuple(
    (spec, reader, _SCOPES.index(spec.scope))
    for spec, reader in compiled_families(of_scope(*_SCOPES))
)
Objects = list[tuple[tuple[str, ...], object]]


@dataclass(frozen=True)
class NvLinkTotals:
    """All NVLink links of one GPU as one object, rendered with link="all"."""

    link: str
    up: int | None
    transmit_bytes: int | None
    receive_bytes: int | None
    errors: Mapping[str, int]
    speed_bytes_per_second: float | None
    # a total has no far end: remote_info is not emitted for it
    remote_type: None = None
    remote_gpu: None = None
    remote_pci_bus_id: None = None


def render(sample: NvmlSample, out: FamilySet) -> None:
    # GPU by GPU, and in catalogue order within a GPU: a family first seen on GPU 2 (energy
    # on a mixed GeForce box) comes after GPU 0's families, as it always has.
    for gpu in sample.gpus:
        objects = _objects(gpu, sample.nvlink_detail)
        for spec, reader, scope in _PLANS:
            if gpu.up or spec.even_when_down:
                reader(objects[scope], out)


def _objects(gpu: GpuSample, detail: str) -> tuple[Objects, Objects, Objects, Objects]:
    """The objects of each scope in _SCOPES on one GPU, with their identity label values."""
    ids = (str(gpu.index), gpu.uuid)
    if not gpu.up:
        # even_when_down is a GPU-scope flag (identity and up): a lost GPU's processes and
        # links are not read
        return [(ids, gpu)], [], [], []
    return (
        [(ids, gpu)],
        [(ids, process) for process in gpu.processes],
        [((*ids, str(x.link)), x) for x in _links(gpu, detail)],
        [((*ids, str(d.gpu_instance_id), str(d.compute_instance_id)), d) for d in gpu.mig_devices],
    )


def _links(gpu: GpuSample, detail: str) -> Sequence[NvLinkSample | NvLinkTotals]:
    if detail != "gpu":
        return gpu.nvlinks
    return [totals(gpu.nvlinks)] if gpu.nvlinks else []


def totals(links: Sequence[NvLinkSample]) -> NvLinkTotals:
    """The link="all" object of one GPU's links."""
    states = [link.up for link in links]
    errors = {
        kind: total
        for kind, _ in NVLINK_ERROR_TYPES
        if (total := _sum([x.errors.get(kind) for x in links])) is not None
    }
    return NvLinkTotals(
        link="all",
        up=None if any(s is None for s in states) else sum(1 for s in states if s),
        transmit_bytes=_sum([x.transmit_bytes for x in links]),
        receive_bytes=_sum([x.receive_bytes for x in links]),
        errors=errors,
        speed_bytes_per_second=_speed_of_up_links(links),
    )


def _sum(values: Sequence[int | None]) -> int | None:
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


def _speed_of_up_links(links: Sequence[NvLinkSample]) -> float | None:
    if any(x.up is None for x in links):
        return None
    speeds = [x.speed_bytes_per_second for x in links if x.up]
    if any(s is None for s in speeds):
        return None
    return sum(s for s in speeds if s is not None)
