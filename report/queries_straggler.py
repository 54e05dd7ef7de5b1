"""The PromQL behind the report's Stragglers section: GPU-hours of jobs that
NvwatchJobStraggler named, by job, by cause and by culprit node.

A job is slowed at each rule evaluation at which `ALERTS{alertname="NvwatchJobStraggler",
alertstate="firing"}` names it. Each figure is read at the rules' own sample interval
(the mixin config's `evaluation_interval`) with a subquery at that resolution within each
report step:

- at each subquery point, `max_over_time(ALERTS{...}[interval])` is 1 where the alert
  fired at the evaluation in the interval before it. It reads the raw samples, not an
  instant selector's lookback, so an alert counts for exactly the evaluations that wrote
  it: a resolved alert does not linger for the lookback where no stale marker was
  written (promtool's backfilled rule output has none);
- points a whole interval apart see every evaluation once, and the subquery's range is
  one step less a millisecond, so each point falls in exactly one step whether the
  server's ranges are closed (Prometheus 2) or left-open (3): sums of points x interval
  are the time flagged, with nothing counted twice;
- grouping before the sum (`group by (job)`, `by (job, cause)`, `by (job, node)`) counts
  a job named by two culprits at once once per row, not twice;
- the slowdown is `job:nvwatch_straggler_slowdown:ratio`, the value the alert itself
  fires with (ALERTS' sample is 1), summed over the same points.

The job's GPUs are counted per step, `straggler_gpus`: the largest count of its whole
GPUs the straggler rules recorded in the step (`job:nvwatch_straggler_ranks:count`, one
series per job the rules judge, which every flagged job is), for jobs flagged in the step
only (a small answer). GPU-hours are then flagged evaluations x interval x GPUs: exact
for a job whose allocation does not change while it is flagged (a Slurm job's GPUs are
fixed for its life). Counting the allocation series instead (one per GPU of every job,
flagged or not) read each GPU's every sample of the range: at a thousand nodes, most of
the report's Stragglers time, growing with the range.
"""

from __future__ import annotations

from nvwatch.alerts.recording_straggler import RANKS, SLOWDOWN
from nvwatch.common.durations import parse_duration, prometheus_duration
from nvwatch.mixin.config import MixinConfig
from nvwatch.report.queries import Query, cluster_matchers
from nvwatch.report.window import Window

ALERT = "NvwatchJobStraggler"
# what a culprit is, besides its node: a GPU, an IB port or neither (the host's CPUs)
CULPRIT_LABELS = ("gpu", "uuid", "device", "port")
# the groupings of the flagged time: suffix of the query names -> labels besides the job
GROUPINGS: dict[str, tuple[str, ...]] = {"job": (), "cause": ("cause",), "node": ("instance",)}


def evaluation_seconds(cfg: MixinConfig) -> float:
    """The rules' sample interval: the one a flagged evaluation stands for."""
    return parse_duration(cfg.evaluation_interval, "evaluation_interval")


def straggler_queries(cfg: MixinConfig, window: Window, cluster: str | None) -> list[Query]:
    extra = ", ".join(cluster_matchers(cfg, cluster))
    interval = prometheus_duration(evaluation_seconds(cfg))
    # one step less a millisecond: a subquery point never sits on both ends of a step
    sub = f"[{window.read_span_text}:{interval}]"
    job = f"{cfg.cluster_label}, job_id"
    alerts = (
        "ALERTS{"
        + ", ".join(m for m in (f'alertname="{ALERT}"', 'alertstate="firing"', extra) if m)
        + "}"
    )
    slowdown = f"max by ({job}) ({SLOWDOWN}{{{extra}}})"
    culprit = ", ".join((job, cfg.instance_label, *CULPRIT_LABELS, "cause"))
    ranks = f"{RANKS}{{{extra}}}"
    queries = [
        # each alert series' firing evaluations per step: which culprits and causes a
        # job had, for the tables' detail
        Query(
            "straggler_alerts",
            f"sum by ({culprit}) (count_over_time({alerts}[{window.step_text}]))",
        ),
        Query(
            "straggler_gpus",
            f"max by ({job}) (max_over_time({ranks}[{window.step_text}]))\n"
            f"and on ({job}) group by ({job}) (count_over_time({alerts}[{window.step_text}]))",
        ),
    ]
    for suffix, labels in GROUPINGS.items():
        by = ", ".join((job, *(cfg.instance_label if n == "instance" else n for n in labels)))
        flagged = f"group by ({by}) (max_over_time({alerts}[{interval}]))"
        queries += [
            Query(f"straggler_evaluations_{suffix}", f"sum_over_time(({flagged}){sub})"),
            Query(
                f"straggler_slowdown_{suffix}",
                f"sum_over_time(({flagged} * on ({job}) group_left () {slowdown}){sub})",
            ),
        ]
    return queries
