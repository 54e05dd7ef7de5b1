"""The PromQL behind every number of the report, built from the mixin config.

Each query is a range query at the report's step whose inner function covers one step
less a millisecond (`avg_over_time(x[59m59s999ms])` at a 1 h step), so every raw sample
counts in one step and a sum of value x step is an integral. Per-GPU detail is kept
where a table names GPUs; everything else is summed per node in Prometheus, which keeps
a 1,000-GPU fleet's answer small. "static" queries (TDPs, line rates, thresholds) give
one value per series: the largest of their per-day maxima over the range."""

from __future__ import annotations

import json
from dataclasses import dataclass

from nvwatch.alerts.recording_report import report_reads
from nvwatch.mixin.config import MixinConfig
from nvwatch.report.window import Window


@dataclass(frozen=True)
class Query:
    name: str
    expr: str
    static: bool = False  # one value per series: the largest over the range


def cluster_matchers(cfg: MixinConfig, cluster: str | None) -> tuple[str, ...]:
    """The matcher of `--cluster`, none without it."""
    # json.dumps quotes and escapes as PromQL's double-quoted strings do
    return (f"{cfg.cluster_label}={json.dumps(cluster)}",) if cluster else ()


def build_queries(
    cfg: MixinConfig,
    window: Window,
    cluster: str | None,
    recorded: bool = False,
    bmc_recorded: bool | None = None,
) -> list[Query]:
    """The report's windowed reads at `window`'s step: from the scraped samples, or from
    nvwatch-report-*.rules' series when `recorded` (the same numbers, read from one
    sample per report_interval); the BMC reads as `bmc_recorded` says, as `recorded`
    when it says nothing."""
    extra = cluster_matchers(cfg, cluster)
    bmc = recorded if bmc_recorded is None else bmc_recorded
    queries = []
    for read in report_reads():
        span = window.static_step_text if read.static else window.read_span_text
        from_rules = bmc if read.bmc else recorded
        expr = read.recorded(cfg, span, *extra) if from_rules else read.raw(cfg, span, *extra)
        queries.append(Query(read.name, expr, read.static))
    return queries
