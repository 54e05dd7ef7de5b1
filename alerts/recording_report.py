"""The capacity report's reads of the fleet's series, and the recording rules that make
each of them once per `report_interval` (groups `nvwatch-report-gpu.rules`,
`nvwatch-report-fabric.rules` and, from alerts/recording_report_bmc.py,
`nvwatch-report-bmc.rules`).

Every read is `agg by (labels) (fn(metric{...}[window]))`: the report asks it at each of
its steps with a window of one step. Over a month of a thousand nodes that reads every
scrape of every GPU, link, port and BMC sensor, tens of billions of samples: hours of a
server. The rules read the same samples once, `report_interval` at a time, as they
arrive; the report then folds the recorded values into its steps (a mean of equal-length
means is the mean, a sum of counts the count, a maximum of maxima the maximum), reading
one sample per series and interval. The recorded series are also what a global view needs
from each server (docs/scale.md, *Past one server*).

Where the aggregation commutes with the fold (sums of means or of rates, a counter's
largest value, a maximum of maxima) the rule records the aggregate, so the per-link and
per-port families become one series per GPU, port or node. Where it does not (the sum of
each GPU's peak power is not the peak of the node's sum; the largest of a GPU's mean
per reason is not the mean of its largest) the rule keeps each series and the report
aggregates after the fold, as it does from raw samples.
"""

from __future__ import annotations

from nvwatch.alerts.recording import RecordingGroup
from nvwatch.alerts.recording_report_bmc import BMC_GROUP, bmc_reads
from nvwatch.alerts.recording_straggler import THERMAL_REASONS
from nvwatch.alerts.windowed_read import FOLD, WindowedRead
from nvwatch.mixin.config import MixinConfig

# three groups, each under the style's twenty rules, evaluated side by side
GPU_GROUP = "nvwatch-report-gpu.rules"
FABRIC_GROUP = "nvwatch-report-fabric.rules"
REPORT_RULES = "nvwatch-report-*.rules"  # how messages name them together
ALLOCATION_LABELS = (
    "gpu", "scheduler", "job_id", "user", "account", "pod", "namespace", "container",
)  # fmt: skip


def report_reads() -> tuple[WindowedRead, ...]:
    """Every windowed read of the report's GPU, power, thermal, fabric, health and BMC
    figures."""
    return (*agent_reads(), *bmc_reads())


def agent_reads() -> tuple[WindowedRead, ...]:
    """The reads of the agents' series: GPUs, links, ports."""
    thermal = f'reason=~"{THERMAL_REASONS}"'
    return (
        # --- inventory and utilization
        WindowedRead("gpu_up", "avg_over_time", "nvwatch_gpu_up", "gpu", single=True),
        WindowedRead("gpu_samples", "count_over_time", "nvwatch_gpu_up", "gpu", single=True),
        WindowedRead(
            "gpu_util", "avg_over_time", "nvwatch_gpu_utilization_ratio", "gpu", single=True
        ),
        *(
            WindowedRead(
                f"class_{name}", "avg_over_time", f"nvwatch_gpu_{name}_ratio", "node", "avg"
            )
            for name in ("sm_active", "tensor_active", "dram_active")
        ),
        WindowedRead(
            "allocation",
            "count_over_time",
            "nvwatch_gpu_allocation_info",
            "node",
            extra=ALLOCATION_LABELS,
            single=True,
        ),
        # --- power
        WindowedRead("node_power", "avg_over_time", "nvwatch_gpu_power_watts", "node", "sum"),
        WindowedRead("node_power_peak", "max_over_time", "nvwatch_gpu_power_watts", "node", "sum"),
        WindowedRead(
            "node_tdp",
            "max_over_time",
            "nvwatch_gpu_power_tdp_watts",
            "node",
            "sum",
            static=True,
        ),
        WindowedRead(
            "node_power_cap",
            "avg_over_time",
            "nvwatch_gpu_clock_event_active",
            "node",
            "sum",
            matchers=('reason="sw_power_cap"',),
        ),
        # --- thermal
        WindowedRead(
            "gpu_thermal",
            "avg_over_time",
            "nvwatch_gpu_clock_event_active",
            "gpu",
            matchers=(thermal,),
        ),
        WindowedRead(
            "gpu_temp_max",
            "max_over_time",
            "nvwatch_gpu_temperature_celsius",
            "gpu",
            matchers=('sensor="gpu"',),
        ),
        WindowedRead(
            "hbm_temp_max",
            "max_over_time",
            "nvwatch_gpu_temperature_celsius",
            "gpu",
            matchers=('sensor="memory"',),
        ),
        *(
            WindowedRead(
                f"gpu_threshold_{threshold}",
                "max_over_time",
                "nvwatch_gpu_temperature_threshold_celsius",
                "gpu",
                matchers=(f'threshold="{threshold}"',),
                static=True,
            )
            for threshold in ("slowdown", "memory_max")
        ),
        # --- fabric
        *(
            WindowedRead(name, "rate", metric, "port", "sum", ib=True)
            for name, metric in (
                ("ib_tx", "nvwatch_ib_port_transmit_bytes_total"),
                ("ib_rx", "nvwatch_ib_port_receive_bytes_total"),
                ("ib_wait", "nvwatch_ib_port_transmit_wait_total"),
            )
        ),
        WindowedRead(
            "ib_capacity",
            "max_over_time",
            "nvwatch_ib_port_rate_bytes_per_second",
            "port",
            static=True,
            ib=True,
        ),
        WindowedRead(
            "ib_errors",
            "max_over_time",
            "nvwatch_ib_port_errors_total",
            "node",
            "sum",
            extra=("type",),
            ib=True,
        ),
        WindowedRead("nvlink_tx", "rate", "nvwatch_nvlink_transmit_bytes_total", "gpu", "sum"),
        WindowedRead(
            "nvlink_capacity",
            "max_over_time",
            "nvwatch_nvlink_speed_bytes_per_second",
            "gpu",
            "sum",
            static=True,
        ),
        WindowedRead(
            "nvlink_errors",
            "max_over_time",
            "nvwatch_nvlink_errors_total",
            "node",
            "sum",
            extra=("type",),
        ),
        # --- health
        WindowedRead("xid", "max_over_time", "nvwatch_gpu_xid_errors_total", "gpu", extra=("xid",)),
        WindowedRead(
            "ecc",
            "max_over_time",
            "nvwatch_gpu_ecc_errors_total",
            "node",
            "sum",
            extra=("type",),
            matchers=('scope="aggregate"',),
        ),
        WindowedRead(
            "remapped_rows",
            "max_over_time",
            "nvwatch_gpu_remapped_rows",
            "node",
            "sum",
            extra=("kind",),
            matchers=('kind=~"correctable|uncorrectable"',),
        ),
    )


def report_groups(cfg: MixinConfig) -> tuple[RecordingGroup, ...]:
    """The GPUs' reads (utilization, power, thermal), the links' and health's, the BMCs'."""
    reads = agent_reads()
    first_fabric = next(i for i, read in enumerate(reads) if read.name == "ib_tx")
    parts = {
        GPU_GROUP: reads[:first_fabric],
        FABRIC_GROUP: reads[first_fabric:],
        BMC_GROUP: bmc_reads(),
    }
    return tuple(
        RecordingGroup(name, tuple(read.rule(cfg) for read in part), interval=cfg.report_interval)
        for name, part in parts.items()
    )


def doc_lines(cfg: MixinConfig) -> list[str]:
    """The report rules' section of docs/alerts.md."""
    rows = [
        f"| `{read.record()}` | `{read.name}` | `{read.fn}` of `{read.metric}` | "
        + (f"{read.agg} per {read.level}" if read.aggregated_first else "each series")
        + (f" and {', '.join(read.extra)}" if read.extra and read.aggregated_first else "")
        + f" | `{FOLD[read.fn]}` |"
        for read in report_reads()
    ]
    return [
        "",
        "## The capacity report's reads (recording rules)",
        "",
        f"The groups `{GPU_GROUP}`, `{FABRIC_GROUP}` and `{BMC_GROUP}` record every "
        f"`report_interval` ({cfg.report_interval}) each of `nvwatch report`'s reads of "
        "the fleet over that interval; the report folds them into its steps (`--read "
        "auto`, the default, reads them where they hold every GPU the scraped samples hold "
        "over the whole window, and the samples otherwise; the BMC reads likewise where "
        f"`{BMC_GROUP}` holds every BMC the samples hold; `nvwatch alerts backfill-rules` "
        "makes them for a history imported late). A month of a thousand nodes is then one "
        "sample per series and interval instead of every scrape of every GPU, link, port "
        "and BMC sensor, and "
        "the per-link and per-port families are summed per GPU, port or node first where "
        "that gives the same numbers. A recorded value stands for the interval before "
        "it, so a step's figures hold the samples of up to one interval earlier than "
        "those of the same step read from the samples.",
        "",
        "| rule | report query | reads | kept | folded by |",
        "|---|---|---|---|---|",
        *rows,
    ]
