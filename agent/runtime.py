"""What a command needs before polling: the simulated node when --simulate is given.

Simulation is only ever switched on by an explicit flag; without it the agent talks to
the real driver, and a node whose driver is broken reports NVML down.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from nvwatch.agent.config import AgentConfig, ConfigError
from nvwatch.agent.simulation import simulated_node

log = logging.getLogger(__name__)


@contextlib.contextmanager
def runtime(config: AgentConfig) -> Iterator[AgentConfig]:
    """Yield the config to run with; with --simulate, a live simulated node behind it."""
    if config.simulate is None:
        if config.scenarios:
            raise ConfigError("--scenario needs --simulate PROFILE")
        if config.mig:
            raise ConfigError(
                "--mig needs --simulate PROFILE (real GPUs are partitioned with nvidia-smi mig)"
            )
        if config.sim_process_file is not None:
            raise ConfigError("--sim-process-file needs --simulate PROFILE")
        yield config
        return
    with simulated_node(config) as effective:
        yield effective
