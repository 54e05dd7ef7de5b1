"""Attribution off the poll path: one thread runs the resolvers, polls read its cache.

The thread (``nvwatch-attribution``, see agent/threads.py) refreshes every `interval`,
and sooner when a poll shows a pid the last refresh did not look at (a job just
started), but never more often than every `min_gap` seconds, so a node whose processes
churn costs a bounded amount of /proc reading. Each resolver bounds its own I/O by
`timeout` (the kubelet call's deadline); a resolver that fails leaves its owners empty
and its error in the cache, and the other resolvers' owners stand.

Polls read `cached()`, and the NVML source `labels_of(pid)`: a reference read and a dict
lookup, whatever the resolvers cost.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from nvwatch.agent.sources.attribution.model import (
    Allocation,
    GpuRef,
    InstanceRef,
    Owner,
    Resolution,
)
from nvwatch.agent.sources.nvml.samples import GpuSample, ProcessOwnerLabels
from nvwatch.agent.threads import start_thread

log = logging.getLogger(__name__)


class Resolver(Protocol):
    """One way of finding owners (Slurm, Kubernetes)."""

    name: str

    def resolve(self, gpus: Sequence[GpuRef]) -> Resolution: ...

    def close(self) -> None:
        """Release connections (the kubelet's channel); called once when the thread stops."""
        ...


@dataclass(frozen=True)
class Cached:
    """The last refresh: every resolver's allocations, the owner of each pid, and the
    errors of the resolvers that failed ("kubernetes: ..."); `refreshed_at` is
    monotonic time, None before the first refresh."""

    allocations: tuple[Allocation, ...] = ()
    labels: Mapping[int, ProcessOwnerLabels] = field(default_factory=lambda: MappingProxyType({}))
    errors: tuple[str, ...] = ()
    refreshed_at: float | None = None
    pids_seen: frozenset[int] = frozenset()
    # the GPUs and MIG devices (index, uuids) the refresh saw: a change (the first poll,
    # a repartition) is news even without a new pid, e.g. to the mapping directory
    units_seen: tuple[tuple[int, tuple[str, ...]], ...] = ()


class AttributionRefresher:
    def __init__(
        self,
        resolvers: Sequence[Resolver],
        *,
        interval: float,
        min_gap: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._resolvers = tuple(resolvers)
        self.interval = interval
        self._min_gap = min(min_gap, interval)
        self.clock = clock
        self._cache = Cached()
        self._gpus: tuple[GpuRef, ...] = ()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.started_at: float | None = None

    # --- read by polls ------------------------------------------------------------------

    def cached(self) -> Cached:
        return self._cache

    def labels_of(self, pid: int) -> ProcessOwnerLabels | None:
        return self._cache.labels.get(pid)

    def observe(self, gpus: tuple[GpuSample, ...]) -> None:
        """Keep the GPUs and pids of this poll; wake the thread for pids not yet looked at,
        or GPUs and MIG devices other than the last refresh saw."""
        refs = tuple(gpu_ref(gpu) for gpu in gpus)
        self._gpus = refs
        cache = self._cache
        seen = cache.pids_seen
        if (
            any(pid not in seen for ref in refs for pid in _pids(ref))
            or _units(refs) != cache.units_seen
        ):
            self._wake.set()

    # --- the thread ---------------------------------------------------------------------

    def start(self, context: contextvars.Context | None = None) -> None:
        with self._start_lock:
            if self._thread is not None or self._stop.is_set():
                return
            self.started_at = self.clock()
            self._thread = start_thread(
                "nvwatch-attribution", self._loop, daemon=True, context=context
            )

    def stop(self, timeout: float) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        for resolver in self._resolvers:
            try:
                resolver.close()
            except Exception:
                log.exception("closing attribution by %s failed", resolver.name)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            # interval from this refresh; an early wake-up still waits out min_gap
            self._wake.wait(self.interval)
            self._wake.clear()
            self._stop.wait(self._min_gap)

    def refresh(self) -> Cached:
        """Run every resolver once on the GPUs of the last poll; publish and return it."""
        gpus = self._gpus
        allocations: list[Allocation] = []
        owners: dict[int, Owner] = {}
        errors: list[str] = []
        for resolver in self._resolvers:
            try:
                found = resolver.resolve(gpus)
            except Exception as exc:  # one resolver's bug must not blank the others
                log.exception("attribution by %s failed", resolver.name)
                found = Resolution(error=f"{type(exc).__name__}: {exc}")
            allocations += found.allocations
            for pid, owner in found.pid_owners.items():
                owners.setdefault(pid, owner)
            if found.error is not None:
                errors.append(f"{resolver.name}: {found.error}")
        allocations.sort(key=lambda a: (a.gpu, a.uuid, a.owner.scheduler))
        self._cache = Cached(
            allocations=tuple(allocations),
            labels=MappingProxyType({pid: _labels(o) for pid, o in owners.items()}),
            errors=tuple(errors),
            refreshed_at=self.clock(),
            pids_seen=frozenset(pid for ref in gpus for pid in _pids(ref)),
            units_seen=_units(gpus),
        )
        return self._cache


def gpu_ref(gpu: GpuSample) -> GpuRef:
    """What resolvers need of one GPU of a poll: index, UUID and its processes' pids."""
    # a process in a MIG instance is the instance's, not the whole GPU's
    whole = tuple(p.pid for p in gpu.processes if p.gpu_instance_id is None)
    return GpuRef(gpu.index, gpu.uuid, whole, _instances(gpu))


def _instances(gpu: GpuSample) -> tuple[InstanceRef, ...]:
    """The GPU's MIG devices, by their own UUID, with the pids NVML places in each."""
    return tuple(InstanceRef(d.gpu_instance_id, d.mig_uuid, d.pids) for d in gpu.mig_devices)


def _units(refs: Sequence[GpuRef]) -> tuple[tuple[int, tuple[str, ...]], ...]:
    return tuple((r.index, (r.uuid, *(i.uuid for i in r.instances))) for r in refs)


def _pids(ref: GpuRef) -> list[int]:
    return [*ref.pids, *(pid for i in ref.instances for pid in i.pids)]


def _labels(owner: Owner) -> ProcessOwnerLabels:
    return ProcessOwnerLabels(job=owner.job_id, pod=owner.pod, namespace=owner.namespace)
