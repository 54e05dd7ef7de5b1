"""What the history writes for the Slurm controller is what the real scheduler source
exports for the same queue.

The history reads the queue model's state directly (a refresh through subprocesses and
JSON costs milliseconds, and a month is thousands of steps). Here the history's queue is
brought up step by step, its simulated squeue, sinfo and sshare (sim/fleet/slurm.py,
executables on a PATH of their own) rewritten at each step, and the real source (its
runner, parser, tally and fair-share reader, the agent's poller and exposition) refreshed
after each: every gauge the history writes must be in the source's exposition with the
same value; counters and the wait histogram, which the source starts at its first
refresh and the history with the queue, must grow by the same amounts between steps.
Steps are MinJobAge apart, so no job that ends between two refreshes goes unseen.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nvwatch.agent.exposition.render import build_exposition, prepare
from nvwatch.agent.poller import Poller
from nvwatch.agent.sources.scheduler.fairshare import read_fairshare
from nvwatch.agent.sources.scheduler.source import SchedulerSource
from nvwatch.sim.fleet.slurm import SlurmCommands
from nvwatch.sim.history.plan import plan_history
from nvwatch.sim.history.queue import build_queue, plan_queue
from nvwatch.sim.history.scheduler import SchedulerSeries
from nvwatch.sim.queue.model import MIN_JOB_AGE_S, QueueModel
from nvwatch.sim.queue.state import QueueState

END = 1772409600.0  # 2026-03-02T00:00Z
STEPS = 12  # an hour of refreshes
_LABEL = re.compile(r'(\w+)="([^"]*)"')
COUNTED = (
    "nvwatch_scheduler_allocated_gpu_seconds_total",
    "nvwatch_scheduler_wait_seconds_",
    "nvwatch_scheduler_account_wait_seconds_",
)

Key = tuple[str, frozenset[tuple[str, str]]]
Steps = list[tuple[dict[Key, float], dict[Key, float]]]  # (written, exported) per step


def _exposed(poller: Poller) -> dict[Key, float]:
    text = build_exposition(poller.poll_once()).text.decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("nvwatch_scheduler_")
    }


def _written(series: SchedulerSeries, state: QueueState) -> dict[Key, float]:
    rows, points = series.scrape(state)
    target = set(series.target)
    out: dict[Key, float] = {}
    for family, labels, value in rows:
        if family.startswith("nvwatch_scheduler_"):
            out[family, frozenset((k, v) for k, v in _LABEL.findall(labels) if k not in target)] = (
                value
            )
    for point in points:
        own = frozenset((k, v) for k, v in _LABEL.findall(point.labels + "}") if k not in target)
        name = point.family
        for bound, count in zip(point.bounds, point.buckets, strict=True):
            out[f"{name}_bucket", own | {("le", repr(bound))}] = float(count)
        out[f"{name}_bucket", own | {("le", "+Inf")}] = float(point.count)
        out[f"{name}_count", own] = float(point.count)
        out[f"{name}_sum", own] = point.total
    return out


@pytest.fixture(scope="module")
def windows(tmp_path_factory: pytest.TempPathFactory) -> list[Steps]:
    """An hour of refreshes in each of three moments of the month's queue: while the limit
    holds an account's jobs, deep in the backlog week, as the node is drained."""
    plan = plan_history(nodes=6, days=30, step=3600.0, end=END)
    queue = plan_queue(plan)
    starts = [  # in time order: the one queue runs through them
        queue.episode("limits").start + 6 * 3600,
        queue.episode("backlog").start + 2 * 86400,
        queue.episode("drained").start - 1800,
    ]
    assert starts == sorted(starts)
    model = build_queue(queue, max(starts) + STEPS * MIN_JOB_AGE_S)
    commands = SlurmCommands(Path(tmp_path_factory.mktemp("slurm")), model, time_offset=0.0)
    series = SchedulerSeries(plan.nodes[0].cluster)
    return [_window(model, commands, series, start) for start in starts]


def _window(
    model: QueueModel, commands: SlurmCommands, series: SchedulerSeries, start: float
) -> Steps:
    """A scheduler source started at `start`, refreshed every MinJobAge for STEPS steps."""
    model.advance(start)
    commands.write()
    source = SchedulerSource(
        interval=3600.0,  # the test refreshes it; its thread reads Slurm once, at the start
        timeout=10.0,
        max_accounts=50,
        env=commands.env(),
        fairshare=read_fairshare,
        first_wait=20.0,
        clock=commands.now,
    )
    poller = Poller([source], interval=3600, timeout=30, prepare=prepare)
    steps: Steps = []
    try:
        for step in range(STEPS + 1):
            if step:
                model.advance(start + step * MIN_JOB_AGE_S)
                commands.write()
                assert source.refresh() is not None
            steps.append((_written(series, model.state()), _exposed(poller)))
    finally:
        poller.stop(timeout=2)
        source.close()
    return steps


def _counted(key: Key) -> bool:
    return key[0].startswith(COUNTED)


def test_every_gauge_written_is_exported_with_its_value(windows: list[Steps]) -> None:
    compared: set[str] = set()
    nonzero: set[tuple[str, ...]] = set()
    for written, exported in (step for steps in windows for step in steps):
        for key, value in written.items():
            if _counted(key):
                continue
            if key not in exported:
                # a (partition, account) the source has not seen since it started: a
                # queue's history knows it from before, with nothing pending now
                assert key[0] == "nvwatch_scheduler_pending_gpus" and value == 0, key
                continue
            assert value == pytest.approx(exported[key], abs=1e-6), key
            compared.add(key[0])
            if value:
                nonzero.add((key[0], *sorted(v for k, v in key[1] if k == "reason")))
        # and nothing the source exports is missing from the history
        assert {k for k in exported if not _counted(k)} <= set(written)
    assert compared == {
        "nvwatch_scheduler_gpus",
        "nvwatch_scheduler_nodes_unavailable",
        "nvwatch_scheduler_pending_gpus",
        "nvwatch_scheduler_oldest_pending_seconds",
        "nvwatch_scheduler_fairshare",
    }
    # and compared where it matters: jobs waiting for each reason, a drained node
    scheduler = "nvwatch_scheduler_"
    assert {
        (f"{scheduler}pending_gpus", reason) for reason in ("resources", "priority", "limits")
    } | {
        (f"{scheduler}oldest_pending_seconds",),
        (f"{scheduler}nodes_unavailable", "drained"),
    } <= nonzero


def test_counters_and_waits_grow_alike(windows: list[Steps]) -> None:
    grew = 0.0
    observed: dict[str, float] = defaultdict(float)  # starts counted, by histogram family
    pairs = [pair for steps in windows for pair in itertools.pairwise(steps)]
    for (written_before, exported_before), (written, exported) in pairs:
        for key in exported:
            if not _counted(key) or key not in exported_before:
                continue
            delta = exported[key] - exported_before[key]
            assert written[key] - written_before[key] == pytest.approx(delta, abs=1e-6), key
            if key[0].endswith("_total"):
                grew += delta
            elif key[0].endswith("_count"):
                observed[key[0]] += delta
    # jobs ran and started in those hours, each counted once per account and per partition
    assert grew > 0 and len(observed) == 2
    assert observed["nvwatch_scheduler_account_wait_seconds_count"] == pytest.approx(
        observed["nvwatch_scheduler_wait_seconds_count"]
    )
    assert observed["nvwatch_scheduler_wait_seconds_count"] > 0
