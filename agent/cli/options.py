"""Options shared by the agent commands, each also read from `NVWATCH_<FLAG>` and --config.

Precedence, highest first: command-line flag, environment variable, config file, default.
Click gives flag > environment > `default_map` > default, so the config file is loaded by
an eager `--config` callback into the context's `default_map` before the other options
are resolved.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from agent.config import (
    ATTRIBUTION_INTERVAL_BOUNDS,
    DEFAULT_KUBELET_SOCKET,
    INTERVAL_BOUNDS,
    LOG_FORMATS,
    AgentConfig,
    ConfigError,
    load_config_file,
    parse_attribution,
    parse_listen,
    parse_scenario,
    parse_sources,
    split_scenarios,
)
from agent.durations import parse_duration
from agent.sources.infiniband_parse import HW_COUNTER_CHOICES
from agent.sources.nvml.samples import NVLINK_DETAIL_CHOICES

F = TypeVar("F", bound=Callable[..., Any])


def _load_config(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    allowed = {p.name for p in ctx.command.params if p.name and p.name != "config"}
    try:
        loaded = load_config_file(Path(value), allowed)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=_param) from exc
    ctx.default_map = {**(ctx.default_map or {}), **loaded}
    return value


def _env(name: str) -> str:
    return "NVWATCH_" + name.upper().replace("-", "_")


def option(*decls: str, **attrs: Any) -> Callable[[F], F]:
    """click.option with the `NVWATCH_<FLAG>` environment variable the design promises."""
    long_name = next(d for d in decls if d.startswith("--"))[2:]
    attrs.setdefault("envvar", _env(long_name))
    attrs.setdefault("show_envvar", True)
    return click.option(*decls, **attrs)


def source_options(func: F) -> F:
    """The options every command that polls sources takes."""
    decorators = [
        option(
            "--config",
            type=click.Path(dir_okay=False),
            is_eager=True,
            expose_value=False,
            callback=_load_config,
            help="YAML file of option: value (lower precedence than flags and environment).",
        ),
        option(
            "--interval",
            default="5s",
            show_default=True,
            help=f"Poll interval, {INTERVAL_BOUNDS}.",
        ),
        option(
            "--sources",
            default="nvml,infiniband,host",
            show_default=True,
            help="Comma-separated sources to poll.",
        ),
        option(
            "--sysfs-root",
            default="/sys",
            show_default=True,
            type=click.Path(file_okay=False),
            help="Root of sysfs (for InfiniBand and PCIe affinity).",
        ),
        option("--simulate", metavar="PROFILE", help="Run on a simulated node (see `profiles`)."),
        option(
            "--scenario",
            multiple=True,
            metavar="NAME[@TARGET]",
            help="Simulation scenario, optionally for one GPU index or IB device; repeatable.",
        ),
        option("--seed", default=0, show_default=True, type=int, help="Simulation seed."),
        option(
            "--mig",
            metavar="LAYOUT",
            help="With --simulate: partition GPUs with MIG, GPUS:PROFILE,...[;GPUS:...], "
            "e.g. all:3g.40gb,3g.40gb or 0-3:7g.80gb;4-7:1g.10gb*7 (none: MIG on, no "
            "instances; pending: on after a reset).",
        ),
        option(
            "--nvlink-detail",
            type=click.Choice(NVLINK_DETAIL_CHOICES),
            default="link",
            show_default=True,
            help="NVLink series per link, or aggregated per GPU (fewer series).",
        ),
        option(
            "--ib-hw-counters",
            type=click.Choice(HW_COUNTER_CHOICES),
            default="default",
            show_default=True,
            help="mlx5 hw_counters to export: the loss and congestion ones (out_of_sequence, "
            "local_ack_timeout_err; CNP/ECN on RoCE), or all of them.",
        ),
        option(
            "--kmsg-path",
            type=click.Path(dir_okay=False),
            show_default="/dev/kmsg; with --simulate, the simulated node's log",
            help="Kernel log to count XIDs from since boot (a file in /dev/kmsg's record "
            "format or dmesg text works too); unreadable: NVML events since start only.",
        ),
        option(
            "--attribution",
            default="none",
            show_default=True,
            metavar="MODES",
            help="Who uses each GPU: comma-separated slurm, kubernetes, or none "
            "(nvwatch_gpu_allocation_info, and job/pod labels on process series).",
        ),
        option(
            "--attribution-interval",
            default="10s",
            show_default=True,
            help=f"How often attribution re-reads its sources, {ATTRIBUTION_INTERVAL_BOUNDS}; "
            "a new GPU process triggers an early refresh.",
        ),
        option(
            "--hpc-job-mapping-dir",
            type=click.Path(file_okay=False),
            help="Slurm: directory of GPU-index files holding job ids, written by a prolog "
            "(dcgm-exporter's format and flag; see deploy/slurm/).",
        ),
        option(
            "--kubelet-socket",
            default=str(DEFAULT_KUBELET_SOCKET),
            show_default=True,
            type=click.Path(dir_okay=False),
            help="Kubernetes: the kubelet pod-resources gRPC socket.",
        ),
        option(
            "--proc-root",
            default="/proc",
            show_default=True,
            type=click.Path(file_okay=False),
            help="Root of procfs, for the cgroup and environment of GPU processes.",
        ),
        option(
            "--log-format",
            type=click.Choice(LOG_FORMATS),
            default="text",
            show_default=True,
            help="Log as text or JSON lines.",
        ),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def build_config(params: dict[str, Any], **extra: Any) -> AgentConfig:
    """Turn raw option values into the one config object; ConfigError on bad values."""
    scenario_values = params.get("scenario") or ()
    # from the environment or a config file one string: keep from=/until= with their scenario
    scenario_values = split_scenarios(scenario_values)
    listen_host, listen_port = parse_listen(params.get("listen") or "0.0.0.0:9477")
    config = AgentConfig(
        listen_host=listen_host,
        listen_port=listen_port,
        interval=parse_duration(params["interval"], "interval", INTERVAL_BOUNDS),
        sources=parse_sources(params["sources"]),
        sysfs_root=Path(params["sysfs_root"]),
        simulate=params.get("simulate"),
        scenarios=tuple(parse_scenario(s) for s in scenario_values),
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
