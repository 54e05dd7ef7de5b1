"""Which it is when a GPU runs hot: the room, the node or the GPU, from the node's BMC.

A GPU thermal alert keeps its own expression and labels; its value becomes the node's
heat source (the recording rule `instance:nvwatch_bmc_heat_source:max`: 3 the room, 2 the
node, 1 the GPU), or 0 where the node has no BMC data, and its description says which.
The verdict lives in the value rather than in a label: a label that changes (a BMC that
misses one scrape, an inlet that crosses its maximum while the GPU is already hot) would
end the alert and start a new one, resolving a page nobody repaired and restarting its
`for:`. The second branch keeps every alert of a node without BMC data exactly as it was
without one, whatever happens to the BMC or its recording rule.
"""

from __future__ import annotations

from nvwatch.alerts.recording_bmc import HEAT_GPU, HEAT_NODE, HEAT_ROOM, HEAT_SOURCE
from nvwatch.mixin.config import MixinConfig

NO_BMC_DATA = 0


def with_heat_source(cfg: MixinConfig, alert_expr: str) -> str:
    """`alert_expr` (a filter returning the hot GPUs) valued with its node's heat source."""
    on = f"on ({cfg.node_labels}) group_left ()"
    return (
        f"(\n  {alert_expr}\n) * 0 + {on} {HEAT_SOURCE}\nor\n(\n  {alert_expr}\n) * {NO_BMC_DATA}"
    )


def heat_source_text(cfg: MixinConfig) -> str:
    """The description's sentence naming the heat source (Prometheus' template language,
    `$value` being the heat source)."""
    return (
        f"{{{{ if eq $value {HEAT_ROOM:.1f} }}}}Which: the room. The node's inlet air is "
        "above its class's operating maximum (NvwatchNodeInletTemperatureHigh); its "
        "neighbours are likely hot too."
        f"{{{{ else if eq $value {HEAT_NODE:.1f} }}}}Which: the node. Its inlet air is "
        f"within the envelope, but a fan is below {cfg.fan_stopped_rpm:g} rpm or past its "
        "BMC threshold."
        f"{{{{ else if eq $value {HEAT_GPU:.1f} }}}}Which: the GPU. The node's inlet air and "
        "fans read normal."
        "{{ else }}Which: unknown, no BMC data for this node (no BMC target, the BMC does "
        "not answer, or it reports no inlet temperature).{{ end }}"
    )


def heat_source_runbook(cfg: MixinConfig) -> str:
    """The runbook's paragraph on reading the verdict."""
    return (
        "The description says which it is, from the node's BMC (its value is the verdict: "
        f"{HEAT_ROOM} the room, {HEAT_NODE} the node, {HEAT_GPU} the GPU, {NO_BMC_DATA} no "
        "BMC data). **The room**: the node's inlet air is above its class's operating "
        "maximum (mixin config `node_classes`, `inlet_max_celsius`); "
        "NvwatchNodeInletTemperatureHigh fires beside it, and the racks around it are "
        "usually hot as well: call facilities (CRAC/CDU, hot-aisle containment, blanking "
        "panels). **The node**: inlet air is within the envelope but one of the node's "
        f"fans is below {cfg.fan_stopped_rpm:g} rpm or past its own BMC threshold "
        "(NvwatchNodeFanStopped): a failed fan or fan module, a blocked intake; drain the "
        "node and have the fan replaced. **The GPU**: inlet air and fans read normal, so "
        "the heat is the GPU's own: its load, its heatsink, airflow in its tray; compare "
        "with its neighbours on the node dashboard and open a hardware ticket if it is hot "
        "alone. **No BMC data**: no BMC target for the node (`nvwatch inventory`'s `bmc` "
        "column), its BMC unreachable (NvwatchBmcDown), or a BMC with no inlet sensor: "
        "check the inlet temperature and fans by hand (`ipmitool sdr type Temperature`, "
        "`ipmitool sdr type Fan`). The power & cooling dashboard shows the node's inlet, "
        "exhaust and fans."
    )
