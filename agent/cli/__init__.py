"""The `nvwatch` command. Commands only parse options into one config and hand it on.

Bad input (flags, environment, config files) prints one line on stderr and exits 2.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

import click

from nvwatch.agent import __version__, launch, logs, simulation
from nvwatch.agent.app import StartupError, bind, poll_and_render, serve, web_config_of
from nvwatch.agent.bmc_probe import bmc_config_of, probe_service
from nvwatch.agent.cli.options import (
    LISTEN_DEFAULT,
    agent_options,
    build_config,
    option,
    source_options,
)
from nvwatch.agent.config import CONFIG_ERRORS, SETTLE_BOUNDS, AgentConfig
from nvwatch.agent.exposition.families import FamilySet
from nvwatch.agent.runtime import runtime
from nvwatch.agent.shutdown import SHUTDOWN_LIMIT_S, shutdown_deadline
from nvwatch.agent.sources.registry import build_sources
from nvwatch.agent.threads import ThreadDeaths, agent_switch_interval, thread_deaths
from nvwatch.common.click_groups import HelpGroup, bad_parameter_line
from nvwatch.common.durations import parse_duration, prometheus_duration

EXIT_BAD_INPUT = 2
# the profile `topology` suggests without a driver: the DGX-1 cube-mesh, the one to see
TOPOLOGY_EXAMPLE_PROFILE = "dgx1-v100"

log = logging.getLogger(__name__)


# Commands in modules of their own, imported only when named (or for `--help`): `serve`
# on a real node loads none of the report, the dashboard and alert builders, matplotlib
# or the simulator.
_LAZY_COMMANDS = {
    "alerts": ("nvwatch.mixin.commands", "alerts_group"),
    "dashboards": ("nvwatch.dashboards.preview_command", "dashboards_group"),
    "doctor": ("nvwatch.agent.cli.doctor_command", "doctor_command"),
    "inventory": ("nvwatch.agent.cli.inventory_commands", "inventory_command"),
    "job": ("nvwatch.agent.cli.job_commands", "job_command"),
    "jobs": ("nvwatch.agent.cli.job_commands", "jobs_command"),
    "report": ("nvwatch.agent.cli.report_commands", "report_command"),
    "web-config": ("nvwatch.agent.cli.webconfig_commands", "web_config_group"),
}
_SIMULATOR_COMMANDS = ("profiles", "simulate")


class NvwatchGroup(HelpGroup):
    """Turns every bad-input error into one line on stderr and exit code 2, and loads
    each command's module when the command is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_LAZY_COMMANDS, *_SIMULATOR_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _SIMULATOR_COMMANDS:
            return simulation.command(cmd_name)
        if cmd_name in _LAZY_COMMANDS:
            module, attribute = _LAZY_COMMANDS[cmd_name]
            command = getattr(importlib.import_module(module), attribute)
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            return super().main(*args, **kwargs)
        except click.exceptions.Abort:
            sys.exit(130)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.BadParameter as exc:
            _fail(bad_parameter_line(exc))
        except click.ClickException as exc:
            _fail(exc.format_message())
        except (*CONFIG_ERRORS, StartupError) as exc:
            _fail(str(exc))


@click.group(
    cls=NvwatchGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, "--version", prog_name="nvwatch")
def cli() -> None:
    """nvwatch: GPU, NVLink and InfiniBand telemetry for DGX-class clusters."""
    # `serve` takes over the signals the entry point recorded once its handlers are in
    # place; every other command is stopped by them as any program is
    if click.get_current_context().invoked_subcommand != "serve":
        launch.restore_defaults()


@cli.command("serve")
@option(
    "--listen",
    default=LISTEN_DEFAULT,
    show_default=True,
    help="HOST:PORT to serve on; [::]:PORT takes IPv4 too, tcp6:[::]:PORT IPv6 alone; "
    "zone ids as [fe80::1%eth0]:PORT.",
)
@option(
    "--web-config",
    type=click.Path(dir_okay=False),
    help="exporter-toolkit style YAML: TLS certificate and basic-auth users.",
)
@option(
    "--sim-process-file",
    type=click.Path(dir_okay=False),
    metavar="PATH",
    help="With --simulate: lines '<gpu index> <pid> [<memory MiB>]' naming real processes "
    "the simulated GPUs report (re-read when it changes; dead pids dropped).",
)
@option(
    "--bmc-config",
    type=click.Path(dir_okay=False),
    help="ipmi_exporter's module file (as it is; plus password_file): also answer "
    "/probe?target=HOST[:PORT]&module=NAME with one BMC's series, read over IPMI 2.0.",
)
@option(
    "--bmc-cache",
    show_default=prometheus_duration(AgentConfig.bmc_cache),
    help="A BMC read answers the probes of its target and module this long.",
)
@source_options
def serve_command(**params: Any) -> None:
    """Poll the sources on an interval and serve /metrics (and /probe, for BMCs)."""
    config = build_config(params)
    logs.configure(config.log_format)
    # before anything starts: a bad web or BMC config is one line, not a simulated
    # node's warning followed by it
    web = web_config_of(config)
    bmc = bmc_config_of(config)
    listener = bind(config)  # a port in use is one line, before anything else starts
    stop = threading.Event()
    deaths = ThreadDeaths(stop)
    # outermost: the simulated node's thread starts in runtime(), and it must stop (and
    # its files go) however the agent ends
    with thread_deaths(deaths.died), runtime(config) as effective, _agent_process(stop):
        sources = build_sources(effective)
        probe = probe_service(effective, bmc)
        try:
            code = serve(effective, sources, stop=stop, web=web, probe=probe, listener=listener)
        finally:
            if probe is not None:
                probe.close()
    sys.exit(deaths.exit_code(code))


@contextlib.contextmanager
def _agent_process(stop: threading.Event) -> Iterator[None]:
    """Process-wide settings for `serve`, which owns its process; restored on the way out.

    They live here, at the command line, not in the library: a test or an embedding
    program calling `serve()` keeps its own signal handlers and GIL hand-over.
    """

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        if not stop.is_set():
            shutdown_deadline(SHUTDOWN_LIMIT_S)
        stop.set()

    def on_hangup(_signum: int, _frame: FrameType | None) -> None:
        # exporters often reload on SIGHUP; nvwatch reads its files once, and the default
        # action (terminate without cleanup) would leave a simulated node's files behind
        log.warning(
            "received SIGHUP: nothing is reloaded (configuration, web config and "
            "certificates are read at start-up); restart the agent to apply changes"
        )

    # signal handlers can only be installed from the main thread (not under a test runner
    # that invokes the command on another thread)
    handlers = threading.current_thread() is threading.main_thread()
    previous = {}
    if handlers:
        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, on_hangup)
        # what came while the command line was loading, handled as if it came now
        launch.take_over(lambda s, f: (on_hangup if s == signal.SIGHUP else on_signal)(s, f))
    try:
        with agent_switch_interval():
            yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@cli.command("dump")
@option(
    "--format",
    "output_format",
    type=click.Choice(["prometheus", "openmetrics", "json"]),
    default="prometheus",
    show_default=True,
    help="Output format.",
)
@option(
    "--settle",
    default="1s",
    metavar="DURATION",
    show_default=True,
    help=f"Wait between two polls so rates and ratios have an interval, {SETTLE_BOUNDS} "
    "(0 for one poll).",
)
@agent_options(
    "config", "sources", "sysfs-root", "simulate", "scenario", "onset", "seed", "mig",
    "nvlink-detail", "ib-hw-counters", "kmsg-path", "attribution", "attribution-interval",
    "hpc-job-mapping-dir", "kubelet-socket", "proc-root", "scheduler-interval",
    "scheduler-timeout", "scheduler-max-accounts", "scheduler-max-users",
    "scheduler-max-output-mib", "log-format",
)  # fmt: skip
def dump_command(output_format: str, settle: str, **params: Any) -> None:
    """Poll once and print what /metrics would serve."""
    config = build_config(params)
    logs.configure(config.log_format)
    settle_seconds = (
        0.0 if settle.strip() in ("0", "0s") else parse_duration(settle, "settle", SETTLE_BOUNDS)
    )
    with runtime(config) as effective:
        exposition = poll_and_render(effective, build_sources(effective), settle_seconds)
    if output_format == "prometheus":
        click.echo(exposition.text.decode(), nl=False)
    elif output_format == "openmetrics":
        click.echo(exposition.openmetrics(gzipped=False).decode(), nl=False)
    else:
        click.echo(json.dumps(_as_json(exposition.snapshot.sources), indent=2))


@cli.command("topology")
@agent_options("config", "sysfs-root", "simulate", "scenario", "onset", "mig", "log-format")
def topology_command(**params: Any) -> None:
    """GPU x GPU NVLink/PCIe matrix and GPU <-> HCA affinity, like `nvidia-smi topo -m`."""
    from nvwatch.agent.sources import SourceUnavailable
    from nvwatch.agent.topology import build_topology, format_matrix

    config = build_config(params)
    logs.configure(config.log_format)
    with runtime(config) as effective:
        try:
            topology = build_topology(effective.sysfs_root, _hcas(effective.sysfs_root))
        except SourceUnavailable as exc:
            _fail(_no_topology(effective, str(exc)))
    click.echo(format_matrix(topology), nl=False)


def _no_topology(config: AgentConfig, reason: str) -> str:
    """Why there is no matrix to print, and how to see one anyway (as `doctor` says)."""
    from nvwatch.agent.sources.presence import PCI_VENDOR_NVIDIA, scan_pci

    scan = scan_pci(config.sysfs_root)
    if scan.listed and not scan.nvidia_gpus():
        reason = (
            f"no NVIDIA GPU on this node (no PCI function with vendor "
            f"0x{PCI_VENDOR_NVIDIA:04x} in {scan.directory}); {reason}"
        )
    return (
        f"no GPU topology to show: {reason}. To see one without a GPU, run it on a "
        f"simulated node: nvwatch topology --simulate {TOPOLOGY_EXAMPLE_PROFILE} "
        "(profiles: nvwatch profiles)"
    )


def _hcas(sysfs_root: Path) -> list[tuple[str, str]]:
    """(device, PCI bus id) of each HCA, from class/infiniband/<dev>/device links."""
    base = sysfs_root / "class" / "infiniband"
    if not base.is_dir():
        return []
    found = []
    for device in sorted(base.iterdir()):
        with contextlib.suppress(OSError):
            found.append((device.name, os.path.basename(os.path.realpath(device / "device"))))
    return found


def _as_json(statuses: Any) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, status in statuses.items():
        families: dict[str, list[dict[str, Any]]] = {}
        if isinstance(status.prepared, FamilySet):
            for family in status.prepared:
                families[family.name] = [
                    {"name": s.name, "labels": s.labels, "value": s.value} for s in family.samples
                ]
        result[name] = {
            "up": status.up,
            "error": status.error,
            "duration_seconds": status.duration_seconds,
            "metrics": families,
        }
    return result


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="nvwatch")


def _fail(message: str) -> NoReturn:
    # one line, so it reads well in journald and in a failing systemd unit's status
    first = " ".join(message.split())
    click.echo(f"nvwatch: error: {first}", err=True)
    sys.exit(EXIT_BAD_INPUT)
