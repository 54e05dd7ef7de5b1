"""Fabric dashboards: NVLink inside the nodes and InfiniBand between them."""

from __future__ import annotations

from grafanalib import core as g

from dashboards.builder import ANY_BAD, HIGH_BAD, Grid, Q, dashboard, variable
from mixin.config import MixinConfig

_NODE_LINK = "{{%s}} GPU {{gpu}} link {{link}}"
_NODE_PORT = "{{%s}} {{device}}/{{port}}"
# below EDR (12.5 GB/s) no DGX compute fabric port is healthy
OK_RATE = ((None, "orange"), (1.25e10, "green"))


def nvlink(cfg: MixinConfig) -> g.Dashboard:
    sel = cfg.sel(f'{cfg.cluster_label}=~"$cluster"', f'{cfg.instance_label}=~"$instance"')
    inst = cfg.instance_label
    by = f"{inst}, gpu, link"
    grid = Grid()
    grid.add(
        "heatmap",
        "Throughput per GPU x link",
        "One row per GPU link, colour = bytes per second sent plus received. A dark row "
        "among busy ones is a link that carries nothing: down, or routed around.",
        "Bps",
        [
            Q(
                f"sum by ({by}) (rate(nvwatch_nvlink_transmit_bytes_total{sel}[$__rate_interval])"
                f" + rate(nvwatch_nvlink_receive_bytes_total{sel}[$__rate_interval]))",
                _NODE_LINK % inst,
            )
        ],
        w=24,
        h=10,
    )
    grid.add(
        "stat",
        "Links down",
        "NVLink links NVML reports inactive. Any is NvwatchNvlinkDown.",
        "none",
        [Q(f"count(nvwatch_nvlink_up{sel} == 0) or vector(0)", "down", instant=True)],
        w=6,
        h=8,
        steps=ANY_BAD,
    )
    grid.add(
        "bargauge",
        "Active links per GPU",
        "Active links of each GPU; compare with its node class (4 on DGX-1 P100, 6 on "
        "V100/DGX-2, 12 on A100, 18 on H100).",
        "none",
        [
            Q(
                f"sum by ({inst}, gpu) (nvwatch_nvlink_up{sel})",
                f"{{{{{inst}}}}} GPU {{{{gpu}}}}",
                instant=True,
            )
        ],
        w=18,
        h=8,
        steps=((None, "red"), (4, "green")),
        min_=0,
    )
    grid.add(
        "timeseries",
        "CRC / replay / recovery error rates",
        "NVLink data-link errors per second per link and type (only links with errors). "
        "CRC errors cause replays; recoveries retrain the link and stall traffic.",
        "cps",
        [
            Q(
                f"sum by ({by}, type) (rate(nvwatch_nvlink_errors_total{sel}[$__rate_interval]))"
                " > 0",
                (_NODE_LINK % inst) + " {{type}}",
            )
        ],
        steps=((None, "green"), (cfg.nvlink_error_rate_per_second, "red")),
    )
    grid.add(
        "timeseries",
        "Link utilization vs line rate",
        "Transmit bytes per second as a share of each link's line rate.",
        "percentunit",
        [
            Q(
                f"rate(nvwatch_nvlink_transmit_bytes_total{sel}[$__rate_interval])"
                f" / nvwatch_nvlink_speed_bytes_per_second{sel}",
                _NODE_LINK % inst,
            )
        ],
        steps=HIGH_BAD,
        min_=0,
        max_=1,
    )
    grid.add(
        "table",
        "Peer map",
        "What each link connects to: another GPU (remote_gpu), an NVSwitch or the CPU. "
        "DGX-1 links form the hybrid cube-mesh; DGX-2/A100/H100 links go to NVSwitches.",
        "none",
        [Q(f"nvwatch_nvlink_remote_info{sel}", instant=True, table=True)],
        w=24,
        h=10,
        transformations=[
            {"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True}}}
        ],
    )
    return dashboard(
        cfg,
        "nvwatch-nvlink",
        "nvwatch / NVLink fabric",
        "NVLink links of the selected nodes: traffic per link, links down, errors, peers.",
        grid,
        [
            variable(cfg, cfg.cluster_label, "Cluster"),
            variable(cfg, cfg.instance_label, "Node"),
        ],
        time_from="now-3h",
    )


def infiniband(cfg: MixinConfig) -> g.Dashboard:
    sel = cfg.ib_sel(f'{cfg.cluster_label}=~"$cluster"', f'{cfg.instance_label}=~"$instance"')
    inst = cfg.instance_label
    port = _NODE_PORT % inst
    grid = Grid()
    grid.add(
        "timeseries",
        "Throughput per port",
        "Bytes per second each port sends and receives.",
        "Bps",
        [
            Q(f"rate(nvwatch_ib_port_transmit_bytes_total{sel}[$__rate_interval])", port + " tx"),
            Q(f"rate(nvwatch_ib_port_receive_bytes_total{sel}[$__rate_interval])", port + " rx"),
        ],
    )
    grid.add(
        "timeseries",
        "Throughput vs line rate",
        "Larger of transmit and receive as a share of the port's nominal rate. Near 1 the "
        "port is the bottleneck of the job using it.",
        "percentunit",
        [
            Q(
                f"max by ({inst}, device, port) ("
                f"rate(nvwatch_ib_port_transmit_bytes_total{sel}[$__rate_interval])"
                f" or rate(nvwatch_ib_port_receive_bytes_total{sel}[$__rate_interval]))"
                f" / on ({inst}, device, port) group_left ()"
                f" max by ({inst}, device, port) (nvwatch_ib_port_rate_bytes_per_second{sel})",
                port,
            )
        ],
        steps=HIGH_BAD,
        min_=0,
        max_=1,
    )
    grid.add(
        "timeseries",
        "Transmit wait ratio (congestion)",
        "Approximate share of time the port had data but no credits: port_xmit_wait "
        f"ticks x {cfg.ib_transmit_wait_tick_seconds:g} s per tick (the tick is "
        "device-specific; see docs/alerts.md, NvwatchIbPortCongested).",
        "percentunit",
        [
            Q(
                f"rate(nvwatch_ib_port_transmit_wait_total{sel}[$__rate_interval])"
                f" * {cfg.ib_transmit_wait_tick_seconds:g}",
                port,
            )
        ],
        steps=((None, "green"), (cfg.ib_transmit_wait_ratio, "orange")),
        min_=0,
    )
    grid.add(
        "timeseries",
        "Errors by type",
        "Port error counters per second (only ports with errors). symbol and "
        "link_error_recovery point at cables; link_downed is a flap; discards at congestion.",
        "cps",
        [
            Q(
                f"rate(nvwatch_ib_port_errors_total{sel}[$__rate_interval]) > 0",
                port + " {{type}}",
            )
        ],
        steps=((None, "green"), (cfg.ib_error_rate_per_second, "red")),
    )
    grid.add(
        "state-timeline",
        "Link state",
        "Logical port state over time: ACTIVE is healthy; DOWN, INIT or ARMED mean the "
        "port carries no traffic (NvwatchIbPortDown).",
        "none",
        [Q(f"nvwatch_ib_port_state{sel}", port)],
        steps=((None, "red"), (4, "green")),
        mappings=[
            {
                "type": "value",
                "options": {
                    "1": {"text": "DOWN", "color": "red"},
                    "2": {"text": "INIT", "color": "orange"},
                    "3": {"text": "ARMED", "color": "orange"},
                    "4": {"text": "ACTIVE", "color": "green"},
                    "5": {"text": "ACTIVE_DEFER", "color": "yellow"},
                },
            }
        ],
    )
    grid.add(
        "bargauge",
        "Rate per port",
        "Nominal rate each port trained to. A port below its siblings runs degraded "
        "(NvwatchIbPortRateDegraded): cable, transceiver or switch port.",
        "Bps",
        [Q(f"nvwatch_ib_port_rate_bytes_per_second{sel}", port, instant=True)],
        steps=OK_RATE,
    )
    grid.add(
        "table",
        "Saturated counters",
        "Narrow IB counters pinned at their maximum: they stopped counting, so rates from "
        "them read zero. Reset the counters (perfquery -R) or rely on the 64-bit ones.",
        "none",
        [Q(f"nvwatch_ib_port_reading_saturated{sel} == 1", instant=True, table=True)],
        steps=ANY_BAD,
    )
    grid.add(
        "table",
        "GPU affinity",
        "Which GPUs sit nearest to each port on PCIe (GPUDirect RDMA path). Jobs should "
        "use the HCA nearest to their GPU.",
        "none",
        [Q(f"nvwatch_ib_port_info{sel}", instant=True, table=True)],
        transformations=[
            {"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True}}}
        ],
    )
    return dashboard(
        cfg,
        "nvwatch-infiniband",
        "nvwatch / InfiniBand fabric",
        "InfiniBand ports of the selected nodes: throughput against line rate, congestion, "
        "errors, link state and rate, saturated counters and GPU affinity.",
        grid,
        [
            variable(cfg, cfg.cluster_label, "Cluster"),
            variable(cfg, cfg.instance_label, "Node"),
        ],
        time_from="now-3h",
    )
