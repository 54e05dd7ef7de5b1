"""Utilization: GPU-hours available / allocated / busy, their spread, trend and the idlest nodes."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import numpy as np

from nvwatch.report import plots, stats, style, units
from nvwatch.report.allocation import Allocations
from nvwatch.report.context import Context, NodeKey
from nvwatch.report.frame import Array
from nvwatch.report.model import Column, Number, Section, Table

# A node averaging under this utilization over a week did (almost) nothing that week:
# a drained node nobody undrained, a reservation nobody used.
IDLE_RATIO = 0.05
SHOWN_NODES = 5
GPM = (
    ("sm_active", "SM active"),
    ("tensor_active", "tensor active"),
    ("dram_active", "DRAM active"),
)


def utilization(ctx: Context, allocs: Allocations | None) -> Section:
    up, util = ctx.frame("gpu_up"), ctx.frame("gpu_util")
    section = Section(
        "utilization",
        "Utilization",
        coverage=util.coverage(),
        coverage_note="share of GPU x step cells with a utilization sample",
    )
    if not len(up):
        section.absent = "no nvwatch_gpu_up series in the range"
        return section
    gpu_key = (*ctx.node_labels, "gpu", "uuid")
    util_of = dict(zip(util.keys(gpu_key), util.values, strict=True))
    nodes = ctx.nodes("gpu_up")
    available = {k: ctx.hours(row) for k, row in zip(up.keys(gpu_key), up.values, strict=True)}
    busy = {k: ctx.hours(util_of[k]) if k in util_of else 0.0 for k in available}
    allocated = allocs.per_node(ctx) if allocs is not None else None

    def rollup(name: str, heading: str, pick: Callable[[NodeKey], str]) -> Table:
        return _rollup_table(
            name, heading, pick, nodes, list(available), available, busy, allocated
        )

    cluster_table = rollup("by_cluster", "cluster", lambda n: n[0])
    section.tables += [
        rollup("by_class", "node class", lambda n: n[2]),
        rollup("by_rack", "rack", lambda n: n[1]),
        cluster_table,
    ]
    total_available = sum(available.values())
    total_busy = sum(busy.values())
    per_gpu_mean = {k: stats.mean(v) for k, v in util_of.items()}
    section.numbers.update(
        {
            "nodes": Number("nodes", len(set(nodes)), "count"),
            "gpus": Number("GPUs", len(available), "count"),
            "installed_gpu_hours": Number(
                "GPU-hours installed", len(available) * ctx.window.hours, "h"
            ),
            "available_gpu_hours": Number("GPU-hours available", total_available, "h"),
            "busy_gpu_hours": Number("GPU-hours busy", total_busy, "h"),
            "busy_ratio": Number(
                "busy share of available",
                total_busy / total_available if total_available else None,
                "ratio",
            ),
            "gpu_mean_utilization_p10": Number(
                "per-GPU mean utilization, 10th percentile",
                stats.percentile(list(per_gpu_mean.values()), 10),
                "ratio",
            ),
            "gpu_mean_utilization_p50": Number(
                "per-GPU mean utilization, median",
                stats.percentile(list(per_gpu_mean.values()), 50),
                "ratio",
            ),
            "gpu_mean_utilization_p90": Number(
                "per-GPU mean utilization, 90th percentile",
                stats.percentile(list(per_gpu_mean.values()), 90),
                "ratio",
            ),
        }
    )
    if allocated is not None:
        total_allocated = sum(allocated.values())
        section.numbers["allocated_gpu_hours"] = Number("GPU-hours allocated", total_allocated, "h")
        section.numbers["allocated_ratio"] = Number(
            "allocated share of available",
            total_allocated / total_available if total_available else None,
            "ratio",
        )
    node_util = _node_utilization(ctx)
    _node_tables(ctx, section, node_util)
    _gpm_table(ctx, section)
    _plots(ctx, section, util_of, per_gpu_mean)
    _findings(ctx, section, node_util)
    return section


def _rollup_table(
    name: str,
    heading: str,
    pick: Callable[[NodeKey], str],
    nodes: list[NodeKey],
    gpus: list[tuple[str, ...]],
    available: dict[tuple[str, ...], float],
    busy: dict[tuple[str, ...], float],
    allocated: dict[NodeKey, float] | None,
) -> Table:
    groups: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    node_sets: dict[str, set[NodeKey]] = defaultdict(set)
    for node, gpu in zip(nodes, gpus, strict=True):
        group = groups[pick(node)]
        group["gpus"] += 1
        group["available"] += available[gpu]
        group["busy"] += busy[gpu]
        node_sets[pick(node)].add(node)
    if allocated is not None:
        for node, hours in allocated.items():
            groups[pick(node)]["allocated"] += hours
    columns = [
        Column("group", heading),
        Column("nodes", "nodes", "count"),
        Column("gpus", "GPUs", "count"),
        Column("available_gpu_hours", "available", "h"),
        *([Column("allocated_gpu_hours", "allocated", "h")] if allocated is not None else []),
        Column("busy_gpu_hours", "busy", "h"),
        Column("busy_ratio", "busy / available", "ratio"),
    ]
    rows = []
    for group_name in sorted(groups):
        g = groups[group_name]
        rows.append(
            [
                group_name,
                len(node_sets[group_name]),
                int(g["gpus"]),
                g["available"],
                *([g["allocated"]] if allocated is not None else []),
                g["busy"],
                g["busy"] / g["available"] if g["available"] else None,
            ]
        )
    return Table(name, f"GPU-hours by {heading}", columns, rows)


def _node_utilization(ctx: Context) -> dict[NodeKey, Array]:
    """Mean utilization of each node's GPUs per step."""
    util = ctx.frame("gpu_util")
    rows: dict[NodeKey, list[Array]] = defaultdict(list)
    for node, row in zip(ctx.nodes("gpu_util"), util.values, strict=True):
        rows[node].append(row)
    return {node: stats.row_means(np.stack(r).T) for node, r in rows.items()}


def _node_tables(ctx: Context, section: Section, node_util: dict[NodeKey, Array]) -> None:
    means = sorted(((stats.mean(v), n) for n, v in node_util.items()), key=lambda p: (p[0], p[1]))
    columns = [
        Column("node", "node"),
        Column("node_class", "class"),
        Column("rack", "rack"),
        Column("mean_utilization", "mean utilization", "ratio"),
    ]

    def row(mean: float, node: NodeKey) -> list[str | float | None]:
        return [ctx.node_name(node), node[2], node[1], mean]

    section.tables.append(
        Table("idlest_nodes", "Idlest nodes", columns, [row(m, n) for m, n in means[:SHOWN_NODES]])
    )
    section.tables.append(
        Table(
            "busiest_nodes",
            "Busiest nodes",
            columns,
            [row(m, n) for m, n in means[::-1][:SHOWN_NODES]],
        )
    )
    weeks = range(ctx.window.weeks)
    section.tables.append(
        Table(
            "node_weeks",
            "Mean utilization per node and week",
            [
                Column("node", "node"),
                Column("node_class", "class"),
                *(Column(f"week_{w + 1}", ctx.window.week_label(w), "ratio") for w in weeks),
            ],
            [
                [ctx.node_name(n), n[2], *ctx.weekly(node_util[n], "mean")]
                for _, n in sorted((ctx.node_name(n), n) for n in node_util)
            ],
        )
    )


def _gpm_table(ctx: Context, section: Section) -> None:
    """SM / tensor / DRAM activity per class, where GPM (Hopper) or DCP fields exist."""
    per_class: dict[str, dict[str, float]] = defaultdict(dict)
    for metric, _heading in GPM:
        rows: dict[str, list[Array]] = defaultdict(list)
        for node, row in ctx.by_node(f"class_{metric}").items():
            rows[node[2]].append(row)
        for node_class, class_rows in rows.items():
            per_class[node_class][metric] = stats.mean(np.concatenate(class_rows))
    if not per_class:
        return
    section.tables.append(
        Table(
            "activity_by_class",
            "SM, tensor and DRAM activity by class (where the GPUs report it)",
            [Column("node_class", "class"), *(Column(m, h, "ratio") for m, h in GPM)],
            [[c, *(per_class[c].get(m) for m, _ in GPM)] for c in sorted(per_class)],
        )
    )


def _plots(
    ctx: Context,
    section: Section,
    util_of: dict[tuple[str, ...], Array],
    per_gpu_mean: dict[tuple[str, ...], float],
) -> None:
    class_index = 2  # (cluster, rack, node_class, instance, gpu, uuid)
    by_class: dict[str, list[float]] = defaultdict(list)
    for key, mean in per_gpu_mean.items():
        if not np.isnan(mean):
            by_class[key[class_index]].append(mean)
    section.plots.append(
        plots.histogram(
            "gpu_utilization_distribution",
            "How busy each GPU was over the range (mean utilization per GPU)",
            dict(sorted(by_class.items())),
            "ratio",
            bins=[i / 20 for i in range(21)],
            ylabel="GPUs",
        )
    )
    class_rows: dict[str, list[Array]] = defaultdict(list)
    for key, row in util_of.items():
        class_rows[key[class_index]].append(row)
    lines = []
    for node_class in sorted(class_rows):
        times, values = ctx.daily(stats.row_means(np.stack(class_rows[node_class]).T))
        lines.append(plots.Line(node_class, times, values, style.class_colour(node_class)))
    section.plots.append(
        plots.time_lines(
            "utilization_trend", "Mean GPU utilization per class, by day", lines, "ratio"
        )
    )


def _findings(ctx: Context, section: Section, node_util: dict[NodeKey, Array]) -> None:
    n = section.numbers
    busy = n["busy_ratio"].value
    sentence = (
        f"The {units.count(n['gpus'].value)} GPUs were busy {units.percent(busy)} of their "
        f"{units.hours(n['available_gpu_hours'].value)} available GPU-hours"
    )
    if "allocated_ratio" in n:
        sentence += f" and allocated {units.percent(n['allocated_ratio'].value)}"
    section.findings.append(
        sentence
        + f"; the median GPU averaged {units.percent(n['gpu_mean_utilization_p50'].value)}."
    )
    idle = []
    for node, row in sorted(node_util.items()):
        weeks = ctx.weekly(row, "mean")
        idle_weeks = [w for w, v in enumerate(weeks) if v < IDLE_RATIO]
        if idle_weeks:
            idle.append((node, idle_weeks))
    section.numbers["idle_node_weeks"] = Number(
        f"node-weeks under {units.percent(IDLE_RATIO)} mean utilization",
        sum(len(w) for _, w in idle),
        "count",
    )
    if idle:
        named = ", ".join(
            f"{ctx.node_name(node)} ({ctx.window.week_label(weeks[0])}"
            + (f" and {len(weeks) - 1} more" if len(weeks) > 1 else "")
            + ")"
            for node, weeks in idle[:SHOWN_NODES]
        )
        section.findings.append(
            f"{len(idle)} node(s) sat idle (under {units.percent(IDLE_RATIO)}) for at least a "
            f"week: {named}. Reclaim or investigate them."
        )
