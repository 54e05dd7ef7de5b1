"""Health: XIDs by code and node, ECC and row-remap events, GPUs lost, agent downtime."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from nvwatch.report import units
from nvwatch.report.context import Context, NodeKey
from nvwatch.report.frame import Array, counter_events
from nvwatch.report.model import Cell, Column, Number, Section, Table
from nvwatch.report.window import iso_time


def health(ctx: Context) -> Section:
    up = ctx.frame("gpu_up")
    section = Section(
        "health",
        "Health",
        coverage=up.coverage(),
        coverage_note="share of GPU x step cells with an nvwatch_gpu_up sample",
    )
    if not len(up):
        section.absent = "no nvwatch_gpu_up series in the range"
        return section
    first_seen = _first_seen(ctx)
    _xids(ctx, section, first_seen)
    _memory(ctx, section)
    _lost_gpus(ctx, section)
    _agent_downtime(ctx, section)
    return section


def _first_seen(ctx: Context) -> dict[NodeKey, int]:
    """Each node's first step with data: a counter series appearing later is new."""
    seen: dict[NodeKey, int] = {}
    for node, row in ctx.by_node("gpu_samples").items():
        present = np.flatnonzero(~np.isnan(row))
        if present.size:
            seen[node] = int(present[0])
    return seen


def _new_series(ctx: Context, name: str, first_seen: dict[NodeKey, int]) -> Array:
    frame = ctx.frame(name)
    flags = np.zeros(len(frame), dtype=bool)
    for row, labels in enumerate(frame.labels):
        present = np.flatnonzero(~np.isnan(frame.values[row]))
        node_first = first_seen.get(ctx.node_of(labels))
        flags[row] = bool(present.size) and node_first is not None and present[0] > node_first
    return flags


def _xids(ctx: Context, section: Section, first_seen: dict[NodeKey, int]) -> None:
    frame = ctx.frame("xid")
    events = counter_events(frame.values, _new_series(ctx, "xid", first_seen))
    critical = set(ctx.cfg.critical_xids)
    times = ctx.window.times()
    rows: list[list[Cell]] = []
    by_code: dict[str, float] = defaultdict(float)
    for labels, row in zip(frame.labels, events, strict=True):
        total = float(row.sum())
        if total <= 0:
            continue
        node = ctx.node_of(labels)
        xid = labels.get("xid", "")
        by_code[xid] += total
        first = int(np.flatnonzero(row > 0)[0])
        rows.append(
            [
                ctx.node_name(node),
                labels.get("gpu", ""),
                node[2],
                xid,
                "yes" if xid in critical else "no",
                total,
                iso_time(times[first] - ctx.window.step),
                ctx.worst_week(row),
            ]
        )
    rows.sort(key=lambda r: (str(r[0]), str(r[1]), int(str(r[3])) if str(r[3]).isdigit() else 0))
    total_critical = sum(v for k, v in by_code.items() if k in critical)
    section.numbers["xid_events"] = Number("XID events", sum(by_code.values()), "count")
    section.numbers["critical_xid_events"] = Number("critical XID events", total_critical, "count")
    section.tables.append(
        Table(
            "xids",
            "XID events by node and code",
            [
                Column("node", "node"),
                Column("gpu", "GPU"),
                Column("node_class", "class"),
                Column("xid", "XID"),
                Column("critical", "critical"),
                Column("events", "events", "count"),
                Column("first", "first in step from"),
                Column("worst_week", "worst week"),
            ],
            rows,
        )
    )
    section.tables.append(
        Table(
            "xids_by_code",
            "XID events by code",
            [
                Column("xid", "XID"),
                Column("critical", "critical"),
                Column("events", "events", "count"),
            ],
            [
                [c, "yes" if c in critical else "no", v]
                for c, v in sorted(by_code.items(), key=lambda kv: -kv[1])
            ],
        )
    )
    if total_critical:
        nodes = sorted({str(r[0]) for r in rows if r[4] == "yes"})
        section.findings.append(
            f"{units.count(total_critical)} critical XID(s) on {', '.join(nodes[:5])}"
            + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
            + ": drain, reset and, if they recur, RMA those GPUs."
        )


def _memory(ctx: Context, section: Section) -> None:
    rows: list[list[Cell]] = []
    totals: dict[str, float] = defaultdict(float)
    for frame_name, what in (("ecc", "ECC"), ("remapped_rows", "remapped rows")):
        frame = ctx.frame(frame_name)
        for labels, row in zip(frame.labels, counter_events(frame.values), strict=True):
            total = float(row.sum())
            if total <= 0:
                continue
            kind = labels.get("type") or labels.get("kind", "")
            totals[f"{what} {kind}"] += total
            node = ctx.node_of(labels)
            rows.append([ctx.node_name(node), node[2], what, kind, total, ctx.worst_week(row)])
    section.numbers["ecc_uncorrected"] = Number(
        "uncorrected ECC errors", totals["ECC uncorrected"], "count"
    )
    section.numbers["ecc_corrected"] = Number(
        "corrected ECC errors", totals["ECC corrected"], "count"
    )
    section.numbers["rows_remapped"] = Number(
        "HBM rows remapped",
        totals["remapped rows correctable"] + totals["remapped rows uncorrectable"],
        "count",
    )
    section.tables.append(
        Table(
            "memory_errors",
            "ECC errors and HBM row remaps per node",
            [
                Column("node", "node"),
                Column("node_class", "class"),
                Column("what", "what"),
                Column("type", "type"),
                Column("events", "events", "count"),
                Column("worst_week", "worst week"),
            ],
            rows,
        )
    )
    if totals["ECC uncorrected"]:
        section.findings.append(
            f"{units.count(totals['ECC uncorrected'])} uncorrected ECC error(s): check the row "
            "remap state of those GPUs and plan their replacement."
        )


def _lost_gpus(ctx: Context, section: Section) -> None:
    """GPUs that stopped answering NVML (up 0) while their node kept reporting."""
    up = ctx.frame("gpu_up")
    rows: list[list[Cell]] = []
    times = ctx.window.times()
    for labels, row in zip(up.labels, up.values, strict=True):
        down = np.where(np.isnan(row), 0.0, 1.0 - row)
        hours = ctx.hours(down)
        if hours <= 0:
            continue
        node = ctx.node_of(labels)
        first = int(np.flatnonzero(down > 0)[0])
        rows.append(
            [
                ctx.node_name(node),
                labels.get("gpu", ""),
                node[2],
                hours,
                iso_time(times[first] - ctx.window.step),
            ]
        )
    rows.sort(key=lambda r: -(r[3] if isinstance(r[3], float) else 0.0))
    section.numbers["gpus_lost"] = Number("GPUs lost at some point", len(rows), "count")
    section.numbers["gpu_hours_lost"] = Number(
        "GPU-hours lost", sum(r[3] for r in rows if isinstance(r[3], float)), "h"
    )
    section.tables.append(
        Table(
            "gpus_lost",
            "GPUs lost (nvwatch_gpu_up 0)",
            [
                Column("node", "node"),
                Column("gpu", "GPU"),
                Column("node_class", "class"),
                Column("hours_down", "hours down", "h"),
                Column("first", "first down in step from"),
            ],
            rows,
        )
    )
    if rows:
        section.findings.append(
            f"{len(rows)} GPU(s) fell off the bus or stopped answering for "
            f"{units.hours(section.numbers['gpu_hours_lost'].value)} in all."
        )


def _agent_downtime(ctx: Context, section: Section) -> None:
    """Steps in which a node sent nothing at all: agent down, node down or not scraped."""
    rows: list[list[Cell]] = []
    for node, row in sorted(ctx.by_node("gpu_samples").items()):
        missing = np.isnan(row)
        hours = float(missing.sum()) * ctx.window.step_hours
        if hours <= 0:
            continue
        rows.append([ctx.node_name(node), node[2], node[1], hours, 1.0 - float(missing.mean())])
    rows.sort(key=lambda r: -(r[3] if isinstance(r[3], float) else 0.0))
    section.numbers["agent_down_hours"] = Number(
        "node-hours without data", sum(r[3] for r in rows if isinstance(r[3], float)), "h"
    )
    section.tables.append(
        Table(
            "agent_downtime",
            "Nodes with gaps in their data (agent down, node down or not scraped)",
            [
                Column("node", "node"),
                Column("node_class", "class"),
                Column("rack", "rack"),
                Column("hours_without_data", "hours without data", "h"),
                Column("coverage", "coverage", "ratio"),
            ],
            rows,
        )
    )
    if rows:
        section.findings.append(
            f"{len(rows)} node(s) have gaps in their data, "
            f"{units.hours(section.numbers['agent_down_hours'].value)} in all; the worst is "
            f"{rows[0][0]} ({units.hours(rows[0][3] if isinstance(rows[0][3], float) else None)})."
        )
