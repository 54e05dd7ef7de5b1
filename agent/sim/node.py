"""One simulated DGX node: simulated NVML + a live simulated sysfs fabric, one workload.

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
from agent.sim.fabric import IB_SCENARIOS, SimulatedFabric
from agent.sim.nvml import SimulatedNvml
from agent.sim.profiles import Profile, get_profile
from agent.sim.scenarios import GPU_SCENARIOS
from agent.sim.workload import Workload
from agent.threads import start_thread

log = logging.getLogger(__name__)

# scenarios that change what the whole node is doing rather than breaking a part of it
_WORKLOAD_SCENARIOS = {"idle": "idle", "healthy-training": "training"}


class UnknownScenario(ValueError):
    pass


def known_scenarios() -> tuple[str, ...]:
    return tuple(dict.fromkeys((*GPU_SCENARIOS, *IB_SCENARIOS)))


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
        for spec in scenarios:
            if spec.name not in known_scenarios():
                raise UnknownScenario(
                    f"unknown scenario {spec.name!r} (known: {', '.join(known_scenarios())})"
                )
        kind = "training"
        for spec in scenarios:
            kind = _WORKLOAD_SCENARIOS.get(spec.name, kind)
        self.workload = Workload(kind=kind, seed=seed)
        node_gpu = [s.name for s in scenarios if s.name in GPU_SCENARIOS and s.target is None]
        per_gpu = {
            s.gpu: s.name for s in scenarios if s.name in GPU_SCENARIOS and s.gpu is not None
        }
        node_ib = [s.name for s in scenarios if s.name in IB_SCENARIOS and s.target is None]
        per_port = {
            s.target: s.name for s in scenarios if s.name in IB_SCENARIOS and s.target is not None
        }
        self.nvml = SimulatedNvml(
            self.profile,
            scenario=node_gpu[-1] if node_gpu else None,
            gpu_scenarios={k: v for k, v in per_gpu.items() if k is not None},
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
            scenario=node_ib[-1] if node_ib else None,
            port_scenarios={k: v for k, v in per_port.items() if k is not None},
            seed=seed,
            clock=clock,
        )
        self.fabric.write()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> None:
        """Bring NVML state and the sysfs files up to the clock's now."""
        self.nvml.advance()
        self.fabric.advance()
        self.fabric.write()

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
