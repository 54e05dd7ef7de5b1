"""`nvwatch report`: the capacity review document from a Prometheus' history."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nvwatch.agent.cli.credentials import read_credential
from nvwatch.agent.cli.options import option
from nvwatch.common.http_connection import Connection, ConnectionSetupError
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
@option("--out", required=True, type=click.Path(file_okay=False), help="Directory to write into.")
@option("--basic-auth-user", default=None, help="User for HTTP basic auth.")
@option("--basic-auth-password-file", default=None, help="File holding the basic auth password.")
@option("--bearer-token-file", default=None, help="File holding a bearer token.")
@option("--ca-file", type=click.Path(dir_okay=False, exists=True), help="CA bundle for https.")
@option("--insecure-skip-verify", is_flag=True, help="Do not verify the server's certificate.")
@option("--timeout", default=120.0, show_default=True, help="Seconds to wait for one query.")
def report_command(
    url: str,
    range_text: str,
    end_text: str | None,
    step_text: str | None,
    cluster: str | None,
    config_path: str | None,
    job_store: str | None,
    out: str,
    basic_auth_user: str | None,
    basic_auth_password_file: str | None,
    bearer_token_file: str | None,
    ca_file: str | None,
    insecure_skip_verify: bool,
    timeout: float,
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

    password = read_credential(basic_auth_password_file, "--basic-auth-password-file")
    if password is not None and basic_auth_user is None:
        raise click.UsageError("--basic-auth-password-file needs --basic-auth-user")
    try:
        options = ReportOptions(
            connection=Connection(
                url=url,
                url_flag="--prometheus",
                basic_auth=(basic_auth_user, password or "") if basic_auth_user else None,
                bearer_token=read_credential(bearer_token_file, "--bearer-token-file"),
                ca_file=Path(ca_file) if ca_file else None,
                insecure_tls=insecure_skip_verify,
                timeout_seconds=timeout,
            ),
            range_text=range_text,
            end_text=end_text,
            step_text=step_text,
            cluster=cluster,
            config=load(Path(config_path) if config_path else None),
            # checked before the queries, which take minutes over a long range
            out=output_directory(out),
            job_store=job_store,
        )
        written = run_report(options, progress=sys.stderr)
    except (ReportError, ConnectionSetupError) as err:
        raise click.ClickException(str(err)) from None
    click.echo(f"wrote {written[0]} and {len(written) - 1} more file(s) in {out}", err=True)
