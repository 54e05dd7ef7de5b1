"""`nvwatch report`: the capacity review document from a Prometheus' history."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nvwatch.agent.cli.options import option
from nvwatch.agent.cli.prometheus_options import PrometheusFlags, prometheus_client_options
from nvwatch.common.http_connection import ConnectionSetupError
from nvwatch.common.outputs import output_directory
from nvwatch.report.errors import ReportError


@click.command("report")
@option("--prometheus", "url", required=True, help="Prometheus (or compatible) base URL.")
@option(
    "--range",
    "range_text",
    default="30d",
    show_default=True,
    help="How far back, e.g. 7d, 30d, 12w.",
)
@option(
    "--end",
    "end_text",
    default=None,
    help="End of the range: unix seconds or 2026-11-01T00:00:00Z [default: now].",
)
@option("--step", "step_text", default=None, help="Query step [default: range / 720, at least 1m].")
@option("--cluster", default=None, help="Only this value of the cluster label.")
@option(
    "--config",
    "config_path",
    envvar="NVWATCH_MIXIN_CONFIG",  # NVWATCH_CONFIG is the agent's own config file
    type=click.Path(dir_okay=False, exists=True),
    help="Mixin config YAML: selectors, thresholds, the rack power plan.",
)
@option(
    "--job-store",
    "job_store",
    envvar="NVWATCH_JOB_STORE",
    default=None,
    help="Add a Jobs section from the job summaries kept here: `slurm` or dir:PATH "
    "(nvwatch job --store).",
)
@option(
    "--read",
    type=click.Choice(["auto", "rules", "raw"]),
    default="auto",
    show_default=True,
    help="The series of the nvwatch-report-*.rules recording rules (one sample per "
    "report_interval: fast over a month of a large fleet), the scraped samples, or the "
    "rules' where they cover the whole window.",
)
@option("--out", required=True, type=click.Path(file_okay=False), help="Directory to write into.")
@option(
    "--timings",
    "timings_path",
    default=None,
    type=click.Path(dir_okay=False),
    help="Also write where the time went (each query, the analysis, the writing) as JSON.",
)
@prometheus_client_options(timeout_s=120.0)
def report_command(
    url: str,
    range_text: str,
    end_text: str | None,
    step_text: str | None,
    cluster: str | None,
    config_path: str | None,
    job_store: str | None,
    read: str,
    out: str,
    timings_path: str | None,
    prometheus: PrometheusFlags,
) -> None:
    """Write report.html, report.json and CSVs: utilization, users, power, thermal,
    fabric and health over a range, from the nvwatch series in Prometheus."""
    from nvwatch.report import style

    try:
        # first: the report's modules import numpy, and without the extra that is a
        # traceback rather than this line
        style.require()
    except style.PlottingUnavailable as err:
        raise click.ClickException(str(err)) from None
    from nvwatch.mixin.config import load
    from nvwatch.report.build import ReportOptions, run_report

    try:
        options = ReportOptions(
            connection=prometheus.connection(url),
            range_text=range_text,
            end_text=end_text,
            step_text=step_text,
            cluster=cluster,
            config=load(Path(config_path) if config_path else None),
            # checked before the queries, which take minutes over a long range
            out=output_directory(out),
            job_store=job_store,
            read=read,
            timings=Path(timings_path) if timings_path else None,
        )
        written = run_report(options, progress=sys.stderr)
    except (ReportError, ConnectionSetupError) as err:
        raise click.ClickException(str(err)) from None
    click.echo(f"wrote {written[0]} and {len(written) - 1} more file(s) in {out}", err=True)
