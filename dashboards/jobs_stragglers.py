"""The jobs dashboard's stragglers row: which rank holds a synchronous job back.

It reads what the straggler recording rules record (alerts/recording_straggler.py) and
the NvwatchJobStraggler alerts Prometheus keeps in ALERTS. A rank is a GPU, a node's
host CPUs or an IB port; each signal has its own score series per rank
(`<level>:<signal>:straggler_score`), and a rank's line is the highest of its signals'
scores, so one line per rank crosses 1 when any of its signals stands out.

Every query keeps only the jobs the dashboard's variables choose: the recorded series
carry the job's id but not its user, so they are joined with the chosen jobs'
allocations (`and on (cluster, job_id)`).
"""

from __future__ import annotations

import dataclasses

from nvwatch.alerts.recording_straggler import SLOWDOWN
from nvwatch.dashboards import thresholds as t
from nvwatch.dashboards.builder import Grid, Q, legend
from nvwatch.dashboards.links import DataLink
from nvwatch.mixin.config import MixinConfig

ALERT = "NvwatchJobStraggler"
# (level of the recorded scores, labels naming a rank besides its node, legend of a rank)
LEVELS = (
    ("job_gpu", "gpu", "GPU {{gpu}}"),
    ("job_node", "", "host CPUs"),
    ("job_port", "device, port", "IB {{device}} port {{port}}"),
)
# A score axis shows the threshold line at 1 and tints the band above it.
SCORE_STYLE = {"thresholdsStyle": {"mode": "line+area"}}


@dataclasses.dataclass(frozen=True)
class JobScope:
    """What the jobs dashboard chooses: its jobs' allocations (with cluster and job_id
    labels) and the data link to the node dashboard of a series' node."""

    allocations: str
    to_node: DataLink
    to_node_gpu: DataLink
    job_legend: str


def _chosen(cfg: MixinConfig, scope: JobScope, series: str) -> str:
    return f"{series}\nand on ({cfg.cluster_label}, job_id)\n  {scope.allocations}"


def _of_chosen_jobs(cfg: MixinConfig, *matchers: str) -> str:
    """The matchers of a recorded series of the chosen clusters and jobs."""
    chosen = (f'{cfg.cluster_label}=~"$cluster"', 'job_id=~"$job_id"')
    return "{" + ", ".join((*matchers, *chosen)) + "}"


def rank_scores(cfg: MixinConfig, scope: JobScope) -> list[Q]:
    """Per level, each rank's highest score over its signals, one series per rank."""
    queries = []
    for level, rank_labels, rank_legend in LEVELS:
        by = ", ".join(
            label
            for label in (cfg.cluster_label, cfg.instance_label, rank_labels, "job_id")
            if label
        )
        scores = _of_chosen_jobs(cfg, f'__name__=~"{level}:.+:straggler_score"')
        queries.append(
            Q(
                _chosen(cfg, scope, f"max by ({by}) (\n  {scores}\n)"),
                f"{scope.job_legend} {legend(cfg.instance_label)} {rank_legend}",
            )
        )
    return queries


def slowdown(cfg: MixinConfig, scope: JobScope) -> str:
    return _chosen(cfg, scope, SLOWDOWN + _of_chosen_jobs(cfg))


def firing(cfg: MixinConfig, scope: JobScope) -> str:
    alerts = _of_chosen_jobs(cfg, f'alertname="{ALERT}"', 'alertstate="firing"')
    return _chosen(cfg, scope, "ALERTS" + alerts)


def _alert_columns(cfg: MixinConfig) -> dict[str, object]:
    """Hide the alert's own labels; the job, the culprit and its cause first."""
    hidden = ("Time", "Value", "__name__", "alertname", "alertstate", "severity")
    order = ("job_id", cfg.instance_label, "gpu", "uuid", "device", "port", "cause")
    return {
        "excludeByName": {name: True for name in hidden},
        "indexByName": {name: i for i, name in enumerate(order)},
    }


def stragglers_row(grid: Grid, cfg: MixinConfig, scope: JobScope) -> None:
    grid.newline()
    what = (
        "A rank's score compares it with the other ranks of its synchronous job: 0 is the "
        "job's median, 1 the threshold, where the rank is farther from the median than "
        f"{cfg.straggler_mad_multiple:g} times the job's median absolute deviation and "
        "than the smallest gap that matters for that signal: it stands out from its job "
        "and holds every step of it back."
    )
    compared = (
        f"Only jobs of at least {cfg.straggler_min_gpus} whole GPUs, older than "
        f"{cfg.straggler_warmup} and busy are compared (docs/alerts.md, Job stragglers)."
    )
    grid.add(
        "timeseries",
        "Straggler score per rank",
        "Each rank of the chosen jobs (a GPU, a node's host CPUs, an IB port) against its "
        "job: the highest score of its signals (SM clock, tensor activity or power, PCIe, "
        f"NVLink; host CPU; IB wait and rate). {what} Above 1 for {cfg.straggler_for} "
        f"{ALERT} fires. {compared}",
        "none",
        rank_scores(cfg, scope),
        steps=t.STANDS_OUT,
        custom=SCORE_STYLE,
        links=[
            dataclasses.replace(scope.to_node_gpu, ref_id="A"),
            dataclasses.replace(scope.to_node, ref_id="B"),
            dataclasses.replace(scope.to_node, ref_id="C"),
        ],
        w=12,
    )
    grid.add(
        "timeseries",
        "Job slowdown estimate",
        "Share of its speed each compared job loses (job:nvwatch_straggler_slowdown:ratio): "
        "the largest of 1 - its median activity over its busiest rank's, 1 - its slowest "
        "SM clock over its median one, and 1 - its median activity over its best in "
        f"{cfg.straggler_baseline_window} (a fault that slows every rank alike shows only "
        f"there). When a rank stands out from its job, it is {ALERT}'s value.",
        "percentunit",
        [Q(slowdown(cfg, scope), scope.job_legend)],
        min_=0,
        w=12,
    )
    grid.add(
        "table",
        "Straggler alerts firing",
        f"{ALERT} firing now for the chosen jobs: the job, the rank that holds it back "
        "(its node, and its GPU or IB device and port; neither for the node's host CPUs) "
        "and the cause. Its score stayed at 1 or more, the threshold where a rank stands "
        f"out from its job, for {cfg.straggler_for}. Click a row for its node.",
        "none",
        [Q(firing(cfg, scope), instant=True, table=True)],
        options={"cellHeight": "sm"},
        transformations=[{"id": "organize", "options": _alert_columns(cfg)}],
        links=[scope.to_node],
        w=24,
        h=6,
    )
