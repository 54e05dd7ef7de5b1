"""Who holds each GPU: a Slurm job for each busy stretch of a node (a job holds the whole
node, sim/bulk/load), with an allocation series on each of the node's GPUs while it runs,
as `nvwatch serve --attribution slurm` exports it.

Job ids count up across the fleet in the order the nodes are written; users and accounts
are drawn from a fixed pool, so a user has jobs on many nodes, as on a real cluster.
"""

from __future__ import annotations

import numpy as np

from nvwatch.sim.bulk.templates import Template, node_series
from nvwatch.sim.fleet.plan import NodeSpec
from nvwatch.sim.tsdb.index import Labels

ALLOCATION = "nvwatch_gpu_allocation_info"
USERS = 40
ACCOUNTS = 8
FIRST_JOB_ID = 100_000


def gpu_labels(template: Template, spec: NodeSpec) -> list[Labels]:
    """Each GPU's labels on node `spec`, target labels included, without the name: those
    of its `nvwatch_gpu_up` series (the GPU's index and uuid)."""
    return [
        tuple(pair for pair in labels if pair[0] != "__name__")
        for labels in node_series(template, spec)
        if labels[0] == ("__name__", "nvwatch_gpu_up")
    ]


def allocations(
    template: Template, spec: NodeSpec, jobs: list[tuple[int, int]], first_job_id: int
) -> list[tuple[Labels, int, int]]:
    """The allocation series of node `spec`'s jobs, each with its span of steps; the
    jobs are numbered from `first_job_id` in order."""
    rng = np.random.default_rng(spec.seed + 7)
    gpus = gpu_labels(template, spec)
    out = []
    for number, (first, end) in enumerate(jobs):
        user = int(rng.integers(USERS))
        owner = (
            ("scheduler", "slurm"),
            ("job_id", str(first_job_id + number)),
            ("user", f"user{user:02d}"),
            ("account", f"account{user % ACCOUNTS}"),
        )
        out += [((("__name__", ALLOCATION), *gpu, *owner), first, end) for gpu in gpus]
    return out
