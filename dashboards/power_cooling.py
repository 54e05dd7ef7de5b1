"""The power & cooling dashboard: the whole node as its BMC measures it, beside its GPUs.

Node input power against GPU power per node, rack and node class, energy, inlet and
exhaust air against each class's operating range, fans and power supplies, and whether
the BMCs answer. Like every fleet dashboard it reads recording rules only
(alerts/recording_bmc.py); a node without a BMC target is simply not on the BMC panels.
"""

from __future__ import annotations

from grafanalib import core as g

from nvwatch.alerts.recording import INLET_MAX, MAX_POWER, SUPPLIES_FOR_REDUNDANCY
from nvwatch.alerts.recording_bmc import (
    BMCS_PROBED,
    BMCS_UP,
    CLUSTER_POWER,
    EXHAUST,
    FANS_STOPPED,
    GPU_ENERGY_WITH_BMC,
    HEALTHY_SUPPLIES,
    INLET,
    NODE_POWER,
    RACK_POWER,
    SLOWEST_FAN,
    SUPPLIES_FAILED,
)
from nvwatch.dashboards import thresholds as t
from nvwatch.dashboards.builder import (
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
from nvwatch.dashboards.links import NODE, POWER_COOLING, DataLink
from nvwatch.dashboards.nvlink import FLEET_WORST
from nvwatch.mixin.config import MixinConfig

GPU_POWER = "instance:nvwatch_gpu_power_watts:sum"


def _to_node(cfg: MixinConfig) -> DataLink:
    return node_series_link(cfg, NODE, "Node dashboard")


def _of_class(cfg: MixinConfig, series: str, figure: str) -> str:
    """`series` (per node) joined with its node class's figure, figure on the right."""
    return f"{series} on ({cfg.node_class_label}) group_left () {figure}"


def _status(grid: Grid, cfg: MixinConfig) -> None:
    c = cluster_scope(cfg)
    grid.add(
        "stat",
        "BMCs answering",
        "BMCs nvwatch's probe read in its last scrape, out of all BMC targets. Fewer: "
        'NvwatchBmcDown names them; their nodes\' GPU thermal alerts say "no BMC data".',
        "none",
        [Q(f"{BMCS_UP}{c}", "answering"), Q(f"{BMCS_PROBED}{c}", "targets")],
        w=8,
        h=5,
    )
    grid.add(
        "stat",
        "Power supplies failed",
        "Supplies the BMCs report failed or without input, fleet-wide. Any: "
        "NvwatchNodePowerSupplyFailed names them, NvwatchNodePowerSupplyRedundancyLost "
        "the nodes left without a spare.",
        "none",
        [Q(f"{SUPPLIES_FAILED}{c}", legend(cfg.cluster_label))],
        steps=t.ANY_BAD,
        w=8,
        h=5,
    )
    grid.add(
        "stat",
        "Fans stopped",
        f"Fans the BMCs read below {cfg.fan_stopped_rpm:g} rpm, fleet-wide "
        "(NvwatchNodeFanStopped).",
        "none",
        [Q(f"{FANS_STOPPED}{c}", legend(cfg.cluster_label))],
        steps=t.ANY_BAD,
        w=8,
        h=5,
    )


def _node_power(grid: Grid, cfg: MixinConfig) -> None:
    c = cluster_scope(cfg)
    node = legend(cfg.instance_label)
    # every node's pair of lines was 2,000 series over a thousand nodes, 36 MB for a
    # day's range (2.5 s at worst): the nodes drawing most, as the fleet's other
    # "worst 20" panels (the GPU line joined to those 20 alone); any node's own pair
    # is on its node dashboard
    drawing_most = f"topk({FLEET_WORST}, {NODE_POWER}{c})"
    grid.add(
        "timeseries",
        f"Node power vs GPU power (the {FLEET_WORST} nodes drawing most, every node)",
        "The whole node's input power from its BMC (DCMI, else its largest power sensor) "
        "and the sum of its GPUs' board power (NVML), for the "
        f"{FLEET_WORST} nodes drawing the most input power at each point, over the "
        "chosen clusters. The gap is CPUs, fans, NICs, drives and conversion losses: "
        "what a GPU-only power plan leaves out. Click a node for its own pair (the node "
        "dashboard's BMC row), whichever it is; a node whose BMC does not answer is "
        "there alone.",
        "watt",
        [
            Q(drawing_most, f"{node} node"),
            Q(f"{GPU_POWER}{c} and on ({cfg.node_labels}) {drawing_most}", f"{node} GPUs"),
        ],
        links=[_to_node(cfg)],
        min_=0,
    )
    grid.add(
        "timeseries",
        "Rack power: whole nodes vs GPUs",
        "Each rack's summed node input power (BMC) against its summed GPU power. The rack's "
        "circuits carry the first; plan them on it.",
        "watt",
        [
            Q(f"{RACK_POWER}{c}", f"{legend(cfg.rack_label)} nodes"),
            Q(f"rack:nvwatch_gpu_power_watts:sum{c}", f"{legend(cfg.rack_label)} GPUs"),
        ],
        min_=0,
    )


def _power_share(grid: Grid, cfg: MixinConfig) -> None:
    c = cluster_scope(cfg)
    nc = cfg.node_class_label
    gpus_with_bmc = f"{GPU_POWER}{c} and on ({cfg.node_labels}) {NODE_POWER}{c}"
    grid.add(
        "bargauge",
        "Node power vs class maximum (highest first)",
        "Each node's input power as a share of its class's maximum system power (mixin "
        "config node_classes, max_power_watts). From "
        f"{cfg.node_power_max_fraction:.0%} NvwatchNodePowerNearMax fires.",
        "percentunit",
        [
            Q(
                f"topk(15, {_of_class(cfg, f'{NODE_POWER}{c} /', MAX_POWER)})",
                legend(cfg.instance_label),
                instant=True,
            )
        ],
        steps=t.node_power(cfg),
        links=[_to_node(cfg)],
        min_=0,
        max_=1,
        w=8,
        h=9,
    )
    grid.add(
        "bargauge",
        "Non-GPU share of node power, per node class",
        "1 - GPU power / node power, summed over the nodes of each class that have BMC "
        "data: the share of the draw that a plan counting GPUs only would miss.",
        "percentunit",
        [
            Q(
                f"1 - sum by ({cfg.cluster_label}, {nc}) ({gpus_with_bmc})\n"
                f"  / sum by ({cfg.cluster_label}, {nc}) ({NODE_POWER}{c})",
                legend(nc),
                instant=True,
            )
        ],
        min_=0,
        max_=1,
        w=8,
        h=9,
    )
    # the GPUs of the same nodes, at the same times: all GPUs against the nodes with a
    # BMC would compare a fleet with part of it
    gpu_energy = f"{GPU_ENERGY_WITH_BMC}{c}"
    grid.add(
        "stat",
        "Energy in the time range: nodes vs GPUs",
        "kWh the nodes with BMC data drew in the selected range (their input power), and "
        "what their GPUs used while the BMC was read (NVML energy counters), over the "
        "time the range has data. Cooling the room costs more on top.",
        "kwatth",
        [
            Q(kwh_in_range(cfg, f"{CLUSTER_POWER}{c}"), "nodes", instant=True),
            Q(kwh_in_range(cfg, gpu_energy), "GPUs", instant=True),
        ],
        w=8,
        h=9,
    )


def _air(grid: Grid, cfg: MixinConfig) -> None:
    c = cluster_scope(cfg)
    nc = cfg.node_class_label
    grid.add(
        "timeseries",
        "Inlet air per node vs class maximum",
        "Air entering each node (the BMC's inlet sensor) and the highest operating inlet "
        "of each node class present. Above it NvwatchNodeInletTemperatureHigh fires and the "
        "GPUs' thermal alerts name the room.",
        "celsius",
        [
            Q(f"{INLET}{c}", legend(cfg.instance_label)),
            Q(
                _of_class(cfg, f"max by ({cfg.cluster_label}, {nc}) ({INLET}{c}) * 0 +", INLET_MAX),
                f"{legend(nc)} maximum",
            ),
        ],
        # the nodes' series only: a class's maximum is no node
        links=[node_series_link(cfg, NODE, "Node dashboard", ref_id="A")],
    )
    grid.add(
        "bargauge",
        "Inlet headroom to the class maximum (least first)",
        "°C each node's inlet air is below its class's operating maximum, the nodes with "
        f"the least first. Orange within {cfg.dashboard_inlet_headroom_celsius:g} °C, red "
        "past it.",
        "celsius",
        [
            Q(
                f"bottomk(15, {_of_class(cfg, f'-1 * {INLET}{c} +', INLET_MAX)})",
                legend(cfg.instance_label),
                instant=True,
            )
        ],
        steps=t.inlet_headroom(cfg),
        links=[_to_node(cfg)],
    )
    grid.add(
        "timeseries",
        "Exhaust air per node",
        "Air leaving each node (the BMC sensors the probe's exhaust pattern names). It "
        "follows the node's power; hot exhaust on a normal inlet is the node's airflow.",
        "celsius",
        [Q(f"{EXHAUST}{c}", legend(cfg.instance_label))],
        links=[_to_node(cfg)],
    )


def _fans_and_supplies(grid: Grid, cfg: MixinConfig) -> None:
    c = cluster_scope(cfg)
    spare = f"{HEALTHY_SUPPLIES}{c} - on ({cfg.node_class_label}) group_left () "
    grid.add(
        "bargauge",
        "Slowest fan per node (slowest first)",
        f"Each node's slowest fan. Red below {cfg.fan_stopped_rpm:g} rpm, where "
        "NvwatchNodeFanStopped fires and the GPUs' thermal alerts name the node.",
        "rotrpm",
        [Q(f"bottomk(15, {SLOWEST_FAN}{c})", legend(cfg.instance_label), instant=True)],
        steps=t.fan_speed(cfg),
        links=[_to_node(cfg)],
    )
    grid.add(
        "bargauge",
        "Spare power supplies per node (fewest first)",
        "Healthy supplies beyond what the node's class needs at full load (mixin config "
        "node_classes: power_supplies, power_supplies_redundant). 0: "
        "NvwatchNodePowerSupplyRedundancyLost, the next failure takes the node down.",
        "none",
        [
            Q(
                f"bottomk(15, {spare}({SUPPLIES_FOR_REDUNDANCY} - 1))",
                legend(cfg.instance_label),
                instant=True,
            )
        ],
        steps=t.AT_LEAST_ONE,
        links=[_to_node(cfg)],
    )


# Top to bottom, as the grid lays them out.
_PANELS: tuple[PanelRow, ...] = (_status, _node_power, _power_share, _air, _fans_and_supplies)


def power_cooling(cfg: MixinConfig) -> g.Dashboard:
    return dashboard(
        cfg,
        POWER_COOLING,
        "nvwatch / Power & cooling",
        "The whole node as its BMC measures it: node power against GPU power per node, "
        "rack and class, energy, inlet and exhaust air against each class's range, fans, "
        "power supplies and BMC reachability.",
        _PANELS,
        [variable(cfg, cfg.cluster_label, "Cluster")],
    )
