"""The jobs of a simulated history: Slurm jobs of known efficiency, placed like its faults.

Each job holds known GPUs on one or more nodes from a start to an end inside the range;
while it runs, its GPUs' load follows its profile (sim/history/job_load.py: how much of
the time they compute, how much memory they hold, whether its inter-node traffic takes
InfiniBand) and the node's agent exports who holds them (nvwatch_gpu_allocation_info with
job_id, user and account, as its Slurm attribution does), before and after not. The rest
of a job's nodes' GPUs idle while it runs, as on a Slurm node whose GPUs no other job
holds. What each job should make `nvwatch job` say is listed with it (`notes`):

- `healthy`: 8 GPUs of one node, busy all its life (note: none);
- `idle-gpus`: 8 GPUs held, one used (idle-gpus);
- `low-utilization`: 4 GPUs computing a quarter of the time, its data loader starving
  them (low-utilization); it shares its node with
- `small-memory`: the node's other 4 GPUs, busy, holding 6 % of each GPU's memory, what a
  MIG slice would hold (small-memory); the two overlap, so a node's energy is split by
  the GPUs each holds;
- `power-capped`: every GPU of the node of the power-capped episode (plan.py), starting
  before its cap, so the cap holds it most of its life (power-capped);
- `idle-infiniband`: two nodes whose inter-node traffic never takes InfiniBand: their
  ports carry only management traffic (idle-infiniband);
- `multi-node`: two nodes all-reducing over InfiniBand (none).

Positions are fractions of the range (as the episodes'), rounded to the step grid, with
at least one step each; every job keeps off its nodes' fault episodes but the power cap
it is meant to meet. The nodes no episode and no placed job names run jobs drawn from
stated distributions (job_mix.py), whose notes no plan states. A history given static
`--job`s runs those instead.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nvwatch.sim.fleet.plan import NodeSpec
from nvwatch.sim.history.job_load import (
    BUSY,
    IDLE,
    TIME_SLACK_S,
    TRAINING_MEAN_UTILIZATION,
    JobLoad,
    Span,
    timeline,
)
from nvwatch.sim.job.plan import rail
from nvwatch.sim.profiles import get_profile

if TYPE_CHECKING:
    from nvwatch.sim.node.node import SimulatedNode

FIRST_JOB_ID = 500_001
DRAWN = "drawn"  # the kind of a job drawn by job_mix.py
LOW_UTILIZATION = 0.25  # of the time computing: a starved data loader
SMALL_MEMORY_SHARE = 0.06  # of the board: a 1g MIG slice would hold it


@dataclass(frozen=True)
class JobPlacement:
    """Where a default job goes: node indexes, GPUs held on each (None: all), its window
    as fractions of the range, its load, how many GPUs of each node use it (None: all)."""

    kind: str
    nodes: tuple[int, ...]
    gpus: tuple[int, ...] | None
    begin: float
    finish: float
    load: JobLoad
    busy_gpus: int | None
    notes: tuple[str, ...]
    user: str
    account: str


# a single-node job's traffic stays on NVLink; so does that of a job that does not use IB
_SINGLE = _NO_IB = JobLoad(1.0, BUSY.memory_share)
_LOW_1 = JobLoad(LOW_UTILIZATION / TRAINING_MEAN_UTILIZATION, BUSY.memory_share)
_SMALL_1 = JobLoad(1.0, SMALL_MEMORY_SHARE)

JOB_PLACEMENTS = (
    JobPlacement("healthy", (1,), None, 0.20, 0.26, _SINGLE, None, ("none",), "alice", "nlp"),
    JobPlacement("idle-gpus", (0,), None, 0.05, 0.11, _SINGLE, 1, ("idle-gpus",), "bob", "vision"),
    JobPlacement(
        "low-utilization", (4,), (0, 1, 2, 3), 0.40, 0.47, _LOW_1, None,
        ("low-utilization",), "carol", "speech",
    ),
    JobPlacement(
        "small-memory", (4,), (4, 5, 6, 7), 0.42, 0.49, _SMALL_1, None,
        ("small-memory",), "dave", "robotics",
    ),
    # the power-capped episode's node is capped over 0.25..0.48
    JobPlacement(
        "power-capped", (2,), None, 0.22, 0.40, _SINGLE, None, ("power-capped",), "erin", "nlp"
    ),
    JobPlacement(
        "idle-infiniband", (1, 4), None, 0.52, 0.58, _NO_IB, None,
        ("idle-infiniband",), "frank", "vision",
    ),
    JobPlacement("multi-node", (0, 3), None, 0.74, 0.80, BUSY, None, ("none",), "grace", "nlp"),
)  # fmt: skip


@dataclass(frozen=True)
class JobEpisode:
    """One job of the history: (start, end] in Unix seconds on the step grid; `gpus` on
    each of `nodes` (instances, with `indexes` their plan indexes); the first `busy_gpus`
    of them per node run `load`, the rest idle."""

    kind: str
    job_id: str
    user: str
    account: str
    nodes: tuple[str, ...]
    indexes: tuple[int, ...]
    gpus: tuple[int, ...]
    start: float
    end: float
    load: JobLoad
    busy_gpus: int
    notes: tuple[str, ...]

    def load_of(self, gpu: int) -> JobLoad:
        return self.load if self.gpus.index(gpu) < self.busy_gpus else IDLE

    def runs_at(self, t: float) -> bool:
        """Whether the sample at Unix time `t` is one of its life's, (start, end]."""
        return self.start + TIME_SLACK_S < t <= self.end + TIME_SLACK_S


def plan_jobs(
    specs: Sequence[NodeSpec], first: float, span: float, step: float
) -> tuple[JobEpisode, ...]:
    """The placed jobs over the nodes of a history starting at `first`."""
    return tuple(
        _episode(number, p, specs, first, span, step) for number, p in enumerate(JOB_PLACEMENTS)
    )


def placed_job_nodes(count: int) -> set[int]:
    """The indexes of the nodes the placed jobs use in a history of `count` nodes."""
    return {i % count for placement in JOB_PLACEMENTS for i in placement.nodes}


def _episode(
    number: int,
    placement: JobPlacement,
    specs: Sequence[NodeSpec],
    first: float,
    span: float,
    step: float,
) -> JobEpisode:
    steps = round(span / step)
    begin = min(steps - 1, math.floor(placement.begin * steps))
    end = max(begin + 1, math.floor(placement.finish * steps))
    nodes = [specs[i % len(specs)] for i in placement.nodes]
    count = get_profile(nodes[0].profile).gpu_count
    gpus = placement.gpus if placement.gpus is not None else tuple(range(count))
    return JobEpisode(
        kind=placement.kind,
        job_id=str(FIRST_JOB_ID + number),
        user=placement.user,
        account=placement.account,
        nodes=tuple(n.name for n in nodes),
        indexes=tuple(n.index for n in nodes),
        gpus=gpus,
        start=first + begin * step,
        end=first + end * step,
        load=placement.load,
        busy_gpus=len(gpus) if placement.busy_gpus is None else placement.busy_gpus,
        notes=placement.notes,
    )


def run_jobs(
    node: SimulatedNode, spec: NodeSpec, jobs: Sequence[JobEpisode], origin: float
) -> None:
    """Make `node` (node `spec` of a history starting at Unix time `origin`, its clock's
    0) run its part of `jobs`: each GPU the timeline of what holds it, each HCA port the
    timeline of the first GPU on its rail, read for InfiniBand."""
    mine = [job for job in jobs if spec.index in job.indexes]
    if not mine:
        return
    spans = _gpu_spans(mine, len(node.nvml.gpus), origin)
    # a node of drawn jobs is a Slurm node given only to them: idle between them
    outside = IDLE if any(job.kind == DRAWN for job in mine) else None
    # GPUs with the same timeline share one workload, so the GPU model computes its
    # means once per sub-step for all of them, as for a node's training GPUs
    shared: dict[tuple[Span, ...], str] = {}
    for gpu in node.nvml.gpus:
        key = tuple(spans[gpu.index])
        name = shared.setdefault(key, f"{spec.name}/{len(shared)}")
        gpu.run(timeline(gpu.workload, name, key, outside=outside))
    for device in node.fabric.devices:
        railed = [g for g in range(len(node.nvml.gpus)) if rail(node.profile, g) == device]
        if railed:
            port = node.fabric.port(device)
            name = f"{spec.name}/{device}"
            port.workload = timeline(
                port.workload, name, spans[railed[0]], ib=True, outside=outside
            )


def _gpu_spans(jobs: Sequence[JobEpisode], gpus: int, origin: float) -> list[list[Span]]:
    """Per GPU of a node, its spans (simulator seconds): between every two bounds of the
    node's jobs that some job covers, the load of the job holding the GPU, else idle."""
    bounds = sorted({t - origin for job in jobs for t in (job.start, job.end)})
    spans: list[list[Span]] = [[] for _ in range(gpus)]
    for low, high in itertools.pairwise(bounds):
        running = [job for job in jobs if job.runs_at(origin + (low + high) / 2)]
        if not running:
            continue
        for gpu in range(gpus):
            holder = next((job for job in running if gpu in job.gpus), None)
            load = IDLE if holder is None else holder.load_of(gpu)
            spans[gpu].append(Span(low, high, load))
    return spans
