"""`nvwatch simulate stragglers`: a labelled corpus of synchronous jobs, some held back by
one rank, as OpenMetrics to backfill and a truth file."""

from __future__ import annotations

import click

from nvwatch.agent.cli.options import option
from nvwatch.common.durations import DurationBounds, parse_duration
from nvwatch.common.outputs import output_directory, writing
from nvwatch.sim.commands.group import simulate_group

STEP_BOUNDS = DurationBounds(1.0, 60.0)


@simulate_group.command("stragglers")
@option("--seed", type=int, default=0, show_default=True, help="The same seed, the same corpus.")
@option("--episodes", type=click.IntRange(min=1), required=True, help="Number of episodes (jobs).")
@option("--out", required=True, type=click.Path(file_okay=False), help="Directory to write.")
@option("--step", default="15s", show_default=True, help="Time between samples (a scrape).")
@option(
    "--max-nodes",
    type=click.IntRange(min=2, max=32),
    default=32,
    show_default=True,
    help="Largest job, in nodes. Sizes run from 2 with P(n) proportional to 1/n^2 (a "
    "2-node job is 4 times as likely as a 4-node one), so most jobs are small; "
    "--max-nodes 4 keeps a CI corpus cheap.",
)
def simulate_stragglers(seed: int, episodes: int, out: str, step: str, max_nodes: int) -> None:
    """Write a labelled straggler corpus into OUT: corpus.om (OpenMetrics) and truth.json.

    Each episode is one synchronous data-parallel job of 2 to MAX-NODES nodes (8 GPUs
    each, dgx-h100 or dgx-a100) over 30 to 45 minutes that start with the job. Episodes
    come in turns of one of each kind: a straggler of each cause (power-capped,
    thermal-runaway, gpu-slow, nvlink-degraded, pcie-downtrained, ib-congestion,
    ib-degraded, cpu-starved) at a slowdown from 5 % to 60 % and an onset anywhere
    before the last 25 minutes, where an alert naming it is expected; and where none is:
    a healthy job, a rank slow only in the job's first minutes, checkpoints pausing
    every rank together, a pipeline-parallel job (account pp-train, the marker the
    truth names), a single-GPU job, a job power-capped everywhere. Backfill with
    `promtool tsdb create-blocks-from openmetrics OUT/corpus.om TSDB`, or evaluate with
    `nvwatch alerts evaluate-stragglers OUT`.
    """
    from nvwatch.sim.stragglers.corpus import generate
    from nvwatch.sim.stragglers.episodes import plan_corpus

    step_s = parse_duration(step, "step", STEP_BOUNDS)
    target = output_directory(out)
    plans = plan_corpus(seed, episodes, max_nodes=max_nodes, step=step_s)
    with writing():
        result = generate(plans, target, seed=seed, step=step_s)
    rate = result.samples / result.seconds if result.seconds > 0 else 0.0
    click.echo(
        f"{result.samples} samples of {episodes} episodes in {result.seconds:.1f}s "
        f"({rate:,.0f} samples/s): {result.series_path} (truth: {result.truth_path})",
        err=True,
    )
