"""The infiniband source, declared (agent/sources/declaration.py); its code is
agent/sources/infiniband.py, imported by the factory below only when a config polls it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from nvwatch.agent.catalogue import Scope
from nvwatch.agent.sources.declaration import BuildContext, SourceDeclaration

if TYPE_CHECKING:
    from nvwatch.agent.config import AgentConfig
    from nvwatch.agent.sources.infiniband import InfinibandSource


def build(config: AgentConfig, context: BuildContext) -> InfinibandSource:
    from nvwatch.agent.sources.infiniband import InfinibandSource
    from nvwatch.agent.sources.infiniband_parse import hw_counter_selection

    return InfinibandSource(
        config.sysfs_root,
        gpu_bus_ids=_gpu_bus_ids(context),
        hw_counters=hw_counter_selection(config.ib_hw_counters),
    )


def _gpu_bus_ids(context: BuildContext) -> Callable[[], tuple[str, ...]] | None:
    """GPU bus ids come from NVML at run time, so HCA affinity follows the real GPUs;
    None where the nvml source is not polled (it is built first when it is)."""
    nvml = context.built.get("nvml")
    if nvml is None:
        return None
    from nvwatch.agent.sources.nvml.source import NvmlSource

    return nvml.gpu_bus_ids if isinstance(nvml, NvmlSource) else None


DECLARATION = SourceDeclaration(
    name="infiniband",
    scopes=(Scope.IB_DEVICE, Scope.IB_PORT),
    factory=build,
    sample="nvwatch.agent.sources.infiniband:InfinibandSample",
    renderer="nvwatch.agent.exposition.infiniband:render",
    default=True,
)
