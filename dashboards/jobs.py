"""The jobs dashboard: pick a user or a job, see its GPUs over the job's life and a verdict.

The per-GPU panels and the verdict read the jobs recording rules (alerts/recording_jobs):
each GPU a job holds, joined once a minute with `nvwatch_gpu_allocation_info` and
carrying the job's labels. Joined at query time instead, every GPU of the fleet was
evaluated at every step, held or not (45 s for a day's verdicts at a thousand nodes). A
recorded series exists only while the job holds the GPU, so a panel shows the job's life
and nothing before or after it. MIG instances are left out (their allocation names the
instance, whose series NVML reports apart from the GPU's; the node dashboard has them).
The panels show one point a minute, the rules' interval.
"""

from __future__ import annotations

from grafanalib import core as g

from nvwatch.alerts import recording_jobs as held
from nvwatch.alerts.recording_attribution import WHOLE_GPU, allocated, busy
from nvwatch.alerts.recording_straggler import THERMAL_REASONS
from nvwatch.common.durations import parse_duration
from nvwatch.dashboards import thresholds as t
from nvwatch.dashboards.builder import (
    HIDE_TIME_AND_VALUE,
    Grid,
    PanelRow,
    Q,
    dashboard,
    legend,
    variable,
)
from nvwatch.dashboards.jobs_stragglers import JobScope, stragglers_row
from nvwatch.dashboards.links import JOBS, NODE, DataLink, from_label, label_value
from nvwatch.mixin import job_verdicts as v
from nvwatch.mixin.config import MixinConfig
from nvwatch.mixin.job_verdicts import WORDS

# Verdict codes of the verdict table, most urgent first (the first that holds is shown).
# The words are nvwatch job's (mixin/job_verdicts.py): the same condition reads the same
# on the dashboard as in a job's notes.
VERDICTS = (
    (1, WORDS[v.IDLE_GPUS], "red"),
    (2, WORDS[v.THERMAL], "red"),
    (3, WORDS[v.POWER_CAPPED], "orange"),
    (4, WORDS[v.MEMORY_BOUND], "orange"),
    (0, WORDS[v.BUSY], "green"),
)
# the owner labels per-job panels keep: a Slurm job and its user, or a Kubernetes pod
_OWNER = "job_id, user, namespace, pod"
# a Slurm job by its id, a Kubernetes pod by its name (the other is empty)
_JOB_LEGEND = "{{job_id}}{{pod}}"
_GPU_LEGEND = _JOB_LEGEND + " {{instance}} GPU {{gpu}}"


def _allocation(cfg: MixinConfig) -> str:
    """The chosen jobs' GPU allocations (whole GPUs)."""
    return "nvwatch_gpu_allocation_info" + cfg.sel(
        f'{cfg.cluster_label}=~"$cluster"', 'user=~"$user"', 'job_id=~"$job_id"', WHOLE_GPU
    )


def _held(record: str, cfg: MixinConfig) -> str:
    """A jobs recording rule's series of the chosen jobs: one per GPU each holds."""
    return f'{record}{{{cfg.cluster_label}=~"$cluster", user=~"$user", job_id=~"$job_id"}}'


def _of_users(record: str, cfg: MixinConfig) -> str:
    """A jobs recording rule's series of every job of the chosen users."""
    return f'{record}{{{cfg.cluster_label}=~"$cluster", user=~"$user"}}'


def _per_job_node(cfg: MixinConfig) -> str:
    return f"{cfg.cluster_label}, {cfg.instance_label}, {_OWNER}"


def _over_life(cfg: MixinConfig, record: str) -> str:
    """The mean of a recorded series over the time each job of the chosen users held it
    in the dashboard's range, then over the job's GPUs on each node."""
    return f"avg by ({_per_job_node(cfg)}) (avg_over_time({_of_users(record, cfg)}[$__range]))"


def _share_of_life(cfg: MixinConfig, while_active: str) -> str:
    """The largest share of its time on a node that one of a job's GPUs there spent
    with a reason active: its minutes with the reason (a series recorded only then)
    over the job's minutes on the node. The same as the worst GPU's mean of the 0/1
    series over its life, as a job's GPUs are held for its whole life on a node, at a
    read of the throttled minutes only, not of every GPU's every minute."""
    by = _per_job_node(cfg)
    minutes = _of_users(held.OWNER_NODE_UTILIZATION, cfg)
    return (
        f"max by ({by}) (count_over_time({_of_users(while_active, cfg)}[$__range]))\n"
        f"  / on ({by})\n"
        f"  sum by ({by}) (count_over_time({minutes}[$__range]))"
    )


def verdict(cfg: MixinConfig) -> str:
    """The verdict code of each job of the chosen users on each node (VERDICTS), the
    first that holds."""
    # the mean over the job's GPUs on a node, recorded: the mean of their means
    util = _over_life(cfg, held.OWNER_NODE_UTILIZATION)
    memory = _over_life(cfg, held.OWNER_NODE_MEMORY_BUSY)
    # one throttled GPU sets the pace of a multi-GPU job: the worst GPU decides
    thermal = _share_of_life(cfg, held.OWNER_THERMAL_WHILE)
    power = _share_of_life(cfg, held.OWNER_POWER_CAP_WHILE)
    # The last branch is 4 or 0 (busy) for every job: `bool` keeps the jobs below the
    # ratio, so no branch reads the utilization a second time for the busy ones (each
    # read is a day of every job's series; the memory series come from the same NVML
    # call as the utilization ones, so they cover the same jobs).
    branches = (
        f"({util} < {cfg.gpu_allocated_idle_utilization:g}) * 0 + 1",
        f"({thermal} > {cfg.job_throttled_ratio:g}) * 0 + 2",
        f"({power} > {cfg.job_throttled_ratio:g}) * 0 + 3",
        f"({memory} > bool {cfg.job_memory_bound_ratio:g}) * 4",
    )
    return "\nor\n".join(branches)


def _to_node(cfg: MixinConfig, *, gpu: bool) -> DataLink:
    """To the node dashboard of the clicked series' node (and its GPU, for per-GPU rows)."""
    params = [from_label("cluster", cfg.cluster_label), from_label("instance", cfg.instance_label)]
    if gpu:
        params.append(from_label("gpu", "gpu"))
    return DataLink(NODE, f"Node dashboard of {label_value(cfg.instance_label)}", tuple(params))


def _verdict_row(grid: Grid, cfg: MixinConfig) -> None:
    texts = {str(code): {"text": text, "color": colour} for code, text, colour in VERDICTS}
    mappings = [{"type": "value", "options": texts}]
    grid.add(
        "table",
        "Verdict per job",
        "What held each job of the chosen users back over its life in the range, per "
        "node it ran on (every job, whichever the Job variable shows), in the "
        "words of nvwatch job's notes: GPUs held but idle (mean utilization below "
        f"{cfg.gpu_allocated_idle_utilization:.0%}), thermally throttled or power-capped "
        "(the clock-event reason active on one of its GPUs more than "
        f"{cfg.job_throttled_ratio:.0%} of the time), memory-bound (device memory busy more "
        f"than {cfg.job_memory_bound_ratio:.0%} of the time), else busy. The first that "
        "holds is shown; the panels below show why.",
        "none",
        [Q(verdict(cfg), instant=True, table=True)],
        mappings=mappings,
        options={"cellHeight": "sm"},
        transformations=[
            {
                "id": "organize",
                "options": {
                    "excludeByName": {"Time": True},
                    "renameByName": {"Value": "verdict"},
                },
            }
        ],
        links=[_to_node(cfg, gpu=False)],
        w=14,
    )
    # the rules' gauges summed over time are GPU-evaluations: times the interval is time
    interval_s = parse_duration(cfg.evaluation_interval, "evaluation_interval")
    scope = f'{{{cfg.cluster_label}=~"$cluster", user=~"$user"}}'
    grid.add(
        "bargauge",
        "GPU-hours per user in the range",
        "GPU-hours each user held (allocated) and kept busy (held GPUs weighted by their "
        "utilization) in the range, from the recording rules user:nvwatch_gpu_allocated:sum "
        "and user:nvwatch_gpu_busy:sum (docs/alerts.md). A GPU shared by two jobs counts "
        "half for each.",
        "h",
        [
            Q(
                f"sum_over_time({allocated('user')}{scope}[$__range]) * {interval_s:g} / 3600",
                "{{user}} allocated",
                instant=True,
            ),
            Q(
                f"sum_over_time({busy('user')}{scope}[$__range]) * {interval_s:g} / 3600",
                "{{user}} busy",
                instant=True,
            ),
        ],
        min_=0,
        w=10,
    )


def _gpus_row(grid: Grid, cfg: MixinConfig) -> None:
    grid.add(
        "table",
        "GPUs of the chosen jobs",
        "The GPUs each chosen job holds now: node, GPU index and UUID, job, user and "
        "account (Slurm) or pod and namespace (Kubernetes). The Job variable has no All "
        "and opens on the first job of the range: every GPU of every job of a fleet is "
        "more series than a query answers in seconds or a graph shows; pick jobs from "
        "the verdict table.",
        "none",
        [Q(_allocation(cfg), instant=True, table=True)],
        transformations=HIDE_TIME_AND_VALUE,
        links=[_to_node(cfg, gpu=True)],
        w=24,
        h=6,
    )


def _activity_row(grid: Grid, cfg: MixinConfig) -> None:
    grid.add(
        "timeseries",
        "GPU utilization",
        "Share of time a kernel ran on each of the job's GPUs. Flat near 0 is a GPU the job "
        "holds and does not use (NvwatchGpuAllocatedIdle after "
        f"{cfg.gpu_allocated_idle_for}); one GPU below the others waits on them.",
        "percentunit",
        [Q(_held(held.OWNER_UTILIZATION, cfg), _GPU_LEGEND)],
        steps=t.utilization(cfg),
        min_=0,
        max_=1,
        w=8,
    )
    grid.add(
        "timeseries",
        "GPU memory used",
        "Device memory in use on each of the job's GPUs. Memory held while utilization is "
        "near 0 is a job that loaded its model and waits.",
        "bytes",
        [Q(_held(held.OWNER_MEMORY_USED, cfg), _GPU_LEGEND)],
        min_=0,
        w=8,
    )
    grid.add(
        "timeseries",
        "GPU power",
        "Board power of each of the job's GPUs. Flat at the power limit with "
        "sw_power_cap active is a power-capped job.",
        "watt",
        [Q(_held(held.OWNER_POWER, cfg), _GPU_LEGEND)],
        min_=0,
        w=8,
    )


def _throttle_row(grid: Grid, cfg: MixinConfig) -> None:
    for title, reasons, record, what in (
        (
            "Thermal slowdown active",
            THERMAL_REASONS,
            held.OWNER_THERMAL,
            "a cooling problem, not the job's",
        ),
        (
            "Power cap active",
            held.POWER_REASONS,
            held.OWNER_POWER_CAP,
            "the job draws what the board's limit allows",
        ),
    ):
        grid.add(
            "timeseries",
            title,
            f"1 while {reasons.replace('|', ' or ')} holds the clocks of one of the job's "
            f"GPUs down: {what}.",
            "none",
            [Q(_held(record, cfg), _GPU_LEGEND)],
            steps=t.ANY_WARN,
            min_=0,
            max_=1,
            w=8,
        )
    grid.add(
        "timeseries",
        "Memory controller busy",
        "Share of time device memory was read or written on each of the job's GPUs "
        f"(utilization.memory). Above {cfg.job_memory_bound_ratio:.0%} for the job's life "
        "the verdict is memory-bound.",
        "percentunit",
        [Q(_held(held.OWNER_MEMORY_BUSY, cfg), _GPU_LEGEND)],
        min_=0,
        max_=1,
        w=8,
    )


def _fabric_row(grid: Grid, cfg: MixinConfig) -> None:
    grid.add(
        "timeseries",
        "NVLink transmit per GPU",
        "Bytes per second each of the job's GPUs sends over all its NVLink links: the "
        "job's all-reduce traffic inside the node.",
        "Bps",
        [Q(_held(held.OWNER_NVLINK_TRANSMIT, cfg), _GPU_LEGEND)],
        min_=0,
    )
    node = f"{cfg.cluster_label}, {cfg.instance_label}"
    ib = f'{{{cfg.cluster_label}=~"$cluster"}}'
    grid.add(
        "timeseries",
        "InfiniBand traffic of the job's nodes",
        "Bytes per second the nodes the job runs on send and receive over InfiniBand, while "
        "the job runs there. IB ports serve the whole node: other jobs on the same node add "
        "to it.",
        "Bps",
        [
            Q(
                f"max by ({node}, {_OWNER}) ({_allocation(cfg)})\n"
                f"  * on ({node}) group_left ()\n  instance:nvwatch_ib_port_{way}_bytes:rate{ib}",
                f"{_JOB_LEGEND} {legend(cfg.instance_label)} {way}",
            )
            for way in ("transmit", "receive")
        ],
        min_=0,
    )


def _stragglers_row(grid: Grid, cfg: MixinConfig) -> None:
    scope = JobScope(
        _allocation(cfg), _to_node(cfg, gpu=False), _to_node(cfg, gpu=True), _JOB_LEGEND
    )
    stragglers_row(grid, cfg, scope)


def _job_variables(cfg: MixinConfig) -> list[g.Template]:
    base = [cfg.job_selector, f'{cfg.cluster_label}=~"$cluster"', WHOLE_GPU]

    def owner(name: str, label: str, scope: list[str], *, every: bool) -> g.Template:
        return g.Template(
            name=name,
            label=label,
            query=f"label_values(nvwatch_gpu_allocation_info{{{', '.join(scope)}}}, {name})",
            multi=True,
            includeAll=every,
            allValue=".*" if every else None,
            refresh=2,
            sort=1,
        )

    return [
        variable(cfg, cfg.cluster_label, "Cluster"),
        owner("user", "User", base, every=True),
        # no "All": every GPU of every job of a busy fleet is more series than a query
        # answers in seconds or a graph shows (docs/scale.md); Grafana opens on the first
        owner("job_id", "Job", [*base, 'user=~"$user"'], every=False),
    ]


# Top to bottom, as the grid lays them out.
_PANELS: tuple[PanelRow, ...] = (
    _verdict_row,
    _gpus_row,
    _activity_row,
    _throttle_row,
    _fabric_row,
    _stragglers_row,
)


def jobs(cfg: MixinConfig) -> g.Dashboard:
    return dashboard(
        cfg,
        JOBS,
        "nvwatch / Jobs",
        "A verdict for every job of the chosen users (GPU attribution: --attribution "
        "slurm|kubernetes); pick jobs for their GPUs' utilization, memory, power and "
        "fabric traffic over their lives, and the rank that holds a synchronous job back.",
        _PANELS,
        _job_variables(cfg),
    )
