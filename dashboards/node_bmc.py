"""The node dashboard's BMC row: the chosen node as its BMC reports it.

The node's BMC series come from the `nvwatch-bmc` probe job (mixin config
`bmc_job_selector`) with the node's own cluster and instance labels, so the node
dashboard's variables select them as they select its GPUs. A node without a BMC target
shows "No data" here and nothing else changes.
"""

from __future__ import annotations

from nvwatch.alerts.recording import MAX_POWER
from nvwatch.alerts.recording_bmc import NODE_POWER
from nvwatch.dashboards import thresholds as t
from nvwatch.dashboards.builder import Grid, Q, node_matchers
from nvwatch.dashboards.links import POWER_COOLING, DataLink, carry
from nvwatch.mixin.config import MixinConfig

_SENSOR_STATES = [
    {
        "type": "value",
        "options": {
            "0": {"text": "nominal", "color": "green"},
            "1": {"text": "warning", "color": "orange"},
            "2": {"text": "critical", "color": "red"},
        },
    }
]


def _bmc(cfg: MixinConfig, name: str, *matchers: str) -> str:
    """BMC series `name` of the chosen node, with extra matchers."""
    return name + cfg.bmc_sel(*node_matchers(cfg), *matchers)


def _node(cfg: MixinConfig, record: str) -> str:
    """A per-node recording rule of the chosen node."""
    return record + "{" + ", ".join(node_matchers(cfg)) + "}"


def _to_power_cooling() -> DataLink:
    return DataLink(POWER_COOLING, "Power & cooling of the cluster", (carry("cluster"),))


def bmc_row(grid: Grid, cfg: MixinConfig) -> None:
    """Node power, temperatures, fans, sensor states and supplies from the node's BMC."""
    grid.newline()
    node_power = _node(cfg, NODE_POWER)
    grid.add(
        "timeseries",
        "BMC: node power vs GPU power",
        "The node's input power from its BMC (DCMI, else its largest power sensor), the "
        "sum of its GPUs' power, and its class's maximum system power.",
        "watt",
        [
            Q(node_power, "node"),
            Q(_node(cfg, "instance:nvwatch_gpu_power_watts:sum"), "GPUs"),
            Q(
                f"{node_power} * 0 + on ({cfg.node_class_label}) group_left () {MAX_POWER}",
                "class maximum",
            ),
        ],
        links=[_to_power_cooling()],
        min_=0,
        w=8,
    )
    grid.add(
        "timeseries",
        "BMC: temperatures",
        "Every temperature sensor of the BMC by its SDR name and entity: inlet (the "
        "room's air), exhaust, CPUs, board.",
        "celsius",
        [Q(_bmc(cfg, "nvwatch_bmc_temperature_celsius"), "{{sensor}} ({{entity}})")],
        w=8,
    )
    grid.add(
        "timeseries",
        "BMC: fans",
        f"Every fan of the node. Red below {cfg.fan_stopped_rpm:g} rpm, where "
        "NvwatchNodeFanStopped fires.",
        "rotrpm",
        [Q(_bmc(cfg, "nvwatch_bmc_fan_speed_rpm"), "{{sensor}}")],
        steps=t.fan_speed(cfg),
        min_=0,
        w=8,
    )
    grid.add(
        "state-timeline",
        "BMC: sensor states",
        "Each sensor's state as the BMC judges it against its own thresholds: nominal, "
        "warning, critical (as ipmi_exporter reports it).",
        "none",
        [Q(_bmc(cfg, "nvwatch_bmc_sensor_state"), "{{sensor}}")],
        steps=t.SENSOR_STATE,
        mappings=_SENSOR_STATES,
        w=12,
    )
    grid.add(
        "table",
        "BMC: power supplies and probe",
        "Each supply's presence and failure (1: failed or input lost), whether the probe "
        "read the BMC (nvwatch_bmc_up) and how long the read took.",
        "none",
        [
            Q(_bmc(cfg, "nvwatch_bmc_power_supply_present"), instant=True, table=True),
            Q(_bmc(cfg, "nvwatch_bmc_power_supply_failed"), instant=True, table=True),
            Q(_bmc(cfg, "nvwatch_bmc_up"), instant=True, table=True),
            Q(_bmc(cfg, "nvwatch_bmc_read_duration_seconds"), instant=True, table=True),
        ],
        w=12,
    )
