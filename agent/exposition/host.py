"""HostSample -> nvwatch_host_* families, by looping over the catalogue."""

from __future__ import annotations

from nvwatch.agent.catalogue import Scope, of_scope
from nvwatch.agent.exposition.families import FamilySet
from nvwatch.agent.exposition.series import compiled_families, emit_all
from nvwatch.agent.sources.host import HostSample

_PLANS = compiled_families(of_scope(Scope.HOST))


def render(sample: HostSample, out: FamilySet) -> None:
    emit_all(_PLANS, [((), sample)], out)
