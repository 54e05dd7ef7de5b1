"""The simulator's commands: `nvwatch profiles` and `nvwatch simulate exec|fleet|history`.

The agent's command line loads this package only when one of them is asked for
(nvwatch.agent.simulation).
"""

from __future__ import annotations

# each module adds its command to the `simulate` group
from nvwatch.sim.commands import fleet, history, stragglers  # noqa: F401
from nvwatch.sim.commands.group import profiles_command, simulate_group

__all__ = ["profiles_command", "simulate_group"]
