"""What a simulated Slurm queue is made of: job requests, jobs, nodes and partitions.

Plain data, shared by the queue model (model.py), its scheduler pass
(sched.py) and what reads them (the history's scheduler series, the fleet's
simulated Slurm). A job asks for whole GPUs per node times nodes, as every way Slurm takes
a GPU request (`--gres=gpu:N`, `--gpus-per-node`, `--gpus` spread over nodes) comes to.

Why a pending job waits is one of the scheduler source's bounded reason classes; each
class keeps the Slurm reason the simulated squeue prints for it (squeue's `%r`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

RESOURCES = "resources"
PRIORITY = "priority"
LIMITS = "limits"
DEPENDENCY = "dependency"
HELD = "held"
OTHER = "other"
REASON_CLASSES = (RESOURCES, PRIORITY, LIMITS, DEPENDENCY, HELD, OTHER)
# the classes of a job that could start if the GPUs (or its account's limit) allowed:
# the queue wait of the wait histogram and the oldest-pending gauge is counted in them
WAITING = (RESOURCES, PRIORITY, LIMITS)
# Slurm's own reason for each class, as `squeue -o %r` prints it (slurm/slurm.h
# job_state_reason: WAIT_RESOURCES, WAIT_PRIORITY, WAIT_ASSOC_GRP_GRES, WAIT_DEPENDENCY,
# WAIT_HELD_USER, WAIT_TIME for a --begin time not reached)
SLURM_REASONS = {
    RESOURCES: "Resources",
    PRIORITY: "Priority",
    LIMITS: "AssocGrpGRES",
    DEPENDENCY: "Dependency",
    HELD: "JobHeldUser",
    OTHER: "BeginTime",
}

# why a node's GPUs are unavailable: the node's state, as sinfo names it
DRAINED = "drained"
DOWN = "down"
RESERVED = "reserved"
NODE_REASONS = (DRAINED, DOWN, RESERVED)

PENDING = "pending"
RUNNING = "running"
DONE = "done"


@dataclass(frozen=True)
class JobRequest:
    """What `sbatch` was given: `nodes` nodes with `gpus_per_node` whole GPUs each.

    The job runs `run_s` once started (math.inf: until the simulation ends); the
    scheduler plans with `time_limit_s` (`--time`), never less than `run_s`. `hold_until`
    is when a held job is released (`--hold`, then `scontrol release`; math.inf: never),
    `begin` a `--begin` time, `after` the job it depends on (`--dependency=afterany`)."""

    job_id: int
    account: str
    user: str
    partition: str
    gpus_per_node: int
    nodes: int
    submit: float
    run_s: float
    time_limit_s: float = math.inf
    hold_until: float | None = None
    begin: float | None = None
    after: int | None = None
    # a job pinned to GPUs of one node (a fleet's --job): started there at submission
    pinned: tuple[str, tuple[int, ...]] | None = None

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1 or self.nodes < 1:
            raise ValueError(f"job {self.job_id}: asks for no GPU")
        if self.run_s <= 0:
            raise ValueError(f"job {self.job_id}: runs for no time")
        if self.time_limit_s < self.run_s:
            object.__setattr__(self, "time_limit_s", self.run_s)

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes


@dataclass
class Job:
    """A job in the queue: pending (and why), running (and where) or done."""

    request: JobRequest
    state: str = PENDING
    reason: str = OTHER
    eligible: float | None = None  # when it could first have started (not held, ...)
    start: float | None = None
    end: float | None = None
    # node name -> the GPU indices it holds there
    allocation: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def job_id(self) -> int:
        return self.request.job_id

    @property
    def wait_s(self) -> float | None:
        """Queue wait: from eligible to start (None until it starts)."""
        if self.start is None or self.eligible is None:
            return None
        return self.start - self.eligible

    def planned_end(self) -> float:
        """When the scheduler expects it to end: start + time limit."""
        assert self.start is not None
        return self.start + self.request.time_limit_s


@dataclass
class SlurmNode:
    """One node as Slurm sees it: its GPUs (GRES), who holds each, and whether an admin
    took it out (drained, down, reserved: its free GPUs are unavailable)."""

    name: str
    gpus: int
    unavailable: str | None = None  # one of NODE_REASONS
    reason_text: str = ""  # what `scontrol update ... reason=` said (sinfo's REASON)
    holders: list[int | None] = field(default_factory=list)  # job id per GPU index

    def __post_init__(self) -> None:
        if not self.holders:
            self.holders = [None] * self.gpus

    @property
    def allocated(self) -> int:
        return sum(1 for holder in self.holders if holder is not None)

    @property
    def free(self) -> int:
        """GPUs a new job could get now (none on a node taken out)."""
        return 0 if self.unavailable else self.gpus - self.allocated

    def take(self, job_id: int, count: int) -> tuple[int, ...]:
        """Give `count` free GPUs to `job_id`, lowest indices first."""
        indices = tuple(i for i, holder in enumerate(self.holders) if holder is None)[:count]
        if len(indices) < count:
            raise ValueError(f"{self.name}: {count} GPUs asked, {len(indices)} free")
        for index in indices:
            self.holders[index] = job_id
        return indices

    def release(self, job_id: int) -> None:
        self.holders = [None if holder == job_id else holder for holder in self.holders]


@dataclass(frozen=True)
class Partition:
    """A Slurm partition: a name over nodes (a node may be in several partitions)."""

    name: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class Account:
    """A Slurm account (association) with its fair-share `shares` (sacctmgr's Fairshare)."""

    name: str
    shares: int = 1
