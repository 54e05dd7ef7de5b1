"""What a history writes for its Slurm controller: the `nvwatch` job's scrape of the one
agent that runs `--sources scheduler` (job `nvwatch`, instance CONTROLLER, the cluster's
label; no rack or node class: it is no GPU node).

The queue's state at each step (queue.state.QueueState) becomes the scheduler source's
own sample (agent/sources/scheduler/model.py) and goes through the exposition's readers
of the catalogue's scheduler families, as a poll's would, into plain rows (no text
rendered and parsed for every step of a month): every family, label and zero is the
source's. The wait histograms' points (per partition, per account) come apart from the
rows, for the writer to keep each point's buckets, count and sum together.
tests/history/test_scheduler_rows.py runs the real source on the same queue's simulated
squeue, sinfo and sshare and finds the same series.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from nvwatch.agent.catalogue import MetricSpec, MetricType, Scope, of_scope
from nvwatch.agent.exposition.client import HISTOGRAM_COUNT, HISTOGRAM_SUM
from nvwatch.agent.exposition.families import FamilySet
from nvwatch.agent.exposition.series import compiled_families, emit_all
from nvwatch.agent.sources.scheduler.classes import NODE_CLASSES, PENDING_CLASSES
from nvwatch.agent.sources.scheduler.model import (
    GPU_STATES,
    AccountShare,
    AccountWait,
    DemandSample,
    PartitionSample,
    SchedulerSample,
    WaitCounts,
)
from nvwatch.sim.queue.state import QueueState, WaitHistogram

CONTROLLER = "slurmctl"  # the controller host, whose agent runs the scheduler source
JOB = "nvwatch"
UP = "up"
SOURCE_UP = "nvwatch_agent_source_up"
# the source's families a history holds (per-user series are off by default)
_PLANS = compiled_families(
    spec
    for scope in (
        Scope.SCHEDULER_PARTITION,
        Scope.SCHEDULER_DEMAND,
        Scope.SCHEDULER_ACCOUNT,
        Scope.SCHEDULER_ACCOUNT_WAIT,
    )
    for spec in of_scope(scope)
)
SCHEDULER_FAMILIES: tuple[str, ...] = tuple(spec.name for spec, _ in _PLANS)
# the histogram families: the partitions' waits (the contract's), then the accounts'
WAIT_FAMILIES: tuple[str, ...] = tuple(
    spec.name for spec, _ in _PLANS if spec.type is MetricType.HISTOGRAM
)
WAIT, ACCOUNT_WAIT = WAIT_FAMILIES
# what the controller's agent adds to a history, beside `up`
CONTROLLER_FAMILIES = (SOURCE_UP, *SCHEDULER_FAMILIES)

Row = tuple[str, str, float]  # family (sample name), rendered labels, value


@dataclass(frozen=True)
class HistogramPoint:
    """One partition's or account's wait histogram at one step: its family, its labels
    rendered without the closing brace (`le` follows), the cumulative count per finite
    bound, the count and the sum."""

    family: str
    labels: str
    bounds: tuple[float, ...]
    buckets: tuple[int, ...]
    count: int
    total: float


def scheduler_sample(state: QueueState) -> SchedulerSample:
    """The scheduler source's sample of the queue at `state.time`."""
    partitions = tuple(
        PartitionSample(
            partition=name,
            gpus={s: state.gpus[name, s] for s in GPU_STATES},
            nodes_unavailable={c: state.nodes_unavailable.get((name, c), 0) for c in NODE_CLASSES},
            oldest_pending_seconds=state.oldest_pending_s[name],
            wait=_counts(waits),
        )
        for name, waits in sorted(state.waits.items())
    )
    account_waits = tuple(
        AccountWait(account, _counts(waits))
        for account, waits in sorted(state.account_waits.items())
    )
    demand = tuple(
        DemandSample(
            partition=partition,
            account=account,
            pending_gpus={c: state.pending_gpus[partition, account, c] for c in PENDING_CLASSES},
            allocated_gpu_seconds=seconds,
        )
        for (partition, account), seconds in sorted(state.allocated_gpu_seconds.items())
    )
    shares = None
    if state.fairshare is not None:
        shares = tuple(
            AccountShare(s.account, s.shares_norm, s.usage_effective, s.factor)
            for s in state.fairshare.values()
        )
    return SchedulerSample(partitions, demand, (), account_waits, shares, state.time)


def _counts(waits: WaitHistogram) -> WaitCounts:
    return WaitCounts((*waits.bounds, math.inf), (*waits.counts, waits.count), waits.total)


@dataclass
class _Sink:
    """What the exposition's readers write into a FamilySet, kept as rows."""

    rows: list[tuple[str, tuple[tuple[str, str], ...], float]] = field(default_factory=list)
    # (family, its own labels) -> the histogram's samples by `le`, "_count" and "_sum"
    histograms: dict[tuple[str, tuple[tuple[str, str], ...]], dict[str, float]] = field(
        default_factory=dict
    )

    def add_sample(self, spec: MetricSpec, label_values: Sequence[str], value: object) -> None:
        if value is None:
            return
        number = float(cast(float, value))
        if spec.type is MetricType.HISTOGRAM:
            *own, part = label_values
            key = tuple(zip(spec.labels, own, strict=True))
            self.histograms.setdefault((spec.name, key), {})[part] = number
        else:
            self.rows.append(
                (spec.name, tuple(zip(spec.labels, label_values, strict=True)), number)
            )

    def add_series(
        self, spec: MetricSpec, label_values: Sequence[Sequence[str]], values: Sequence[object]
    ) -> None:
        for labels, value in zip(label_values, values, strict=True):
            self.add_sample(spec, labels, value)

    def declare(self, spec: MetricSpec) -> None:
        pass  # no HELP without samples here: the history declares every family itself


def render(sample: SchedulerSample) -> _Sink:
    """The sample through the catalogue's readers, family by family in catalogue order."""
    sink = _Sink()
    out = cast(FamilySet, sink)  # the readers call add_sample, add_series and declare
    objects: dict[str, list[tuple[tuple[str, ...], object]]] = {
        Scope.SCHEDULER_PARTITION: [((p.partition,), p) for p in sample.partitions],
        Scope.SCHEDULER_DEMAND: [((d.partition, d.account), d) for d in sample.demand],
        Scope.SCHEDULER_ACCOUNT: [((s.account,), s) for s in sample.fairshare or ()],
        Scope.SCHEDULER_ACCOUNT_WAIT: [((w.account,), w) for w in sample.account_waits],
    }
    for plan in _PLANS:
        emit_all((plan,), objects[plan[0].scope], out)
    return sink


class SchedulerSeries:
    """The controller agent's scrape; label sets rendered once and cached."""

    def __init__(self, cluster: str) -> None:
        self.target = {"job": JOB, "instance": CONTROLLER, "cluster": cluster}
        self._cache: dict[tuple[tuple[str, str], ...], str] = {}

    def labels(self, own: tuple[tuple[str, str], ...] = ()) -> str:
        labels = self._cache.get(own)
        if labels is None:
            pairs = {**self.target, **dict(own)}
            rendered = ",".join(f'{k}="{_escaped(v)}"' for k, v in pairs.items())
            labels = self._cache[own] = "{" + rendered + "}"
        return labels

    def scrape(self, state: QueueState) -> tuple[list[Row], list[HistogramPoint]]:
        """`up`, the source's up and its series at `state.time`; the wait histograms."""
        sink = render(scheduler_sample(state))
        rows: list[Row] = [(UP, self.labels(), 1.0)]
        rows.append((SOURCE_UP, self.labels((("source", "scheduler"),)), 1.0))
        rows += [(name, self.labels(own), value) for name, own, value in sink.rows]
        points = []
        for (family, own), parts in sink.histograms.items():
            bounds = sorted(float(le) for le in parts if le not in _NOT_BOUNDS)
            points.append(
                HistogramPoint(
                    family=family,
                    labels=self.labels(own)[:-1],
                    bounds=tuple(b for b in bounds if math.isfinite(b)),
                    buckets=tuple(int(parts[_le(b)]) for b in bounds if math.isfinite(b)),
                    count=int(parts[HISTOGRAM_COUNT]),
                    total=parts[HISTOGRAM_SUM],
                )
            )
        return rows, points


_NOT_BOUNDS = (HISTOGRAM_COUNT, HISTOGRAM_SUM)


def _le(bound: float) -> str:
    return repr(float(bound))


def _escaped(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
