"""Recording rules of the node around the GPUs: what its BMC says, per node, rack and cluster.

BMC series come from the `nvwatch-bmc` probe job (mixin config `bmc_job_selector`), whose
targets carry their node's cluster, rack, node_class and instance labels, so every rule
here keeps the same node labels as the GPU rules (alerts/recording.py) and the two join
`on (cluster, instance)`. A node without a BMC target, or whose BMC does not answer, has
none of these series: absent, never 0.

Node power is DCMI's "Get Power Reading" where the BMC has it (the whole node's input
power as the BMC measures it) and otherwise its largest power sensor: a BMC that reports
the node's total and each supply's input has the total as its largest, and adding them
up would count the node twice.

The heat source is the verdict the GPU thermal alerts give (alerts/rules/heat_source.py):
per node 3 when its inlet air is above its class's operating maximum (the room), 2 when
the inlet is within it and a fan is stopped or below its BMC threshold (the node), 1 when
the inlet reads normal and no fan is low (the GPU itself).
"""

from __future__ import annotations

from nvwatch.alerts.recording import INLET_MAX, RecordingGroup, RecordingRule
from nvwatch.mixin.config import MixinConfig

NODE_POWER = "instance:nvwatch_bmc_power_watts:max"
RACK_POWER = "rack:nvwatch_bmc_power_watts:sum"
CLUSTER_POWER = "cluster:nvwatch_bmc_power_watts:sum"
INLET = "instance:nvwatch_bmc_inlet_temperature_celsius:max"
EXHAUST = "instance:nvwatch_bmc_exhaust_temperature_celsius:max"
SLOWEST_FAN = "instance:nvwatch_bmc_fan_speed_rpm:min"
HEALTHY_SUPPLIES = "instance:nvwatch_bmc_power_supplies_healthy:count"
HEAT_SOURCE = "instance:nvwatch_bmc_heat_source:max"
BMCS_UP = "cluster:nvwatch_bmc_up:sum"
BMCS_PROBED = "cluster:nvwatch_bmc_up:count"
SUPPLIES_FAILED = "cluster:nvwatch_bmc_power_supply_failed:sum"
# the GPUs' energy rate on the nodes whose BMC gives node power: a panel comparing the
# two reads one series per cluster instead of joining a thousand nodes at each step
GPU_ENERGY_WITH_BMC = "cluster:nvwatch_gpu_energy_joules_with_bmc:rate"
FANS_STOPPED = "cluster:nvwatch_bmc_fans_stopped:sum"

# The heat source's values, most telling first: `max` over a node's readings keeps the
# room over the node over the GPU.
HEAT_ROOM = 3
HEAT_NODE = 2
HEAT_GPU = 1


def node_labels(cfg: MixinConfig) -> str:
    """The labels every per-node rule keeps, as the GPU rules do."""
    return f"{cfg.cluster_label}, {cfg.rack_label}, {cfg.node_class_label}, {cfg.instance_label}"


def healthy_supplies(cfg: MixinConfig) -> str:
    """Supplies present and not failed, per node; 0 for a node whose BMC reports supplies
    and none of them healthy. A BMC with no supply sensors has no count (nothing known)."""
    b = cfg.bmc_sel
    node = node_labels(cfg)
    present = f"nvwatch_bmc_power_supply_present{b()}"
    healthy = f"{present} == 1 unless nvwatch_bmc_power_supply_failed{b()} == 1"
    return f"count by ({node}) ({healthy})\nor max by ({node}) ({present}) * 0"


def fan_low(cfg: MixinConfig) -> str:
    """Fan series that are stopped (below fan_stopped_rpm) or past their BMC threshold
    (a fan's own sensor state, joined by its SDR name)."""
    b = cfg.bmc_sel
    fans = f"nvwatch_bmc_fan_speed_rpm{b()}"
    on = f"on ({cfg.node_labels}, sensor)"
    return (
        f"{fans} < {cfg.fan_stopped_rpm:g}\n  or nvwatch_bmc_sensor_state{b()} > 0 and {on} {fans}"
    )


def heat_source(cfg: MixinConfig) -> str:
    b = cfg.bmc_sel
    inlet = f"nvwatch_bmc_temperature_celsius{b(entity('inlet'))}"
    nc = cfg.node_class_label
    return (
        f"max by ({node_labels(cfg)}) (\n"
        f"    ({inlet} > on ({nc}) group_left () {INLET_MAX}) * 0 + {HEAT_ROOM}\n"
        f"  or ({fan_low(cfg)}) * 0 + {HEAT_NODE}\n"
        f"  or {inlet} * 0 + {HEAT_GPU}\n"
        ")"
    )


def method(name: str) -> str:
    """The matcher of a power reading's method: dcmi or sensor."""
    return f'method="{name}"'


def entity(name: str) -> str:
    """The matcher of a temperature's entity (the interpreter's names: inlet, exhaust, ...)."""
    return f'entity="{name}"'


def bmc_group(cfg: MixinConfig) -> RecordingGroup:
    b = cfg.bmc_sel
    node = node_labels(cfg)
    c = cfg.cluster_label
    power = "nvwatch_bmc_power_watts"
    temperature = "nvwatch_bmc_temperature_celsius"
    rules = (
        RecordingRule(
            NODE_POWER,
            f"max by ({node}) ({power}{b(method('dcmi'))})\n"
            f"or max by ({node}) ({power}{b(method('sensor'))})",
        ),
        RecordingRule(RACK_POWER, f"sum by ({c}, {cfg.rack_label}) ({NODE_POWER})"),
        RecordingRule(CLUSTER_POWER, f"sum by ({c}) ({NODE_POWER})"),
        RecordingRule(
            GPU_ENERGY_WITH_BMC,
            f"sum by ({c}) (instance:nvwatch_gpu_energy_joules:rate "
            f"and on ({cfg.node_labels}) {NODE_POWER})",
        ),
        RecordingRule(INLET, f"max by ({node}) ({temperature}{b(entity('inlet'))})"),
        RecordingRule(EXHAUST, f"max by ({node}) ({temperature}{b(entity('exhaust'))})"),
        RecordingRule(SLOWEST_FAN, f"min by ({node}) (nvwatch_bmc_fan_speed_rpm{b()})"),
        RecordingRule(HEALTHY_SUPPLIES, healthy_supplies(cfg)),
        RecordingRule(HEAT_SOURCE, heat_source(cfg)),
        RecordingRule(BMCS_UP, f"sum by ({c}) (nvwatch_bmc_up{b()})"),
        RecordingRule(BMCS_PROBED, f"count by ({c}) (nvwatch_bmc_up{b()})"),
        RecordingRule(SUPPLIES_FAILED, f"sum by ({c}) (nvwatch_bmc_power_supply_failed{b()})"),
        RecordingRule(
            FANS_STOPPED,
            # `< bool` keeps a 0 per fan, so a cluster with every fan turning reads 0
            f"sum by ({c}) (nvwatch_bmc_fan_speed_rpm{b()} < bool {cfg.fan_stopped_rpm:g})",
        ),
    )
    return RecordingGroup("nvwatch-bmc.rules", rules)
