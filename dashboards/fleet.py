"""Fleet-level dashboards: cluster overview, thermal & power, capacity review.

These read the recording rules (one series per node or cluster), never per-GPU raw
series aggregated at query time, so they stay fast on a fleet of thousands of GPUs.
"""

from __future__ import annotations

from grafanalib import core as g

from dashboards.builder import ANY_BAD, HIGH_BAD, LOW_BAD, OK, Grid, Q, dashboard, variable
from mixin.config import MixinConfig

_MERGE = [{"id": "merge", "options": {}}]


def _c(cfg: MixinConfig) -> str:
    return f'{{{cfg.cluster_label}=~"$cluster"}}'


def cluster_overview(cfg: MixinConfig) -> g.Dashboard:
    c = _c(cfg)
    inst = cfg.instance_label
    grid = Grid()
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
    grid.add(
        "gauge",
        "Fleet GPU utilization",
        "Mean GPU utilization over all GPUs of the cluster. Low while the queue is full "
        "points at starved jobs (NvwatchGpuStarved) or scheduling gaps.",
        "percentunit",
        [Q(f"cluster:nvwatch_gpu_utilization_ratio:avg{c}", f"{{{{{cfg.cluster_label}}}}}")],
        w=6,
        h=5,
        steps=LOW_BAD,
        min_=0,
        max_=1,
    )
    grid.add(
        "stat",
        "Firing nvwatch alerts",
        "Number of nvwatch alerts firing now; the table below lists them.",
        "none",
        [
            Q(
                f'count(ALERTS{{alertstate="firing", alertname=~"Nvwatch.*", '
                f'{cfg.cluster_label}=~"$cluster"}}) or vector(0)',
                "firing",
            )
        ],
        w=6,
        h=5,
        steps=ANY_BAD,
    )
    grid.add(
        "timeseries",
        "Total GPU power vs total TDP",
        "Sum of GPU board power against the sum of the GPUs' TDP. Power near TDP across the "
        "fleet means the facility's power plan is being used; compare with the PDU budget.",
        "watt",
        [
            Q(f"cluster:nvwatch_gpu_power_watts:sum{c}", "power {{" + cfg.cluster_label + "}}"),
            Q(f"cluster:nvwatch_gpu_power_tdp_watts:sum{c}", "TDP {{" + cfg.cluster_label + "}}"),
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
                f"{{{{{inst}}}}}",
                instant=True,
            )
        ],
        steps=((None, "green"), (75, "orange"), (85, "red")),
        min_=20,
        max_=100,
    )
    grid.add(
        "timeseries",
        "GPUs throttling now, by reason",
        "How many GPUs have each clock-event reason active (idle and application clocks "
        "left out). sw_power_cap is a capacity signal; thermal reasons and hw_power_brake "
        "are faults: see the thermal & power dashboard.",
        "none",
        [Q(f"cluster:nvwatch_gpu_clock_event_active:sum{c}", "{{reason}}")],
        steps=((None, "green"), (1, "orange")),
        custom={"drawStyle": "line", "fillOpacity": 20, "stacking": {"mode": "normal"}},
    )
    grid.add(
        "table",
        "Firing alerts",
        "nvwatch alerts firing now with their labels; each alert's runbook is in docs/alerts.md.",
        "none",
        [
            Q(
                f'ALERTS{{alertstate="firing", alertname=~"Nvwatch.*", '
                f'{cfg.cluster_label}=~"$cluster"}}',
                instant=True,
                table=True,
            )
        ],
        transformations=[
            {"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True}}}
        ],
    )
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
                f"NVLink {{{{{inst}}}}}",
                instant=True,
            ),
            Q(
                f"topk(5, instance:nvwatch_ib_port_errors:rate{c} > 0)",
                f"IB {{{{{inst}}}}}",
                instant=True,
            ),
        ],
        steps=((None, "green"), (0.1, "orange"), (1, "red")),
    )
    return dashboard(
        cfg,
        "nvwatch-cluster-overview",
        "nvwatch / Cluster overview",
        "The state of the GPU fleet at a glance: nodes, GPUs, utilization, power, heat, "
        "throttling, alerts and fabric.",
        grid,
        [variable(cfg, cfg.cluster_label, "Cluster")],
    )


def thermal_power(cfg: MixinConfig) -> g.Dashboard:
    c = _c(cfg)
    inst = cfg.instance_label
    rack = cfg.rack_label
    grid = Grid()
    grid.add(
        "heatmap",
        "Hottest GPU per node",
        "One row per node, colour = temperature of its hottest GPU die. Bands of heat "
        "across a rack or an aisle are a cooling problem; single hot rows are a node.",
        "celsius",
        [Q(f"instance:nvwatch_gpu_temperature_celsius:max{c}", f"{{{{{inst}}}}}")],
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
        custom={"drawStyle": "line", "fillOpacity": 20, "stacking": {"mode": "normal"}},
    )
    grid.add(
        "timeseries",
        "GPUs with a throttle reason active",
        "Number of GPUs with each clock-event reason active now.",
        "none",
        [Q(f"cluster:nvwatch_gpu_clock_event_active:sum{c}", "{{reason}}")],
        steps=((None, "green"), (1, "orange")),
    )
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
                f"{{{{{inst}}}}}",
                instant=True,
            )
        ],
        steps=((None, "red"), (1 - cfg.node_power_budget_fraction, "orange"), (0.3, "green")),
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
                f"{{{{{rack}}}}}",
            )
        ],
        steps=HIGH_BAD,
        min_=0,
        max_=1,
        h=10,
    )
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
                f"avg_over_time(cluster:nvwatch_gpu_energy_joules:rate{c}[$__range])"
                " * $__range_s / 3600000",
                "energy",
                instant=True,
            )
        ],
    )
    return dashboard(
        cfg,
        "nvwatch-thermal-power",
        "nvwatch / Thermal & power",
        "Where the fleet is hot, how much time GPUs lose to throttling, and how much power "
        "headroom nodes, racks and the cluster have.",
        grid,
        [variable(cfg, cfg.cluster_label, "Cluster")],
    )


def capacity_review(cfg: MixinConfig) -> g.Dashboard:
    c = _c(cfg)
    inst = cfg.instance_label
    grid = Grid()
    util = f"instance:nvwatch_gpu_utilization_ratio:avg{c}"
    grid.add(
        "stat",
        "GPU-hours busy / idle",
        "GPU-hours in the range spent busy (mean utilization x GPUs up x hours) and idle. "
        "Idle hours are capacity that could be given back or scheduled better.",
        "h",
        [
            Q(
                f"avg_over_time(cluster:nvwatch_gpu_utilization_ratio:avg{c}[$__range])"
                f" * avg_over_time(cluster:nvwatch_gpu_up:sum{c}[$__range]) * $__range_s / 3600",
                "busy",
                instant=True,
            ),
            Q(
                f"(1 - avg_over_time(cluster:nvwatch_gpu_utilization_ratio:avg{c}[$__range]))"
                f" * avg_over_time(cluster:nvwatch_gpu_up:sum{c}[$__range]) * $__range_s / 3600",
                "idle",
                instant=True,
            ),
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
                f"avg_over_time(cluster:nvwatch_gpu_energy_joules:rate{c}[$__range])"
                " * $__range_s / 3600000",
                "energy",
                instant=True,
            )
        ],
        w=8,
        h=5,
    )
    grid.add(
        "gauge",
        "Cluster HBM headroom (peak use)",
        "1 - the highest share of GPU memory in use across the cluster in the range. "
        "Little headroom means jobs are memory-bound: bigger-memory GPUs help more than "
        "more GPUs.",
        "percentunit",
        [
            Q(
                f"1 - max_over_time((cluster:nvwatch_gpu_memory_used_bytes:sum{c}"
                f" / cluster:nvwatch_gpu_memory_total_bytes:sum{c})[$__range:$__interval])",
                "headroom",
                instant=True,
            )
        ],
        w=8,
        h=5,
        steps=((None, "red"), (0.1, "orange"), (0.3, "green")),
        min_=0,
        max_=1,
    )
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
        steps=LOW_BAD,
        transformations=_MERGE,
    )
    grid.add(
        "bargauge",
        "Idlest nodes",
        "The ten nodes with the lowest mean GPU utilization over the range: candidates for "
        "consolidation or for a look at why jobs avoid them.",
        "percentunit",
        [Q(f"bottomk(10, avg_over_time({util}[$__range]))", f"{{{{{inst}}}}}", instant=True)],
        steps=LOW_BAD,
        min_=0,
        max_=1,
    )
    grid.add(
        "bargauge",
        "Busiest nodes",
        "The ten nodes with the highest mean GPU utilization over the range.",
        "percentunit",
        [Q(f"topk(10, avg_over_time({util}[$__range]))", f"{{{{{inst}}}}}", instant=True)],
        steps=OK,
        min_=0,
        max_=1,
    )
    grid.add(
        "bargauge",
        "HBM headroom per node (least first)",
        "1 - the node's peak share of GPU memory in use over the range.",
        "percentunit",
        [
            Q(
                f"bottomk(10, 1 - max_over_time((instance:nvwatch_gpu_memory_used_bytes:sum{c}"
                f" / instance:nvwatch_gpu_memory_total_bytes:sum{c})[$__range:$__interval]))",
                f"{{{{{inst}}}}}",
                instant=True,
            )
        ],
        steps=((None, "red"), (0.1, "orange"), (0.3, "green")),
        min_=0,
        max_=1,
    )
    grid.add(
        "bargauge",
        "Power headroom per node at peak (least first)",
        "1 - the node's peak GPU power as a share of its GPUs' TDP over the range.",
        "percentunit",
        [
            Q(
                f"bottomk(10, 1 - max_over_time((instance:nvwatch_gpu_power_watts:sum{c}"
                f" / instance:nvwatch_gpu_power_tdp_watts:sum{c})[$__range:$__interval]))",
                f"{{{{{inst}}}}}",
                instant=True,
            )
        ],
        steps=((None, "red"), (0.1, "orange"), (0.3, "green")),
        min_=0,
        max_=1,
    )
    grid.add(
        "bargauge",
        "Energy per node",
        "GPU energy each node used in the range; the top ten.",
        "kwatth",
        [
            Q(
                f"topk(10, avg_over_time(instance:nvwatch_gpu_energy_joules:rate{c}[$__range])"
                " * $__range_s / 3600000)",
                f"{{{{{inst}}}}}",
                instant=True,
            )
        ],
    )
    return dashboard(
        cfg,
        "nvwatch-capacity-review",
        "nvwatch / Capacity review (30d)",
        "Thirty days of utilization, memory, power and energy per node, for the capacity "
        "review: what is busy, what is idle, where headroom is left.",
        grid,
        [variable(cfg, cfg.cluster_label, "Cluster")],
        time_from="now-30d",
    )
