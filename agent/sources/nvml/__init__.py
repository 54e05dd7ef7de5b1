"""NVML source: GPUs, NVLink, XID events and GPM through pynvml (see source.py)."""

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
