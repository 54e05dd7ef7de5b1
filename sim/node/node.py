"""One simulated DGX node: simulated NVML + a live simulated sysfs fabric, one workload,
the chassis its BMC watches (sim/bmc/model.py: node power, inlet and exhaust air, fans,
power supplies), and a kernel log file its XIDs are written to (sim/node/kmsg.py).

`nvwatch serve --simulate PROFILE` and the simulated fleet build one of these per node.
The node's NVML is installed under the real pynvml (or bound per context in a fleet);
its InfiniBand/PCI tree is real files on disk that the unmodified InfiniBand source reads.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from nvwatch.agent.config import ScenarioSpec
from nvwatch.agent.threads import start_thread
from nvwatch.sim.bmc.model import BmcState, SimulatedBmc
from nvwatch.sim.fabric.fabric import SimulatedFabric
from nvwatch.sim.gpu.mig_layout import checked_layout
from nvwatch.sim.gpu.thermal import AMBIENT_C
from nvwatch.sim.job.model import SyncJob
from nvwatch.sim.job.plan import SyncJobPlan, rail
from nvwatch.sim.job.workload import RankWorkload
from nvwatch.sim.node import scenarios as node_scenarios
from nvwatch.sim.node.host import SimulatedHost, is_host_scenario
from nvwatch.sim.node.kmsg import SimulatedKernelLog
from nvwatch.sim.node.scenarios import UnknownScenario as UnknownScenario
from nvwatch.sim.node.workers import WorkerProcesses, busy_gpus, busy_instances
from nvwatch.sim.nvml import SimulatedNvml
from nvwatch.sim.profiles import Profile, get_profile
from nvwatch.sim.scenario_names import known_scenarios as known_scenarios

log = logging.getLogger(__name__)

# Where simulated trees go when the caller names no root: tmpfs when there is one with
# room, because every counter update is a write and a rename, ~5x cheaper in memory than
# on a journalled disk (a dgx-h100 tree is ~2 MB; a fleet holds one per node).
SHM_DIR = Path("/dev/shm")
SHM_MIN_FREE_BYTES = 1 << 30


def scratch_dir() -> str | None:
    """A directory for simulated trees: /dev/shm when usable, else None (the default).

    An explicit TMPDIR wins (None: tempfile uses it): whoever set it said where this
    process's temporary files go."""
    if os.environ.get("TMPDIR"):
        return None
    try:
        stats = os.statvfs(SHM_DIR)
    except OSError:
        return None
    if stats.f_bavail * stats.f_frsize < SHM_MIN_FREE_BYTES or not os.access(SHM_DIR, os.W_OK):
        return None
    return str(SHM_DIR)


class PollGridClock:
    """Real time read on a grid of `step` seconds, for a simulated node behind one agent.

    The simulated NVML integrates its physics up to clock() on every C call; on a
    continuous clock each of the hundreds of calls of one poll integrates every GPU again,
    and the XID listener's wait (which checks the clock every 50 ms) keeps integrating
    between polls. On the grid, a poll's calls all read one instant, so the model is
    integrated once per step, however many calls read it. `arm()` (as the agent starts)
    puts the grid so that the next reading falls mid-step: polls `step` apart then each
    read one step more, with half a step of slack for scheduling jitter. Readings never
    go backwards; before `arm()` they are the real time.
    """

    def __init__(self, step: float) -> None:
        if step <= 0:
            raise ValueError("step must be positive")
        self.step = step
        self._origin: float | None = None
        self._armed = False
        self._last = -math.inf
        self._lock = threading.Lock()

    def arm(self) -> None:
        with self._lock:
            self._armed = True

    def __call__(self) -> float:
        with self._lock:
            now = time.monotonic()
            if self._armed:
                if self._origin is None:
                    self._origin = now - self.step / 2
                cells = math.floor((now - self._origin) / self.step)
                now = self._origin + cells * self.step
            self._last = max(self._last, now)
            return self._last


def grid_step(interval: float) -> float:
    """The grid for an agent polling every `interval`: at most a second (so XIDs and
    scenario changes show within one), and a whole fraction of the interval (so every
    poll reads the same number of steps)."""
    return interval / math.ceil(interval)


class SimulatedNode:
    def __init__(
        self,
        profile: Profile | str,
        scenarios: Sequence[ScenarioSpec] = (),
        *,
        seed: int = 0,
        clock: Callable[[], float] = time.monotonic,
        sysfs_root: Path | None = None,
        worker_processes: bool = False,
        mig: str | None = None,
        room_c: float = AMBIENT_C,
        sync_jobs: Sequence[SyncJobPlan | SyncJob] = (),
        fleet_index: int = 0,
    ) -> None:
        """`worker_processes`: start a real process per busy GPU (and per busy MIG
        instance) for the simulated job's worker (sim/node/workers.py); a fleet's nodes
        leave it off. `mig`: a --mig
        layout (sim/gpu/mig_layout.py); None: MIG off on every GPU. `room_c`: the air the
        node's inlet draws (the GPUs breathe it too) while no hot aisle adds to it.
        `sync_jobs`: synchronous jobs with ranks on this node, node `fleet_index` of
        their plans (sim/job/): its GPUs of each run the job's steps. A `SyncJob`
        already followed (by another node stepped over the same times on a clock from
        the same start, as a history's nodes are one after the other) is shared as it is:
        the job's cells are a function of its time alone, so they are computed once."""
        self.profile = get_profile(profile) if isinstance(profile, str) else profile
        # ticks and repairs come from different threads (a fleet's ticker, a test)
        self._lock = threading.Lock()
        specs = node_scenarios.checked(self.profile, scenarios)  # before anything is made
        gpu_names = [model.name for model in self.profile.gpus]
        mig_plans = checked_layout(mig, gpu_names) if mig else None
        self.workload = node_scenarios.node_workload(specs, seed)
        self.nvml = SimulatedNvml(
            self.profile,
            gpu_scenarios=node_scenarios.gpu_workloads(specs),
            workload=self.workload,
            seed=seed,
            clock=clock,
            mig=mig_plans,
        )
        self.bmc = SimulatedBmc(self.profile, self.nvml.gpus, clock, seed=seed, room_c=room_c)
        self.host = SimulatedHost(clock)
        self.sync_jobs = [
            plan if isinstance(plan, SyncJob) else SyncJob(plan, clock) for plan in sync_jobs
        ]
        self._owns_root = sysfs_root is None
        self.sysfs_root = (
            Path(tempfile.mkdtemp(prefix=f"nvwatch-sim-{self.profile.name}-", dir=scratch_dir()))
            if sysfs_root is None
            else sysfs_root
        )
        try:
            self.fabric = SimulatedFabric(
                self.profile,
                self.sysfs_root,
                workload=self.workload,
                seed=seed,
                clock=clock,
            )
            self._run_ranks(fleet_index, seed)
            self.started = node_scenarios.start(
                self.nvml, self.fabric, self.bmc, specs, host=self.host
            )
            self.fabric.write()
        except BaseException:
            # a node that fails to start leaves no tree behind (the caller never gets
            # an object to close)
            if self._owns_root:
                shutil.rmtree(self.sysfs_root, ignore_errors=True)
            raise
        # the node's /dev/kmsg, for the agent's --kmsg-path: the XIDs its GPUs raise
        # (made last, so a failure above leaves no file behind), beside its sysfs tree:
        # in the directory of a tree it was given, which its owner removes even where
        # the node is never closed (a test that never closed one left a file in /tmp on
        # every suite run)
        self.kernel_log = SimulatedKernelLog(self.profile, clock, self.sysfs_root.parent)
        self.nvml.event_sinks.append(self.kernel_log.on_event)
        self.kmsg_path = self.kernel_log.path
        self.workers = WorkerProcesses(
            self.profile.name,
            busy_gpus(self.nvml) if worker_processes else (),
            busy_instances(self.nvml) if worker_processes else (),
        )
        self.nvml.worker_pids = self.workers.pids
        self.nvml.mig_worker_pids = self.workers.instance_pids
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # the agent's host source reads this node's host, not the machine's, where the
        # host is part of what is simulated (sim/fleet/node.py)
        self.simulates_host = any(is_host_scenario(s.name) for s in specs) or any(
            job.plan.ranks_on(fleet_index) for job in self.sync_jobs
        )

    def _run_ranks(self, index: int, seed: int) -> None:
        """This node's GPUs of each synchronous job run the job's steps, and so does the
        HCA port of each one's rail when the job crosses nodes (the first rank there)."""
        railed: set[str] = set()
        for job in self.sync_jobs:
            for rank, where in enumerate(job.plan.ranks):
                if where.node != index:
                    continue
                workload = RankWorkload(seed=seed, job=job, rank=rank)
                self.nvml.gpus[where.gpu].run(workload)
                device = rail(self.profile, where.gpu)
                if job.plan.multi_node and device is not None and device not in railed:
                    self.fabric.port(device).workload = workload
                    railed.add(device)

    def tick(self) -> None:
        """Bring NVML state, the chassis and the sysfs files up to the clock's now."""
        with self._lock:
            self.nvml.advance()
            self.bmc.advance()
            self.fabric.advance()
            self.fabric.write()

    def read_bmc(self) -> BmcState:
        """What the BMC measures now: the GPUs first, whose power the node's is made of."""
        with self._lock:
            self.nvml.advance()
            return self.bmc.advance()

    def repair(self, what: ScenarioSpec | str | None = None) -> list[str]:
        """End scenarios now and repair what they broke; returns them ('name@target').

        `what`: None (everything), a scenario name ("ecc-dbe"), a target ("3" for GPU 3,
        "mlx5_1"), both ("ecc-dbe@3", "fan-failure@2") or a ScenarioSpec. Repairs: a GPU
        reset (ecc-dbe, gpu-lost), cooling restored (thermal-runaway), the power limit
        back (power-capped), the NVLink retrained (nvlink-degraded), the faulting job
        stopped (xid-storm), the driver loaded (nvml-driver-broken), the IB port
        retrained (ib-*), the HCA back (ib-hca-vanish), the aisle's cooling back
        (hot-aisle), a new fan or supply (fan-failure, psu-failure), the BMC's network
        back (bmc-unreachable). Workloads have nothing to repair.
        """
        with self._lock:
            repaired = node_scenarios.repair(self.nvml, self.fabric, self.bmc, what, host=self.host)
            self.fabric.write()  # a returning HCA and a retrained port show at once
        return repaired

    def start(self, interval: float = 1.0, *, write_tree: bool = True) -> None:
        """Keep the sysfs tree live in the background, rewritten once per `interval`.

        The NVML side needs no thread: it integrates on every call (and the event wait
        advances on its own), so with `write_tree` False, when nothing reads the tree,
        nothing runs at all. The agent polls once per interval, so one rewrite per
        interval is all a reader can see; the rewrites fall half an interval after the
        poll phase (the poller starts right after this), so clock jitter never puts two
        rewrites, or none, between two polls.
        """
        if not write_tree:
            return
        self._thread = start_thread(
            "nvwatch-sim", functools.partial(self._run, interval), daemon=True
        )

    def _run(self, interval: float) -> None:
        # fixed-rate (not fixed-delay): the phase against the poller must not drift
        due = time.monotonic() + interval / 2
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            try:
                self.tick()
            except Exception:
                log.exception("simulated node %s failed to tick", self.profile.name)
            due += interval
            if due < time.monotonic():  # fell behind (a suspended process): skip ahead
                due = time.monotonic() + interval

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        if self._owns_root:
            shutil.rmtree(self.sysfs_root, ignore_errors=True)
        self.kernel_log.close()
        self.workers.close()
