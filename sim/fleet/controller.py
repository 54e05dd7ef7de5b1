"""The simulated fleet's Slurm controller: the one agent of the cluster that runs
`--sources scheduler`, reading the fleet's queue through its simulated client commands.

As on a real cluster, where one agent on the controller (or a login node) reads Slurm
for everyone, the fleet's queue (queue.py) is read by an agent of its own on
BASE + N + 1 (right after the management host), its target `instance` CONTROLLER. It is
the real scheduler source, built as `serve --sources scheduler` builds it (the registry's
options), with two differences a simulation needs: its PATH starts with the queue's
squeue, sinfo and sshare (slurm.py), and its clock is the queue's, in Unix
seconds (the fleet's simulated time may run faster than real time). Its exposition says
it is simulated (`nvwatch_agent_simulated{profile="slurm"}`).
"""

from __future__ import annotations

from nvwatch.agent.app import Agent
from nvwatch.agent.config import AgentConfig, format_listen
from nvwatch.agent.server import MetricsServer
from nvwatch.agent.sources.scheduler.fairshare import read_fairshare
from nvwatch.agent.sources.scheduler.source import SchedulerSource
from nvwatch.sim.fleet.slurm import SlurmCommands
from nvwatch.sim.history.scheduler import CONTROLLER

SIMULATED = "slurm"  # the controller's `nvwatch_agent_simulated` profile


class SlurmController:
    """An agent whose one source is the scheduler's, over the fleet's simulated Slurm."""

    def __init__(
        self, commands: SlurmCommands, host: str, port: int, *, interval: float, cluster: str
    ) -> None:
        self.cluster = cluster
        config = AgentConfig(
            listen_host=host,
            listen_port=port,
            interval=interval,
            sources=("scheduler",),
            simulate=SIMULATED,
            # each tick of the fleet moves the queue: read it as often
            scheduler_interval=max(1.0, interval),
        )
        self.source = SchedulerSource(
            interval=config.scheduler_interval,
            timeout=config.scheduler_timeout,
            max_accounts=config.scheduler_max_accounts,
            max_users=config.scheduler_max_users,
            env=commands.env(),
            fairshare=read_fairshare,
            first_wait=0.9 * config.timeout,
            clock=commands.now,
        )
        self.agent = Agent(config, [self.source])
        self.server = MetricsServer(
            host, port, exposition=self.agent.exposition, health=self.agent.health
        )
        self.agent.http_state = self.server.http_state
        self._started = False

    @property
    def address(self) -> str:
        return format_listen(self.agent.config.listen_host, self.server.port)

    @property
    def url(self) -> str:
        return f"http://{self.address}/metrics"

    def file_sd_group(self) -> dict[str, object]:
        """Its target in the agents' job, as the fleet's file_sd lists it."""
        return {
            "targets": [self.address],
            "labels": {"cluster": self.cluster, "instance": CONTROLLER},
        }

    def start(self) -> None:
        self.agent.poller.poll_once()  # waits for the first read of Slurm
        self.agent.poller.start()
        self.server.start()
        self._started = True

    def stop(self) -> None:
        self.server.stop()
        if self._started:
            self.agent.poller.stop(timeout=1.0)
            self._started = False
        self.source.close()
