"""Run the report's queries against Prometheus, a few at a time, with a progress bar.

A 30-day range over a large fleet takes Prometheus seconds per query; running four at
once keeps its cores busy without crowding out the dashboards people are using. A query
the server refuses for the samples it would hold at once (a per-port counter of a
thousand nodes, before its sum) is asked again in two halves of its range, and so on:
each step's value reads only its own window, so the halves' answers put end to end are
the whole range's answer, as a query frontend splits a long range. A query the server
does not answer within --timeout is asked again in two halves, once.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import as_completed
from typing import Any, TextIO

import click

from nvwatch.agent.threads import thread_pool
from nvwatch.report.errors import QueryTimedOut, TooManySamples
from nvwatch.report.frame import Frame
from nvwatch.report.prom import PrometheusClient, RangeResult
from nvwatch.report.queries import Query
from nvwatch.report.timings import QueryTiming, Timings
from nvwatch.report.window import Window

PARALLEL_QUERIES = 4
# how many times a query that timed out is asked again over halves of its range: once,
# so that a server slower than --timeout on a month (four queries at once on a busy
# two-core server) answers in two halves, and one that answers nothing costs two waits
TIMED_OUT_SPLITS = 1


def fetch_all(
    client: PrometheusClient,
    queries: Sequence[Query],
    window: Window,
    progress: TextIO | None = sys.stderr,
    timings: Timings | None = None,
) -> dict[str, Frame]:
    """Every query's result as a Frame, by query name; the first ReportError stops it all.
    Each query's time goes to `timings` when given."""
    frames: dict[str, Frame] = {}
    with (
        thread_pool("nvwatch-report", PARALLEL_QUERIES) as pool,
        _progress_bar(len(queries), progress) as advance,
    ):
        futures = {pool.submit(_run, client, q, window, timings): q for q in queries}
        try:
            for future in as_completed(futures):
                query = futures[future]
                frames[query.name] = future.result()
                advance(query.name)
        finally:
            for future in futures:
                future.cancel()
    return frames


@contextlib.contextmanager
def _progress_bar(total: int, stream: TextIO | None) -> Iterator[Callable[[str], None]]:
    """advance(name) after each query; a click progress bar on `stream`, none if None."""
    if stream is None:
        yield lambda _name: None
        return
    with click.progressbar(
        length=total,
        label="querying Prometheus",
        file=stream,
        show_pos=True,
        item_show_func=lambda name: name,
    ) as bar:
        yield lambda name: bar.update(1, name)


def _run(client: PrometheusClient, query: Query, window: Window, timings: Timings | None) -> Frame:
    began = time.perf_counter()
    sent: list[float] = []
    if query.static:
        first, step = window.static_first, window.static_step
    else:
        first, step = window.start + window.step, window.step
    result = split_range(client, query.expr, first, window.end, step, sent)
    if timings is not None:
        seconds = time.perf_counter() - began
        timings.query(QueryTiming(query.name, seconds, len(result.series), len(sent)))
    return Frame.from_result(result, window, single=query.static)


def split_range(
    client: PrometheusClient,
    expr: str,
    first: float,
    last: float,
    step: float,
    sent: list[float] | None = None,
    patience: int = TIMED_OUT_SPLITS,
) -> RangeResult:
    """`expr` at every step from `first` to `last`; a range the server refuses for its
    samples in two halves (each asked the same way), down to a single step; a range it
    did not answer within the timeout in two halves as well, `patience` times over (a
    half that times out then is the error: a server that answers nothing fails after a
    few timeouts, not after one per step). `sent` gets each request's first time,
    refused and timed-out ones included."""
    if sent is not None:
        sent.append(first)
    steps = round((last - first) / step)
    try:
        return client.query_range(expr, first, last, step)
    except TooManySamples:
        if steps < 1:
            raise
    except QueryTimedOut:
        if steps < 1 or patience < 1:
            raise
        patience -= 1
    middle = first + (steps // 2) * step
    early = split_range(client, expr, first, middle, step, sent, patience)
    late = split_range(client, expr, middle + step, last, step, sent, patience)
    return _end_to_end(early, late)


def _end_to_end(early: RangeResult, late: RangeResult) -> RangeResult:
    """Each series' points of `early`, then of `late` (a series may be in one only)."""
    points: dict[tuple[tuple[str, str], ...], tuple[dict[str, str], list[list[Any]]]] = {}
    for labels, values in (*early.series, *late.series):
        key = tuple(sorted(labels.items()))
        points.setdefault(key, (labels, []))[1].extend(values)
    return RangeResult(list(points.values()))
