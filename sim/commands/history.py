"""`nvwatch simulate history`: days of a simulated fleet as OpenMetrics to backfill."""

from __future__ import annotations

import datetime
import time
from pathlib import Path

import click

from nvwatch.agent.cli.options import option
from nvwatch.agent.config import SCENARIO_SYNTAX, split_scenarios
from nvwatch.common.durations import DurationBounds, parse_duration
from nvwatch.common.outputs import output_file, writing
from nvwatch.sim.commands.group import simulate_group
from nvwatch.sim.fleet.jobs import JOB_SYNTAX, parse_job
from nvwatch.sim.fleet.plan import DEFAULT_CLUSTER, FleetError, parse_node_scenario
from nvwatch.sim.history.plan import MIN_NODES

STEP_BOUNDS = DurationBounds(1.0, 3600.0)


def parse_end(text: str | None) -> float:
    """Unix seconds, or an ISO 8601 time (UTC unless it says otherwise); None: now."""
    if text is None:
        return time.time()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is neither Unix seconds nor an ISO 8601 time", param_hint="--end"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


def _progress(done: int, total: int) -> None:
    """A line on stderr at every tenth of the way: a large fleet takes minutes."""
    if total and done * 10 // total != (done - 1) * 10 // total:
        click.echo(f"simulated {done}/{total} nodes ({100 * done // total}%)", err=True)


@simulate_group.command("history")
@option(
    "--nodes",
    type=int,
    required=True,
    help=f"Number of nodes: at least {MIN_NODES}, one per episode.",
)
@option("--days", type=float, default=30.0, show_default=True, help="Length of the history.")
@option("--step", default="10m", show_default=True, help="Time between samples (a scrape).")
@option("--out", required=True, type=click.Path(dir_okay=False), help="OpenMetrics file.")
@option(
    "--profile",
    metavar="PROFILE[:COUNT],...",
    help="Profiles of the nodes (default: dgx1-v100, dgx-a100, dgx-h100 in turn).",
)
@option("--end", help="Time of the last sample: Unix seconds or ISO 8601 (default: now).")
@option("--seed", type=int, default=0, show_default=True, help="Seed of node i is SEED+i.")
@option("--cluster", default=DEFAULT_CLUSTER, show_default=True, help="The `cluster` label.")
@option(
    "--nodes-per-file",
    type=click.IntRange(min=1),
    help="Split into files of this many nodes (FILE.000.om ...), each backfilled on its "
    "own: a month of a large fleet is tens of GB as one file.",
)
@option(
    "--scenario",
    multiple=True,
    metavar=f"[NODE:]{SCENARIO_SYNTAX}",
    help="A scenario beside the placed episodes, as simulate fleet's: "
    "2:gpu-slow@3,slowdown=0.2,from=2h (from= and until= count from the history's start). "
    "Repeatable.",
)
@option(
    "--job",
    multiple=True,
    metavar=JOB_SYNTAX,
    help="A Slurm job for the whole history, as simulate fleet's: 0-3:all,id=77 is one "
    "synchronous data-parallel job over nodes 0..3 (every step waits for its slowest "
    "rank). The history then also writes who holds each GPU and what the job straggler "
    "rules compare ranks on (clocks, clock-event reasons, PCIe links, NVLink errors, "
    "host CPU). Repeatable.",
)
@option(
    "--backfill",
    "backfill",
    type=click.Path(file_okay=False),
    help="Import each part into this TSDB directory with promtool as soon as it is "
    "written, and delete it: at most one part on disk (one node's, unless "
    "--nodes-per-file says more), where a month of six nodes is 1 GB as one file.",
)
def simulate_history(
    nodes: int,
    days: float,
    step: str,
    out: str,
    profile: str | None,
    end: str | None,
    seed: int,
    cluster: str,
    nodes_per_file: int | None,
    scenario: tuple[str, ...],
    job: tuple[str, ...],
    backfill: str | None,
) -> None:
    """Write D days of a simulated fleet, sampled every STEP, as OpenMetrics.

    Each node's simulator is stepped through the range and every step is written as a
    scrape would record it, with the scrape's labels. Episodes are placed in known weeks
    and nodes (thermal runaway, a power-capped week, InfiniBand congestion, an ECC error,
    an agent down, an idle node); the nodes' Slurm queue is written as its controller's
    agent (instance slurmctl) exports it, with a backlog week, an account over its share,
    a drained node and jobs held by a limit while GPUs idle. FILE's stem + .truth.json
    lists them with the integrals of what was written. Backfill with
    `promtool tsdb create-blocks-from --max-block-duration=800h openmetrics FILE DIR`.
    """
    from nvwatch.sim.history.history import generate, truth_path_for
    from nvwatch.sim.history.plan import plan_history

    step_s = parse_duration(step, "step", STEP_BOUNDS)
    try:
        plan = plan_history(
            nodes=nodes,
            days=days,
            step=step_s,
            end=parse_end(end),
            profile=profile,
            seed=seed,
            cluster=cluster,
            scenarios=[parse_node_scenario(s) for s in split_scenarios(list(scenario))],
            jobs=[parse_job(text, number) for number, text in enumerate(job)],
        )
    except FleetError as exc:
        raise click.UsageError(str(exc)) from exc
    # before simulating for minutes: the file, its parts and the ground truth beside it
    target = output_file(out)
    on_file = None
    if backfill is not None:
        from nvwatch.sim.commands.history_backfill import importer, promtool_or_fail

        on_file = importer(promtool_or_fail(), Path(backfill), days)
        nodes_per_file = nodes_per_file or 1
    with writing():
        result = generate(
            plan, target, nodes_per_file=nodes_per_file, progress=_progress, on_file=on_file
        )
    written = ", ".join(str(p) for p in result.paths)
    if backfill is not None:
        written = f"imported into {backfill} and deleted ({len(result.paths)} parts)"
    click.echo(
        f"{result.samples} samples of {len(plan.nodes)} nodes over {days:g} days in "
        f"{result.seconds:.1f}s: {written} (ground truth: {truth_path_for(target)})",
        err=True,
    )
