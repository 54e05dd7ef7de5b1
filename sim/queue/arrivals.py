"""Seeded GPU job arrivals for a simulated Slurm queue (model.py).

Each partition gets a Poisson stream of jobs whose offered load (GPUs x run time per
second) is `load` times the partition's GPUs; each job belongs to an account drawn by the
accounts' weights (what they submit, not their fair-share shares: an account that
submits more than its share is how a fairness question starts). `Surge`s multiply the
rate on one partition, for one account or all, over a window: a backlog week, a burst.
A job asks for 1, 2, 4 or all GPUs of a node, now and then two whole nodes; its run
time is log-normal (most jobs hours, a few days), and the time limit its user gives is
longer. A few jobs are held and released later, a few depend on their account's
previous job, a few ask for a later start (`--begin`).

Arrivals are drawn lazily (`until(t)`), so a fleet running for days draws as it goes;
the same seed gives the same jobs whether drawn at once or bit by bit. Times are whole
seconds, as Slurm keeps them (from a whole-second start, every event of the queue is).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from nvwatch.sim.queue.jobs import JobRequest

HOUR_S = 3600.0
# (share of jobs, whole GPUs per node as a share of the node's GPUs, nodes)
SIZES = ((0.35, 1 / 8, 1), (0.2, 1 / 4, 1), (0.2, 1 / 2, 1), (0.2, 1.0, 1), (0.05, 1.0, 2))
MEAN_RUN_S = 4 * HOUR_S
RUN_SIGMA = 1.0  # of the run time's logarithm: a tenth of the jobs run over ~14 h
MIN_RUN_S = 300.0
MAX_RUN_S = 3 * 24 * HOUR_S
HELD_SHARE = 0.03
DEPENDENT_SHARE = 0.05
BEGIN_SHARE = 0.02
USERS_PER_ACCOUNT = 3


@dataclass(frozen=True)
class Surge:
    """Arrivals on `partition` (of `account` only, or of every account) times `factor`
    from `start` to `end`."""

    partition: str
    start: float
    end: float
    factor: float
    account: str | None = None

    def applies(self, partition: str, account: str, t: float) -> bool:
        return (
            partition == self.partition
            and (self.account is None or self.account == account)
            and self.start <= t < self.end
        )


@dataclass(frozen=True)
class Demand:
    """Who submits how much: account -> weight (shares of the arrivals), the offered load
    as a share of each partition's GPUs (`loads` for a partition of its own), surges."""

    weights: Mapping[str, float]
    load: float = 0.75
    surges: tuple[Surge, ...] = ()
    loads: Mapping[str, float] = field(default_factory=dict)  # partition -> its own load

    def load_of(self, partition: str) -> float:
        return self.loads.get(partition, self.load)


@dataclass(frozen=True)
class _Draft:
    """A drawn arrival before it has a job id."""

    submit: float
    partition: str
    account: str
    gpus_per_node: int
    nodes: int
    run_s: float
    limit_s: float
    held_s: float | None
    begin_s: float | None
    dependent: bool


@dataclass(frozen=True)
class PartitionShape:
    """What arrivals need to know of a partition: its GPUs, nodes and node size."""

    name: str
    gpus: int
    nodes: int
    node_gpus: int  # GPUs of its largest node: what "a whole node" asks for


def mean_job_gpus(sizes: Sequence[tuple[float, float, int]], node_gpus: int) -> float:
    total = sum(share for share, _, _ in sizes)
    gpus = sum(share * max(1, round(part * node_gpus)) * n for share, part, n in sizes)
    return gpus / total


class _Stream:
    """One partition's arrivals: Poisson, thinned to the surges' rates."""

    def __init__(self, demand: Demand, shape: PartitionShape, seed: int, start: float) -> None:
        self.demand = demand
        self.partition = shape.name
        self.node_gpus = shape.node_gpus
        self.random = random.Random(f"{seed}:{shape.name}")
        # a job asks for at most a quarter of its partition: on a partition of a node or
        # two, whole-node jobs would keep its GPUs idle half the time while they wait
        # for a node to drain
        self.sizes = [
            size
            for size in SIZES
            if max(1, round(size[1] * shape.node_gpus)) * size[2] <= shape.gpus / 4
        ] or [SIZES[0]]
        mean = mean_job_gpus(self.sizes, shape.node_gpus)
        self.base = demand.load_of(shape.name) * shape.gpus / (mean * MEAN_RUN_S)
        weights = demand.weights
        self.accounts = sorted(weights)
        surges = [s.factor for s in demand.surges if s.partition == shape.name]
        self.peak = self.base * sum(weights.values()) * math.prod(max(1.0, f) for f in surges)
        self.t = start
        self.ahead: _Draft | None = None

    def rates(self, t: float) -> list[float]:
        """Each account's arrival rate at `t` (jobs per second)."""
        out = []
        for account in self.accounts:
            factor = 1.0
            for surge in self.demand.surges:
                if surge.applies(self.partition, account, t):
                    factor *= surge.factor
            out.append(self.base * self.demand.weights[account] * factor)
        return out

    def until(self, end: float) -> list[_Draft]:
        drafts = []
        while True:
            if self.ahead is None:
                self.ahead = self._next()
                if self.ahead is None:
                    break
            if self.ahead.submit > end:
                break
            drafts.append(self.ahead)
            self.ahead = None
        return drafts

    def _next(self) -> _Draft | None:
        if self.peak <= 0:
            return None
        while True:
            self.t += self.random.expovariate(self.peak)
            rates = self.rates(self.t)
            if self.random.random() * self.peak < sum(rates):
                account = self.random.choices(self.accounts, weights=rates)[0]
                return self._draft(account)

    def _draft(self, account: str) -> _Draft:
        draw = self.random
        _, part, nodes = draw.choices(self.sizes, weights=[s[0] for s in self.sizes])[0]
        mu = math.log(MEAN_RUN_S) - RUN_SIGMA**2 / 2
        run = round(min(MAX_RUN_S, max(MIN_RUN_S, draw.lognormvariate(mu, RUN_SIGMA))))
        limit = math.ceil(run * draw.uniform(1.2, 3.0) / HOUR_S) * HOUR_S
        kind = draw.random()
        held = round(draw.uniform(HOUR_S, 24 * HOUR_S)) if kind < HELD_SHARE else None
        dependent = HELD_SHARE <= kind < HELD_SHARE + DEPENDENT_SHARE
        edge = HELD_SHARE + DEPENDENT_SHARE
        in_begin = edge <= kind < edge + BEGIN_SHARE
        begin = round(draw.uniform(HOUR_S, 12 * HOUR_S)) if in_begin else None
        return _Draft(
            submit=float(math.ceil(self.t)),  # Slurm keeps whole seconds
            partition=self.partition,
            account=account,
            gpus_per_node=max(1, round(part * self.node_gpus)),
            nodes=nodes,
            run_s=run,
            limit_s=limit,
            held_s=held,
            begin_s=begin,
            dependent=dependent,
        )


class Arrivals:
    """The jobs of `demand` on `partitions`, from `start`, numbered from `first_id` in
    order of submission."""

    def __init__(
        self,
        demand: Demand,
        partitions: Sequence[PartitionShape],
        *,
        seed: int,
        start: float,
        first_id: int = 1,
    ) -> None:
        shapes = sorted(partitions, key=lambda p: p.name)
        self.streams = [_Stream(demand, shape, seed, start) for shape in shapes]
        self.next_id = first_id
        self.last_of: dict[tuple[str, str], int] = {}  # (partition, account) -> job id
        self._users = random.Random(f"{seed}:users")

    def until(self, end: float) -> list[JobRequest]:
        """Every job submitted after the last call, up to `end`, in submission order."""
        drafts = [d for stream in self.streams for d in stream.until(end)]
        drafts.sort(key=lambda d: (d.submit, d.partition))
        return [self._request(d) for d in drafts]

    def _request(self, draft: _Draft) -> JobRequest:
        job_id = self.next_id
        self.next_id += 1
        key = (draft.partition, draft.account)
        after = self.last_of.get(key) if draft.dependent else None
        self.last_of[key] = job_id
        user = f"{draft.account}{self._users.randrange(USERS_PER_ACCOUNT) + 1:02d}"
        return JobRequest(
            job_id=job_id,
            account=draft.account,
            user=user,
            partition=draft.partition,
            gpus_per_node=draft.gpus_per_node,
            nodes=draft.nodes,
            submit=draft.submit,
            run_s=draft.run_s,
            time_limit_s=draft.limit_s,
            hold_until=None if draft.held_s is None else draft.submit + draft.held_s,
            begin=None if draft.begin_s is None else draft.submit + draft.begin_s,
            after=after,
        )
