"""SchedulerSample -> nvwatch_scheduler_* families, by looping over the catalogue."""

from __future__ import annotations

from nvwatch.agent.catalogue import Scope, of_scope
from nvwatch.agent.exposition.families import FamilySet
from nvwatch.agent.exposition.series import compiled_families, emit_all
from nvwatch.agent.sources.scheduler.model import SchedulerSample

_PARTITION_PLANS = compiled_families(of_scope(Scope.SCHEDULER_PARTITION))
_DEMAND_PLANS = compiled_families(of_scope(Scope.SCHEDULER_DEMAND))
_USER_PLANS = compiled_families(of_scope(Scope.SCHEDULER_USER))
_ACCOUNT_PLANS = compiled_families(of_scope(Scope.SCHEDULER_ACCOUNT))
_ACCOUNT_WAIT_PLANS = compiled_families(of_scope(Scope.SCHEDULER_ACCOUNT_WAIT))


def render(sample: SchedulerSample, out: FamilySet) -> None:
    emit_all(_PARTITION_PLANS, [((p.partition,), p) for p in sample.partitions], out)
    emit_all(_DEMAND_PLANS, [((d.partition, d.account), d) for d in sample.demand], out)
    emit_all(_USER_PLANS, [((u.partition, u.user), u) for u in sample.users], out)
    emit_all(_ACCOUNT_WAIT_PLANS, [((w.account,), w) for w in sample.account_waits], out)
    if sample.fairshare is not None:
        emit_all(_ACCOUNT_PLANS, [((s.account,), s) for s in sample.fairshare], out)
