"""`nvwatch report` from options to files: query, analyse, summarise, write."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from nvwatch.common.http_connection import Connection
from nvwatch.mixin.config import MixinConfig
from nvwatch.report import style
from nvwatch.report.allocation import allocations
from nvwatch.report.context import Context
from nvwatch.report.errors import ReportError
from nvwatch.report.fetch import fetch_all
from nvwatch.report.model import Report, Section
from nvwatch.report.output import write_report
from nvwatch.report.prom import PrometheusClient
from nvwatch.report.queries import build_queries
from nvwatch.report.queries_scheduler import scheduler_queries
from nvwatch.report.queries_straggler import straggler_queries
from nvwatch.report.sections.cooling import cooling
from nvwatch.report.sections.demand import demand
from nvwatch.report.sections.fabric import fabric
from nvwatch.report.sections.health import health
from nvwatch.report.sections.jobs import jobs
from nvwatch.report.sections.power import power
from nvwatch.report.sections.stragglers import stragglers
from nvwatch.report.sections.thermal import thermal
from nvwatch.report.sections.usage import usage
from nvwatch.report.sections.utilization import utilization
from nvwatch.report.source import Source, choose_source, interval_seconds
from nvwatch.report.summary import executive_summary
from nvwatch.report.timings import Timings
from nvwatch.report.window import Window, iso_time, make_window


@dataclass(frozen=True)
class ReportOptions:
    connection: Connection
    range_text: str
    end_text: str | None
    step_text: str | None
    cluster: str | None
    config: MixinConfig
    out: Path
    job_store: str | None = None  # --job-store: the Jobs section reads its summaries
    read: str = "auto"  # --read: nvwatch-report-*.rules' series, the scraped samples, or auto
    timings: Path | None = None  # --timings: where the report's time went, as JSON


def run_report(options: ReportOptions, progress: TextIO | None) -> list[Path]:
    """Make the report and write it; ReportError (one line) when it cannot be made.

    `progress`: where the progress bar goes (None: no bar). The caller names the stream
    when it calls: a default bound at import time would keep whatever sys.stderr was
    then (a test runner's capture, click's CliRunner swaps it per invoke)."""
    try:
        style.require()
    except style.PlottingUnavailable as err:
        raise ReportError(str(err)) from None
    now = time.time()
    timings = Timings()
    client = PrometheusClient(options.connection)
    with timings.phase("source"):
        window, source = _window_and_source(client, options, now)
    queries = [
        *build_queries(
            options.config, window, options.cluster, source.recorded, source.bmc_recorded
        ),
        *scheduler_queries(options.config, window, options.cluster),
        *straggler_queries(options.config, window, options.cluster),
    ]
    with timings.phase("queries"):
        frames = fetch_all(client, queries, window, progress, timings)
    if not len(frames["gpu_up"]):
        raise ReportError(
            f"no nvwatch data between {iso_time(window.start)} and {iso_time(window.end)} at "
            f"{options.connection.url} (nvwatch_gpu_up{options.config.sel()}"
            + (f", cluster {options.cluster!r}" if options.cluster else "")
            + ")"
        )
    if progress is not None:
        print(f"read {source.words}", file=progress)
    report = assemble(Context(options.config, window, frames), options, now, source, timings)
    try:
        with timings.phase("writing"):
            written = write_report(report, options.out)
        if options.timings is not None:
            timings.write(options.timings)
    except OSError as err:
        where = options.out if err.filename is None else err.filename
        raise ReportError(f"cannot write the report to {where}: {err.strerror}") from None
    return written


def _window_and_source(
    client: PrometheusClient, options: ReportOptions, now: float
) -> tuple[Window, Source]:
    """The window at a step the recorded series can serve, and the source chosen for it;
    the scraped samples keep the finer step they allow."""
    shortest = 0.0 if options.read == "raw" else interval_seconds(options.config)
    args = (options.range_text, options.end_text, options.step_text, now)
    window = make_window(*args, shortest_step=shortest)
    source = choose_source(client, options.config, window, options.cluster, options.read)
    if not source.recorded and shortest:
        window = make_window(*args)
    return window, source


def jobs_in_range(ctx: Context, spec: str, cluster: str | None) -> Section:
    """The Jobs section from the summaries of the jobs that ended in the window."""
    from nvwatch.report.jobs.codec import StoreError
    from nvwatch.report.jobs.model import JobSummary
    from nvwatch.report.jobs.store import Wanted, open_store

    try:
        store = open_store(spec)
        found = store.select(Wanted(since=ctx.window.start))
        summaries = [JobSummary.from_dict(d) for d in found]
    except (StoreError, TypeError, ValueError) as err:
        raise ReportError(f"--job-store {spec}: {err}") from None
    chosen = [s for s in summaries if s.end <= ctx.window.end and cluster in (None, s.cluster)]
    return jobs(chosen, store.description)


def assemble(
    ctx: Context, options: ReportOptions, now: float, source: Source, timings: Timings
) -> Report:
    with timings.phase("allocations"):
        allocs = allocations(ctx)
    makers: list[tuple[str, Callable[[], Section]]] = [
        ("utilization", lambda: utilization(ctx, allocs)),
        ("usage", lambda: usage(ctx, allocs)),
        ("demand", lambda: demand(ctx)),
        ("power", lambda: power(ctx)),
        ("thermal", lambda: thermal(ctx)),
        ("cooling", lambda: cooling(ctx)),
        ("fabric", lambda: fabric(ctx)),
        ("health", lambda: health(ctx)),
        ("stragglers", lambda: stragglers(ctx)),
    ]
    sections = []
    for name, make in makers:
        with timings.phase(f"section {name}"):  # its analysis and its plots
            sections.append(make())
    if options.job_store is not None:
        with timings.phase("section jobs"):
            sections.append(jobs_in_range(ctx, options.job_store, options.cluster))
    window: Window = ctx.window
    title = "GPU capacity review" + (f": {options.cluster}" if options.cluster else "")
    return Report(
        title=title,
        prometheus=options.connection.url,
        read_from=source.words,
        cluster=options.cluster,
        start=window.start,
        end=window.end,
        step=window.step,
        generated=now,
        summary=executive_summary(sections, window.range_words),
        sections=sections,
    )
