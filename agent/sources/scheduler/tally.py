"""One refresh's jobs and nodes -> the scheduler sample, with what must outlive a refresh.

Kept across refreshes, and bounded: the account and user labels admitted so far (at most
the configured caps, the rest "other"), the (partition, account) pairs with their
GPU-seconds counters (a counter never moves to another label or goes down), each
partition's and each account's wait histogram, and the started GPU jobs already counted
in them (only those squeue still lists, so at most what the controller keeps).

A job's wait is the time from becoming eligible to start (submitted, released, its
dependency met) to starting: what the scheduler and the cluster's size decide, not the
time a job was held or waited on another job.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from nvwatch.agent.sources.scheduler.classes import (
    NODE_CLASSES,
    PENDING_CLASSES,
    node_class,
    pending_class,
)
from nvwatch.agent.sources.scheduler.model import (
    GPU_STATES,
    AccountShare,
    AccountWait,
    DemandSample,
    PartitionSample,
    SchedulerSample,
    UserDemand,
    WaitCounts,
)
from nvwatch.agent.sources.scheduler.slurm_json import Job, Node

# Upper bounds of the wait histogram: from a scheduling cycle to a week in the queue.
WAIT_BUCKETS_SECONDS = (
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    1800.0,
    3600.0,
    7200.0,
    14400.0,
    28800.0,
    86400.0,
    172800.0,
    604800.0,
)
OTHER = "other"  # the label of the accounts (and users) beyond the cap
NO_ACCOUNT = "none"  # a job without an account (a cluster without accounting)
# classes of a pending job that is not waiting for the scheduler (held, or on another job)
_NOT_WAITING = frozenset({"held", "dependency"})


class CappedLabels:
    """Label values admitted in order of first appearance, up to `limit`; any later value
    is OTHER. Kept for the process's life, so a series never changes label."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._admitted: dict[str, None] = {}

    def admit(self, values: Iterable[str]) -> None:
        for value in values:
            if len(self._admitted) >= self._limit:
                return
            self._admitted.setdefault(value)

    def label(self, value: str) -> str:
        return value if value in self._admitted else OTHER


@dataclass
class _Histogram:
    counts: list[int]  # per bucket, not cumulative; the last is +Inf
    sum_seconds: float = 0.0

    def observe(self, seconds: float) -> None:
        index = next(
            (i for i, bound in enumerate(WAIT_BUCKETS_SECONDS) if seconds <= bound),
            len(WAIT_BUCKETS_SECONDS),
        )
        self.counts[index] += 1
        self.sum_seconds += seconds

    def frozen(self) -> WaitCounts:
        cumulative, total = [], 0
        for count in self.counts:
            total += count
            cumulative.append(total)
        return WaitCounts((*WAIT_BUCKETS_SECONDS, math.inf), tuple(cumulative), self.sum_seconds)


def _new_histogram() -> _Histogram:
    return _Histogram([0] * (len(WAIT_BUCKETS_SECONDS) + 1))


@dataclass
class _Refresh:
    """What one refresh adds up before it becomes the sample."""

    gpus: dict[str, dict[str, int]] = field(default_factory=dict)
    unavailable: dict[str, dict[str, int]] = field(default_factory=dict)
    pending: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    user_pending: dict[tuple[str, str], int] = field(default_factory=dict)
    oldest: dict[str, float] = field(default_factory=dict)


class _JobStarts:
    """A set of (job id, start time) in one flat array of 8 bytes each. A set of tuples
    would hold the ints and floats of the refresh's job records, spread over the memory
    the parse used, and keep all of it from going back to the system (with 100,000 jobs
    some 60 MB of a freed refresh stayed resident); the array is one block of its own.
    Job ids are 32-bit in Slurm and start times whole Unix seconds below 2**32."""

    def __init__(self, keys: Iterable[tuple[int, float]]) -> None:
        self._keys = array("Q", sorted({_packed(key) for key in keys}))

    def __contains__(self, key: tuple[int, float]) -> bool:
        packed = _packed(key)
        index = bisect_left(self._keys, packed)
        return index < len(self._keys) and self._keys[index] == packed


def _packed(key: tuple[int, float]) -> int:
    job_id, start = key
    return (job_id & 0xFFFFFFFF) << 32 | (int(start) & 0xFFFFFFFF)


class Tally:
    """The scheduler source's state; `update` turns one refresh into a sample."""

    def __init__(self, max_accounts: int, max_users: int = 0) -> None:
        self.accounts = CappedLabels(max_accounts)
        self.users = CappedLabels(max_users) if max_users > 0 else None
        self._gpu_seconds: dict[tuple[str, str], float] = {}
        self._user_keys: dict[tuple[str, str], None] = {}
        self._waits: dict[str, _Histogram] = {}
        # the same waits by account label: bounded by the cap, as the labels are
        self._account_waits: dict[str, _Histogram] = {}
        self._counted = _JobStarts(())
        self._last: float | None = None

    def update(
        self,
        jobs: Sequence[Job],
        nodes: Sequence[Node],
        shares: Sequence[AccountShare] | None,
        now: float,
    ) -> SchedulerSample:
        """The sample of the cluster at `now` (Unix time, when squeue answered)."""
        gpu_jobs = [job for job in jobs if job.gpus > 0]
        # configured accounts first: with accounting they take the named labels
        self.accounts.admit(sorted(s.account for s in shares or ()))
        self.accounts.admit(sorted({_account(job) for job in gpu_jobs}))
        if self.users is not None:
            self.users.admit(sorted({job.user for job in gpu_jobs if job.pending}))
        refresh = _Refresh()
        _add_nodes(refresh, nodes)
        self._add_pending(refresh, [job for job in gpu_jobs if job.pending], now)
        started = [job for job in gpu_jobs if job.start_time is not None]
        self._accrue(started, now)
        self._observe_waits(started)
        self._last = now
        return self._sample(refresh, shares, now)

    def _add_pending(self, refresh: _Refresh, pending: Sequence[Job], now: float) -> None:
        for job in pending:
            cls = pending_class(job.reason)
            account = self.accounts.label(_account(job))
            for partition in job.partitions:
                by_class = refresh.pending.setdefault((partition, account), {})
                by_class[cls] = by_class.get(cls, 0) + job.gpus
                self._gpu_seconds.setdefault((partition, account), 0.0)
                if self.users is not None:
                    key = (partition, self.users.label(job.user))
                    self._user_keys.setdefault(key)
                    refresh.user_pending[key] = refresh.user_pending.get(key, 0) + job.gpus
                eligible = job.eligible_time
                if cls not in _NOT_WAITING and eligible is not None and eligible <= now:
                    refresh.oldest[partition] = max(
                        refresh.oldest.get(partition, 0.0), now - eligible
                    )

    def _accrue(self, started: Sequence[Job], now: float) -> None:
        """GPU-seconds of each running (or since ended) job between the last refresh and
        this one; nothing on the first refresh, which has no last."""
        last = self._last
        for job in started:
            key = (_partition(job), self.accounts.label(_account(job)))
            held = self._gpu_seconds.setdefault(key, 0.0)
            if last is None or job.start_time is None:
                continue
            until = min(now, job.end_time) if job.end_time is not None else now
            seconds = until - max(last, job.start_time)
            if seconds > 0:
                self._gpu_seconds[key] = held + job.gpus * seconds

    def _observe_waits(self, started: Sequence[Job]) -> None:
        """The wait of each GPU job that started since the last refresh, once, in its
        partition's histogram and its account's. The first refresh only notes what has
        started: it cannot tell when."""
        listed = _JobStarts((job.job_id, job.start_time or 0.0) for job in started)
        first = self._last is None
        for job in started:
            key = (job.job_id, job.start_time or 0.0)
            by_partition = self._waits.setdefault(_partition(job), _new_histogram())
            account = self.accounts.label(_account(job))
            by_account = self._account_waits.setdefault(account, _new_histogram())
            if first or key in self._counted:
                continue
            eligible, start = job.eligible_time, job.start_time
            if eligible is not None and start is not None and start >= eligible:
                by_partition.observe(start - eligible)
                by_account.observe(start - eligible)
        # a requeued job starts again with a new start time, and counts again
        self._counted = listed

    def _sample(
        self, refresh: _Refresh, shares: Sequence[AccountShare] | None, now: float
    ) -> SchedulerSample:
        names = sorted(set(refresh.gpus) | set(self._waits) | {p for p, _ in self._gpu_seconds})
        partitions = tuple(
            PartitionSample(
                partition=name,
                gpus={s: refresh.gpus.get(name, {}).get(s, 0) for s in GPU_STATES},
                nodes_unavailable={
                    c: refresh.unavailable.get(name, {}).get(c, 0) for c in NODE_CLASSES
                },
                oldest_pending_seconds=refresh.oldest.get(name, 0.0),
                wait=self._waits.setdefault(name, _new_histogram()).frozen(),
            )
            for name in names
        )
        demand = tuple(
            DemandSample(
                partition=partition,
                account=account,
                pending_gpus={
                    c: refresh.pending.get((partition, account), {}).get(c, 0)
                    for c in PENDING_CLASSES
                },
                allocated_gpu_seconds=seconds,
            )
            for (partition, account), seconds in sorted(self._gpu_seconds.items())
        )
        users = tuple(
            UserDemand(partition, user, refresh.user_pending.get((partition, user), 0))
            for partition, user in sorted(self._user_keys)
        )
        return SchedulerSample(
            partitions, demand, users, self._account_wait_sample(), self._shares(shares), now
        )

    def _account_wait_sample(self) -> tuple[AccountWait, ...]:
        """Every account with series of demand has its histogram, zeros included, so its
        series exist before its first job starts."""
        for _, account in self._gpu_seconds:
            self._account_waits.setdefault(account, _new_histogram())
        return tuple(
            AccountWait(account, histogram.frozen())
            for account, histogram in sorted(self._account_waits.items())
        )

    def _shares(self, shares: Sequence[AccountShare] | None) -> tuple[AccountShare, ...] | None:
        """Fair share of the accounts with a label of their own; one beyond the cap has no
        series (a ratio cannot be summed into "other")."""
        if shares is None:
            return None
        return tuple(s for s in shares if self.accounts.label(s.account) == s.account)


def _add_nodes(refresh: _Refresh, nodes: Sequence[Node]) -> None:
    """Each node's GPUs in each of its partitions: allocated, and the rest idle, or
    unavailable when the node is drained, down or reserved."""
    for node in nodes:
        allocated = min(node.gpus_allocated, node.gpus)
        cls = node_class(node.states, node.reason)
        for partition in node.partitions:
            gpus = refresh.gpus.setdefault(partition, {})
            gpus["allocated"] = gpus.get("allocated", 0) + allocated
            rest = "unavailable" if cls is not None else "idle"
            gpus[rest] = gpus.get(rest, 0) + node.gpus - allocated
            if cls is not None and node.gpus > 0:
                unavailable = refresh.unavailable.setdefault(partition, {})
                unavailable[cls] = unavailable.get(cls, 0) + 1


def _account(job: Job) -> str:
    return job.account or NO_ACCOUNT


def _partition(job: Job) -> str:
    """A started job runs in one partition."""
    return job.partitions[0] if job.partitions else ""
