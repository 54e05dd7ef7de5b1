"""The queue & fairness dashboard: how short of GPUs each partition is, who waits and
for how long, and whether each account gets its share.

It reads the series of the one agent of a cluster that runs `--sources scheduler` and
the recording rules over them (alerts/recording_scheduler.py): capacity, demand and
unmet demand per partition, queue waits per partition and per account, pending GPUs and
GPU-hours per account, fair share (where the cluster runs accounting), nodes out of
service. Queries that read the
agent's own series keep its `instance` in every aggregation: one agent per cluster, so
nothing is summed across hosts.
"""

from __future__ import annotations

from typing import Any

from grafanalib import core as g

from nvwatch.alerts.recording_scheduler import CAPACITY, PENDING, UNMET
from nvwatch.dashboards import thresholds as t
from nvwatch.dashboards.builder import STACKED, Grid, PanelRow, Q, dashboard, legend, variable
from nvwatch.dashboards.links import QUEUE
from nvwatch.mixin.config import MixinConfig
from nvwatch.mixin.queue_promql import WAITING, state

# Window of the wait percentiles over time: a partition starts a few GPU jobs an hour,
# and a shorter window would hold no start most of the time and draw no line.
WAIT_WINDOW = "1h"
WAIT_QUANTILES = (0.5, 0.9, 0.99)
ALLOCATED = "nvwatch_scheduler_allocated_gpu_seconds_total"
WAIT = "nvwatch_scheduler_wait_seconds_bucket"
# per account, for the whole cluster: the account histogram has no partition label
ACCOUNT_WAIT = "nvwatch_scheduler_account_wait_seconds_bucket"


def _scope(cfg: MixinConfig) -> tuple[str, str]:
    return f'{cfg.cluster_label}=~"$cluster"', 'partition=~"$partition"'


def _raw(cfg: MixinConfig, name: str, *matchers: str) -> str:
    """The agent's series of the chosen clusters and partitions."""
    return name + cfg.sel(*_scope(cfg), *matchers)


def _recorded(cfg: MixinConfig, name: str, *matchers: str) -> str:
    return name + "{" + ", ".join((*_scope(cfg), *matchers)) + "}"


def _fairshare(cfg: MixinConfig, kind: str) -> str:
    # per account, for the whole cluster: no partition label
    return "nvwatch_scheduler_fairshare" + cfg.sel(
        f'{cfg.cluster_label}=~"$cluster"', f'kind="{kind}"'
    )


def _agent(cfg: MixinConfig, *labels: str) -> str:
    """`by` labels of an aggregation over the agent's series: its cluster and instance."""
    return ", ".join((cfg.cluster_label, cfg.instance_label, *labels))


def _gpu_seconds(cfg: MixinConfig, window: str) -> str:
    """GPU-seconds each account's jobs held in `window`, over the chosen partitions."""
    return f"sum by ({_agent(cfg, 'account')}) (increase({_raw(cfg, ALLOCATED)}[{window}]))"


def _wait_quantile(cfg: MixinConfig, quantile: float, window: str, by: str = "partition") -> str:
    """A wait percentile per partition, or per account (over every partition)."""
    if by == "partition":
        buckets = _raw(cfg, WAIT)
    else:
        buckets = ACCOUNT_WAIT + cfg.sel(f'{cfg.cluster_label}=~"$cluster"')
    labels = _agent(cfg, by, "le")
    return f"histogram_quantile({quantile:g}, sum by ({labels}) (increase({buckets}[{window}])))"


def _now(grid: Grid, cfg: MixinConfig) -> None:
    partition = legend("partition")
    grid.add(
        "bargauge",
        "Unmet GPU demand now, per partition",
        "GPUs that jobs waiting for GPUs (reasons resources and priority) ask for beyond "
        "the partition's idle GPUs: "
        "how many more GPUs it would need right now to start them all. 0 with jobs "
        "waiting means the idle GPUs are on the wrong nodes for them (fragmentation) or "
        "a limit holds them, not a lack of GPUs.",
        "none",
        [Q(_recorded(cfg, UNMET), partition, instant=True)],
        steps=t.ANY_WARN,
        min_=0,
        w=8,
        h=7,
    )
    grid.add(
        "bargauge",
        "Longest waiting GPU job, per partition",
        "How long the longest-waiting GPU job of each partition has been eligible to start "
        "(held jobs and jobs waiting on another job do not count). Orange from "
        f"{cfg.scheduler_wait_while_idle}: with GPUs of the partition idle meanwhile, "
        "NvwatchSchedulerJobsWaitingWhileGpusIdle fires.",
        "s",
        [Q(_raw(cfg, "nvwatch_scheduler_oldest_pending_seconds"), partition, instant=True)],
        steps=t.queue_wait(cfg),
        min_=0,
        w=8,
        h=7,
    )
    grid.add(
        "bargauge",
        "Time short of GPUs in the range, per partition",
        "Share of the dashboard's range in which the partition had unmet demand. Above "
        f"{cfg.scheduler_short_of_gpus_fraction:.0%} of the hours of the last "
        f"{cfg.scheduler_capacity_window}, NvwatchSchedulerShortOfGpus (info) tells the "
        "capacity review.",
        "percentunit",
        [
            Q(
                f"avg_over_time(({_recorded(cfg, UNMET)} > bool 0)[$__range:$__interval])",
                partition,
                instant=True,
            )
        ],
        steps=t.short_of_gpus(cfg),
        min_=0,
        max_=1,
        w=8,
        h=7,
    )


def _demand(grid: Grid, cfg: MixinConfig) -> None:
    partition = legend("partition")
    by = f"{cfg.cluster_label}, partition"
    in_service = _recorded(cfg, CAPACITY, 'state=~"allocated|idle"')
    allocated = _recorded(cfg, CAPACITY, state("allocated"))
    grid.add(
        "timeseries",
        "Demand vs capacity per partition",
        "Capacity in service: the partition's GPUs allocated or idle. Demand: the GPUs its "
        "jobs hold plus those its jobs waiting to start ask for (held jobs and jobs "
        "waiting on another job left out). Demand above capacity is GPU work the "
        "partition cannot start; out of service: GPUs of drained, down or reserved nodes.",
        "none",
        [
            Q(f"sum by ({by}) ({in_service})", f"{partition} in service"),
            Q(
                f"sum by ({by}) ({allocated} or {_recorded(cfg, PENDING, WAITING)})",
                f"{partition} demand",
            ),
            Q(_recorded(cfg, CAPACITY, state("unavailable")), f"{partition} out of service"),
        ],
        min_=0,
    )
    grid.add(
        "timeseries",
        "Unmet demand per partition",
        "GPUs jobs waiting for GPUs (resources, priority) ask for beyond the partition's "
        "idle GPUs, over "
        "time: the peaks and the typical level are what a purchase would have to cover.",
        "none",
        [Q(_recorded(cfg, UNMET), partition)],
        min_=0,
    )


def _state_and_reasons(grid: Grid, cfg: MixinConfig) -> None:
    grid.add(
        "timeseries",
        "GPUs by state per partition",
        "GPUs of each partition's nodes allocated to jobs, idle, or unavailable (drained, "
        "down, not responding, reserved). A node in several partitions counts in each.",
        "none",
        [Q(_recorded(cfg, CAPACITY), f"{legend('partition')} {legend('state')}")],
        min_=0,
    )
    grid.add(
        "timeseries",
        "Pending GPUs by reason per partition",
        "GPUs pending jobs ask for, by why they wait: resources (the partition is full or "
        "fragmented), priority (others go first), limits (an account, QOS or partition "
        "limit), dependency (another job), held, other.",
        "none",
        [Q(_recorded(cfg, PENDING), f"{legend('partition')} {legend('reason')}")],
        min_=0,
    )


def _waits(grid: Grid, cfg: MixinConfig) -> None:
    _wait_panels(grid, cfg, "partition", "what the users of each partition experienced.")


def _account_waits(grid: Grid, cfg: MixinConfig) -> None:
    _wait_panels(
        grid,
        cfg,
        "account",
        "what each account's users experienced, in every partition (the partition "
        "selection does not apply). Beside its share and use below: an account over its "
        "share waits longer, as fair share means it to.",
    )


def _wait_panels(grid: Grid, cfg: MixinConfig, by: str, whose: str) -> None:
    """Wait percentiles over time and in the range, per partition or per account."""
    grid.add(
        "timeseries",
        f"Queue wait of GPU jobs started in the last {WAIT_WINDOW}, per {by}",
        "Percentiles of the time GPU jobs waited from eligible to start (submitted, "
        "released or their dependency met) until they started, over the jobs that "
        f"started in the {WAIT_WINDOW} before each point.",
        "s",
        [
            Q(_wait_quantile(cfg, q, WAIT_WINDOW, by), f"{legend(by)} p{q * 100:g}")
            for q in WAIT_QUANTILES[:2]
        ],
        min_=0,
    )
    names = {f"Value #{chr(ord('A') + i)}": f"p{q * 100:g}" for i, q in enumerate(WAIT_QUANTILES)}
    grid.add(
        "table",
        f"Queue wait percentiles in the range, per {by}",
        "Percentiles of the queue wait of the GPU jobs that started in the dashboard's "
        f"range: {whose}",
        "s",
        [
            Q(_wait_quantile(cfg, q, "$__range", by), instant=True, table=True)
            for q in WAIT_QUANTILES
        ],
        transformations=_merged(cfg, names),
    )


def _merged(cfg: MixinConfig, names: dict[str, str]) -> list[dict[str, Any]]:
    """One row per partition (or account) from the table's instant queries, their values
    renamed; the agent's job and host say nothing about either."""
    hidden = {"Time": True, "job": True, cfg.instance_label: True}
    return [
        {"id": "merge", "options": {}},
        {"id": "organize", "options": {"excludeByName": hidden, "renameByName": names}},
    ]


def _fairness(grid: Grid, cfg: MixinConfig) -> None:
    account = legend("account")
    used = _gpu_seconds(cfg, "$__range")
    total = f"sum by ({_agent(cfg)}) ({used})"
    grid.add(
        "bargauge",
        "Fair share vs use per account",
        "Each account's share of the cluster as Slurm's fair share gives it (shares_norm), "
        "its share of the GPU-hours used in the range, and its normalized decayed usage as "
        "Slurm's priority sees it (usage_effective). Use well above share is a fairness "
        "question, not a capacity one. Fair share needs accounting (slurmdbd): without it "
        "only the GPU-hours are shown.",
        "percentunit",
        [
            Q(_fairshare(cfg, "shares_norm"), f"{account} share", instant=True),
            Q(
                f"{used}\n  / on ({_agent(cfg)}) group_left ()\n  {total}",
                f"{account} GPU-hours used",
                instant=True,
            ),
            Q(_fairshare(cfg, "usage_effective"), f"{account} usage (Slurm)", instant=True),
        ],
        min_=0,
        max_=1,
        h=9,
    )
    grid.add(
        "bargauge",
        "GPU-hours per account in the range",
        "GPU-hours each account's jobs held in the dashboard's range, over the chosen "
        "partitions (from the scheduler's running allocations; no accounting needed).",
        "h",
        [Q(f"{_gpu_seconds(cfg, '$__range')} / 3600", account, instant=True)],
        min_=0,
        w=6,
        h=9,
    )
    grid.add(
        "bargauge",
        "Fair-share factor per account",
        "Slurm's fair-share factor (0 to 1): 1 for an account that used nothing, 0.5 at "
        "exactly its share, toward 0 the further its use runs over its share. Needs "
        "accounting (slurmdbd).",
        "none",
        [Q(_fairshare(cfg, "factor"), account, instant=True)],
        min_=0,
        max_=1,
        w=6,
        h=9,
    )


def _accounts(grid: Grid, cfg: MixinConfig) -> None:
    in_use = f"rate({_raw(cfg, ALLOCATED)}[$__rate_interval])"
    grid.add(
        "timeseries",
        "GPUs in use per account",
        "GPUs each account's running jobs hold (the rate of their GPU-seconds), stacked: "
        "the top is every GPU in use in the chosen partitions.",
        "none",
        [
            Q(f"sum by ({_agent(cfg, 'account')}) ({in_use})", legend("account")),
        ],
        custom=STACKED,
        min_=0,
    )
    pending = _raw(cfg, "nvwatch_scheduler_pending_gpus", WAITING)
    grid.add(
        "timeseries",
        "GPUs waiting per account",
        "GPUs each account's jobs waiting to start ask for, per partition (held jobs and "
        "jobs waiting on another job left out). A job pending on several partitions counts "
        "in each.",
        "none",
        [
            Q(
                f"sum by ({_agent(cfg, 'partition', 'account')}) ({pending})",
                f"{legend('account')} in {legend('partition')}",
            )
        ],
        min_=0,
    )


def _nodes(grid: Grid, cfg: MixinConfig) -> None:
    nodes = _raw(cfg, "nvwatch_scheduler_nodes_unavailable")
    partition = _agent(cfg, "partition")
    # a partition with none out of service draws one line at 0 rather than one per reason
    none_out = f'label_replace(sum without (reason) ({nodes}), "reason", "none", "", "")'
    grid.add(
        "timeseries",
        "Nodes out of service by reason, per partition",
        "Nodes with GPUs that Slurm keeps from taking jobs, by reason class: drained and "
        "down (by an operator or a health check), not responding, kill_task_failed, "
        "prolog_epilog, config_mismatch, reboot, failing, reserved, other. Past "
        f"{cfg.scheduler_node_unavailable_for} NvwatchSchedulerNodesUnavailable fires "
        "(reservations aside); `sinfo -R` names the nodes.",
        "none",
        [
            Q(
                f"{nodes} > 0\nor on ({partition}) {none_out}",
                f"{legend('partition')}: {legend('reason')}",
            )
        ],
        steps=t.ANY_WARN,
        min_=0,
    )
    grid.add(
        "bargauge",
        "GPUs out of service now, per partition",
        "GPUs of the partition's drained, down, not responding or reserved nodes: "
        "capacity the cluster has and nobody can use.",
        "none",
        [Q(_recorded(cfg, CAPACITY, state("unavailable")), legend("partition"), instant=True)],
        steps=t.ANY_WARN,
        min_=0,
    )


def _variables(cfg: MixinConfig) -> list[g.Template]:
    scope = ", ".join((cfg.job_selector, f'{cfg.cluster_label}=~"$cluster"'))
    return [
        variable(cfg, cfg.cluster_label, "Cluster"),
        g.Template(
            name="partition",
            label="Partition",
            query=f"label_values(nvwatch_scheduler_gpus{{{scope}}}, partition)",
            multi=True,
            includeAll=True,
            allValue=".*",
            refresh=2,
            sort=1,
        ),
    ]


# Top to bottom, as the grid lays them out.
_PANELS: tuple[PanelRow, ...] = (
    _now,
    _demand,
    _state_and_reasons,
    _waits,
    _account_waits,
    _fairness,
    _accounts,
    _nodes,
)


def queue(cfg: MixinConfig) -> g.Dashboard:
    return dashboard(
        cfg,
        QUEUE,
        "nvwatch / Queue & fairness",
        "The cluster's Slurm queue (the agent that runs --sources scheduler): demand "
        "against capacity per partition, unmet demand, queue waits, the longest waiting "
        "GPU jobs, share against use per account, nodes out of service.",
        _PANELS,
        _variables(cfg),
        time_from="now-7d",
    )
