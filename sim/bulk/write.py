"""A fleet's range written as one Prometheus block: plan the nodes, render each
profile once, then node after node compute the load, the values and the chunks.

The nodes take the history's profile mix in turn (every class in every rack), four to a
rack as the fleet simulator places them (a rack is a leaf switch of the fat tree), and
carry the target labels a Prometheus scraping them would add. Every node has a BMC on
the simulated management network, probed as the fleet simulator's are.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nvwatch.sim.bulk.jobs import FIRST_JOB_ID, allocations
from nvwatch.sim.bulk.load import node_load
from nvwatch.sim.bulk.templates import (
    Template,
    node_series,
    render_bmc_template,
    render_template,
)
from nvwatch.sim.bulk.values import moving_series, node_values
from nvwatch.sim.fleet.plan import NodeSpec, bmc_address, node_name, rack_name
from nvwatch.sim.history.plan import mixed_profiles
from nvwatch.sim.tsdb.block import BlockWriter
from nvwatch.sim.tsdb.index import Labels
from nvwatch.sim.tsdb.xor import Grid

CLUSTER = "bulk"
BATCH_SERIES = 8_000  # series encoded at once: about 40 MB of bits per chunk


@dataclass(frozen=True)
class BulkPlan:
    nodes: int
    end_s: float  # the range's end, unix seconds
    hours: float
    step_s: float
    nvlink_detail: str = "link"
    ib_hw_counters: str = "default"
    seed: int = 1

    @property
    def grid(self) -> Grid:
        step_ms = round(self.step_s * 1000)
        count = int(self.hours * 3600 * 1000 // step_ms)
        end_ms = int(self.end_s * 1000) // step_ms * step_ms
        return Grid(end_ms - (count - 1) * step_ms, step_ms, count)

    @property
    def last_sample_s(self) -> float:
        """The history's last sample, unix seconds: where replayed live minutes go on."""
        grid = self.grid
        return grid.time_ms(grid.count - 1) / 1000.0


@dataclass(frozen=True)
class BulkResult:
    block: Path
    nodes: int
    series: int
    samples: int
    seconds: float
    profiles: dict[str, int]
    # each node's last two samples, template rows in order: where a live slice goes on
    tails: dict[str, tuple[np.ndarray, np.ndarray]]
    templates: dict[str, Template]  # the profiles' renders the nodes were made from
    render_seconds: float  # of `seconds`, rendering the templates (once, whatever the size)
    # each node's allocation series of the job still running at the range's end
    running: dict[str, list[Labels]]
    jobs: int


def node_specs(plan: BulkPlan) -> list[NodeSpec]:
    return [
        NodeSpec(
            index,
            node_name(index),
            profile,
            0,
            plan.seed + index,
            CLUSTER,
            rack_name(index),
            bmc=bmc_address(index),
        )
        for index, profile in enumerate(mixed_profiles(plan.nodes))
    ]


def write_bulk_history(
    plan: BulkPlan, out: Path, progress: Callable[[int, int], None] | None = None
) -> BulkResult:
    """Writes `plan`'s fleet into one block under `out`; `progress(done, nodes)` after
    each node."""
    started = time.perf_counter()
    specs = node_specs(plan)
    templates = profile_templates(plan)
    render_seconds = time.perf_counter() - started
    moving = {p: moving_series(t) for p, t in templates.items()}
    grid = plan.grid
    times_s = (grid.start_ms + grid.step_ms * np.arange(grid.count)) / 1000.0
    writer = BlockWriter(out, grid)
    batch = SeriesBatch(writer)
    tails, running = {}, {}
    job_id, span_samples = FIRST_JOB_ID, 0
    for done, spec in enumerate(specs, start=1):
        template = templates[spec.profile]
        rng = np.random.default_rng(spec.seed)
        load, jobs = node_load(rng, template.gpus, grid.count, plan.step_s)
        values = node_values(template, moving[spec.profile], load, times_s, plan.step_s)
        batch.add(node_series(template, spec), values)
        tails[spec.name] = (values[:, max(0, grid.count - 2)].copy(), values[:, -1].copy())
        held = allocations(template, spec, jobs, job_id)
        for labels, first, end in held:
            writer.add_span(labels, first, end)
            span_samples += end - first + (end < grid.count)  # the staleness marker
        running[spec.name] = [labels for labels, _, end in held if end == grid.count]
        job_id += len(jobs)
        if progress is not None:
            progress(done, len(specs))
    batch.flush()
    block = writer.close()
    series, samples = writer.series, len(writer.labels) * grid.count + span_samples
    return BulkResult(block, len(specs), series, samples, time.perf_counter() - started,
                      {p: sum(1 for s in specs if s.profile == p) for p in templates},
                      tails, templates, render_seconds, running,
                      job_id - FIRST_JOB_ID)  # fmt: skip


class SeriesBatch:
    """Nodes' series gathered until BATCH_SERIES, then encoded together."""

    def __init__(self, writer: BlockWriter) -> None:
        self.writer = writer
        self.labels: list[Labels] = []
        self.values: list[np.ndarray] = []
        self.count = 0

    def add(self, labels: list[Labels], values: np.ndarray) -> None:
        self.labels.extend(labels)
        self.values.append(values)
        self.count += len(labels)
        if self.count >= BATCH_SERIES:
            self.flush()

    def flush(self) -> None:
        if self.labels:
            self.writer.add(self.labels, np.vstack(self.values))
        self.labels, self.values, self.count = [], [], 0


def profile_templates(plan: BulkPlan) -> dict[str, Template]:
    """The templates `plan`'s nodes are made from: each of its profiles rendered once,
    with its BMC."""
    return {
        p: render_template(p, plan.nvlink_detail, plan.ib_hw_counters).with_bmc(
            render_bmc_template(p)
        )
        for p in sorted({s.profile for s in node_specs(plan)})
    }
