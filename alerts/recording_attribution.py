"""Recording rules for GPU-hours per user, account and namespace (GPU attribution).

`nvwatch_gpu_allocation_info` says who holds each GPU; these rules turn it into the
number of GPUs each owner holds ("allocated") and how much of them it keeps busy
("busy": the held share times the GPU's utilization), evaluated every
`evaluation_interval`. A gauge of GPUs summed over time is GPU-time:

    sum_over_time(user:nvwatch_gpu_allocated:sum[30d]) * <evaluation_interval in s> / 3600

is the GPU-hours each user held over 30 days, and the same over `..._busy:sum` the
GPU-hours they kept busy; their ratio is the user's efficiency. The per-owner rules
split a GPU shared by several owners (two jobs in one mapping file, time-sliced pods)
evenly among them, so GPU-hours add up to the GPUs' hours and are never counted twice.
MIG instances are left out: an instance is a fraction of a GPU that NVML gives no
utilization for, and counting it as a GPU would inflate the hours.
"""

from __future__ import annotations

from nvwatch.alerts.recording import RecordingGroup, RecordingRule
from nvwatch.common.durations import parse_duration
from nvwatch.mixin.config import MixinConfig

OWNER_ALLOCATED = "owner:nvwatch_gpu_allocated:share"
OWNER_BUSY = "owner:nvwatch_gpu_busy:share"
# (level, the owner labels it keeps besides the cluster): the recorded names are
# `<level>:nvwatch_gpu_allocated:sum` and `<level>:nvwatch_gpu_busy:sum`
OWNER_LEVELS = (
    ("user", "scheduler, user"),
    ("account", "scheduler, account"),
    ("namespace", "namespace"),
)
# A MIG device's allocation carries the instance's own uuid, "MIG-..." (NVML's form).
WHOLE_GPU = 'uuid!~"MIG-.*"'


def allocated(level: str) -> str:
    return f"{level}:nvwatch_gpu_allocated:sum"


def busy(level: str) -> str:
    return f"{level}:nvwatch_gpu_busy:sum"


def attribution_group(cfg: MixinConfig) -> RecordingGroup:
    gpu = f"{cfg.cluster_label}, {cfg.instance_label}, gpu"
    info = f"nvwatch_gpu_allocation_info{cfg.sel(WHOLE_GPU)}"
    rules = [
        # each owner's share of its GPU: 1, or 1/n for a GPU n owners share
        RecordingRule(
            OWNER_ALLOCATED,
            f"{info}\n  / on ({gpu}) group_left ()\n  count by ({gpu}) ({info})",
        ),
        # the allocation is the many side: a GPU with two owners yields two results
        RecordingRule(
            OWNER_BUSY,
            f"{OWNER_ALLOCATED}\n  * on ({gpu}) group_left ()\n"
            f"  nvwatch_gpu_utilization_ratio{cfg.sel()}",
        ),
    ]
    for level, labels in OWNER_LEVELS:
        by = f"{cfg.cluster_label}, {labels}"
        # an owner label the scheduler has no notion of is empty (Kubernetes has no
        # account): no per-account series that sums every pod
        held = f'{{{level}!=""}}'
        rules += [
            RecordingRule(allocated(level), f"sum by ({by}) ({OWNER_ALLOCATED}{held})"),
            RecordingRule(busy(level), f"sum by ({by}) ({OWNER_BUSY}{held})"),
        ]
    return RecordingGroup("nvwatch-attribution.rules", tuple(rules))


def doc_lines(cfg: MixinConfig) -> list[str]:
    """The GPU-hours section of docs/alerts.md: what each rule records and how to read it."""
    interval = cfg.evaluation_interval
    lines = [
        "",
        "## GPU-hours per user, account and namespace (recording rules)",
        "",
        "With GPU attribution on (`--attribution slurm|kubernetes`), the group "
        "`nvwatch-attribution.rules` records, every evaluation interval "
        f"({interval}), how many GPUs each owner holds and how many it keeps busy "
        "(each held GPU weighted by its utilization). A GPU that several owners share "
        "is split evenly among them; MIG instances are left out (NVML reports no "
        "utilization for them, and an instance is not a GPU).",
        "",
        "| rule | labels | value |",
        "|---|---|---|",
        f"| `{OWNER_ALLOCATED}` | the allocation's (node, GPU, owner) | share of the GPU "
        "the owner holds (1, or 1/n of a GPU n owners share) |",
        f"| `{OWNER_BUSY}` | the same | that share times the GPU's utilization |",
    ]
    for level, labels in OWNER_LEVELS:
        keys = ", ".join(f"`{x.strip()}`" for x in f"{cfg.cluster_label}, {labels}".split(","))
        lines += [
            f"| `{allocated(level)}` | {keys} | GPUs held by each {level} |",
            f"| `{busy(level)}` | {keys} | GPUs kept busy by each {level} |",
        ]
    lines += [
        "",
        "A gauge of GPUs summed over time is GPU-time: multiply by the evaluation "
        "interval in hours.",
        "",
        "```promql",
        "# GPU-hours each user held over the last 30 days, and kept busy",
        f"sum_over_time({allocated('user')}[30d]) * {_seconds(interval)} / 3600",
        f"sum_over_time({busy('user')}[30d]) * {_seconds(interval)} / 3600",
        "# each account's efficiency: busy over allocated GPU-hours",
        f"sum_over_time({busy('account')}[30d]) / sum_over_time({allocated('account')}[30d])",
        "```",
    ]
    return lines


def _seconds(duration: str) -> str:
    return f"{parse_duration(duration, 'evaluation_interval'):g}"
