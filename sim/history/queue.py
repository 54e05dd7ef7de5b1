"""The Slurm queue of a simulated history, and what its scheduler source would export.

The history's nodes are one Slurm cluster: a partition per node class (`v100`, `a100`,
`h100` ...) over that class's nodes, and the idle node (the plan's episode) alone in a
`-dev` partition nobody submits to, so its GPUs stay idle and no job waits for them.
Four accounts submit GPU jobs (sim/queue/arrivals.py) at a base load of the partitions'
GPUs; the queue runs a few days before the range, so it opens in its steady state.
The demand episodes, in known windows of the range as the hardware's are:

- a backlog week on the first node's partition: arrivals at BACKLOG_FACTOR times the
  base for a week, demand above its GPUs;
- an account over its share all month: `robotics` submits three times the share its
  shares give it;
- a drained node: the node of the ECC error, drained when the error comes and resumed
  days later, its reason as an admin would write it;
- GPUs idle while jobs wait: for a day and a half one account's GPU limit (GrpTRES) is
  cut to a few GPUs while it submits a burst on the second node's partition, whose
  other GPUs stay idle.

Its series are those of the one agent that runs `--sources scheduler`, on the cluster's
controller (scheduler.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from nvwatch.sim.history.plan import DAY_S, WEEK_S, HistoryPlan
from nvwatch.sim.profiles import get_profile
from nvwatch.sim.queue.arrivals import Arrivals, Demand, PartitionShape, Surge
from nvwatch.sim.queue.jobs import DRAINED, Account, Partition, SlurmNode
from nvwatch.sim.queue.model import QueueModel

WARMUP_S = 3 * DAY_S
ACCOUNTS = (
    Account("nlp", 40),
    Account("vision", 30),
    Account("speech", 20),
    Account("robotics", 10),
)
# what each account submits: robotics three times its 10 % share
WEIGHTS = {"nlp": 0.35, "vision": 0.25, "speech": 0.1, "robotics": 0.3}
OVER_SHARE = "robotics"
BASE_LOAD = 0.45
BACKLOG = (0.40, 0.40 + WEEK_S / (30 * DAY_S))  # a week of a 30-day range
BACKLOG_FACTOR = 2.4  # arrivals during the backlog: 1.08 times the partition's GPUs
LIMITED = (0.15, 0.20)  # a day and a half of a 30-day range
LIMITED_ACCOUNT = "vision"
LIMITED_GPUS = 4
LIMITED_FACTOR = 6.0
DRAIN_DAYS = 0.06  # of the range: a bit under two days of a month
ECC_EPISODE = "ecc-dbe"


@dataclass(frozen=True)
class QueueEpisode:
    """A demand episode: `kind` (backlog, over-share, drained, limits), its window in Unix
    seconds and what it is on."""

    kind: str
    start: float
    end: float
    partition: str | None = None
    account: str | None = None
    node: str | None = None
    reason: str | None = None  # a drained node's reason (sinfo's REASON)
    limit_gpus: int | None = None


@dataclass(frozen=True)
class QueuePlan:
    nodes: tuple[SlurmNode, ...]
    partitions: tuple[Partition, ...]
    demand: Demand
    episodes: tuple[QueueEpisode, ...]
    seed: int
    start: float  # the queue's own start, WARMUP_S before the range

    def episode(self, kind: str) -> QueueEpisode:
        return next(e for e in self.episodes if e.kind == kind)


def partition_of(profile: str) -> str:
    """A node class's partition: `dgx-a100` -> `a100`, `dgx1-v100` -> `v100`."""
    return profile.rsplit("-", 1)[-1]


def plan_queue(plan: HistoryPlan) -> QueuePlan:
    """The Slurm cluster of `plan`'s nodes and its demand episodes."""
    idle = next(e.node for e in plan.episodes if e.kind == "idle")
    members: dict[str, list[str]] = {}
    for spec in plan.nodes:
        name = partition_of(spec.profile)
        members.setdefault(f"{name}-dev" if spec.name == idle else name, []).append(spec.name)
    partitions = tuple(Partition(name, tuple(nodes)) for name, nodes in members.items())
    nodes = tuple(SlurmNode(s.name, len(get_profile(s.profile).gpus)) for s in plan.nodes)
    of_node = {node: p.name for p in partitions for node in p.nodes}
    span = plan.end - plan.start
    backlog_on = of_node[plan.nodes[0].name]
    limited_on = of_node[plan.nodes[1].name]
    ecc = next(e for e in plan.episodes if e.kind == ECC_EPISODE)
    # whole seconds, as Slurm's times are
    window = [
        (round(plan.start + a * span), round(plan.start + b * span)) for a, b in (BACKLOG, LIMITED)
    ]
    (backlog_start, backlog_end), (limited_start, limited_end) = window
    episodes = (
        QueueEpisode("backlog", backlog_start, backlog_end, partition=backlog_on),
        QueueEpisode("over-share", plan.start, plan.end, account=OVER_SHARE),
        QueueEpisode(
            "drained",
            round(ecc.start),
            round(ecc.start + DRAIN_DAYS * span),
            partition=of_node[str(ecc.node)],
            node=ecc.node,
            reason=f"ECC DBE on GPU {ecc.gpu}, replacing the board",
        ),
        QueueEpisode(
            "limits",
            limited_start,
            limited_end,
            partition=limited_on,
            account=LIMITED_ACCOUNT,
            limit_gpus=LIMITED_GPUS,
        ),
    )
    surges = (
        Surge(backlog_on, backlog_start, backlog_end, BACKLOG_FACTOR),
        Surge(limited_on, limited_start, limited_end, LIMITED_FACTOR, LIMITED_ACCOUNT),
    )
    dev = {name: 0.0 for name in members if name.endswith("-dev")}
    demand = Demand(WEIGHTS, BASE_LOAD, surges, loads=dev)
    seed = plan.nodes[0].seed
    return QueuePlan(nodes, partitions, demand, episodes, seed, plan.start - WARMUP_S)


def build_queue(queue: QueuePlan, until: float) -> QueueModel:
    """The queue of `queue` with every job submitted up to `until` and the episodes'
    node and limit changes queued; time stands at the queue's start."""
    nodes = [SlurmNode(n.name, n.gpus) for n in queue.nodes]  # fresh: the model changes them
    model = QueueModel(nodes, queue.partitions, ACCOUNTS, start=queue.start)
    gpus = {n.name: n.gpus for n in queue.nodes}
    shapes = [
        PartitionShape(
            p.name, sum(gpus[n] for n in p.nodes), len(p.nodes), max(gpus[n] for n in p.nodes)
        )
        for p in queue.partitions
    ]
    arrivals = Arrivals(queue.demand, shapes, seed=queue.seed, start=queue.start)
    model.submit_all(arrivals.until(until))
    for episode in queue.episodes:
        if episode.kind == "drained" and episode.node is not None:
            model.set_node(episode.start, episode.node, DRAINED, episode.reason or "")
            model.set_node(episode.end, episode.node, None)
        elif episode.kind == "limits" and episode.account is not None:
            model.set_limit(episode.start, episode.account, episode.limit_gpus)
            model.set_limit(episode.end, episode.account, None)
    return model
