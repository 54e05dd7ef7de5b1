"""Writing a straggler corpus: every episode's series in one OpenMetrics file, and the
truth beside it.

Each episode's nodes are simulated as a history's are (nvwatch.sim.history: the same
`SimulatedNode`, NodeSeries with the rank signals, few sub-steps per step), one node at a
time, each following every rank of the episode's job itself (sim/job/). The episodes
follow each other in time (`GAP_S` apart) on nodes named after their episode
(`ep003-n01`), so one TSDB holds them all and no episode's series touch another's.

SERIES_FILE goes to the output directory (promtool imports one file in one pass: faster
than a file per episode), TRUTH_FILE beside it (`TRUTH_FORMAT`, read by `nvwatch alerts
evaluate-stragglers` without the simulator).
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvwatch.alerts.stragglers.corpus import SERIES_FILE, TRUTH_FILE, TRUTH_FORMAT
from nvwatch.sim.clock import ManualClock
from nvwatch.sim.fleet.jobs import FleetJob, sync_job_plans
from nvwatch.sim.fleet.plan import NodeSpec, plan_fleet
from nvwatch.sim.history.history import SeriesBuffer, node_series
from nvwatch.sim.history.openmetrics_out import OpenMetricsWriter, stamp
from nvwatch.sim.history.series import FAMILIES, family_help, family_type
from nvwatch.sim.job.model import SyncJob
from nvwatch.sim.job.plan import SyncJobPlan
from nvwatch.sim.node.node import scratch_dir
from nvwatch.sim.stragglers.episodes import (
    CORPUS_START,
    GAP_S,
    NO_MAGNITUDE,
    PIPELINE_MARKER,
    EpisodePlan,
)

# what the straggler rules and a look at a job's ranks read, of all a history holds: the
# capacity review's lifetime counters (ECC, XIDs, energy, thresholds) would double the
# corpus and its import for nothing
CORPUS_FAMILIES = frozenset(
    (
        "up",
        "nvwatch_gpu_up",
        "nvwatch_gpu_utilization_ratio",
        "nvwatch_gpu_power_watts",
        "nvwatch_gpu_power_limit_watts",
        "nvwatch_gpu_temperature_celsius",
        "nvwatch_gpu_clock_hertz",
        "nvwatch_gpu_clock_max_hertz",
        "nvwatch_gpu_clock_event_active",
        "nvwatch_gpu_sm_active_ratio",
        "nvwatch_gpu_tensor_active_ratio",
        "nvwatch_gpu_dram_active_ratio",
        "nvwatch_gpu_pcie_link_generation",
        "nvwatch_gpu_pcie_link_width",
        "nvwatch_gpu_allocation_info",
        "nvwatch_nvlink_up",
        "nvwatch_nvlink_transmit_bytes_total",
        "nvwatch_nvlink_receive_bytes_total",
        "nvwatch_nvlink_errors_total",
        "nvwatch_ib_port_state",
        "nvwatch_ib_port_rate_bytes_per_second",
        "nvwatch_ib_port_transmit_bytes_total",
        "nvwatch_ib_port_receive_bytes_total",
        "nvwatch_ib_port_transmit_wait_total",
        "nvwatch_host_cpu_utilization_ratio",
        "nvwatch_host_cpu_iowait_ratio",
    )
)
CLUSTER = "corpus"


@dataclass(frozen=True)
class CorpusResult:
    series_path: Path
    truth_path: Path
    samples: int
    seconds: float


def episode_starts(plans: list[EpisodePlan]) -> list[float]:
    starts, t = [], CORPUS_START
    for plan in plans:
        starts.append(t)
        t += plan.seconds + GAP_S
    return starts


def node_specs(plan: EpisodePlan) -> list[NodeSpec]:
    specs = plan_fleet(
        [plan.profile] * plan.nodes,
        base_port=0,
        seed=plan.seed,
        scenarios=plan.scenarios(),
        cluster=CLUSTER,
    )
    return [dataclasses.replace(s, name=f"ep{plan.number:03d}-n{s.index:02d}") for s in specs]


def job_of(plan: EpisodePlan) -> FleetJob:
    nodes = tuple(range(plan.nodes))
    return FleetJob(
        0, plan.gpus, plan.job_id, f"user{plan.number % 7}", plan.account,
        nodes=nodes if len(nodes) > 1 else (), sync=True,
    )  # fmt: skip


def sync_plan(plan: EpisodePlan, job: FleetJob, specs: list[NodeSpec]) -> SyncJobPlan:
    (sync,) = sync_job_plans([job], specs)
    weights: tuple[float, ...] = ()
    if plan.compute_weights:
        weights = tuple(plan.compute_weights[rank.node] for rank in sync.ranks)
    return dataclasses.replace(sync, compute_weights=weights, pauses=plan.pauses)


def generate(plans: list[EpisodePlan], out: Path, *, seed: int, step: float) -> CorpusResult:
    """Simulate every episode of `plans` sampled every `step`; write SERIES_FILE and
    TRUTH_FILE into `out`."""
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    writer = OpenMetricsWriter(
        out / SERIES_FILE, FAMILIES, type_of=family_type, help_of=family_help
    )
    truths = []
    try:
        with tempfile.TemporaryDirectory(prefix="nvwatch-corpus-", dir=scratch_dir()) as root:
            for plan, start in zip(plans, episode_starts(plans), strict=True):
                truths.append(_episode(plan, start, step, writer, Path(root)))
        writer.close()
    except BaseException:
        writer.discard()
        raise
    truth_path = out / TRUTH_FILE
    truth = {
        "format": TRUTH_FORMAT,
        "seed": seed,
        "step_seconds": step,
        "start": CORPUS_START,
        "end": max((e["end"] for e in truths), default=CORPUS_START),
        # what a site sets so the rules know its pipeline-parallel jobs
        "site_markers": {"pipeline_parallel": {"straggler_pipeline_jobs": PIPELINE_MARKER}},
        "episodes": truths,
    }
    truth_path.write_text(json.dumps(truth, indent=1) + "\n", encoding="utf-8")
    return CorpusResult(out / SERIES_FILE, truth_path, writer.samples, time.monotonic() - started)


def _episode(
    plan: EpisodePlan, start: float, step: float, writer: OpenMetricsWriter, root: Path
) -> dict[str, Any]:
    specs = node_specs(plan)
    job = job_of(plan)
    # one job followed once for all its nodes: each is stepped over the same times
    sync = SyncJob(sync_plan(plan, job, specs), ManualClock(0.0))
    steps = round(plan.seconds / step)
    stamps = [stamp(start + k * step) for k in range(steps + 1)]
    magnitude = plan.slowdown
    for spec in specs:
        with node_series(
            spec, root, jobs=[job.on(spec.index)], sync_jobs=[sync], rank_signals=True
        ) as (series, clock):
            buffer = SeriesBuffer()
            for index in range(steps + 1):
                if index:
                    clock.advance(step)
                node = series.node
                node.nvml.advance()
                node.fabric.advance()
                rows = [row for row in series.rows(clock()) if row[0] in CORPUS_FAMILIES]
                buffer.add(index, rows)
            if plan.scenario == "ib-degraded" and plan.culprit and spec.index == plan.culprit.node:
                port = node.fabric.port(plan.culprit.device or "")
                magnitude = round(1.0 - port.throughput_share(clock()), 3)
            buffer.write(writer, stamps)
    return _truth(plan, start, specs, magnitude)


def _truth(
    plan: EpisodePlan, start: float, specs: list[NodeSpec], magnitude: float | None
) -> dict[str, Any]:
    culprit = None
    if plan.culprit is not None and plan.kind == "straggler":
        culprit = {
            "instance": specs[plan.culprit.node].name,
            "gpu": None if plan.culprit.gpu is None else str(plan.culprit.gpu),
            "device": plan.culprit.device,
            "port": None if plan.culprit.device is None else "1",
        }
    onset = None if plan.onset_s is None else start + plan.onset_s
    return {
        "episode": plan.number,
        "kind": plan.kind,
        "job_id": plan.job_id,
        "start": start,
        "end": start + plan.seconds,
        "profile": plan.profile,
        "nodes": [spec.name for spec in specs],
        "gpus": None if plan.gpus is None else list(plan.gpus),
        "account": plan.account,
        "pipeline_parallel": plan.kind == "pipeline",
        "alert_expected": plan.alert_expected,
        "culprit": culprit,
        "cause": plan.cause,
        "scenario": plan.scenario,
        "magnitude": NO_MAGNITUDE if magnitude is None else magnitude,
        "onset": onset,
        "until": None if plan.until_s is None else start + plan.until_s,
        "pauses": [[start + a, start + b] for a, b in plan.pauses],
        "stage_weights": list(plan.compute_weights),
    }
