"""Recording rules: the per-node and per-cluster aggregates, and node-class expectations.

Dashboards read cluster-wide panels from these (one series per cluster instead of one
per GPU per query), and the alerts compare per-node counts with the class expectations.
Names follow Prometheus' `level:metric:operations`; rate aggregates drop `_total` and
use the config's `rate_window`.
"""

from __future__ import annotations

from dataclasses import dataclass

from nvwatch.mixin.config import MixinConfig

# Clock-event reasons that are not throttling: an idle GPU, clocks an admin pinned, or a
# display. Counting them as "throttled" would light the overview up on every idle node.
NOT_THROTTLING = ("idle", "applications_clocks", "display_clocks")

EXPECTED_GPUS = "nvwatch:node_class_expected_gpus"
EXPECTED_NVLINKS = "nvwatch:node_class_expected_nvlinks_per_gpu"
EXPECTED_IB_PORTS = "nvwatch:node_class_expected_ib_ports"
EXPECTED_IB_RATE = "nvwatch:node_class_expected_ib_rate_bytes_per_second"
# the node around the GPUs (BMC): the class's operating envelope and power design
INLET_MAX = "nvwatch:node_class_inlet_max_celsius"
MAX_POWER = "nvwatch:node_class_max_power_watts"
SUPPLIES_FOR_REDUNDANCY = "nvwatch:node_class_power_supplies_for_redundancy"
# a node's GPU memory in use and GPU power, as shares of its total and TDP
NODE_MEMORY_USED_RATIO = "instance:nvwatch_gpu_memory_used:ratio"
NODE_POWER_TDP_RATIO = "instance:nvwatch_gpu_power_tdp:ratio"


@dataclass(frozen=True)
class RecordingRule:
    record: str
    expr: str


@dataclass(frozen=True)
class RecordingGroup:
    name: str
    rules: tuple[RecordingRule, ...]
    interval: str | None = None  # None: the config's evaluation_interval

    def interval_in(self, cfg: MixinConfig) -> str:
        return self.interval or cfg.evaluation_interval


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
        (INLET_MAX, "inlet_max_celsius"),
        (MAX_POWER, "max_power_watts"),
        (SUPPLIES_FOR_REDUNDANCY, "power_supplies_for_redundancy"),
    ):
        values = _per_class(cfg, pick)
        if values:
            rules.append(RecordingRule(record, _static_vector(cfg, values)))
    return RecordingGroup("nvwatch-node-class-expectations", tuple(rules))


def node_group(cfg: MixinConfig) -> RecordingGroup:
    by = f"{cfg.cluster_label}, {cfg.rack_label}, {cfg.node_class_label}, {cfg.instance_label}"
    s = cfg.sel
    ib = cfg.ib_sel()
    gpu_sensor = s('sensor="gpu"')
    throttling = s('reason!~"' + "|".join(NOT_THROTTLING) + '"')

    def per_node(record: str, series: str, op: str = "sum", also_by: str = "") -> RecordingRule:
        return RecordingRule(f"instance:{record}", f"{op} by ({by}{also_by}) ({series})")

    def rate(counter: str, selector: str) -> str:
        return f"rate({counter}{selector}[{cfg.rate_window}])"

    rules = (
        per_node("nvwatch_gpu_up:sum", f"nvwatch_gpu_up{s()}"),
        per_node("nvwatch_gpu:count", f"nvwatch_gpu_up{s()}", "count"),
        per_node("nvwatch_gpu_utilization_ratio:avg", f"nvwatch_gpu_utilization_ratio{s()}", "avg"),
        per_node("nvwatch_gpu_power_watts:sum", f"nvwatch_gpu_power_watts{s()}"),
        per_node("nvwatch_gpu_power_tdp_watts:sum", f"nvwatch_gpu_power_tdp_watts{s()}"),
        per_node("nvwatch_gpu_energy_joules:rate", rate("nvwatch_gpu_energy_joules_total", s())),
        per_node("nvwatch_gpu_memory_used_bytes:sum", f"nvwatch_gpu_memory_used_bytes{s()}"),
        per_node("nvwatch_gpu_memory_total_bytes:sum", f"nvwatch_gpu_memory_total_bytes{s()}"),
        per_node(
            "nvwatch_gpu_temperature_celsius:max",
            f"nvwatch_gpu_temperature_celsius{gpu_sensor}",
            "max",
        ),
        per_node(
            "nvwatch_gpu_clock_event_active:sum",
            f"nvwatch_gpu_clock_event_active{throttling}",
            also_by=", reason",
        ),
        per_node(
            "nvwatch_ib_port_transmit_bytes:rate", rate("nvwatch_ib_port_transmit_bytes_total", ib)
        ),
        per_node(
            "nvwatch_ib_port_receive_bytes:rate", rate("nvwatch_ib_port_receive_bytes_total", ib)
        ),
        per_node("nvwatch_ib_port_errors:rate", rate("nvwatch_ib_port_errors_total", ib)),
        # the node's share of its GPU memory and of its TDP, from the sums above (this
        # group's rules run in order): a range's peak is then one series per node read
        # at each evaluation, not two joined at every step of a subquery
        RecordingRule(
            NODE_MEMORY_USED_RATIO,
            "instance:nvwatch_gpu_memory_used_bytes:sum"
            " / instance:nvwatch_gpu_memory_total_bytes:sum",
        ),
        RecordingRule(
            NODE_POWER_TDP_RATIO,
            "instance:nvwatch_gpu_power_watts:sum / instance:nvwatch_gpu_power_tdp_watts:sum",
        ),
    )
    return RecordingGroup("nvwatch-node.rules", rules)


# Links with errors: the error rate of each link and type, recorded only where it is
# above 0. The rate over every link of every type is the costliest read of the mixin (a
# DGX H100 has 720 such series; a thousand nodes, half a million, several seconds per
# evaluation), so it is computed once here, and the node rule, the alert and the
# straggler signal read the few links that have errors instead of computing it again.
LINKS_WITH_ERRORS = "link:nvwatch_nvlink_errors:rate"
GPU_NVLINK_TRANSMIT = "gpu:nvwatch_nvlink_transmit_bytes:rate"


def nvlink_group(cfg: MixinConfig) -> RecordingGroup:
    """The NVLink rules, a group of their own: with every link of a fleet they cost as
    much as every other per-node rule together, and a group runs its rules one after the
    other, within its interval."""
    by = f"{cfg.cluster_label}, {cfg.rack_label}, {cfg.node_class_label}, {cfg.instance_label}"
    s = cfg.sel
    rules = (
        RecordingRule(
            LINKS_WITH_ERRORS, f"rate(nvwatch_nvlink_errors_total{s()}[{cfg.rate_window}]) > 0"
        ),
        # `== bool 0` keeps a 0 for nodes with every link up, so a sum over nodes is a
        # number rather than an empty result
        RecordingRule(
            "instance:nvwatch_nvlink_down:sum", f"sum by ({by}) (nvwatch_nvlink_up{s()} == bool 0)"
        ),
        # 0 for a node whose links have no errors: every node with links has the rule above
        RecordingRule(
            "instance:nvwatch_nvlink_errors:rate",
            f"sum by ({by}) ({LINKS_WITH_ERRORS})\nor instance:nvwatch_nvlink_down:sum * 0",
        ),
        # each GPU's NVLink traffic, once: the node's rule, the straggler signal and the
        # jobs dashboard add up or join these 8 series a node instead of 144 links
        RecordingRule(
            GPU_NVLINK_TRANSMIT,
            f"sum by ({by}, gpu) "
            f"(rate(nvwatch_nvlink_transmit_bytes_total{s()}[{cfg.rate_window}]))",
        ),
        RecordingRule(
            "instance:nvwatch_nvlink_transmit_bytes:rate",
            f"sum by ({by}) ({GPU_NVLINK_TRANSMIT})",
        ),
    )
    return RecordingGroup("nvwatch-nvlink.rules", rules)


def nvlink_doc_lines(cfg: MixinConfig) -> list[str]:
    """The NVLink group's section of docs/alerts.md."""
    return [
        "",
        "## NVLink, read once (recording rules)",
        "",
        "The group `nvwatch-nvlink.rules` reads the per-link NVLink series once per "
        f"evaluation interval ({cfg.evaluation_interval}): a DGX H100 has 144 links and "
        "720 error series, a thousand nodes half a million, and three rules rating them "
        "each cost seconds. The node rules, NvwatchNvlinkErrors, the straggler signals "
        "and the jobs rules read these instead.",
        "",
        "| rule | labels | value |",
        "|---|---|---|",
        f"| `{LINKS_WITH_ERRORS}` | the link's (node, GPU, link, type) | errors per second "
        f"over {cfg.rate_window}, only where above 0 |",
        f"| `{GPU_NVLINK_TRANSMIT}` | `cluster`, `rack`, `node_class`, `instance`, `gpu` | "
        f"bytes per second the GPU sends over all its links, over {cfg.rate_window} |",
        "| `instance:nvwatch_nvlink_errors:rate` | the node's | the links' error rates "
        "added up; 0 for a node whose links have none |",
        "| `instance:nvwatch_nvlink_transmit_bytes:rate` | the node's | its GPUs' "
        "transmit rates added up |",
        "| `instance:nvwatch_nvlink_down:sum` | the node's | links inactive |",
    ]


def cluster_group(cfg: MixinConfig) -> RecordingGroup:
    c = cfg.cluster_label
    s = cfg.sel

    def per_cluster(record: str, series: str, op: str = "sum", also_by: str = "") -> RecordingRule:
        return RecordingRule(f"cluster:{record}", f"{op} by ({c}{also_by}) ({series})")

    def roll_up(metric: str, op: str = "sum", by: str = c) -> RecordingRule:
        """The per-node rule `instance:{metric}:{op}` summed (maxed) to rack or cluster;
        per-node rates add up, so a `rate` rolls up with sum."""
        level = "rack" if by != c else "cluster"
        agg = "sum" if op == "rate" else op
        return RecordingRule(f"{level}:{metric}:{op}", f"{agg} by ({by}) (instance:{metric}:{op})")

    rules = (
        per_cluster("nvwatch_agent_up:sum", f"up{s()}"),
        per_cluster("nvwatch_agent_up:count", f"up{s()}", "count"),
        roll_up("nvwatch_gpu_up"),
        per_cluster(
            "nvwatch_gpu_expected:sum",
            # one expectation per node that Prometheus scrapes, found through `up` so a
            # node whose agent is dead still counts as expected GPUs
            f"max by ({c}, {cfg.instance_label}, {cfg.node_class_label}) "
            f"(up{s()}) * 0 + on ({cfg.node_class_label}) group_left () {EXPECTED_GPUS}",
        ),
        per_cluster(
            "nvwatch_gpu_utilization_ratio:avg", f"nvwatch_gpu_utilization_ratio{s()}", "avg"
        ),
        roll_up("nvwatch_gpu_power_watts"),
        roll_up("nvwatch_gpu_power_tdp_watts"),
        roll_up("nvwatch_gpu_power_watts", by=f"{c}, {cfg.rack_label}"),
        roll_up("nvwatch_gpu_power_tdp_watts", by=f"{c}, {cfg.rack_label}"),
        per_cluster("nvwatch_gpu_energy_joules:rate", "instance:nvwatch_gpu_energy_joules:rate"),
        roll_up("nvwatch_gpu_memory_used_bytes"),
        roll_up("nvwatch_gpu_memory_total_bytes"),
        per_cluster(
            "nvwatch_gpu_clock_event_active:sum",
            "instance:nvwatch_gpu_clock_event_active:sum",
            also_by=", reason",
        ),
        per_cluster(
            "nvwatch_ib_port_transmit_bytes:rate", "instance:nvwatch_ib_port_transmit_bytes:rate"
        ),
        per_cluster(
            "nvwatch_ib_port_receive_bytes:rate", "instance:nvwatch_ib_port_receive_bytes:rate"
        ),
        # a rack is a leaf switch of the fat-tree: its traffic is the leaf's host-side load
        roll_up("nvwatch_ib_port_transmit_bytes", "rate", by=f"{c}, {cfg.rack_label}"),
        roll_up("nvwatch_ib_port_receive_bytes", "rate", by=f"{c}, {cfg.rack_label}"),
        roll_up("nvwatch_nvlink_down"),
        per_cluster(
            "nvwatch_gpu_throttle_seconds:rate",
            f"rate(nvwatch_gpu_throttle_seconds_total{s()}[{cfg.rate_window}])",
            also_by=", reason",
        ),
        per_cluster(
            "nvwatch_gpu_temperature_celsius:max",
            "instance:nvwatch_gpu_temperature_celsius:max",
            "max",
        ),
    )
    return RecordingGroup("nvwatch-cluster.rules", rules)


def recording_groups(cfg: MixinConfig) -> tuple[RecordingGroup, ...]:
    # GPU-hours per owner, the BMC's node figures, the Slurm queue and the job stragglers
    # live in their own modules, which build on this one's types
    from nvwatch.alerts.recording_attribution import attribution_group
    from nvwatch.alerts.recording_bmc import bmc_group
    from nvwatch.alerts.recording_jobs import jobs_group
    from nvwatch.alerts.recording_report import report_groups
    from nvwatch.alerts.recording_scheduler import scheduler_group
    from nvwatch.alerts.recording_straggler import straggler_groups

    return (
        expectation_group(cfg),
        node_group(cfg),
        nvlink_group(cfg),
        cluster_group(cfg),
        bmc_group(cfg),
        attribution_group(cfg),
        jobs_group(cfg),
        *report_groups(cfg),
        scheduler_group(cfg),
        *straggler_groups(cfg),
    )


def recorded_names(cfg: MixinConfig) -> frozenset[str]:
    return frozenset(r.record for g in recording_groups(cfg) for r in g.rules)
