"""What a rank's node does to the rank's speed, followed from the plan alone.

A `RankShadow` holds copies of the parts of the rank's node that can slow it, built from
the node's profile, seed and scenarios as the node itself builds them: its GPU (power
limit, thermal resistance, a gpu-slow, its NVLink and PCIe link), the HCA port of its
rail, and its host. The GPU copy (held.py) integrates temperature under the load the rank
runs, so a thermal runaway slows the rank as it heats; everything else is read off the
scenarios' windows. Any node can build any rank's shadow, so every node of a job
computes the same speeds without asking the rank's node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nvwatch.agent.config import ScenarioSpec, is_index, parse_scenario
from nvwatch.sim.fabric.fabric import SimulatedFabric
from nvwatch.sim.gpu import scenarios as gpu_scenarios
from nvwatch.sim.job.held import HeldGpu
from nvwatch.sim.job.plan import Rank, SyncJobPlan, rail
from nvwatch.sim.node.host import SimulatedHost
from nvwatch.sim.workload import TRAINING_ALLREDUCE, TRAINING_COMPUTE, Workload

# the scenarios that slow a rank, by the part of its node they hit
RANK_GPU_FAULTS = frozenset(
    ("power-capped", "thermal-runaway", "nvlink-degraded", "gpu-slow", "pcie-downtrained")
)
RANK_PORT_FAULTS = frozenset(("ib-congestion", "ib-degraded"))
RANK_HOST_FAULTS = frozenset(("cpu-starved",))
# a shadow fabric writes no files: it is only asked its ports' rates
_NO_TREE = Path("/nonexistent-shadow-fabric")


@dataclass(frozen=True)
class RankSpeeds:
    """Shares of its healthy speed a rank has, per part of its step."""

    compute: float = 1.0  # its GPU's clocks while computing
    comm: float = 1.0  # the slowest path its all-reduce takes (NVLink, HCA, PCIe)
    input: float = 1.0  # the rate its host's loaders deliver batches at


HEALTHY = RankSpeeds()


class SteadyTraining(Workload):
    """A training job's levels averaged over its step, the same at every instant: what a
    rank of a healthy synchronous job runs, and what a shadow GPU starts in."""

    def gpu_utilization(self, t: float, gpu: int = 0) -> float:
        return self.training_means(t, t + self.step_seconds)[0]

    def compute_intensity(self, t: float, gpu: int = 0) -> float:
        return self.training_means(t, t + self.step_seconds)[1]

    def comm_intensity(self, t: float) -> float:
        return self.training_means(t, t + self.step_seconds)[2]

    def training_means(self, t0: float, t1: float) -> tuple[float, float, float]:
        (u_c, i_c, c_c), (u_a, i_a, c_a) = TRAINING_COMPUTE, TRAINING_ALLREDUCE
        share, rest = 1.0 - self.comm_fraction, self.comm_fraction
        return share * u_c + rest * u_a, share * i_c + rest * i_a, share * c_c + rest * c_a


class RankShadow:
    """The parts of one rank's node that can slow it, on the job's time since `start`."""

    def __init__(
        self, plan: SyncJobPlan, rank: Rank, start: float, clock: Callable[[], float]
    ) -> None:
        """`clock`: the node's (at `start` now), for repairs that end a fault early."""
        node = plan.nodes[rank.node]
        profile = plan.profile_of(rank.node)
        local = plan.ranks_on(rank.node)
        self.uses_nvlink = len(local) > 1 and bool(profile.nvlinks[rank.gpu])
        self.uses_fabric = plan.multi_node
        # PCIe carries the all-reduce to the HCA, or between GPUs with no NVLink
        self.uses_pcie = plan.multi_node or (len(local) > 1 and not self.uses_nvlink)
        self.gpu = HeldGpu(
            rank.gpu,
            profile.gpus[rank.gpu],
            profile.nvlinks[rank.gpu],
            SteadyTraining(seed=node.seed),
            seed=node.seed,
            start_time=start,
            node_name=profile.name,
        )
        self.device = rail(profile, rank.gpu)
        self.fabric = SimulatedFabric(profile, _NO_TREE, seed=node.seed, clock=clock)
        self.host = SimulatedHost(clock)
        links = [len(links) for links in profile.nvlinks]
        for spec in node.scenarios:
            self._start(spec, rank.gpu, links)

    def _start(self, spec: ScenarioSpec, gpu: int, links: list[int]) -> None:
        if spec.name in RANK_GPU_FAULTS:
            victim = spec.gpu
            if victim is None:
                victim = gpu_scenarios.default_victim(spec.name, links)
            if victim == gpu:
                gpu_scenarios.apply(
                    spec.name,
                    self.gpu,
                    onset_s=spec.from_s,
                    until_s=spec.until_s,
                    slowdown=spec.slowdown,
                )
        elif spec.name in RANK_PORT_FAULTS and self.device is not None:
            self.fabric.start_scenario(
                spec.name,
                spec.target,
                since_s=spec.from_s,
                until_s=spec.until_s,
                slowdown=spec.slowdown,
            )
        elif spec.name in RANK_HOST_FAULTS:
            self.host.start_scenario(spec)

    def repair(self, what: str | None) -> None:
        """End what a repair of the rank's node ends (SimulatedNode.repair's `what`, as
        the fleet's repair requests give it): all, a scenario name, a target (a GPU
        index, an HCA) or NAME@TARGET."""
        name, target = _selection(what)
        gpu_side = name is None or name in RANK_GPU_FAULTS
        if gpu_side and target in (None, str(self.gpu.index)):
            for hook in self.gpu.scenario_hooks:
                if name in (None, hook.name):
                    hook.end(self.gpu)
        port_side = name is None or name in RANK_PORT_FAULTS
        if port_side and (target is None or not is_index(target)):
            self.fabric.end_scenarios(name, target)
        if (name is None and target is None) or name in RANK_HOST_FAULTS:
            self.host.end_scenarios(name)

    @staticmethod
    def needed(plan: SyncJobPlan, rank: Rank) -> bool:
        """Whether anything on the rank's node can slow it (else it runs at HEALTHY)."""
        faults = RANK_GPU_FAULTS | RANK_PORT_FAULTS | RANK_HOST_FAULTS
        return any(spec.name in faults for spec in plan.nodes[rank.node].scenarios)

    def speeds(self, t: float, intensity: float, util: float) -> RankSpeeds:
        """The rank's speeds at `t`, its GPU copy having held this load up to then."""
        self.gpu.hold(t, intensity, util)
        paths = [1.0]
        if self.uses_nvlink:
            paths.append(self.gpu.nvlink_share())
        if self.uses_fabric and self.device is not None:
            paths.append(self.fabric.port(self.device).throughput_share(t))
        if self.uses_pcie:
            paths.append(self.gpu.pcie_share)
        return RankSpeeds(
            compute=self.gpu.compute_speed(TRAINING_COMPUTE[1]),
            comm=min(paths),
            input=self.host.input_share(t),
        )


def _selection(what: str | None) -> tuple[str | None, str | None]:
    """(scenario name or None, target or None) of a repair request's `what`."""
    if what is None:
        return None, None
    if "@" in what:
        spec = parse_scenario(what)
        return spec.name, spec.target
    known = RANK_GPU_FAULTS | RANK_PORT_FAULTS | RANK_HOST_FAULTS
    if what in known or "-" in what:  # a scenario's name (no target has a dash)
        return what, None
    return None, what
