"""Options shared by the agent commands, each also read from `NVWATCH_<FLAG>` and --config.

Precedence, highest first: command-line flag, environment variable, config file, default.
Click gives flag > environment > `default_map` > default, so the config file is loaded by
an eager `--config` callback into the context's `default_map` before the other options
are resolved.

Each command takes only the options that do something there (`agent_options(...)`):
`topology` polls nothing, so it has no --interval or --sources. One config file serves
them all: a key that another agent command takes (interval: in a file `doctor` reads) is
left alone, an unknown one is an error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from nvwatch.agent import simulation
from nvwatch.agent.config import (
    ATTRIBUTION_INTERVAL_BOUNDS,
    DEFAULT_KUBELET_SOCKET,
    INTERVAL_BOUNDS,
    LOG_FORMATS,
    SCENARIO_SYNTAX,
    AgentConfig,
    ConfigError,
    ScenarioSpec,
    load_config_file,
    parse_attribution,
    parse_listen,
    parse_scenario,
    parse_sources,
    split_ipv6_only,
    split_scenarios,
)
from nvwatch.agent.durations import DURATION_FORMAT, DurationError, parse_duration
from nvwatch.agent.sources.infiniband_parse import HW_COUNTER_CHOICES
from nvwatch.agent.sources.nvml.samples import NVLINK_DETAIL_CHOICES

F = TypeVar("F", bound=Callable[..., Any])

_DEFAULTS = AgentConfig()
# options of `serve` beyond the ones below; a config file may name them for any command
_SERVE_ONLY = frozenset({"listen", "web_config", "sim_process_file"})


def _load_config(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    mine = {p.name for p in ctx.command.params if p.name and p.name != "config"}
    known = mine | _SERVE_ONLY | {name.replace("-", "_") for name in _OPTIONS}
    try:
        loaded = load_config_file(Path(value), known)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=_param) from exc
    mine_loaded = {key: loaded[key] for key in loaded if key in mine}
    ctx.default_map = {**(ctx.default_map or {}), **mine_loaded}
    return value


def _env(name: str) -> str:
    return "NVWATCH_" + name.upper().replace("-", "_")


def option(*decls: str, **attrs: Any) -> Callable[[F], F]:
    """click.option with the `NVWATCH_<FLAG>` environment variable the design promises."""
    long_name = next(d for d in decls if d.startswith("--"))[2:]
    attrs.setdefault("envvar", _env(long_name))
    attrs.setdefault("show_envvar", True)
    return click.option(*decls, **attrs)


class _ScenarioOption(click.Option):
    """--scenario, whose help lists the simulator's scenarios: read when help is shown,
    so defining the option (every command that takes it) loads no simulator."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        self.help = f"{_SCENARIO_HELP} Scenarios: {simulation.scenario_names()}."
        return super().get_help_record(ctx)


_SCENARIO_HELP = (
    "Simulation scenario on one GPU index or HCA (@TARGET), begun and repaired at "
    "simulated times since start (from=, until=); repeatable, or several space-separated."
)


def scenario_option(func: F) -> F:
    """--scenario in the one syntax of every command (nvwatch.agent.config.SCENARIO_SYNTAX)."""
    return option(
        "--scenario",
        cls=_ScenarioOption,
        multiple=True,
        metavar=SCENARIO_SYNTAX,
        help=_SCENARIO_HELP,
    )(func)


def parse_onset(text: str) -> float:
    """--onset: 0 (at once) or a duration."""
    if text.strip() in ("0", "0s"):
        return 0.0
    try:
        return parse_duration(text, "onset")
    except DurationError as exc:
        raise ConfigError(str(exc)) from exc


def with_onset(specs: Sequence[ScenarioSpec], onset: float | None) -> tuple[ScenarioSpec, ...]:
    """`specs` with `onset` as the from= of every fault that gives none (workloads set
    what the GPUs run from the start; they take no from=)."""
    if onset is None:
        return tuple(specs)
    workloads = simulation.workloads()
    return tuple(
        dataclasses.replace(s, from_s=onset) if s.from_s is None and s.name not in workloads else s
        for s in specs
    )


_OPTIONS: dict[str, Callable[[F], F]] = {
    "config": option(
        "--config",
        type=click.Path(dir_okay=False),
        is_eager=True,
        expose_value=False,
        callback=_load_config,
        help="YAML file of option: value (lower precedence than flags and environment).",
    ),
    "interval": option(
        "--interval",
        default="5s",
        show_default=True,
        metavar="DURATION",
        help=f"Poll interval, {INTERVAL_BOUNDS}; {DURATION_FORMAT}.",
    ),
    "sources": option(
        "--sources",
        default="nvml,infiniband,host",
        show_default=True,
        help="Comma-separated sources to poll.",
    ),
    "sysfs-root": option(
        "--sysfs-root",
        default="/sys",
        show_default=True,
        type=click.Path(file_okay=False),
        help="Root of sysfs (for InfiniBand and PCIe affinity).",
    ),
    "simulate": option(
        "--simulate", metavar="PROFILE", help="Run on a simulated node (see `profiles`)."
    ),
    "scenario": scenario_option,
    "onset": option(
        "--onset",
        metavar="DURATION",
        help="With --simulate: when faults without from= begin, in simulated time since "
        "start (0: at once) [default: 30s, 0 for InfiniBand ones].",
    ),
    "seed": option("--seed", default=0, show_default=True, type=int, help="Simulation seed."),
    "mig": option(
        "--mig",
        metavar="LAYOUT",
        help="With --simulate: partition GPUs with MIG, GPUS:PROFILE,...[;GPUS:...], "
        "e.g. all:3g.40gb,3g.40gb or 0-3:7g.80gb;4-7:1g.10gb*7 (none: MIG on, no "
        "instances; pending: on after a reset).",
    ),
    "nvlink-detail": option(
        "--nvlink-detail",
        type=click.Choice(NVLINK_DETAIL_CHOICES),
        default="link",
        show_default=True,
        help="NVLink series per link, or aggregated per GPU (fewer series).",
    ),
    "ib-hw-counters": option(
        "--ib-hw-counters",
        type=click.Choice(HW_COUNTER_CHOICES),
        default="default",
        show_default=True,
        help="mlx5 hw_counters to export: the loss and congestion ones (out_of_sequence, "
        "local_ack_timeout_err; CNP/ECN on RoCE), or all of them.",
    ),
    "kmsg-path": option(
        "--kmsg-path",
        type=click.Path(dir_okay=False),
        show_default="/dev/kmsg; with --simulate, the simulated node's log",
        help="Kernel log to count XIDs from since boot (a file in /dev/kmsg's record "
        "format or dmesg text works too); unreadable: NVML events since start only.",
    ),
    "attribution": option(
        "--attribution",
        default="none",
        show_default=True,
        metavar="MODES",
        help="Who uses each GPU: comma-separated slurm, kubernetes, or none "
        "(nvwatch_gpu_allocation_info, and job/pod labels on process series).",
    ),
    "attribution-interval": option(
        "--attribution-interval",
        default="10s",
        show_default=True,
        metavar="DURATION",
        help=f"How often attribution re-reads its sources, {ATTRIBUTION_INTERVAL_BOUNDS}; "
        "a new GPU process triggers an early refresh.",
    ),
    "hpc-job-mapping-dir": option(
        "--hpc-job-mapping-dir",
        type=click.Path(file_okay=False),
        help="Slurm: directory of GPU-index files holding job ids, written by a prolog "
        "(dcgm-exporter's format and flag; see deploy/slurm/).",
    ),
    "kubelet-socket": option(
        "--kubelet-socket",
        default=str(DEFAULT_KUBELET_SOCKET),
        show_default=True,
        type=click.Path(dir_okay=False),
        help="Kubernetes: the kubelet pod-resources gRPC socket.",
    ),
    "proc-root": option(
        "--proc-root",
        default="/proc",
        show_default=True,
        type=click.Path(file_okay=False),
        help="Root of procfs, for the cgroup and environment of GPU processes.",
    ),
    "log-format": option(
        "--log-format",
        type=click.Choice(LOG_FORMATS),
        default="text",
        show_default=True,
        help="Log as text or JSON lines.",
    ),
}


def agent_options(*names: str) -> Callable[[F], F]:
    """The named shared options (keys of _OPTIONS), in the order --help lists them."""
    unknown = set(names) - set(_OPTIONS)
    if unknown:
        raise ValueError(f"no shared option {sorted(unknown)}")

    def decorate(func: F) -> F:
        for name in reversed([n for n in _OPTIONS if n in names]):
            func = _OPTIONS[name](func)
        return func

    return decorate


# what `serve` takes; dump, doctor and topology take the part that acts there
source_options = agent_options(*_OPTIONS)


def build_config(params: dict[str, Any], **extra: Any) -> AgentConfig:
    """Turn raw option values into the one config object; ConfigError on bad values.

    An option the command does not take keeps AgentConfig's default."""
    # from the environment or a config file one string: keep from=/until= with their scenario
    scenario_values = split_scenarios(params.get("scenario") or ())
    onset = params.get("onset")
    scenarios = with_onset(
        [parse_scenario(s) for s in scenario_values],
        None if onset is None else parse_onset(str(onset)),
    )
    ipv6_only, listen = split_ipv6_only(params.get("listen") or "0.0.0.0:9477")
    listen_host, listen_port = parse_listen(listen)
    interval = params.get("interval")
    config = AgentConfig(
        listen_host=listen_host,
        listen_port=listen_port,
        listen_ipv6_only=ipv6_only,
        interval=_DEFAULTS.interval
        if interval is None
        else parse_duration(interval, "interval", INTERVAL_BOUNDS),
        sources=parse_sources(params.get("sources") or ",".join(_DEFAULTS.sources)),
        sysfs_root=Path(params.get("sysfs_root") or _DEFAULTS.sysfs_root),
        simulate=params.get("simulate"),
        scenarios=scenarios,
        seed=int(params.get("seed") or 0),
        web_config=Path(params["web_config"]) if params.get("web_config") else None,
        log_format=params.get("log_format") or "text",
        nvlink_detail=params.get("nvlink_detail") or "link",
        ib_hw_counters=params.get("ib_hw_counters") or "default",
        kmsg_path=Path(params["kmsg_path"]) if params.get("kmsg_path") else None,
        attribution=parse_attribution(params.get("attribution") or ()),
        attribution_interval=parse_duration(
            params.get("attribution_interval") or "10s",
            "attribution interval",
            ATTRIBUTION_INTERVAL_BOUNDS,
        ),
        hpc_job_mapping_dir=(
            Path(params["hpc_job_mapping_dir"]) if params.get("hpc_job_mapping_dir") else None
        ),
        kubelet_socket=Path(params.get("kubelet_socket") or DEFAULT_KUBELET_SOCKET),
        proc_root=Path(params.get("proc_root") or "/proc"),
        mig=params.get("mig") or None,
        sim_process_file=(
            Path(params["sim_process_file"]) if params.get("sim_process_file") else None
        ),
        **extra,
    )
    check_attribution(config)
    return config


def check_attribution(config: AgentConfig) -> None:
    """Attribution options that cannot work together; ConfigError, one line."""
    if config.attribution and "nvml" not in config.sources:
        raise ConfigError("--attribution needs the nvml source (it attributes NVML's GPUs)")
    if config.hpc_job_mapping_dir is not None and "slurm" not in config.attribution:
        raise ConfigError("--hpc-job-mapping-dir is read by --attribution slurm: enable it")
