"""One pass of the simulated Slurm scheduler: which eligible jobs start now, and why the
others wait.

Jobs are taken in priority order (the model sorts them: fair share, or first in first
out). For each:
- its account's GPU limit (an association's GrpTRES=gres/gpu=N) would be passed: it
  waits for `limits` and reserves nothing;
- it fits now on nodes of its partition (whole GPUs per node on `nodes` distinct nodes,
  fullest nodes first, so big jobs find empty nodes) without delaying a reservation: it
  starts;
- otherwise the first such job of a partition waits for `resources` and gets a
  reservation: the time its GPUs will be free if the running jobs end at their time
  limits (the "shadow time"); every later job of that partition waits for `priority`,
  unless it fits now and ends before every reservation on the nodes it would use
  (Slurm's backfill, EASY style: a big job at the head is never starved by small ones,
  and small ones still use the GPUs it cannot).
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from nvwatch.sim.queue.jobs import LIMITS, PRIORITY, RESOURCES, Job, Partition, SlurmNode

# (planned end, node, GPUs) of a running job's share of one node
Release = tuple[float, str, int]


@dataclass(frozen=True)
class Reservation:
    """The GPUs of `nodes` are promised to a blocked job from `shadow` on."""

    nodes: frozenset[str]
    shadow: float


@dataclass(frozen=True)
class Start:
    job: Job
    nodes: tuple[str, ...]


class _Pass:
    """The free GPUs and planned releases one pass works on (its own copies)."""

    def __init__(
        self,
        now: float,
        nodes: Mapping[str, SlurmNode],
        partitions: Mapping[str, Partition],
        running: Iterable[Job],
    ) -> None:
        self.now = now
        self.free = {name: node.free for name, node in nodes.items()}
        self.schedulable = {name for name, node in nodes.items() if not node.unavailable}
        self.partitions = partitions
        self.partition_free = {
            p.name: sum(self.free[n] for n in p.nodes) for p in partitions.values()
        }
        self.node_partitions: dict[str, list[str]] = {}
        for partition in partitions.values():
            for node in partition.nodes:
                self.node_partitions.setdefault(node, []).append(partition.name)
        self.releases: list[Release] = sorted(
            (job.planned_end(), node, len(gpus))
            for job in running
            for node, gpus in job.allocation.items()
        )
        self.account_gpus: Counter[str] = Counter()
        for job in running:
            self.account_gpus[job.request.account] += job.request.gpus
        self.reservations: list[Reservation] = []

    def placement(self, job: Job) -> tuple[str, ...] | None:
        """The nodes `job` would start on now, or None."""
        request = job.request
        if self.partition_free[request.partition] < request.gpus:
            return None
        end = self.now + request.time_limit_s
        usable = [
            node
            for node in self.partitions[request.partition].nodes
            if self.free[node] >= request.gpus_per_node and not self._delays(node, end)
        ]
        if len(usable) < request.nodes:
            return None
        return tuple(sorted(usable, key=lambda node: (self.free[node], node))[: request.nodes])

    def _delays(self, node: str, end: float) -> bool:
        return any(node in r.nodes and end > r.shadow for r in self.reservations)

    def take(self, job: Job, nodes: Sequence[str]) -> None:
        request = job.request
        end = self.now + request.time_limit_s
        for node in nodes:
            self.free[node] -= request.gpus_per_node
            for partition in self.node_partitions.get(node, ()):
                self.partition_free[partition] -= request.gpus_per_node
            bisect.insort(self.releases, (end, node, request.gpus_per_node))
        self.account_gpus[request.account] += request.gpus

    def reserve(self, job: Job) -> None:
        members = self.partitions[job.request.partition].nodes
        shadow = self.shadow_time(job, members)
        self.reservations.append(Reservation(frozenset(members), shadow))

    def shadow_time(self, job: Job, members: Sequence[str]) -> float:
        """When `job` would fit if every running job ended at its time limit (inf: never,
        on the nodes in service now)."""
        request = job.request
        free = {node: self.free[node] for node in members if node in self.schedulable}

        def fits() -> bool:
            return sum(1 for n in free.values() if n >= request.gpus_per_node) >= request.nodes

        if fits():
            return self.now
        for end, node, count in self.releases:
            if node in free:
                free[node] += count
                if fits():
                    return end
        return math.inf


def schedule(
    now: float,
    eligible: Sequence[Job],
    nodes: Mapping[str, SlurmNode],
    partitions: Mapping[str, Partition],
    running: Iterable[Job],
    limits: Mapping[str, int],
) -> list[Start]:
    """The jobs of `eligible` (in priority order) that start now and where; the reason
    of each of the others is set."""
    state = _Pass(now, nodes, partitions, running)
    reserved: set[str] = set()  # partitions whose head job holds a reservation
    starts = []
    for job in eligible:
        request = job.request
        limit = limits.get(request.account)
        if limit is not None and state.account_gpus[request.account] + request.gpus > limit:
            job.reason = LIMITS
            continue
        placed = state.placement(job)
        if placed is not None:
            state.take(job, placed)
            starts.append(Start(job, placed))
        elif request.partition in reserved:
            job.reason = PRIORITY
        else:
            job.reason = RESOURCES
            reserved.add(request.partition)
            state.reserve(job)
    return starts
