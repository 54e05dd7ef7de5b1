"""Planning a simulated history: which nodes, which range, and where its episodes fall.

`nvwatch simulate history` steps a simulated fleet through days of simulated time and
writes what Prometheus would have scraped (nvwatch.sim.history.history). Its episodes, the faults
a capacity review must find, are placed here in known weeks of the range and on known
nodes, so a test can ask for each one where it happened:

- a thermal runaway on one GPU in the first week (cooling fails, then is fixed),
- a power-capped week: every GPU of one node held at 60 % of TDP for about a week,
- an InfiniBand congestion episode on one HCA in the third week,
- an uncorrectable ECC error in the fourth week (XIDs 48 and 63, a row remapped or a
  page retired, then a GPU reset),
- an agent down for a few hours (the node's hardware runs on; only `up` 0 is scraped),
- an idle node (no job all month),
jobs of known efficiency (nvwatch.sim.history.jobs) on those nodes, jobs drawn from
stated distributions on the rest (nvwatch.sim.history.job_mix), and what the nodes' BMCs
see:
- a hot aisle on the last rack in the second week: its inlet air 12 °C warmer for about
  fourteen hours, above every class's envelope, not enough to slow a GPU,
- a fan failure on a DGX-1 in the third week (a few hours until the fan is replaced; the
  GPUs behind it run into slowdown, for less time than the thermal runaway's),
- a power supply failure in the fourth week on a DGX-1 (3+1 supplies: redundancy lost).
Episodes of the BMC share nodes with the GPU ones, never at the same time.

Positions are fractions of the range, so a shorter history keeps every episode and a
30-day one puts each in the week named above. Everything is checked up front: a bad
profile, step or range fails with one line before anything is simulated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from nvwatch.agent.config import ScenarioSpec
from nvwatch.sim.fleet.jobs import FleetJob, check_jobs, sync_job_plans
from nvwatch.sim.fleet.plan import FleetError, NodeSpec, expand_profiles, plan_fleet, rack_name
from nvwatch.sim.history.job_mix import drawn_episodes
from nvwatch.sim.history.jobs import FIRST_JOB_ID, JobEpisode, placed_job_nodes, plan_jobs
from nvwatch.sim.job.plan import SyncJobPlan
from nvwatch.sim.profiles import get_profile

DAY_S = 86_400.0
WEEK_S = 7 * DAY_S
# the classes of a mixed fleet, in the order nodes take them (DGX-1 first, as the seeds'
# 124-node cluster; then the two NVSwitch generations)
MIXED_PROFILES = ("dgx1-v100", "dgx-a100", "dgx-h100")
AGENT_DOWN = "agent-down"  # not a simulator scenario: the node's agent stops being scraped
MIN_NODES = 6  # one node per episode


@dataclass(frozen=True)
class Episode:
    """One placed fault: on `node` (its `instance`), from `start` to `end` (Unix seconds).

    `gpu` / `device` name the GPU or HCA it hits, None for a whole node.
    """

    kind: str
    node: str | None  # None: every node of `rack`
    start: float
    end: float
    gpu: int | None = None
    device: str | None = None
    rack: str | None = None  # the rack of a rack-wide episode
    fan: str | None = None  # the SDR name of the fan or supply it stops
    supply: str | None = None

    def week(self, range_start: float) -> int:
        """1-based week of the range the episode begins in."""
        return int((self.start - range_start) // WEEK_S) + 1


@dataclass(frozen=True)
class Placement:
    """Where an episode goes: node index, window as fractions of the range, target."""

    kind: str
    node: int
    begin: float
    finish: float
    # a GPU index, "all" GPUs, "hca" (the first HCA), "rack" (every node of the node's
    # rack), a fan's or supply's number (fan-failure, psu-failure), None
    target: str | None = None


PLACEMENTS = (
    Placement("thermal-runaway", 1, 0.10, 0.17, "2"),
    Placement("power-capped", 2, 0.25, 0.48, "all"),
    Placement("ib-congestion", 3, 0.55, 0.62, "hca"),
    Placement("ecc-dbe", 4, 0.80, 0.82, "5"),
    Placement(AGENT_DOWN, 0, 0.70, 0.71),
    Placement("idle", -1, 0.0, 1.0),  # the last node
    Placement("hot-aisle", -1, 0.35, 0.37, "rack"),
    Placement("fan-failure", 3, 0.50, 0.51, "1"),
    Placement("psu-failure", 0, 0.85, 0.90, "1"),
)
HOT_AISLE_RISE_C = 12.0  # over the room's 25 °C: above every DGX class's envelope


@dataclass(frozen=True)
class HistoryPlan:
    nodes: tuple[NodeSpec, ...]
    start: float  # Unix seconds of the first sample
    end: float  # Unix seconds of the last sample
    step: float  # seconds between samples
    episodes: tuple[Episode, ...]
    # Slurm jobs on the nodes (`--job`): their GPUs' allocations are written, and a job
    # across nodes (or sync=yes) runs as one synchronous job (sim/job/)
    jobs: tuple[FleetJob, ...] = ()
    # jobs of known efficiency with a start and an end (sim/history/jobs.py); none
    # beside static `jobs`
    job_episodes: tuple[JobEpisode, ...] = ()

    @property
    def sync_jobs(self) -> tuple[SyncJobPlan, ...]:
        return tuple(sync_job_plans(self.jobs, self.nodes))

    def jobs_on(self, node: int) -> tuple[FleetJob, ...]:
        return tuple(job.on(node) for job in self.jobs if node in job.all_nodes)

    @property
    def steps(self) -> int:
        return round((self.end - self.start) / self.step)

    def agent_down(self, node: str, t: float) -> bool:
        return any(
            e.kind == AGENT_DOWN and e.node == node and e.start <= t < e.end for e in self.episodes
        )


def mixed_profiles(nodes: int) -> list[str]:
    """`nodes` profiles taking MIXED_PROFILES in turn: every class in every rack."""
    return [MIXED_PROFILES[i % len(MIXED_PROFILES)] for i in range(nodes)]


def plan_history(
    *,
    nodes: int,
    days: float,
    step: float,
    end: float,
    profile: str | None = None,
    seed: int = 0,
    cluster: str = "sim",
    scenarios: Sequence[tuple[int | None, ScenarioSpec]] = (),
    jobs: Sequence[FleetJob] = (),
) -> HistoryPlan:
    """The plan of a history ending at `end` (rounded down to the step); `scenarios`
    (by node index, None for every node) run beside the placed episodes, `jobs` on the
    nodes (simulate fleet's --scenario and --job).

    FleetError for bad input."""
    if step <= 0 or step > 3600:
        raise FleetError(f"invalid step {step:g}s: use more than 0 and at most 1h")
    if days <= 0:
        raise FleetError(f"invalid range of {days:g} days: use more than 0")
    span = days * DAY_S
    if not math.isclose(span / step, round(span / step)):
        raise FleetError(f"{days:g} days is not a whole number of {step:g}s steps")
    if nodes < MIN_NODES:
        raise FleetError(f"a history needs at least {MIN_NODES} nodes, one per episode")
    profiles = mixed_profiles(nodes) if profile is None else expand_profiles(profile, nodes)
    for name in profiles:
        if not get_profile(name).nics:
            raise FleetError(f"{name} has no InfiniBand port: a history needs DGX-class nodes")
    last = math.floor(end / step) * step
    first = last - span
    racks = [rack_name(i) for i in range(len(profiles))]
    placed = [pair for p in PLACEMENTS for pair in _scenarios(p, profiles, racks, span)]
    specs = plan_fleet(
        profiles, base_port=0, seed=seed, scenarios=[*placed, *scenarios], cluster=cluster
    )
    check_jobs(jobs, [get_profile(name).gpu_count for name in profiles])
    episodes = tuple(_episode(p, specs, first, span) for p in PLACEMENTS)
    job_episodes = () if jobs else _default_jobs(specs, first, span, step, seed)
    return HistoryPlan(tuple(specs), first, last, step, episodes, tuple(jobs), job_episodes)


def _default_jobs(
    specs: Sequence[NodeSpec], first: float, span: float, step: float, seed: int
) -> tuple[JobEpisode, ...]:
    """The placed jobs, then the drawn ones on every node no episode or placed job uses
    (numbered after the placed ones, as a queue that ran those first)."""
    placed = plan_jobs(specs, first, span, step)
    taken = {_node(p, len(specs)) for p in PLACEMENTS} | placed_job_nodes(len(specs))
    free = [spec for spec in specs if spec.index not in taken]
    steps = round(span / step)
    first_id = FIRST_JOB_ID + len(placed)
    return (*placed, *drawn_episodes(free, first, steps, step, seed, first_id))


def _node(placement: Placement, count: int) -> int:
    return placement.node % count


def _window(placement: Placement, span: float) -> tuple[float, float]:
    """Seconds after the range starts; the step grid does not matter, the simulator runs
    scenarios on its own sub-steps."""
    return placement.begin * span, placement.finish * span


def _scenarios(
    placement: Placement, profiles: Sequence[str], racks: Sequence[str], span: float
) -> list[tuple[int, ScenarioSpec]]:
    node = _node(placement, len(profiles))
    if placement.kind == AGENT_DOWN:
        return []
    if placement.kind == "idle":
        return [(node, ScenarioSpec("idle"))]
    begin, finish = _window(placement, span)
    if placement.target == "rack":
        rise = f"{HOT_AISLE_RISE_C:g}"
        members = [i for i, rack in enumerate(racks) if rack == racks[node]]
        return [(i, ScenarioSpec(placement.kind, rise, begin, finish)) for i in members]
    profile = get_profile(profiles[node])
    if placement.target == "all":
        targets: list[str | None] = [str(i) for i in range(profile.gpu_count)]
    elif placement.target == "hca":
        targets = [profile.nics[0].device]
    else:
        targets = [placement.target]
    return [(node, ScenarioSpec(placement.kind, t, begin, finish)) for t in targets]


def _episode(placement: Placement, specs: Sequence[NodeSpec], first: float, span: float) -> Episode:
    spec = specs[_node(placement, len(specs))]
    start, end = (first + t for t in _window(placement, span))
    target = placement.target
    if placement.kind == "hot-aisle":
        return Episode(placement.kind, None, start, end, rack=spec.rack)
    if placement.kind == "fan-failure":
        return Episode(placement.kind, spec.name, start, end, fan=f"FAN{target}")
    if placement.kind == "psu-failure":
        return Episode(placement.kind, spec.name, start, end, supply=f"PSU{target} Status")
    gpu = int(target) if target and target.isdigit() else None
    device = get_profile(spec.profile).nics[0].device if target == "hca" else None
    return Episode(placement.kind, spec.name, start, end, gpu, device)
