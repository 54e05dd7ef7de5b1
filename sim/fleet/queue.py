"""A simulated fleet's Slurm queue: jobs arrive, wait, start on the nodes' GPUs and end.

`simulate fleet --queue LOAD` runs one queue model (sim/queue/model.py) for the whole fleet
on its simulated clock: a partition per node class (`v100`, `a100`, ...), the accounts
of ACCOUNTS submitting GPU jobs at LOAD times each partition's GPUs (seeded by --seed),
the fleet's `--job`s pinned where they were placed and running for good. The queue runs
WARMUP_S of simulated time before the fleet starts, so the first scrape finds it busy.

At every tick the queue is brought up to the fleet's clock and each node's simulated
Slurm (jobs.NodeJobs: the prolog's job-mapping files and the job workers' /proc
entries) is rewritten to the jobs running there, so every node's agent attributes its
GPUs to the jobs the queue placed on them: allocation info and the queue agree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from nvwatch.sim.fleet.jobs import FIRST_JOB_ID, FleetJob
from nvwatch.sim.fleet.plan import FleetError, NodeSpec
from nvwatch.sim.history.queue import ACCOUNTS, WEIGHTS, partition_of
from nvwatch.sim.profiles import get_profile
from nvwatch.sim.queue.arrivals import Arrivals, Demand, PartitionShape
from nvwatch.sim.queue.jobs import Account, JobRequest, Partition, SlurmNode
from nvwatch.sim.queue.model import QueueModel

WARMUP_S = 6 * 3600.0
NO_ACCOUNT = "none"  # the account of a --job given none (the scheduler source's name)


@dataclass(frozen=True)
class QueueSpec:
    """What `--queue` asks for: the offered load, as a share of each partition's GPUs, and
    `--queue-limit`s: accounts whose running jobs may hold at most so many GPUs (their
    GrpTRES=gres/gpu=N), so their jobs wait for the limit while GPUs sit idle."""

    load: float
    accounts: tuple[Account, ...] = ACCOUNTS
    limits: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if not 0 < self.load <= 10 or not math.isfinite(self.load):
            raise FleetError(f"invalid queue load {self.load:g}: use more than 0 and at most 10")
        names = [a.name for a in self.accounts]
        for account, gpus in self.limits:
            if account not in names:
                raise FleetError(
                    f"--queue-limit {account}: no such account (the queue's: {', '.join(names)})"
                )
            if gpus < 0:
                raise FleetError(f"--queue-limit {account}:{gpus}: a limit is 0 GPUs or more")


LIMIT_SYNTAX = "ACCOUNT:GPUS"


def parse_limit(text: str) -> tuple[str, int]:
    """'robotics:4' -> ('robotics', 4)."""
    account, sep, gpus = text.partition(":")
    if not sep or not account.strip() or not gpus.strip().isdigit():
        raise FleetError(f"invalid queue limit {text!r}: use {LIMIT_SYNTAX}, e.g. robotics:4")
    return account.strip(), int(gpus)


class FleetQueue:
    """The fleet's queue, its arrivals, and the jobs each node holds now."""

    def __init__(
        self,
        spec: QueueSpec,
        nodes: Sequence[NodeSpec],
        pinned: Sequence[FleetJob],
        *,
        seed: int,
        now: float,
    ) -> None:
        self.names = [n.name for n in nodes]
        gpus = [len(get_profile(n.profile).gpus) for n in nodes]
        members: dict[str, list[int]] = {}
        for node in nodes:
            members.setdefault(partition_of(node.profile), []).append(node.index)
        partitions = [Partition(p, tuple(self.names[i] for i in m)) for p, m in members.items()]
        known = {a.name for a in spec.accounts}
        extra = sorted({j.account or NO_ACCOUNT for j in pinned} - known)
        start = now - WARMUP_S
        self.model = QueueModel(
            [SlurmNode(name, count) for name, count in zip(self.names, gpus, strict=True)],
            partitions,
            (*spec.accounts, *(Account(a) for a in extra)),
            start=start,
        )
        for account, limit in spec.limits:
            self.model.set_limit(start, account, limit)
        first_id = self._pin(pinned, nodes, gpus, start)
        shapes = [
            PartitionShape(p, sum(gpus[i] for i in m), len(m), max(gpus[i] for i in m))
            for p, m in members.items()
        ]
        weights = {a.name: WEIGHTS.get(a.name, 1.0) for a in spec.accounts}
        demand = Demand(weights, spec.load)
        self.arrivals = Arrivals(demand, shapes, seed=seed, start=start, first_id=first_id)
        self.advance(now)

    def _pin(
        self, pinned: Sequence[FleetJob], nodes: Sequence[NodeSpec], gpus: Sequence[int], at: float
    ) -> int:
        """The fleet's --job's, started where they were placed; the first free job id."""
        last = FIRST_JOB_ID - 1
        for job in pinned:
            if len(job.all_nodes) > 1:
                raise FleetError(f"job {job.job_id}: with --queue a --job holds GPUs of one node")
            if not job.job_id.isdigit():
                raise FleetError(f"job {job.job_id}: with --queue a job id is a number, as Slurm's")
            held = job.gpus if job.gpus is not None else tuple(range(gpus[job.node]))
            node = nodes[job.node]
            request = JobRequest(
                job_id=int(job.job_id),
                account=job.account or NO_ACCOUNT,
                user=job.user,
                partition=partition_of(node.profile),
                gpus_per_node=len(held),
                nodes=1,
                submit=at,
                run_s=math.inf,
                pinned=(node.name, held),
            )
            self.model.submit(request)
            last = max(last, request.job_id)
        try:
            self.model.advance(at)
        except ValueError as exc:  # two --job's on one GPU: a queue gives a GPU to one
            raise FleetError(f"with --queue, {exc}") from exc
        return last + 1

    def advance(self, now: float) -> None:
        """Submit what arrived and run the queue up to `now`."""
        self.model.submit_all(self.arrivals.until(now))
        self.model.advance(now)

    def jobs_on(self, index: int) -> list[FleetJob]:
        """The jobs running on node `index` now, as that node's simulated Slurm lists them."""
        name = self.names[index]
        return [
            FleetJob(
                node=index,
                gpus=job.allocation[name],
                job_id=str(job.job_id),
                user=job.request.user,
                account=job.request.account,
            )
            for job in self.model.jobs_on(name)
        ]

    def summary(self) -> str:
        state = self.model.state()
        allocated = sum(n for (_, s), n in state.gpus.items() if s == "allocated")
        total = sum(state.gpus.values())
        pending = sum(state.pending_gpus.values())
        return (
            f"queue: {len(self.model.partitions)} partitions, {len(self.model.running)} jobs "
            f"on {allocated}/{total} GPUs, {len(self.model.pending)} pending for {pending} GPUs"
        )
