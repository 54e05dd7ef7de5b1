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
- The GIL is handed over every millisecond while the fleet runs, as `serve` does: each
  sysfs read gives it up and waits to win it back, and at CPython's 5 ms a busy process
  held an InfiniBand poll (a few hundred reads) past its timeout.
- `time_scale` makes simulated time run faster than real time, so a thermal runaway
  that takes minutes on real hardware crosses slowdown within seconds of a test.
- Scenarios end on schedule (`until=`), or on request while the fleet runs: `repair()`,
  or a line `NODE[:NAME[@TARGET]]` in the `repair_file`, which the ticker takes (and
  removes) at its next step, so an operator can repair a fault without a restart.
- Every node has a BMC on a loopback management network (`NodeSpec.bmc`, 127.1.0.1 up);
  `bmc_reader` reads any of them as the `bmc` source reads a real one; the management
  host (probe.py, on BASE + N) answers /probe for all of them, and
  `bmc_file_sd()` / `bmc_scrape_config()` are the `nvwatch-bmc` job that probes them.

The host source reads the real machine: every simulated node reports the same host.
Planning (profiles, scenarios, names, ports, racks) is in `nvwatch.sim.fleet.plan`,
one node (simulator, agent, server) in `nvwatch.sim.fleet.node`, `SteppedClock` in
`nvwatch.sim.clock`; this module starts the nodes, ticks them and stops them.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nvwatch.agent.config import ScenarioSpec
from nvwatch.agent.inventory import write_json_atomic
from nvwatch.agent.inventory_bmc import probe_job
from nvwatch.agent.threads import agent_switch_interval, start_thread
from nvwatch.sim import nvml as sim_nvml
from nvwatch.sim.bmc.reader import SimulatedBmcReader
from nvwatch.sim.clock import SteppedClock
from nvwatch.sim.fleet.controller import SlurmController
from nvwatch.sim.fleet.jobs import FleetJob, NodeJobs, check_jobs, sync_job_plans
from nvwatch.sim.fleet.node import FleetNode, build_agent, node_agent_config, simulate_node
from nvwatch.sim.fleet.plan import (
    DEFAULT_CLUSTER,
    DEFAULT_NODES_PER_RACK,
    FleetError,
    NodeSpec,
    bmc_file_sd_groups,
    cannot_listen,
    file_sd_groups,
    management_port,
    parse_repair_request,
    plan_fleet,
)
from nvwatch.sim.fleet.probe import ManagementHost
from nvwatch.sim.fleet.queue import FleetQueue, QueueSpec
from nvwatch.sim.fleet.slurm import SlurmCommands
from nvwatch.sim.node.node import scratch_dir
from nvwatch.sim.profiles import get_profile

log = logging.getLogger(__name__)

# at most this many threads stop the nodes' agents in parallel at shutdown
_STOPPERS = 32


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
        queue: QueueSpec | None = None,
    ) -> None:
        """`hold_time`: simulated time stands still until `run_time()` (see SteppedClock).
        `repair_file`: repair requests, one per line, taken at every tick (`repair()`).
        `jobs`: simulated Slurm jobs; their nodes' agents attribute GPUs (jobs.py).
        `queue`: a Slurm queue over the fleet (queue.py), `jobs` pinned in it."""
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
        # the synchronous ones, which each of their nodes simulates whole (sim/job/)
        self.sync_jobs = sync_job_plans(self.jobs, self.specs)
        self.queue_spec = queue
        self.seed = seed
        self.queue: FleetQueue | None = None
        self.slurm: SlurmCommands | None = None  # the queue's squeue, sinfo and sshare
        self.controller: SlurmController | None = None  # the agent that reads them
        self._queue_lock = threading.Lock()  # the ticker's and a caller's run_queue()
        # node index -> its simulated Slurm, for the nodes that have jobs (every node
        # with a queue: any may get one)
        self.node_jobs: dict[int, NodeJobs] = {}
        self.interval = interval
        self.listen_host = listen_host
        self.repair_file = repair_file
        self.clock = SteppedClock(time_scale, running=not hold_time)
        self.nodes: list[FleetNode] = []
        # the management network: every node's BMC, read as the `bmc` source reads one,
        # and the host that probes them (started with the nodes)
        self.bmc_reader = SimulatedBmcReader()
        self._management_port = management_port(len(self.specs), base_port)
        self.management: ManagementHost | None = None
        self._root: Path | None = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self.tick_cpu_seconds = 0.0  # CPU time the last round of ticks took
        self.ticks = 0
        self._started = False
        self._process_settings = contextlib.ExitStack()

    @property
    def root(self) -> Path | None:
        """The temporary directory holding every node's sysfs tree while running."""
        return self._root

    def start(self) -> None:
        """Build and start every node; on any failure, stop what started and re-raise."""
        if self._started:
            raise RuntimeError("fleet already started")
        self._started = True
        # every node's polls share this process's GIL, as one agent's threads do
        self._process_settings.enter_context(agent_switch_interval())
        # one library for the whole process; each node's threads find their own through
        # the context they were created in
        sim_nvml.install(sim_nvml.DispatchingNvml())
        # tmpfs where there is one: every node rewrites its counters once per interval
        self._root = Path(tempfile.mkdtemp(prefix="nvwatch-fleet-", dir=scratch_dir()))
        try:
            if self.queue_spec is not None:
                self.queue = FleetQueue(
                    self.queue_spec, self.specs, self.jobs, seed=self.seed, now=self.clock()
                )
                # its client commands, with the queue's times in Unix seconds: whole
                # seconds from the queue's own (its jobs' are), as Slurm's are
                offset = round(time.time() - self.clock())
                self.slurm = SlurmCommands(self._root / "slurm", self.queue.model, offset)
            for spec in self.specs:
                self.nodes.append(self._start_node(spec))
            self.management = self._start_management()
            if self.slurm is not None:
                self.controller = self._start_controller(self.slurm)
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
        sync_jobs = [plan for plan in self.sync_jobs if plan.ranks_on(spec.index)]
        sim = simulate_node(spec, sysfs, self.clock, sync_jobs)
        config = node_agent_config(spec, sim, listen_host=self.listen_host, interval=self.interval)
        if self.queue is not None:
            jobs = self.queue.jobs_on(spec.index)
        else:
            jobs = [job.on(spec.index) for job in self.jobs if spec.index in job.all_nodes]
        if jobs or self.queue is not None:
            node_jobs = NodeJobs(
                self._root / f"{spec.name}-slurm", jobs, len(sim.profile.gpus), sim.nvml.worker_pid
            )
            node_jobs.write()
            config = node_jobs.agent_config(config)
            self.node_jobs[spec.index] = node_jobs
        # building the agent started nothing, so a port in use leaves nothing to stop
        node = FleetNode(spec, sim, build_agent(sim, config, self.clock))
        node.start()
        self.bmc_reader.add(spec.bmc, sim)
        return node

    def _start_management(self) -> ManagementHost:
        try:
            host = ManagementHost(
                self.bmc_reader,
                self.listen_host,
                self._management_port,
                cache_s=min(5.0, self.interval),  # one read per tick at most, as real time runs
                interval=self.interval,
            )
        except OSError as exc:
            where = (self.listen_host, self._management_port)
            raise cannot_listen("management host", *where, exc) from exc
        host.start()
        return host

    def _start_controller(self, slurm: SlurmCommands) -> SlurmController:
        # right after the management host's port, or any free one with the nodes'
        port = self._management_port + 1 if self._management_port else 0
        try:
            controller = SlurmController(
                slurm, self.listen_host, port, interval=self.interval, cluster=self.specs[0].cluster
            )
        except OSError as exc:
            raise cannot_listen("Slurm controller", self.listen_host, port, exc) from exc
        controller.start()
        return controller

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
            if self.queue is not None:
                self._run_queue()
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

    def _run_queue(self) -> None:
        try:
            self.run_queue()
        except Exception:  # it must not stop the ticker of a running fleet
            log.exception("the simulated Slurm queue failed to advance")

    def run_queue(self, now: float | None = None) -> None:
        """The queue up to `now` (the clock's time by default), and each node's simulated
        Slurm to the jobs it runs then."""
        if self.queue is None:
            raise RuntimeError("the fleet runs no queue")
        with self._queue_lock:
            self.queue.advance(self.clock() if now is None else max(now, self.clock()))
            for index, node_jobs in self.node_jobs.items():
                node_jobs.update(self.queue.jobs_on(index))
            if self.slurm is not None:
                self.slurm.write()

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
        # every node of a synchronous job follows the repaired node's ranks
        request = what if what is None or isinstance(what, str) else str(what)
        for other in self.nodes:
            for job in other.sim.sync_jobs:
                job.repair(index, request)
        log.info("%s: repaired %s", node.name, ", ".join(repaired) or "nothing (none running)")
        return repaired

    def run_time(self) -> None:
        """Let simulated time run (for a fleet built with hold_time=True)."""
        self.clock.run()

    def set_time_scale(self, scale: float) -> None:
        """Simulated time runs `scale` times as fast as real time from now on."""
        self.clock.set_scale(scale)

    def stop_node(self, index: int) -> None:
        """Kill node `index`'s agent: Prometheus' scrapes of it now fail."""
        self.nodes[index].stop()

    def targets(self) -> list[tuple[NodeSpec, str]]:
        if self.nodes:
            return [(n.spec, n.address) for n in self.nodes]
        return [(s, f"{self.listen_host}:{s.port}") for s in self.specs]

    def file_sd(self) -> list[dict[str, Any]]:
        """The agents' targets: every node's, and the Slurm controller's with a queue."""
        groups = file_sd_groups(self.targets())
        if self.controller is not None:
            groups.append(self.controller.file_sd_group())
        return groups

    def write_file_sd(self, path: Path) -> None:
        write_json_atomic(path, self.file_sd())

    def bmc_file_sd(self) -> list[dict[str, Any]]:
        """The `nvwatch-bmc` job's targets: every node's BMC, with the node's labels."""
        return bmc_file_sd_groups(self.specs)

    def write_bmc_file_sd(self, path: Path) -> None:
        write_json_atomic(path, self.bmc_file_sd())

    def bmc_scrape_config(self, file_sd: Path, interval: str = "30s") -> dict[str, Any]:
        """The Prometheus job probing every BMC of `file_sd` through the management host."""
        if self.management is None:
            raise RuntimeError("the fleet is not running")
        return probe_job([str(file_sd)], self.management.address, interval=interval)

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
        if self.management is not None:
            self.management.stop()
            self.management = None
        if self.controller is not None:
            self.controller.stop()
            self.controller = None
        for node in self.nodes:
            node.sim.close()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
        sim_nvml.uninstall()
        self._process_settings.close()

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
