"""NvwatchJobStraggler: the GPU, node or IB port that holds a synchronous job back.

It reads the straggler scores that alerts/recording_straggler.py records (each rank
against its own job's median) and names one cause per culprit, from a bounded set.
"""

from __future__ import annotations

from nvwatch.alerts.recording_straggler import (
    POWER_REASONS,
    SLOWDOWN,
    THERMAL_REASONS,
    Signal,
    activity,
    clock,
    gpu_on,
    job_by,
    link_signals,
    node_signals,
)
from nvwatch.alerts.rules.base import Alert, Kind, Runbook, Severity, q
from nvwatch.mixin.config import MixinConfig

# every value the alert's `cause` label takes
CAUSES = (
    "power-capped",
    "thermal",
    "clock-other",
    "nvlink",
    "infiniband",
    "pcie",
    "host-cpu",
    "unknown",
)


def _cause(expr: str, cause: str) -> str:
    return f'label_replace(\n    {expr},\n    "cause", "{cause}", "", ""\n  )'


def _standing_out(signal: Signal) -> str:
    return f"{signal.score} >= 1"


def _reason_share(cfg: MixinConfig, reasons: str) -> str:
    """Share of rate_window in which one of `reasons` held the GPU's clocks down."""
    events = f"nvwatch_gpu_clock_event_active{cfg.sel('reason=~' + q(reasons))}"
    return (
        f"max by ({gpu_on(cfg)}) (avg_over_time({events}[{cfg.rate_window}]))"
        f" >= {cfg.straggler_reason_share:g}"
    )


def gpu_causes(cfg: MixinConfig) -> str:
    """One cause per GPU, the first that holds: a low clock with its reason, a PCIe
    link, NVLink, and last a rank that never waits for no reason we can see."""
    slow_clock = _standing_out(clock(cfg))
    pcie, links_up, link_errors, link_bytes = link_signals(cfg)
    nvlink = " or ".join(_standing_out(s) for s in (links_up, link_errors, link_bytes))
    branches = [
        _cause(f"{slow_clock}\n    and on ({gpu_on(cfg)}) {_reason_share(cfg, THERMAL_REASONS)}",
               "thermal"),
        _cause(f"{slow_clock}\n    and on ({gpu_on(cfg)}) {_reason_share(cfg, POWER_REASONS)}",
               "power-capped"),
        _cause(slow_clock, "clock-other"),
        _cause(_standing_out(pcie), "pcie"),
        _cause(nvlink, "nvlink"),
        _cause(_standing_out(activity(cfg)), "unknown"),
    ]  # fmt: skip
    # `or on (the rank)`: a GPU already named by an earlier branch is not named again
    rank = f"{gpu_on(cfg)}, job_id"
    return f"\nor on ({rank})\n  ".join(branches)


def node_causes(cfg: MixinConfig) -> str:
    cpu, wait, rate = node_signals(cfg)
    starved = (
        f"{_standing_out(cpu)}\n    and {cpu.record} >= {cfg.starvation_host_cpu:g}"
    )  # fmt: skip
    return (
        _cause(starved, "host-cpu")
        + "\nor "
        + _cause(f"{_standing_out(wait)} or {_standing_out(rate)}", "infiniband")
    )


WHERE = (
    "{{ if $labels.gpu }}GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.INSTANCE }}"
    "{{ else if $labels.device }}IB port {{ $labels.device }}/{{ $labels.port }} on "
    "{{ $labels.INSTANCE }}{{ else }}the host CPUs of {{ $labels.INSTANCE }}{{ end }}"
)


def job_straggler(cfg: MixinConfig) -> Alert:
    by = job_by(cfg)
    where = WHERE.replace("INSTANCE", cfg.instance_label)
    return Alert(
        "NvwatchJobStraggler",
        # the value is the job's slowdown estimate; the labels name the culprit
        f"(\n  {gpu_causes(cfg)}\nor\n  {node_causes(cfg)}\n)\n"
        f"* 0 + on ({by}) group_left () {SLOWDOWN}",
        cfg.straggler_for,
        Severity.WARNING,
        "One GPU, node or IB port holds a multi-GPU job back.",
        "Job {{ $labels.job_id }} has run at the pace of "
        f"{where} (cause {{{{ $labels.cause }}}}) for {cfg.straggler_for}: an estimated "
        "{{ $value | humanizePercentage }} below its speed, as that rank stands out "
        "from the job's others.",
        _runbook(cfg),
        Kind.CONDITION,
    )


def _runbook(cfg: MixinConfig) -> Runbook:
    return Runbook(
        "A synchronous job (data-parallel training over NCCL) runs at the pace of its "
        "slowest rank: every step waits for it. The waiting ranks still look busy "
        "(they spin in NCCL kernels, utilization near 100 %) while their power, SM "
        "and tensor activity fall, so no per-device threshold shows the culprit. The "
        "rules compare each rank with the median of its own job's ranks instead "
        "(Minder, NSDI'25), and this alert names the one that stands out, with its "
        "cause: **power-capped**, **thermal** or **clock-other** (its SM clock is "
        f"{cfg.straggler_clock_deviation:.0%} of its maximum or more below the job's "
        f"median; a power or thermal clock event reason held it {cfg.straggler_reason_share:.0%} "
        "of the time, or none did), **pcie** (its link trained down: "
        f"{cfg.straggler_link_halvings:g} halving of bandwidth or more below the "
        "job's median GPU), **nvlink** (fewer links up than the job's median GPU, "
        f"NVLink replays and recoveries above it by {cfg.nvlink_error_rate_per_second:g}/s, "
        "or its "
        f"NVLink traffic {cfg.straggler_nvlink_throughput_deficit:.0%} below the job's "
        "GPUs on its node), **infiniband** (a port that waits for credits "
        f"{cfg.ib_transmit_wait_ratio:.0%} of the time more than the job's median port, "
        "or runs at half its rate), **host-cpu** (a node whose CPUs are busy at least "
        f"{cfg.starvation_host_cpu:.0%} and {cfg.straggler_host_cpu_deviation:.0%} "
        "above the job's median node: its input pipeline starves its GPUs) and "
        "**unknown** (a GPU that never waits: its tensor activity, or its power over "
        f"its limit, {cfg.straggler_activity_deviation:.0%} above the median, with "
        "none of the other causes). Each gap must also exceed "
        f"{cfg.straggler_mad_multiple:g} times the job's median absolute deviation, "
        "so a noisy job needs a larger one. A job is compared when it holds at least "
        f"{cfg.straggler_min_gpus} whole GPUs, is older than {cfg.straggler_warmup} "
        "and its median GPU was at least "
        f"{cfg.straggler_busy_utilization:.0%} busy at every sample of the last "
        f"{cfg.rate_window}: a job slowed everywhere, a "
        "checkpoint or a filesystem stall on every rank, a job's first minutes and a "
        "single-GPU job raise nothing. The value is the job's slowdown estimate "
        "(docs/alerts.md, *Job stragglers*).",
        "Jobs dashboard, the job's per-GPU panels: the culprit is the one GPU whose "
        "SM clock is low while its power or tensor activity stays high and its peers' "
        "fall (clock causes), or the node or port whose link, traffic or CPU differs "
        "from the job's others. The recorded score of each rank is "
        "`job_gpu:<signal>:straggler_score` (1 = the threshold); `nvidia-smi -q -d "
        "PERFORMANCE,CLOCK,POWER,PCIE` on the node, `nvidia-smi nvlink -s`, "
        "`perfquery -x` on the port.",
        "Requeue the job without the node (`scontrol requeue`, or `--exclude` it) if "
        "its owner wants the speed back now. Then by cause: power-capped: the power "
        "limit (`nvidia-smi -pl`) or a brake; thermal: the GPU's cooling; clock-other: "
        "locked clocks (`nvidia-smi -rgc -rac`), else a ticket; pcie: reseat the GPU; "
        "nvlink: drain, reset, ticket; infiniband: the port's cable and switch port "
        "(`ibdiagnet`); host-cpu: the job's data loaders and other processes on the "
        "host; unknown: `dcgmi diag -r 3` on the drained GPU.",
        "Repaired means the culprit no longer stands out from its job (the job ends, "
        "or it is requeued without the node, or the part is fixed): the alert "
        "resolves at the next evaluation.",
    )
