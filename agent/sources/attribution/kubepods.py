"""The Kubernetes pod of a process from its cgroup paths, and the pod UID's name.

The kubelet nests every container's cgroup under its pod's, named by the pod UID:

- cgroupfs driver: ``/kubepods/burstable/pod1f0c...-...-.../<container id>`` (v1 and v2)
- systemd driver: ``/kubepods.slice/kubepods-besteffort.slice/
  kubepods-besteffort-pod1f0c..._..._....slice/cri-containerd-<id>.scope`` (dashes of the
  UID become underscores in a unit name)

The pod-resources API names pods but not their UIDs; the kubelet's device-manager
checkpoint (`<kubelet root>/device-plugins/kubelet_internal_checkpoint`, JSON) names the
UID, container and device ids of every allocation. Joined on the device ids, which are
unique per allocation (time-sliced replicas are `GPU-<uuid>::<n>`), the two give each pod
UID its namespace and name: what tells apart the pods that share one GPU.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from nvwatch.agent.sources.attribution.kubelet import ContainerDevices

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
_POD = re.compile(rf"kubepods.*?[/-]pod(?P<uid>{_UID})(?:\.slice)?(?:/|$)")
# the checkpoint of a node with hundreds of pods is some hundreds of KiB
_MAX_CHECKPOINT_BYTES = 16 << 20


class CheckpointUnreadable(OSError):
    """The device-manager checkpoint cannot be read or parsed; the message says why."""


def pod_uid_of(paths: Iterable[str]) -> str | None:
    """The pod UID in any of a process's cgroup paths (dashed form), or None."""
    for path in paths:
        match = _POD.search(path)
        if match:
            return match["uid"].replace("_", "-")
    return None


def checkpoint_path(kubelet_socket: Path) -> Path:
    """The checkpoint beside the pod-resources socket's directory, under the kubelet root."""
    return kubelet_socket.parent.parent / "device-plugins" / "kubelet_internal_checkpoint"


def pods_by_uid(
    checkpoint: Path, containers: Iterable[ContainerDevices]
) -> dict[str, tuple[str, str]]:
    """pod UID -> (namespace, pod name), joining the checkpoint with a List on device ids."""
    owner_of_device = {
        (c.resource, device): (c.namespace, c.pod) for c in containers for device in c.device_ids
    }
    result: dict[str, tuple[str, str]] = {}
    for entry in _entries(checkpoint):
        for device in _device_ids(entry.get("DeviceIDs")):
            owner = owner_of_device.get((str(entry.get("ResourceName", "")), device))
            if owner is not None:
                result[str(entry.get("PodUID", ""))] = owner
                break
    return result


def _entries(checkpoint: Path) -> list[Mapping[str, object]]:
    try:
        with open(checkpoint, "rb") as file:
            data = json.loads(file.read(_MAX_CHECKPOINT_BYTES))
    except OSError as exc:
        raise CheckpointUnreadable(f"cannot read {checkpoint}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise CheckpointUnreadable(f"{checkpoint} is not the kubelet's JSON: {exc}") from exc
    entries = data.get("Data", {}).get("PodDeviceEntries") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise CheckpointUnreadable(f"{checkpoint} has no Data.PodDeviceEntries list")
    return [e for e in entries if isinstance(e, dict)]


def _device_ids(value: object) -> list[str]:
    """DeviceIDs: per NUMA node {"0": [ids]} since Kubernetes 1.20, a flat list before."""
    if isinstance(value, dict):
        return [str(d) for ids in value.values() if isinstance(ids, list) for d in ids]
    if isinstance(value, list):
        return [str(d) for d in value]
    return []
