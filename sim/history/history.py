"""A simulated fleet's history: days of simulated time as one OpenMetrics file to backfill.

`nvwatch simulate history --nodes N --days D --step S --out FILE` builds the nodes of a
fleet plan (nvwatch.sim.history.plan: mixed profiles, episodes in known weeks), steps each
one's simulator (the same `SimulatedNode`, NVML model and InfiniBand ports the agent
reads) through the range on one manual clock, and at every step writes what a scrape
would have recorded (nvwatch.sim.history.series), with its timestamp. Beside FILE goes
FILE's stem + `.truth.json`: the plan's episodes and the integrals a test checks
(nvwatch.sim.history.truth).

Backfill it with `promtool tsdb create-blocks-from --max-block-duration=...
openmetrics FILE DIR` and start Prometheus on DIR (tests/history does both).

Two things make a month of a fleet cost seconds per node rather than hours: each step is
integrated in at most `SUBSTEPS` sub-steps (the thermal model relaxes exactly at any
length, and training load is averaged exactly), and the ports integrate their traffic in
closed form. The ports' narrow counters do not saturate here (`SimulatedPort.saturating`):
over a month the 32-bit `port_xmit_wait` would fill within hours on any busy port (in
minutes on a congested one) and show no congestion after. The history holds its running
total instead, as a fabric manager that clears the counters before they fill and adds
them up would; the agent itself refuses a reading past 32 bits.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from nvwatch.sim.clock import ManualClock
from nvwatch.sim.fleet.jobs import FleetJob
from nvwatch.sim.fleet.plan import NodeSpec
from nvwatch.sim.history.jobs import JobEpisode, run_jobs
from nvwatch.sim.history.openmetrics_out import OpenMetricsWriter, stamp
from nvwatch.sim.history.plan import HistoryPlan
from nvwatch.sim.history.queue import build_queue
from nvwatch.sim.history.scheduler import (
    CONTROLLER,
    WAIT_FAMILIES,
    HistogramPoint,
    SchedulerSeries,
)
from nvwatch.sim.history.series import FAMILIES, NodeSeries, Row, family_help, family_type
from nvwatch.sim.history.truth import GroundTruth
from nvwatch.sim.job.model import SyncJob
from nvwatch.sim.job.plan import SyncJobPlan
from nvwatch.sim.node.node import SimulatedNode, scratch_dir

log = logging.getLogger(__name__)

SUBSTEPS = 2  # sub-steps of the GPU model per history step


@dataclass(frozen=True)
class HistoryResult:
    paths: tuple[Path, ...]  # one OpenMetrics file, or one per group of nodes
    truth_path: Path
    samples: int
    seconds: float


def part_path(out: Path, part: int) -> Path:
    """`fleet.om` -> `fleet.003.om`: the file of the fourth group of nodes."""
    return out.with_name(f"{out.stem}.{part:03d}{out.suffix}")


def truth_path_for(out: Path) -> Path:
    """Where the ground truth of history `out` goes: `fleet.om` -> `fleet.truth.json`."""
    return out.with_name(out.stem + ".truth.json")


def for_history(node: SimulatedNode) -> SimulatedNode:
    """Set a simulated node up to be stepped a history step at a time (see the module
    docstring): few sub-steps per step, IB counters that do not saturate."""
    for gpu in node.nvml.gpus:
        gpu.max_substeps = SUBSTEPS
    for device in node.fabric.devices:
        node.fabric.port(device).saturating = False
    return node


@contextlib.contextmanager
def node_series(
    spec: NodeSpec,
    root: Path,
    *,
    jobs: Sequence[FleetJob] = (),
    sync_jobs: Sequence[SyncJobPlan | SyncJob] = (),
    rank_signals: bool = False,
    placed: Sequence[JobEpisode] = (),
    origin: float = 0.0,
) -> Iterator[tuple[NodeSeries, ManualClock]]:
    """One planned node's simulator on a clock of its own at 0, closed after: `jobs` are
    its part of the history's jobs, `sync_jobs` the synchronous ones with ranks on it
    (each node follows every rank of its jobs itself: sim/job/; a `SyncJob` given is
    shared as it is, see SimulatedNode); `placed` the history's jobs with a start and an
    end (jobs.py), on a range starting at Unix time `origin`."""
    sysfs = root / spec.name
    sysfs.mkdir()
    clock = ManualClock(0.0)
    node = SimulatedNode(
        spec.profile,
        spec.scenarios,
        seed=spec.seed,
        clock=clock,
        sysfs_root=sysfs,
        sync_jobs=[job for job in sync_jobs if _plan(job).ranks_on(spec.index)],
        fleet_index=spec.index,
    )
    try:
        run_jobs(node, spec, placed, origin)
        mine = tuple(job for job in placed if spec.index in job.indexes)
        yield NodeSeries(spec, for_history(node), jobs, rank_signals, mine, origin), clock
    finally:
        node.close()


def _plan(job: SyncJobPlan | SyncJob) -> SyncJobPlan:
    return job.plan if isinstance(job, SyncJob) else job


class SeriesBuffer:
    """One node's samples per series (as numbers: a month of strings would not fit),
    kept in the order series first appear; the controller's wait histograms beside."""

    def __init__(self) -> None:
        self.series: dict[tuple[str, str], tuple[array[int], array[float]]] = {}
        self.histograms: dict[tuple[str, str], list[tuple[int, HistogramPoint]]] = {}

    def add(self, index: int, rows: list[Row]) -> None:
        for family, labels, value in rows:
            kept = self.series.get((family, labels))
            if kept is None:
                kept = self.series[family, labels] = (array("i"), array("d"))
            kept[0].append(index)
            kept[1].append(value)

    def add_histogram(self, index: int, point: HistogramPoint) -> None:
        self.histograms.setdefault((point.family, point.labels), []).append((index, point))

    def write(self, writer: OpenMetricsWriter, stamps: list[str]) -> None:
        for family in FAMILIES:
            if family in WAIT_FAMILIES:
                for (name, labels), points in self.histograms.items():
                    if name != family:
                        continue
                    times = [stamps[i] for i, _ in points]
                    rest = [(p.buckets, p.count, p.total) for _, p in points]
                    bounds = points[0][1].bounds
                    writer.add_histogram(family, labels, bounds, times, rest)
            for (name, labels), (indexes, values) in self.series.items():
                if name == family:
                    writer.add_series(family, labels, [stamps[i] for i in indexes], values)


def generate(
    plan: HistoryPlan,
    out: Path,
    *,
    nodes_per_file: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    on_file: Callable[[Path], None] | None = None,
) -> HistoryResult:
    """Simulate `plan` and write its history to `out` and its ground truth beside it.

    Node by node: each node's simulator is independent of the others', and OpenMetrics
    wants each series' samples together. With `nodes_per_file`, every that many nodes
    go to a file of their own (`part_path`), each complete and backfilled on its own: a
    month of a 124-node fleet is tens of gigabytes as one file. `on_file` is called with
    each file as soon as it is complete (to backfill it and free the disk at once)."""
    started = time.monotonic()
    group = nodes_per_file or len(plan.nodes)
    truth = GroundTruth(plan)
    sync_jobs = plan.sync_jobs
    times = [plan.start + index * plan.step for index in range(plan.steps + 1)]
    stamps = [stamp(t) for t in times]
    paths: list[Path] = []
    samples = 0
    writer: OpenMetricsWriter | None = None
    try:
        with tempfile.TemporaryDirectory(prefix="nvwatch-history-", dir=scratch_dir()) as root:
            for done, spec in enumerate(plan.nodes):
                if writer is None:
                    path = out if nodes_per_file is None else part_path(out, len(paths))
                    writer = OpenMetricsWriter(
                        path, FAMILIES, type_of=family_type, help_of=family_help
                    )
                    paths.append(path)
                with node_series(
                    spec,
                    Path(root),
                    jobs=plan.jobs_on(spec.index),
                    sync_jobs=sync_jobs,
                    rank_signals=bool(plan.jobs),
                    placed=plan.job_episodes,
                    origin=plan.start,
                ) as (series, clock):
                    buffer = SeriesBuffer()
                    for index, t in enumerate(times):
                        if index:
                            clock.advance(plan.step)
                        rows = _sample(series, plan, t, clock())
                        buffer.add(index, rows)
                        truth.observe(spec.name, t, rows)
                buffer.write(writer, stamps)
                if done + 1 == len(plan.nodes):
                    _controller(plan, times, truth).write(writer, stamps)
                if (done + 1) % group == 0 or done + 1 == len(plan.nodes):
                    writer.close()
                    samples += writer.samples
                    writer = None
                    if on_file is not None:
                        on_file(paths[-1])
                if progress is not None:
                    progress(done + 1, len(plan.nodes))
    except BaseException:
        if writer is not None:
            writer.discard()
        raise
    truth_path = truth_path_for(out)
    truth.write(truth_path)
    seconds = time.monotonic() - started
    log.info("history: %d samples in %.1fs -> %s", samples, seconds, out)
    return HistoryResult(tuple(paths), truth_path, samples, seconds)


def _controller(plan: HistoryPlan, times: list[float], truth: GroundTruth) -> SeriesBuffer:
    """The controller's agent over the range: the cluster's Slurm queue (queue.py)
    brought up to each sample's time, as its scheduler source exports it."""
    model = build_queue(truth.queue_plan, plan.end)
    model.on_start.append(truth.queue.started)
    series = SchedulerSeries(plan.nodes[0].cluster)
    buffer = SeriesBuffer()
    for index, t in enumerate(times):
        model.advance(t)
        state = model.state()
        rows, points = series.scrape(state)
        buffer.add(index, rows)
        for point in points:
            buffer.add_histogram(index, point)
        truth.queue.observe(t, state)
    log.debug("history: %s's queue, %d jobs running at the end", CONTROLLER, len(model.running))
    return buffer


def _sample(series: NodeSeries, plan: HistoryPlan, t: float, sim_time: float) -> list[Row]:
    """Bring one node's simulator up to its clock; what the scrapes at `t` record: the
    agent's and the BMC's (probed from the management host, whether the agent is up)."""
    node = series.node
    node.nvml.advance()
    node.bmc.advance()
    node.fabric.advance()
    bmc = list(series.bmc_rows())
    if plan.agent_down(series.spec.name, t):
        return [*series.down(), *bmc]
    return [*series.rows(sim_time), *bmc]
