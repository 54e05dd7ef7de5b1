"""The capacity report's reads of the fleet's series, and the recording rules that make
each of them once per `report_interval` (groups `nvwatch-report-gpu.rules` and
`nvwatch-report-fabric.rules`).

Every read is `agg by (labels) (fn(metric{...}[window]))`: the report asks it at each of
its steps with a window of one step. Over a month of a thousand nodes that reads every
scrape of every GPU, link and port, tens of billions of samples: hours of a server. The
rules read the same samples once, `report_interval` at a time, as they arrive; the
report then folds the recorded values into its steps (a mean of equal-length means is
the mean, a sum of counts the count, a maximum of maxima the maximum), reading one
sample per series and interval. The recorded series are also what a global view needs
from each server (docs/scale.md, *Past one server*).

Where the aggregation commutes with the fold (sums of means or of rates, a counter's
largest value, a maximum of maxima) the rule records the aggregate, so the per-link and
per-port families become one series per GPU, port or node. Where it does not (the sum of
each GPU's peak power is not the peak of the node's sum; the largest of a GPU's mean
per reason is not the mean of its largest) the rule keeps each series and the report
aggregates after the fold, as it does from raw samples.
"""

from __future__ import annotations

from dataclasses import dataclass

from nvwatch.alerts.recording import RecordingGroup, RecordingRule
from nvwatch.alerts.recording_straggler import THERMAL_REASONS
from nvwatch.common.durations import parse_duration, prometheus_duration
from nvwatch.mixin.config import MixinConfig

# two groups, each under the style's twenty rules, evaluated side by side
GPU_GROUP = "nvwatch-report-gpu.rules"
FABRIC_GROUP = "nvwatch-report-fabric.rules"
REPORT_RULES = "nvwatch-report-*.rules"  # how messages name them together
ALLOCATION_LABELS = (
    "gpu", "scheduler", "job_id", "user", "account", "pod", "namespace", "container",
)  # fmt: skip

# how the report folds a recorded value into its step: the same question asked of
# values that each already answer it for one interval
FOLD = {
    "avg_over_time": "avg_over_time",
    "max_over_time": "max_over_time",
    "min_over_time": "min_over_time",
    "count_over_time": "sum_over_time",
    "rate": "avg_over_time",
}


@dataclass(frozen=True)
class WindowedRead:
    """`agg by (<level's labels>, *extra) (fn(metric{matchers}[window]))`."""

    name: str  # the report's name for it
    fn: str
    metric: str
    level: str  # "node", "gpu" or "port": the labels it keeps
    agg: str = "max"
    extra: tuple[str, ...] = ()  # labels kept besides the level's
    matchers: tuple[str, ...] = ()
    static: bool = False  # one value per series: TDPs, line rates, thresholds
    ib: bool = False  # an InfiniBand port series: the config's port selector applies
    # one scraped series per kept label set (a GPU's up, a job's allocation of a GPU):
    # the aggregation only drops the series' other labels
    single: bool = False

    @property
    def aggregated_first(self) -> bool:
        """Whether the rule may record the aggregate: true when folding the aggregates
        gives what aggregating the folds gives."""
        if self.static or self.single:
            return True  # one value all along, or one series to aggregate
        if self.fn == "rate" or self.fn == "avg_over_time":
            return self.agg in ("sum", "avg")
        if self.fn == "max_over_time" and self.agg == "sum":
            return self.metric.endswith("_total")  # a counter's largest is its last
        return (self.agg, self.fn) in (("max", "max_over_time"), ("min", "min_over_time"))

    def labels(self, cfg: MixinConfig) -> str:
        node = (cfg.cluster_label, cfg.rack_label, cfg.node_class_label, cfg.instance_label)
        level = {"node": (), "gpu": ("gpu", "uuid"), "port": ("device", "port")}[self.level]
        return ", ".join((*node, *level, *self.extra))

    def selector(self, cfg: MixinConfig, *more: str) -> str:
        if self.ib:
            return cfg.ib_sel(*more, *self.matchers)
        return cfg.sel(*more, *self.matchers)

    def record(self) -> str:
        level = "instance" if self.level == "node" else self.level
        return f"{level}:{self.metric.removesuffix('_total')}:{self.name}"

    def per_series(self, cfg: MixinConfig, window: str, *more: str) -> str:
        """`fn` over each scraped series, `more` matchers added."""
        return f"{self.fn}({self.metric}{self.selector(cfg, *more)}[{window}])"

    def raw(self, cfg: MixinConfig, window: str, *more: str) -> str:
        """The read from the scraped samples, `more` matchers added."""
        return f"{self.agg} by ({self.labels(cfg)}) ({self.per_series(cfg, window, *more)})"

    def recorded(self, cfg: MixinConfig, window: str, *more: str) -> str:
        """The same read from the rule's series. Where the rule recorded the aggregate,
        each of its series is one of the read's already: aggregating them again would
        change nothing and cost the server a grouping at every step of every series
        (several seconds a read at a thousand nodes)."""
        selector = "{" + ", ".join(more) + "}" if more else ""
        inner = f"{FOLD[self.fn]}({self.record()}{selector}[{window}])"
        if self.aggregated_first:
            return inner
        return f"{self.agg} by ({self.labels(cfg)}) ({inner})"

    def rule(self, cfg: MixinConfig) -> RecordingRule:
        interval = parse_duration(cfg.report_interval, "report_interval")
        if self.fn == "rate":
            # a rate needs two samples: at least the rules' own rate window
            seconds = max(interval, parse_duration(cfg.rate_window, "rate_window"))
        else:
            # a millisecond less: a sample on an interval's edge counts once, whether
            # the server's ranges are closed (Prometheus 2) or left-open (3)
            seconds = interval - 0.001
        window = prometheus_duration(seconds)
        if self.aggregated_first:
            return RecordingRule(self.record(), self.raw(cfg, window))
        return RecordingRule(self.record(), self.per_series(cfg, window))


def report_reads() -> tuple[WindowedRead, ...]:
    """Every windowed read of the report's GPU, power, thermal, fabric and health
    sections."""
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


def report_groups(cfg: MixinConfig) -> tuple[RecordingGroup, RecordingGroup]:
    """The GPUs' reads (utilization, power, thermal), then the links' and health's."""
    reads = report_reads()
    first_fabric = next(i for i, read in enumerate(reads) if read.name == "ib_tx")
    return (
        RecordingGroup(
            GPU_GROUP,
            tuple(read.rule(cfg) for read in reads[:first_fabric]),
            interval=cfg.report_interval,
        ),
        RecordingGroup(
            FABRIC_GROUP,
            tuple(read.rule(cfg) for read in reads[first_fabric:]),
            interval=cfg.report_interval,
        ),
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
        f"The groups `{GPU_GROUP}` and `{FABRIC_GROUP}` record every `report_interval` "
        f"({cfg.report_interval}) each of `nvwatch report`'s reads of the fleet over that "
        "interval; the report folds them into its steps (`--read auto`, the default, reads "
        "them where they hold every GPU the scraped samples hold over the whole window, "
        "and the samples otherwise; `nvwatch alerts backfill-rules` makes them for a "
        "history imported late). A month of a thousand nodes is then one sample per "
        "series and interval instead of every scrape of every GPU, link and port, and "
        "the per-link and per-port families are summed per GPU, port or node first where "
        "that gives the same numbers. A recorded value stands for the interval before "
        "it, so a step's figures hold the samples of up to one interval earlier than "
        "those of the same step read from the samples.",
        "",
        "| rule | report query | reads | kept | folded by |",
        "|---|---|---|---|---|",
        *rows,
    ]
