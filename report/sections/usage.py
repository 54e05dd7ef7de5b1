"""Who used it: GPU-hours and efficiency per user, account and namespace; idle allocations."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from nvwatch.report import units
from nvwatch.report.allocation import Allocations
from nvwatch.report.context import Context
from nvwatch.report.model import Column, Number, Section, Table

TOP = 10
# An allocation using under this share of the GPUs it holds is "allocated but idle".
IDLE_JOB_RATIO = 0.1


def usage(ctx: Context, allocs: Allocations | None) -> Section:
    section = Section(
        "usage",
        "Who used it",
        coverage=float("nan"),
        coverage_note="share of allocated GPU x step cells with a utilization sample",
    )
    if allocs is None:
        section.absent = (
            "no nvwatch_gpu_allocation_info in the range: enable the Slurm or Kubernetes "
            "allocation source to see GPU-hours per user"
        )
        return section
    held_cells = allocs.held > 0
    section.coverage = _allocation_coverage(ctx, allocs) if held_cells.any() else float("nan")
    totals: dict[str, dict[str, list[float]]] = {}
    for owner in ("user", "account", "namespace"):
        totals[owner] = _by_owner(ctx, allocs, (owner,))
        if any(k for k in totals[owner]):
            section.tables.append(_owner_table(owner, totals[owner]))
    jobs = _by_owner(ctx, allocs, ("scheduler", "job_id", "namespace", "pod", "user"))
    section.tables.append(_idle_jobs_table(jobs))
    allocated = sum(ctx.hours(r) for r in allocs.held)
    busy = sum(ctx.hours(r) for r in allocs.busy)
    section.numbers.update(
        {
            "allocated_gpu_hours": Number("GPU-hours allocated", allocated, "h"),
            "allocated_busy_gpu_hours": Number("of which busy", busy, "h"),
            "allocation_efficiency": Number(
                "busy share of allocated GPU-hours",
                busy / allocated if allocated else None,
                "ratio",
            ),
            "jobs": Number("jobs", len(jobs), "count"),
        }
    )
    idle_jobs = [j for j in jobs.values() if j[0] and j[1] / j[0] < IDLE_JOB_RATIO]
    section.numbers["idle_jobs"] = Number(
        f"jobs using under {units.percent(IDLE_JOB_RATIO)} of their GPUs", len(idle_jobs), "count"
    )
    section.numbers["idle_job_gpu_hours"] = Number(
        "GPU-hours held by those jobs", sum(j[0] for j in idle_jobs), "h"
    )
    section.findings.append(
        f"Allocated GPUs were busy {units.percent(section.numbers['allocation_efficiency'].value)}"
        f" of their {units.hours(allocated)} allocated GPU-hours."
    )
    if idle_jobs:
        section.findings.append(
            f"{len(idle_jobs)} job(s) held {units.hours(sum(j[0] for j in idle_jobs))} of GPU time "
            f"while using under {units.percent(IDLE_JOB_RATIO)} of it: ask their owners to "
            "release GPUs they do not use."
        )
    return section


def _allocation_coverage(ctx: Context, allocs: Allocations) -> float:
    """The share of allocated GPU-steps whose GPU had a utilization sample."""
    gpu_key = (*ctx.node_labels, "gpu")
    util = dict(zip(ctx.frame("gpu_util").keys(gpu_key), ctx.frame("gpu_util").values, strict=True))
    held = present = 0
    for labels, row in zip(allocs.labels, allocs.held, strict=True):
        mask = row > 0
        held += int(mask.sum())
        values = util.get(tuple(labels.get(n, "") for n in gpu_key))
        if values is not None:
            present += int((~np.isnan(values[mask])).sum())
    return present / held if held else float("nan")


def _by_owner(ctx: Context, allocs: Allocations, names: tuple[str, ...]) -> dict[str, list[float]]:
    """owner -> [allocated GPU-hours, busy GPU-hours, GPUs held at once (max)]"""
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for labels, held, busy in zip(allocs.labels, allocs.held, allocs.busy, strict=True):
        owner = "/".join(labels.get(n, "") for n in names if labels.get(n))
        totals = out[owner]
        totals[0] += ctx.hours(held)
        totals[1] += ctx.hours(busy)
        totals[2] += 1  # allocation rows are job x GPU: their count is the job's GPUs
    return dict(out)


def _owner_table(owner: str, totals: dict[str, list[float]]) -> Table:
    rows = sorted(totals.items(), key=lambda kv: -kv[1][0])
    return Table(
        f"by_{owner}",
        f"GPU-hours by {owner}",
        [
            Column(owner, owner),
            Column("allocated_gpu_hours", "allocated", "h"),
            Column("busy_gpu_hours", "busy", "h"),
            Column("efficiency", "busy / allocated", "ratio"),
        ],
        [[k or "(none)", a, b, b / a if a else None] for k, (a, b, _) in rows],
    )


def _idle_jobs_table(jobs: dict[str, list[float]]) -> Table:
    idle = sorted(jobs.items(), key=lambda kv: -(kv[1][0] - kv[1][1]))[:TOP]
    return Table(
        "idle_jobs",
        "Allocated but idle: jobs by GPU-hours held and not used",
        [
            Column("job", "job"),
            Column("gpus", "GPUs", "count"),
            Column("allocated_gpu_hours", "allocated", "h"),
            Column("idle_gpu_hours", "idle", "h"),
            Column("efficiency", "busy / allocated", "ratio"),
        ],
        [[job, int(g), a, a - b, b / a if a else None] for job, (a, b, g) in idle],
    )
