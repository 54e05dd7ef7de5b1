"""The scheduler source, declared (agent/sources/declaration.py): the cluster's Slurm,
chosen by `--sources scheduler` on one agent per cluster, never on by default."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nvwatch.agent.catalogue import Scope
from nvwatch.agent.sources.declaration import BuildContext, SourceDeclaration

if TYPE_CHECKING:
    from nvwatch.agent.config import AgentConfig
    from nvwatch.agent.sources.scheduler.source import SchedulerSource


def build(config: AgentConfig, context: BuildContext) -> SchedulerSource:
    """The cluster's Slurm, read on its own thread every --scheduler-interval."""
    from nvwatch.agent.sources.scheduler.fairshare import read_fairshare
    from nvwatch.agent.sources.scheduler.slurm_commands import MIB, SlurmClient
    from nvwatch.agent.sources.scheduler.source import SchedulerSource

    # --simulate simulates a node, not Slurm: the real Slurm is read only where SLURM_CONF
    # names it, never the host's own cluster found in the standard locations
    client = (
        SlurmClient(
            config.scheduler_max_output_mib * MIB,
            conf_paths=(),
            conf_note="with --simulate only SLURM_CONF is read",
        )
        if config.simulate
        else SlurmClient(config.scheduler_max_output_mib * MIB)
    )
    return SchedulerSource(
        interval=config.scheduler_interval,
        timeout=config.scheduler_timeout,
        max_accounts=config.scheduler_max_accounts,
        max_users=config.scheduler_max_users,
        fairshare=read_fairshare,
        client=client,
        # the first poll waits for the first read, within the poller's deadline
        first_wait=0.9 * config.timeout,
    )


DECLARATION = SourceDeclaration(
    name="scheduler",
    scopes=(
        Scope.SCHEDULER_PARTITION,
        Scope.SCHEDULER_DEMAND,
        Scope.SCHEDULER_USER,
        Scope.SCHEDULER_ACCOUNT,
        Scope.SCHEDULER_ACCOUNT_WAIT,
    ),
    factory=build,
    sample="nvwatch.agent.sources.scheduler.model:SchedulerSample",
    renderer="nvwatch.agent.exposition.scheduler:render",
    # the whole cluster's Slurm: one agent per cluster runs it, by choice
    default=False,
    note="the cluster's Slurm, on one agent per cluster",
)
