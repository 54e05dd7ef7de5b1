"""A simulated fleet: many simulated DGX nodes, each a real agent on its own port, in one process.

Each node is what `nvwatch serve --simulate PROFILE` runs (a `SimulatedNode` behind an
`Agent` and its HTTP server), so Prometheus scrapes the same code path as on a real
cluster. What makes 128 nodes fit on two cores:

- One pynvml in the process: `DispatchingNvml` is installed once, and each node's
  `SimulatedNvml` is bound with `bind()` in a context of its own before that node's
  `Agent` is built; the poller and the XID listener carry that context to their threads.
- Simulated time moves in steps. The simulated NVML integrates its physics up to
  `clock()` on every C call, so a continuously running clock makes every one of the
  hundreds of calls of a poll integrate again. `SteppedClock` only moves when the one
  fleet-wide ticker thread steps it, once per interval, and then calls every node's
  `tick()` (NVML state and the sysfs files); between ticks a call reads settled state.
- `time_scale` makes simulated time run faster than real time, so a thermal runaway
  that takes minutes on real hardware crosses slowdown within seconds of a test.
- Scenarios end on schedule (`until=`), or on request while the fleet runs: `repair()`,
  or a line `NODE[:NAME[@TARGET]]` in the `repair_file`, which the ticker takes (and
  removes) at its next step, so an operator can repair a fault without a restart.

The host source reads the real machine: every simulated node reports the same host.
Planning (profiles, scenarios, names, ports, racks) is in `nvwatch.agent.sim.fleet_plan`.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nvwatch.agent.app import Agent
from nvwatch.agent.config import AgentConfig, ScenarioSpec
from nvwatch.agent.exposition.render import Exposition
from nvwatch.agent.server import Health, MetricsServer
from nvwatch.agent.sim import nvml as sim_nvml
from nvwatch.agent.sim.fleet_jobs import FleetJob, NodeJobs, check_jobs
from nvwatch.agent.sim.fleet_plan import (
    DEFAULT_CLUSTER,
    DEFAULT_NODES_PER_RACK,
    FleetError,
    NodeSpec,
    file_sd_groups,
    parse_repair_request,
    plan_fleet,
)
from nvwatch.agent.sim.node import SimulatedNode, scratch_dir
from nvwatch.agent.sim.profiles import get_profile
from nvwatch.agent.sources.registry import build_sources
from nvwatch.agent.threads import start_thread

log = logging.getLogger(__name__)

# Sub-steps of each GPU's physics per fleet tick (one poll interval of simulated time).
# A lone node integrates in 0.5 s sub-steps (gpu_model.MAX_SUBSTEP_S), 30 per 15 s tick:
# 124 dgx1-v100 at 15 s took 15.4 % of a core with them, 14.1 % with 8 (measured with
# benchmarks.sim_cost.measure_fleet_cpu). Workload demand is averaged over
# each sub-step and the temperature relaxes exactly at any step, so 8 keep the thermal
# and power curves a poll shows; scenario hooks act at most one sub-step early.
FLEET_SUBSTEPS = 8

FLEET_SOURCES = ("nvml", "infiniband", "host")
# at most this many threads stop the nodes' agents in parallel at shutdown
_STOPPERS = 32


def write_json_atomic(path: Path, data: object) -> None:
    """Prometheus re-reads file_sd files on change: it must never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


class SteppedClock:
    """Simulated seconds that move only on `step()`, `scale` times as fast as real time.

    With `running=False` simulated time holds still until `run()`: a test starts the
    fleet and its Prometheus first, so the faults begin under a scraping Prometheus.
    """

    def __init__(self, scale: float = 1.0, *, running: bool = True) -> None:
        if scale <= 0:
            raise ValueError("time scale must be positive")
        self.scale = scale
        self._now = time.monotonic()
        self._base = self._now
        self._since: float | None = time.monotonic() if running else None
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self._now

    def run(self) -> None:
        with self._lock:
            if self._since is None:
                self._since = time.monotonic()

    def step(self) -> float:
        with self._lock:
            if self._since is not None:
                self._now = self._base + (time.monotonic() - self._since) * self.scale
            return self._now


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
            where = f"{agent.config.listen_host}:{agent.config.listen_port}"
            raise FleetError(f"{spec.name}: cannot listen on {where}: {exc.strerror}") from exc
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


class Fleet:
    """N simulated nodes in one process, each an agent on its own port on `listen_host`."""

    def __init__(
        self,
        specs: Sequence[str],
        base_port: int = 9500,
        interval: float = 15.0,
        scenarios: Sequence[tuple[int | None, ScenarioSpec]]
        | Mapping[int, Sequence[ScenarioSpec]] = (),
        seed: int = 0,
        *,
        time_scale: float = 1.0,
        listen_host: str = "127.0.0.1",
        cluster: str | Sequence[str] = DEFAULT_CLUSTER,
        nodes_per_rack: int = DEFAULT_NODES_PER_RACK,
        hold_time: bool = False,
        repair_file: Path | None = None,
        mig: Sequence[tuple[range, str]] = (),
        jobs: Sequence[FleetJob] = (),
    ) -> None:
        """`hold_time`: simulated time stands still until `run_time()` (see SteppedClock).
        `repair_file`: repair requests, one per line, taken at every tick (`repair()`).
        `jobs`: simulated Slurm jobs; their nodes' agents attribute GPUs (fleet_jobs.py)."""
        if interval <= 0:
            raise FleetError("interval must be positive")
        if time_scale <= 0:
            raise FleetError("time scale must be positive")
        pairs: list[tuple[int | None, ScenarioSpec]] = (
            [(i, s) for i, specs_of in scenarios.items() for s in specs_of]
            if isinstance(scenarios, Mapping)
            else list(scenarios)
        )
        self.specs = plan_fleet(
            specs,
            base_port=base_port,
            seed=seed,
            scenarios=pairs,
            cluster=cluster,
            nodes_per_rack=nodes_per_rack,
            mig=mig,
        )
        check_jobs(jobs, [len(get_profile(s.profile).gpus) for s in self.specs])
        self.jobs = tuple(jobs)
        # node index -> its simulated Slurm, for the nodes that have jobs
        self.node_jobs: dict[int, NodeJobs] = {}
        self.interval = interval
        self.listen_host = listen_host
        self.repair_file = repair_file
        self.clock = SteppedClock(time_scale, running=not hold_time)
        self.nodes: list[FleetNode] = []
        self._root: Path | None = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self.tick_cpu_seconds = 0.0  # CPU time the last round of ticks took
        self.ticks = 0
        self._started = False

    @property
    def root(self) -> Path | None:
        """The temporary directory holding every node's sysfs tree while running."""
        return self._root

    def start(self) -> None:
        """Build and start every node; on any failure, stop what started and re-raise."""
        if self._started:
            raise RuntimeError("fleet already started")
        self._started = True
        # one library for the whole process; each node's threads find their own through
        # the context they were created in
        sim_nvml.install(sim_nvml.DispatchingNvml())
        # tmpfs where there is one: every node rewrites its counters once per interval
        self._root = Path(tempfile.mkdtemp(prefix="nvwatch-fleet-", dir=scratch_dir()))
        try:
            for spec in self.specs:
                self.nodes.append(self._start_node(spec))
        except BaseException:
            self.stop()
            raise
        self._ticker = start_thread("nvwatch-fleet-tick", self._tick_loop, daemon=True)
        log.info(
            "simulated fleet: %d nodes on %s, every %gs, time x%g",
            len(self.nodes),
            self.listen_host,
            self.interval,
            self.clock.scale,
        )

    def _start_node(self, spec: NodeSpec) -> FleetNode:
        assert self._root is not None
        sysfs = self._root / spec.name
        sysfs.mkdir()
        try:
            sim = SimulatedNode(
                spec.profile,
                spec.scenarios,
                seed=spec.seed,
                clock=self.clock,
                sysfs_root=sysfs,
                mig=spec.mig,
            )
        except ValueError as exc:
            raise FleetError(f"node {spec.index} ({spec.name}): {exc}") from exc
        # the fleet ticker advances every node's NVML, which wakes event waiters itself
        sim.nvml.clock_poll_s = None
        for gpu in sim.nvml.gpus:
            gpu.max_substeps = FLEET_SUBSTEPS
        config = AgentConfig(
            listen_host=self.listen_host,
            listen_port=spec.port,
            interval=self.interval,
            sources=FLEET_SOURCES,
            sysfs_root=sysfs,
            simulate=spec.profile,
            scenarios=spec.scenarios,
            seed=spec.seed,
            kmsg_path=sim.kmsg_path,  # the node's XIDs, so its history survives restarts
        )
        jobs = [job for job in self.jobs if job.node == spec.index]
        if jobs:
            node_jobs = NodeJobs(
                self._root / f"{spec.name}-slurm", jobs, len(sim.profile.gpus), sim.nvml.worker_pid
            )
            node_jobs.write()
            config = node_jobs.agent_config(config)
            self.node_jobs[spec.index] = node_jobs

        def build() -> Agent:
            # everything created in here (the poller's threads, the XID listener they
            # start) inherits this binding
            sim_nvml.bind(sim.nvml)
            # the NVML source's back-off on the fleet's time: a driver repaired at
            # simulated minute 5 is retried in simulated, not real, minutes
            return Agent(config, build_sources(config, clock=self.clock))

        agent = contextvars.Context().run(build)
        # building the agent started nothing, so a port in use leaves nothing to stop
        node = FleetNode(spec, sim, agent)
        node.start()
        return node

    def _tick_loop(self) -> None:
        """Step the clock once per interval, then tick the nodes spread over the interval.

        All nodes in one burst would hold the GIL for seconds and starve the agents'
        polls into their timeouts; spread out, each node's tick is a short slice.
        """
        started = time.monotonic()
        while not self._stop.wait(max(0.0, started + self.interval - time.monotonic())):
            started = time.monotonic()
            cpu_started = time.thread_time()
            self.clock.step()
            if self.repair_file is not None:
                self._take_repair_requests(self.repair_file)
            slot = self.interval / max(1, len(self.nodes))
            for position, node in enumerate(self.nodes):
                try:
                    node.sim.tick()
                except Exception:
                    log.exception("simulated node %s failed to tick", node.name)
                if self._stop.wait(max(0.0, started + (position + 1) * slot - time.monotonic())):
                    return
            self.tick_cpu_seconds = time.thread_time() - cpu_started
            self.ticks += 1

    def _take_repair_requests(self, path: Path) -> None:
        """Apply every request in `path` (`echo 3:ecc-dbe@2 >> FILE`), then remove it.

        The file is renamed before it is read, so a line appended meanwhile goes to a new
        file for the next tick instead of being lost. A bad line is logged and skipped:
        it must not stop the ticker of a running fleet.
        """
        taken = path.with_name(f".{path.name}.taken")
        try:
            os.replace(path, taken)
            lines = taken.read_text(encoding="utf-8").splitlines()
            taken.unlink()
        except FileNotFoundError:
            return
        for line in lines:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                self.repair(*parse_repair_request(line))
            except ValueError as exc:
                log.warning("repair file %s: %s", path, exc)

    def repair(self, index: int, what: ScenarioSpec | str | None = None) -> list[str]:
        """End and repair node `index`'s scenarios now (see `SimulatedNode.repair`)."""
        if not 0 <= index < len(self.nodes):
            raise FleetError(f"no node {index}: the fleet has nodes 0..{len(self.nodes) - 1}")
        node = self.nodes[index]
        repaired = node.sim.repair(what)
        log.info("%s: repaired %s", node.name, ", ".join(repaired) or "nothing (none running)")
        return repaired

    def run_time(self) -> None:
        """Let simulated time run (for a fleet built with hold_time=True)."""
        self.clock.run()

    def stop_node(self, index: int) -> None:
        """Kill node `index`'s agent: Prometheus' scrapes of it now fail."""
        self.nodes[index].stop()

    def targets(self) -> list[tuple[NodeSpec, str]]:
        if self.nodes:
            return [(n.spec, n.address) for n in self.nodes]
        return [(s, f"{self.listen_host}:{s.port}") for s in self.specs]

    def file_sd(self) -> list[dict[str, Any]]:
        return file_sd_groups(self.targets())

    def write_file_sd(self, path: Path) -> None:
        write_json_atomic(path, self.file_sd())

    def stop(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(5.0)
        # each agent's shutdown waits on its threads; in parallel, 128 nodes stop in
        # about the time one does
        stoppers = [
            start_thread(
                "nvwatch-fleet-stop",
                functools.partial(_stop_nodes_quietly, self.nodes[first::_STOPPERS]),
                daemon=True,
            )
            for first in range(min(_STOPPERS, len(self.nodes)))
        ]
        for stopper in stoppers:
            stopper.join()
        for node in self.nodes:
            node.sim.close()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
        sim_nvml.uninstall()

    def __enter__(self) -> Fleet:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def _stop_nodes_quietly(nodes: Sequence[FleetNode]) -> None:
    for node in nodes:
        try:
            node.stop()
        except Exception:
            log.exception("stopping %s failed", node.name)
