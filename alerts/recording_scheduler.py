"""Recording rules of the cluster's Slurm queue: capacity, demand and unmet demand per
partition.

The scheduler series come from the one agent of a cluster that runs `--sources
scheduler`, in the agents' job (mixin config `job_selector`). Its `instance` is the host
it runs on, which says nothing about a partition, so these rules keep the cluster and the
partition only. Two agents may read the same Slurm for a while (the source moving to
another host); each then reports the same numbers, so the rules take the larger of the
agents' figures (`max by` over each agent's own sum) rather than adding them up.

Unmet demand is what a capacity review asks (mixin/queue_promql.py defines it, for the
rules here and the report): the GPUs that jobs waiting for GPUs ask for beyond the GPUs
the partition has idle. Jobs that wait while as many GPUs sit idle are not short of
GPUs: the idle ones are on the wrong nodes for them (fragmentation), which the alert
NvwatchSchedulerJobsWaitingWhileGpusIdle is about.
"""

from __future__ import annotations

from nvwatch.alerts.recording import RecordingGroup, RecordingRule
from nvwatch.common.durations import parse_duration
from nvwatch.mixin.config import MixinConfig
from nvwatch.mixin.queue_promql import WAITING, per_partition, unmet

CAPACITY = "partition:nvwatch_scheduler_gpus:max"
PENDING = "partition:nvwatch_scheduler_pending_gpus:sum"
UNMET = "partition:nvwatch_scheduler_gpus:unmet"
# The capacity signal samples unmet demand once an hour: it counts hours of a week.
HOUR = "1h"


def short_of_gpus_hours(window: str, selector: str = "") -> str:
    """Hours in `window` (on the hour) in which each partition had unmet demand; an hour
    without a reading (the source down) counts as not short."""
    return f"sum_over_time(({UNMET}{selector} > bool 0)[{window}:{HOUR}])"


def window_hours(window: str) -> float:
    return parse_duration(window, "scheduler_capacity_window") / 3600


def scheduler_group(cfg: MixinConfig) -> RecordingGroup:
    c = cfg.cluster_label
    rules = (
        RecordingRule(
            CAPACITY,
            f"max by ({c}, partition, state) (nvwatch_scheduler_gpus{cfg.sel()})",
        ),
        RecordingRule(
            PENDING,
            per_partition(
                cfg, f"{c}, partition, reason", f"nvwatch_scheduler_pending_gpus{cfg.sel()}"
            ),
        ),
        RecordingRule(UNMET, unmet(cfg)),
    )
    return RecordingGroup("nvwatch-scheduler.rules", rules)


def doc_lines(cfg: MixinConfig) -> list[str]:
    """The queue section of docs/alerts.md: what each rule records and how to read it."""
    c = f"`{cfg.cluster_label}`"
    return [
        "",
        "## Queue demand and capacity (recording rules)",
        "",
        "Where one agent of the cluster runs `--sources scheduler`, the group "
        "`nvwatch-scheduler.rules` records per partition (the agent's `instance` "
        "dropped; two agents reading the same Slurm count once):",
        "",
        "| rule | labels | value |",
        "|---|---|---|",
        f"| `{CAPACITY}` | {c}, `partition`, `state` | GPUs of the partition allocated, "
        "idle or unavailable (a node in several partitions counts in each) |",
        f"| `{PENDING}` | {c}, `partition`, `reason` | GPUs pending jobs ask for, over "
        "all accounts, by reason class |",
        f"| `{UNMET}` | {c}, `partition` | GPUs jobs waiting for GPUs (reasons resources "
        "and priority) ask for beyond the partition's idle GPUs: how many more it needs "
        "now to start them all (0 when none) |",
        "",
        "A partition's demand is the GPUs its jobs hold plus those its jobs waiting to "
        "start ask for (held jobs and jobs waiting on another job left out); its "
        "capacity in service is the GPUs allocated or idle.",
        "",
        "```promql",
        "# hours of the last week with unmet demand, as NvwatchSchedulerShortOfGpus counts",
        "# them (an hour without a reading counts as not short)",
        short_of_gpus_hours("7d"),
        "# demand and capacity in service, per partition",
        f'sum by ({cfg.cluster_label}, partition) ({CAPACITY}{{state="allocated"}} '
        f"or {PENDING}{{{WAITING}}})",
        f'sum by ({cfg.cluster_label}, partition) ({CAPACITY}{{state=~"allocated|idle"}})',
        "```",
    ]
