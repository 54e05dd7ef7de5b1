"""The PromQL of the cluster's Slurm queue that the recording rules, the dashboards and
the report share: which pending GPUs wait for GPUs, and the unmet demand per partition.

Unmet demand is the GPUs that jobs waiting for GPUs ask for beyond the GPUs the partition
has idle, i.e. how many more GPUs it would need now to start them all. Waiting for GPUs
is Slurm's reason Resources or Priority: Slurm gives Resources only to the jobs at the
head of the queue, the ones it tried to place, and Priority to every job behind them, so
on a full cluster most of the demand reads Priority.

Two agents may read the same Slurm for a while (the source moving to another host); each
then reports the same numbers, so a partition's figure is the larger of the agents'
(`max by` over each agent's own sum), never their sum.
"""

from __future__ import annotations

from nvwatch.mixin.config import MixinConfig

# Pending GPUs that want to start now: not held, not waiting on another job (the
# reasons resources, priority, limits and other).
WAITING = 'reason!~"held|dependency"'
# Pending GPUs waiting for GPUs to free up (see the module docstring).
FOR_GPUS = 'reason=~"resources|priority"'


def reason(name: str) -> str:
    return f'reason="{name}"'


def state(name: str) -> str:
    return f'state="{name}"'


def per_partition(cfg: MixinConfig, by: str, series: str) -> str:
    """`series` summed per agent by `by`, then the larger of the agents' sums."""
    agent = f"{by}, {cfg.instance_label}"
    return f"max by ({by}) (sum by ({agent}) ({series}))"


def unmet(cfg: MixinConfig, *matchers: str) -> str:
    """GPUs wanted by jobs waiting for GPUs beyond the partition's idle GPUs; 0 for
    every partition with GPUs where that is nothing. `matchers` narrow every selector
    (the report's cluster)."""

    def s(*own: str) -> str:
        return cfg.sel(*own, *matchers)

    by = f"{cfg.cluster_label}, partition"
    pending = "nvwatch_scheduler_pending_gpus" + s(FOR_GPUS)
    wanted = per_partition(cfg, by, pending)
    idle = f"max by ({by}) (nvwatch_scheduler_gpus{s(state('idle'))})"
    return f"clamp_min(\n  {wanted}\n  - on ({by})\n  {idle},\n  0\n)\nor {idle} * 0"
