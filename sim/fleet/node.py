"""One node of a simulated fleet: its simulator, its agent and that agent's HTTP server.

`simulate_node` makes the simulator as a fleet runs it (stepped by the fleet's ticker),
`node_agent_config` the agent configuration `nvwatch serve --simulate` would have, and
`build_agent` the agent bound to that node's own NVML. `FleetNode` runs the three. The
fleet (fleet.py) plans the nodes, starts them and ticks them; the e2e tests restart a
node's agent with `build_agent` too, so a restarted agent is built as the first was.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from nvwatch.agent.app import Agent
from nvwatch.agent.config import AgentConfig
from nvwatch.agent.exposition.render import Exposition
from nvwatch.agent.server import Health, MetricsServer
from nvwatch.agent.sources import Source
from nvwatch.agent.sources.host import HostSource
from nvwatch.agent.sources.registry import build_sources
from nvwatch.sim import nvml as sim_nvml
from nvwatch.sim.clock import SteppedClock
from nvwatch.sim.fleet.plan import FleetError, NodeSpec, cannot_listen
from nvwatch.sim.job.plan import SyncJobPlan
from nvwatch.sim.node.node import SimulatedNode

# Sub-steps of each GPU's physics per fleet tick (one poll interval of simulated time).
# A lone node integrates in 0.5 s sub-steps (gpu.model.MAX_SUBSTEP_S), 30 per 15 s tick:
# 124 dgx1-v100 at 15 s took 15.4 % of a core with them, 14.1 % with 8 (measured with
# benchmarks.sim_cost.measure_fleet_cpu). Workload demand is averaged over
# each sub-step and the temperature relaxes exactly at any step, so 8 keep the thermal
# and power curves a poll shows; scenario hooks act at most one sub-step early.
FLEET_SUBSTEPS = 8

FLEET_SOURCES = ("nvml", "infiniband", "host")


def simulate_node(
    spec: NodeSpec,
    sysfs: Path,
    clock: SteppedClock,
    sync_jobs: Sequence[SyncJobPlan] = (),
) -> SimulatedNode:
    """The node's simulated hardware, its sysfs tree under `sysfs`, on the fleet's clock;
    its GPUs of `sync_jobs` run those jobs' steps (sim/job/)."""
    try:
        sim = SimulatedNode(
            spec.profile,
            spec.scenarios,
            seed=spec.seed,
            clock=clock,
            sysfs_root=sysfs,
            mig=spec.mig,
            sync_jobs=sync_jobs,
            fleet_index=spec.index,
        )
    except ValueError as exc:
        raise FleetError(f"node {spec.index} ({spec.name}): {exc}") from exc
    # the fleet ticker advances every node's NVML, which wakes event waiters itself
    sim.nvml.clock_poll_s = None
    for gpu in sim.nvml.gpus:
        gpu.max_substeps = FLEET_SUBSTEPS
    return sim


def node_agent_config(
    spec: NodeSpec, sim: SimulatedNode, *, listen_host: str, interval: float
) -> AgentConfig:
    """What `nvwatch serve --simulate PROFILE` would run for this node."""
    return AgentConfig(
        listen_host=listen_host,
        listen_port=spec.port,
        interval=interval,
        sources=FLEET_SOURCES,
        sysfs_root=sim.sysfs_root,
        simulate=spec.profile,
        scenarios=spec.scenarios,
        seed=spec.seed,
        kmsg_path=sim.kmsg_path,  # the node's XIDs, so its history survives restarts
    )


def build_agent(
    sim: SimulatedNode, config: AgentConfig, clock: Callable[[], float] | None = None
) -> Agent:
    """The agent of node `sim`, reading that node's NVML from every thread it starts.

    `clock`: the NVML source's back-off on the fleet's time, so a driver repaired at
    simulated minute 5 is retried in simulated, not real, minutes (None: real time).
    """

    def build() -> Agent:
        # everything created in here (the poller's threads, the XID listener they
        # start) inherits this binding
        sim_nvml.bind(sim.nvml)
        sources = build_sources(config, clock=clock)
        if sim.simulates_host:
            sources = [_simulated_host(source, sim) for source in sources]
        return Agent(config, sources)

    return contextvars.Context().run(build)


def _simulated_host(source: Source, sim: SimulatedNode) -> Source:
    """The host source reading the node's simulated host instead of this machine."""
    if source.name != "host":
        return source
    return HostSource(cpu_times=sim.host.cpu_times)


class FleetNode:
    """One running simulated node: simulator, agent and HTTP server."""

    def __init__(self, spec: NodeSpec, sim: SimulatedNode, agent: Agent) -> None:
        self.spec = spec
        self.sim = sim
        self.agent = agent
        self.listening = False
        self._lock = threading.Lock()
        try:
            # the node's own callables, not the agent's: once the node is stopped, a
            # scraper's open keep-alive connection must fail too, as with a dead process
            self.server = MetricsServer(
                agent.config.listen_host,
                agent.config.listen_port,
                exposition=self._exposition,
                health=self._health,
            )
        except OSError as exc:
            where = (agent.config.listen_host, agent.config.listen_port)
            raise cannot_listen(spec.name, *where, exc) from exc
        # the server's refusals and connection counts are part of each poll, as in serve
        agent.http_state = self.server.http_state

    def _exposition(self) -> Exposition | None:
        return self.agent.exposition() if self.listening else None

    def _health(self) -> Health:
        return self.agent.health() if self.listening else Health(False, "agent stopped")

    @property
    def index(self) -> int:
        return self.spec.index

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def address(self) -> str:
        return f"{self.agent.config.listen_host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}/metrics"

    def start(self) -> None:
        # the first poll before listening: the first scrape already has data
        self.agent.poller.poll_once()
        self.agent.poller.start()
        self.listening = True
        self.server.start()

    def stop(self) -> None:
        """The agent dies: its server stops listening and its poll loop ends."""
        with self._lock:
            if not self.listening:
                return
            self.listening = False
        self.server.stop()
        self.agent.poller.stop(timeout=1.0)
