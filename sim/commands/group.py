"""`nvwatch profiles` and `nvwatch simulate ...`: the simulated hardware."""

from __future__ import annotations

import os
import subprocess
import sys

import click

from nvwatch.agent.cli.options import agent_options, option
from nvwatch.agent.cli.scenario_options import parse_onset, with_onset
from nvwatch.agent.config import ConfigError, parse_scenario, split_scenarios
from nvwatch.common.click_groups import HelpGroup
from nvwatch.sim.profiles import PROFILES, UnknownProfile, get_profile


@click.command("profiles")
def profiles_command() -> None:
    """List the simulated hardware profiles: GPUs, NVLink, InfiniBand/RoCE ports."""
    from nvwatch.sim.profile_summary import summary_lines

    for profile in PROFILES.values():
        for line in summary_lines(profile):
            click.echo(line)


@click.group("simulate", cls=HelpGroup)
def simulate_group() -> None:
    """Run things against simulated DGX hardware."""


@simulate_group.command(
    "exec", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)
@option("--profile", required=True, help="Hardware profile (see `nvwatch profiles`).")
@agent_options("scenario", "onset", "seed", "mig")
@option(
    "--time-scale",
    type=float,
    default=1.0,
    show_default=True,
    help="Simulated seconds per real second (faults unfold faster).",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def simulate_exec(
    profile: str,
    scenario: tuple[str, ...],
    onset: str | None,
    seed: int,
    mig: str | None,
    time_scale: float,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND with the simulated NVML importable as `pynvml`.

    Any pynvml-based tool or script in COMMAND sees the simulated GPUs, e.g.
    `nvwatch simulate exec --profile dgx-h100 -- python my_script.py`.
    """
    from nvwatch.sim.node import workers
    from nvwatch.sim.nvml import exec_environment
    from nvwatch.sim.nvml.exec_env import simulated_job

    try:
        get_profile(profile)
    except UnknownProfile as exc:
        raise click.BadParameter(str(exc), param_hint="--profile") from exc
    specs = with_onset(
        [parse_scenario(s) for s in split_scenarios(scenario)],
        None if onset is None else parse_onset(onset),
    )
    try:
        simulated = exec_environment(profile, specs, seed=seed, time_scale=time_scale, mig=mig)
    except ValueError as exc:  # a scenario, a MIG layout or a time scale
        raise ConfigError(str(exc)) from exc
    env = {**os.environ, **simulated}
    # real pids for the simulated job, so process viewers find them; gone when we are
    with simulated_job(profile, specs, seed=seed) as job:
        env[workers.ENV_VAR] = workers.to_environment(job.pids)
        try:
            completed = subprocess.run(list(command), env=env, check=False)
        except FileNotFoundError as exc:
            raise click.UsageError(f"cannot run {command[0]!r}: {exc.strerror}") from exc
    sys.exit(completed.returncode)
