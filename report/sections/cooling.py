"""Cooling: the air each rack breathes against its classes' envelope, and fan and supply events.

Everything here is read by the nodes' BMCs (the probe job, mixin config
`bmc_job_selector`), step by step as air.py reads it: a rack is above its envelope in a
step where any of its nodes is above its own class's; an event is a run of steps in
which a fan was low or a supply failed.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from nvwatch.report import plots, stats, units
from nvwatch.report.air import (
    FAN_STOPPED,
    SUPPLY_FAILED,
    Event,
    fan_events,
    inlet_above,
    supply_events,
)
from nvwatch.report.context import Context, NodeKey
from nvwatch.report.frame import Array
from nvwatch.report.model import Cell, Column, Number, Section, Table
from nvwatch.report.window import iso_time

SHOWN_RACKS = 8  # one colour each: at most len(style.RACK_COLOURS)
QUIET = "No rack's inlet air left its envelope, no fan stopped and no power supply failed."


def cooling(ctx: Context) -> Section:
    inlet = ctx.by_node("bmc_inlet")
    probed = set(ctx.by_node("bmc_up")) | set(inlet)
    section = Section(
        "cooling",
        "Cooling",
        coverage=_coverage(ctx, inlet, probed),
        coverage_note="share of probed-BMC x step cells with an inlet air reading",
    )
    events = fan_events(ctx) + supply_events(ctx)
    if not probed and not events:
        section.absent = (
            f"no BMC series ({ctx.cfg.bmc_job_selector}) in the range: inlet air, fans and "
            "power supplies are read from each node's BMC by the nvwatch-bmc probe job"
        )
        return section
    above = {n: inlet_above(ctx, n, v) for n, v in inlet.items()}
    racks = _rack_rows(ctx, inlet, above)
    section.numbers.update(
        {
            "inlet_p95_celsius": Number(
                "inlet air, p95 of node step averages",
                stats.percentile(np.concatenate(list(inlet.values())), 95) if inlet else None,
                "°C",
            ),
            "inlet_rack_hours_above": Number(
                "rack-hours with inlet air above its envelope",
                sum(float(r[7]) for r in racks if isinstance(r[7], float)),
                "h",
            ),
            "fan_events": Number(
                "fan events", sum(e.kind != SUPPLY_FAILED for e in events), "count"
            ),
            "supply_events": Number(
                "power supply failures", sum(e.kind == SUPPLY_FAILED for e in events), "count"
            ),
        }
    )
    section.tables.append(_rack_table(racks))
    section.tables.append(_node_table(ctx, inlet, above, ctx.by_node("bmc_inlet_peak")))
    section.tables.append(_event_table(ctx, events))
    section.findings.extend(_findings(ctx, section, racks, events))
    if inlet:
        _plot(ctx, section, inlet)
    return section


def _coverage(ctx: Context, inlet: dict[NodeKey, Array], probed: set[NodeKey]) -> float:
    if not probed:
        return float("nan")
    present = sum(int(np.sum(~np.isnan(v))) for v in inlet.values())
    return present / (len(probed) * ctx.window.steps)


def _racks(inlet: dict[NodeKey, Array]) -> dict[tuple[str, str], list[NodeKey]]:
    members: dict[tuple[str, str], list[NodeKey]] = defaultdict(list)
    for node in sorted(inlet):
        members[(node[0], node[1])].append(node)
    return members


def _envelope(ctx: Context, nodes: list[NodeKey]) -> float | None:
    """The strictest envelope of the rack's classes (None when none is known)."""
    known = [e for e in (ctx.inlet_max_celsius(n[2]) for n in nodes) if e is not None]
    return min(known) if known else None


def _rack_rows(
    ctx: Context, inlet: dict[NodeKey, Array], above: dict[NodeKey, Array]
) -> list[list[Cell]]:
    peak = ctx.by_node("bmc_inlet_peak")
    rows: list[list[Cell]] = []
    for key, nodes in _racks(inlet).items():
        pooled = np.concatenate([inlet[n] for n in nodes])
        envelope = _envelope(ctx, nodes)
        any_above = np.max(np.stack([above[n] for n in nodes]), axis=0)
        rows.append(
            [
                ctx.rack_name(*key),
                len(nodes),
                envelope,
                stats.percentile(pooled, 50),
                stats.percentile(pooled, 95),
                stats.peak(np.concatenate([peak.get(n, inlet[n]) for n in nodes])),
                envelope - stats.percentile(pooled, 95) if envelope is not None else None,
                ctx.hours(any_above) if envelope is not None else None,
                sum(ctx.hours(above[n]) for n in nodes) if envelope is not None else None,
                ctx.worst_week(any_above),
            ]
        )
    rows.sort(key=lambda r: (-(r[7] if isinstance(r[7], float) else 0.0), -_num(r[4])))
    return rows


def _num(value: Cell) -> float:
    return value if isinstance(value, float) and not np.isnan(value) else 0.0


def _rack_table(rows: list[list[Cell]]) -> Table:
    return Table(
        "inlet_by_rack",
        "Inlet air per rack against its envelope (percentiles of node step averages)",
        [
            Column("rack", "rack"),
            Column("nodes", "nodes", "count"),
            Column("envelope_celsius", "envelope", "°C"),
            Column("p50_celsius", "p50", "°C"),
            Column("p95_celsius", "p95", "°C"),
            Column("max_celsius", "max", "°C"),
            Column("p95_margin_celsius", "margin at p95", "°C"),
            Column("hours_above", "hours above", "h"),
            Column("node_hours_above", "node-hours above", "h"),
            Column("worst_week", "worst week"),
        ],
        rows,
        note="Envelope: the highest operating inlet air of the rack's node classes (mixin "
        "config node_classes, inlet_max_celsius; the strictest where they differ). Hours "
        "above: steps in which any node of the rack was above its own class's.",
    )


def _node_table(
    ctx: Context,
    inlet: dict[NodeKey, Array],
    above: dict[NodeKey, Array],
    peak: dict[NodeKey, Array],
) -> Table:
    rows: list[list[Cell]] = [
        [
            ctx.node_name(node),
            node[2],
            node[1],
            ctx.inlet_max_celsius(node[2]),
            stats.percentile(values, 50),
            stats.percentile(values, 95),
            stats.peak(peak.get(node, values)),
            ctx.hours(above[node]),
        ]
        for node, values in inlet.items()
    ]
    rows.sort(key=lambda r: (-_num(r[7]), -_num(r[5])))
    return Table(
        "inlet_by_node",
        "Inlet air per node (warmest first)",
        [
            Column("node", "node"),
            Column("node_class", "class"),
            Column("rack", "rack"),
            Column("envelope_celsius", "envelope", "°C"),
            Column("p50_celsius", "p50", "°C"),
            Column("p95_celsius", "p95", "°C"),
            Column("max_celsius", "max", "°C"),
            Column("hours_above", "hours above", "h"),
        ],
        rows,
    )


def _event_table(ctx: Context, events: list[Event]) -> Table:
    rows: list[list[Cell]] = [
        [
            e.kind,
            ctx.node_name(e.node),
            e.node[2],
            e.node[1],
            e.sensor,
            _time(ctx, e.first),
            _time(ctx, e.last),
            e.hours,
            e.lowest_rpm,
        ]
        for e in sorted(events, key=lambda e: (e.first, e.kind))
    ]
    return Table(
        "events",
        "Fan and power supply events, by node and window",
        [
            Column("kind", "event"),
            Column("node", "node"),
            Column("node_class", "class"),
            Column("rack", "rack"),
            Column("sensor", "sensor"),
            Column("start", "from"),
            Column("end", "to"),
            Column("hours", "hours", "h"),
            Column("lowest_rpm", "lowest", "rpm"),
        ],
        rows,
        note=f"A fan below {ctx.cfg.fan_stopped_rpm:g} rpm (fan_stopped_rpm) is stopped; "
        "critical: its BMC sensor state. "
        "Windows are whole steps of the report; a supply's hours count the share of each step "
        "it reported a failure.",
    )


def _findings(
    ctx: Context, section: Section, racks: list[list[Cell]], events: list[Event]
) -> list[str]:
    hot = [r for r in racks if _num(r[7]) > 0]
    p95 = units.celsius(section.numbers["inlet_p95_celsius"].value)
    findings = [_hot_finding(section, hot)] if hot else []
    fans = [e for e in events if e.kind != SUPPLY_FAILED]
    if fans:
        # a stopped fan before a slow one, then the longest
        worst = min(fans, key=lambda e: (e.kind != FAN_STOPPED, -e.hours))
        findings.append(
            f"{len(fans)} fan event(s), {units.hours(sum(e.hours for e in fans))} in all; "
            f"{worst.sensor} of {ctx.node_name(worst.node)} "
            f"{'stopped' if worst.kind == FAN_STOPPED else 'ran critical'} for "
            f"{units.hours(worst.hours)} from {_time(ctx, worst.first)}: replace it; a node "
            "with a dead fan heats its GPUs on normal inlet air."
        )
    supplies = [e for e in events if e.kind == SUPPLY_FAILED]
    if supplies:
        worst = max(supplies, key=lambda e: e.hours)
        findings.append(
            f"{len(supplies)} power supply failure(s), "
            f"{units.hours(sum(e.hours for e in supplies))} in all; {worst.sensor} of "
            f"{ctx.node_name(worst.node)} failed for {units.hours(worst.hours)} from "
            f"{_time(ctx, worst.first)}: its node ran on its other supplies; replace it "
            "before the next failure takes the node down."
        )
    if not findings:
        return [QUIET, f"Inlet air p95: {p95}."]
    if not hot:
        findings.append(f"Inlet air stayed within every class's envelope (p95 {p95}).")
    return findings


def _hot_finding(section: Section, hot: list[list[Cell]]) -> str:
    worst = hot[0]
    total = units.hours(section.numbers["inlet_rack_hours_above"].value)
    return (
        f"Inlet air ran above its envelope on {len(hot)} rack(s), {total} in all; the "
        f"worst, {worst[0]} ({units.hours(_num(worst[7]))}, up to "
        f"{units.celsius(_num(worst[5]))} against {units.celsius(_num(worst[2]))}, mostly "
        f"in the {worst[9]}), is the room, not its nodes: check the aisle's cooling and "
        "containment before its GPUs slow down."
    )


def _time(ctx: Context, step: int) -> str:
    """The start of a step (events begin there)."""
    return iso_time(ctx.window.start + step * ctx.window.step)


def _plot(ctx: Context, section: Section, inlet: dict[NodeKey, Array]) -> None:
    members = _racks(inlet)
    steps = ctx.window.steps
    hottest = {k: stats.column_max([inlet[n] for n in ns], steps) for k, ns in members.items()}
    shown = sorted(hottest, key=lambda k: -_num(stats.peak(hottest[k])))[:SHOWN_RACKS]
    lines = []
    for key in sorted(shown):
        times, values = ctx.daily(hottest[key], "max")
        lines.append(plots.Line(ctx.rack_name(*key), times, values, ctx.rack_colour(key[1])))
    envelopes = sorted({e for k in shown if (e := _envelope(ctx, members[k])) is not None})
    section.plots.append(
        plots.time_lines(
            "inlet_by_rack",
            "Highest hourly inlet air per rack (BMC), by day, against the envelopes",
            lines,
            "°C",
            [plots.Limit("envelope", e) for e in envelopes],
        )
    )
