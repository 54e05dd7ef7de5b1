"""Build the configured sources: the only place that knows every source's constructor."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from nvwatch.agent.config import AgentConfig
from nvwatch.agent.sources import Source

if TYPE_CHECKING:
    from nvwatch.agent.sources.attribution.refresher import AttributionRefresher
    from nvwatch.agent.sources.scheduler.source import SchedulerSource


def build_sources(config: AgentConfig, clock: Callable[[], float] | None = None) -> list[Source]:
    """The sources `config` names. `clock` replaces the NVML source's monotonic clock (its
    retry back-off, static refresh and GPM intervals): a simulated fleet passes its
    simulated time, so a repaired driver is retried on the fleet's time scale."""
    sources: list[Source] = []
    nvml = None
    refresher = attribution_refresher(config) if config.attribution else None
    if "nvml" in config.sources:
        from nvwatch.agent.sources.nvml.source import NvmlSource

        # the sysfs root lets NVML tell a node without GPUs from a broken driver
        nvml = NvmlSource(
            nvlink_detail=config.nvlink_detail,
            sysfs_root=config.sysfs_root,
            kmsg_path=kmsg_path(config),
            clock=time.monotonic if clock is None else clock,
            attribution=refresher,
        )
        sources.append(nvml)
    if "infiniband" in config.sources:
        from nvwatch.agent.sources.infiniband import InfinibandSource
        from nvwatch.agent.sources.infiniband_parse import hw_counter_selection

        # GPU bus ids come from NVML at run time, so HCA affinity follows the real GPUs
        bus_ids = nvml.gpu_bus_ids if nvml is not None else None
        sources.append(
            InfinibandSource(
                config.sysfs_root,
                gpu_bus_ids=bus_ids,
                hw_counters=hw_counter_selection(config.ib_hw_counters),
            )
        )
    if "host" in config.sources:
        from nvwatch.agent.sources.host import HostSource

        sources.append(HostSource())
    if "scheduler" in config.sources:
        sources.append(scheduler_source(config))
    ordered = _in_config_order(sources, config.sources)
    if refresher is not None:
        from nvwatch.agent.sources.attribution.source import AttributionSource

        # stale: two refreshes missed; the owners it holds may have left the GPU
        stale = 2 * config.attribution_interval + config.attribution_timeout
        ordered.append(AttributionSource(refresher, stale_after=stale))
    return ordered


def attribution_refresher(config: AgentConfig) -> AttributionRefresher:
    """The refresher with a resolver per --attribution mode."""
    from nvwatch.agent.sources.attribution.procfs import ProcFS
    from nvwatch.agent.sources.attribution.refresher import AttributionRefresher, Resolver

    proc = ProcFS(config.proc_root)
    resolvers: list[Resolver] = []
    if "slurm" in config.attribution:
        from nvwatch.agent.sources.attribution.slurm import SlurmResolver

        resolvers.append(SlurmResolver(proc, config.hpc_job_mapping_dir))
    if "kubernetes" in config.attribution:
        from nvwatch.agent.sources.attribution.kubernetes import KubernetesResolver

        resolvers.append(
            KubernetesResolver(proc, config.kubelet_socket, timeout=config.attribution_timeout)
        )
    return AttributionRefresher(resolvers, interval=config.attribution_interval)


def scheduler_source(config: AgentConfig) -> SchedulerSource:
    """The cluster's Slurm, read on its own thread every --scheduler-interval."""
    from nvwatch.agent.sources.scheduler.fairshare import read_fairshare
    from nvwatch.agent.sources.scheduler.slurm_commands import MIB, SlurmClient
    from nvwatch.agent.sources.scheduler.source import SchedulerSource

    # --simulate simulates a node, not Slurm: the real Slurm is read only where SLURM_CONF
    # names it, never the host's own cluster found in the standard locations
    client = (
        SlurmClient(
            config.scheduler_max_output_mib * MIB,
            conf_paths=(),
            conf_note="with --simulate only SLURM_CONF is read",
        )
        if config.simulate
        else SlurmClient(config.scheduler_max_output_mib * MIB)
    )
    return SchedulerSource(
        interval=config.scheduler_interval,
        timeout=config.scheduler_timeout,
        max_accounts=config.scheduler_max_accounts,
        max_users=config.scheduler_max_users,
        fairshare=read_fairshare,
        client=client,
        # the first poll waits for the first read, within the poller's deadline
        first_wait=0.9 * config.timeout,
    )


def kmsg_path(config: AgentConfig) -> Path | None:
    """The kernel log XIDs are counted from: --kmsg-path, else /dev/kmsg.

    A simulated node never reads the host's kernel log (its XIDs are in the node's own,
    which the runtime sets): without one, a simulated agent counts NVML events only.
    """
    if config.kmsg_path is not None:
        return config.kmsg_path
    if config.simulate:
        return None
    from nvwatch.agent.sources.nvml.kmsg import DEFAULT_PATH

    return DEFAULT_PATH


def _in_config_order(sources: list[Source], order: Sequence[str]) -> list[Source]:
    return sorted(sources, key=lambda s: order.index(s.name))
