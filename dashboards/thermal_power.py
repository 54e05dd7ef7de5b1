"""The thermal & power dashboard: where the fleet is hot, time lost to throttling, and the
power headroom of nodes, racks and the cluster (from the recording rules)."""

from __future__ import annotations

from grafanalib import core as g

from nvwatch.dashboards import thresholds as t
from nvwatch.dashboards.builder import (
    STACKED,
    Grid,
    PanelRow,
    Q,
    cluster_scope,
    dashboard,
    kwh_in_range,
    legend,
    node_series_link,
    variable,
)
from nvwatch.dashboards.links import NODE, THERMAL_POWER, DataLink
from nvwatch.mixin.config import MixinConfig


def _to_node(cfg: MixinConfig) -> DataLink:
    return node_series_link(cfg, NODE, "Node dashboard")


def _heat(grid: Grid, cfg: MixinConfig) -> None:
    c = cluster_scope(cfg)
    grid.add(
        "heatmap",
        "Hottest GPU per node",
        "One row per node, colour = temperature of its hottest GPU die. Bands of heat "
        "across a rack or an aisle are a cooling problem; single hot rows are a node.",
        "celsius",
        [Q(f"instance:nvwatch_gpu_temperature_celsius:max{c}", legend(cfg.instance_label))],
        links=[_to_node(cfg)],
        w=24,
        h=10,
    )
    grid.add(
        "timeseries",
        "Time throttled, by reason",
        "Seconds per second all GPUs spent below their target clocks, by NVML violation "
        "policy (a value of 3 means three GPUs' worth of throttled time). Thermal time is "
        "a cooling fault; power time a capacity signal.",
        "s",
        [Q(f"cluster:nvwatch_gpu_throttle_seconds:rate{c}", "{{reason}}")],
        custom=STACKED,
    )
    grid.add(
        "timeseries",
        "GPUs with a throttle reason active",
        "Number of GPUs with each clock-event reason active now.",
        "none",
        [Q(f"cluster:nvwatch_gpu_clock_event_active:sum{c}", "{{reason}}")],
        steps=t.ANY_WARN,
    )


def _headroom(grid: Grid, cfg: MixinConfig) -> None:
    c = cluster_scope(cfg)
    grid.add(
        "bargauge",
        "Power headroom per node (least first)",
        "1 - GPU power / summed GPU TDP for the nodes with the least headroom. Below "
        f"{1 - cfg.node_power_budget_fraction:.0%} NvwatchNodePowerNearBudget fires.",
        "percentunit",
        [
            Q(
                "bottomk(15, 1 - instance:nvwatch_gpu_power_watts:sum"
                f"{c} / instance:nvwatch_gpu_power_tdp_watts:sum{c})",
                legend(cfg.instance_label),
                instant=True,
            )
        ],
        steps=t.power_headroom(cfg),
        links=[_to_node(cfg)],
        min_=0,
        max_=1,
        h=10,
    )
    grid.add(
        "timeseries",
        "Power per rack vs rack TDP",
        "GPU power of each rack as a fraction of its GPUs' summed TDP. Racks that sit near "
        "1 leave no room for the next job step; check against the rack PDU budget.",
        "percentunit",
        [
            Q(
                f"rack:nvwatch_gpu_power_watts:sum{c} / rack:nvwatch_gpu_power_tdp_watts:sum{c}",
                legend(cfg.rack_label),
            )
        ],
        steps=t.load(cfg),
        min_=0,
        max_=1,
        h=10,
    )


def _cluster_power(grid: Grid, cfg: MixinConfig) -> None:
    c = cluster_scope(cfg)
    grid.add(
        "timeseries",
        "Cluster power vs TDP",
        "Total GPU power and total GPU TDP of the cluster.",
        "watt",
        [
            Q(f"cluster:nvwatch_gpu_power_watts:sum{c}", "power"),
            Q(f"cluster:nvwatch_gpu_power_tdp_watts:sum{c}", "TDP"),
        ],
    )
    grid.add(
        "stat",
        "GPU energy in the time range",
        "Energy the cluster's GPUs used in the selected time range, from the NVML energy "
        "counters (GPU boards only, not CPUs, fans or cooling).",
        "kwatth",
        [
            Q(
                kwh_in_range(cfg, f"cluster:nvwatch_gpu_energy_joules:rate{c}"),
                "energy",
                instant=True,
            )
        ],
    )


# Top to bottom, as the grid lays them out.
_PANELS: tuple[PanelRow, ...] = (_heat, _headroom, _cluster_power)


def thermal_power(cfg: MixinConfig) -> g.Dashboard:
    return dashboard(
        cfg,
        THERMAL_POWER,
        "nvwatch / Thermal & power",
        "Where the fleet is hot, how much time GPUs lose to throttling, and how much power "
        "headroom nodes, racks and the cluster have.",
        _PANELS,
        [variable(cfg, cfg.cluster_label, "Cluster")],
    )
