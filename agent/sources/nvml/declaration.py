"""The nvml source, declared (agent/sources/declaration.py): built by its factory below,
which imports pynvml's side of it only when a config polls it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from nvwatch.agent.catalogue import Scope
from nvwatch.agent.sources.declaration import BuildContext, SourceDeclaration

if TYPE_CHECKING:
    from nvwatch.agent.config import AgentConfig
    from nvwatch.agent.sources.nvml.source import NvmlSource


def build(config: AgentConfig, context: BuildContext) -> NvmlSource:
    """`context.clock` replaces the source's monotonic clock (its retry back-off, static
    refresh and GPM intervals): a simulated fleet passes its simulated time, so a
    repaired driver is retried on the fleet's time scale."""
    from nvwatch.agent.sources.attribution.declaration import refresher
    from nvwatch.agent.sources.nvml.source import NvmlSource

    # the sysfs root lets NVML tell a node without GPUs from a broken driver
    return NvmlSource(
        nvlink_detail=config.nvlink_detail,
        sysfs_root=config.sysfs_root,
        kmsg_path=kmsg_path(config),
        clock=time.monotonic if context.clock is None else context.clock,
        attribution=refresher(config, context) if config.attribution else None,
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


DECLARATION = SourceDeclaration(
    name="nvml",
    scopes=(Scope.GPU, Scope.PROCESS, Scope.NVLINK, Scope.MIG),
    factory=build,
    sample="nvwatch.agent.sources.nvml.samples:NvmlSample",
    renderer="nvwatch.agent.exposition.gpu:render",
    default=True,
)
