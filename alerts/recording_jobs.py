"""Recording rules for the jobs dashboard: each GPU a job holds, with the job's labels.

The dashboard's verdict and per-GPU panels join `nvwatch_gpu_allocation_info` with a GPU
series. Joined at query time, the GPU side is evaluated for every GPU of the fleet at
every step of the range, held or not: with a thousand nodes, 45 s for a day's verdict
table. Recorded here once a minute, only the GPUs some job holds are kept, and a panel
reads them with the job's labels already on.

The allocation is the many side of each join (a GPU shared by two jobs gives one result
per job), and a recorded series exists only while the job holds the GPU, so a mean over
a range is the mean over the job's life in it, as the query-time join gave.
"""

from __future__ import annotations

from nvwatch.alerts.recording import GPU_NVLINK_TRANSMIT, RecordingGroup, RecordingRule
from nvwatch.alerts.recording_attribution import WHOLE_GPU
from nvwatch.alerts.recording_straggler import THERMAL_REASONS
from nvwatch.mixin.config import MixinConfig

# the software power cap only (the straggler rules' POWER_REASONS also count the board's
# power brake)
POWER_REASONS = "sw_power_cap"

OWNER_UTILIZATION = "owner_gpu:nvwatch_gpu_utilization_ratio"
OWNER_MEMORY_BUSY = "owner_gpu:nvwatch_gpu_memory_utilization_ratio"
OWNER_MEMORY_USED = "owner_gpu:nvwatch_gpu_memory_used_bytes"
OWNER_POWER = "owner_gpu:nvwatch_gpu_power_watts"
OWNER_THERMAL = "owner_gpu:nvwatch_gpu_thermal_slowdown_active"
OWNER_POWER_CAP = "owner_gpu:nvwatch_gpu_power_cap_active"
OWNER_NVLINK_TRANSMIT = "owner_gpu:nvwatch_nvlink_transmit_bytes:rate"
# the mean over a job's GPUs on each node: what the verdict table reads for every job of
# the range, an eighth of the series of its GPUs'
OWNER_NODE_UTILIZATION = "owner:nvwatch_gpu_utilization_ratio:avg"
OWNER_NODE_MEMORY_BUSY = "owner:nvwatch_gpu_memory_utilization_ratio:avg"
# the per-GPU reasons again, only while active: a day of every job's GPUs is then the
# throttled minutes alone, which the verdict table sums (a GPU never throttled, most of
# them, has no series); the job's minutes on the node come from OWNER_NODE_UTILIZATION
OWNER_THERMAL_WHILE = "owner_gpu:nvwatch_gpu_thermal_slowdown_active:while"
OWNER_POWER_CAP_WHILE = "owner_gpu:nvwatch_gpu_power_cap_active:while"


def jobs_group(cfg: MixinConfig) -> RecordingGroup:
    gpu = f"{cfg.cluster_label}, {cfg.instance_label}, gpu"
    held = f"nvwatch_gpu_allocation_info{cfg.sel(WHOLE_GPU)}"

    def on_held(record: str, per_gpu: str) -> RecordingRule:
        return RecordingRule(record, f"{held}\n  * on ({gpu}) group_left ()\n  {per_gpu}")

    def reason_active(reasons: str) -> str:
        """1 while any of `reasons` holds the GPU's clocks down."""
        active = "nvwatch_gpu_clock_event_active" + cfg.sel(f'reason=~"{reasons}"')
        return f"max by ({gpu}) ({active})"

    rules = (
        on_held(OWNER_UTILIZATION, f"nvwatch_gpu_utilization_ratio{cfg.sel()}"),
        on_held(OWNER_MEMORY_BUSY, f"nvwatch_gpu_memory_utilization_ratio{cfg.sel()}"),
        on_held(OWNER_MEMORY_USED, f"nvwatch_gpu_memory_used_bytes{cfg.sel()}"),
        on_held(OWNER_POWER, f"nvwatch_gpu_power_watts{cfg.sel()}"),
        on_held(OWNER_THERMAL, reason_active(THERMAL_REASONS)),
        on_held(OWNER_POWER_CAP, reason_active(POWER_REASONS)),
        on_held(OWNER_NVLINK_TRANSMIT, f"sum by ({gpu}) ({GPU_NVLINK_TRANSMIT})"),
        # read back from this group's own rules above, evaluated before these
        RecordingRule(OWNER_NODE_UTILIZATION, f"avg without (gpu, uuid) ({OWNER_UTILIZATION})"),
        RecordingRule(OWNER_NODE_MEMORY_BUSY, f"avg without (gpu, uuid) ({OWNER_MEMORY_BUSY})"),
        RecordingRule(OWNER_THERMAL_WHILE, f"{OWNER_THERMAL} == 1"),
        RecordingRule(OWNER_POWER_CAP_WHILE, f"{OWNER_POWER_CAP} == 1"),
    )
    return RecordingGroup("nvwatch-jobs.rules", rules)


def doc_lines(cfg: MixinConfig) -> list[str]:
    """The jobs rules' section of docs/alerts.md."""
    rows = (
        (OWNER_UTILIZATION, "the GPU's utilization"),
        (OWNER_MEMORY_BUSY, "the share of time its memory was read or written"),
        (OWNER_MEMORY_USED, "its memory used, bytes"),
        (OWNER_POWER, "its board power, watts"),
        (OWNER_THERMAL, f"1 while {THERMAL_REASONS.replace('|', ' or ')} holds its clocks"),
        (OWNER_POWER_CAP, f"1 while {POWER_REASONS} holds its clocks"),
        (OWNER_NVLINK_TRANSMIT, "bytes per second it sends over all its NVLink links"),
    )
    per_node = (
        (OWNER_NODE_UTILIZATION, "the mean utilization of the job's GPUs on the node"),
        (OWNER_NODE_MEMORY_BUSY, "the mean share of time their memory was busy"),
    )
    while_active = (
        (OWNER_THERMAL_WHILE, f"`{OWNER_THERMAL}`, only while 1"),
        (OWNER_POWER_CAP_WHILE, f"`{OWNER_POWER_CAP}`, only while 1"),
    )
    return [
        "",
        "## Each GPU a job holds (recording rules)",
        "",
        "With GPU attribution on, the group `nvwatch-jobs.rules` records every "
        f"evaluation interval ({cfg.evaluation_interval}), for each whole GPU a job or pod "
        "holds, one of the GPU's series with the allocation's labels: what the jobs "
        "dashboard's verdict and per-GPU panels read. A series exists while the job "
        "holds the GPU; a GPU two owners share has one per owner. Recorded, a day of "
        "verdicts reads the GPUs jobs held; joined at query time it read every GPU of "
        "the fleet at every step (45 s at a thousand nodes, docs/scale.md).",
        "",
        "| rule | labels | value |",
        "|---|---|---|",
        *(f"| `{name}` | the allocation's (node, GPU, owner) | {what} |" for name, what in rows),
        *(f"| `{name}` | the allocation's but the GPU's | {what} |" for name, what in per_node),
        *(f"| `{name}` | the allocation's (node, GPU, owner) | {what} |"
          for name, what in while_active),
        "",
        "The verdict table's throttling branches read the last two over a day of every "
        "job: the throttled minutes alone, over the job's minutes on the node (counted "
        f"from `{OWNER_NODE_UTILIZATION}`), instead of every held GPU's every minute.",
    ]  # fmt: skip
