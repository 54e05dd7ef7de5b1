"""Which GPUs of which nodes are a synchronous job's ranks, and what those nodes run.

A fleet's `--job 0-3:all,id=77` is one job over nodes 0..3 (sim/fleet/jobs.py); its plan
names every rank (node, GPU) and, for every node of the job, the profile, seed and
scenarios the fleet plan gives it, so any node can follow every rank's speed itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nvwatch.agent.config import ScenarioSpec
from nvwatch.sim.profiles import Profile, get_profile
from nvwatch.sim.scenario_names import WORKLOAD_SCENARIOS


@dataclass(frozen=True)
class JobNode:
    """One node of a job as the fleet plan has it."""

    index: int  # the node's index in the fleet
    profile: str
    seed: int
    scenarios: tuple[ScenarioSpec, ...] = ()


@dataclass(frozen=True)
class Rank:
    node: int  # fleet index of its node
    gpu: int


@dataclass(frozen=True)
class SyncJobPlan:
    """A synchronous job: its ranks, in order, and the nodes they are on."""

    job_id: str
    ranks: tuple[Rank, ...]
    nodes: Mapping[int, JobNode]
    # pipeline-parallel stages differ by design: each rank's compute per step as a share
    # of a data-parallel rank's (empty: every rank computes alike)
    compute_weights: tuple[float, ...] = ()
    # checkpoints: (from, until) seconds of the job's time in which every rank stops
    # stepping together while the job writes its state
    pauses: tuple[tuple[float, float], ...] = ()

    def weight(self, rank: int) -> float:
        return self.compute_weights[rank] if self.compute_weights else 1.0

    def paused(self, since_start: float) -> bool:
        return any(begin <= since_start < end for begin, end in self.pauses)

    @property
    def multi_node(self) -> bool:
        """Ranks on more than one node: the all-reduce crosses the InfiniBand fabric."""
        return len({rank.node for rank in self.ranks}) > 1

    def ranks_on(self, node: int) -> tuple[Rank, ...]:
        return tuple(rank for rank in self.ranks if rank.node == node)

    def profile_of(self, node: int) -> Profile:
        return get_profile(self.nodes[node].profile)


def sync_job_plan(
    job_id: str, gpus: Mapping[int, Sequence[int]], nodes: Sequence[JobNode]
) -> SyncJobPlan:
    """The plan of job `job_id` holding `gpus[node]` on each node: every GPU that trains
    is a rank; one its node idles (`idle`, `idle@GPU`) holds no rank, as a GPU a job
    holds but runs nothing on."""
    by_index = {node.index: node for node in nodes}
    ranks = []
    for index, held in sorted(gpus.items()):
        idle = _idle_gpus(by_index[index].scenarios, len(get_profile(by_index[index].profile).gpus))
        ranks += [Rank(index, gpu) for gpu in held if gpu not in idle]
    return SyncJobPlan(job_id, tuple(ranks), {i: by_index[i] for i in sorted(gpus)})


def _idle_gpus(specs: Sequence[ScenarioSpec], gpu_count: int) -> set[int]:
    """GPUs of a node that run no training: the node's workload, then per-GPU ones."""
    workload = "healthy-training"
    for spec in specs:
        if spec.target is None and spec.name in WORKLOAD_SCENARIOS:
            workload = spec.name
    idle = set(range(gpu_count)) if workload == "idle" else set()
    for spec in specs:
        if spec.gpu is not None and spec.name in WORKLOAD_SCENARIOS:
            (idle.add if spec.name == "idle" else idle.discard)(spec.gpu)
    return idle


def rail(profile: Profile, gpu: int) -> str | None:
    """The HCA a GPU's inter-node traffic takes (its rail): the one behind its PCIe
    switch (the n-th GPU there takes the n-th HCA there, round), else the GPU's index
    round the node's HCAs; None on a node without any."""
    if not profile.nics:
        return None
    switch = profile.gpu_pcie_switch[gpu]
    near = [nic.device for nic in profile.nics if switch is not None and nic.pcie_switch == switch]
    if not near:
        return profile.nics[gpu % len(profile.nics)].device
    position = sum(1 for g in range(gpu) if profile.gpu_pcie_switch[g] == switch)
    return near[position % len(near)]
