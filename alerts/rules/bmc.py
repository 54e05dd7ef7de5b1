"""The BMC group: the node around the GPUs, its inlet air, supplies, fans and power.

Every series comes from the node's BMC through the `nvwatch-bmc` probe job (mixin config
`bmc_job_selector`), labelled with its node's cluster, rack, node_class and instance, so
each class's figures (`node_classes`: inlet_max_celsius, max_power_watts, the power
supplies) join on `node_class` as the GPU and fabric expectations do. A class without a
figure has no expectation series and raises no alert of that kind.
"""

from __future__ import annotations

from collections.abc import Callable

from nvwatch.alerts.recording import INLET_MAX, MAX_POWER, SUPPLIES_FOR_REDUNDANCY
from nvwatch.alerts.recording_bmc import NODE_POWER, entity, healthy_supplies
from nvwatch.alerts.rules.base import Alert, AlertGroup, Kind, Runbook, Severity, where_node
from nvwatch.mixin.config import MixinConfig


def _of_bmc(cfg: MixinConfig) -> str:
    return f"(BMC {{{{ $labels.bmc }}}}) of {where_node(cfg)}"


def inlet_temperature_high(cfg: MixinConfig) -> Alert:
    nc = cfg.node_class_label
    inlet = f"nvwatch_bmc_temperature_celsius{cfg.bmc_sel(entity('inlet'))}"
    return Alert(
        "NvwatchNodeInletTemperatureHigh",
        # one alert per node, however many inlet sensors its BMC has
        f"max without (sensor, entity) ({inlet})\n  > on ({nc}) group_left () {INLET_MAX}",
        cfg.for_default,
        Severity.CRITICAL,
        "Node inlet air is above its class's operating range.",
        f"Inlet air of {where_node(cfg)} is {{{{ $value }}}} °C, above the operating "
        f"maximum of a {{{{ $labels.{nc} }}}} node.",
        Runbook(
            "The air entering the node, as its BMC measures it, is hotter than the "
            "system's user guide allows for operation (mixin config `node_classes`, "
            "`inlet_max_celsius`: 35 °C for a DGX-1, 30 °C for the DGX A100 and H100). "
            "The fans cannot make up for it: the GPUs run into thermal slowdown and "
            "then shut down. This is the room, not the node.",
            "Power & cooling dashboard, *Inlet air vs class maximum*: one node (its "
            "position: the top of a rack, a gap in the containment) or a whole rack or "
            "aisle (the cooling)? `ipmitool sdr type Temperature` on the BMC.",
            "Call facilities for the room's cooling (CRAC/CRAH, CDU, hot-aisle "
            "containment, blanking panels); move or lower load on the affected racks "
            "until the inlet is back in range.",
            "Repaired means the inlet air is back at or below the class's maximum; the "
            "alert resolves at the next evaluation. It is read from the node's BMC: "
            "while the BMC does not answer (NvwatchBmcDown) this alert cannot fire.",
        ),
        Kind.CONDITION,
    )


def power_supply_failed(cfg: MixinConfig) -> Alert:
    return Alert(
        "NvwatchNodePowerSupplyFailed",
        f"nvwatch_bmc_power_supply_failed{cfg.bmc_sel()} == 1",
        cfg.for_fast,
        Severity.WARNING,
        "A power supply of the node failed or lost its input.",
        f"Power supply {{{{ $labels.sensor }}}} {_of_bmc(cfg)} reports a failure or a lost input.",
        Runbook(
            "The BMC reports the supply failed, predicted to fail or without AC input "
            "(IPMI sensor-specific offsets of the power supply sensor). The node runs "
            "on its other supplies; whether it still has a spare is "
            "NvwatchNodePowerSupplyRedundancyLost's question.",
            "Power & cooling dashboard, *Power supplies*; `ipmitool sdr type 'Power "
            "Supply'` on the BMC. A lost input on several nodes of one rack is its PDU "
            "or feed, not the supplies.",
            "Check the supply's power cord and PDU outlet; replace the supply (they are "
            "hot-swappable on DGX systems). For a whole rack, check its PDU and feed.",
            "Repaired means the BMC reports the supply healthy again (replaced, input "
            "restored); the alert resolves at the next evaluation.",
        ),
        Kind.CONDITION,
    )


def power_supply_redundancy_lost(cfg: MixinConfig) -> Alert:
    nc = cfg.node_class_label
    return Alert(
        "NvwatchNodePowerSupplyRedundancyLost",
        f"(\n  {healthy_supplies(cfg)}\n)\n< on ({nc}) group_left () {SUPPLIES_FOR_REDUNDANCY}",
        cfg.for_fast,
        Severity.CRITICAL,
        "The node has no spare power supply left.",
        f"{where_node(cfg)} has {{{{ $value }}}} healthy power supplies: a "
        f"{{{{ $labels.{nc} }}}} node needs all but its redundant ones at full load, and "
        "none is left spare.",
        Runbook(
            "Fewer supplies are healthy (present, not failed) than the class's N+R "
            "design needs to still have a spare (mixin config `node_classes`: "
            "`power_supplies` and `power_supplies_redundant`; a DGX-1 is 3+1, a DGX A100 "
            "3+3, a DGX H100 4+2). The next failure takes the node below full power: the "
            "GPUs are power-braked (NvwatchGpuHwPowerBrake) or the node shuts down.",
            "Power & cooling dashboard, *Power supplies*; `ipmitool sdr type 'Power "
            "Supply'` on the BMC; NvwatchNodePowerSupplyFailed names each failed one. A "
            "supply pulled from its bay counts as not healthy too.",
            "Replace the failed supplies now; until then drain the node or cap its GPUs "
            "(`nvidia-smi -pl`) so one more failure does not take it down mid-job.",
            "Repaired means enough supplies are healthy again; the alert resolves at the "
            "next evaluation. A BMC that reports no supply sensors at all gives no count "
            "and no alert.",
        ),
        Kind.CONDITION,
    )


def fan_stopped(cfg: MixinConfig) -> Alert:
    return Alert(
        "NvwatchNodeFanStopped",
        f"nvwatch_bmc_fan_speed_rpm{cfg.bmc_sel()} < {cfg.fan_stopped_rpm:g}",
        cfg.for_fast,
        Severity.WARNING,
        "A fan of the node has stopped.",
        f"Fan {{{{ $labels.sensor }}}} {_of_bmc(cfg)} turns at {{{{ $value }}}} rpm.",
        Runbook(
            f"The BMC reads the fan below {cfg.fan_stopped_rpm:g} rpm (mixin config "
            "`fan_stopped_rpm`): a seized or unplugged fan, or a dead fan module. The "
            "other fans speed up and the node may hold its temperature for a while; its "
            "exhaust and GPUs run hotter, and the GPU thermal alerts of this node name "
            "the node as the cause.",
            "Power & cooling dashboard, *Fans*; node dashboard, *BMC* row; `ipmitool sdr "
            "type Fan` on the BMC. A node that is powered off stops its fans too.",
            "Replace the fan module (hot-swappable on DGX systems); drain the node if "
            "its GPUs reach slowdown before that.",
            f"Repaired means the fan turns at {cfg.fan_stopped_rpm:g} rpm or more again; "
            "the alert resolves at the next evaluation.",
        ),
        Kind.CONDITION,
    )


def node_power_near_max(cfg: MixinConfig) -> Alert:
    nc = cfg.node_class_label
    w = cfg.rate_window
    return Alert(
        "NvwatchNodePowerNearMax",
        # the node's draw swings with every training step, as the GPUs' does
        f"avg_over_time({NODE_POWER}[{w}])\n"
        f"  / on ({nc}) group_left () {MAX_POWER}\n"
        f"  > {cfg.node_power_max_fraction:g}",
        cfg.for_default,
        Severity.WARNING,
        "Node power is close to the system's maximum.",
        f"{where_node(cfg)} draws {{{{ $value | humanizePercentage }}}} of a "
        f"{{{{ $labels.{nc} }}}} node's maximum power, as its BMC measures it.",
        Runbook(
            "The whole node's input power (the BMC's DCMI power reading, or its largest "
            f"power sensor), averaged over {w}, is above the configured fraction "
            "(`node_power_max_fraction`) of the class's maximum (`max_power_watts`: 3.2 "
            "kW for a DGX-1 P100, 6.5 kW for a DGX A100, 10.2 kW for a DGX H100). The "
            "rack's circuits and the node's supplies were planned for that maximum.",
            "Power & cooling dashboard, *Node power vs GPU power* and *Rack power*: "
            "is the rack near its circuit budget? Which share is the GPUs'?",
            "Nothing is broken. If several nodes of a rack are here, tell the capacity "
            "owner before a circuit trips, or lower the GPUs' power limits.",
            f"Resolves when the {w} average falls below the fraction again.",
        ),
        Kind.CONDITION,
    )


def bmc_down(cfg: MixinConfig) -> Alert:
    b = cfg.bmc_sel
    return Alert(
        "NvwatchBmcDown",
        # the probe answered without the BMC, or no probe answer came back at all (the
        # management host's nvwatch down, or a read longer than the scrape timeout)
        f"nvwatch_bmc_up{b()} == 0\nor up{b()} == 0",
        cfg.for_default,
        Severity.WARNING,
        "The node's BMC cannot be read.",
        f"The BMC {{{{ $labels.bmc }}}} of {where_node(cfg)} does not answer nvwatch's IPMI "
        "probe, or the probe itself cannot be scraped.",
        Runbook(
            "nvwatch's probe of this BMC failed (`nvwatch_bmc_up` 0: the BMC did not "
            "answer within the module's timeout, refused the login, or answered "
            "garbage), or Prometheus got no answer from the probing nvwatch. The node's "
            "power, inlet, fans and supplies are unknown meanwhile; its GPUs are still "
            'watched, and their thermal alerts say "no BMC data". Nothing else of the '
            "node fires because of it.",
            "Prometheus' *Targets* page for the BMC job shows the scrape error; "
            "`curl 'http://<management host>:9477/probe?target=<bmc>&module=<module>'` "
            "shows what the probe answers and why; `ipmitool -I lanplus -H <bmc> -U "
            "<user> -P ... mc info` from the management host. Every BMC of the cluster "
            "at once: the management host's nvwatch or its network.",
            "Fix the BMC's network or credentials (a changed password, a locked user), "
            "or reset the BMC (`ipmitool mc reset cold` from the host, which does not "
            "touch the running node).",
            "Repaired means the probe reads the BMC again (`nvwatch_bmc_up` 1); the "
            "alert resolves at the next evaluation.",
        ),
        Kind.CONDITION,
    )


# In this order in the rule file and in docs/alerts.md.
ALERTS: tuple[Callable[[MixinConfig], Alert], ...] = (
    inlet_temperature_high,
    power_supply_failed,
    power_supply_redundancy_lost,
    fan_stopped,
    node_power_near_max,
    bmc_down,
)


def group(cfg: MixinConfig) -> AlertGroup:
    return AlertGroup(
        "nvwatch-bmc", "Node power and cooling (BMC)", tuple(make(cfg) for make in ALERTS)
    )
