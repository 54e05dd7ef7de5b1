"""`nvwatch profiles` and `nvwatch simulate ...`: the simulated hardware."""

from __future__ import annotations

import os
import subprocess
import sys

import click

from agent.cli import cli
from agent.cli.options import option
from agent.sim.mig_layout import MigLayoutError
from agent.sim.profiles import PROFILES, UnknownProfile, get_profile


@cli.command("profiles")
def profiles_command() -> None:
    """List the simulated hardware profiles."""
    for profile in PROFILES.values():
        links = max((len(links) for links in profile.nvlinks), default=0)
        click.echo(
            f"{profile.name:<20} {profile.gpu_count:>2}x {profile.gpus[0].name:<28} "
            f"{links:>2} NVLink/GPU  {len(profile.nics)} NIC  {profile.description}"
        )


@cli.group("simulate")
def simulate_group() -> None:
    """Run things against simulated DGX hardware."""


@simulate_group.command(
    "exec", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)
@option("--profile", required=True, help="Hardware profile (see `nvwatch profiles`).")
@option("--scenario", default=None, help="GPU scenario for the whole node.")
@option("--mig", default=None, metavar="LAYOUT", help="MIG layout, as for `serve --mig`.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def simulate_exec(
    profile: str, scenario: str | None, mig: str | None, command: tuple[str, ...]
) -> None:
    """Run COMMAND with the simulated NVML importable as `pynvml`.

    Any pynvml-based tool or script in COMMAND sees the simulated GPUs, e.g.
    `nvwatch simulate exec --profile dgx-h100 -- python my_script.py`.
    """
    from agent.sim import workers
    from agent.sim.nvml import exec_environment
    from agent.sim.nvml.exec_env import simulated_job

    try:
        get_profile(profile)
    except UnknownProfile as exc:
        raise click.BadParameter(str(exc), param_hint="--profile") from exc
    try:
        env = {**os.environ, **exec_environment(profile, scenario, mig=mig)}
    except MigLayoutError as exc:
        raise click.UsageError(str(exc)) from exc
    # real pids for the simulated job, so process viewers find them; gone when we are
    with simulated_job(profile, scenario) as job:
        env[workers.ENV_VAR] = workers.to_environment(job.pids)
        try:
            completed = subprocess.run(list(command), env=env, check=False)
        except FileNotFoundError as exc:
            raise click.UsageError(f"cannot run {command[0]!r}: {exc.strerror}") from exc
    sys.exit(completed.returncode)
