"""The InfiniBand fabric dashboard: the fleet's racks and worst nodes from the recording
rules, then throughput against line rate, congestion, errors, link state and rate,
saturated counters and GPU affinity of the selected nodes' ports.

The per-port panels read every port of the nodes selected; a fleet's ten thousand ports
over a day is more than a query answers within seconds, so the node variable offers no
"All" and the dashboard opens on one node, under the fleet-wide row."""

from __future__ import annotations

from grafanalib import core as g

from nvwatch.dashboards import thresholds as t
from nvwatch.dashboards.builder import (
    HIDE_TIME_AND_VALUE,
    Grid,
    PanelRow,
    Q,
    cluster_scope,
    dashboard,
    legend,
    node_matchers,
    node_series_link,
    rate,
    variable,
)
from nvwatch.dashboards.links import INFINIBAND, NODE, DataLink, carry, from_label, label_value
from nvwatch.dashboards.nvlink import FLEET_WORST
from nvwatch.mixin.config import MixinConfig

_STATES = [
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
]


def _sel(cfg: MixinConfig) -> str:
    return cfg.ib_sel(*node_matchers(cfg))


def _port(cfg: MixinConfig) -> str:
    return legend(cfg.instance_label) + " {{device}}/{{port}}"


def _throughput(grid: Grid, cfg: MixinConfig) -> None:
    sel, port, by = _sel(cfg), _port(cfg), f"{cfg.instance_label}, device, port"
    tx = rate("nvwatch_ib_port_transmit_bytes_total" + sel)
    rx = rate("nvwatch_ib_port_receive_bytes_total" + sel)
    grid.add(
        "timeseries",
        "Throughput per port",
        "Bytes per second each port sends and receives.",
        "Bps",
        [Q(tx, port + " tx"), Q(rx, port + " rx")],
        links=[
            DataLink(
                NODE,
                f"Node dashboard of {label_value(cfg.instance_label)}",
                (carry("cluster"), from_label("instance", cfg.instance_label)),
            )
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
                f"max by ({by}) ({tx} or {rx}) / on ({by}) group_left ()"
                f" max by ({by}) (nvwatch_ib_port_rate_bytes_per_second{sel})",
                port,
            )
        ],
        steps=t.load(cfg),
        min_=0,
        max_=1,
    )


def _congestion_and_errors(grid: Grid, cfg: MixinConfig) -> None:
    sel, port = _sel(cfg), _port(cfg)
    tick = f"{cfg.ib_transmit_wait_tick_seconds:g}"
    grid.add(
        "timeseries",
        "Transmit wait ratio (congestion)",
        "Approximate share of time the port had data but no credits: port_xmit_wait "
        f"ticks x {tick} s per tick (the tick is "
        "device-specific; see docs/alerts.md, NvwatchIbPortCongested).",
        "percentunit",
        [Q(f"{rate('nvwatch_ib_port_transmit_wait_total' + sel)} * {tick}", port)],
        steps=t.above(cfg.ib_transmit_wait_ratio, "orange"),
        min_=0,
    )
    grid.add(
        "timeseries",
        "Errors by type",
        "Port error counters per second (only ports with errors). symbol and "
        "link_error_recovery point at cables; link_downed is a flap; discards at congestion.",
        "cps",
        [Q(f"{rate('nvwatch_ib_port_errors_total' + sel)} > 0", port + " {{type}}")],
        steps=t.above(cfg.ib_error_rate_per_second),
    )


def _link(grid: Grid, cfg: MixinConfig) -> None:
    sel, port = _sel(cfg), _port(cfg)
    grid.add(
        "state-timeline",
        "Link state",
        "Logical port state over time: ACTIVE is healthy; DOWN, INIT or ARMED mean the "
        "port carries no traffic (NvwatchIbPortDown).",
        "none",
        [Q(f"nvwatch_ib_port_state{sel}", port)],
        steps=t.IB_PORT_ACTIVE,
        mappings=_STATES,
    )
    grid.add(
        "bargauge",
        "Rate per port",
        "Nominal rate each port trained to. A port below its siblings runs degraded "
        "(NvwatchIbPortRateDegraded): cable, transceiver or switch port.",
        "Bps",
        [Q(f"nvwatch_ib_port_rate_bytes_per_second{sel}", port, instant=True)],
        steps=t.ib_rate(cfg),
    )


def _tables(grid: Grid, cfg: MixinConfig) -> None:
    sel = _sel(cfg)
    grid.add(
        "table",
        "Saturated counters",
        "Narrow IB counters pinned at their maximum: they stopped counting, so rates from "
        "them read zero. Reset the counters (perfquery -R) or rely on the 64-bit ones.",
        "none",
        [Q(f"nvwatch_ib_port_reading_saturated{sel} == 1", instant=True, table=True)],
        steps=t.ANY_BAD,
    )
    grid.add(
        "table",
        "GPU affinity",
        "Which GPUs sit nearest to each port on PCIe (GPUDirect RDMA path). Jobs should "
        "use the HCA nearest to their GPU.",
        "none",
        [Q(f"nvwatch_ib_port_info{sel}", instant=True, table=True)],
        transformations=HIDE_TIME_AND_VALUE,
    )


def _racks(grid: Grid, cfg: MixinConfig) -> None:
    c = cluster_scope(cfg)
    rack = legend(cfg.rack_label)
    grid.add(
        "timeseries",
        "Throughput per rack (leaf switch)",
        "Bytes per second the nodes of each rack send and receive over IB, from the rack "
        "recording rules. On a fat-tree a rack is a leaf switch: a rack far above its "
        "siblings is where the uplinks saturate first.",
        "Bps",
        [
            Q(f"rack:nvwatch_ib_port_transmit_bytes:rate{c}", rack + " tx"),
            Q(f"rack:nvwatch_ib_port_receive_bytes:rate{c}", rack + " rx"),
        ],
        w=12,
    )
    grid.add(
        "timeseries",
        f"Nodes with the most port errors (worst {FLEET_WORST}, every node)",
        "Port errors per second of each node (every type, every port), from the per-node "
        f"recording rule over the chosen clusters; the {FLEET_WORST} highest at each point, "
        "only nodes with errors. Click a node to see its ports below.",
        "cps",
        [
            Q(
                f"topk({FLEET_WORST}, instance:nvwatch_ib_port_errors:rate{c} > 0)",
                legend(cfg.instance_label),
            )
        ],
        w=12,
        steps=t.above(cfg.ib_error_rate_per_second),
        links=[node_series_link(cfg, INFINIBAND, "InfiniBand")],
    )


# Top to bottom, as the grid lays them out.
_PANELS: tuple[PanelRow, ...] = (
    _racks,
    _throughput,
    _congestion_and_errors,
    _link,
    _tables,
)


def infiniband(cfg: MixinConfig) -> g.Dashboard:
    return dashboard(
        cfg,
        INFINIBAND,
        "nvwatch / InfiniBand fabric",
        "Throughput per rack and the fleet's nodes with the most port errors, then the "
        "InfiniBand ports of the selected nodes: throughput against line rate, congestion, "
        "errors, link state and rate, saturated counters and GPU affinity. It opens on one "
        'node (no "All": every port of a fleet over a day is too much to draw).',
        _PANELS,
        [
            variable(cfg, cfg.cluster_label, "Cluster"),
            variable(cfg, cfg.instance_label, "Node", offer_all=False),
        ],
        time_from="now-3h",
    )
