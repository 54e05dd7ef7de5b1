"""Thermal: time in thermal slowdown per GPU, the hottest GPUs and their trend, HBM headroom.

Where the nodes' BMCs are probed, each slowdown says where its heat came from (air.py):
the room (inlet air above its envelope), the node (a fan stopped) or the GPU itself.
"""

from __future__ import annotations

import numpy as np

from nvwatch.report import plots, stats, style, units
from nvwatch.report.air import GPU, NODE, ROOM, HeatSources
from nvwatch.report.context import Context
from nvwatch.report.frame import Array
from nvwatch.report.model import Cell, Column, Number, Section, Table

TOP = 10
TREND_GPUS = 5

GpuKey = tuple[str, ...]  # (cluster, rack, node_class, instance, gpu, uuid)
# what to do about a slowdown, by where its heat came from ("": no BMC data then)
ADVICE = {
    ROOM: "slowed while its node breathed air above its envelope: the room, not the GPU; "
    "check the aisle's cooling and containment.",
    NODE: "slowed on normal inlet air with a fan of its node stopped or failing: the node; "
    "replace the fan.",
    GPU: "slowed on normal inlet air with every fan turning: the GPU itself; check its heat "
    "sink and airflow path, reseat or replace it.",
    "": "needs its cooling checked: inlet air, fans, blocked airflow.",
}


def thermal(ctx: Context) -> Section:
    temps = ctx.frame("gpu_temp_max")
    section = Section(
        "thermal",
        "Thermal",
        coverage=temps.coverage(),
        coverage_note="share of GPU x step cells with a die temperature sample",
    )
    if not len(temps):
        section.absent = "no nvwatch_gpu_temperature_celsius series in the range"
        return section
    key = (*ctx.node_labels, "gpu", "uuid")
    temp = dict(zip(temps.keys(key), temps.values, strict=True))
    slowdown = _static(ctx, "gpu_threshold_slowdown", key)
    slowed = dict(
        zip(ctx.frame("gpu_thermal").keys(key), ctx.frame("gpu_thermal").values, strict=True)
    )
    _slowdown_tables(ctx, section, slowed, temp)
    _hottest(ctx, section, temp, slowdown)
    _hbm(ctx, section, key)
    return section


def _static(ctx: Context, name: str, key: tuple[str, ...]) -> dict[GpuKey, float]:
    frame = ctx.frame(name)
    return {k: float(v[0]) for k, v in zip(frame.keys(key), frame.values, strict=True)}


def _gpu_name(ctx: Context, gpu: GpuKey) -> str:
    return f"{ctx.node_name((gpu[0], gpu[1], gpu[2], gpu[3]))} GPU {gpu[4]}"


def _slowdown_tables(
    ctx: Context, section: Section, slowed: dict[GpuKey, Array], temp: dict[GpuKey, Array]
) -> None:
    hours = {k: ctx.hours(v) for k, v in slowed.items()}
    affected = sorted((k for k, h in hours.items() if h > 0), key=lambda k: -hours[k])
    total = sum(hours.values())
    section.numbers["thermal_slowdown_gpu_hours"] = Number(
        "GPU-hours in thermal slowdown", total, "h"
    )
    section.numbers["gpus_in_thermal_slowdown"] = Number(
        "GPUs that slowed down for heat", len(affected), "count"
    )
    weeks = range(ctx.window.weeks)
    sources = HeatSources(ctx)
    source = {k: sources.of((k[0], k[1], k[2], k[3]), slowed[k]) for k in affected}
    rows: list[list[Cell]] = [
        [
            _gpu_name(ctx, k),
            k[3],
            k[4],
            k[2],
            k[1],
            hours[k],
            stats.peak(temp.get(k, np.zeros(0))),
            source[k],
            ctx.worst_week(slowed[k]),
            *ctx.weekly(slowed[k]),
        ]
        for k in affected
    ]
    section.tables.append(
        Table(
            "slowdown",
            "Time in thermal slowdown, per GPU and week",
            [
                Column("gpu_name", "GPU"),
                Column("node", "node"),
                Column("gpu", "index"),
                Column("node_class", "class"),
                Column("rack", "rack"),
                Column("hours", "in slowdown", "h"),
                Column("max_celsius", "max die", "°C"),
                Column("heat_source", "heat from"),
                Column("worst_week", "worst week"),
                *(Column(f"week_{w + 1}", ctx.window.week_label(w), "h") for w in weeks),
            ],
            rows,
            note="Heat from: what the node's BMC read while the GPU slowed down; empty "
            "where it read nothing.",
        )
    )
    if affected:
        worst = affected[0]
        section.findings.append(
            f"{len(affected)} GPU(s) spent {units.hours(total)} in thermal slowdown; the worst, "
            f"{_gpu_name(ctx, worst)} ({units.hours(hours[worst])}, mostly in the "
            f"{ctx.worst_week(slowed[worst])}), {ADVICE[source[worst]]}"
        )
    else:
        section.findings.append("No GPU slowed down for heat.")


def _hottest(
    ctx: Context, section: Section, temp: dict[GpuKey, Array], slowdown: dict[GpuKey, float]
) -> None:
    peaks = {k: stats.peak(v) for k, v in temp.items()}
    hottest = sorted((k for k in peaks if not np.isnan(peaks[k])), key=lambda k: -peaks[k])
    section.numbers["hottest_gpu_celsius"] = Number(
        "hottest GPU die", peaks[hottest[0]] if hottest else None, "°C"
    )
    section.tables.append(
        Table(
            "hottest",
            "Hottest GPUs",
            [
                Column("gpu_name", "GPU"),
                Column("node_class", "class"),
                Column("max_celsius", "max die", "°C"),
                Column("p95_celsius", "p95 of step maxima", "°C"),
                Column("slowdown_celsius", "slowdown at", "°C"),
                Column("margin_celsius", "margin at max", "°C"),
            ],
            [
                [
                    _gpu_name(ctx, k),
                    k[2],
                    peaks[k],
                    stats.percentile(temp[k], 95),
                    slowdown.get(k),
                    slowdown[k] - peaks[k] if k in slowdown else None,
                ]
                for k in hottest[:TOP]
            ],
        )
    )
    lines = []
    for k in hottest[:TREND_GPUS]:
        times, values = ctx.daily(temp[k], "max")
        lines.append(plots.Line(_gpu_name(ctx, k), times, values, style.class_colour(k[2])))
    limits = sorted({slowdown[k] for k in hottest[:TREND_GPUS] if k in slowdown})
    section.plots.append(
        plots.time_lines(
            "hottest_trend",
            f"Daily maximum die temperature of the {len(lines)} hottest GPUs",
            lines,
            "°C",
            [plots.Limit("slowdown", v) for v in limits[:1]],
        )
    )


def _hbm(ctx: Context, section: Section, key: tuple[str, ...]) -> None:
    frame = ctx.frame("hbm_temp_max")
    if not len(frame):
        return
    limit = _static(ctx, "gpu_threshold_memory_max", key)
    peaks = {k: stats.peak(v) for k, v in zip(frame.keys(key), frame.values, strict=True)}
    margin = {k: limit[k] - p for k, p in peaks.items() if k in limit and not np.isnan(p)}
    close = [k for k, m in margin.items() if m < ctx.cfg.hbm_temp_margin_celsius]
    section.numbers["hbm_gpus_near_limit"] = Number(
        f"GPUs whose HBM came within {ctx.cfg.hbm_temp_margin_celsius:g} °C of its limit",
        len(close),
        "count",
    )
    ranked = sorted(margin, key=lambda k: margin[k])
    section.tables.append(
        Table(
            "hbm",
            "HBM temperature against its limit (least headroom first)",
            [
                Column("gpu_name", "GPU"),
                Column("node_class", "class"),
                Column("max_celsius", "max HBM", "°C"),
                Column("limit_celsius", "memory max", "°C"),
                Column("margin_celsius", "margin", "°C"),
            ],
            [[_gpu_name(ctx, k), k[2], peaks[k], limit[k], margin[k]] for k in ranked[:TOP]],
        )
    )
    if close:
        section.findings.append(
            f"{len(close)} GPU(s) ran their HBM within {ctx.cfg.hbm_temp_margin_celsius:g} °C of "
            "its limit: memory errors follow heat; check their airflow."
        )
