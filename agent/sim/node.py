"""One simulated DGX node: simulated NVML + a live simulated sysfs fabric, one workload,
and a kernel log file its XIDs are written to (agent/sim/kmsg.py).

`nvwatch serve --simulate PROFILE` and the simulated fleet build one of these per node.
The node's NVML is installed under the real pynvml (or bound per context in a fleet);
its InfiniBand/PCI tree is real files on disk that the unmodified InfiniBand source reads.
"""

from __future__ import annotations

import functools
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from agent.config import ScenarioSpec
from agent.sim import node_scenarios
from agent.sim.fabric import SimulatedFabric
from agent.sim.kmsg import SimulatedKernelLog
from agent.sim.node_scenarios import UnknownScenario as UnknownScenario
from agent.sim.node_scenarios import known_scenarios as known_scenarios
from agent.sim.nvml import SimulatedNvml
from agent.sim.profiles import Profile, get_profile
from agent.sim.workload import Workload
from agent.threads import start_thread

log = logging.getLogger(__name__)


class SimulatedNode:
    def __init__(
        self,
        profile: Profile | str,
        scenarios: Sequence[ScenarioSpec] = (),
        *,
        seed: int = 0,
        clock: Callable[[], float] = time.monotonic,
        sysfs_root: Path | None = None,
    ) -> None:
        self.profile = get_profile(profile) if isinstance(profile, str) else profile
        # ticks and repairs come from different threads (a fleet's ticker, a test)
        self._lock = threading.Lock()
        specs = node_scenarios.checked(self.profile, scenarios)  # before anything is made
        self.workload = Workload(kind=node_scenarios.node_workload(specs), seed=seed)
        self.nvml = SimulatedNvml(
            self.profile,
            gpu_scenarios=node_scenarios.gpu_workloads(specs),
            workload=self.workload,
            seed=seed,
            clock=clock,
        )
        self._owns_root = sysfs_root is None
        self.sysfs_root = (
            Path(tempfile.mkdtemp(prefix=f"nvwatch-sim-{self.profile.name}-"))
            if sysfs_root is None
            else sysfs_root
        )
        self.fabric = SimulatedFabric(
            self.profile,
            self.sysfs_root,
            workload=self.workload,
            seed=seed,
            clock=clock,
        )
        self.started = node_scenarios.start(self.nvml, self.fabric, specs)
        self.fabric.write()
        # the node's /dev/kmsg, for the agent's --kmsg-path: the XIDs its GPUs raise
        # (made last, so a failure above leaves no file behind)
        self.kernel_log = SimulatedKernelLog(self.profile, clock)
        self.nvml.event_sinks.append(self.kernel_log.on_event)
        self.kmsg_path = self.kernel_log.path
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> None:
        """Bring NVML state and the sysfs files up to the clock's now."""
        with self._lock:
            self.nvml.advance()
            self.fabric.advance()
            self.fabric.write()

    def repair(self, what: ScenarioSpec | str | None = None) -> list[str]:
        """End scenarios now and repair what they broke; returns them ('name@target').

        `what`: None (everything), a scenario name ("ecc-dbe"), a target ("3" for GPU 3,
        "mlx5_1"), both ("ecc-dbe@3") or a ScenarioSpec. Repairs: a GPU reset (ecc-dbe,
        gpu-lost), cooling restored (thermal-runaway), the power limit back
        (power-capped), the NVLink retrained (nvlink-degraded), the faulting job stopped
        (xid-storm), the driver loaded (nvml-driver-broken), the IB port retrained
        (ib-*), the HCA back (ib-hca-vanish). Workloads have nothing to repair.
        """
        with self._lock:
            repaired = node_scenarios.repair(self.nvml, self.fabric, self.profile, what)
            self.fabric.write()  # a returning HCA and a retrained port show at once
        return repaired

    def start(self, interval: float = 1.0) -> None:
        """Keep the sysfs tree live in the background (NVML advances on every call)."""
        self._thread = start_thread(
            "nvwatch-sim", functools.partial(self._run, interval), daemon=True
        )

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.tick()
            except Exception:
                log.exception("simulated node %s failed to tick", self.profile.name)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        if self._owns_root:
            shutil.rmtree(self.sysfs_root, ignore_errors=True)
        self.kernel_log.close()
