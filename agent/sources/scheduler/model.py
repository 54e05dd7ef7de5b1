"""The scheduler source's sample: plain frozen records, one per series' identity.

Each record is what the catalogue's scheduler scopes render (agent/catalogue.py): a
partition's GPUs, unavailable nodes, oldest wait and wait histogram; a partition and
account's pending GPUs and GPU-seconds; an account's wait histogram; an account's fair
share; a user's pending GPUs (only where the site enables per-user series). Every
mapping holds every label value of its class, zeros included, so a series goes to 0
rather than disappearing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

GPU_STATES = ("allocated", "idle", "unavailable")


@dataclass(frozen=True)
class WaitCounts:
    """A histogram of queue waits: cumulative counts per upper bound (the last is +Inf)."""

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]
    sum_seconds: float

    @property
    def series(self) -> Mapping[str, float]:
        """Each bucket by its `le` text (Prometheus' float text: '30.0', '+Inf'), then
        "_count" and "_sum": the order a histogram's samples are written in."""
        series: dict[str, float] = {
            _le(bound): float(count)
            for bound, count in zip(self.bounds, self.cumulative, strict=True)
        }
        series["_count"] = float(self.cumulative[-1]) if self.cumulative else 0.0
        series["_sum"] = self.sum_seconds
        return series


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


@dataclass(frozen=True)
class PartitionSample:
    partition: str
    gpus: Mapping[str, int]  # GPU_STATES -> GPUs of the partition's nodes
    nodes_unavailable: Mapping[str, int]  # classes.NODE_CLASSES -> nodes with GPUs
    # seconds the longest-waiting GPU job eligible to start has waited; 0: none waits
    oldest_pending_seconds: float
    # queue waits of the GPU jobs that started since the source started
    wait: WaitCounts


@dataclass(frozen=True)
class DemandSample:
    """One partition and account (capped: the accounts beyond the cap are "other")."""

    partition: str
    account: str
    pending_gpus: Mapping[str, int]  # classes.PENDING_CLASSES -> GPUs requested
    # GPUs x seconds held by the account's running jobs since the source started
    allocated_gpu_seconds: float


@dataclass(frozen=True)
class AccountWait:
    """One account's queue waits (capped like DemandSample's accounts), observed by the
    same rule as the partitions' so the two histograms hold the same jobs."""

    account: str
    wait: WaitCounts


@dataclass(frozen=True)
class UserDemand:
    partition: str
    user: str  # capped like accounts
    pending_gpus: int


@dataclass(frozen=True)
class AccountShare:
    """One account's fair share as sshare reports it (with accounting only)."""

    account: str
    shares_norm: float
    usage_effective: float
    factor: float | None  # None: Fair Tree prints none for an account without users


@dataclass(frozen=True)
class SchedulerSample:
    partitions: tuple[PartitionSample, ...]
    demand: tuple[DemandSample, ...]
    users: tuple[UserDemand, ...]
    account_waits: tuple[AccountWait, ...]
    # None: the cluster runs no accounting, so no fair-share series (absent, not 0)
    fairshare: tuple[AccountShare, ...] | None
    refreshed_at: float  # Unix time of the refresh the sample comes from
