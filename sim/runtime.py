"""A live simulated node behind a command's config: `--simulate PROFILE`.

Reached from the agent only through nvwatch.agent.simulation, so a real node's agent
never loads the simulator.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator

from nvwatch.agent.config import AgentConfig, ConfigError
from nvwatch.sim import nvml as sim_nvml
from nvwatch.sim.bmc.reader import SimulatedBmcReader
from nvwatch.sim.fleet.plan import bmc_address
from nvwatch.sim.node.node import PollGridClock, SimulatedNode, grid_step
from nvwatch.sim.node.process_file import ProcessFile
from nvwatch.sim.profiles import UnknownProfile

log = logging.getLogger(__name__)

# the BMC of the node `simulated_node` runs: one per process, as the pynvml it installs
_running_bmc: list[SimulatedBmcReader] = []


def bmc_reader() -> SimulatedBmcReader | None:
    """The reader of the running simulated node's BMC (at `BMC_ADDRESS`), None if none."""
    return _running_bmc[-1] if _running_bmc else None


BMC_ADDRESS = bmc_address(0)  # the lone node's BMC is where a fleet's first node's is


@contextlib.contextmanager
def simulated_node(config: AgentConfig) -> Iterator[AgentConfig]:
    """Yield `config` pointed at a running simulated node; stop it and remove its files
    on the way out, however the block ends."""
    if config.simulate is None:
        raise ConfigError("no profile to simulate: give --simulate PROFILE")
    if config.sysfs_root != AgentConfig().sysfs_root:
        # refused, not overridden in silence: the simulated node brings its own tree, and
        # one that agreed with its simulated GPUs could not come from a real root anyway
        raise ConfigError(
            f"--sysfs-root {config.sysfs_root} cannot be used with --simulate: the "
            "simulated node has its own sysfs tree (drop one of the two)"
        )
    try:
        clock = PollGridClock(grid_step(config.interval))
        # one agent, maybe watched with nvitop: real pids for the simulated job's workers
        node = SimulatedNode(
            config.simulate,
            config.scenarios,
            seed=config.seed,
            clock=clock,
            worker_processes=True,
            mig=config.mig,
        )
    except (UnknownProfile, ValueError) as exc:
        raise ConfigError(str(exc)) from exc
    if config.sim_process_file is not None:
        node.nvml.process_file = ProcessFile(config.sim_process_file, node.profile.gpu_count)
    # a shell left with NVWATCH_SIMULATE set runs this too: say it where people look
    log.warning(
        "SIMULATED node %s (--simulate or NVWATCH_SIMULATE): not real hardware; every GPU "
        'served is made up, and /metrics carries nvwatch_agent_simulated{profile="%s"} 1',
        config.simulate,
        config.simulate,
    )
    sim_nvml.install(node.nvml)
    # the tree is rewritten only for a reader: once per poll, and never without the
    # infiniband source (the NVML side integrates lazily, on each call)
    node.start(interval=config.interval, write_tree="infiniband" in config.sources)
    clock.arm()  # the agent's first poll comes next: the grid centres on it
    _running_bmc.append(SimulatedBmcReader({BMC_ADDRESS: node}))
    try:
        # the node's kernel log carries its XIDs, unless --kmsg-path names another
        kmsg_path = config.kmsg_path or node.kmsg_path
        yield dataclasses.replace(config, sysfs_root=node.sysfs_root, kmsg_path=kmsg_path)
    finally:
        _running_bmc.pop()
        node.close()
        sim_nvml.uninstall()
