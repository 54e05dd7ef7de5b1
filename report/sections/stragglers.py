"""Stragglers: GPU-hours of synchronous jobs held back by one rank, by cause and by the
culprit's node (NvwatchJobStraggler; report/queries_straggler.py has the PromQL).

A culprit node slows every job that runs a rank on it, other people's included: the
nodes at the top of its table are the ones a capacity review fixes first.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from nvwatch.alerts.rules.straggler import CAUSES
from nvwatch.report import stats, units
from nvwatch.report.context import Context, NodeKey
from nvwatch.report.frame import Array
from nvwatch.report.model import Column, Number, Section, Table
from nvwatch.report.queries_straggler import ALERT, GROUPINGS, evaluation_seconds

TOP = 10
G = TypeVar("G")
JobKey = tuple[str, str]  # (cluster, job_id)
# what to do about a culprit node, by the cause the alert named (its runbook's fixes)
ACTIONS = {
    "power-capped": "check its GPUs' power limit (nvidia-smi -pl) and power brake",
    "thermal": "check its GPUs' cooling",
    "clock-other": "reset its locked clocks (nvidia-smi -rgc -rac), else open a ticket",
    "nvlink": "drain it and have its NVLink reset or repaired",
    "infiniband": "check its port's cable and switch port (ibdiagnet)",
    "pcie": "reseat the GPU whose PCIe link trained down",
    "host-cpu": "find what keeps its CPUs busy: the jobs' data loaders, other processes",
    "unknown": "drain it and run dcgmi diag -r 3 on the GPU",
}


@dataclass
class Slowed:
    """GPU-hours slowed and lost of one row (a cause, a node, a job) and what it saw."""

    gpu_hours: float = 0.0
    lost: float = 0.0
    jobs: set[JobKey] = field(default_factory=set)
    causes: set[str] = field(default_factory=set)
    culprits: set[str] = field(default_factory=set)


def stragglers(ctx: Context) -> Section:
    alerts = ctx.frame("straggler_alerts")
    section = Section(
        "stragglers",
        "Stragglers",
        coverage=float("nan"),
        coverage_note="share of job x step cells with a straggler alert in which the job's "
        "nvwatch_gpu_allocation_info was found",
    )
    if not len(alerts) or not np.nansum(alerts.values) > 0:
        section.absent = f"No straggler alert ({ALERT}) fired in the range."
        return section
    gpus = _job_gpus(ctx)
    section.coverage = _coverage(ctx, gpus)
    rows = {suffix: _gpu_hours(ctx, suffix, gpus) for suffix in GROUPINGS}
    by_job = _regroup(rows["job"], lambda key: (key[0], key[1]))
    by_cause = _regroup(rows["cause"], lambda key: key[2])
    by_node = _regroup(rows["node"], lambda key: (key[0], key[2]))
    nodes = {(n[0], n[3]): n for n in ctx.nodes("gpu_up")}
    main_cause = _culprits(ctx, by_job, by_node, gpus, nodes)
    _numbers(section, by_job, by_node)
    section.tables += [
        _cause_table(ctx, by_cause),
        _node_table(ctx, by_node, nodes),
        _job_table(by_job, gpus),
    ]
    if by_node:  # none where the rules' samples are sparser than evaluation_interval
        section.findings.append(_finding(ctx, section, by_node, nodes, main_cause))
    return section


def _job_gpus(ctx: Context) -> dict[JobKey, Array]:
    """Whole GPUs each flagged job held, per step."""
    frame = ctx.frame("straggler_gpus")
    keys = frame.keys((ctx.cfg.cluster_label, "job_id"))
    return {(k[0], k[1]): row for k, row in zip(keys, frame.values, strict=True)}


def _coverage(ctx: Context, gpus: dict[JobKey, Array]) -> float:
    frame = ctx.frame("straggler_evaluations_job")
    missing = np.full(ctx.window.steps, np.nan)
    flagged = found = 0
    for key, row in zip(frame.keys((ctx.cfg.cluster_label, "job_id")), frame.values, strict=True):
        cells = np.nan_to_num(row) > 0
        flagged += int(cells.sum())
        found += int((~np.isnan(gpus.get((key[0], key[1]), missing)[cells])).sum())
    return found / flagged if flagged else float("nan")


def _gpu_hours(
    ctx: Context, suffix: str, gpus: dict[JobKey, Array]
) -> dict[tuple[str, ...], Slowed]:
    """One grouping's rows, keyed by (cluster, job_id, *its labels): flagged evaluations
    x interval x the job's GPUs in each step, and the same with the summed slowdown."""
    extra = (ctx.cfg.instance_label if n == "instance" else n for n in GROUPINGS[suffix])
    names = (ctx.cfg.cluster_label, "job_id", *extra)
    evaluations = ctx.frame(f"straggler_evaluations_{suffix}")
    summed = ctx.frame(f"straggler_slowdown_{suffix}")
    slowdown = dict(zip(summed.keys(names), summed.values, strict=True))
    hours = evaluation_seconds(ctx.cfg) / 3600.0
    missing = np.full(ctx.window.steps, np.nan)
    out: dict[tuple[str, ...], Slowed] = {}
    for key, row in zip(evaluations.keys(names), evaluations.values, strict=True):
        held = np.nan_to_num(gpus.get((key[0], key[1]), missing))
        slowed = out.setdefault(key, Slowed())
        slowed.gpu_hours += float(np.sum(np.nan_to_num(row) * held)) * hours
        slowed.lost += float(np.sum(np.nan_to_num(slowdown.get(key, missing)) * held)) * hours
        if np.nansum(row) > 0:
            slowed.jobs.add((key[0], key[1]))
    return out


def _regroup(
    rows: dict[tuple[str, ...], Slowed], group_of: Callable[[tuple[str, ...]], G]
) -> dict[G, Slowed]:
    """Rows summed per `group_of(key)`: a job's, a cause's or a node's total."""
    out: dict[G, Slowed] = {}
    for key, slowed in rows.items():
        total = out.setdefault(group_of(key), Slowed())
        total.gpu_hours += slowed.gpu_hours
        total.lost += slowed.lost
        total.jobs |= slowed.jobs
    return out


def _culprits(
    ctx: Context,
    by_job: dict[JobKey, Slowed],
    by_node: dict[tuple[str, str], Slowed],
    gpus: dict[JobKey, Array],
    nodes: dict[tuple[str, str], NodeKey],
) -> dict[tuple[str, str], str]:
    """Each job's culprits and causes and each node's causes, from the alert series; and
    each node's main cause: the one its alerts named for the most GPU-hours."""
    frame = ctx.frame("straggler_alerts")
    missing = np.full(ctx.window.steps, np.nan)
    weight: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for labels, row in zip(frame.labels, frame.values, strict=True):
        if not np.nansum(row) > 0:
            continue
        node = (labels.get(ctx.cfg.cluster_label, ""), labels.get(ctx.cfg.instance_label, ""))
        job, cause = (node[0], labels.get("job_id", "")), labels.get("cause", "")
        if job in by_job:
            by_job[job].causes.add(cause)
            by_job[job].culprits.add(f"{ctx.node_name(_node_key(nodes, node))} {_part(labels)}")
        if node in by_node:
            by_node[node].causes.add(cause)
        held = np.nan_to_num(gpus.get(job, missing))
        weight[node][cause] += float(np.sum(np.nan_to_num(row) * held))
    return {node: max(causes, key=lambda c: causes[c]) for node, causes in weight.items()}


def _part(labels: dict[str, str]) -> str:
    """The culprit on its node, as the alert's description names it."""
    if labels.get("gpu"):
        return f"GPU {labels['gpu']}"
    if labels.get("device"):
        return f"{labels['device']}/{labels.get('port', '')}"
    return "host CPUs"


def _node_key(nodes: dict[tuple[str, str], NodeKey], node: tuple[str, str]) -> NodeKey:
    """The culprit's (cluster, rack, class, instance), from its GPUs' series where found."""
    return nodes.get(node, (node[0], "", "", node[1]))


def _numbers(
    section: Section, by_job: dict[JobKey, Slowed], by_node: dict[tuple[str, str], Slowed]
) -> None:
    section.numbers.update(
        {
            "gpu_hours_slowed": Number(
                "GPU-hours of jobs slowed by a straggler",
                sum(s.gpu_hours for s in by_job.values()),
                "h",
            ),
            "gpu_hours_lost": Number(
                "GPU-hours lost (estimated)", sum(s.lost for s in by_job.values()), "h"
            ),
            "jobs_slowed": Number("jobs slowed", len(by_job), "count"),
            "culprit_nodes": Number("culprit nodes", len(by_node), "count"),
        }
    )


def _cause_table(ctx: Context, by_cause: dict[str, Slowed]) -> Table:
    interval = units.duration(evaluation_seconds(ctx.cfg))
    return Table(
        "by_cause",
        "GPU-hours of jobs slowed by a straggler, by cause",
        [
            Column("cause", "cause"),
            Column("gpu_hours_slowed", "GPU-hours slowed", "h"),
            Column("gpu_hours_lost", "GPU-hours lost", "h"),
            Column("mean_slowdown", "mean slowdown", "ratio"),
            Column("jobs", "jobs", "count"),
        ],
        [
            [cause, s.gpu_hours, s.lost, s.lost / s.gpu_hours if s.gpu_hours else None, len(s.jobs)]
            for cause, s in _largest_first(by_cause)
        ],
        note=(
            f"A job is slowed at each rule evaluation (every {interval}) at which {ALERT} "
            "fires naming it. GPU-hours slowed: that time x the whole GPUs the job held "
            "(its nvwatch_gpu_allocation_info series). GPU-hours lost: GPU-hours slowed x "
            "the job's estimated slowdown (job:nvwatch_straggler_slowdown:ratio, the "
            "alert's value). A job slowed for two causes at once counts in both rows."
        ),
    )


def _node_table(
    ctx: Context, by_node: dict[tuple[str, str], Slowed], nodes: dict[tuple[str, str], NodeKey]
) -> Table:
    return Table(
        "by_node",
        "Culprit nodes: GPU-hours of the jobs they slowed",
        [
            Column("node", "node"),
            Column("node_class", "class"),
            Column("gpu_hours_slowed", "GPU-hours slowed", "h"),
            Column("gpu_hours_lost", "GPU-hours lost", "h"),
            Column("jobs", "jobs", "count"),
            Column("causes", "causes"),
        ],
        [
            [
                ctx.node_name(_node_key(nodes, node)),
                _node_key(nodes, node)[2],
                s.gpu_hours,
                s.lost,
                len(s.jobs),
                _listed(s.causes),
            ]
            for node, s in _largest_first(by_node)
        ],
        note="The culprit's node: the node of the GPU, IB port or host CPUs the alert named. "
        "A job held back by two nodes counts for each.",
        html_rows=TOP,
    )


def _job_table(by_job: dict[JobKey, Slowed], gpus: dict[JobKey, Array]) -> Table:
    several = len({cluster for cluster, _ in by_job}) > 1
    return Table(
        "jobs",
        "Jobs slowed by a straggler",
        [
            Column("job", "job"),
            Column("gpus", "GPUs", "count"),
            Column("gpu_hours_slowed", "GPU-hours slowed", "h"),
            Column("gpu_hours_lost", "GPU-hours lost", "h"),
            Column("culprits", "culprits"),
            Column("causes", "causes"),
        ],
        [
            [
                f"{job[0]}/{job[1]}" if several else job[1],
                stats.peak(gpus.get(job, np.zeros(0))),
                s.gpu_hours,
                s.lost,
                ", ".join(sorted(s.culprits)),
                _listed(s.causes),
            ]
            for job, s in _largest_first(by_job)
        ],
        html_rows=TOP,
    )


def _largest_first(rows: dict[G, Slowed]) -> list[tuple[G, Slowed]]:
    return sorted(rows.items(), key=lambda kv: (-kv[1].gpu_hours, str(kv[0])))


def _listed(causes: set[str]) -> str:
    """Causes in the alert's own order."""
    known = [c for c in CAUSES if c in causes]
    return ", ".join(known + sorted(causes - set(CAUSES)))


def _finding(
    ctx: Context,
    section: Section,
    by_node: dict[tuple[str, str], Slowed],
    nodes: dict[tuple[str, str], NodeKey],
    main_cause: dict[tuple[str, str], str],
) -> str:
    """The section's sentence for the summary: the total and the worst culprit node."""
    n = section.numbers
    node, worst = _largest_first(by_node)[0]
    cause = main_cause.get(node, "unknown")
    return (
        f"Stragglers slowed {units.count(n['jobs_slowed'].value)} job(s) for "
        f"{units.hours(n['gpu_hours_slowed'].value)} of GPU time (an estimated "
        f"{units.hours(n['gpu_hours_lost'].value)} lost); "
        f"{ctx.node_name(_node_key(nodes, node))} held back the most, {len(worst.jobs)} "
        f"job(s) for {units.hours(worst.gpu_hours)}, mostly as {cause}: "
        f"{ACTIONS.get(cause, ACTIONS['unknown'])}."
    )
