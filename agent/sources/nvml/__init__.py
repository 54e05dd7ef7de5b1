"""NVML source: GPUs, NVLink, XID events and GPM through pynvml (see source.py)."""

from agent.sources.nvml.samples import (
    GpuInfo,
    GpuSample,
    NvLinkSample,
    NvmlSample,
    ProcessSample,
)
from agent.sources.nvml.source import NvmlSource

__all__ = [
    "GpuInfo",
    "GpuSample",
    "NvLinkSample",
    "NvmlSample",
    "NvmlSource",
    "ProcessSample",
]
