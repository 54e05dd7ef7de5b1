"""Jobs: how well the jobs of the range used what they held, what they cost in energy,
and the advice that would save most GPU-hours, from the job summaries kept at each job's
end (`nvwatch job --store`, deploy/slurm/nvwatch-job-epilog.sh) rather than from
Prometheus: a month of jobs, one summary each, is what a review of jobs reads.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from nvwatch.mixin.job_verdicts import IDLE_GPUS, words
from nvwatch.report.jobs.model import J_PER_KWH, JobSummary
from nvwatch.report.model import Column, Number, Section, Table

# GPU-time-weighted efficiency bands: the share of GPU-hours in jobs this busy
BANDS = ((0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.01))
TOP_NOTES = 5


def jobs(summaries: Iterable[JobSummary], source: str) -> Section:
    chosen = list(summaries)
    section = Section(
        "jobs",
        "Jobs",
        coverage=float("nan"),
        coverage_note="job summaries kept at each job's end; a job without one is not counted",
    )
    if not chosen:
        section.absent = (
            f"No job summary in {source} for the range: `nvwatch job --store` (the slurmctld "
            "epilog in deploy/slurm/) keeps one per job."
        )
        return section
    total = sum(s.gpu_hours for s in chosen)
    idle = _idle_gpu_hours(chosen)
    section.numbers = {
        "jobs": Number("jobs with a summary", float(len(chosen)), "count"),
        "gpu_hours": Number("GPU-hours they held", total, "h"),
        "idle_gpu_hours": Number("GPU-hours held by GPUs they did not use", idle, "h"),
    }
    section.tables = [
        _bands(chosen, total),
        _by(chosen, "accounts", "Per account", lambda s: s.account or "(none)", idle=True),
        _by(chosen, "partitions", "Per partition", lambda s: s.partition or "(unknown)"),
        _notes(chosen),
    ]
    section.findings.append(_finding(chosen, total, idle))
    return section


def _bands(chosen: list[JobSummary], total: float) -> Table:
    rows: list[list[str | float | int | None]] = []
    for low, high in BANDS:
        inside = [s for s in chosen if s.utilization is not None and low <= s.utilization < high]
        hours = sum(s.gpu_hours for s in inside)
        label = f"{low:.0%}-{min(high, 1.0):.0%}"
        rows.append([label, len(inside), hours, hours / total if total else None])
    return Table(
        "efficiency",
        "GPU-hours by how busy the job kept its GPUs (mean utilization over its life)",
        [
            Column("band", "utilization"),
            Column("jobs", "jobs", "count"),
            Column("gpu_hours", "GPU-hours", "h"),
            Column("share", "share of GPU-hours", "ratio"),
        ],
        rows,
    )


def _by(
    chosen: list[JobSummary],
    name: str,
    title: str,
    key: Callable[[JobSummary], str],
    idle: bool = False,
) -> Table:
    groups: dict[str, list[JobSummary]] = defaultdict(list)
    for s in chosen:
        groups[key(s)].append(s)
    rows: list[list[str | float | int | None]] = []
    for group, members in sorted(groups.items(), key=lambda g: -sum(s.gpu_hours for s in g[1])):
        energy = [s.energy_joules for s in members if s.energy_joules is not None]
        row: list[str | float | int | None] = [
            group,
            len(members),
            sum(s.gpu_hours for s in members),
        ]
        if idle:
            row.append(_idle_gpu_hours(members))
        row.append(sum(energy) / J_PER_KWH if energy else None)
        rows.append(row)
    columns = [
        Column(name.rstrip("s"), name.rstrip("s")),
        Column("jobs", "jobs", "count"),
        Column("gpu_hours", "GPU-hours", "h"),
    ]
    if idle:
        columns.append(Column("idle_gpu_hours", "GPU-hours held idle", "h"))
    columns.append(Column("energy_kwh", "energy (nodes' share)", "kWh"))
    return Table(name, f"{title}: GPU-hours and energy", columns, rows)


def _notes(chosen: list[JobSummary]) -> Table:
    cost: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    worst: dict[str, tuple[float, str]] = {}
    for s in chosen:
        for note in s.notes:
            cost[note.code] += note.gpu_hours
            count[note.code] += 1
            if note.gpu_hours > worst.get(note.code, (-1.0, ""))[0]:
                worst[note.code] = (note.gpu_hours, f"{s.job_id}: {note.text}")
    top = sorted(cost, key=lambda c: -cost[c])[:TOP_NOTES]
    return Table(
        "notes",
        f"The {TOP_NOTES} notes that concern most GPU-hours",
        [
            Column("note", "note"),
            Column("jobs", "jobs", "count"),
            Column("gpu_hours", "GPU-hours", "h"),
            Column("example", "costliest job"),
        ],
        [[words(c), count[c], cost[c], worst[c][1]] for c in top],
    )


def _idle_gpu_hours(summaries: Iterable[JobSummary]) -> float:
    """GPU-hours the jobs held on GPUs they never used (their idle-gpus notes)."""
    return sum(n.gpu_hours for s in summaries for n in s.notes if n.code == IDLE_GPUS)


def _finding(chosen: list[JobSummary], total: float, idle: float) -> str:
    if not idle:
        return f"The {len(chosen)} jobs with a summary used every GPU they held."
    by_account: dict[str, float] = defaultdict(float)
    for s in chosen:
        by_account[s.account or "(none)"] += _idle_gpu_hours([s])
    account = max(by_account, key=lambda a: by_account[a])
    return (
        f"Jobs held {idle:,.0f} GPU-hours ({idle / total:.0%} of their {total:,.0f}) on GPUs "
        f"they never used; account {account} held {by_account[account]:,.0f} of them: "
        "ask for fewer GPUs."
    )
