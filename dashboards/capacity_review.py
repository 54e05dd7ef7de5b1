"""The capacity review: thirty days of utilization, memory, power and energy per node,
for deciding what is busy, what is idle and where headroom is left."""

from __future__ import annotations

from grafanalib import core as g

from nvwatch.alerts.recording import NODE_MEMORY_USED_RATIO, NODE_POWER_TDP_RATIO
from nvwatch.dashboards import thresholds as t
from nvwatch.dashboards.builder import (
    Grid,
    PanelRow,
    Q,
    cluster_scope,
    dashboard,
    integral_in_range,
    kwh_in_range,
    legend,
    node_series_link,
    peak_in_range,
    variable,
)
from nvwatch.dashboards.links import CAPACITY_REVIEW, NODE, DataLink
from nvwatch.mixin.config import MixinConfig

_MERGE = [{"id": "merge", "options": {}}]


def _to_node(cfg: MixinConfig) -> list[DataLink]:
    return [node_series_link(cfg, NODE, "Node dashboard")]


def _node_util(cfg: MixinConfig) -> str:
    return f"instance:nvwatch_gpu_utilization_ratio:avg{cluster_scope(cfg)}"


def _peak_share(cfg: MixinConfig, level: str, used: str, total: str) -> str:
    """The highest share `used / total` reached in the range, per `level` series."""
    c = cluster_scope(cfg)
    return peak_in_range(cfg, f"{level}:{used}{c} / {level}:{total}{c}")


def _gpu_hours(cfg: MixinConfig, share: str) -> str:
    """GPU-hours in the range weighted by `share` (of each GPU up, at each evaluation)."""
    up = f"cluster:nvwatch_gpu_up:sum{cluster_scope(cfg)}"
    return f"{integral_in_range(cfg, f'{share} * {up}')} / 3600"


def _totals(grid: Grid, cfg: MixinConfig) -> None:
    util = f"cluster:nvwatch_gpu_utilization_ratio:avg{cluster_scope(cfg)}"
    grid.add(
        "stat",
        "GPU-hours busy / idle",
        "GPU-hours in the range spent busy (GPUs up x their mean utilization, over the "
        "time the range has data) and idle. Idle hours are capacity that could be given "
        "back or scheduled better.",
        "h",
        [
            Q(_gpu_hours(cfg, util), "busy", instant=True),
            Q(_gpu_hours(cfg, f"(1 - {util})"), "idle", instant=True),
        ],
        w=8,
        h=5,
    )
    grid.add(
        "stat",
        "GPU energy",
        "Energy the GPUs used in the range (NVML energy counters, GPU boards only).",
        "kwatth",
        [
            Q(
                kwh_in_range(cfg, f"cluster:nvwatch_gpu_energy_joules:rate{cluster_scope(cfg)}"),
                "energy",
                instant=True,
            )
        ],
        w=8,
        h=5,
    )


def _cluster_hbm_headroom(grid: Grid, cfg: MixinConfig) -> None:
    hbm = _peak_share(
        cfg, "cluster", "nvwatch_gpu_memory_used_bytes:sum", "nvwatch_gpu_memory_total_bytes:sum"
    )
    grid.add(
        "gauge",
        "Cluster HBM headroom (peak use)",
        "1 - the highest share of GPU memory in use across the cluster in the range. "
        "Little headroom means jobs are memory-bound: bigger-memory GPUs help more than "
        "more GPUs.",
        "percentunit",
        [Q(f"1 - {hbm}", "headroom", instant=True)],
        w=8,
        h=5,
        steps=t.headroom(cfg),
        min_=0,
        max_=1,
    )


def _utilization(grid: Grid, cfg: MixinConfig) -> None:
    util = _node_util(cfg)
    grid.add(
        "table",
        "Utilization percentiles per node",
        "Per node: median, 95th percentile and mean of GPU utilization over the range. A "
        "low median with a high p95 is bursty work; both low is an idle node.",
        "percentunit",
        [
            Q(f"quantile_over_time(0.5, {util}[$__range])", "p50", instant=True, table=True),
            Q(f"quantile_over_time(0.95, {util}[$__range])", "p95", instant=True, table=True),
            Q(f"avg_over_time({util}[$__range])", "mean", instant=True, table=True),
        ],
        w=24,
        h=10,
        steps=t.utilization(cfg),
        transformations=_MERGE,
    )


def _idlest_and_busiest(grid: Grid, cfg: MixinConfig) -> None:
    mean = f"avg_over_time({_node_util(cfg)}[$__range])"
    node = legend(cfg.instance_label)
    grid.add(
        "bargauge",
        "Idlest nodes",
        "The ten nodes with the lowest mean GPU utilization over the range: candidates for "
        "consolidation or for a look at why jobs avoid them.",
        "percentunit",
        [Q(f"bottomk(10, {mean})", node, instant=True)],
        links=_to_node(cfg),
        steps=t.utilization(cfg),
        min_=0,
        max_=1,
    )
    grid.add(
        "bargauge",
        "Busiest nodes",
        "The ten nodes with the highest mean GPU utilization over the range.",
        "percentunit",
        [Q(f"topk(10, {mean})", node, instant=True)],
        links=_to_node(cfg),
        steps=t.OK,
        min_=0,
        max_=1,
    )


def _node_headroom(grid: Grid, cfg: MixinConfig) -> None:
    node = legend(cfg.instance_label)
    # recorded shares: every evaluation's value, as peak_in_range reads its subquery
    c = cluster_scope(cfg)
    hbm = f"max_over_time({NODE_MEMORY_USED_RATIO}{c}[$__range])"
    power = f"max_over_time({NODE_POWER_TDP_RATIO}{c}[$__range])"
    grid.add(
        "bargauge",
        "HBM headroom per node (least first)",
        "1 - the node's peak share of GPU memory in use over the range.",
        "percentunit",
        [Q(f"bottomk(10, 1 - {hbm})", node, instant=True)],
        links=_to_node(cfg),
        steps=t.headroom(cfg),
        min_=0,
        max_=1,
    )
    grid.add(
        "bargauge",
        "Power headroom per node at peak (least first)",
        "1 - the node's peak GPU power as a share of its GPUs' TDP over the range.",
        "percentunit",
        [Q(f"bottomk(10, 1 - {power})", node, instant=True)],
        links=_to_node(cfg),
        steps=t.headroom(cfg),
        min_=0,
        max_=1,
    )


def _energy(grid: Grid, cfg: MixinConfig) -> None:
    energy = kwh_in_range(cfg, f"instance:nvwatch_gpu_energy_joules:rate{cluster_scope(cfg)}")
    grid.add(
        "bargauge",
        "Energy per node",
        "GPU energy each node used in the range; the top ten.",
        "kwatth",
        [Q(f"topk(10, {energy})", legend(cfg.instance_label), instant=True)],
        links=_to_node(cfg),
    )


# Top to bottom, as the grid lays them out.
_PANELS: tuple[PanelRow, ...] = (
    _totals,
    _cluster_hbm_headroom,
    _utilization,
    _idlest_and_busiest,
    _node_headroom,
    _energy,
)


def capacity_review(cfg: MixinConfig) -> g.Dashboard:
    return dashboard(
        cfg,
        CAPACITY_REVIEW,
        "nvwatch / Capacity review (30d)",
        "Thirty days of utilization, memory, power and energy per node, for the capacity "
        "review: what is busy, what is idle, where headroom is left.",
        _PANELS,
        [variable(cfg, cfg.cluster_label, "Cluster")],
        time_from="now-30d",
    )
