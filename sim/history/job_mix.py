"""Jobs drawn from stated distributions: what a queue puts on the nodes of a history that
no placed episode or placed job uses.

The placed jobs (jobs.py) each show one note; the rest of a real cluster's month is many
jobs of every size, length and efficiency, and a capacity review's percentiles are only
believable over those. Every node that no episode and no placed job names runs such jobs
back to back; between them its GPUs idle, as a Slurm node's unallocated GPUs do. The
distributions are stated here, chosen to look like the published traces of shared GPU
clusters (Microsoft's Philly, ATC'19; Alibaba's PAI, NSDI'22: most jobs small and short,
a long tail of big and long ones, GPU utilization spread wide with a mean near half),
not fitted to either:

- size (`SIZES`): one GPU 30 %, two 15 %, four 20 %, a whole node 25 %, two whole nodes
  7 %, four whole nodes 3 % (a multi-node job takes neighbouring free nodes, a smaller
  one an aligned block of its node: GPUs 0-3 or 4-7, ...);
- length: log-normal, median `LENGTH_MEDIAN_S` (4 h), sigma `LENGTH_SIGMA` (1.2), so
  about a tenth of the jobs end within 50 min and a tenth run past 19 h; at least one
  step, at most `LENGTH_MAX_S` (3 days, a common partition limit);
- the gap before a GPU's next job: exponential, mean `GAP_MEAN_S` (1.5 h);
- duty, the share of time the job's GPUs run its step: Beta(`DUTY_BETA`), mean 0.63;
- GPUs used of those held: all of them, but one only for `ONE_USED_SHARE` of the jobs
  holding more than one (a script that never learned of the others);
- memory held, a share of the board: Beta(`MEMORY_BETA`), between 3 % and 95 %;
- a multi-node job's inter-node traffic takes InfiniBand but for `NO_IB_SHARE` of them;
- users: `USERS`, each in one account, drawn with weights 1/rank (a few users hold most).

Everything is drawn from the history's seed, so one seed gives one month of jobs.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from nvwatch.sim.fleet.plan import NodeSpec
from nvwatch.sim.history.job_load import JobLoad
from nvwatch.sim.history.jobs import DRAWN, JobEpisode
from nvwatch.sim.profiles import get_profile

# (GPUs of one node, or 0 with whole nodes), whole nodes, weight
SIZES = ((1, 0, 0.30), (2, 0, 0.15), (4, 0, 0.20), (0, 1, 0.25), (0, 2, 0.07), (0, 4, 0.03))
LENGTH_MEDIAN_S = 4 * 3600.0
LENGTH_SIGMA = 1.2
LENGTH_MAX_S = 3 * 86_400.0
GAP_MEAN_S = 1.5 * 3600.0
DUTY_BETA = (2.2, 1.3)
ONE_USED_SHARE = 0.10
MEMORY_BETA = (2.0, 2.5)
MEMORY_RANGE = (0.03, 0.95)
NO_IB_SHARE = 0.10
USERS = (
    ("ana", "nlp"), ("ben", "vision"), ("chen", "nlp"), ("dana", "speech"),
    ("eli", "robotics"), ("fay", "vision"), ("gus", "nlp"), ("hana", "bio"),
    ("ivo", "speech"), ("jun", "bio"), ("kai", "robotics"), ("lea", "nlp"),
)  # fmt: skip
_SEED_SALT = 0x10B5
_SIZE_WEIGHTS = tuple(weight for *_, weight in SIZES)
_USER_WEIGHTS = tuple(1 / rank for rank in range(1, len(USERS) + 1))


@dataclass(frozen=True)
class DrawnJob:
    """A drawn job before it has an id: its nodes (plan indexes) and GPUs on each, its
    life in steps of the range [begin, end), its load and the GPUs of each node using it."""

    nodes: tuple[int, ...]
    gpus: tuple[int, ...]
    begin: int
    end: int
    load: JobLoad
    busy_gpus: int
    user: str
    account: str


class _Schedule:
    """When each GPU of the free nodes is next free, in steps of the range; per node, the
    step each size of job could start at first there (kept, as a month of a large fleet
    places tens of thousands of jobs)."""

    def __init__(self, free: Sequence[NodeSpec], step: float, rng: random.Random) -> None:
        self.nodes = [spec.index for spec in free]
        self.gpus = {spec.index: get_profile(spec.profile).gpu_count for spec in free}
        self.step, self.rng = step, rng
        self.free_at = {n: [self.gap() for _ in range(self.gpus[n])] for n in self.nodes}
        # each size's aligned blocks of GPUs on a node of each GPU count
        self.blocks = {
            (count, size): _blocks(count, size)
            for count in set(self.gpus.values())
            for size in {size for size, _, _ in SIZES if size}
        }
        self.best_of: dict[tuple[int, int], tuple[int, tuple[int, ...]]] = {}
        self.first_free: dict[int, int] = {}  # the step a node's first GPU is free at
        self.all_free: dict[int, int] = {}  # ... and its last
        for node in self.nodes:
            self._refresh(node)

    def gap(self) -> int:
        return round(self.rng.expovariate(1 / GAP_MEAN_S) / self.step)

    def earliest(self) -> int:
        """The step the first GPU is free at."""
        return min(self.first_free.values())

    def place(self, whole: int, size: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The nodes and GPUs that can start a job of `size` GPUs of one node (0: `whole`
        neighbouring nodes) first. Jobs are placed first come, first served: a job waits
        for all its GPUs and a later one never starts before it on them (no backfill),
        which leaves the holes such a queue leaves in front of a big job."""
        if whole:
            return self._place_nodes(min(whole, len(self.nodes)))
        best = min((self.best_of[node, size], node) for node in self.nodes)
        (_, block), node = best
        return (node,), block

    def _place_nodes(self, count: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        ready = [self.all_free[n] for n in self.nodes]
        ready += ready[: count - 1]  # the nodes' list wraps around
        starts = [max(ready[i : i + count]) for i in range(len(self.nodes))]
        at = starts.index(min(starts))
        nodes = tuple(self.nodes[(at + k) % len(self.nodes)] for k in range(count))
        return nodes, tuple(range(min(self.gpus[n] for n in nodes)))

    def start(self, nodes: Sequence[int], gpus: Sequence[int]) -> int:
        return max(self.free_at[n][g] for n in nodes for g in gpus)

    def hold(self, nodes: Sequence[int], gpus: Sequence[int], end: int) -> None:
        for n in nodes:
            for g in gpus:
                self.free_at[n][g] = end + self.gap()
            self._refresh(n)

    def _refresh(self, node: int) -> None:
        """Each size's earliest start on `node`: its aligned block free first."""
        free, count = self.free_at[node], self.gpus[node]
        self.first_free[node], self.all_free[node] = min(free), max(free)
        for (gpus, size), blocks in self.blocks.items():
            if gpus == count:
                self.best_of[node, size] = min((max(free[g] for g in b), b) for b in blocks)


def _blocks(count: int, size: int) -> list[tuple[int, ...]]:
    """The aligned blocks of `size` GPUs (all of them, on a smaller node) of `count`."""
    width = min(size, count)
    return [tuple(range(b, b + width)) for b in range(0, count - width + 1, width)]


def draw_jobs(free: Sequence[NodeSpec], steps: int, step: float, seed: int) -> tuple[DrawnJob, ...]:
    """The jobs the nodes `free` run over a range of `steps` steps, in order of start."""
    if not free:
        return ()
    rng = random.Random(seed * 1_000_003 + _SEED_SALT)
    schedule = _Schedule(free, step, rng)
    drawn: list[DrawnJob] = []
    while schedule.earliest() < steps:
        size, whole = _size(rng)
        nodes, gpus = schedule.place(whole, size)
        begin = schedule.start(nodes, gpus)
        end = min(steps, begin + _length_steps(rng, step))
        schedule.hold(nodes, gpus, end)
        if begin < steps:
            drawn.append(_job(rng, nodes, gpus, begin, end))
    return tuple(sorted(drawn, key=lambda job: (job.begin, job.nodes, job.gpus)))


def _size(rng: random.Random) -> tuple[int, int]:
    size, whole, _ = rng.choices(SIZES, weights=_SIZE_WEIGHTS)[0]
    return size, whole


def _length_steps(rng: random.Random, step: float) -> int:
    seconds = min(LENGTH_MAX_S, rng.lognormvariate(math.log(LENGTH_MEDIAN_S), LENGTH_SIGMA))
    return max(1, round(seconds / step))


def _job(
    rng: random.Random, nodes: tuple[int, ...], gpus: tuple[int, ...], begin: int, end: int
) -> DrawnJob:
    low, high = MEMORY_RANGE
    memory = low + (high - low) * rng.betavariate(*MEMORY_BETA)
    infiniband = len(nodes) > 1 and rng.random() >= NO_IB_SHARE
    load = JobLoad(rng.betavariate(*DUTY_BETA), memory, infiniband)
    busy = 1 if len(gpus) > 1 and rng.random() < ONE_USED_SHARE else len(gpus)
    user, account = rng.choices(USERS, weights=_USER_WEIGHTS)[0]
    return DrawnJob(nodes, gpus, begin, end, load, busy, user, account)


def drawn_episodes(
    free: Sequence[NodeSpec],
    first: float,
    steps: int,
    step: float,
    seed: int,
    first_id: int,
) -> tuple[JobEpisode, ...]:
    """The drawn jobs of `free` over a range starting at Unix time `first`, as episodes
    numbered from `first_id` in order of start (as Slurm numbers jobs as they come)."""
    by_index = {spec.index: spec for spec in free}
    return tuple(
        JobEpisode(
            kind=DRAWN,
            job_id=str(first_id + number),
            user=job.user,
            account=job.account,
            nodes=tuple(by_index[n].name for n in job.nodes),
            indexes=job.nodes,
            gpus=job.gpus,
            start=first + job.begin * step,
            end=first + job.end * step,
            load=job.load,
            busy_gpus=job.busy_gpus,
            notes=(),
        )
        for number, job in enumerate(draw_jobs(free, steps, step, seed))
    )
