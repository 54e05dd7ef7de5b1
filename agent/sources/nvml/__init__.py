"""NVML source: GPUs, NVLink, XID events and GPM through pynvml (see source.py).

The package's names are imported when first used: its declaration (declaration.py) is read
by every command, and importing it must not load pynvml, which only the source needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nvwatch.agent.sources.nvml.samples import (
        GpuInfo,
        GpuSample,
        NvLinkSample,
        NvmlSample,
        ProcessSample,
    )
    from nvwatch.agent.sources.nvml.source import NvmlSource

__all__ = [
    "GpuInfo",
    "GpuSample",
    "NvLinkSample",
    "NvmlSample",
    "NvmlSource",
    "ProcessSample",
]

_MODULE_OF = {name: "samples" for name in __all__} | {"NvmlSource": "source"}


def __getattr__(name: str) -> object:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
