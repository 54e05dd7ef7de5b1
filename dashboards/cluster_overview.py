"""The cluster overview: nodes, GPUs, utilization, power, heat, throttling, alerts, fabric.

Like every fleet dashboard it reads the recording rules (one series per node or cluster),
never per-GPU raw series aggregated at query time, so it stays fast on thousands of GPUs.
"""

from __future__ import annotations

from grafanalib import core as g

from nvwatch.dashboards import thresholds as t
from nvwatch.dashboards.builder import (
    HIDE_TIME_AND_VALUE,
    STACKED,
    Grid,
    PanelRow,
    Q,
    cluster_scope,
    dashboard,
    legend,
    node_series_link,
    variable,
)
from nvwatch.dashboards.links import CLUSTER_OVERVIEW, INFINIBAND, NODE, NVLINK
from nvwatch.mixin.config import MixinConfig


def _firing(cfg: MixinConfig) -> str:
    return f'ALERTS{{alertstate="firing", alertname=~"Nvwatch.*", {cfg.cluster_label}=~"$cluster"}}'


def _counts(grid: Grid, cfg: MixinConfig) -> None:
    c = cluster_scope(cfg)
    grid.add(
        "stat",
        "Nodes reporting",
        "Agents Prometheus scrapes successfully, out of all nvwatch targets. Fewer than all: "
        "see NvwatchAgentDown in the alert table and the node's Prometheus target page.",
        "none",
        [
            Q(f"cluster:nvwatch_agent_up:sum{c}", "up"),
            Q(f"cluster:nvwatch_agent_up:count{c}", "targets"),
        ],
        w=6,
        h=5,
    )
    grid.add(
        "stat",
        "GPUs up / expected",
        "GPUs answering NVML against what the node classes of the scraped nodes should "
        "have. A gap is a lost GPU or a dead node: NvwatchGpuDown / NvwatchGpuMissing.",
        "none",
        [
            Q(f"cluster:nvwatch_gpu_up:sum{c}", "up"),
            Q(f"cluster:nvwatch_gpu_expected:sum{c}", "expected"),
        ],
        w=6,
        h=5,
    )


def _utilization_and_alert_count(grid: Grid, cfg: MixinConfig) -> None:
    grid.add(
        "gauge",
        "Fleet GPU utilization",
        "Mean GPU utilization over all GPUs of the cluster. Low while the queue is full "
        "points at starved jobs (NvwatchGpuStarved) or scheduling gaps.",
        "percentunit",
        [
            Q(
                f"cluster:nvwatch_gpu_utilization_ratio:avg{cluster_scope(cfg)}",
                legend(cfg.cluster_label),
            )
        ],
        w=6,
        h=5,
        steps=t.utilization(cfg),
        min_=0,
        max_=1,
    )
    grid.add(
        "stat",
        "Firing nvwatch alerts",
        "Number of nvwatch alerts firing now; the table below lists them.",
        "none",
        [Q(f"count({_firing(cfg)}) or vector(0)", "firing")],
        w=6,
        h=5,
        steps=t.ANY_BAD,
    )


def _power_and_heat(grid: Grid, cfg: MixinConfig) -> None:
    c = cluster_scope(cfg)
    cluster = legend(cfg.cluster_label)
    grid.add(
        "timeseries",
        "Total GPU power vs total TDP",
        "Sum of GPU board power against the sum of the GPUs' TDP. Power near TDP across the "
        "fleet means the facility's power plan is being used; compare with the PDU budget.",
        "watt",
        [
            Q(f"cluster:nvwatch_gpu_power_watts:sum{c}", f"power {cluster}"),
            Q(f"cluster:nvwatch_gpu_power_tdp_watts:sum{c}", f"TDP {cluster}"),
        ],
    )
    grid.add(
        "bargauge",
        "Hottest nodes (hottest GPU of each)",
        "The ten nodes whose hottest GPU die is warmest. Compare with the GPU's slowdown "
        "threshold (85-89 °C by model) on the node dashboard; a hot node among cool ones "
        "is a local airflow problem.",
        "celsius",
        [
            Q(
                f"topk(10, instance:nvwatch_gpu_temperature_celsius:max{c})",
                legend(cfg.instance_label),
                instant=True,
            )
        ],
        steps=t.temperature(cfg),
        links=[node_series_link(cfg, NODE, "Node dashboard")],
        # the bar's scale, not a threshold: room temperature to above any slowdown
        min_=20,
        max_=100,
    )


def _throttling_and_alerts(grid: Grid, cfg: MixinConfig) -> None:
    grid.add(
        "timeseries",
        "GPUs throttling now, by reason",
        "How many GPUs have each clock-event reason active (idle and application clocks "
        "left out). sw_power_cap is a capacity signal; thermal reasons and hw_power_brake "
        "are faults: see the thermal & power dashboard.",
        "none",
        [Q(f"cluster:nvwatch_gpu_clock_event_active:sum{cluster_scope(cfg)}", "{{reason}}")],
        steps=t.ANY_WARN,
        custom=STACKED,
    )
    grid.add(
        "table",
        "Firing alerts",
        "nvwatch alerts firing now with their labels; each alert's runbook is in docs/alerts.md.",
        "none",
        [Q(_firing(cfg), instant=True, table=True)],
        transformations=HIDE_TIME_AND_VALUE,
    )


def _fabric(grid: Grid, cfg: MixinConfig) -> None:
    c = cluster_scope(cfg)
    node = legend(cfg.instance_label)
    grid.add(
        "timeseries",
        "InfiniBand fabric throughput",
        "Bytes per second all IB ports of the cluster send and receive. Drops during "
        "training runs point at a stalled job or a fabric problem (IB fabric dashboard).",
        "Bps",
        [
            Q(f"cluster:nvwatch_ib_port_transmit_bytes:rate{c}", "transmit"),
            Q(f"cluster:nvwatch_ib_port_receive_bytes:rate{c}", "receive"),
        ],
    )
    grid.add(
        "bargauge",
        "Error hot spots (NVLink and IB errors per second)",
        "Nodes with the highest NVLink and InfiniBand error rates. A node that tops this "
        "list repeatedly has a bad link: open the NVLink or IB fabric dashboard for it.",
        "cps",
        [
            Q(
                f"topk(5, instance:nvwatch_nvlink_errors:rate{c} > 0)",
                f"NVLink {node}",
                instant=True,
            ),
            Q(f"topk(5, instance:nvwatch_ib_port_errors:rate{c} > 0)", f"IB {node}", instant=True),
        ],
        steps=t.error_rates(cfg),
        links=[
            node_series_link(cfg, NVLINK, "NVLink links", ref_id="A"),
            node_series_link(cfg, INFINIBAND, "IB ports", ref_id="B"),
        ],
    )


# Top to bottom, as the grid lays them out.
_PANELS: tuple[PanelRow, ...] = (
    _counts,
    _utilization_and_alert_count,
    _power_and_heat,
    _throttling_and_alerts,
    _fabric,
)


def cluster_overview(cfg: MixinConfig) -> g.Dashboard:
    return dashboard(
        cfg,
        CLUSTER_OVERVIEW,
        "nvwatch / Cluster overview",
        "The state of the GPU fleet at a glance: nodes, GPUs, utilization, power, heat, "
        "throttling, alerts and fabric.",
        _PANELS,
        [variable(cfg, cfg.cluster_label, "Cluster")],
    )
