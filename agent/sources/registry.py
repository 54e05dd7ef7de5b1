"""Build the configured sources, each by the factory its declaration names.

Which sources exist, and how each is built, is in their declarations
(agent/sources/declaration.py); this module only runs the factories in order.
"""

from __future__ import annotations

from collections.abc import Callable

from nvwatch.agent.config import AgentConfig
from nvwatch.agent.sources import Source
from nvwatch.agent.sources.declaration import BuildContext, declarations


def build_sources(config: AgentConfig, clock: Callable[[], float] | None = None) -> list[Source]:
    """The sources `config` polls: those --sources names, in its order, then those the
    config turns on otherwise (attribution), in declaration order.

    They are built in declaration order, so a factory finds the sources declared before
    it (infiniband asks nvml for the GPUs' bus ids). `clock` replaces the sources'
    monotonic clock (the NVML source's retry back-off, static refresh and GPM
    intervals): a simulated fleet passes its simulated time, so a repaired driver is
    retried on the fleet's time scale.
    """
    context = BuildContext(clock=clock)
    for declaration in declarations():
        if declaration.factory is None or not declaration.wanted(config):
            continue
        source = declaration.factory(config, context)
        # the snapshot keys a source's health and its renderer by this name
        if source.name != declaration.name:
            raise ValueError(f"source {declaration.name} built a source named {source.name}")
        context.built[declaration.name] = source
    chosen = [context.built[name] for name in config.sources if name in context.built]
    return chosen + [s for name, s in context.built.items() if name not in config.sources]
