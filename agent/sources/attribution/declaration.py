"""The attribution source, declared (agent/sources/declaration.py): on when --attribution
names a mode, not chosen by --sources, and polled after the sources --sources chose."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nvwatch.agent.catalogue import Scope
from nvwatch.agent.sources.declaration import BuildContext, SourceDeclaration

if TYPE_CHECKING:
    from nvwatch.agent.config import AgentConfig
    from nvwatch.agent.sources.attribution.refresher import AttributionRefresher
    from nvwatch.agent.sources.attribution.source import AttributionSource


def build(config: AgentConfig, context: BuildContext) -> AttributionSource:
    from nvwatch.agent.sources.attribution.source import AttributionSource

    # stale: two refreshes missed; the owners it holds may have left the GPU
    stale = 2 * config.attribution_interval + config.attribution_timeout
    return AttributionSource(refresher(config, context), stale_after=stale)


def refresher(config: AgentConfig, context: BuildContext) -> AttributionRefresher:
    """The one refresher of a build: the nvml source labels processes from its cache, and
    this source serves the same cache's allocations."""
    return context.shared("attribution-refresher", lambda: attribution_refresher(config))


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


def _enabled(config: AgentConfig) -> bool:
    return bool(config.attribution)


DECLARATION = SourceDeclaration(
    name="attribution",
    scopes=(Scope.ALLOCATION,),
    factory=build,
    sample="nvwatch.agent.sources.attribution.model:AttributionSample",
    renderer="nvwatch.agent.exposition.allocation:render",
    selectable=False,
    enabled_by=_enabled,
)
