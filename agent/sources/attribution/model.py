"""Plain results of attribution: owners, allocations, and what a resolver sees of the GPUs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

SCHEDULERS = ("slurm", "kubernetes")


@dataclass(frozen=True)
class Owner:
    """Whose work is on a GPU; "" where the scheduler has no such notion or did not say."""

    scheduler: str
    job_id: str = ""
    user: str = ""
    account: str = ""
    pod: str = ""
    namespace: str = ""
    container: str = ""

    def merged(self, other: Owner) -> Owner:
        """This owner with its empty fields filled from `other` (the same job or pod seen
        by two ways, e.g. the mapping directory's job id and the cgroup's user)."""
        return Owner(
            scheduler=self.scheduler,
            job_id=self.job_id or other.job_id,
            user=self.user or other.user,
            account=self.account or other.account,
            pod=self.pod or other.pod,
            namespace=self.namespace or other.namespace,
            container=self.container or other.container,
        )

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What makes two sightings the same owner: the job, or the pod's container."""
        return (self.scheduler, self.job_id, f"{self.namespace}/{self.pod}", self.container)


@dataclass(frozen=True)
class Allocation:
    """One owner of one GPU or MIG instance: a series of nvwatch_gpu_allocation_info.

    `gpu` is the NVML index (of the parent GPU for a MIG instance); `uuid` the GPU's, or
    the MIG instance's own for an instance."""

    gpu: int
    uuid: str
    owner: Owner


@dataclass(frozen=True)
class InstanceRef:
    """A MIG instance as a resolver needs it: its GPU instance id, UUID and processes."""

    gpu_instance_id: int
    uuid: str
    pids: tuple[int, ...] = ()


@dataclass(frozen=True)
class GpuRef:
    """A GPU as a resolver needs it: index, UUID, the pids NVML reports on it, and its
    MIG instances (empty when MIG is off)."""

    index: int
    uuid: str
    pids: tuple[int, ...] = ()
    instances: tuple[InstanceRef, ...] = ()


@dataclass(frozen=True)
class Resolution:
    """What one resolver found: allocations, the owner of each pid it could place, and
    why it could not see everything (an error for operators; None when all was read)."""

    allocations: tuple[Allocation, ...] = ()
    pid_owners: Mapping[int, Owner] = field(default_factory=lambda: MappingProxyType({}))
    error: str | None = None


@dataclass(frozen=True)
class AttributionSample:
    """The poller source's sample: every allocation on the node, in GPU order."""

    allocations: tuple[Allocation, ...]
