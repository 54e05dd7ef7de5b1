"""AttributionSample -> nvwatch_gpu_allocation_info, one series per owner of a GPU."""

from __future__ import annotations

from nvwatch.agent.catalogue import Scope, of_scope
from nvwatch.agent.exposition.families import FamilySet
from nvwatch.agent.exposition.series import emit_all, plans
from nvwatch.agent.sources.attribution.model import AttributionSample

_PLANS = plans(of_scope(Scope.ALLOCATION))


def render(sample: AttributionSample, out: FamilySet) -> None:
    objects = [((str(a.gpu), a.uuid), a) for a in sample.allocations]
    emit_all(_PLANS, objects, out)
