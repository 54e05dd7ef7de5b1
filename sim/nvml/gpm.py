"""GPU Performance Monitoring (Hopper+): samples of activity integrals, metrics between two.

A sample records the GPU's cumulative `Activity`; a metric is the change between two
samples of the same GPU over the time between them, as the real GPM computes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pynvml

from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.gpu.state import Activity
from nvwatch.sim.nvml.abi import (
    ERROR_ARGUMENT_VERSION_MISMATCH,
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_SUPPORTED,
    MIB,
    SUCCESS,
    address_of,
    deref,
    write_pointer,
)
from nvwatch.sim.nvml.core import NvmlCore, device_call, lib_call


def _gpm_metric(metric_id: int, a: Activity, b: Activity) -> float | None:
    """A GPM metric over two samples, in NVML's units (percent, MiB/s)."""
    dt = b.time - a.time

    def percent(field: str) -> float:
        return 100.0 * float(getattr(b, field) - getattr(a, field)) / dt

    def mib_per_s(field: str) -> float:
        return float(getattr(b, field) - getattr(a, field)) / dt / MIB

    table: dict[int, Callable[[], float]] = {
        pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: lambda: percent("graphics_active"),
        pynvml.NVML_GPM_METRIC_SM_UTIL: lambda: percent("sm_active"),
        pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: lambda: percent("sm_occupancy"),
        pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: lambda: percent("tensor_active"),
        pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: lambda: percent("dram_active"),
        # non-tensor pipes of a mixed-precision training step: mostly FP32 housekeeping
        pynvml.NVML_GPM_METRIC_FP64_UTIL: lambda: 0.01 * percent("sm_active"),
        pynvml.NVML_GPM_METRIC_FP32_UTIL: lambda: 0.15 * percent("sm_active"),
        pynvml.NVML_GPM_METRIC_FP16_UTIL: lambda: 0.05 * percent("sm_active"),
        pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: lambda: mib_per_s("pcie_tx_bytes"),
        pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: lambda: mib_per_s("pcie_rx_bytes"),
        pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: lambda: mib_per_s("nvlink_tx_bytes"),
        pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: lambda: mib_per_s("nvlink_rx_bytes"),
    }
    compute = table.get(metric_id)
    return compute() if compute is not None else None


class GpmQueries(NvmlCore):
    @device_call
    def nvmlGpmQueryDeviceSupport(self, gpu: SimulatedGpu, support: Any) -> int:
        info = deref(support)
        if info.version != pynvml.NVML_GPM_SUPPORT_VERSION:
            return ERROR_ARGUMENT_VERSION_MISMATCH
        info.isSupportedDevice = 1 if gpu.model.gpm else 0
        return SUCCESS

    @lib_call
    def nvmlGpmSampleAlloc(self, sample: Any) -> int:
        address = next(self._next_object)
        self._gpm_samples[address] = None
        write_pointer(sample, address)
        return SUCCESS

    @lib_call
    def nvmlGpmSampleFree(self, sample: Any) -> int:
        if self._gpm_samples.pop(address_of(sample) or 0, 0) == 0:
            return ERROR_INVALID_ARGUMENT
        return SUCCESS

    @device_call
    def nvmlGpmSampleGet(self, gpu: SimulatedGpu, sample: Any) -> int:
        if not gpu.model.gpm:
            return ERROR_NOT_SUPPORTED
        address = address_of(sample) or 0
        if address not in self._gpm_samples:
            return ERROR_INVALID_ARGUMENT
        self._gpm_samples[address] = (gpu.index, gpu.activity())
        return SUCCESS

    @lib_call
    def nvmlGpmMetricsGet(self, metrics_get: Any) -> int:
        request = deref(metrics_get)
        if request.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            return ERROR_ARGUMENT_VERSION_MISMATCH
        first = self._gpm_samples.get(address_of(request.sample1) or 0)
        second = self._gpm_samples.get(address_of(request.sample2) or 0)
        if first is None or second is None or first[0] != second[0]:
            return ERROR_INVALID_ARGUMENT
        a, b = first[1], second[1]
        if b.time <= a.time or request.numMetrics > len(request.metrics):
            return ERROR_INVALID_ARGUMENT
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            value = _gpm_metric(int(metric.metricId), a, b)
            if value is None:
                metric.nvmlReturn = ERROR_NOT_SUPPORTED
            else:
                metric.nvmlReturn = SUCCESS
                metric.value = value
        return SUCCESS
