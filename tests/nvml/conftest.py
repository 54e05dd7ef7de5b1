"""Fixtures: a simulated NVML installed under pynvml, always uninstalled afterwards."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import pytest

from nvwatch.agent.sources.nvml import NvmlSource
from nvwatch.sim import nvml as sim_nvml
from nvwatch.sim.clock import ManualClock

START = 1000.0


class Node:
    """One simulated node: its library, the clock it shares with the source, the source."""

    def __init__(self, lib: sim_nvml.SimulatedNvml, clock: ManualClock) -> None:
        self.lib = lib
        self.clock = clock
        self.sources: list[NvmlSource] = []

    def source(self, **kwargs: object) -> NvmlSource:
        source = NvmlSource(clock=self.clock, **kwargs)  # type: ignore[arg-type]
        self.sources.append(source)
        return source


NodeFactory = Callable[..., Node]


@pytest.fixture
def node() -> Iterator[NodeFactory]:
    """node(profile, scenario=None, gpu_scenarios=None, wrap=None) -> Node (installed)."""
    made: list[Node] = []

    def make(
        profile: str,
        scenario: str | None = None,
        gpu_scenarios: Mapping[int, str] | None = None,
        wrap: Callable[[sim_nvml.SimulatedNvml], object] | None = None,
        seed: int = 0,
    ) -> Node:
        clock = ManualClock(START)
        lib = sim_nvml.SimulatedNvml(
            profile, scenario=scenario, gpu_scenarios=gpu_scenarios, seed=seed, clock=clock
        )
        sim_nvml.install(wrap(lib) if wrap is not None else lib)
        made.append(Node(lib, clock))
        return made[-1]

    try:
        yield make
    finally:
        for n in made:
            for source in n.sources:
                source.close()
        sim_nvml.uninstall()
