"""The synthetic history's Slurm queue: the scheduler series of the cluster's controller
agent, every value generated here from simple rules (tests/report/synthetic.py's style).

Partitions and their GPUs: `train` 16, `big` 8, `small` 4. Episodes:

- `train` is short of GPUs from day 2 to day 9: every GPU allocated while 8 GPUs wait
  for resources and 16 more behind them on priority (24 unmet); otherwise 10 of its 16
  are allocated and nothing waits;
- `big` has 4 GPUs idle from day 14 to day 17 while a job asking for 8 on one node waits
  for resources (fragmentation), eligible since day 14; otherwise 4 of 8 allocated;
- `small` runs 2 of its 4 GPUs all along: right-sized;
- the source moves hosts: `login1`'s agent reads the same Slurm beside the controller's
  on day 9 (its counters start at 0 there), so every figure is reported twice that day;
- the controller's agent restarts at day 12: its counters start again from 0;
- no accounting (no slurmdbd): no fair-share series.

GPU jobs start in `train` at 03:00, 09:00, 15:00 and 21:00 each day, having waited 20 s,
or 90 minutes while the partition is short of GPUs; `physics` holds 3/4 of `train`'s
allocated GPUs and all of `small`'s, `chemistry` the rest of `train`'s and all of `big`'s;
`physics` waits in `train`, `chemistry` in `big`.

The agents' samples are taken half an interval after TIMES, as the BMC job's: none sits
on a report step's edge, and with Prometheus' 5-minute lookback the report's one-minute
subqueries see each sample in its own step only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from nvwatch.agent.sources.scheduler.tally import WAIT_BUCKETS_SECONDS
from tests.report.synthetic import DAY, HOUR, INTERVAL, START, TIMES, Array, History, during

OFFSET = INTERVAL / 2
# the samples inside the report's window (START, END]: the last one falls after END
IN_WINDOW = slice(0, -1)
CONTROLLER, MOVED_TO = "slurmctl:9477", "login1:9477"
SHORT = during(2, 9)
FRAGMENTED = during(14, 17)
BOTH_AGENTS = during(9, 10)
RESTART_DAY = 12.0
FAST_WAIT, SLOW_WAIT = 20.0, 5400.0
START_HOURS = (3, 9, 15, 21)


@dataclass(frozen=True)
class Partition:
    gpus: int
    allocated: Array
    resources: Array  # GPUs pending for resources
    priority: Array  # GPUs pending behind them
    oldest: Array  # seconds the longest-waiting eligible GPU job has waited

    @property
    def idle(self) -> Array:
        return self.gpus - self.allocated


@dataclass
class Queue:
    partitions: dict[str, Partition] = field(default_factory=dict)
    # GPUs each (partition, account) holds, per sample
    held: dict[tuple[str, str], Array] = field(default_factory=dict)
    # (sample index, wait) of each GPU job started in `train`
    starts: list[tuple[int, float]] = field(default_factory=list)


def build_queue() -> Queue:
    queue = Queue()
    none = np.zeros(TIMES.size)
    short = SHORT.astype(float)
    queue.partitions["train"] = Partition(
        16, np.where(SHORT, 16.0, 10.0), 8 * short, 16 * short, _age(SHORT)
    )
    fragmented = FRAGMENTED.astype(float)
    queue.partitions["big"] = Partition(8, 4.0 + none, 8 * fragmented, none, _age(FRAGMENTED))
    queue.partitions["small"] = Partition(4, 2.0 + none, none, none, none)
    train = queue.partitions["train"].allocated
    queue.held = {
        ("train", "physics"): train * 3 / 4,
        ("train", "chemistry"): train / 4,
        ("big", "chemistry"): queue.partitions["big"].allocated,
        ("small", "physics"): queue.partitions["small"].allocated,
    }
    for index, t in enumerate(TIMES):
        if (t - START) % DAY / HOUR in START_HOURS:
            queue.starts.append((index, SLOW_WAIT if SHORT[index] else FAST_WAIT))
    return queue


def _age(window: np.ndarray) -> Array:
    """Seconds since the window began, inside it; 0 outside."""
    first = TIMES[np.argmax(window)] if window.any() else 0.0
    return np.where(window, TIMES - first, 0.0)


def add_scheduler_series(history: History, queue: Queue) -> None:
    controller_since = np.where(
        TIMES >= START + RESTART_DAY * DAY, START + RESTART_DAY * DAY, START
    )
    agents = (
        (CONTROLLER, np.ones(TIMES.size, dtype=bool), controller_since),
        (MOVED_TO, BOTH_AGENTS, np.full(TIMES.size, TIMES[np.argmax(BOTH_AGENTS)])),
    )
    for instance, present, since in agents:
        series = _writer(
            history, {"job": "nvwatch", "cluster": "lab", "instance": instance}, present
        )
        _gauges(queue, series)
        _counters(queue, series, since)


Writer = Callable[[str, str, dict[str, str], Array], None]


def _writer(history: History, labels: dict[str, str], present: np.ndarray) -> Writer:
    """Adds an agent's series: its labels, its samples where it was running."""

    def series(family: str, kind: str, extra: dict[str, str], values: Array) -> None:
        masked = np.where(present, values, np.nan)
        history.add(family, kind, {**labels, **extra}, masked, OFFSET)

    return series


def _gauges(queue: Queue, series: Writer) -> None:
    for name, p in queue.partitions.items():
        part = {"partition": name}
        for state, values in (("allocated", p.allocated), ("idle", p.idle)):
            series("nvwatch_scheduler_gpus", "gauge", {**part, "state": state}, values)
        series("nvwatch_scheduler_gpus", "gauge", {**part, "state": "unavailable"}, 0 * p.idle)
        series("nvwatch_scheduler_oldest_pending_seconds", "gauge", part, p.oldest)
        account = "chemistry" if name == "big" else "physics"
        for reason, values in (("resources", p.resources), ("priority", p.priority)):
            labels = {**part, "account": account, "reason": reason}
            series("nvwatch_scheduler_pending_gpus", "gauge", labels, values)


def _counters(queue: Queue, series: Writer, since: Array) -> None:
    """Each agent counts from its own start (`since`, per sample)."""
    counted = since < TIMES + OFFSET
    for (partition, account), held in queue.held.items():
        seconds = np.cumsum(np.where(counted, held * INTERVAL, 0.0))
        restarted = np.concatenate(([0.0], np.diff(since) > 0)).astype(bool)
        seconds = _restart(seconds, restarted)
        labels = {"partition": partition, "account": account}
        series("nvwatch_scheduler_allocated_gpu_seconds", "counter", labels, seconds)
    waits = np.zeros((len(WAIT_BUCKETS_SECONDS) + 1, TIMES.size))
    for index, wait in queue.starts:
        bucket = next(i for i, b in enumerate(WAIT_BUCKETS_SECONDS) if wait <= b)
        waits[bucket:, index] += 1  # cumulative: every bucket from its own up
    restarted = np.concatenate(([0.0], np.diff(since) > 0)).astype(bool)
    for row, bound in enumerate((*WAIT_BUCKETS_SECONDS, float("inf"))):
        counts = _restart(np.cumsum(np.where(counted, waits[row], 0.0)), restarted)
        le = "+Inf" if bound == float("inf") else repr(bound)
        labels = {"partition": "train", "le": le}
        series("nvwatch_scheduler_wait_seconds_bucket", "gauge", labels, counts)


def _restart(cumulative: Array, restarted: np.ndarray) -> Array:
    """A counter that starts again from 0 where `restarted` is set."""
    out = cumulative.copy()
    base = 0.0
    for index in range(out.size):
        if restarted[index]:
            base = cumulative[index - 1]
        out[index] = cumulative[index] - base
    return out
