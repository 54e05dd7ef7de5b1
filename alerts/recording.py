"""Recording rules: the per-node and per-cluster aggregates, and node-class expectations.

Dashboards read cluster-wide panels from these (one series per cluster instead of one
per GPU per query), and the alerts compare per-node counts with the class expectations.
Names follow Prometheus' `level:metric:operations`; rate aggregates drop `_total` and
use the config's `rate_window`.
"""

from __future__ import annotations

from dataclasses import dataclass

from mixin.config import MixinConfig

# Clock-event reasons that are not throttling: an idle GPU, clocks an admin pinned, or a
# display. Counting them as "throttled" would light the overview up on every idle node.
NOT_THROTTLING = ("idle", "applications_clocks", "display_clocks")

EXPECTED_GPUS = "nvwatch:node_class_expected_gpus"
EXPECTED_NVLINKS = "nvwatch:node_class_expected_nvlinks_per_gpu"
EXPECTED_IB_PORTS = "nvwatch:node_class_expected_ib_ports"
EXPECTED_IB_RATE = "nvwatch:node_class_expected_ib_rate_bytes_per_second"


@dataclass(frozen=True)
class RecordingRule:
    record: str
    expr: str


@dataclass(frozen=True)
class RecordingGroup:
    name: str
    rules: tuple[RecordingRule, ...]


def _static_vector(cfg: MixinConfig, value_of: dict[str, float]) -> str:
    """A constant vector with one series per node class: {node_class="x"} value.

    PromQL cannot read the config per series, so each class's expectation becomes a
    labelled constant that alerts join with `on(node_class) group_left`.
    """
    parts = [
        f'label_replace(vector({value:g}), "{cfg.node_class_label}", "{name}", "", "")'
        for name, value in value_of.items()
    ]
    return "\n  or ".join(parts)


def _per_class(cfg: MixinConfig, pick: str) -> dict[str, float]:
    """Class name -> expectation, leaving out classes with nothing to expect (0 or None)."""
    out: dict[str, float] = {}
    for nc in cfg.node_classes:
        value: float | None = getattr(nc, pick)
        if value:
            out[nc.name] = float(value)
    return out


def expectation_group(cfg: MixinConfig) -> RecordingGroup:
    rules = []
    for record, pick in (
        (EXPECTED_GPUS, "gpus"),
        (EXPECTED_NVLINKS, "nvlinks_per_gpu"),
        (EXPECTED_IB_PORTS, "ib_ports"),
        (EXPECTED_IB_RATE, "ib_rate_bytes_per_second"),
    ):
        values = _per_class(cfg, pick)
        if values:
            rules.append(RecordingRule(record, _static_vector(cfg, values)))
    return RecordingGroup("nvwatch-node-class-expectations", tuple(rules))


def node_group(cfg: MixinConfig) -> RecordingGroup:
    by = f"{cfg.cluster_label}, {cfg.rack_label}, {cfg.node_class_label}, {cfg.instance_label}"
    s = cfg.sel
    w = cfg.rate_window
    gpu_sensor = s('sensor="gpu"')
    throttling = s('reason!~"' + "|".join(NOT_THROTTLING) + '"')
    rules = (
        RecordingRule("instance:nvwatch_gpu_up:sum", f"sum by ({by}) (nvwatch_gpu_up{s()})"),
        RecordingRule("instance:nvwatch_gpu:count", f"count by ({by}) (nvwatch_gpu_up{s()})"),
        RecordingRule(
            "instance:nvwatch_gpu_utilization_ratio:avg",
            f"avg by ({by}) (nvwatch_gpu_utilization_ratio{s()})",
        ),
        RecordingRule(
            "instance:nvwatch_gpu_power_watts:sum",
            f"sum by ({by}) (nvwatch_gpu_power_watts{s()})",
        ),
        RecordingRule(
            "instance:nvwatch_gpu_power_tdp_watts:sum",
            f"sum by ({by}) (nvwatch_gpu_power_tdp_watts{s()})",
        ),
        RecordingRule(
            "instance:nvwatch_gpu_energy_joules:rate",
            f"sum by ({by}) (rate(nvwatch_gpu_energy_joules_total{s()}[{w}]))",
        ),
        RecordingRule(
            "instance:nvwatch_gpu_memory_used_bytes:sum",
            f"sum by ({by}) (nvwatch_gpu_memory_used_bytes{s()})",
        ),
        RecordingRule(
            "instance:nvwatch_gpu_memory_total_bytes:sum",
            f"sum by ({by}) (nvwatch_gpu_memory_total_bytes{s()})",
        ),
        RecordingRule(
            "instance:nvwatch_gpu_temperature_celsius:max",
            f"max by ({by}) (nvwatch_gpu_temperature_celsius{gpu_sensor})",
        ),
        RecordingRule(
            "instance:nvwatch_gpu_clock_event_active:sum",
            f"sum by ({by}, reason) (nvwatch_gpu_clock_event_active{throttling})",
        ),
        RecordingRule(
            "instance:nvwatch_ib_port_transmit_bytes:rate",
            f"sum by ({by}) (rate(nvwatch_ib_port_transmit_bytes_total{cfg.ib_sel()}[{w}]))",
        ),
        RecordingRule(
            "instance:nvwatch_ib_port_receive_bytes:rate",
            f"sum by ({by}) (rate(nvwatch_ib_port_receive_bytes_total{cfg.ib_sel()}[{w}]))",
        ),
        RecordingRule(
            "instance:nvwatch_ib_port_errors:rate",
            f"sum by ({by}) (rate(nvwatch_ib_port_errors_total{cfg.ib_sel()}[{w}]))",
        ),
        RecordingRule(
            "instance:nvwatch_nvlink_errors:rate",
            f"sum by ({by}) (rate(nvwatch_nvlink_errors_total{s()}[{w}]))",
        ),
        RecordingRule(
            "instance:nvwatch_nvlink_transmit_bytes:rate",
            f"sum by ({by}) (rate(nvwatch_nvlink_transmit_bytes_total{s()}[{w}]))",
        ),
    )
    return RecordingGroup("nvwatch-node.rules", rules)


def cluster_group(cfg: MixinConfig) -> RecordingGroup:
    c = cfg.cluster_label
    s = cfg.sel

    def roll_up(metric: str, op: str = "sum", by: str = c) -> RecordingRule:
        level = "rack" if by != c else "cluster"
        return RecordingRule(f"{level}:{metric}:{op}", f"{op} by ({by}) (instance:{metric}:{op})")

    rules = (
        RecordingRule(
            "cluster:nvwatch_agent_up:sum",
            f"sum by ({c}) (up{s()})",
        ),
        RecordingRule(
            "cluster:nvwatch_agent_up:count",
            f"count by ({c}) (up{s()})",
        ),
        roll_up("nvwatch_gpu_up"),
        RecordingRule(
            "cluster:nvwatch_gpu_expected:sum",
            # one expectation per node that Prometheus scrapes, found through `up` so a
            # node whose agent is dead still counts as expected GPUs
            f"sum by ({c}) (max by ({c}, {cfg.instance_label}, {cfg.node_class_label}) "
            f"(up{s()}) * 0 + on ({cfg.node_class_label}) group_left () {EXPECTED_GPUS})",
        ),
        RecordingRule(
            "cluster:nvwatch_gpu_utilization_ratio:avg",
            f"avg by ({c}) (nvwatch_gpu_utilization_ratio{s()})",
        ),
        roll_up("nvwatch_gpu_power_watts"),
        roll_up("nvwatch_gpu_power_tdp_watts"),
        roll_up("nvwatch_gpu_power_watts", by=f"{c}, {cfg.rack_label}"),
        roll_up("nvwatch_gpu_power_tdp_watts", by=f"{c}, {cfg.rack_label}"),
        RecordingRule(
            "cluster:nvwatch_gpu_energy_joules:rate",
            f"sum by ({c}) (instance:nvwatch_gpu_energy_joules:rate)",
        ),
        roll_up("nvwatch_gpu_memory_used_bytes"),
        roll_up("nvwatch_gpu_memory_total_bytes"),
        RecordingRule(
            "cluster:nvwatch_gpu_clock_event_active:sum",
            f"sum by ({c}, reason) (instance:nvwatch_gpu_clock_event_active:sum)",
        ),
        RecordingRule(
            "cluster:nvwatch_ib_port_transmit_bytes:rate",
            f"sum by ({c}) (instance:nvwatch_ib_port_transmit_bytes:rate)",
        ),
        RecordingRule(
            "cluster:nvwatch_ib_port_receive_bytes:rate",
            f"sum by ({c}) (instance:nvwatch_ib_port_receive_bytes:rate)",
        ),
        RecordingRule(
            "cluster:nvwatch_gpu_throttle_seconds:rate",
            f"sum by ({c}, reason) "
            f"(rate(nvwatch_gpu_throttle_seconds_total{s()}[{cfg.rate_window}]))",
        ),
        RecordingRule(
            "cluster:nvwatch_gpu_temperature_celsius:max",
            f"max by ({c}) (instance:nvwatch_gpu_temperature_celsius:max)",
        ),
    )
    return RecordingGroup("nvwatch-cluster.rules", rules)


def recording_groups(cfg: MixinConfig) -> tuple[RecordingGroup, ...]:
    return (expectation_group(cfg), node_group(cfg), cluster_group(cfg))


def recorded_names(cfg: MixinConfig) -> frozenset[str]:
    return frozenset(r.record for g in recording_groups(cfg) for r in g.rules)
