"""Power as the BMCs measure it: whole-node power, its non-GPU share, racks against circuits.

A node's power is its BMC's DCMI reading where it has one, else its largest power
sensor, step by step (alerts/recording_report_bmc.py says why). Its non-GPU share is
node power less the node's GPU board power, over node power, counted only over steps
where both were measured. A rack's measured draw is the sum of its measured nodes,
checked against the whole-rack (circuit) budget, `rack_power_budget_kw`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from nvwatch.report import plots, stats, units
from nvwatch.report.context import Context, NodeKey
from nvwatch.report.frame import Array
from nvwatch.report.model import Cell, Column, Number, Section, Table

SHOWN_RACKS = 8  # one colour each: at most len(style.RACK_COLOURS)
RackKey = tuple[str, str]  # (cluster, rack)

NO_BMC = (
    "No node power from BMCs in the range (nvwatch_bmc_power_watts{selector}): "
    "this rack plan counts GPU power only, against rack_gpu_power_budget_kw, the circuit "
    "budget less what the rest of each node draws; probe the nodes' BMCs to plan on "
    "measured node power."
)


@dataclass(frozen=True)
class NodePower:
    avg: dict[NodeKey, Array]  # W per step: DCMI where read, else the largest sensor
    peak: dict[NodeKey, Array]  # the same of each step's highest sample
    method: dict[NodeKey, str]  # "dcmi", "sensor" or "dcmi, sensor": what was used


def node_power(ctx: Context) -> NodePower:
    avg, method = _prefer_dcmi(ctx, "bmc_power")
    peak, _ = _prefer_dcmi(ctx, "bmc_power_peak")
    return NodePower(avg, peak, method)


def _prefer_dcmi(ctx: Context, name: str) -> tuple[dict[NodeKey, Array], dict[NodeKey, str]]:
    rows = ctx.frame(name).by((*ctx.node_labels, "method"))
    missing = np.full(ctx.window.steps, np.nan)
    nodes = {(k[0], k[1], k[2], k[3]) for k in rows}
    power: dict[NodeKey, Array] = {}
    method: dict[NodeKey, str] = {}
    for node in nodes:
        dcmi = rows.get((*node, "dcmi"), missing)
        sensor = rows.get((*node, "sensor"), missing)
        power[node] = np.where(np.isnan(dcmi), sensor, dcmi)
        read_by = (("dcmi", ~np.isnan(dcmi)), ("sensor", np.isnan(dcmi) & ~np.isnan(sensor)))
        used = [label for label, steps in read_by if steps.any()]
        method[node] = ", ".join(used)
    return power, method


def add_measured_power(ctx: Context, section: Section, gpu: dict[NodeKey, Array]) -> None:
    """The measured parts of the power section, or its plain note when there are none."""
    measured = node_power(ctx)
    if not measured.avg:
        section.findings.append(NO_BMC.format(selector=ctx.cfg.bmc_sel()))
        return
    energy = {n: ctx.hours(v) / 1000 for n, v in measured.avg.items()}  # W x h -> kWh
    shared = {n: _shared_energy(ctx, v, gpu.get(n)) for n, v in measured.avg.items()}
    section.numbers.update(
        {
            "node_energy_kwh": Number(
                "node energy over the range (BMC)", sum(energy.values()), "kWh"
            ),
            "non_gpu_share": Number(
                "non-GPU share of node power", _share(list(shared.values())), "ratio"
            ),
        }
    )
    section.tables.append(_node_table(ctx, measured, energy, shared))
    racks = _racks(ctx, measured, gpu)
    section.tables.append(_rack_table(ctx, racks))
    section.tables.append(_class_table(shared))
    section.findings.insert(0, _rack_finding(ctx, section, racks))
    _plots(ctx, section, racks, measured, gpu)


def _shared_energy(ctx: Context, node: Array, gpu: Array | None) -> tuple[float, float]:
    """(node kWh, GPU kWh) over the steps where both were measured."""
    if gpu is None:
        return (0.0, 0.0)
    both = ~np.isnan(node) & ~np.isnan(gpu)
    return (ctx.hours(node[both]) / 1000, ctx.hours(gpu[both]) / 1000)


def _share(pairs: list[tuple[float, float]]) -> float | None:
    node = sum(p[0] for p in pairs)
    return (node - sum(p[1] for p in pairs)) / node if node > 0 else None


def _node_table(
    ctx: Context,
    measured: NodePower,
    energy: dict[NodeKey, float],
    shared: dict[NodeKey, tuple[float, float]],
) -> Table:
    rows: list[list[Cell]] = [
        [
            ctx.node_name(node),
            node[2],
            node[1],
            measured.method[node],
            stats.percentile(values, 50),
            stats.percentile(values, 95),
            stats.peak(values),
            stats.peak(measured.peak.get(node, values)),
            energy[node],
            _share([shared[node]]),
        ]
        for node, values in measured.avg.items()
    ]
    rows.sort(key=lambda r: -(r[6] if isinstance(r[6], float) and not np.isnan(r[6]) else 0.0))
    return Table(
        "measured_by_node",
        "Node power as the BMCs measured it (percentiles of step averages)",
        [
            Column("node", "node"),
            Column("node_class", "class"),
            Column("rack", "rack"),
            Column("method", "read by"),
            Column("p50_watts", "p50", "W"),
            Column("p95_watts", "p95", "W"),
            Column("max_watts", "max", "W"),
            Column("peak_watts", "peak sample", "W"),
            Column("energy_kwh", "energy", "kWh"),
            Column("non_gpu_share", "non-GPU share", "ratio"),
        ],
        rows,
        note="Read by: dcmi (DCMI Get Power Reading) where the BMC answers it, else sensor "
        "(its largest power sensor). Non-GPU share: node power less its GPUs' board power, "
        "over node power, where both were measured.",
    )


@dataclass(frozen=True)
class Rack:
    key: RackKey
    name: str
    nodes: int  # nodes the report knows in the rack (GPU or BMC data)
    measured: int  # of which with BMC node power
    power: Array  # the measured nodes' power per step
    peak: Array  # sum of their highest samples per step: an upper bound
    gpu: Array  # GPU power of the same nodes per step
    energy_kwh: float
    budget: float | None  # whole-rack (circuit) budget, W
    gpu_budget: float | None

    @property
    def max_watts(self) -> float:
        return stats.peak(self.power)

    @property
    def of_budget(self) -> float | None:
        return self.max_watts / self.budget if self.budget else None

    @property
    def gpu_max_watts(self) -> float:
        return stats.peak(self.gpu)


def _racks(ctx: Context, measured: NodePower, gpu: dict[NodeKey, Array]) -> list[Rack]:
    known: dict[RackKey, set[NodeKey]] = defaultdict(set)
    for node in (*gpu, *measured.avg):
        known[(node[0], node[1])].add(node)
    steps = ctx.window.steps
    racks = []
    for key, nodes in sorted(known.items()):
        members = sorted(n for n in nodes if n in measured.avg)
        if not members:
            continue
        power = stats.column_sums([measured.avg[n] for n in members], steps)
        racks.append(
            Rack(
                key=key,
                name=ctx.rack_name(*key),
                nodes=len(nodes),
                measured=len(members),
                power=power,
                peak=stats.column_sums([measured.peak[n] for n in members], steps),
                gpu=stats.column_sums([gpu[n] for n in members if n in gpu], steps),
                energy_kwh=ctx.hours(power) / 1000,
                budget=ctx.cfg.rack_power_budget_watts(key[1]),
                gpu_budget=ctx.cfg.rack_gpu_power_budget_watts(key[1]),
            )
        )
    # the rack nearest (or furthest over) its circuit first; without budgets, the largest
    racks.sort(key=lambda r: (-(r.of_budget or 0.0), -_finite(r.max_watts)))
    return racks


def _finite(value: float) -> float:
    return 0.0 if np.isnan(value) else value


def _rack_table(ctx: Context, racks: list[Rack]) -> Table:
    rows: list[list[Cell]] = [
        [
            r.name,
            r.measured,
            r.nodes,
            stats.percentile(r.power, 50),
            stats.percentile(r.power, 95),
            r.max_watts,
            stats.peak(r.peak),
            r.gpu_max_watts,
            r.budget,
            r.of_budget,
            float(np.sum(r.power > r.budget)) * ctx.window.step_hours if r.budget else None,
            r.energy_kwh,
        ]
        for r in racks
    ]
    configured = ctx.cfg.rack_power_budget_kw or ctx.cfg.rack_power_budgets_kw
    return Table(
        "measured_by_rack",
        "Measured node power per rack against its circuit",
        [
            Column("rack", "rack"),
            Column("nodes_measured", "nodes measured", "count"),
            Column("nodes", "nodes", "count"),
            Column("p50_watts", "p50", "W"),
            Column("p95_watts", "p95", "W"),
            Column("max_watts", "max", "W"),
            Column("peak_bound_watts", "peak (bound)", "W"),
            Column("gpu_max_watts", "GPUs' max", "W"),
            Column("budget_watts", "circuit budget", "W"),
            Column("max_of_budget", "max / budget", "ratio"),
            Column("hours_over_budget", "hours over budget", "h"),
            Column("energy_kwh", "energy", "kWh"),
        ],
        rows,
        note="Sum of the rack's nodes with BMC power; GPUs' max: the same nodes' GPU power. "
        "Budget: rack_power_budget_kw / rack_power_budgets_kw of the mixin config"
        + ("" if configured else " (not set: pass --config with the racks' circuit budgets)."),
    )


def _class_table(shared: dict[NodeKey, tuple[float, float]]) -> Table:
    per_class: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for node, pair in shared.items():
        per_class[node[2]].append(pair)
    rows: list[list[Cell]] = []
    for node_class in sorted(per_class):
        pairs = per_class[node_class]
        node_kwh = sum(p[0] for p in pairs)
        gpu_kwh = sum(p[1] for p in pairs)
        rows.append([node_class, len(pairs), node_kwh, gpu_kwh, node_kwh - gpu_kwh, _share(pairs)])
    return Table(
        "non_gpu_by_class",
        "What the GPUs leave out: node energy beyond the GPUs, by class",
        [
            Column("node_class", "class"),
            Column("nodes", "nodes", "count"),
            Column("node_energy_kwh", "node energy", "kWh"),
            Column("gpu_energy_kwh", "GPU energy", "kWh"),
            Column("non_gpu_energy_kwh", "non-GPU energy", "kWh"),
            Column("non_gpu_share", "non-GPU share", "ratio"),
        ],
        rows,
        note="Over the steps where both the node's BMC and its GPUs were measured.",
    )


def _rack_finding(ctx: Context, section: Section, racks: list[Rack]) -> str:
    energy = section.numbers["node_energy_kwh"].value
    share = section.numbers["non_gpu_share"].value
    used = f"Nodes used {units.kilowatt_hours(energy)} as their BMCs measured it" + (
        f" ({units.percent(share)} of it beyond the GPUs)" if share is not None else ""
    )
    top = racks[0]
    section.numbers["fullest_rack_measured_watts"] = Number(
        f"highest rack ({top.name}) node power", top.max_watts, "W"
    )
    where = top.name + (
        f" ({top.measured} of {top.nodes} nodes measured)" if top.measured < top.nodes else ""
    )
    if top.budget is None or top.of_budget is None:
        return (
            f"{used}; the fullest rack, {where}, peaked at {units.watts(top.max_watts)} "
            "(no circuit budget configured: set rack_power_budget_kw in the mixin config)."
        )
    section.numbers["fullest_rack_measured_of_budget"] = Number(
        "of its circuit budget", top.of_budget, "ratio"
    )
    if top.of_budget > 1:
        return _over_circuit(ctx, racks, where)
    advice = (
        "; it is close to its plan: watch it"
        if top.of_budget > ctx.cfg.dashboard_load_warn_ratio
        else ", within its plan"
    )
    return (
        f"{used}; the fullest rack, {where}, peaked at {units.watts(top.max_watts)}, "
        f"{units.percent(top.of_budget)} of its {units.watts(top.budget)} circuit budget{advice}."
    )


def _over_circuit(ctx: Context, racks: list[Rack], where: str) -> str:
    """The sentence for racks whose measured draw exceeded their circuit budget."""
    over = [r for r in racks if r.of_budget is not None and r.of_budget > 1]
    top = over[0]
    assert top.budget is not None and top.of_budget is not None
    hours = float(np.sum(top.power > top.budget)) * ctx.window.step_hours
    lead = (
        f"Measured at its BMCs, rack {where} drew up to {units.watts(top.max_watts)}"
        if len(over) == 1
        else f"{len(over)} racks drew more than their circuit budget as their BMCs measured "
        f"it; the worst, {where}, drew up to {units.watts(top.max_watts)}"
    )
    gpus = units.watts(top.gpu_max_watts)
    if top.gpu_budget is not None and top.gpu_max_watts <= top.gpu_budget:
        cause = (
            f", though its GPUs alone peaked at {gpus}, within their "
            f"{units.watts(top.gpu_budget)} share: the rest of its nodes is what the plan "
            "missed; re-plan the rack or cap its nodes."
        )
    elif top.gpu_budget is not None:
        cause = (
            f"; its GPUs alone peaked at {gpus}, over their {units.watts(top.gpu_budget)} "
            "share too: re-plan the rack or cap its GPUs."
        )
    else:
        cause = f"; its GPUs alone peaked at {gpus}: re-plan the rack or cap its nodes."
    return (
        f"{lead}, {units.percent(top.of_budget)} of its {units.watts(top.budget)} circuit "
        f"budget, for {units.hours(hours)}{cause}"
    )


def _plots(
    ctx: Context,
    section: Section,
    racks: list[Rack],
    measured: NodePower,
    gpu: dict[NodeKey, Array],
) -> None:
    shown = sorted(
        sorted(racks, key=lambda r: -_finite(r.max_watts))[:SHOWN_RACKS], key=lambda r: r.name
    )
    lines = []
    for rack in shown:
        colour = ctx.rack_colour(rack.key[1])
        times, values = ctx.daily(rack.power, "max")
        lines.append(plots.Line(rack.name, times, values, colour))
        times, values = ctx.daily(rack.gpu, "max")
        lines.append(plots.Line(f"{rack.name} GPUs", times, values, colour, dashed=True))
    budget = ctx.cfg.rack_power_budget_watts("")
    section.plots.append(
        plots.time_lines(
            "rack_node_power",
            "Highest hourly node power per rack (BMC), by day; dashed: its GPUs",
            lines,
            "W",
            [plots.Limit("circuit", budget)] if budget else [],
        )
    )
    share: dict[str, list[float]] = defaultdict(list)
    for node, watts in measured.avg.items():
        gpus = gpu.get(node)
        if gpus is None:
            continue
        both = ~np.isnan(watts) & ~np.isnan(gpus) & (watts > 0)
        share[node[2]].extend(((watts[both] - gpus[both]) / watts[both]).tolist())
    if any(share.values()):
        section.plots.append(
            plots.boxes(
                "non_gpu_share",
                "Non-GPU share of node power (BMC less GPU power), by class",
                dict(sorted(share.items())),
                "ratio",
            )
        )
