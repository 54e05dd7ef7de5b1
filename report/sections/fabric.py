"""Fabric: InfiniBand and NVLink load against line rate, congestion, errors and link-downs."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from nvwatch.report import plots, stats, style, units
from nvwatch.report.context import Context, NodeKey
from nvwatch.report.frame import Array, Frame, counter_events
from nvwatch.report.model import Cell, Column, Number, Section, Table

TOP = 10
PortKey = tuple[str, ...]  # (cluster, rack, node_class, instance, device, port)


def fabric(ctx: Context) -> Section:
    tx = ctx.frame("ib_tx")
    nvlink = ctx.frame("nvlink_tx")
    section = Section(
        "fabric",
        "Fabric",
        coverage=tx.coverage() if len(tx) else nvlink.coverage(),
        coverage_note="share of IB port x step cells with a throughput sample"
        if len(tx)
        else "share of GPU x step cells with an NVLink throughput sample",
    )
    if not len(tx) and not len(nvlink):
        section.absent = "no InfiniBand or NVLink series in the range"
        return section
    if len(tx):
        load = _ib_load(ctx)
        _load_table(
            ctx, section, "ib_load_by_class", "InfiniBand port load against line rate", load
        )
        _congestion(ctx, section)
        _ib_load_plot(ctx, section, load)
    if len(nvlink):
        _load_table(
            ctx,
            section,
            "nvlink_load_by_class",
            "NVLink load per GPU against line rate",
            _nvlink_load(ctx),
        )
    _errors(ctx, section)
    _verdict(ctx, section)
    return section


def _ports(ctx: Context, name: str) -> dict[PortKey, Array]:
    frame = ctx.frame(name)
    return dict(zip(frame.keys((*ctx.node_labels, "device", "port")), frame.values, strict=True))


def _ib_load(ctx: Context) -> dict[PortKey, Array]:
    """Busier direction over line rate, per port and step."""
    tx, rx, capacity = _ports(ctx, "ib_tx"), _ports(ctx, "ib_rx"), _ports(ctx, "ib_capacity")
    load: dict[PortKey, Array] = {}
    for port, sent in tx.items():
        rate = capacity.get(port)
        if rate is None or not rate[0] > 0:
            continue
        received = rx.get(port, np.full_like(sent, np.nan))
        load[port] = np.fmax(sent, received) / rate[0]
    return load


def _nvlink_load(ctx: Context) -> dict[PortKey, Array]:
    key = (*ctx.node_labels, "gpu", "uuid")
    frame, capacity = ctx.frame("nvlink_tx"), ctx.frame("nvlink_capacity")
    line_rate = {k: float(v[0]) for k, v in zip(capacity.keys(key), capacity.values, strict=True)}
    return {
        k: v / line_rate[k]
        for k, v in zip(frame.keys(key), frame.values, strict=True)
        if line_rate.get(k, 0) > 0
    }


def _load_table(
    ctx: Context, section: Section, name: str, title: str, load: dict[PortKey, Array]
) -> None:
    by_class: dict[str, list[Array]] = defaultdict(list)
    for key, values in load.items():
        by_class[key[2]].append(values)
    warn = ctx.cfg.dashboard_load_warn_ratio
    rows: list[list[Cell]] = []
    for node_class in sorted(by_class):
        values = np.concatenate(by_class[node_class])
        busy_ports = sum(1 for v in by_class[node_class] if stats.percentile(v, 95) > warn)
        rows.append(
            [
                node_class,
                len(by_class[node_class]),
                stats.percentile(values, 50),
                stats.percentile(values, 95),
                stats.percentile(values, 99),
                stats.peak(values),
                busy_ports,
            ]
        )
    section.tables.append(
        Table(
            name,
            title + f" (percentiles of {ctx.window.step_text} averages)",
            [
                Column("node_class", "class"),
                Column("links", "links" if name.startswith("nvlink") else "ports", "count"),
                Column("p50", "p50", "ratio"),
                Column("p95", "p95", "ratio"),
                Column("p99", "p99", "ratio"),
                Column("max", "max", "ratio"),
                Column("busy", f"p95 above {units.percent(warn)}", "count"),
            ],
            rows,
        )
    )
    prefix = "ib" if name.startswith("ib") else "nvlink"
    everything = np.concatenate(list(load.values())) if load else np.zeros(0)
    section.numbers[f"{prefix}_load_p95"] = Number(
        f"{prefix.upper()} load p95", stats.percentile(everything, 95), "ratio"
    )
    section.numbers[f"{prefix}_load_max"] = Number(
        f"{prefix.upper()} load max", stats.peak(everything), "ratio"
    )
    section.numbers[f"{prefix}_busy_links"] = Number(
        f"{prefix.upper()} links with p95 above {units.percent(warn)}",
        sum(r[6] for r in rows if isinstance(r[6], int)),
        "count",
    )


def _congestion(ctx: Context, section: Section) -> None:
    """Transmit-wait share per port: ticks per second x tick length = share of time waiting."""
    threshold = ctx.cfg.ib_transmit_wait_ratio
    share = {
        k: v * ctx.cfg.ib_transmit_wait_tick_seconds for k, v in _ports(ctx, "ib_wait").items()
    }
    above = {
        k: np.where(np.isnan(v), np.nan, (v > threshold).astype(float)) for k, v in share.items()
    }
    congested = sorted(
        (k for k in above if ctx.hours(above[k]) > 0), key=lambda k: -ctx.hours(above[k])
    )
    section.numbers["congested_port_hours"] = Number(
        f"port-hours with transmit wait above {units.percent(threshold)}",
        sum(ctx.hours(v) for v in above.values()),
        "h",
    )
    section.numbers["congested_ports"] = Number("congested ports", len(congested), "count")
    weeks = range(ctx.window.weeks)
    section.tables.append(
        Table(
            "congestion",
            f"Congested ports: hours with transmit wait above {units.percent(threshold)}",
            [
                Column("node", "node"),
                Column("port", "port"),
                Column("node_class", "class"),
                Column("hours", "congested", "h"),
                Column("max_wait_share", "max wait share", "ratio"),
                Column("worst_week", "worst week"),
                *(Column(f"week_{w + 1}", ctx.window.week_label(w), "h") for w in weeks),
            ],
            [
                [
                    ctx.node_name(_node(k)),
                    f"{k[4]}/{k[5]}",
                    k[2],
                    ctx.hours(above[k]),
                    stats.peak(share[k]),
                    ctx.worst_week(above[k]),
                    *ctx.weekly(above[k]),
                ]
                for k in congested
            ],
        )
    )
    lines = []
    for k in congested[:5]:
        times, values = ctx.daily(share[k], "max")
        lines.append(
            plots.Line(
                f"{ctx.node_name(_node(k))} {k[4]}/{k[5]}", times, values, style.class_colour(k[2])
            )
        )
    if lines:
        section.plots.append(
            plots.time_lines(
                "ib_congestion",
                "Daily worst transmit-wait share of the most congested ports",
                lines,
                "ratio",
                [plots.Limit("alert", threshold)],
            )
        )
        worst = congested[0]
        section.findings.append(
            f"{len(congested)} InfiniBand port(s) were congested (transmit wait above "
            f"{units.percent(threshold)}) for {units.hours(ctx.hours(above[worst]))} on the worst, "
            f"{ctx.node_name(_node(worst))} {worst[4]}/{worst[5]}, mostly in the "
            f"{ctx.worst_week(above[worst])}: look at job placement and its leaf switch."
        )


def _node(key: PortKey) -> NodeKey:
    return (key[0], key[1], key[2], key[3])


def _ib_load_plot(ctx: Context, section: Section, load: dict[PortKey, Array]) -> None:
    by_class: dict[str, list[Array]] = defaultdict(list)
    for key, port_load in load.items():
        by_class[key[2]].append(port_load)
    lines = []
    for node_class in sorted(by_class):
        times, daily = ctx.daily(stats.column_max(by_class[node_class], ctx.window.steps), "max")
        lines.append(plots.Line(node_class, times, daily, style.class_colour(node_class)))
    section.plots.append(
        plots.time_lines(
            "ib_load",
            "Busiest InfiniBand port of each class against line rate, by day",
            lines,
            "ratio",
            [plots.Limit("warn", ctx.cfg.dashboard_load_warn_ratio)],
        )
    )


def _errors(ctx: Context, section: Section) -> None:
    rows: list[list[Cell]] = []
    link_downs = 0.0
    for fabric_name, frame_name in (("InfiniBand", "ib_errors"), ("NVLink", "nvlink_errors")):
        frame: Frame = ctx.frame(frame_name)
        events = counter_events(frame.values)
        for labels, row in zip(frame.labels, events, strict=True):
            total = float(np.sum(row))
            if total <= 0:
                continue
            node = ctx.node_of(labels)
            kind = labels.get("type", "")
            if fabric_name == "InfiniBand" and kind == "link_downed":
                link_downs += total
            rows.append(
                [ctx.node_name(node), node[2], fabric_name, kind, total, ctx.worst_week(row)]
            )
    rows.sort(key=lambda r: -(r[4] if isinstance(r[4], float) else 0.0))
    section.numbers["ib_link_downs"] = Number("InfiniBand link-down events", link_downs, "count")
    section.numbers["fabric_error_events"] = Number(
        "fabric error events", sum(r[4] for r in rows if isinstance(r[4], float)), "count"
    )
    section.tables.append(
        Table(
            "errors",
            "Fabric errors and link-downs per node",
            [
                Column("node", "node"),
                Column("node_class", "class"),
                Column("fabric", "fabric"),
                Column("type", "type"),
                Column("events", "events", "count"),
                Column("worst_week", "worst week"),
            ],
            rows,
        )
    )
    if link_downs:
        section.findings.append(
            f"InfiniBand links went down {units.count(link_downs)} time(s): reseat or replace "
            "the cables of the ports listed under fabric errors."
        )


def _verdict(ctx: Context, section: Section) -> None:
    n = section.numbers
    parts = []
    for prefix, name in (("ib", "InfiniBand"), ("nvlink", "NVLink")):
        if f"{prefix}_load_p95" in n:
            parts.append(
                f"{name} ports ran at {units.percent(n[f'{prefix}_load_p95'].value)} of line rate "
                f"at the 95th percentile (max {units.percent(n[f'{prefix}_load_max'].value)})"
            )
    busy = sum(n[f"{p}_busy_links"].value or 0 for p in ("ib", "nvlink") if f"{p}_busy_links" in n)
    congested = n["congested_ports"].value if "congested_ports" in n else 0
    n["fabric_bottleneck"] = Number("fabric a bottleneck (1 yes, 0 no)", float(bool(busy)), "count")
    warn = units.percent(ctx.cfg.dashboard_load_warn_ratio)
    if busy:
        verdict = f"{units.count(busy)} link(s) ran above {warn} at p95: the fabric is a bottleneck"
    elif congested:
        hours = units.hours(n["congested_port_hours"].value)
        verdict = (
            f"the links are not saturated, but {units.count(congested)} port(s) waited for "
            f"credits for {hours}: congestion from placement or a switch, not capacity"
        )
    else:
        verdict = "the fabric was not the bottleneck"
    section.findings.insert(0, "; ".join(parts) + f": {verdict}.")
