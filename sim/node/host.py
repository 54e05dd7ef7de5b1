"""The host CPUs of a simulated node, as far as the GPUs' input pipeline needs them.

A training node's data loaders keep about a third of its cores busy; `cpu-starved`
(sim/scenario_names.py) saturates them (another tenant, a runaway process, too few
loader workers for the batch), and the loaders then deliver batches at 1 - S of the rate
the GPUs consume them (`slowdown=S`, 0.3 by default): the node's ranks of a synchronous
job wait for input (sim/job/).

The agent's host source reads the real machine through psutil; a fleet node whose host
matters (one with a host scenario, or in a synchronous job) has its host source read
`cpu_times()` here instead (sim/fleet/node.py), cumulative CPU seconds as psutil's are,
integrated exactly over the scenarios' windows on the node's clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from nvwatch.agent.config import ScenarioSpec
from nvwatch.sim.fault_window import end_faults
from nvwatch.sim.scenario_names import DEFAULT_SLOWDOWN, HOST_SCENARIOS, onset

CORES = 128  # two 64-core sockets, a DGX H100's (the ratios do not depend on it)
TRAINING_CPU = 0.35  # a training job's loaders, tokenizers and launcher
STARVED_CPU = 0.98  # saturated: what is left is the kernel's own slack
IOWAIT_SHARE = 0.02  # of a saturated host's time, its loaders waiting on storage


class CpuTimes(NamedTuple):
    """Cumulative CPU seconds over all cores, in psutil.cpu_times()'s field names."""

    user: float
    system: float
    idle: float
    iowait: float


def is_host_scenario(name: str) -> bool:
    return name in HOST_SCENARIOS


@dataclass
class HostFault:
    """cpu-starved over [since, until) on the node's clock."""

    name: str
    since: float
    until: float
    slowdown: float

    def active(self, t: float) -> bool:
        return self.since <= t < self.until


class SimulatedHost:
    """The node's CPUs: their utilization, and the share of its input rate the GPUs get."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._start = clock()
        self.faults: list[HostFault] = []

    def start_scenario(self, spec: ScenarioSpec) -> str:
        if not is_host_scenario(spec.name):
            raise ValueError(f"{spec.name} is not a host scenario ({', '.join(HOST_SCENARIOS)})")
        if spec.target is not None:
            raise ValueError(f"{spec}: {spec.name} is node-wide; it takes no @TARGET")
        since = self._start + (onset(spec.name) if spec.from_s is None else spec.from_s)
        until = math.inf if spec.until_s is None else self._start + spec.until_s
        slowdown = DEFAULT_SLOWDOWN[spec.name] if spec.slowdown is None else spec.slowdown
        self.faults.append(HostFault(spec.name, since, until, slowdown))
        return spec.name

    def end_scenarios(self, name: str | None = None) -> list[str]:
        """End the running host scenarios named `name` (None: all) now: the other
        tenant is gone, the loaders have their cores back."""
        return end_faults(self.faults, name, self._clock())

    def input_share(self, t: float) -> float:
        """Share of the rate its GPUs consume batches at that the host delivers them."""
        active = [f.slowdown for f in self.faults if f.active(t)]
        return 1.0 - max(active) if active else 1.0

    def cpu_utilization(self, t: float) -> float:
        return STARVED_CPU if any(f.active(t) for f in self.faults) else TRAINING_CPU

    def cpu_times(self) -> CpuTimes:
        """Cumulative CPU seconds from the node's start to the clock's now."""
        now = self._clock()
        busy = starved = 0.0
        cuts = sorted({t for f in self.faults for t in (f.since, f.until) if self._start < t < now})
        for t0, t1 in zip([self._start, *cuts], [*cuts, now], strict=True):
            utilization = self.cpu_utilization((t0 + t1) / 2)
            busy += utilization * (t1 - t0)
            if utilization == STARVED_CPU:
                starved += t1 - t0
        elapsed = max(0.0, now - self._start)
        iowait = IOWAIT_SHARE * starved
        user = 0.85 * busy
        return CpuTimes(
            user=CORES * user,
            system=CORES * (busy - user),
            idle=CORES * max(0.0, elapsed - busy - iowait),
            iowait=CORES * iowait,
        )
