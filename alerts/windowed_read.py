"""One read of the capacity report over a window, and the recording rule that makes it
once per `report_interval`: `agg by (labels) (fn(metric{...}[window]))`.

The report asks each read at each of its steps with a window of one step; the rule asks
it once per interval as the samples arrive, and the report folds the recorded values
into its steps (a mean of equal-length means is the mean, a sum of counts the count, a
maximum of maxima the maximum). Where the aggregation commutes with that fold the rule
records the aggregate; where it does not (the sum of each GPU's peak power is not the
peak of the node's sum) the rule keeps each series and the report aggregates after the
fold, as it does from the samples.
"""

from __future__ import annotations

from dataclasses import dataclass

from nvwatch.alerts.recording import RecordingRule
from nvwatch.common.durations import parse_duration, prometheus_duration
from nvwatch.mixin.config import MixinConfig

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
    bmc: bool = False  # a BMC series: the probe job's selector instead of the agents'
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
        if self.bmc:
            return cfg.bmc_sel(*more, *self.matchers)
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
