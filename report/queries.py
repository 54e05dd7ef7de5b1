"""The PromQL behind every number of the report, built from the mixin config.

Each query is a range query at the report's step whose inner function covers exactly
one step (`avg_over_time(x[1h])` at a 1 h step), so every raw sample counts once and a
sum of value x step is an integral. Per-GPU detail is kept where a table names GPUs;
everything else is summed per node in Prometheus, which keeps a 1,000-GPU fleet's
answer small. "static" queries (TDPs, line rates, thresholds) give one value per
series: the largest of their per-day maxima over the range.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from nvwatch.alerts.recording_report import report_reads
from nvwatch.common.durations import prometheus_duration
from nvwatch.mixin.config import MixinConfig
from nvwatch.report.window import Window


@dataclass(frozen=True)
class Query:
    name: str
    expr: str
    static: bool = False  # one value per series: the largest over the range


def build_queries(
    cfg: MixinConfig, window: Window, cluster: str | None, recorded: bool = False
) -> list[Query]:
    """The report's windowed reads at `window`'s step: from the scraped samples, or from
    nvwatch-report.rules' series when `recorded` (the same numbers, read from one sample
    per report_interval)."""
    # json.dumps quotes and escapes as PromQL's double-quoted strings do
    extra = (f"{cfg.cluster_label}={json.dumps(cluster)}",) if cluster else ()
    # one step less a millisecond: a sample on a step's edge counts in one step, whether
    # the server's ranges are closed (Prometheus 2) or left-open (3)
    step = prometheus_duration(window.step - 0.001)
    queries = []
    for read in report_reads():
        span = window.static_step_text if read.static else step
        expr = read.recorded(cfg, span, *extra) if recorded else read.raw(cfg, span, *extra)
        queries.append(Query(read.name, expr, read.static))
    return queries
