"""Shared set-up for the simulator tests: a simulated library under the real pynvml."""

from __future__ import annotations

from collections.abc import Iterator

import pynvml
import pytest

from agent.sim.clock import ManualClock
from agent.sim.nvml import SimulatedNvml, install, uninstall


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
