"""Counters over the report's window: increases per key, the quantiles of histograms,
and the columns of a table of waits.

The queries give each step's largest value of a counter (its last, as counters only
grow); the increase over the window is the sum of the steps' increases, resets included
(frame.counter_events), so an agent restarted mid-month loses nothing but the step it
restarted in. What happened in the window's first step, before any value was read, is not
counted: a step in a month.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from nvwatch.report.frame import Frame, counter_events
from nvwatch.report.model import Cell, Column

QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


def increases(frame: Frame, names: Sequence[str]) -> dict[tuple[str, ...], float]:
    """Each series' increase over the window, summed per value of `names`."""
    totals: dict[tuple[str, ...], float] = defaultdict(float)
    events = counter_events(frame.values)
    for key, row in zip(frame.keys(names), events, strict=True):
        totals[key] += float(np.nansum(row))
    return dict(totals)


def buckets(frame: Frame, names: Sequence[str]) -> dict[tuple[str, ...], dict[float, float]]:
    """Per value of `names`, each cumulative bucket's increase by its upper bound (`le`)."""
    by_key: dict[tuple[str, ...], dict[float, float]] = defaultdict(dict)
    for key, count in increases(frame, (*names, "le")).items():
        by_key[key[:-1]][float(key[-1])] = count
    return dict(by_key)


def started(cumulative: Mapping[float, float]) -> float:
    """Observations of a histogram: its +Inf bucket."""
    return cumulative.get(math.inf, 0.0)


def histogram_quantile(q: float, cumulative: Mapping[float, float]) -> float | None:
    """PromQL's histogram_quantile over cumulative counts by upper bound: linear within
    the bucket the rank falls in, from 0 below the first; the highest finite bound when
    it falls in +Inf. None without observations (Prometheus says NaN)."""
    bounds = sorted(cumulative)
    total = started(cumulative)
    if total <= 0 or not bounds or not math.isinf(bounds[-1]):
        return None
    rank = q * total
    below, lower = 0.0, 0.0
    for bound in bounds:
        count = cumulative[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            inside = count - below
            return lower if inside <= 0 else lower + (bound - lower) * (rank - below) / inside
        below, lower = count, bound
    return lower


def wait_columns() -> list[Column]:
    """A table's columns of queue waits: jobs started, then each percentile."""
    return [
        Column("jobs_started", "GPU jobs started", "count"),
        *(Column(f"wait_{key}_seconds", f"wait {key}", "s") for key, _ in QUANTILES),
    ]


def wait_cells(cumulative: Mapping[float, float] | None) -> list[Cell]:
    """Jobs started and the wait percentiles; blanks where no histogram was read."""
    if cumulative is None:
        return [None] * (1 + len(QUANTILES))
    return [started(cumulative), *(histogram_quantile(q, cumulative) for _, q in QUANTILES)]
