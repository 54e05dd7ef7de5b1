"""The host source, declared (agent/sources/declaration.py); its code is
agent/sources/host.py, which imports psutil: the factory imports it when a config polls it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nvwatch.agent.catalogue import Scope
from nvwatch.agent.sources.declaration import BuildContext, SourceDeclaration

if TYPE_CHECKING:
    from nvwatch.agent.config import AgentConfig
    from nvwatch.agent.sources.host import HostSource


def build(config: AgentConfig, context: BuildContext) -> HostSource:
    from nvwatch.agent.sources.host import HostSource

    return HostSource()


DECLARATION = SourceDeclaration(
    name="host",
    scopes=(Scope.HOST,),
    factory=build,
    sample="nvwatch.agent.sources.host:HostSample",
    renderer="nvwatch.agent.exposition.host:render",
    default=True,
)
