"""Power: node and rack GPU power against TDP and the rack plan, time at cap, energy;
whole-node power where the BMCs measure it (power_node.py)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from nvwatch.report import plots, stats, units
from nvwatch.report.context import Context, NodeKey
from nvwatch.report.frame import Array
from nvwatch.report.model import Cell, Column, Number, Section, Table
from nvwatch.report.sections.power_node import add_measured_power

SHOWN_RACKS = 8  # one colour each: at most len(style.RACK_COLOURS)


def power(ctx: Context) -> Section:
    section = Section(
        "power",
        "Power",
        coverage=ctx.frame("node_power").coverage(),
        coverage_note="share of node x step cells with a GPU power sample",
    )
    avg = ctx.by_node("node_power")
    if not avg:
        section.absent = "no nvwatch_gpu_power_watts series in the range"
        return section
    peak = ctx.by_node("node_power_peak")
    tdp = {n: float(v[0]) for n, v in ctx.by_node("node_tdp").items()}
    cap = ctx.by_node("node_power_cap")
    gpus = _gpus_per_node(ctx)
    energy = {n: ctx.hours(v) / 1000 for n, v in avg.items()}  # W x h -> kWh
    section.tables.append(_node_table(ctx, avg, peak, tdp, cap, gpus, energy))
    racks = _rack_table(ctx, avg, peak, tdp, energy)
    section.tables.append(racks)
    section.tables.append(_energy_by_class(energy))
    section.tables.append(_cap_weeks(ctx, cap))
    total_cap = sum(ctx.hours(v) for v in cap.values())
    section.numbers.update(
        {
            "energy_kwh": Number("GPU energy over the range", sum(energy.values()), "kWh"),
            "mean_power_watts": Number(
                "mean GPU power", float(np.nansum([stats.mean(v) for v in avg.values()])), "W"
            ),
            "power_cap_gpu_hours": Number("GPU-hours at the power cap", total_cap, "h"),
        }
    )
    _rack_findings(ctx, section, racks)
    _cap_findings(ctx, section, cap)
    _plots(ctx, section, avg, tdp)
    add_measured_power(ctx, section, avg)
    return section


def _gpus_per_node(ctx: Context) -> dict[NodeKey, int]:
    counts: dict[NodeKey, int] = defaultdict(int)
    for node in ctx.nodes("gpu_up"):
        counts[node] += 1
    return counts


def _node_table(
    ctx: Context,
    avg: dict[NodeKey, Array],
    peak: dict[NodeKey, Array],
    tdp: dict[NodeKey, float],
    cap: dict[NodeKey, Array],
    gpus: dict[NodeKey, int],
    energy: dict[NodeKey, float],
) -> Table:
    rows: list[list[Cell]] = []
    for node, values in avg.items():
        node_tdp = tdp.get(node)
        p95 = stats.percentile(values, 95)
        cap_hours = ctx.hours(cap[node]) if node in cap else 0.0
        gpu_hours = gpus.get(node, 0) * ctx.window.hours
        rows.append(
            [
                ctx.node_name(node),
                node[2],
                node[1],
                node_tdp,
                stats.percentile(values, 50),
                p95,
                stats.peak(values),
                stats.peak(peak.get(node, values)),
                p95 / node_tdp if node_tdp else None,
                energy[node],
                cap_hours,
                cap_hours / gpu_hours if gpu_hours else None,
            ]
        )
    rows.sort(key=lambda r: -(r[8] if isinstance(r[8], float) else 0.0))
    return Table(
        "by_node",
        "GPU power per node (percentiles of step averages)",
        [
            Column("node", "node"),
            Column("node_class", "class"),
            Column("rack", "rack"),
            Column("tdp_watts", "GPU TDP", "W"),
            Column("p50_watts", "p50", "W"),
            Column("p95_watts", "p95", "W"),
            Column("max_watts", "max", "W"),
            Column("peak_bound_watts", "peak (bound)", "W"),
            Column("p95_of_tdp", "p95 / TDP", "ratio"),
            Column("energy_kwh", "energy", "kWh"),
            Column("power_cap_gpu_hours", "at power cap", "h"),
            Column("power_cap_share", "share at cap", "ratio"),
        ],
        rows,
        note=f"Step averages over {ctx.window.step_text}; 'peak (bound)' sums each GPU's "
        "highest sample in a step, an upper bound on the node's peak.",
    )


def _rack_table(
    ctx: Context,
    avg: dict[NodeKey, Array],
    peak: dict[NodeKey, Array],
    tdp: dict[NodeKey, float],
    energy: dict[NodeKey, float],
) -> Table:
    members: dict[tuple[str, str], list[NodeKey]] = defaultdict(list)
    for node in avg:
        members[(node[0], node[1])].append(node)
    steps = ctx.window.steps
    rows: list[list[Cell]] = []
    for (cluster, rack), nodes in sorted(members.items()):
        power = stats.column_sums([avg[n] for n in nodes], steps)
        bound = stats.column_sums([peak[n] for n in nodes if n in peak], steps)
        budget = ctx.cfg.rack_gpu_power_budget_watts(rack)
        over = float(np.sum(power > budget)) * ctx.window.step_hours if budget else None
        rack_max = stats.peak(power)
        rows.append(
            [
                rack if len({c for c, _ in members}) == 1 else f"{cluster}/{rack}",
                len(nodes),
                sum(tdp.get(n, 0.0) for n in nodes),
                stats.percentile(power, 50),
                stats.percentile(power, 95),
                rack_max,
                stats.peak(bound),
                budget,
                rack_max / budget if budget else None,
                over,
                sum(energy[n] for n in nodes),
            ]
        )
    rows.sort(key=lambda r: -(r[5] if isinstance(r[5], float) and not np.isnan(r[5]) else 0.0))
    return Table(
        "by_rack",
        "GPU power per rack against its plan",
        [
            Column("rack", "rack"),
            Column("nodes", "nodes", "count"),
            Column("tdp_watts", "GPU TDP", "W"),
            Column("p50_watts", "p50", "W"),
            Column("p95_watts", "p95", "W"),
            Column("max_watts", "max", "W"),
            Column("peak_bound_watts", "peak (bound)", "W"),
            Column("budget_watts", "budget", "W"),
            Column("max_of_budget", "max / budget", "ratio"),
            Column("hours_over_budget", "hours over budget", "h"),
            Column("energy_kwh", "energy", "kWh"),
        ],
        rows,
        note="Budget: rack_gpu_power_budget_kw / rack_gpu_power_budgets_kw of the mixin config"
        + (
            ""
            if ctx.cfg.rack_gpu_power_budget_kw or ctx.cfg.rack_gpu_power_budgets_kw
            else " (not set: pass --config with a rack plan)."
        ),
    )


def _energy_by_class(energy: dict[NodeKey, float]) -> Table:
    per_class: dict[str, float] = defaultdict(float)
    for node, kwh in energy.items():
        per_class[node[2]] += kwh
    return Table(
        "energy_by_class",
        "GPU energy by node class",
        [Column("node_class", "class"), Column("energy_kwh", "energy", "kWh")],
        [[c, per_class[c]] for c in sorted(per_class)],
    )


def _cap_weeks(ctx: Context, cap: dict[NodeKey, Array]) -> Table:
    weeks = range(ctx.window.weeks)
    rows: list[list[Cell]] = [
        [ctx.node_name(n), n[2], *ctx.weekly(v)]
        for n, v in sorted(cap.items(), key=lambda kv: -ctx.hours(kv[1]))
        if ctx.hours(v) > 0
    ]
    return Table(
        "power_cap_weeks",
        "GPU-hours at the software power cap per node and week",
        [
            Column("node", "node"),
            Column("node_class", "class"),
            *(Column(f"week_{w + 1}", ctx.window.week_label(w), "h") for w in weeks),
        ],
        rows,
    )


def _rack_findings(ctx: Context, section: Section, racks: Table) -> None:
    energy = f"The GPUs used {units.kilowatt_hours(section.numbers['energy_kwh'].value)}"
    if not racks.rows:
        section.findings.append(energy + ".")
        return
    top = racks.rows[0]
    rack, rack_max, budget, share = top[0], top[5], top[7], top[8]
    assert isinstance(rack_max, float)
    section.numbers["fullest_rack_max_watts"] = Number(
        f"highest rack ({rack}) GPU power", rack_max, "W"
    )
    if isinstance(budget, float) and isinstance(share, float):
        section.numbers["fullest_rack_max_of_budget"] = Number("of its budget", share, "ratio")
        advice = (
            "; re-plan the rack or cap its GPUs"
            if share > 1
            else "; it is close to its plan: watch it"
            if share > ctx.cfg.dashboard_load_warn_ratio
            else ", within its plan"
        )
        section.findings.append(
            f"{energy}; the fullest rack, {rack}, peaked at {units.watts(rack_max)} of GPU "
            f"power, {units.percent(share)} of its {units.watts(budget)} budget{advice}."
        )
    else:
        section.findings.append(
            f"{energy}; the fullest rack, {rack}, peaked at {units.watts(rack_max)} of GPU "
            "power (no rack power plan configured: pass --config with one)."
        )


def _cap_findings(ctx: Context, section: Section, cap: dict[NodeKey, Array]) -> None:
    capped = sorted(((ctx.hours(v), n) for n, v in cap.items()), reverse=True)
    if not capped or capped[0][0] <= 0:
        return
    hours, node = capped[0]
    section.findings.append(
        f"GPUs spent {units.hours(section.numbers['power_cap_gpu_hours'].value)} at the power "
        f"cap, most on {ctx.node_name(node)} ({units.hours(hours)}, mostly in the "
        f"{ctx.worst_week(cap[node])}): its jobs are power-bound."
    )


def _plots(
    ctx: Context, section: Section, avg: dict[NodeKey, Array], tdp: dict[NodeKey, float]
) -> None:
    members: dict[str, list[NodeKey]] = defaultdict(list)
    for node in avg:
        members[node[1]].append(node)
    rack_power = {
        r: stats.column_sums([avg[n] for n in ns], ctx.window.steps) for r, ns in members.items()
    }
    top = sorted(rack_power, key=lambda r: -stats.peak(rack_power[r]))[:SHOWN_RACKS]
    lines = []
    for rack in sorted(top):
        times, values = ctx.daily(rack_power[rack], "max")
        lines.append(plots.Line(rack, times, values, ctx.rack_colour(rack)))
    budget = ctx.cfg.rack_gpu_power_budget_watts("")
    limits = [plots.Limit("budget", budget)] if budget else []
    section.plots.append(
        plots.time_lines(
            "rack_power", "Highest hourly GPU power per rack, by day", lines, "W", limits
        )
    )
    share: dict[str, list[float]] = defaultdict(list)
    for node, watts in avg.items():
        node_tdp = tdp.get(node)
        if node_tdp:
            share[node[2]].extend((watts[~np.isnan(watts)] / node_tdp).tolist())
    section.plots.append(
        plots.boxes(
            "node_power_of_tdp",
            "Node GPU power as a share of TDP, by class",
            dict(sorted(share.items())),
            "ratio",
        )
    )
