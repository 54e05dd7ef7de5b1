"""The PromQL behind the report's Demand section: the cluster's Slurm queue per partition
and per account.

The scheduler series come from the one agent of a cluster that runs `--sources
scheduler`; two agents reading the same Slurm (the source moving hosts) report the same
figures, so every query takes the larger of the agents' figures, as the mixin's recording
rules do (alerts/recording_scheduler.py), never their sum. Rows are keyed by cluster and
partition (or account).

Demand changes with every job that arrives or starts, far faster than a report's hourly
step, so its figures are read with subqueries at DEMAND_RESOLUTION within each step: the
step's peak, its mean and the share of it with demand above capacity. Unmet demand is the
mixin's: GPUs that jobs waiting for GPUs (Slurm's Resources or Priority) ask for beyond
the partition's idle GPUs. Counters (waits, GPU-seconds) are read as each step's largest
value, and their increases are taken in numpy, resets included (frame.counter_events).
"""

from __future__ import annotations

from collections.abc import Callable

from nvwatch.common.durations import parse_duration, prometheus_duration
from nvwatch.mixin.config import MixinConfig
from nvwatch.mixin.queue_promql import WAITING, per_partition, state, unmet
from nvwatch.report.queries import Query, cluster_matchers
from nvwatch.report.window import Window

# Subquery resolution of the demand figures: a scheduler refresh (30 s by default) or two.
DEMAND_RESOLUTION_S = 60.0
WAIT = "nvwatch_scheduler_wait_seconds_bucket"
ACCOUNT_WAIT = "nvwatch_scheduler_account_wait_seconds_bucket"


def scheduler_queries(cfg: MixinConfig, window: Window, cluster: str | None) -> list[Query]:
    extra = cluster_matchers(cfg, cluster)
    part = f"{cfg.cluster_label}, partition"
    account = f"{cfg.cluster_label}, account"
    step = window.step_text
    sub = f"[{step}:{prometheus_duration(min(window.step, DEMAND_RESOLUTION_S))}]"

    def sel(*matchers: str) -> str:
        return cfg.sel(*matchers, *extra)

    def largest(by: str, fn: str, metric: str, *matchers: str) -> str:
        """Each agent's figure per step, then the larger of the agents'."""
        return f"max by ({by}) ({fn}({metric}{sel(*matchers)}[{step}]))"

    gpus = "nvwatch_scheduler_gpus"
    unmet_now = unmet(cfg, *extra)
    idle = f"max by ({part}) ({gpus}{sel(state('idle'))})"
    idle_while_waiting = _idle_while_waiting(cfg, part, sel, idle)
    return [
        Query("sched_gpus", largest(f"{part}, state", "avg_over_time", gpus)),
        # --- unmet demand: the step's mean and peak, and the share of it above capacity
        Query("sched_unmet", f"avg_over_time(({unmet_now}){sub})"),
        Query("sched_unmet_peak", f"max_over_time(({unmet_now}){sub})"),
        Query("sched_above", f"avg_over_time((({unmet_now}) > bool 0){sub})"),
        # --- idle GPUs while a job has waited past scheduler_wait_while_idle
        Query("sched_idle_waiting", f"avg_over_time((({idle_while_waiting}) or {idle} * 0){sub})"),
        Query(
            "sched_idle_waiting_share",
            f"avg_over_time((({idle_while_waiting}) > bool 0 or {idle} * 0){sub})",
        ),
        # --- per account: GPUs waiting for GPUs (mean of the step), GPU-seconds held
        # (a job pending on several partitions counts in each, as in the series)
        Query(
            "sched_account_waiting",
            f"sum by ({account}) ("
            + per_partition(
                cfg,
                f"{account}, partition",
                f"avg_over_time(nvwatch_scheduler_pending_gpus{sel(WAITING)}[{step}])",
            )
            + ")",
        ),
        Query(
            "sched_gpu_seconds",
            largest(
                f"{part}, account", "max_over_time", "nvwatch_scheduler_allocated_gpu_seconds_total"
            ),
        ),
        Query(
            "sched_fairshare",
            largest(f"{account}, kind", "avg_over_time", "nvwatch_scheduler_fairshare"),
        ),
        # --- queue waits: each bucket's largest count of the step
        Query("sched_wait", largest(f"{part}, le", "max_over_time", WAIT)),
        Query("sched_account_wait", largest(f"{account}, le", "max_over_time", ACCOUNT_WAIT)),
    ]


def _idle_while_waiting(cfg: MixinConfig, part: str, sel: Callable[..., str], idle: str) -> str:
    """The partition's `idle` GPUs where one of its GPU jobs has been eligible to start for
    scheduler_wait_while_idle or more (the alert NvwatchSchedulerJobsWaitingWhileGpusIdle's
    condition without its `for:`); absent otherwise."""
    wait_s = parse_duration(cfg.scheduler_wait_while_idle, "scheduler_wait_while_idle")
    pending = per_partition(cfg, part, f"nvwatch_scheduler_pending_gpus{sel(WAITING)}")
    return (
        f"({idle} > 0)"
        f" and on ({part}) (max by ({part}) "
        f"(nvwatch_scheduler_oldest_pending_seconds{sel()}) >= {wait_s:g})"
        f" and on ({part}) ({pending} > 0)"
    )
