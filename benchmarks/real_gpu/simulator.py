"""The simulator, imported when asked for: the check and the importer load it only in
--simulate mode, so a real run's agent path never does."""

from __future__ import annotations

import importlib
from types import ModuleType


def sim_module(name: str = "") -> ModuleType:
    """`nvwatch.sim.<name>` (the package itself for "")."""
    return importlib.import_module(f"nvwatch.sim.{name}" if name else "nvwatch.sim")
