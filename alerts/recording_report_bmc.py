"""The capacity report's reads of the BMCs: node power, inlet air, fans, supplies, and the
group `nvwatch-report-bmc.rules` that records them once per `report_interval`.

BMC series come from the probe job (mixin config `bmc_job_selector`), whose targets
carry their node's cluster, rack, node_class and instance labels, so every read keeps
the node labels of the GPU reads and its rows meet theirs on the same node key. A BMC
exports a few dozen series, read every probe: over a month of a thousand nodes the
report's BMC reads alone are billions of samples, which the rules read once, as they
arrive (alerts/recording_report.py says how the report folds what they record).

Node power is kept per method: the power section takes DCMI's reading where a node has
it and its largest power sensor otherwise, step by step (the node recording rules'
choice, alerts/recording_bmc.py: a BMC that reports the node's total and each supply's
input has the total as its largest; adding them up would count the node twice).

No read assumes one series per kept label set: a node probed by two targets, or a
sensor name a BMC repeats, is aggregated after the fold, as from the samples.
"""

from __future__ import annotations

from nvwatch.alerts.windowed_read import WindowedRead

BMC_GROUP = "nvwatch-report-bmc.rules"
INLET = 'entity="inlet"'
FAN_TYPE = 'type="Fan"'  # the sensor type as FreeIPMI (and ipmi_exporter) names it
POWER = "nvwatch_bmc_power_watts"
TEMPERATURE = "nvwatch_bmc_temperature_celsius"


def bmc_reads() -> tuple[WindowedRead, ...]:
    """Every windowed read of the report's node power, cooling and supply figures."""
    return (
        WindowedRead("bmc_up", "avg_over_time", "nvwatch_bmc_up", "node", bmc=True),
        # --- node power: per node and method (dcmi, sensor), the largest of a method
        WindowedRead("bmc_power", "avg_over_time", POWER, "node", extra=("method",), bmc=True),
        WindowedRead("bmc_power_peak", "max_over_time", POWER, "node", extra=("method",), bmc=True),
        # --- inlet air: the warmest inlet sensor of each node
        WindowedRead(
            "bmc_inlet", "avg_over_time", TEMPERATURE, "node", matchers=(INLET,), bmc=True
        ),
        WindowedRead(
            "bmc_inlet_peak", "max_over_time", TEMPERATURE, "node", matchers=(INLET,), bmc=True
        ),
        # --- fans and supplies, per sensor: the slowest reading and the worst state in
        # a step, and the share of a step a supply reported failed
        WindowedRead(
            "bmc_fan_min",
            "min_over_time",
            "nvwatch_bmc_fan_speed_rpm",
            "node",
            "min",
            extra=("sensor",),
            bmc=True,
        ),
        WindowedRead(
            "bmc_fan_state",
            "max_over_time",
            "nvwatch_bmc_sensor_state",
            "node",
            extra=("sensor",),
            matchers=(FAN_TYPE,),
            bmc=True,
        ),
        WindowedRead(
            "bmc_supply_failed",
            "avg_over_time",
            "nvwatch_bmc_power_supply_failed",
            "node",
            extra=("sensor",),
            bmc=True,
        ),
    )
