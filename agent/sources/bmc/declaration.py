"""The bmc source, declared (agent/sources/declaration.py): read at scrape time by
/probe (agent/bmc_probe.py), one BMC per request, so the poller never builds it; the
declaration gives its catalogue scopes a source and names its sample and renderer."""

from __future__ import annotations

from nvwatch.agent.catalogue import Scope
from nvwatch.agent.sources.declaration import SourceDeclaration

DECLARATION = SourceDeclaration(
    name="bmc",
    scopes=(Scope.BMC, Scope.BMC_SENSOR),
    sample="nvwatch.agent.sources.bmc.interpret:BmcProbe",
    renderer="nvwatch.agent.exposition.bmc:families",
    selectable=False,
)
