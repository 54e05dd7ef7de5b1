"""When a job held which GPUs, from `nvwatch_gpu_allocation_info{job_id=...}`.

A coarse range query over the lookback finds the steps the job was seen in; a finer one
over that span finds its runs: Slurm requeues a job (a node failed, a preemption) under
the same id, and the summary is of its last run, as `sacct` shows it, rather than of the
span from the first run's start to the last one's end with other jobs' time in between.
A gap counts as a requeue only where the agents of the nodes the job had held reported
their GPUs without it in the gap's first half; a gap in which they reported nothing (or
only at its end, a restarted agent before its first attribution) is an outage of theirs,
or of the scrapes, inside one run. Raw samples at both ends of the last run give
its first and last scrape exactly; as every sample stands for the scrape interval before
it, the life starts one interval before the first sample that shows the job.

One Prometheus may hold several clusters (a global view), whose Slurms number their jobs
each on its own: a job id found on two clusters is named with `cluster` or refused.
"""

from __future__ import annotations

import itertools
import math
import re
import statistics
from dataclasses import dataclass

from nvwatch.mixin.config import MixinConfig
from nvwatch.report.errors import ReportError
from nvwatch.report.prom import PrometheusClient

LIFE_POINTS = 1000  # points of the coarse search over the lookback, and of the fine one
STALENESS_S = 330.0  # Prometheus' lookback delta (5 min) and a scrape to spare
# a gap a missed scrape or two cannot make: longer than Prometheus' own staleness
REQUEUE_GAP_S = STALENESS_S
MAX_GAPS_CHECKED = 20  # a job requeued more often than this is summarised from there on


class JobNotFound(ReportError):
    """No GPU was allocated to the job in the lookback."""


class AmbiguousJob(ReportError):
    """The job id ran on more than one cluster in the lookback, and none was named."""


@dataclass(frozen=True)
class Life:
    start: float
    end: float
    cluster: str
    user: str
    account: str
    gpus: tuple[tuple[str, str], ...]  # (instance, gpu), sorted
    interval: float = 0.0  # the scrape interval of its allocation series
    runs: int = 1  # 2 or more: requeued, and this is the last run

    @property
    def window(self) -> str:
        """The life as a range ending at `end` that leaves the sample at `start` out, as
        each sample stands for the scrape interval before it: a millisecond short of the
        life, so Prometheus 2 (ranges closed at both ends) and 3 (open at the start)
        agree."""
        return f"{max(1, round((self.end - self.start) * 1000) - 1)}ms"

    @property
    def counter_window(self) -> str:
        """One second more: the counters' first sample, at `start`, is inside."""
        return f"{max(1, math.ceil(self.end - self.start)) + 1}s"

    @property
    def instances(self) -> list[str]:
        return sorted({i for i, _ in self.gpus})


@dataclass(frozen=True)
class _Run:
    """The last run as the fine search saw it: its first and last steps, the last step
    of the run before it (None: none), and how many runs there were."""

    first: float
    last: float
    before: float | None
    runs: int


def find_life(
    client: PrometheusClient,
    cfg: MixinConfig,
    job_id: str,
    now: float,
    lookback_s: float,
    cluster: str | None = None,
) -> Life:
    inst = cfg.instance_label
    matchers = [f"job_id={quote(job_id)}"]
    if cluster is not None:
        matchers.append(f"{cfg.cluster_label}={quote(cluster)}")
    alloc = f"nvwatch_gpu_allocation_info{cfg.sel(*matchers)}"
    by = f"{cfg.cluster_label}, {inst}, gpu, user, account"
    step = max(15.0, lookback_s / LIFE_POINTS)
    # over each whole step, not at its end alone: a job shorter than a step is found too
    seen = f"max by ({by}) (max_over_time({alloc}[{math.ceil(step)}s]))"
    found = client.query_range(seen, grid_start(now - lookback_s, now, step), now, step).series
    stamps = [float(t) for _, values in found for t, _ in values]
    if not stamps:
        on = f" of cluster {cluster}" if cluster is not None else ""
        raise JobNotFound(
            f"job {job_id}{on} held no GPU in the last {lookback_s / 86400:g} days of this "
            "Prometheus: a wrong id, a job older than its retention, or one that has not "
            "started"
        )
    clusters = sorted({labels.get(cfg.cluster_label, "") for labels, _ in found})
    if len(clusters) > 1:
        raise AmbiguousJob(
            f"job {job_id} ran on clusters {', '.join(repr(c) for c in clusters)} in the "
            f"last {lookback_s / 86400:g} days of this Prometheus: name one with --cluster"
        )
    # from here on the job's own cluster only (an empty value matches no cluster label)
    own = cluster_matcher(cfg, clusters[0])
    alloc = f"nvwatch_gpu_allocation_info{cfg.sel(matchers[0], own)}"
    run = _last_run(client, cfg, alloc, own, min(stamps) - step, max(stamps))
    if run.before is not None:
        # the last run's GPUs and owner: only its samples, after the run before it (a
        # second into the gap, which holds none: no range's closed end reaches back)
        span = f"[{_ms(run.last - run.before - 1)}]"
        found = client.query(f"max by ({by}) (max_over_time({alloc}{span}))", run.last)
    reach_s = math.ceil(step + STALENESS_S)
    reach = f"[{reach_s}s]"
    # the first and last samples lie within a step before the first and last steps seen
    first = client.query(f"{alloc}{reach}", run.first)
    last = client.query(f"{alloc}{reach}", run.last)
    after = -math.inf if run.before is None else run.before
    firsts = [float(t) for _, values in first for t, _ in values if float(t) > after]
    lasts = [float(t) for _, values in last for t, _ in values]
    if not firsts or not lasts or not found:  # the data changed between the queries
        raise JobNotFound(f"job {job_id}'s allocation samples went away while it was read")
    seen_first, end = min(firsts), max(lasts)
    # a sample stands for the scrape interval before it: the job held its GPUs from one
    # interval before the first sample that shows it
    interval = _interval(client, alloc, seen_first, reach_s)
    start = seen_first - interval
    labels = found[0][0]
    return Life(
        start=start,
        end=max(end, start),
        cluster=labels.get(cfg.cluster_label, ""),
        user=labels.get("user", ""),
        account=labels.get("account", ""),
        gpus=tuple(sorted({(s.get(inst, ""), s.get("gpu", "")) for s, _ in found})),
        interval=interval,
        runs=run.runs,
    )


def _last_run(
    client: PrometheusClient, cfg: MixinConfig, alloc: str, own: str, lo: float, hi: float
) -> _Run:
    """The job's runs over [lo, hi] at a step of at most LIFE_POINTS points, by node."""
    inst = cfg.instance_label
    fine = max(15.0, (hi - lo) / LIFE_POINTS)
    expr = f"max by ({inst}) (max_over_time({alloc}[{math.ceil(fine)}s]))"
    by_node = client.query_range(expr, grid_start(lo, hi, fine), hi, fine).series
    steps = sorted({float(t) for _, values in by_node for t, _ in values})
    if not steps:
        return _Run(lo, hi, None, 1)
    gaps = [
        (before, after)
        for before, after in itertools.pairwise(steps)
        if after - before - fine > max(REQUEUE_GAP_S, fine)
    ]
    requeues = [
        (before, after)
        for before, after in gaps[-MAX_GAPS_CHECKED:]
        if _nodes_answered(client, cfg, own, by_node, before, (before + after - fine) / 2)
    ]
    if not requeues:
        return _Run(steps[0], steps[-1], None, 1)
    before, first = requeues[-1]
    return _Run(first, steps[-1], before, len(requeues) + 1)


def _nodes_answered(
    client: PrometheusClient,
    cfg: MixinConfig,
    own: str,
    by_node: list[tuple[dict[str, str], list[list[object]]]],
    before: float,
    until: float,
) -> bool:
    """Whether an agent of a node the job held up to `before` reported its GPUs in
    (before, until], when the job was on none of them: then it had let them go."""
    nodes = sorted(
        {
            labels.get(cfg.instance_label, "")
            for labels, values in by_node
            if any(float(str(t)) <= before for t, _ in values)
        }
    )
    names = "|".join(regex_escape(n) for n in nodes)
    nodes_matcher = f'{cfg.instance_label}=~"{names}"'
    info = f"nvwatch_gpu_info{cfg.sel(own, nodes_matcher)}"
    found = client.query(f"count(max_over_time({info}[{_ms(until - before - 1)}]))", until)
    return bool(found) and float(found[0][1][1]) > 0


def grid_start(lo: float, hi: float, step: float) -> float:
    """Where a range query from about `lo` starts so that its last evaluation falls on
    `hi` itself: Prometheus steps on from the start, and a grid from `lo` stops up to a
    step short of `hi`, where a job that has just ended (the epilog's case) has its last
    samples, or all of them."""
    return hi - math.ceil((hi - lo) / step - 1e-9) * step


def _ms(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def _interval(client: PrometheusClient, alloc: str, first: float, seconds: int) -> float:
    """The scrape interval of the allocation series, from the gaps between its samples
    from `first` on (0 where the job was seen once)."""
    found = client.query(f"{alloc}[{seconds + 1}s]", first + seconds)
    gaps = [
        b - a
        for _, values in found
        for a, b in itertools.pairwise(sorted(float(t) for t, _ in values))
        if b > a
    ]
    if not gaps:
        return 0.0
    # each gap is the interval and a loaded Prometheus's jitter (a scrape 15 ms late), and
    # which gaps a query sees changes with when it runs (at the job's end, or later): the
    # low median, to the two figures scrape intervals are set in, reads the same whenever
    return float(f"{statistics.median_low(gaps):.2g}")


def cluster_matcher(cfg: MixinConfig, cluster: str) -> str:
    return f"{cfg.cluster_label}={quote(cluster)}"


def quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def regex_escape(value: str) -> str:
    """A literal inside a PromQL regex string: RE2's escape, then the string's."""
    return re.escape(value).replace("\\", "\\\\")
