"""HostSample -> nvwatch_host_* families, by looping over the catalogue."""

from __future__ import annotations

from agent.catalogue import Scope, of_scope
from agent.exposition.families import FamilySet
from agent.exposition.series import emit_all, plans
from agent.sources.host import HostSample

_PLANS = plans(of_scope(Scope.HOST))


def render(sample: HostSample, out: FamilySet) -> None:
    emit_all(_PLANS, [((), sample)], out)
