"""The ground truth of a history's scheduler series: demand, waits and fair share.

Taken from the queue's state at each sample written (the same figures the series hold),
each sample standing for the step before it, over the window (start, end], as the rest
of the truth (truth.py). Per partition:

- `waiting_gpus`: GPUs of pending jobs waiting for GPUs (reasons resources and priority;
  no series is 0), and `unmet_gpus`: those beyond the partition's idle GPUs (how many
  more it would need to start them all, the mixin's recorded unmet demand): each one's
  peak, its median over every sample (`typical`) and its mean;
- `demand_above_capacity_share`: the share of samples with unmet GPUs (the waiting GPUs
  outnumber the idle ones: demand = allocated + waiting above capacity = allocated +
  idle), and its hours;
- `idle_while_waiting_hours` and `idle_gpu_hours_while_waiting`: samples with idle GPUs
  while a job has waited (resources, priority or limits) for IDLE_WAIT_S or more;
- `wait_seconds`: percentiles of the queue waits of the jobs started in the window, as
  PromQL's `histogram_quantile` reads them off the increase of the wait histogram's
  buckets; `wait_seconds_exact`: the same from the jobs' own waits (the model's);
- `allocated_gpu_hours`: from the allocated GPUs written.
Per account: GPU-hours (the increase of nvwatch_scheduler_allocated_gpu_seconds_total,
summed over partitions) and their share of all, against the share of its shares
(`shares_norm`), and fair share at the end; `wait_seconds` off the increase of the
account's wait histogram (nvwatch_scheduler_account_wait_seconds) as for the partitions,
and `wait_seconds_exact` from the model's jobs. Per demand episode, what it did in its
window.
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nvwatch.common.durations import parse_duration
from nvwatch.mixin.config import MixinConfig
from nvwatch.sim.history.plan import HistoryPlan
from nvwatch.sim.history.truth_bmc import quantile
from nvwatch.sim.queue.jobs import DRAINED, LIMITS, PRIORITY, RESOURCES, WAITING, Job
from nvwatch.sim.queue.state import QueueState, WaitHistogram

UNMET = (RESOURCES, PRIORITY)
# a job waiting this long beside idle GPUs is "idle while waiting": the mixin's own
# threshold (scheduler_wait_while_idle), which the report reads from its config
IDLE_WAIT_S = parse_duration(MixinConfig().scheduler_wait_while_idle, "scheduler_wait_while_idle")
QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
HOUR_S = 3600.0


@dataclass
class PartitionTally:
    gpus: int = 0
    waiting: array[float] = field(default_factory=lambda: array("d"))
    unmet: array[float] = field(default_factory=lambda: array("d"))
    above_s: float = 0.0
    idle_waiting_s: float = 0.0
    idle_gpu_s_waiting: float = 0.0
    allocated_gpu_s: float = 0.0
    limits_gpu_s: float = 0.0  # GPUs pending for limits, integrated


class QueueTruth:
    """Observes the queue's state at every sample of the range, and the jobs it starts."""

    def __init__(self, plan: HistoryPlan, episodes: Sequence[Any]) -> None:
        self.plan = plan
        self.episodes = list(episodes)
        self.partitions: dict[str, PartitionTally] = defaultdict(PartitionTally)
        self.windows: list[PartitionTally] = [PartitionTally() for _ in self.episodes]
        self.outside: list[PartitionTally] = [PartitionTally() for _ in self.episodes]
        self.unavailable_s = [0.0 for _ in self.episodes]
        self.first: QueueState | None = None
        self.last: QueueState | None = None
        self.waits: dict[tuple[str, str], list[float]] = defaultdict(list)

    def started(self, job: Job) -> None:
        """A job the queue started (hooked to QueueModel.on_start)."""
        assert job.start is not None
        if self.plan.start < job.start <= self.plan.end:
            self.waits[job.request.partition, job.request.account].append(job.wait_s or 0.0)

    def observe(self, t: float, state: QueueState) -> None:
        if t <= self.plan.start:
            self.first = state  # the first sample stands for no step
            return
        self.last = state
        step = self.plan.step
        for partition in sorted({p for p, _ in state.gpus}):
            tally = self.partitions[partition]
            tally.gpus = state.partition_gpus(partition)
            self._tally(tally, state, partition, step)
        for index, episode in enumerate(self.episodes):
            if episode.partition is None:
                continue
            inside = episode.start < t <= episode.end
            target = self.windows[index] if inside else self.outside[index]
            self._tally(target, state, episode.partition, step)
            if episode.kind == "drained" and state.nodes_unavailable.get(
                (episode.partition, DRAINED)
            ):
                self.unavailable_s[index] += step

    @staticmethod
    def _tally(tally: PartitionTally, state: QueueState, partition: str, step: float) -> None:
        waiting_for_gpus = state.pending_in(partition, UNMET)
        idle = state.gpus[partition, "idle"]
        unmet = max(waiting_for_gpus - idle, 0)
        tally.waiting.append(waiting_for_gpus)
        tally.unmet.append(unmet)
        tally.allocated_gpu_s += state.gpus[partition, "allocated"] * step
        tally.limits_gpu_s += state.pending_in(partition, (LIMITS,)) * step
        if unmet > 0:
            tally.above_s += step
        waiting = state.pending_in(partition, WAITING)
        if idle and waiting and state.oldest_pending_s.get(partition, 0.0) >= IDLE_WAIT_S:
            tally.idle_waiting_s += step
            tally.idle_gpu_s_waiting += idle * step

    def to_json(self, instance: str, cluster: str) -> dict[str, Any]:
        first, last = self.first, self.last
        assert first is not None and last is not None
        return {
            "instance": instance,
            "job": "nvwatch",
            "cluster": cluster,
            "idle_wait_seconds": IDLE_WAIT_S,
            "partitions": [self._partition_json(p, first, last) for p in sorted(self.partitions)],
            "accounts": self._accounts_json(first, last),
            "episodes": [self._episode_json(i, first, last) for i in range(len(self.episodes))],
        }

    def _partition_json(self, name: str, first: QueueState, last: QueueState) -> dict[str, Any]:
        tally = self.partitions[name]
        waits = sorted(w for (p, _), ws in self.waits.items() if p == name for w in ws)
        return {
            "partition": name,
            "gpus": tally.gpus,
            **_demand_json(tally, len(tally.unmet) * self.plan.step),
            "allocated_gpu_hours": tally.allocated_gpu_s / HOUR_S,
            "jobs_started": last.waits[name].count - first.waits[name].count,
            "wait_seconds": _increase_quantiles(first.waits[name], last.waits[name]),
            "wait_seconds_exact": _percentiles(waits),
        }

    def _accounts_json(self, first: QueueState, last: QueueState) -> list[dict[str, Any]]:
        used: dict[str, float] = defaultdict(float)
        for (partition, account), seconds in last.allocated_gpu_seconds.items():
            used[account] += seconds - first.allocated_gpu_seconds.get((partition, account), 0.0)
        total = sum(used.values())
        rows = []
        for account in sorted(used):
            waits = sorted(w for (_, a), ws in self.waits.items() if a == account for w in ws)
            share = last.fairshare[account] if last.fairshare is not None else None
            before = first.account_waits.get(account, WaitHistogram())
            after = last.account_waits[account]
            rows.append(
                {
                    "account": account,
                    "gpu_hours": used[account] / HOUR_S,
                    "gpu_hours_share": used[account] / total if total else 0.0,
                    "shares_norm": share.shares_norm if share else None,
                    "usage_effective_end": share.usage_effective if share else None,
                    "factor_end": share.factor if share else None,
                    "jobs_started": len(waits),
                    "wait_seconds": _increase_quantiles(before, after),
                    "wait_seconds_exact": _percentiles(waits),
                }
            )
        return rows

    def _episode_json(self, index: int, first: QueueState, last: QueueState) -> dict[str, Any]:
        episode = self.episodes[index]
        result = {k: v for k, v in vars(episode).items() if v is not None}
        inside, outside = self.windows[index], self.outside[index]
        measured: dict[str, Any] = {}
        if episode.kind == "backlog":
            measured = {
                **_demand_json(inside, episode.end - episode.start),
                "outside": _demand_json(outside, len(outside.unmet) * self.plan.step),
            }
        elif episode.kind == "over-share":
            accounts = {row["account"]: row for row in self._accounts_json(first, last)}
            row = accounts[episode.account]
            measured = {k: row[k] for k in ("gpu_hours", "gpu_hours_share", "shares_norm")}
        elif episode.kind == "drained":
            # samples showing it drained, over the whole range: from its start to its end
            measured = {"drained_seconds": self.unavailable_s[index]}
        elif episode.kind == "limits":
            measured = {
                "idle_while_waiting_hours": inside.idle_waiting_s / HOUR_S,
                "idle_gpu_hours_while_waiting": inside.idle_gpu_s_waiting / HOUR_S,
                "limits_pending_gpu_hours": inside.limits_gpu_s / HOUR_S,
            }
        result["measured"] = measured
        return result


def _demand_json(tally: PartitionTally, span_s: float) -> dict[str, Any]:
    return {
        **_spread("waiting_gpus", tally.waiting),
        **_spread("unmet_gpus", tally.unmet),
        "demand_above_capacity_hours": tally.above_s / HOUR_S,
        "demand_above_capacity_share": tally.above_s / span_s if span_s > 0 else 0.0,
        "idle_while_waiting_hours": tally.idle_waiting_s / HOUR_S,
        "idle_gpu_hours_while_waiting": tally.idle_gpu_s_waiting / HOUR_S,
    }


def _spread(name: str, values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        f"{name}_peak": ordered[-1] if ordered else 0.0,
        f"{name}_typical": quantile(0.5, ordered) or 0.0,
        f"{name}_mean": sum(ordered) / len(ordered) if ordered else 0.0,
    }


def _percentiles(ordered: Sequence[float]) -> dict[str, float | None]:
    return {key: quantile(q, ordered) for key, q in QUANTILES}


def _increase_quantiles(before: WaitHistogram, after: WaitHistogram) -> dict[str, float | None]:
    """`histogram_quantile` over the histogram's increase from `before` to `after`."""
    buckets = [b - a for a, b in zip(before.counts, after.counts, strict=True)]
    started = after.count - before.count
    return {key: histogram_quantile(q, after.bounds, [*buckets, started]) for key, q in QUANTILES}


def histogram_quantile(
    q: float, bounds: Sequence[float], cumulative: Sequence[int]
) -> float | None:
    """PromQL's histogram_quantile over cumulative bucket counts (the last is +Inf):
    linear within the bucket the rank falls in, from 0 below the first; the highest
    finite bound when it falls in +Inf. None without observations."""
    total = cumulative[-1]
    if total == 0:
        return None
    rank = q * total
    index = next(i for i, count in enumerate(cumulative) if count >= rank)
    count = cumulative[index]
    if index == len(bounds):
        return bounds[-1]
    below = cumulative[index - 1] if index else 0
    lower = bounds[index - 1] if index else 0.0
    inside = count - below
    if inside == 0:
        return lower
    return lower + (bounds[index] - lower) * (rank - below) / inside
