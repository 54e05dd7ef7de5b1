"""The simulator, imported lazily and from wherever this checkout keeps it.

The simulator moved from `nvwatch.agent.sim` (agent/sim/) to `nvwatch.sim` (sim/); the
check, the importer and their tests ask for it here, by module name, so they run on
either layout and never load it on a real run's agent path. The layout is the one of
the checkout `nvwatch.agent` comes from: with several checkouts on one path (a worktree
beside an editable install), a name that resolves elsewhere would mix two versions.
"""

from __future__ import annotations

import importlib
from functools import cache
from pathlib import Path
from types import ModuleType


@cache
def sim_package() -> str:
    """ "nvwatch.agent.sim" where the agent's checkout has agent/sim/, else "nvwatch.sim"."""
    agent = importlib.import_module("nvwatch.agent")
    folder = Path(agent.__file__ or "").parent
    return "nvwatch.agent.sim" if (folder / "sim" / "__init__.py").exists() else "nvwatch.sim"


def sim_module(name: str = "") -> ModuleType:
    """`<simulator package>.<name>` (the package itself for "")."""
    package = sim_package()
    return importlib.import_module(f"{package}.{name}" if name else package)
