"""The simulator, imported lazily and from wherever this checkout keeps it.

The simulator is `nvwatch.sim` in the repository's layout and was `nvwatch.agent.sim`
before it moved; the check, the importer and their tests ask for it here, by module
name, so they run on either layout and never load it on a real run's agent path.
"""

from __future__ import annotations

import importlib
from types import ModuleType

_PACKAGES = ("nvwatch.sim", "nvwatch.agent.sim")


def sim_module(name: str = "") -> ModuleType:
    """`nvwatch.sim.<name>` (or the package itself for ""), from whichever layout exists."""
    last: ImportError | None = None
    for package in _PACKAGES:
        dotted = f"{package}.{name}" if name else package
        try:
            return importlib.import_module(dotted)
        except ModuleNotFoundError as exc:
            # only a missing package means "the other layout"; a missing module inside an
            # existing package is a real error
            if exc.name not in (package, *_parents(package)):
                raise
            last = exc
    raise ImportError(f"no simulator package ({' or '.join(_PACKAGES)})") from last


def _parents(dotted: str) -> tuple[str, ...]:
    parts = dotted.split(".")
    return tuple(".".join(parts[:i]) for i in range(1, len(parts)))
