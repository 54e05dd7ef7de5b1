"""Demand per Slurm account: GPU-hours used against fair share, GPUs waiting, queue waits.

GPU-hours come from nvwatch_scheduler_allocated_gpu_seconds_total (the running
allocations, so they exist without accounting); fair share from
nvwatch_scheduler_fairshare where the cluster runs slurmdbd (its last reading in the
range: shares do not move within a month, usage decays); waits from the per-account wait
histogram where the agents export it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nvwatch.report import counters, units
from nvwatch.report.context import Context
from nvwatch.report.model import Cell, Column, Table

# An account whose share of the GPU-hours is this many times its fair share, or below
# its reciprocal while its jobs waited, is named: a fairness question, not a capacity one.
FAIR_SHARE_FACTOR = 1.5
_Cumulative = dict[float, float]


@dataclass(frozen=True)
class AccountUse:
    name: str
    gpu_hours: float
    gpu_hours_share: float
    shares_norm: float | None  # None: no accounting
    usage_effective: float | None
    factor: float | None
    waiting_gpus: float  # mean GPUs its pending jobs (not held, not dependent) asked for
    waits: _Cumulative | None  # None: no per-account wait histogram

    @property
    def use_to_share(self) -> float | None:
        if not self.shares_norm:
            return None
        return self.gpu_hours_share / self.shares_norm


def account_uses(ctx: Context) -> list[AccountUse]:
    """Every account seen, the most GPU-hours first."""
    cluster = ctx.cfg.cluster_label
    used: dict[tuple[str, str], float] = {}
    for key, seconds in counters.increases(
        ctx.frame("sched_gpu_seconds"), (cluster, "account")
    ).items():
        used[(key[0], key[1])] = seconds / 3600
    shares = _last_fairshare(ctx)
    waiting = {
        (k[0], k[1]): float(np.nanmean(v)) if np.any(~np.isnan(v)) else 0.0
        for k, v in ctx.frame("sched_account_waiting").by((cluster, "account")).items()
    }
    waits = counters.buckets(ctx.frame("sched_account_wait"), (cluster, "account"))
    total = sum(used.values())
    keys = sorted(set(used) | set(waiting) | {(k[0], k[1]) for k in shares})
    rows = [
        AccountUse(
            name=ctx.rack_name(*key),
            gpu_hours=used.get(key, 0.0),
            gpu_hours_share=used.get(key, 0.0) / total if total else 0.0,
            shares_norm=shares.get((*key, "shares_norm")),
            usage_effective=shares.get((*key, "usage_effective")),
            factor=shares.get((*key, "factor")),
            waiting_gpus=waiting.get(key, 0.0),
            waits=waits.get(key) if waits else None,
        )
        for key in keys
    ]
    return sorted(rows, key=lambda a: (-a.gpu_hours, a.name))


def _last_fairshare(ctx: Context) -> dict[tuple[str, str, str], float]:
    """(cluster, account, kind) -> its last reading in the range."""
    found: dict[tuple[str, str, str], float] = {}
    by_kind = ctx.frame("sched_fairshare").by((ctx.cfg.cluster_label, "account", "kind"))
    for key, row in by_kind.items():
        present = row[~np.isnan(row)]
        if present.size:
            found[(key[0], key[1], key[2])] = float(present[-1])
    return found


def account_table(accounts: list[AccountUse]) -> Table:
    rows: list[list[Cell]] = [
        [
            a.name,
            a.gpu_hours,
            a.gpu_hours_share,
            a.shares_norm,
            a.use_to_share,
            a.usage_effective,
            a.factor,
            a.waiting_gpus,
            *counters.wait_cells(a.waits),
        ]
        for a in accounts
    ]
    return Table(
        "accounts",
        "GPU-hours per account against its fair share, and its waiting",
        [
            Column("account", "account"),
            Column("gpu_hours", "GPU-hours", "h"),
            Column("gpu_hours_share", "share of GPU-hours", "ratio"),
            Column("shares_norm", "fair share", "ratio"),
            Column("use_to_share", "use / share", "x"),
            Column("usage_effective_end", "effective usage (end)", "ratio"),
            Column("factor_end", "fair-share factor (end)", "score"),
            Column("waiting_gpus_mean", "GPUs waiting, mean", "GPUs"),
            *counters.wait_columns(),
        ],
        rows,
        note="GPU-hours from the running allocations (nvwatch_scheduler_allocated_gpu_"
        "seconds_total); fair share (Slurm's NormShares), effective usage and the "
        "fair-share factor from sshare where the cluster runs accounting, at the end of "
        "the range. GPUs waiting: GPUs the account's pending jobs not held and not "
        "waiting on another job asked for, summed over the partitions they wait in. "
        "Waits from nvwatch_scheduler_account_wait_seconds where the agent exports it.",
    )


def account_findings(accounts: list[AccountUse]) -> list[str]:
    """The fairness sentence: accounts far above their share, and those far below it
    while their jobs waited; without accounting, who used the most."""
    if not accounts or not any(a.gpu_hours for a in accounts):
        return []
    if all(a.shares_norm is None for a in accounts):
        top = accounts[0]
        return [
            f"Account {top.name} used the most GPU-hours ({units.count(top.gpu_hours)}, "
            f"{units.percent(top.gpu_hours_share)}); the cluster runs no Slurm accounting, so "
            "there are no fair shares to compare them with."
        ]
    over = [a for a in accounts if (a.use_to_share or 0.0) >= FAIR_SHARE_FACTOR]
    under = [
        a
        for a in accounts
        if a.use_to_share is not None
        and a.use_to_share <= 1 / FAIR_SHARE_FACTOR
        and a.waiting_gpus > 0
    ]
    if not over and not under:
        return [
            f"Every account's share of the GPU-hours was within {FAIR_SHARE_FACTOR:g} times "
            "its fair share."
        ]
    said = [
        f"{a.name} used {units.percent(a.gpu_hours_share)} of the GPU-hours on a "
        f"{units.percent(a.shares_norm)} share ({a.use_to_share:.1f} times it)"
        for a in sorted(over, key=lambda a: -(a.use_to_share or 0.0))
    ]
    said += [
        f"{a.name} {units.percent(a.gpu_hours_share)} on {units.percent(a.shares_norm)} "
        "while its jobs waited"
        for a in under
    ]
    return [
        "Fair share: "
        + "; ".join(said)
        + ". Slurm's fair-share factor already lowers an over-served account's priority; "
        "lasting imbalance is a question of shares or limits, not of GPUs."
    ]
