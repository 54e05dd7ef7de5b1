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

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from nvwatch.agent.cli.scenario_options import (
    SCENARIO_HELP,
    OnsetOption,
    ScenarioOption,
    parse_onset,
    with_onset,
)
from nvwatch.agent.cli.sources_option import SourcesOption
from nvwatch.agent.config import (
    ATTRIBUTION_INTERVAL_BOUNDS,
    BMC_CACHE_BOUNDS,
    INTERVAL_BOUNDS,
    LOG_FORMATS,
    SCENARIO_SYNTAX,
    SCHEDULER_INTERVAL_BOUNDS,
    SCHEDULER_MAX_ACCOUNTS_RANGE,
    SCHEDULER_MAX_OUTPUT_MIB_RANGE,
    SCHEDULER_MAX_USERS_RANGE,
    SCHEDULER_TIMEOUT_BOUNDS,
    AgentConfig,
    ConfigError,
    format_listen,
    load_config_file,
    parse_attribution,
    parse_listen,
    parse_scenario,
    parse_sources,
    split_ipv6_only,
    split_scenarios,
)
from nvwatch.agent.sources.infiniband_parse import HW_COUNTER_CHOICES
from nvwatch.agent.sources.nvml.kmsg import DEFAULT_PATH as DEFAULT_KMSG_PATH
from nvwatch.agent.sources.nvml.samples import NVLINK_DETAIL_CHOICES
from nvwatch.common.durations import (
    DURATION_FORMAT,
    parse_duration,
    prometheus_duration,
)

F = TypeVar("F", bound=Callable[..., Any])

# Every option's default is AgentConfig's: the decorators below show it as the flag's
# text (`_flag_text`), and build_config leaves AgentConfig to fill in what is not given.
_DEFAULTS = AgentConfig()
# options of `serve` beyond the ones below; a config file may name them for any command
_SERVE_ONLY = frozenset({"listen", "web_config", "sim_process_file", "bmc_config", "bmc_cache"})


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


def _flag_text(value: object) -> str:
    """An AgentConfig default as a flag takes it: 5.0 -> '5s', ('a', 'b') -> 'a,b'."""
    if isinstance(value, float):
        return prometheus_duration(value)
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "none"
    return str(value)


def _env(name: str) -> str:
    return "NVWATCH_" + name.upper().replace("-", "_")


def option(*decls: str, **attrs: Any) -> Callable[[F], F]:
    """click.option with the `NVWATCH_<FLAG>` environment variable the design promises."""
    long_name = next(d for d in decls if d.startswith("--"))[2:]
    attrs.setdefault("envvar", _env(long_name))
    attrs.setdefault("show_envvar", True)
    return click.option(*decls, **attrs)


def scenario_option(func: F) -> F:
    """--scenario in the one syntax of every command (nvwatch.agent.config.SCENARIO_SYNTAX)."""
    return option(
        "--scenario",
        cls=ScenarioOption,
        multiple=True,
        metavar=SCENARIO_SYNTAX,
        help=SCENARIO_HELP,
    )(func)


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
        default=_flag_text(_DEFAULTS.interval),
        show_default=True,
        metavar="DURATION",
        help=f"Poll interval, {INTERVAL_BOUNDS}; {DURATION_FORMAT}.",
    ),
    "sources": option("--sources", cls=SourcesOption, show_default=True),
    "sysfs-root": option(
        "--sysfs-root",
        default=_flag_text(_DEFAULTS.sysfs_root),
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
        cls=OnsetOption,
        metavar="DURATION",
        help="With --simulate: when faults without from= begin, in simulated time since "
        "start (0: at once).",
    ),
    "seed": option(
        "--seed", default=_DEFAULTS.seed, show_default=True, type=int, help="Simulation seed."
    ),
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
        default=_DEFAULTS.nvlink_detail,
        show_default=True,
        help="NVLink series per link, or aggregated per GPU (fewer series).",
    ),
    "ib-hw-counters": option(
        "--ib-hw-counters",
        type=click.Choice(HW_COUNTER_CHOICES),
        default=_DEFAULTS.ib_hw_counters,
        show_default=True,
        help="mlx5 hw_counters to export: the loss and congestion ones (out_of_sequence, "
        "local_ack_timeout_err; CNP/ECN on RoCE), or all of them.",
    ),
    "kmsg-path": option(
        "--kmsg-path",
        type=click.Path(dir_okay=False),
        show_default=f"{DEFAULT_KMSG_PATH}; with --simulate, the simulated node's log",
        help="Kernel log to count XIDs from since boot (a file in /dev/kmsg's record "
        "format or dmesg text works too); unreadable: NVML events since start only.",
    ),
    "attribution": option(
        "--attribution",
        default=_flag_text(_DEFAULTS.attribution),
        show_default=True,
        metavar="MODES",
        help="Who uses each GPU: comma-separated slurm, kubernetes, or none "
        "(nvwatch_gpu_allocation_info, and job/pod labels on process series).",
    ),
    "attribution-interval": option(
        "--attribution-interval",
        default=_flag_text(_DEFAULTS.attribution_interval),
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
        default=_flag_text(_DEFAULTS.kubelet_socket),
        show_default=True,
        type=click.Path(dir_okay=False),
        help="Kubernetes: the kubelet pod-resources gRPC socket.",
    ),
    "proc-root": option(
        "--proc-root",
        default=_flag_text(_DEFAULTS.proc_root),
        show_default=True,
        type=click.Path(file_okay=False),
        help="Root of procfs, for the cgroup and environment of GPU processes.",
    ),
    "scheduler-interval": option(
        "--scheduler-interval",
        default=_flag_text(_DEFAULTS.scheduler_interval),
        show_default=True,
        metavar="DURATION",
        help=f"How often the scheduler source reads Slurm, {SCHEDULER_INTERVAL_BOUNDS}; "
        "four controller RPCs each time.",
    ),
    "scheduler-timeout": option(
        "--scheduler-timeout",
        default=_flag_text(_DEFAULTS.scheduler_timeout),
        show_default=True,
        metavar="DURATION",
        help=f"Deadline of each Slurm command (squeue, sinfo, sshare), "
        f"{SCHEDULER_TIMEOUT_BOUNDS}; past it the command is killed and the source is down.",
    ),
    "scheduler-max-accounts": option(
        "--scheduler-max-accounts",
        default=_DEFAULTS.scheduler_max_accounts,
        show_default=True,
        type=click.IntRange(*SCHEDULER_MAX_ACCOUNTS_RANGE),
        help='Accounts with series of their own (first seen first); the rest are "other".',
    ),
    "scheduler-max-users": option(
        "--scheduler-max-users",
        default=_DEFAULTS.scheduler_max_users,
        show_default=True,
        type=click.IntRange(*SCHEDULER_MAX_USERS_RANGE),
        help="Users with pending-GPU series of their own (0: no per-user series).",
    ),
    "scheduler-max-output-mib": option(
        "--scheduler-max-output-mib",
        default=_DEFAULTS.scheduler_max_output_mib,
        show_default=True,
        type=click.IntRange(*SCHEDULER_MAX_OUTPUT_MIB_RANGE),
        help="Most a Slurm command may print, in MiB (squeue --json: ~3.2 KB a job); past "
        "it the command is killed and the source is down.",
    ),
    "bmc-allow": option(
        "--bmc-allow",
        metavar="LIST",
        help="serve with --bmc-config: the only targets /probe may send IPMI to, "
        "comma-separated IP addresses, networks (10.0.0.0/16, fd00::/64), host names "
        "(as written, never resolved) and file_sd JSON files of `nvwatch inventory` "
        "(targets/bmc-*.json, re-read when they change); any other target is 403.",
    ),
    "log-format": option(
        "--log-format",
        type=click.Choice(LOG_FORMATS),
        default=_DEFAULTS.log_format,
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


def _listen(text: str) -> dict[str, Any]:
    ipv6_only, listen = split_ipv6_only(text)
    host, port = parse_listen(listen)
    return {"listen_host": host, "listen_port": port, "listen_ipv6_only": ipv6_only}


def _path(field: str) -> Callable[[Any], dict[str, Any]]:
    return lambda value: {field: Path(value)}


# option name -> its AgentConfig field(s) from the value given
_FIELDS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "listen": _listen,
    "interval": lambda v: {"interval": parse_duration(v, "interval", INTERVAL_BOUNDS)},
    "sources": lambda v: {"sources": parse_sources(v)},
    "sysfs_root": _path("sysfs_root"),
    "simulate": lambda v: {"simulate": v},
    "seed": lambda v: {"seed": int(v)},
    "web_config": _path("web_config"),
    "log_format": lambda v: {"log_format": v},
    "nvlink_detail": lambda v: {"nvlink_detail": v},
    "ib_hw_counters": lambda v: {"ib_hw_counters": v},
    "kmsg_path": _path("kmsg_path"),
    "attribution": lambda v: {"attribution": parse_attribution(v)},
    "attribution_interval": lambda v: {
        "attribution_interval": parse_duration(
            v, "attribution interval", ATTRIBUTION_INTERVAL_BOUNDS
        )
    },
    "hpc_job_mapping_dir": _path("hpc_job_mapping_dir"),
    "kubelet_socket": _path("kubelet_socket"),
    "proc_root": _path("proc_root"),
    "mig": lambda v: {"mig": v},
    "sim_process_file": _path("sim_process_file"),
    "bmc_config": _path("bmc_config"),
    "bmc_cache": lambda v: {"bmc_cache": parse_duration(v, "BMC cache time", BMC_CACHE_BOUNDS)},
    "bmc_allow": lambda v: {"bmc_allow": _bmc_allow(str(v))},
    "scheduler_interval": lambda v: {
        "scheduler_interval": parse_duration(v, "scheduler interval", SCHEDULER_INTERVAL_BOUNDS)
    },
    "scheduler_timeout": lambda v: {
        "scheduler_timeout": parse_duration(v, "scheduler timeout", SCHEDULER_TIMEOUT_BOUNDS)
    },
    "scheduler_max_accounts": lambda v: {"scheduler_max_accounts": int(v)},
    "scheduler_max_users": lambda v: {"scheduler_max_users": int(v)},
    "scheduler_max_output_mib": lambda v: {"scheduler_max_output_mib": int(v)},
}


def _bmc_allow(text: str) -> Any:
    """--bmc-allow's entries; its files are read once here, so a bad one is bad input
    said at start (imported here: the other commands never load the probe)."""
    from nvwatch.agent.server.probe_allow import ProbeAllowlist, parse_allow

    entries = parse_allow(text)
    ProbeAllowlist(entries)
    return entries


# shown in serve's --help as AgentConfig's listen address
LISTEN_DEFAULT = format_listen(
    _DEFAULTS.listen_host, _DEFAULTS.listen_port, _DEFAULTS.listen_ipv6_only
)


def build_config(params: dict[str, Any], **extra: Any) -> AgentConfig:
    """Turn raw option values into the one config object; ConfigError on bad values.

    An option the command does not take, or that is given empty, keeps AgentConfig's
    default: this function has no defaults of its own."""
    # from the environment or a config file one string: keep from=/until= with their scenario
    scenario_values = split_scenarios(params.get("scenario") or ())
    onset = params.get("onset")
    scenarios = with_onset(
        [parse_scenario(s) for s in scenario_values],
        None if onset is None else parse_onset(str(onset)),
    )
    values: dict[str, Any] = {"scenarios": scenarios} if scenarios else {}
    for name, value in params.items():
        if name in _FIELDS and value is not None and value != "":
            values.update(_FIELDS[name](value))
    config = AgentConfig(**values, **extra)
    check_attribution(config)
    return config


def check_attribution(config: AgentConfig) -> None:
    """Attribution options that cannot work together; ConfigError, one line."""
    if config.attribution and "nvml" not in config.sources:
        raise ConfigError("--attribution needs the nvml source (it attributes NVML's GPUs)")
    if config.hpc_job_mapping_dir is not None and "slurm" not in config.attribution:
        raise ConfigError("--hpc-job-mapping-dir is read by --attribution slurm: enable it")
