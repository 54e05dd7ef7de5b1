"""The jobs group: capacity a job or pod holds and does not use, and the rank that holds
a multi-GPU job back (GPU attribution)."""

from __future__ import annotations

from nvwatch.alerts.recording_attribution import WHOLE_GPU
from nvwatch.alerts.rules.base import Alert, AlertGroup, Kind, Runbook, Severity, where_gpu
from nvwatch.alerts.rules.straggler import job_straggler
from nvwatch.mixin.config import MixinConfig

# Whose GPU it is, in the words of the scheduler that placed it: a Slurm job (with its
# user where attribution knows it) or a Kubernetes pod.
OWNER = (
    "{{ if $labels.job_id }}job {{ $labels.job_id }}"
    "{{ if $labels.user }} of {{ $labels.user }}{{ end }}"
    "{{ else }}pod {{ $labels.namespace }}/{{ $labels.pod }}{{ end }}"
)


def allocated_idle(cfg: MixinConfig) -> Alert:
    s = cfg.sel
    gpu = f"{cfg.cluster_label}, {cfg.instance_label}, gpu"
    threshold = cfg.gpu_allocated_idle_utilization
    return Alert(
        "NvwatchGpuAllocatedIdle",
        # the allocation is the many side (one result per owner of a shared GPU); the
        # value is the GPU's utilization, which the description shows
        f"nvwatch_gpu_allocation_info{s(WHOLE_GPU)}\n"
        f"  * on ({gpu}) group_left ()\n"
        f"  (avg_over_time(nvwatch_gpu_utilization_ratio{s()}[{cfg.rate_window}])"
        f" < {threshold:g})",
        cfg.gpu_allocated_idle_for,
        Severity.INFO,
        "A GPU allocated to a job is idle.",
        f"{where_gpu(cfg)} is allocated to {OWNER} and has run below "
        f"{threshold:.0%} utilization for {cfg.gpu_allocated_idle_for} "
        "(now {{ $value | humanizePercentage }}).",
        Runbook(
            "A Slurm job or Kubernetes pod holds this GPU (nvwatch_gpu_allocation_info) "
            f"and has kept it below {threshold:.0%} busy, averaged over "
            f"{cfg.rate_window}, for {cfg.gpu_allocated_idle_for}: nobody else can use "
            "it. Typical causes: an interactive session or notebook left open, a job "
            "waiting on something (data, a license, another job), a job that asked for "
            "more GPUs than its code uses, a hung process.",
            "Jobs dashboard, the job's *Verdict* and *GPU utilization* panels: is only "
            "this GPU of the job idle (the code uses fewer GPUs than it asked for) or "
            "all of them (the job waits or hangs)? `squeue -j <job_id>` / `kubectl "
            "describe pod`, and the job's processes in `nvidia-smi` on the node.",
            "Tell the job's owner (the alert names the user or the pod): ask for fewer "
            "GPUs, end the idle session, fix the data pipeline. Site policy may cancel "
            "jobs that hold GPUs idle this long.",
            "Repaired means the job uses the GPU again (its utilization averaged over "
            f"{cfg.rate_window} is {threshold:.0%} or more) or it ended and its allocation "
            "series went away; a new job on the same GPU starts its own hour.",
        ),
        Kind.CONDITION,
    )


def group(cfg: MixinConfig) -> AlertGroup:
    return AlertGroup("nvwatch-jobs", "Jobs", (allocated_idle(cfg), job_straggler(cfg)))
