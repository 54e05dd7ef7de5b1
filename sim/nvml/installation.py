"""Putting a simulated library under pynvml, for one node or for a fleet in one process.

pynvml keeps the loaded library in `pynvml.nvmlLib` and caches each function it looks up
in `pynvml._nvmlGetFunctionPointer_cache`; both are private, so this is the one module
that touches them (pynvml's `libLoadLock` guards them, as in pynvml's own loader).

Fleet simulation runs many nodes in one process: `install(DispatchingNvml())` once, then
each node's threads `bind()` their own `SimulatedNvml` in their contextvars context.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

import pynvml

from nvwatch.sim.nvml.abi import ERROR_UNINITIALIZED, error_string
from nvwatch.sim.nvml.library import SimulatedNvml


def install(lib: object) -> None:
    """Make `lib` the library pynvml calls into (idempotent)."""
    with pynvml.libLoadLock:
        pynvml.nvmlLib = lib
        pynvml._nvmlGetFunctionPointer_cache.clear()


def uninstall() -> None:
    """Return pynvml to "library not loaded"; the next nvmlInit() looks for the real one."""
    with pynvml.libLoadLock:
        pynvml.nvmlLib = None
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._nvmlLib_refcount = 0


current_nvml: contextvars.ContextVar[object | None] = contextvars.ContextVar(
    "current_nvml", default=None
)


def bind(lib: object) -> None:
    """Route DispatchingNvml calls made in this contextvars context to `lib`."""
    current_nvml.set(lib)


class DispatchingNvml:
    """One library object for a whole simulated fleet in one process.

    pynvml caches the attribute it gets once per function name, so each attribute is a
    forwarder that looks up the library bound in the caller's context at call time.
    """

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if not name.startswith("nvml") or not callable(getattr(SimulatedNvml, name, None)):
            raise AttributeError(name)
        if name == "nvmlErrorString":
            return error_string

        def forward(*args: Any) -> Any:
            lib = current_nvml.get()
            if lib is None:
                return ERROR_UNINITIALIZED
            return getattr(lib, name)(*args)

        forward.__name__ = name
        return forward
