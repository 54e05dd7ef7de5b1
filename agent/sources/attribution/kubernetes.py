"""Kubernetes attribution: the pods the kubelet gave each GPU or MIG instance.

Allocations come from the kubelet's pod-resources `List` (kubelet.py): the device ids of
the NVIDIA device plugin's resources, `nvidia.com/gpu` (GPU UUIDs, or with time-slicing
`<uuid>::<replica>`, or with its index strategy the NVML index) and `nvidia.com/mig-*`
(MIG UUIDs), matched to this poll's GPUs. A pod holds a GPU whether or not a process of it
runs there yet.

Processes: a pid on a GPU belongs to a pod only if its cgroup is a pod's (kubepods.py);
with one pod on the GPU that is the pod, with several (time-slicing) the pid's pod UID is
named through the kubelet's device-manager checkpoint. Needs read access to the socket
(root, as the kubelet creates it 0660 root) and to the host's /proc.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from nvwatch.agent.sources.attribution.kubelet import (
    ContainerDevices,
    KubeletUnavailable,
    PodResourcesClient,
)
from nvwatch.agent.sources.attribution.kubepods import (
    CheckpointUnreadable,
    checkpoint_path,
    pod_uid_of,
    pods_by_uid,
)
from nvwatch.agent.sources.attribution.model import Allocation, GpuRef, Owner, Resolution
from nvwatch.agent.sources.attribution.procfs import PerProcess, ProcFS, ProcUnreadable

SCHEDULER = "kubernetes"
Unit = tuple[int, str]  # (GPU index, uuid of the GPU or MIG instance)


def is_gpu_resource(name: str) -> bool:
    """The NVIDIA device plugin's resources: nvidia.com/gpu (also renamed shared ones,
    nvidia.com/gpu.shared) and the MIG ones of its mixed strategy, nvidia.com/mig-1g.10gb."""
    return name.startswith(("nvidia.com/gpu", "nvidia.com/mig-"))


class KubernetesResolver:
    name = SCHEDULER

    def __init__(
        self, proc: ProcFS, socket: Path, *, timeout: float, checkpoint: Path | None = None
    ) -> None:
        self._proc = proc
        self._pod_uids: PerProcess[str | None] = PerProcess(proc)
        self.client = PodResourcesClient(socket, timeout)
        self._checkpoint = checkpoint if checkpoint is not None else checkpoint_path(socket)

    def resolve(self, gpus: Sequence[GpuRef]) -> Resolution:
        try:
            containers = [c for c in self.client.list() if is_gpu_resource(c.resource)]
        except KubeletUnavailable as exc:
            return Resolution(error=str(exc))
        owners = _owners_by_unit(gpus, containers)
        allocations = tuple(
            Allocation(gpu, uuid, owner) for (gpu, uuid), found in owners.items() for owner in found
        )
        pid_owners, error = self._pid_owners(gpus, owners, containers)
        return Resolution(allocations, pid_owners, error)

    def close(self) -> None:
        self.client.close()

    def _pod_uid(self, pid: int) -> str | None:
        return pod_uid_of(self._proc.cgroup_paths(pid) or ())

    def _pid_owners(
        self,
        gpus: Sequence[GpuRef],
        owners: dict[Unit, list[Owner]],
        containers: list[ContainerDevices],
    ) -> tuple[dict[int, Owner], str | None]:
        result: dict[int, Owner] = {}
        errors: list[str] = []
        by_uid: dict[str, tuple[str, str]] | None = None
        for unit, pids in _pids_by_unit(gpus):
            pods = {(o.namespace, o.pod): o for o in owners.get(unit, [])}
            for pid in pids:
                try:
                    uid = self._pod_uids.get(pid, self._pod_uid)
                except ProcUnreadable as exc:
                    errors.append(str(exc))
                    continue
                if uid is None or not pods:
                    continue  # not a pod's process, or no pod holds this GPU
                if len(pods) == 1:
                    result[pid] = next(iter(pods.values()))
                    continue
                if by_uid is None:  # read once per refresh, and only when GPUs are shared
                    try:
                        by_uid = pods_by_uid(self._checkpoint, containers)
                    except CheckpointUnreadable as exc:
                        errors.append(f"{len(pods)} pods share GPU {unit[0]}: {exc}")
                        by_uid = {}
                named = by_uid.get(uid)
                if named in pods:
                    result[pid] = pods[named]
        error = (
            None
            if not errors
            else errors[0] + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else "")
        )
        return result, error


def _owners_by_unit(
    gpus: Sequence[GpuRef], containers: list[ContainerDevices]
) -> dict[Unit, list[Owner]]:
    units = _units_by_device_id(gpus)
    owners: dict[Unit, list[Owner]] = {}
    for c in containers:
        owner = Owner(SCHEDULER, pod=c.pod, namespace=c.namespace, container=c.container)
        for device in c.device_ids:
            unit = units.get(device.partition("::")[0])  # a time-sliced replica's GPU
            if unit is not None and owner not in owners.setdefault(unit, []):
                owners[unit].append(owner)
    return owners


def _units_by_device_id(gpus: Sequence[GpuRef]) -> dict[str, Unit]:
    """How the device plugin may name each GPU and MIG instance: UUID, or NVML index."""
    units: dict[str, Unit] = {}
    for gpu in gpus:
        units[gpu.uuid] = units[str(gpu.index)] = (gpu.index, gpu.uuid)
        for instance in gpu.instances:
            units[instance.uuid] = (gpu.index, instance.uuid)
    return units


def _pids_by_unit(gpus: Sequence[GpuRef]) -> list[tuple[Unit, tuple[int, ...]]]:
    result = [((g.index, g.uuid), g.pids) for g in gpus]
    result += [((g.index, i.uuid), i.pids) for g in gpus for i in g.instances]
    return result
