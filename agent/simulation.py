"""The one door from the product to the simulator (nvwatch.sim).

A real node's agent never loads the simulator: everything here imports it at call time,
only for `--simulate PROFILE` and the `simulate` and `profiles` commands. No other module
of agent/, alerts/, dashboards/ or mixin/ imports nvwatch.sim
(tests/agent/test_import_boundary.py fails the build otherwise).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import click

from nvwatch.agent.config import AgentConfig
from nvwatch.agent.sources.bmc.reading import BmcReader, Module

# the logger of a simulated node's start-up banner (`doctor` prints that itself)
BANNER_LOGGER = "nvwatch.sim.runtime"


@contextlib.contextmanager
def simulated_node(config: AgentConfig) -> Iterator[AgentConfig]:
    """`config` with a live simulated node behind it (sim/runtime.py)."""
    from nvwatch.sim.runtime import simulated_node as run_node

    with run_node(config) as effective:
        yield effective


def command(name: str) -> click.Command:
    """The simulator's own commands: `simulate` (a group) and `profiles`."""
    from nvwatch.sim import commands

    return {"simulate": commands.simulate_group, "profiles": commands.profiles_command}[name]


def scenario_names() -> str:
    """The registered scenario names, for --help (from the registry, so never stale)."""
    from nvwatch.sim.scenario_names import known_scenarios

    return ", ".join(known_scenarios())


def workloads() -> frozenset[str]:
    """Scenarios that set what the GPUs run from the start (they take no from=)."""
    from nvwatch.sim.scenario_names import WORKLOAD_SCENARIOS

    return frozenset(WORKLOAD_SCENARIOS)


def default_onsets() -> dict[str, float]:
    """Each fault scenario's onset when no from= or --onset sets one, in seconds."""
    from nvwatch.sim.scenario_names import WORKLOAD_SCENARIOS, known_scenarios, onset

    return {name: onset(name) for name in known_scenarios() if name not in WORKLOAD_SCENARIOS}


def simulated_bmc() -> tuple[BmcReader, Module, str] | None:
    """Inside a `simulated_node` block: the simulated node's BMC for /probe (its reader,
    the built-in module `default` that reads every sensor and DCMI, and the BMC's address
    to give as `target=`); None outside one."""
    from nvwatch.sim.bmc.reader import SIMULATED_MODULE
    from nvwatch.sim.runtime import BMC_ADDRESS, bmc_reader

    reader = bmc_reader()
    return None if reader is None else (reader, SIMULATED_MODULE, BMC_ADDRESS)
