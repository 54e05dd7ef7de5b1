"""`nvwatch job JOBID`: one job's use of its GPUs, its energy and what to change, from
Prometheus while it holds the job's series and from a job store after it has forgotten
them (`--store` writes there, as slurmctld's epilog does at each job's end)."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from nvwatch.agent.cli.options import option
from nvwatch.agent.cli.prometheus_options import PrometheusFlags, prometheus_client_options
from nvwatch.common.durations import parse_duration
from nvwatch.common.http_connection import Connection, ConnectionSetupError
from nvwatch.report.errors import ReportError

if TYPE_CHECKING:
    from nvwatch.mixin.config import MixinConfig
    from nvwatch.report.jobs.model import JobSummary
    from nvwatch.report.jobs.store import JobStore

EXIT_NO_SUMMARY = 3  # no summary anywhere: an unknown job, one pending, or forgotten by all


@click.command("job")
@click.argument("job_id")
@option("--prometheus", "url", default=None, help="Prometheus (or compatible) base URL.")
@option(
    "--job-store",
    "store_spec",
    envvar="NVWATCH_JOB_STORE",
    default=None,
    help="Where summaries outlive Prometheus: `slurm` (the job's AdminComment, read with "
    "sacct) or a directory (dir:PATH). Read when Prometheus is not given or has no data "
    "for the job; written by --store.",
)
@option("--store", is_flag=True, help="Write the summary to --job-store (default slurm).")
@option(
    "--partition",
    default=None,
    help="The job's partition, kept in the summary (Prometheus does not know it; the "
    "slurmctld epilog passes SLURM_JOB_PARTITION).",
)
@option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
@option("--lookback", default="30d", show_default=True, help="How far back to look for it.")
@option(
    "--cluster",
    default=None,
    help="The job's cluster (the value of the cluster label), where one Prometheus holds "
    "several whose Slurms number jobs each on its own.",
)
@option(
    "--config",
    "config_path",
    envvar="NVWATCH_MIXIN_CONFIG",
    type=click.Path(dir_okay=False, exists=True),
    help="Mixin config YAML: selectors and the notes' thresholds.",
)
@prometheus_client_options(timeout_s=60.0)
def job_command(
    job_id: str,
    url: str | None,
    store_spec: str | None,
    store: bool,
    partition: str | None,
    fmt: str,
    lookback: str,
    cluster: str | None,
    config_path: str | None,
    prometheus: PrometheusFlags,
) -> None:
    """Summarise one job: its GPUs' utilization, memory, power and throttling, its
    traffic, its energy (GPUs' counters and its share of its nodes' BMC power) and notes
    on what to change. Exit 3: no summary of the job anywhere."""
    from nvwatch.mixin.config import load
    from nvwatch.report.jobs.codec import StoreError
    from nvwatch.report.jobs.fetch import JobNotFound
    from nvwatch.report.jobs.store import JobNotStored, check_job_id, open_store

    try:
        check_job_id(job_id)
        lookback_s = parse_duration(lookback, "--lookback")
        cfg = load(Path(config_path) if config_path else None)
        if store and url is None:
            raise click.UsageError("--store needs --prometheus: the summary is made from it")
        if url is None and store_spec is None:
            raise click.UsageError("name --prometheus, --job-store, or both")
        summary, source = None, ""
        if url is not None:
            connection = prometheus.connection(url)
            try:
                summary, source = _from_prometheus(connection, cfg, job_id, lookback_s, cluster)
            except JobNotFound as err:
                if store_spec is None or store:
                    _no_summary(str(err))
        if summary is not None and partition:
            summary = dataclasses.replace(summary, partition=partition)
        target = open_store(store_spec or "slurm") if store or store_spec is not None else None
        if summary is not None and target is not None:
            summary = _with_queue_wait(summary, target, store)
        if store:
            assert summary is not None and target is not None
            target.put(job_id, summary.to_dict())
            click.echo(f"stored job {job_id}'s summary in the {target.description}", err=True)
            return
        if summary is None:
            assert store_spec is not None
            summary, source = _from_store(store_spec, job_id, cluster)
    except JobNotStored as err:
        _no_summary(str(err))
    except (ReportError, ConnectionSetupError, StoreError) as err:
        raise click.ClickException(str(err)) from None
    if fmt == "json":
        click.echo(json.dumps({**summary.to_dict(), "source": source}, indent=1))
    else:
        from nvwatch.report.jobs.render import render_text

        click.echo(render_text(summary, source), nl=False)


def _with_queue_wait(summary: JobSummary, store: JobStore, storing: bool) -> JobSummary:
    """The summary with its queue wait where the store knows it (Slurm's accounting).

    Storing (the epilog, as the job ends), it waits for slurmdbd's record as the store's
    put does, and a summary is still kept when the times cannot be read; reading live, a
    job Slurm does not know costs nothing but the figure.
    """
    from nvwatch.report.jobs.codec import StoreError

    try:
        waited = store.queue_wait(summary.job_id, wait_for_record=storing)
    except StoreError as err:
        if storing:
            click.echo(f"job {summary.job_id}: queue wait unknown: {err}", err=True)
        return summary
    return dataclasses.replace(summary, queue_wait_s=waited)


def _from_prometheus(
    connection: Connection, cfg: MixinConfig, job_id: str, lookback_s: float, cluster: str | None
) -> tuple[JobSummary, str]:
    from nvwatch.report.jobs.fetch import fetch_summary
    from nvwatch.report.jobs.model import JobSummary
    from nvwatch.report.prom import PrometheusClient

    client = PrometheusClient(connection)
    fetched = fetch_summary(client, cfg, job_id, time.time(), lookback_s, cluster)
    # what is printed has been through the store's rounding: a stored copy prints the same
    return JobSummary.from_dict(fetched.to_dict()), f"Prometheus {connection.url}"


def _from_store(spec: str, job_id: str, cluster: str | None) -> tuple[JobSummary, str]:
    from nvwatch.report.jobs.codec import StoreError
    from nvwatch.report.jobs.model import JobSummary
    from nvwatch.report.jobs.store import JobNotStored, open_store

    target = open_store(spec)
    data = target.get(job_id)
    try:
        summary = JobSummary.from_dict(data)
    except (TypeError, ValueError) as err:
        raise StoreError(f"job {job_id}'s stored summary cannot be read: {err}") from None
    if cluster is not None and summary.cluster not in ("", cluster):
        # a store keyed by job id alone holds one cluster's job of that number
        raise JobNotStored(
            f"the {target.description} holds job {job_id} of cluster {summary.cluster!r}, "
            f"not of {cluster!r}"
        )
    return summary, f"{target.description}, stored at the job's end"


def _no_summary(message: str) -> NoReturn:
    click.echo(f"nvwatch: error: {' '.join(message.split())}", err=True)
    sys.exit(EXIT_NO_SUMMARY)


@click.command("jobs")
@option("--since", "since_text", default="7d", show_default=True, help="Jobs ended this recently.")
@option("--user", default=None, help="Only this user's jobs.")
@option("--account", default=None, help="Only this account's jobs.")
@option("--partition", default=None, help="Only this partition's jobs.")
@option(
    "--job-store",
    "store_spec",
    envvar="NVWATCH_JOB_STORE",
    default="slurm",
    show_default=True,
    help="Where the summaries are: `slurm` (AdminComments, read with sacct) or dir:PATH.",
)
@option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
def jobs_command(
    since_text: str,
    user: str | None,
    account: str | None,
    partition: str | None,
    store_spec: str,
    fmt: str,
) -> None:
    """One line per job with a stored summary: GPU-hours, how busy its GPUs were, its
    energy and its costliest note."""
    from nvwatch.report.jobs.codec import StoreError
    from nvwatch.report.jobs.model import JobSummary
    from nvwatch.report.jobs.render import render_list
    from nvwatch.report.jobs.store import Wanted, open_store

    since = time.time() - parse_duration(since_text, "--since")
    try:
        found = open_store(store_spec).select(Wanted(since, user, account, partition))
        summaries = [JobSummary.from_dict(d) for d in found]
    except (TypeError, ValueError) as err:
        raise click.ClickException(f"a stored summary cannot be read: {err}") from None
    except StoreError as err:
        raise click.ClickException(str(err)) from None
    if fmt == "json":
        click.echo(json.dumps([s.to_dict() for s in summaries], indent=1))
    else:
        click.echo(render_list(summaries), nl=False)
