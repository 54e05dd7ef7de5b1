"""Demand: how short of GPUs each Slurm partition was, how long GPU jobs waited, and who
used the GPU-hours against their fair share.

Read from the scheduler source's series (one agent per cluster runs `--sources
scheduler`). Each partition gets one verdict, the one the executive summary reads:

- short of GPUs: in some 7 days of the range, demand was above capacity (jobs waiting for
  GPUs wanted more than the partition had idle) in more than the mixin's
  `scheduler_short_of_gpus_fraction` of the hours, the condition of the capacity signal
  NvwatchSchedulerShortOfGpus over its trailing week;
- GPUs idle while jobs wait: for NOTABLE_IDLE_WAIT_SHARE of the hours or more, GPUs of
  the partition sat idle while one of its GPU jobs had waited past
  `scheduler_wait_while_idle` (fragmentation, limits or a stuck scheduler: buying GPUs
  would not help);
- right-sized: neither; a partition that ran no GPU job at all says so instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nvwatch.report import counters, plots, stats, style, units
from nvwatch.report.context import Context
from nvwatch.report.frame import Array
from nvwatch.report.model import Cell, Column, Number, Section, Table
from nvwatch.report.sections.demand_accounts import (
    account_findings,
    account_table,
    account_uses,
)
from nvwatch.report.window import iso_date

# A partition with GPUs idle beside a job waiting past the threshold for this share of
# the range's hours (a day and a half in a month) has a problem more GPUs would not fix.
NOTABLE_IDLE_WAIT_SHARE = 0.05
WEEK_S = 7 * 86400.0
SHORT = "short of GPUs"
IDLE_WAITING = "GPUs idle while jobs wait"
RIGHT_SIZED = "right-sized"
UNUSED = "no GPU jobs"

Key = tuple[str, str]  # (cluster, partition)


@dataclass(frozen=True)
class PartitionDemand:
    key: Key
    name: str
    in_service: float  # mean GPUs allocated or idle
    unavailable: float  # mean GPUs of drained, down or reserved nodes
    allocated_share: float  # allocated GPU-hours over in-service GPU-hours
    unmet: Array  # per step: mean GPUs unmet
    unmet_peak: float
    above_hours: float
    above_share: float
    worst_week: str
    worst_week_share: float
    idle_waiting_hours: float
    idle_gpu_hours_waiting: float
    verdict: str


def demand(ctx: Context) -> Section:
    capacity = ctx.frame("sched_gpus")
    section = Section(
        "demand",
        "Demand",
        coverage=_coverage(ctx),
        coverage_note="share of partition x step cells with a scheduler reading",
    )
    if not len(capacity):
        section.absent = (
            "no scheduler series (nvwatch_scheduler_gpus) in the range: one agent of the "
            "cluster runs `nvwatch serve --sources scheduler` on the Slurm controller or a "
            "login node"
        )
        return section
    partitions = _partitions(ctx)
    waits = counters.buckets(ctx.frame("sched_wait"), (ctx.cfg.cluster_label, "partition"))
    section.numbers.update(_numbers(partitions, waits))
    section.tables.append(_partition_table(ctx, partitions))
    section.tables.append(_wait_table(ctx, waits))
    accounts = account_uses(ctx)
    section.tables.append(account_table(accounts))
    section.findings.append(verdict_sentence(partitions))
    section.findings.extend(account_findings(accounts))
    section.findings.append(_wait_finding(ctx, waits))
    _plot(ctx, section, partitions)
    return section


def _coverage(ctx: Context) -> float:
    allocated = ctx.frame("sched_gpus").select(
        lb.get("state") == "allocated" for lb in ctx.frame("sched_gpus").labels
    )
    return allocated.coverage()


def _by_partition(ctx: Context, name: str) -> dict[Key, Array]:
    rows = ctx.frame(name).by((ctx.cfg.cluster_label, "partition"))
    return {(k[0], k[1]): v for k, v in rows.items()}


def _partitions(ctx: Context) -> list[PartitionDemand]:
    by_state = ctx.frame("sched_gpus").by((ctx.cfg.cluster_label, "partition", "state"))
    keys = sorted({(k[0], k[1]) for k in by_state})
    steps = ctx.window.steps
    missing = np.full(steps, np.nan)
    unmet, peak = _by_partition(ctx, "sched_unmet"), _by_partition(ctx, "sched_unmet_peak")
    above = _by_partition(ctx, "sched_above")
    idle_waiting = _by_partition(ctx, "sched_idle_waiting")
    idle_waiting_share = _by_partition(ctx, "sched_idle_waiting_share")
    fraction = ctx.cfg.scheduler_short_of_gpus_fraction
    found = []
    for key in keys:
        allocated = by_state.get((*key, "allocated"), missing)
        idle = by_state.get((*key, "idle"), missing)
        in_service = stats.column_sums([allocated, idle], steps)
        hours = ctx.hours(~np.isnan(allocated))
        above_row = above.get(key, missing)
        worst_share, worst_from = _worst_week(ctx, above_row)
        wait_hours = ctx.hours(idle_waiting_share.get(key, missing))
        used, in_service_hours = ctx.hours(allocated), ctx.hours(in_service)
        demand = PartitionDemand(
            key=key,
            name=ctx.rack_name(*key),
            in_service=stats.mean(in_service),
            unavailable=stats.mean(by_state.get((*key, "unavailable"), missing)),
            allocated_share=used / in_service_hours if in_service_hours else 0.0,
            unmet=unmet.get(key, missing),
            unmet_peak=stats.peak(peak.get(key, missing)),
            above_hours=ctx.hours(above_row),
            above_share=stats.mean(above_row),
            worst_week=worst_from if worst_share > 0 else "",
            worst_week_share=worst_share,
            idle_waiting_hours=wait_hours,
            idle_gpu_hours_waiting=ctx.hours(idle_waiting.get(key, missing)),
            verdict=_verdict(worst_share, fraction, wait_hours, hours, used),
        )
        found.append(demand)
    return found


def _worst_week(ctx: Context, above: Array) -> tuple[float, str]:
    """(share, 'week from DATE') of the 7 days, sliding step by step, with the largest
    share of hours above capacity: the trailing week NvwatchSchedulerShortOfGpus looks at,
    wherever it falls in the range (the whole range when shorter). A step without a
    reading counts as not above, as it does for the alert."""
    steps = ctx.window.steps
    width = min(steps, max(1, round(WEEK_S / ctx.window.step)))
    shares = np.convolve(np.nan_to_num(above, nan=0.0), np.ones(width) / width, mode="valid")
    first = int(np.argmax(shares))
    start = ctx.window.start + first * ctx.window.step
    return float(shares[first]), f"week from {iso_date(start)}"


def _verdict(
    worst_week_share: float,
    short_fraction: float,
    idle_waiting_hours: float,
    hours: float,
    used_gpu_hours: float,
) -> str:
    if worst_week_share > short_fraction:
        return SHORT
    if hours and idle_waiting_hours >= NOTABLE_IDLE_WAIT_SHARE * hours:
        return IDLE_WAITING
    if used_gpu_hours <= 0:  # nothing ran, and nothing waited long beside idle GPUs
        return UNUSED
    return RIGHT_SIZED


def verdict_sentence(partitions: list[PartitionDemand]) -> str:
    """One sentence over every partition, the shortest of GPUs first."""
    said: list[str] = []
    short = sorted((p for p in partitions if p.verdict == SHORT), key=lambda p: -p.above_share)
    for p in short:
        said.append(
            f"{p.name} was short of GPUs (demand above capacity in "
            f"{units.percent(p.worst_week_share)} of the hours of the {p.worst_week} and "
            f"{units.percent(p.above_share)} of the range, up to {p.unmet_peak:.0f} GPUs "
            "unmet)"
        )
    for p in sorted(
        (p for p in partitions if p.verdict == IDLE_WAITING), key=lambda p: -p.idle_waiting_hours
    ):
        said.append(
            f"{p.name} had GPUs idle while jobs waited for {units.hours(p.idle_waiting_hours)} "
            f"({units.count(p.idle_gpu_hours_waiting)} idle GPU-hours: "
            "fragmentation or limits, not a lack of GPUs)"
        )
    for verdict, words in ((RIGHT_SIZED, "right-sized"), (UNUSED, "ran no GPU jobs")):
        names = [p.name for p in partitions if p.verdict == verdict]
        if names:
            verb = "" if verdict == UNUSED else ("was " if len(names) == 1 else "were ")
            said.append(f"{_join(names)} {verb}{words}")
    subject = "Of the Slurm partitions, " if len(partitions) > 1 else "The Slurm partition "
    return subject + _join(said) + "."


def _join(parts: list[str]) -> str:
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def _numbers(
    partitions: list[PartitionDemand], waits: dict[tuple[str, ...], dict[float, float]]
) -> dict[str, Number]:
    pooled: dict[float, float] = {}
    for cumulative in waits.values():
        for bound, count in cumulative.items():
            pooled[bound] = pooled.get(bound, 0.0) + count
    return {
        "unmet_gpus_peak": Number(
            "unmet GPU demand, peak over the partitions",
            max((p.unmet_peak for p in partitions if not np.isnan(p.unmet_peak)), default=0.0),
            "count",
        ),
        "partitions_short": Number(
            "partitions short of GPUs", sum(p.verdict == SHORT for p in partitions), "count"
        ),
        "partition_hours_above_capacity": Number(
            "partition-hours with demand above capacity",
            sum(p.above_hours for p in partitions),
            "h",
        ),
        "idle_gpu_hours_while_waiting": Number(
            "idle GPU-hours while jobs waited",
            sum(p.idle_gpu_hours_waiting for p in partitions),
            "h",
        ),
        "jobs_started": Number("GPU jobs started", counters.started(pooled), "count"),
        "wait_p90_seconds": Number(
            "queue wait of GPU jobs, p90", counters.histogram_quantile(0.9, pooled), "s"
        ),
    }


def _partition_table(ctx: Context, partitions: list[PartitionDemand]) -> Table:
    rows: list[list[Cell]] = [
        [
            p.name,
            p.in_service,
            p.unavailable,
            p.allocated_share,
            p.unmet_peak,
            stats.percentile(p.unmet, 50),
            stats.mean(p.unmet),
            p.above_hours,
            p.above_share,
            p.worst_week,
            p.worst_week_share,
            p.idle_waiting_hours,
            p.idle_gpu_hours_waiting,
            p.verdict,
        ]
        for p in sorted(partitions, key=lambda p: (-_num(p.above_share), p.name))
    ]
    wait = ctx.cfg.scheduler_wait_while_idle
    return Table(
        "partitions",
        "Demand against capacity per partition",
        [
            Column("partition", "partition"),
            Column("gpus_in_service", "GPUs in service", "GPUs"),
            Column("gpus_unavailable", "GPUs unavailable", "GPUs"),
            Column("allocated_share", "allocated", "ratio"),
            Column("unmet_gpus_peak", "unmet, peak", "GPUs"),
            Column("unmet_gpus_typical", "unmet, typical", "GPUs"),
            Column("unmet_gpus_mean", "unmet, mean", "GPUs"),
            Column("hours_above_capacity", "hours above capacity", "h"),
            Column("share_above_capacity", "share above", "ratio"),
            Column("worst_week", "worst week"),
            Column("worst_week_share_above", "worst week above", "ratio"),
            Column("idle_while_waiting_hours", "idle while waiting", "h"),
            Column("idle_gpu_hours_while_waiting", "idle GPU-hours while waiting", "h"),
            Column("verdict", "verdict"),
        ],
        rows,
        note="Unmet: GPUs that jobs waiting for GPUs (Slurm's reasons Resources and "
        "Priority) ask for beyond the partition's idle GPUs; typical is the median of "
        "the step means, peak the highest reading. Above capacity: unmet above 0. Idle "
        f"while waiting: idle GPUs while a GPU job had waited more than {wait} "
        "(scheduler_wait_while_idle). In service: allocated or idle; unavailable: on "
        "drained, down or reserved nodes. Worst week: the 7 days of the range, sliding by "
        "a step, with the most hours above capacity. Verdict: short of GPUs when they were "
        "above capacity in more than "
        f"{units.percent(ctx.cfg.scheduler_short_of_gpus_fraction)} of its hours "
        "(scheduler_short_of_gpus_fraction); GPUs idle while jobs wait when that lasted "
        f"{units.percent(NOTABLE_IDLE_WAIT_SHARE)} of the hours or more.",
    )


def _num(value: float) -> float:
    return 0.0 if np.isnan(value) else value


def _wait_table(ctx: Context, waits: dict[tuple[str, ...], dict[float, float]]) -> Table:
    rows: list[list[Cell]] = [
        [ctx.rack_name(key[0], key[1]), *counters.wait_cells(cumulative)]
        for key, cumulative in sorted(waits.items())
    ]
    return Table(
        "waits",
        "Queue wait of GPU jobs per partition (from eligible to start to started)",
        [Column("partition", "partition"), *counters.wait_columns()],
        rows,
        note="Percentiles as PromQL's histogram_quantile reads them off the increase of "
        "nvwatch_scheduler_wait_seconds over the range: linear within a bucket.",
    )


def _wait_finding(ctx: Context, waits: dict[tuple[str, ...], dict[float, float]]) -> str:
    ranked = [
        (counters.histogram_quantile(0.9, c), ctx.rack_name(k[0], k[1])) for k, c in waits.items()
    ]
    known = sorted(((p90, name) for p90, name in ranked if p90 is not None), reverse=True)
    if not known:
        return "No GPU job started in the range."
    p90, name = known[0]
    return (
        f"GPU jobs waited longest in {name}: 1 in 10 waited more than {units.duration(p90)} "
        "from eligible to started."
    )


def _plot(ctx: Context, section: Section, partitions: list[PartitionDemand]) -> None:
    shown = [p for p in partitions if _num(p.unmet_peak) > 0]
    if not shown:
        return
    peaks = ctx.frame("sched_unmet_peak").by((ctx.cfg.cluster_label, "partition"))
    lines = []
    for index, p in enumerate(shown[: len(style.RACK_COLOURS)]):
        times, values = ctx.daily(peaks[p.key], "max")
        colour = style.RACK_COLOURS[index]
        lines.append(plots.Line(p.name, times, values, colour))
    section.plots.append(
        plots.time_lines(
            "unmet_by_partition",
            "Unmet GPU demand per partition, daily peak: GPUs jobs waited for beyond the idle",
            lines,
            "GPUs",
        )
    )
