"""The scheduler group: the cluster's Slurm queue, its nodes out of service, and the
source that reads them.

Every series comes from the one agent of a cluster that runs `--sources scheduler` (on
the controller or a login node), scraped in the agents' job, so the job selector selects
them and their `instance` is that host; each alert names the partition and the cluster.
What the operator acts on: GPU jobs waiting while GPUs of their partition sit idle
(fragmentation, limits or a stuck scheduler), nodes with GPUs out of service for longer
than a repair takes, and the source itself down. A partition short of GPUs for most of a
week is an info signal for the capacity review, not a page.
"""

from __future__ import annotations

from collections.abc import Callable

from nvwatch.alerts.recording_scheduler import short_of_gpus_hours, window_hours
from nvwatch.alerts.rules.base import Alert, AlertGroup, Kind, Runbook, Severity
from nvwatch.common.durations import parse_duration
from nvwatch.mixin.config import MixinConfig
from nvwatch.mixin.queue_promql import WAITING, state

# the source's name in nvwatch_agent_source_up
SOURCE = "scheduler"


def source_matcher(op: str = "=") -> str:
    return f'source{op}"{SOURCE}"'


def _where_partition(cfg: MixinConfig, first: str = "p") -> str:
    """The partition and cluster of the alert; `first` is "P" at a sentence's start."""
    return (
        f"{first}artition {{{{ $labels.partition }}}} of cluster "
        f"{{{{ $labels.{cfg.cluster_label} }}}}"
    )


def jobs_waiting_while_gpus_idle(cfg: MixinConfig) -> Alert:
    s = cfg.sel
    wait = cfg.scheduler_wait_while_idle
    seconds = parse_duration(wait, "scheduler_wait_while_idle")
    return Alert(
        "NvwatchSchedulerJobsWaitingWhileGpusIdle",
        # one series per partition on each side: the agent's target labels are the same
        f"nvwatch_scheduler_oldest_pending_seconds{s()} > {seconds:g}\n"
        f"and ignoring (state) nvwatch_scheduler_gpus{s(state('idle'))} > 0\n"
        f"and sum without (account, reason) (nvwatch_scheduler_pending_gpus{s(WAITING)}) > 0",
        cfg.for_slow,
        Severity.WARNING,
        "GPU jobs wait while GPUs of their partition sit idle.",
        f"A GPU job in {_where_partition(cfg)} has waited {{{{ $value | humanizeDuration }}}} "
        f"to start while GPUs of the partition stayed idle for {cfg.for_slow}: "
        "fragmentation, a limit or a stuck scheduler, not a lack of GPUs.",
        Runbook(
            f"The longest-waiting GPU job of the partition that is eligible to start (not "
            f"held, not waiting on another job) has waited more than {wait} (mixin config "
            "`scheduler_wait_while_idle`), and at least one GPU of the partition has been "
            f"idle all through the last {cfg.for_slow}. Slurm's scheduling cycles run "
            "every minute or so; a job still waiting after dozens of them does not fit the "
            "idle GPUs: they are spread over nodes where it needs them on one "
            "(fragmentation: 2 GPUs free on each of 4 nodes, the job wants 8 on one), an "
            "account or QOS limit holds it (GrpTRES, MaxJobs), a "
            "reservation or its constraints keep it off the idle nodes, or the scheduler "
            "stopped cycling. A large job gathering nodes also holds GPUs idle until it "
            "has them all (backfill keeps them for it); the alert then resolves when it "
            "starts. When every GPU is busy the alert stays quiet: that wait is "
            "the cluster's size, which NvwatchSchedulerShortOfGpus counts.",
            "Queue & fairness dashboard, *Longest waiting GPU job* and *GPUs by state*. "
            "`squeue -p <partition> -t PD -o '%i %u %a %b %D %r %V'` lists the waiting "
            "jobs with their GPUs, nodes and reason; `sinfo -p <partition> -N -O "
            "NodeList,Gres,GresUsed,StateLong` shows where the idle GPUs are; `scontrol "
            "show job <id>` the job's limits and constraints; `sdiag` whether the main "
            "and backfill cycles still run (last cycle, cycle times).",
            "Fragmentation: let a node drain of small jobs (`scontrol update nodename=<n> "
            "state=drain` then resume), pack jobs (`SelectTypeParameters` with "
            "`CR_Pack_Nodes`) and ask users to ask for GPUs in node-sized shapes. A limit: "
            "raise the account's or QOS's limit (`sacctmgr modify`) if it was not meant "
            "to hold GPUs idle. A stuck scheduler: check slurmctld's log, `scontrol "
            "reconfigure` or restart slurmctld.",
            "Repaired means the waiting job started, was cancelled or its wait no longer "
            f"exceeds {wait}, or the partition has no idle GPU left; the alert resolves at "
            "the next evaluation after that.",
        ),
        Kind.CONDITION,
    )


def nodes_unavailable(cfg: MixinConfig) -> Alert:
    planned = "|".join(cfg.scheduler_planned_unavailable_reasons)
    matchers = (f'reason!~"{planned}"',) if planned else ()
    for_ = cfg.scheduler_node_unavailable_for
    return Alert(
        "NvwatchSchedulerNodesUnavailable",
        f"nvwatch_scheduler_nodes_unavailable{cfg.sel(*matchers)} > 0",
        for_,
        Severity.WARNING,
        "Nodes with GPUs have been out of service longer than a repair takes.",
        f"{_where_partition(cfg, 'P')} has had nodes with GPUs out of service "
        f"({{{{ $labels.reason }}}}) for {for_}; {{{{ $value }}}} of them now.",
        Runbook(
            "Slurm has kept at least one node with GPUs of the partition from taking "
            f"jobs for {for_} (mixin config `scheduler_node_unavailable_for`), all that "
            "time for the same reason class: drained or down by an operator or a health "
            "check (in their own words, which `sinfo -R` shows), not responding (slurmd, "
            "munge or the network), kill_task_failed (a process that would not die), "
            "prolog_epilog (a failed prolog or epilog), config_mismatch (fewer cores, "
            "memory or GPUs than slurm.conf says), reboot, failing, other. Reservations "
            "and maintenance are planned and left out "
            "(`scheduler_planned_unavailable_reasons`). Its GPUs count as unavailable: "
            "capacity the cluster pays for and nobody can use.",
            "`sinfo -R -p <partition>` lists the nodes with the reason, who set it and "
            "when; `scontrol show node <node>`; Queue & fairness dashboard, *Nodes out "
            "of service by reason*. A node whose agent is down pages as "
            "NvwatchAgentDown too.",
            "Repair what the reason names, then `scontrol update nodename=<node> "
            "state=resume`. A drain nobody remembers: ask who set it (sinfo -R names the "
            "user) before resuming. not_responding: slurmd, munge and the network on the "
            "node; kill_task_failed: reboot the node; config_mismatch: fix slurm.conf or "
            "gres.conf (a GPU missing from the node is NvwatchGpuMissing).",
            "Repaired means no node of the partition is out of service for that reason "
            "(the count is 0); the alert resolves at the next evaluation. A count that "
            f"drops to 0 in between starts the {for_} again.",
        ),
        Kind.CONDITION,
    )


def source_down(cfg: MixinConfig) -> Alert:
    up = f"nvwatch_agent_source_up{cfg.sel(source_matcher())}"
    return Alert(
        "NvwatchSchedulerSourceDown",
        # down, or gone from the cluster: the agent that ran the source no longer does (a
        # restart without `--sources scheduler`, the agent or its host down) and no other
        # agent of the cluster took it over
        f"(\n  {up}\n  or last_over_time({up}[{cfg.unscraped_memory}]) * 0\n"
        f"    unless on ({cfg.cluster_label}) {up}\n) == 0",
        cfg.for_default,
        Severity.WARNING,
        "The scheduler source cannot read Slurm.",
        f"The scheduler source of the agent on {{{{ $labels.{cfg.instance_label} }}}} "
        f"in cluster {{{{ $labels.{cfg.cluster_label} }}}} cannot read Slurm, or no agent of "
        "the cluster runs it any more: the queue, capacity and fair-share series are gone.",
        Runbook(
            "The agent that runs `--sources scheduler` could not read Slurm in its "
            "recent refreshes (no Slurm configuration found, so no command was run; "
            "squeue or sinfo missing, failing, hanging past its timeout, printing more "
            "than --scheduler-max-output-mib or something that is not Slurm's JSON; the "
            "controller down or unreachable; munge failing), or the source's series stopped "
            "altogether: the agent or its host is down (NvwatchAgentDown pages for the "
            "host as well) or was restarted without the source, and no other agent of the "
            f"cluster reports it (remembered for {cfg.unscraped_memory}). Meanwhile the "
            "queue & fairness dashboard is empty and no queue alert can fire; the GPUs "
            "themselves are watched as before.",
            "The agent's landing page or `nvwatch doctor --sources scheduler` on that "
            "host gives the source's one-line reason; `squeue --json | head` and "
            "`scontrol ping` as the agent's user, with the agent's SLURM_CONF; `systemctl "
            "status nvwatch` and the unit's `--sources` for a source that is gone.",
            "Restore the controller or the client's access to it (slurm.conf, munge key "
            "and daemon, the network), or start the agent again with `--sources "
            "scheduler` on one host of the cluster.",
            "Repaired means a refresh reads Slurm again (`nvwatch_agent_source_up` 1) on "
            "any agent of the cluster; the alert resolves at the next evaluation.",
        ),
        Kind.CONDITION,
    )


def short_of_gpus(cfg: MixinConfig) -> Alert:
    window = cfg.scheduler_capacity_window
    fraction = cfg.scheduler_short_of_gpus_fraction
    hours = window_hours(window)
    return Alert(
        "NvwatchSchedulerShortOfGpus",
        f"{short_of_gpus_hours(window)}\n  / {hours:g} > {fraction:g}",
        "0s",
        Severity.INFO,
        "A partition has been short of GPUs for most of the week.",
        f"GPU jobs of {_where_partition(cfg)} waited for more GPUs than it had idle in "
        f"{{{{ $value | humanizePercentage }}}} of the hours in the last {window}.",
        Runbook(
            "In more than the configured share (`scheduler_short_of_gpus_fraction`) of "
            f"the hours of the last {window} (`scheduler_capacity_window`), jobs of the "
            "partition waiting for GPUs (Slurm's reasons Resources and Priority) asked "
            "for more GPUs than it had idle "
            "(recorded as partition:nvwatch_scheduler_gpus:unmet, sampled on the hour; "
            "an hour without a reading counts as not short). Demand has been above the "
            "partition's capacity for most of the window: a question for the capacity "
            "review, not a fault. Jobs that wait while GPUs idle are not counted here "
            "(NvwatchSchedulerJobsWaitingWhileGpusIdle).",
            "Queue & fairness dashboard, *Demand vs capacity* and *Unmet demand* over "
            f"the last {window}; `nvwatch report`'s Demand section (peak and typical "
            "unmet demand, wait percentiles, GPU-hours against fair share): is it one "
            "account over its share (a fairness question) or every account (capacity)?",
            "Nothing to repair. Take it to the capacity review: more GPUs for the "
            "partition, nodes moved from an idle partition, or shares and limits that "
            "match what the groups were promised.",
            f"Resolves when the share of the hours in the last {window} with unmet demand "
            "falls to the threshold or below: hours or days after the backlog clears, as "
            "its hours leave the window.",
        ),
        Kind.CONDITION,
    )


# In this order in the rule file and in docs/alerts.md.
ALERTS: tuple[Callable[[MixinConfig], Alert], ...] = (
    jobs_waiting_while_gpus_idle,
    nodes_unavailable,
    source_down,
    short_of_gpus,
)


def group(cfg: MixinConfig) -> AlertGroup:
    return AlertGroup(
        "nvwatch-scheduler", "Scheduler: queue and capacity", tuple(make(cfg) for make in ALERTS)
    )
