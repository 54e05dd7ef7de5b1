"""What a simulated Slurm queue shows at one instant: the scheduler source's series.

`QueueState` holds, for one moment of the queue model (model.py), every figure the
`scheduler` source exports: GPUs allocated / idle / unavailable per partition, nodes
unavailable per reason class, GPUs of pending jobs per partition, account and reason
class, the oldest waiting job's age, the cumulative histograms of the queue waits of the
jobs that started (per partition and per account), fair share per account (with
accounting only) and the GPU-seconds each account's running jobs have held. Plain data:
the history writes it as series, the tests check it against the jobs and nodes it came
from.

Fair share is Slurm's classic formula (priority/multifactor without the fair-tree
algorithm): an account's usage decays with a half-life (PriorityDecayHalfLife, 7 days
by default), `usage_effective` is its share of all decayed usage, `shares_norm` its share
of the configured shares, and the factor is 2^(-usage_effective / shares_norm): 1 for an
account that used nothing, 0.5 for one that used exactly its share.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from nvwatch.agent.sources.scheduler.tally import WAIT_BUCKETS_SECONDS

# the wait histogram's upper bounds: the scheduler source's
WAIT_BUCKETS: tuple[float, ...] = WAIT_BUCKETS_SECONDS


@dataclass
class WaitHistogram:
    """Cumulative: `counts[i]` observations at most `bounds[i]`, then the +Inf total."""

    bounds: tuple[float, ...] = WAIT_BUCKETS
    counts: list[int] = field(default_factory=list)
    count: int = 0
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * len(self.bounds)

    def observe(self, seconds: float) -> None:
        for index in range(bisect.bisect_left(self.bounds, seconds), len(self.bounds)):
            self.counts[index] += 1
        self.count += 1
        self.total += seconds

    def copy(self) -> WaitHistogram:
        return WaitHistogram(self.bounds, list(self.counts), self.count, self.total)


@dataclass(frozen=True)
class FairShare:
    """One account's row of `sshare`: NormShares, EffectvUsage, FairShare."""

    account: str
    shares_norm: float
    usage_effective: float
    factor: float


def fair_shares(shares: Mapping[str, int], usage: Mapping[str, float]) -> dict[str, FairShare]:
    """Every account's fair share from its configured shares and decayed usage."""
    total_shares = sum(shares.values())
    total_usage = sum(usage.values())
    rows = {}
    for account, share in shares.items():
        norm = share / total_shares if total_shares else 0.0
        used = usage.get(account, 0.0) / total_usage if total_usage > 0 else 0.0
        factor = 2.0 ** (-used / norm) if norm > 0 else 0.0
        rows[account] = FairShare(account, norm, used, factor)
    return rows


def decayed(usage: float, rate: float, seconds: float, half_life_s: float) -> float:
    """Usage after `seconds` more at `rate` (GPU-seconds per second), the whole decaying
    with `half_life_s`: exact for a rate constant over the span."""
    if seconds <= 0:
        return usage
    keep: float = 2.0 ** (-seconds / half_life_s)
    return usage * keep + rate * half_life_s / math.log(2) * (1.0 - keep)


@dataclass(frozen=True)
class QueueState:
    """The queue at `time`, as the scheduler source exports it. Keys are label values in
    the contract's order. Every partition has its three GPU states, every unavailable
    reason and its oldest wait (0 when none waits); a (partition, account) pair that has
    had a job has every pending reason and its GPU-seconds from then on. Series go to 0
    rather than vanish: a vanished series would read, in a store without staleness
    markers (a backfilled history), as its last value for a whole lookback."""

    time: float
    gpus: dict[tuple[str, str], int]  # (partition, state) -> GPUs
    nodes_unavailable: dict[tuple[str, str], int]  # (partition, reason) -> nodes
    pending_gpus: dict[tuple[str, str, str], int]  # (partition, account, reason) -> GPUs
    oldest_pending_s: dict[str, float]  # partition -> age of its oldest waiting job
    waits: dict[str, WaitHistogram]  # partition -> waits of the jobs started so far
    # account -> the same waits, for every account that has had a job
    account_waits: dict[str, WaitHistogram]
    fairshare: dict[str, FairShare] | None  # None: no accounting (no slurmdbd)
    allocated_gpu_seconds: dict[tuple[str, str], float]  # (partition, account)

    def partition_gpus(self, partition: str) -> int:
        return sum(n for (p, _), n in self.gpus.items() if p == partition)

    def pending_in(self, partition: str, reasons: Sequence[str]) -> int:
        return sum(
            n for (p, _, r), n in self.pending_gpus.items() if p == partition and r in reasons
        )
