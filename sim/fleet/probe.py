"""The simulated fleet's management host: one agent answering /probe for every node's BMC.

As on a real cluster, where one management host on the IPMI network runs
`nvwatch serve --bmc-config FILE` and Prometheus's `nvwatch-bmc` job probes each BMC
through it (Fleet.bmc_scrape_config: the job `nvwatch inventory` writes), the BMCs are
read by a server of their own, not by the nodes' agents: a node whose agent is down still
has its BMC read. It is the real server and probe service (agent/server/probe.py, the
`bmc` source's interpreter and exposition) over the simulated reader, with the built-in
module `default`. The host has no GPUs: its own /metrics carries only the agent's series.
"""

from __future__ import annotations

from nvwatch.agent.app import Agent
from nvwatch.agent.config import AgentConfig, format_listen
from nvwatch.agent.exposition.bmc import probe_exposition
from nvwatch.agent.server import MetricsServer
from nvwatch.agent.server.probe import ProbeService
from nvwatch.sim.bmc.reader import SIMULATED_MODULE, SimulatedBmcReader


class ManagementHost:
    """An agent with no sources, whose server answers /probe with `reader`'s BMCs."""

    def __init__(
        self, reader: SimulatedBmcReader, host: str, port: int, *, cache_s: float, interval: float
    ) -> None:
        config = AgentConfig(listen_host=host, listen_port=port, interval=interval, sources=())
        self.agent = Agent(config, [])
        self.service = ProbeService(
            {SIMULATED_MODULE.name: SIMULATED_MODULE}, reader, probe_exposition, cache_s=cache_s
        )
        self.server = MetricsServer(
            host,
            port,
            exposition=self.agent.exposition,
            health=self.agent.health,
            probe=self.service.respond,
        )
        self.agent.http_state = self.server.http_state
        self._started = False

    @property
    def address(self) -> str:
        """HOST:PORT of its server, the `__address__` the BMC job scrapes."""
        return format_listen(self.agent.config.listen_host, self.server.port)

    def start(self) -> None:
        self.agent.poller.poll_once()
        self.agent.poller.start()
        self.server.start()
        self._started = True

    def stop(self) -> None:
        self.server.stop()  # unbinds, started or not
        if self._started:
            self.agent.poller.stop(timeout=1.0)
            self._started = False
        self.service.close()
