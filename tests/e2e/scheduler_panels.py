"""Dashboard queries that wait for the scheduler source's series in the e2e fleet.

The queue & fairness dashboard reads the series of the agent that runs `--sources
scheduler` and the recording rules over them. The e2e fleet runs no Slurm queue, so
none of its agents exports them (the preview's fleet does, and checks every panel).
While a stack has no scheduler series at all, a query that reads nothing else is listed
as waiting (WAITING says why) instead of checked; once the fleet exports them, every such
query is checked like any other. A query that reads anything besides the scheduler's
series is always checked, and only the queue dashboard may wait (QUEUE_DASHBOARD): no
existing panel loses its check. tests/mixin/test_queue_dashboard.py runs the queue
dashboard's queries on a modelled cluster, tests/slurm/test_queue_alerts.py on a real
Slurm's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nvwatch.alerts.promql import metric_names
from nvwatch.alerts.recording_scheduler import scheduler_group
from nvwatch.mixin.config import MixinConfig

WAITING = "the e2e fleet runs no Slurm queue, so no `--sources scheduler` agent"
QUEUE_DASHBOARD = "nvwatch-queue.json"
_PREFIX = "nvwatch_scheduler_"


def _scheduler_records(cfg: MixinConfig) -> frozenset[str]:
    return frozenset(rule.record for rule in scheduler_group(cfg).rules)


def reads_scheduler_only(expr: str, cfg: MixinConfig) -> bool:
    """`expr` reads the scheduler's series (raw or recorded) and nothing else."""
    names = metric_names(expr)
    records = _scheduler_records(cfg)
    return bool(names) and all(n.startswith(_PREFIX) or n in records for n in names)


def scheduler_exported(query: Callable[[str], list[dict[str, Any]]], cfg: MixinConfig) -> bool:
    """The stack's Prometheus has scheduler series of the agents' job."""
    return bool(query(f"count(nvwatch_scheduler_gpus{cfg.sel()})"))


def waiting(
    queries: list[tuple[str, str, str]], cfg: MixinConfig, exported: bool
) -> set[tuple[str, str, str]]:
    """The (dashboard, panel, expr) of `queries` that wait for scheduler series: none once
    they are exported. Only the queue dashboard's may wait."""
    if exported:
        return set()
    found = {q for q in queries if reads_scheduler_only(q[2], cfg)}
    assert {name for name, _, _ in found} <= {QUEUE_DASHBOARD}, found
    return found
