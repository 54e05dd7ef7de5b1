"""The NVLink fabric dashboard: the fleet's worst nodes from the per-node recording rules,
then traffic per link, links down, errors and peers of the selected nodes' GPUs.

The per-link panels read every link of the nodes selected: 144 series a DGX H100, a
hundred thousand and more for a whole fleet, which no query answers within seconds and
no one reads. So the node variable offers no "All" and the dashboard opens on one node;
the fleet row above the per-link panels is what answers "where" across every node."""

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
from nvwatch.dashboards.links import NODE, NVLINK, DataLink, carry, from_label, label_value
from nvwatch.mixin.config import MixinConfig


def _sel(cfg: MixinConfig) -> str:
    return cfg.sel(*node_matchers(cfg), 'gpu=~"$gpu"')


def _to_node(cfg: MixinConfig) -> DataLink:
    """From a series of one GPU of one node to the node dashboard showing that GPU."""
    return DataLink(
        NODE,
        f"Node dashboard of {label_value(cfg.instance_label)}, GPU {label_value('gpu')}",
        (
            carry("cluster"),
            from_label("instance", cfg.instance_label),
            from_label("gpu", "gpu"),
        ),
    )


def _link_legend(cfg: MixinConfig) -> str:
    return legend(cfg.instance_label) + " GPU {{gpu}} link {{link}}"


FLEET_WORST = 20  # nodes a fleet panel lists: the worst, by its own measure


def _fleet(grid: Grid, cfg: MixinConfig) -> None:
    c, node = cluster_scope(cfg), legend(cfg.instance_label)
    grid.add(
        "timeseries",
        f"Nodes with the most NVLink errors (worst {FLEET_WORST}, every node)",
        "NVLink CRC, replay and recovery errors per second of each node, from the per-node "
        f"recording rule, over the chosen clusters; the {FLEET_WORST} highest at each "
        "point, only nodes with errors. Click a node to see its links below.",
        "cps",
        [Q(f"topk({FLEET_WORST}, instance:nvwatch_nvlink_errors:rate{c} > 0)", node)],
        w=12,
        steps=t.above(cfg.nvlink_error_rate_per_second),
        links=[node_series_link(cfg, NVLINK, "NVLink")],
    )
    grid.add(
        "timeseries",
        f"Nodes with links down (worst {FLEET_WORST}, every node)",
        "Inactive NVLink links of each node, from the per-node recording rule; only nodes "
        "with any. Click a node to see which GPU's links.",
        "none",
        [Q(f"topk({FLEET_WORST}, instance:nvwatch_nvlink_down:sum{c} > 0)", node)],
        w=12,
        steps=t.ANY_BAD,
        links=[node_series_link(cfg, NVLINK, "NVLink")],
        min_=0,
    )


def _traffic(grid: Grid, cfg: MixinConfig) -> None:
    sel = _sel(cfg)
    grid.add(
        "heatmap",
        "Throughput per GPU x link",
        "One row per GPU link, colour = bytes per second sent plus received. A dark row "
        "among busy ones is a link that carries nothing: down, or routed around.",
        "Bps",
        [
            Q(
                f"sum by ({cfg.instance_label}, gpu, link) "
                f"({rate('nvwatch_nvlink_transmit_bytes_total' + sel)}"
                f" + {rate('nvwatch_nvlink_receive_bytes_total' + sel)})",
                _link_legend(cfg),
            )
        ],
        w=24,
        h=10,
    )


def _link_counts(grid: Grid, cfg: MixinConfig) -> None:
    sel = _sel(cfg)
    inst = cfg.instance_label
    # the per-node recording rule: with every node selected this is a fleet-wide count
    scope = "{" + ", ".join(node_matchers(cfg)) + "}"
    grid.add(
        "stat",
        "Links down",
        "NVLink links NVML reports inactive (as of the last rule evaluation, 1m). Any is "
        "NvwatchNvlinkDown.",
        "none",
        [Q(f"sum(instance:nvwatch_nvlink_down:sum{scope}) or vector(0)", "down", instant=True)],
        w=6,
        h=8,
        steps=t.ANY_BAD,
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
        links=[_to_node(cfg)],
        steps=t.nvlinks_per_gpu(cfg),
        min_=0,
    )


def _errors_and_load(grid: Grid, cfg: MixinConfig) -> None:
    sel = _sel(cfg)
    grid.add(
        "timeseries",
        "CRC / replay / recovery error rates",
        "NVLink data-link errors per second per link and type (only links with errors). "
        "CRC errors cause replays; recoveries retrain the link and stall traffic.",
        "cps",
        [
            Q(
                f"sum by ({cfg.instance_label}, gpu, link, type) "
                f"({rate('nvwatch_nvlink_errors_total' + sel)}) > 0",
                _link_legend(cfg) + " {{type}}",
            )
        ],
        steps=t.above(cfg.nvlink_error_rate_per_second),
        links=[_to_node(cfg)],
    )
    grid.add(
        "timeseries",
        "Link utilization vs line rate",
        "Transmit bytes per second as a share of each link's line rate.",
        "percentunit",
        [
            Q(
                f"{rate('nvwatch_nvlink_transmit_bytes_total' + sel)}"
                f" / nvwatch_nvlink_speed_bytes_per_second{sel}",
                _link_legend(cfg),
            )
        ],
        steps=t.load(cfg),
        links=[_to_node(cfg)],
        min_=0,
        max_=1,
    )


def _peers(grid: Grid, cfg: MixinConfig) -> None:
    grid.add(
        "table",
        "Peer map",
        "What each link connects to: another GPU (remote_gpu), an NVSwitch or the CPU. "
        "DGX-1 links form the hybrid cube-mesh; DGX-2/A100/H100 links go to NVSwitches.",
        "none",
        [Q(f"nvwatch_nvlink_remote_info{_sel(cfg)}", instant=True, table=True)],
        w=24,
        h=10,
        transformations=HIDE_TIME_AND_VALUE,
    )


# Top to bottom, as the grid lays them out.
_PANELS: tuple[PanelRow, ...] = (
    _fleet,
    _traffic,
    _link_counts,
    _errors_and_load,
    _peers,
)


def nvlink(cfg: MixinConfig) -> g.Dashboard:
    return dashboard(
        cfg,
        NVLINK,
        "nvwatch / NVLink fabric",
        "The fleet's nodes with the most NVLink errors and links down, then the links of "
        "the selected nodes: traffic per link, links down, errors, peers. It opens on one "
        'node (no "All": every link of a fleet is too many series to draw).',
        _PANELS,
        [
            variable(cfg, cfg.cluster_label, "Cluster"),
            variable(cfg, cfg.instance_label, "Node", offer_all=False),
            variable(cfg, "gpu", "GPU"),
        ],
        time_from="now-3h",
    )
