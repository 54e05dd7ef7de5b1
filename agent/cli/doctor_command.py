"""`nvwatch doctor`: every source polled once, one line each, and the exit code a health
check reads (agent/doctor.py has the findings); loaded only when the command is named."""

from __future__ import annotations

import json
import logging
import sys
from typing import TYPE_CHECKING, Any

import click

from nvwatch.agent import logs, simulation
from nvwatch.agent.app import poll_and_render
from nvwatch.agent.bmc_probe import bmc_config_of
from nvwatch.agent.cli.options import agent_options, build_config, option
from nvwatch.agent.config import AgentConfig
from nvwatch.agent.doctor import Finding, diagnose
from nvwatch.agent.runtime import runtime
from nvwatch.agent.sources import Source
from nvwatch.agent.sources.registry import build_sources
from nvwatch.common.yaml_safe import ConfigError

if TYPE_CHECKING:
    from nvwatch.agent.sources.bmc.config import BmcConfig


@click.command("doctor")
@option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text: one line per source; json: one object (sources, XID history, exit code).",
)
@agent_options(
    "config", "sources", "sysfs-root", "simulate", "scenario", "onset", "mig",
    "kmsg-path", "attribution", "hpc-job-mapping-dir", "kubelet-socket", "proc-root",
    "scheduler-timeout", "scheduler-max-accounts", "scheduler-max-users",
    "scheduler-max-output-mib", "log-format",
)  # fmt: skip
@option(
    "--bmc-config",
    type=click.Path(dir_okay=False),
    help="serve's BMC module file: check it, and read each --bmc-target with it.",
)
@option(
    "--bmc-target",
    "bmc_targets",
    multiple=True,
    metavar="HOST[:PORT]",
    help="With --bmc-config: read this BMC once, as /probe?target= would (repeatable). "
    "Without one, doctor sends IPMI to no one.",
)
@option(
    "--bmc-module",
    default="default",
    show_default=True,
    help="The module of --bmc-config that reads each --bmc-target.",
)
def doctor_command(
    output_format: str, bmc_targets: tuple[str, ...], bmc_module: str, **params: Any
) -> None:
    """One line per source: up (what it serves), absent (why) or down (why).

    Exits 0 when every source is up or absent, 1 when one is down (or nothing can be
    collected), 2 for bad input: a health check for systemd's ExecStartPre, a Kubernetes
    exec probe or Slurm's HealthCheckProgram. It reads the flags, NVWATCH_* environment
    and config file the agent reads, so it checks what `serve` would serve.
    """
    config = build_config(params)
    if bmc_targets and config.bmc_config is None:
        raise ConfigError("--bmc-target reads a BMC with a module of --bmc-config: give it")
    # warnings only, and not the ones doctor prints itself: the poller's "source is
    # down" and the simulated node's banner would say each finding twice
    logs.configure(config.log_format, level=logging.WARNING, quiet=DOCTOR_RESTATES)
    bmc = bmc_config_of(config)  # a bad file is one line before anything starts
    with runtime(config) as effective:
        sources = build_sources(effective)
        slurm = _slurm_finding(sources, simulated=effective.simulate is not None)
        bmc_read = _bmc_findings(config, bmc, bmc_targets, bmc_module)
        exposition = poll_and_render(effective, sources, settle=0)
        # inside: a simulated node's kernel log goes when the runtime ends
        xid_history = _xid_history(effective) if "nvml" in effective.sources else None
    diagnosis = diagnose(
        exposition.snapshot.sources.values(),
        xid_history,
        simulated=effective.simulate,
        slurm=slurm,
        bmc=bmc_read,
    )
    if output_format == "json":
        click.echo(json.dumps(diagnosis.as_json(), indent=2))
    else:
        for line in diagnosis.lines():
            click.echo(line)
    if not diagnosis.collecting:
        click.echo("nothing can be collected on this node", err=True)
    sys.exit(diagnosis.exit_code)


# loggers whose warnings `doctor` prints as findings of its own
DOCTOR_RESTATES = ("nvwatch.agent.poller", simulation.BANNER_LOGGER)


def _slurm_finding(sources: list[Source], simulated: bool) -> Finding | None:
    """What the scheduler source runs on this host, when it is one of `sources`."""
    from nvwatch.agent.doctor import slurm_finding
    from nvwatch.agent.sources.scheduler.source import SchedulerSource

    for source in sources:
        if isinstance(source, SchedulerSource):
            finding = slurm_finding(source, simulated)
            source.read_first()  # its finding is then Slurm's answer, not "not finished"
            return finding
    return None


def _bmc_findings(
    config: AgentConfig, bmc: BmcConfig | None, targets: tuple[str, ...], module: str
) -> list[Finding]:
    """The BMC config's finding and each target's read; none without --bmc-config."""
    if bmc is None:
        return []
    from nvwatch.agent.doctor_bmc import bmc_findings

    return bmc_findings(str(config.bmc_config), bmc, targets, module)


def _xid_history(config: AgentConfig) -> Finding:
    """Where XID counts come from: the kernel log (the whole boot) or NVML events only."""
    from nvwatch.agent.sources.nvml.declaration import kmsg_path
    from nvwatch.agent.sources.nvml.kmsg import probe

    path = kmsg_path(config)
    reason = probe(path) if path is not None else "no kernel log for a simulated node"
    if reason is None:
        return Finding("xid-history", "up", f"{path}: XID counts cover the whole boot")
    return Finding(
        "xid-history",
        "limited",
        f"{reason}; XIDs are counted from NVML events since the agent started",
    )
