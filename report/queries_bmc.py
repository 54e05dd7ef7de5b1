"""The PromQL behind the report's BMC numbers: node power, inlet air, fans, supplies.

BMC series come from the probe job (mixin config `bmc_job_selector`), whose targets
carry their node's cluster, rack, node_class and instance labels, so every query here
keeps the node labels of the GPU queries and its rows meet theirs on the same node key.
As in queries.py, each `*_over_time` covers exactly one step.

Node power is kept per method: the power section takes DCMI's reading where a node has
it and its largest power sensor otherwise, step by step (the recording rules' choice: a
BMC that reports the node's total and each supply's input has the total as its largest;
adding them up would count the node twice).
"""

from __future__ import annotations

from nvwatch.mixin.config import MixinConfig
from nvwatch.report.queries import Query, cluster_matchers
from nvwatch.report.window import Window

INLET = 'entity="inlet"'
FAN_TYPE = 'type="Fan"'  # the sensor type as FreeIPMI (and ipmi_exporter) names it


def bmc_queries(cfg: MixinConfig, window: Window, cluster: str | None) -> list[Query]:
    extra = ", ".join(cluster_matchers(cfg, cluster))
    node = f"{cfg.cluster_label}, {cfg.rack_label}, {cfg.node_class_label}, {cfg.instance_label}"
    step = window.step_text

    def over(fn: str, metric: str, by: str, agg: str, *matchers: str) -> str:
        return f"{agg} by ({by}) ({fn}({metric}{cfg.bmc_sel(extra, *matchers)}[{step}]))"

    power = "nvwatch_bmc_power_watts"
    temperature = "nvwatch_bmc_temperature_celsius"
    return [
        Query("bmc_up", over("avg_over_time", "nvwatch_bmc_up", node, "max")),
        # --- node power: per node and method (dcmi, sensor), the largest of a method
        Query("bmc_power", over("avg_over_time", power, f"{node}, method", "max")),
        Query("bmc_power_peak", over("max_over_time", power, f"{node}, method", "max")),
        # --- inlet air: the warmest inlet sensor of each node
        Query("bmc_inlet", over("avg_over_time", temperature, node, "max", INLET)),
        Query("bmc_inlet_peak", over("max_over_time", temperature, node, "max", INLET)),
        # --- fans and supplies, per sensor: the slowest reading and the worst state in
        # a step, and the share of a step a supply reported failed
        Query(
            "bmc_fan_min",
            over("min_over_time", "nvwatch_bmc_fan_speed_rpm", f"{node}, sensor", "min"),
        ),
        Query(
            "bmc_fan_state",
            over("max_over_time", "nvwatch_bmc_sensor_state", f"{node}, sensor", "max", FAN_TYPE),
        ),
        Query(
            "bmc_supply_failed",
            over("avg_over_time", "nvwatch_bmc_power_supply_failed", f"{node}, sensor", "max"),
        ),
    ]
