"""Recording rules that find the rank holding a synchronous multi-GPU job back.

A data-parallel job steps in lockstep: every rank waits in NCCL for the slowest one, so
the waiting ranks stay "busy" (utilization near 100 %) while their power and tensor
activity fall. No per-device threshold finds the culprit; comparing each rank with the
other ranks of its own job does (Minder, NSDI'25). For each signal these rules record,
per rank of a multi-GPU job, its value, the job's median and a robust score:

    score = (gap from the median, in the signal's bad direction - the job's tolerance)
            / max(straggler_mad_multiple x MAD, the signal's smallest gap)

where MAD is the median absolute deviation of the job's ranks. A score of 1 is the
threshold: the rank is farther from its job than the job's own spread and than a gap
that matters. A tight job (MAD near 0) cannot make noise look huge and a noisy one needs
a larger gap. Two ranks (the nodes of a two-node job) are each exactly as far from their
median as their MAD, so a pair is judged by the smallest gap alone. Only GPUs of jobs
that are compared (`RANKS`) produce series.

A rank is a GPU (clock, activity, PCIe, NVLink), a node (host CPU) or an IB port, each
joined to the job through nvwatch_gpu_allocation_info; node and port signals count
only nodes that hold one job alone, whose CPUs and ports are that job's.
"""

from __future__ import annotations

from dataclasses import dataclass

from nvwatch.alerts.recording import (
    GPU_NVLINK_TRANSMIT,
    LINKS_WITH_ERRORS,
    RecordingGroup,
    RecordingRule,
)
from nvwatch.alerts.recording_attribution import WHOLE_GPU
from nvwatch.mixin.config import MixinConfig

RANKS = "job:nvwatch_straggler_ranks:count"
RANK = "job_gpu:nvwatch_straggler_rank:info"
NODE = "job_node:nvwatch_straggler_node:info"
TOLERANCE = "job:nvwatch_straggler_tolerance:ratio"
SLOWDOWN = "job:nvwatch_straggler_slowdown:ratio"

# clock event reasons that name the cause of a low clock (NVML's throttle reasons);
# hw_slowdown alone, without the thermal or brake flag, says nothing more: clock-other
THERMAL_REASONS = "sw_thermal_slowdown|hw_thermal_slowdown"
POWER_REASONS = "sw_power_cap|hw_power_brake"
WITH_JOB_ID = 'job_id!=""'


@dataclass(frozen=True)
class Signal:
    """One per-rank signal: `value` (labelled as a rank of its level) and how to judge it."""

    level: str  # job_gpu, job_node or job_port: what a rank is
    metric: str
    operation: str
    value: str
    higher_is_worse: bool
    floor: float  # the smallest gap that counts, in the value's unit
    # load-driven: a pipeline-parallel job's stages differ in it by design
    load: bool = True
    # compared with the job's GPUs on the same node rather than the whole job
    per_node: bool = False

    @property
    def record(self) -> str:
        return f"{self.level}:{self.metric}:{self.operation}"

    @property
    def median(self) -> str:
        level = "job_node" if self.per_node else "job"
        return f"{level}:{self.metric}:{self.operation}_median"

    @property
    def score(self) -> str:
        return f"{self.level}:{self.metric}:straggler_score"


def job_by(cfg: MixinConfig) -> str:
    return f"{cfg.cluster_label}, job_id"


def gpu_on(cfg: MixinConfig) -> str:
    return f"{cfg.cluster_label}, {cfg.instance_label}, gpu"


def _allocations(cfg: MixinConfig) -> str:
    """Whole GPUs held by a job with an id (a Kubernetes pod has none to group by)."""
    return f"nvwatch_gpu_allocation_info{cfg.sel(WHOLE_GPU, WITH_JOB_ID)}"


def ranks_rule(cfg: MixinConfig) -> RecordingRule:
    """Jobs that are compared: enough GPUs, past their warm-up, and running steps."""
    alloc = _allocations(cfg)
    by = job_by(cfg)
    # the lowest of the window: a pause of every rank (a checkpoint) dominates the
    # window's averages, and the rank that pauses longest (the one writing the
    # checkpoint's index) is no straggler; the job is judged again once it has left
    utilization = (
        f"{alloc} * on ({gpu_on(cfg)}) group_left ()\n"
        f"      min_over_time(nvwatch_gpu_utilization_ratio{cfg.sel()}[{cfg.rate_window}])"
    )
    return RecordingRule(
        RANKS,
        # GPUs, not owners: a GPU two steps of one job share is one rank
        f"count by ({by}) (group by ({gpu_on(cfg)}, job_id) ({alloc}))"
        f" >= {cfg.straggler_min_gpus}\n"
        # the job was there straggler_warmup ago: its own first minutes are over
        f"and on ({by}) group by ({by}) ({alloc} offset {cfg.straggler_warmup})\n"
        # a checkpoint or a stall on every rank drops every rank's utilization alike
        f"and on ({by}) (\n    quantile by ({by}) (0.5,\n      {utilization}\n    )\n"
        f"  ) >= {cfg.straggler_busy_utilization:g}",
    )


def rank_rule(cfg: MixinConfig) -> RecordingRule:
    labels = f"{gpu_on(cfg)}, uuid, job_id"
    return RecordingRule(
        RANK, f"group by ({labels}) ({_allocations(cfg)})\nand on ({job_by(cfg)}) {RANKS}"
    )


def tolerance_rule(cfg: MixinConfig) -> RecordingRule:
    """0 for every compared job, straggler_pipeline_tolerance for a marked one."""
    plain = f"{RANKS} * 0"
    if not cfg.straggler_pipeline_jobs:
        return RecordingRule(TOLERANCE, plain)
    marked = f"nvwatch_gpu_allocation_info{cfg.sel(cfg.straggler_pipeline_jobs)}"
    by = job_by(cfg)
    return RecordingRule(
        TOLERANCE,
        f"({RANKS} and on ({by}) group by ({by}) ({marked})) * 0"
        f" + {cfg.straggler_pipeline_tolerance:g}\nor {plain}",
    )


def on_rank(cfg: MixinConfig, per_gpu: str) -> str:
    """A per-GPU expression as one series per rank: labelled with its job."""
    return f"{RANK} * on ({gpu_on(cfg)}) group_left () (\n  {per_gpu}\n)"


def signal_rules(cfg: MixinConfig, s: Signal) -> tuple[RecordingRule, ...]:
    by = job_by(cfg)
    if s.per_node:
        by = f"{cfg.cluster_label}, {cfg.instance_label}, job_id"
    v, m = s.record, s.median
    # the gap in the bad direction, labelled as the rank
    if s.higher_is_worse:
        gap = f"{v} - on ({by}) group_left () {m}"
    else:
        gap = f"{m} - on ({by}) group_right () {v}"
    spread = f"quantile by ({by}) (0.5, abs({v} - on ({by}) group_left () {m}))"
    # two ranks are each exactly as far from their median as their MAD, so neither
    # could ever stand out: a pair (two nodes of a job) is judged by the floor alone
    ranks = f"count by ({by}) ({v})"
    spread = f"(\n  {spread}\n  and on ({by}) {ranks} > 2\n) or on ({by}) {ranks} * 0"
    if s.per_node:
        # a share of the node's median: NVLink bytes differ with a node's GPU count
        positive = f"({m} > 0)"
        gap = f"({gap}) / on ({by}) group_left () {positive}"
        spread = f"{spread} / {positive}"
    if s.load:
        gap = f"({gap}) - on ({job_by(cfg)}) group_left () {TOLERANCE}"
    score = (
        f"(\n  {gap}\n)\n/ on ({by}) group_left ()\n"
        f"  clamp_min({cfg.straggler_mad_multiple:g} * {spread}, {s.floor:g})"
    )
    return (
        RecordingRule(v, s.value),
        RecordingRule(m, f"quantile by ({by}) (0.5, {v})"),
        RecordingRule(s.score, score),
    )


def clock(cfg: MixinConfig) -> Signal:
    sm = cfg.sel('clock="sm"')
    return Signal(
        "job_gpu",
        "nvwatch_gpu_sm_clock",
        "ratio",
        on_rank(
            cfg,
            f"avg_over_time(nvwatch_gpu_clock_hertz{sm}[{cfg.rate_window}])\n"
            f"  / nvwatch_gpu_clock_max_hertz{sm}",
        ),
        higher_is_worse=False,
        floor=cfg.straggler_clock_deviation,
    )


def activity(cfg: MixinConfig) -> Signal:
    """Tensor activity where the board has GPM; power over its enforced limit elsewhere."""
    w = cfg.rate_window
    return Signal(
        "job_gpu",
        "nvwatch_gpu_activity",
        "ratio",
        on_rank(
            cfg,
            f"avg_over_time(nvwatch_gpu_tensor_active_ratio{cfg.sel()}[{w}])\n"
            f"or on ({gpu_on(cfg)})\n"
            f"  avg_over_time(nvwatch_gpu_power_watts{cfg.sel()}[{w}])\n"
            f"  / nvwatch_gpu_power_limit_watts{cfg.sel()}",
        ),
        higher_is_worse=True,
        floor=cfg.straggler_activity_deviation,
    )


def job_group(cfg: MixinConfig) -> RecordingGroup:
    """Which jobs and GPUs are compared, the clock and activity signals, the slowdown."""
    rules = [ranks_rule(cfg), rank_rule(cfg), tolerance_rule(cfg)]
    for signal in (clock(cfg), activity(cfg)):
        rules += signal_rules(cfg, signal)
    rules.append(slowdown_rule(cfg))
    return RecordingGroup("nvwatch-straggler-jobs.rules", tuple(rules))


def slowdown_rule(cfg: MixinConfig) -> RecordingRule:
    """How much of its speed the job loses: the largest of three readings (0 at least).

    - peers: a rank that never waits is busy all of a step and its waiting peers a
      share of it, so 1 - median / busiest activity is the share of each step spent
      waiting (not for a pipeline-parallel job, whose stages differ by design);
    - clock: a compute-bound step lasts as long as the slowest clock makes it;
    - history: a fault in the fabric or a host slows every rank alike, which only the
      job's own median activity at its best in straggler_baseline_window shows.
    """
    by = job_by(cfg)
    act, clk = activity(cfg), clock(cfg)
    readings = {
        "peers": f"1 - {act.median} / max by ({by}) ({act.record})\n"
        f"    unless on ({by}) ({TOLERANCE} > 0)",
        "clock": f"1 - min by ({by}) ({clk.record}) / {clk.median}",
        "history": f"1 - {act.median}\n"
        f"    / max_over_time({act.median}[{cfg.straggler_baseline_window}])",
        "none": f"{RANKS} * 0",
    }
    parts = [
        f'label_replace(\n    {expr},\n    "reading", "{name}", "", ""\n  )'
        for name, expr in readings.items()
    ]
    return RecordingRule(SLOWDOWN, f"max by ({by}) (\n  " + "\n  or ".join(parts) + "\n)")


def link_signals(cfg: MixinConfig) -> tuple[Signal, ...]:
    """PCIe and NVLink of each GPU: structural (width, links up, errors) and traffic."""
    s, w, g = cfg.sel, cfg.rate_window, gpu_on(cfg)
    current = s('kind="current"')
    links_up = Signal(
        "job_gpu",
        "nvwatch_nvlink_up",
        "sum",
        on_rank(cfg, f"sum by ({g}) (nvwatch_nvlink_up{s()})"),
        higher_is_worse=False,
        floor=1,
        load=False,
    )
    return (
        # bandwidth in halvings: every PCIe generation from Gen2 on doubles a lane's rate;
        # the best of the window, since an idle GPU trains its link down by design
        Signal(
            "job_gpu",
            "nvwatch_gpu_pcie_link",
            "log2_bandwidth",
            on_rank(
                cfg,
                f"max_over_time(nvwatch_gpu_pcie_link_generation{current}[{w}])\n"
                f"  + log2(max_over_time(nvwatch_gpu_pcie_link_width{current}[{w}]))",
            ),
            higher_is_worse=False,
            floor=cfg.straggler_link_halvings,
            load=False,
        ),
        links_up,
        Signal(
            "job_gpu",
            "nvwatch_nvlink_errors",
            "rate",
            # replays and recoveries: the retransmissions and retraining that cost a link
            # its bandwidth (a CRC error shows as a replay), from the links recorded with
            # errors; 0 for a rank whose links have none (the rule above, evaluated
            # first, has every rank with links)
            on_rank(cfg, f'sum by ({g}) ({LINKS_WITH_ERRORS}{{type=~"replay|recovery"}})')
            + f"\nor {links_up.record} * 0",
            higher_is_worse=True,
            floor=cfg.nvlink_error_rate_per_second,
            load=False,
        ),
        Signal(
            "job_gpu",
            "nvwatch_nvlink_transmit_bytes",
            "rate",
            on_rank(cfg, f"sum by ({g}) ({GPU_NVLINK_TRANSMIT})"),
            higher_is_worse=False,
            floor=cfg.straggler_nvlink_throughput_deficit,
            per_node=True,
        ),
    )


def link_group(cfg: MixinConfig) -> RecordingGroup:
    rules = [r for signal in link_signals(cfg) for r in signal_rules(cfg, signal)]
    return RecordingGroup("nvwatch-straggler-links.rules", tuple(rules))


def node_rule(cfg: MixinConfig) -> RecordingRule:
    """Nodes of a compared job that hold no other allocation: their CPUs and IB ports
    are the job's alone (a port of a shared node would be blamed on every job there)."""
    node = f"{cfg.cluster_label}, {cfg.instance_label}"
    owners = f"count by ({node}, job_id, namespace, pod) (nvwatch_gpu_allocation_info{cfg.sel()})"
    return RecordingRule(
        NODE,
        f"group by ({node}, job_id) ({RANK})\nand on ({node}) count by ({node}) ({owners}) == 1",
    )


def on_node(cfg: MixinConfig, per_node: str, also: str = "") -> str:
    """A per-node (per-port with `also`) expression labelled with the node's job."""
    node = f"{cfg.cluster_label}, {cfg.instance_label}"
    return f"{NODE} * on ({node}) group_right (job_id)\n  max by ({node}{also}) ({per_node})"


def node_signals(cfg: MixinConfig) -> tuple[Signal, ...]:
    w, ib = cfg.rate_window, cfg.ib_sel()
    port = ", device, port"
    active = f"nvwatch_ib_port_state{ib} == 4"
    return (
        Signal(
            "job_node",
            "nvwatch_host_cpu_utilization",
            "ratio",
            on_node(cfg, f"avg_over_time(nvwatch_host_cpu_utilization_ratio{cfg.sel()}[{w}])"),
            higher_is_worse=True,
            floor=cfg.straggler_host_cpu_deviation,
        ),
        # share of the window the port had data and no credits (as NvwatchIbCongestion)
        Signal(
            "job_port",
            "nvwatch_ib_port_transmit_wait",
            "ratio",
            on_node(
                cfg,
                f"rate(nvwatch_ib_port_transmit_wait_total{ib}[{w}])"
                f" * {cfg.ib_transmit_wait_tick_seconds:g}",
                port,
            ),
            higher_is_worse=True,
            floor=cfg.ib_transmit_wait_ratio,
        ),
        # an active port trained down (width or speed): its rate in halvings
        Signal(
            "job_port",
            "nvwatch_ib_port_rate",
            "log2_bandwidth",
            on_node(
                cfg,
                f"log2(nvwatch_ib_port_rate_bytes_per_second{ib})\n    and {active}",
                port,
            ),
            higher_is_worse=False,
            floor=cfg.straggler_link_halvings,
            load=False,
        ),
    )


def node_group(cfg: MixinConfig) -> RecordingGroup:
    rules = [node_rule(cfg)]
    rules += [r for signal in node_signals(cfg) for r in signal_rules(cfg, signal)]
    return RecordingGroup("nvwatch-straggler-nodes.rules", tuple(rules))


def straggler_groups(cfg: MixinConfig) -> tuple[RecordingGroup, ...]:
    return (job_group(cfg), link_group(cfg), node_group(cfg))
