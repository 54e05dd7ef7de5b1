"""Shared set-up for the simulator tests: a simulated library under the real pynvml, and
`simulate`, a whole simulated node with scenarios (for test_scenarios and test_repair)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pynvml
import pytest

from nvwatch.agent.config import parse_scenario
from nvwatch.agent.sources.bmc.reading import BmcReading, Module, SensorReading, Target
from nvwatch.agent.sources.infiniband import InfinibandPort, InfinibandSource
from nvwatch.sim.bmc.reader import SimulatedBmcReader
from nvwatch.sim.clock import ManualClock
from nvwatch.sim.node.node import SimulatedNode
from nvwatch.sim.nvml import SimulatedNvml, install, uninstall

THERMAL = (
    pynvml.nvmlClocksEventReasonSwThermalSlowdown | pynvml.nvmlClocksEventReasonHwThermalSlowdown
)
IDLE = pynvml.nvmlClocksEventReasonGpuIdle
POWER_CAP = pynvml.nvmlClocksEventReasonSwPowerCap
NODE = "dgx-h100"  # 8 GPUs on NVSwitch, ECC with row remapping, 8 InfiniBand ports
# the mixin's default congestion ratio, which the congestion scenario is built to exceed
CONGESTION_RATIO = 0.05
BMC_ADDRESS = "127.1.0.1"  # where the tests' readers find a node's BMC
BMC_MODULE = Module(
    name="default",
    user="admin",
    password="admin",
    privilege="admin",
    timeout_s=2.0,
    collectors=frozenset({"ipmi", "dcmi"}),
)


def handle(index: int) -> object:
    return pynvml.nvmlDeviceGetHandleByIndex(index)


@dataclass
class Run:
    node: SimulatedNode
    clock: ManualClock

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.node.tick()  # NVML follows the clock by itself; the sysfs files need a tick

    def read_bmc(self) -> BmcReading:
        """The node's BMC as the `bmc` source's reader gets it now."""
        reader = SimulatedBmcReader({BMC_ADDRESS: self.node}, sleep=lambda _: None)
        return reader.read(Target(BMC_ADDRESS), BMC_MODULE)

    def sensors(self) -> dict[str, SensorReading]:
        """The BMC's sensors now, by SDR name."""
        return {sensor.name: sensor for sensor in self.read_bmc().sensors}

    def ports(self) -> dict[str, InfinibandPort]:
        """The node's ports as the agent's InfiniBand source reads them now."""
        source = InfinibandSource(self.node.sysfs_root)
        try:
            sample = source.collect()
        finally:
            source.close()
        return {p.device: p for d in sample.devices for p in d.ports}


Simulate = Callable[..., Run]


@pytest.fixture
def simulate(tmp_path: Path) -> Iterator[Simulate]:
    """simulate("thermal-runaway@3", ...): a dgx-h100 node with those scenarios, its NVML
    installed under pynvml, its sysfs tree under tmp_path, at simulated time 0."""
    nodes: list[SimulatedNode] = []

    def make(*specs: str) -> Run:
        clock = ManualClock()
        node = SimulatedNode(
            NODE,
            [parse_scenario(s) for s in specs],
            clock=clock,
            sysfs_root=tmp_path / f"node{len(nodes)}",
        )
        nodes.append(node)
        install(node.nvml)
        pynvml.nvmlInit()
        return Run(node, clock)

    yield make
    for node in nodes:
        node.close()


@pytest.fixture(autouse=True)
def _restore_pynvml() -> Iterator[None]:
    # pynvml is process-global: never leave a simulated library behind for other tests
    yield
    uninstall()


def start(profile: str, **kwargs: object) -> tuple[SimulatedNvml, ManualClock]:
    """Install a simulated `profile` on a manual clock and initialise NVML on it."""
    clock = ManualClock()
    lib = SimulatedNvml(profile, clock=clock, **kwargs)  # type: ignore[arg-type]
    install(lib)
    pynvml.nvmlInit()
    return lib, clock
