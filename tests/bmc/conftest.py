"""Fixtures of the BMC tests: one real ipmi_sim (with DCMI) per test session and worker.

Tests that change its sensors use `bmc`, which puts every sensor back afterwards, so the
one BMC serves every test file; starting one costs little (~0.1 s) but stopping one
takes 1-2 s, and a few of those add up over a suite.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvwatch.agent.sources.bmc.reading import Module, Target
from tests.bmc.ipmi_sim import IpmiSim, build_dcmi_plugin, running_ipmi_sim
from tests.bmc.sim_sensors import PASSWORD, USER
from tests.conftest import require_tool

OPENIPMI_HEADER = Path("/usr/include/OpenIPMI/mcserv.h")  # from libopenipmi-dev


@pytest.fixture(scope="session")
def dcmi_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_tool("gcc")
    if not OPENIPMI_HEADER.exists():  # as require_tool does for a tool: CI fails, else skip
        message = f"libopenipmi-dev not installed: no {OPENIPMI_HEADER}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return build_dcmi_plugin(tmp_path_factory.mktemp("dcmi-plugin"))


@pytest.fixture(scope="session")
def shared_sim(tmp_path_factory: pytest.TempPathFactory, dcmi_plugin: Path) -> Iterator[IpmiSim]:
    require_tool("ipmi_sim")
    require_tool("sdrcomp")
    with running_ipmi_sim(tmp_path_factory.mktemp("ipmi-sim"), dcmi_plugin) as sim:
        yield sim


@pytest.fixture
def bmc(shared_sim: IpmiSim) -> Iterator[IpmiSim]:
    """The shared ipmi_sim, every sensor back at its initial value after the test."""
    try:
        yield shared_sim
    finally:
        shared_sim.reset()


@pytest.fixture
def target(bmc: IpmiSim) -> Target:
    return Target(bmc.host, bmc.port)


@pytest.fixture
def module() -> Module:
    """The module of the config the tests use: the simulated BMC's admin, both collectors."""
    return Module(
        name="sim",
        user=USER,
        password=PASSWORD,
        privilege="admin",
        timeout_s=5.0,
        collectors=frozenset({"ipmi", "dcmi"}),
    )
