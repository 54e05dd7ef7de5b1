"""AttributionSample -> nvwatch_gpu_allocation_info, one series per owner of a GPU."""

from __future__ import annotations

from nvwatch.agent.catalogue import Scope, of_scope
from nvwatch.agent.exposition.families import FamilySet
from nvwatch.agent.exposition.series import compiled_families, emit_all
from nvwatch.agent.sources.attribution.model import AttributionSample

_PLANS = compiled_families(of_scope(Scope.ALLOCATION))


def render(sample: AttributionSample, out: FamilySet) -> None:
    objects = [((str(a.gpu), a.uuid), a) for a in sample.allocations]
    emit_all(_PLANS, objects, out)
