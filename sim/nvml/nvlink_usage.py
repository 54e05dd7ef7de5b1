"""NVLink usage and fabric calls beside the per-link state in `nvlink`: the deprecated
utilization counters and their control, the NVSwitch fabric registration, and the
Blackwell-era link info, bandwidth modes and telemetry.

Utilization counters exist on NVLink 1/2 (Pascal, Volta) only: from NVLink 3 (A100) the
driver answers NotSupported and points to the throughput field values, which the
simulator answers for every generation (`nvwatch.sim.nvml.fields`). On NVLink 1/2 both
counters count data bytes through the link, in KiB, as the field values do.
"""

from __future__ import annotations

from typing import Any

import pynvml

from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.nvml.abi import (
    ERROR_ARGUMENT_VERSION_MISMATCH,
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_SUPPORTED,
    KIB,
    SUCCESS,
    as_int,
    deref,
    set_out,
)
from nvwatch.sim.nvml.core import NvmlCore, device_call
from nvwatch.sim.nvml.nvlink import has_nvlink
from nvwatch.sim.nvml.unsupported import answers_not_supported, because

_LEGACY_COUNTER_GENERATIONS = (1, 2)
_COUNTERS = 2  # counter sets 0 and 1


def _legacy_check(gpu: SimulatedGpu, link: Any, counter: Any) -> int:
    if not has_nvlink(gpu) or gpu.model.nvlink_version not in _LEGACY_COUNTER_GENERATIONS:
        return ERROR_NOT_SUPPORTED
    if not 0 <= as_int(link) < len(gpu.links) or not 0 <= as_int(counter) < _COUNTERS:
        return ERROR_INVALID_ARGUMENT
    return SUCCESS


def on_fabric(gpu: SimulatedGpu) -> bool:
    """A Hopper GPU on NVSwitches registers with the fabric manager; NVML reports it."""
    switched = any(link.end.remote_type == "switch" for link in gpu.links)
    return gpu.model.architecture == "hopper" and switched


NVLINK_USAGE_NOT_SUPPORTED = because(
    "the multi-clique fabric info and the link info, bandwidth modes and telemetry are "
    "for NVLink 5 systems (Blackwell); the simulated generations answer NotSupported",
    "nvmlDeviceGetGpuFabricInfo_v4",
    "nvmlDeviceGetNvLinkInfo",
    "nvmlDeviceGetNvlinkBwMode",
    "nvmlDeviceGetNvlinkSupportedBwModes",
    "nvmlDeviceGetNvLinkTelemetrySamples_v1",
)


@answers_not_supported(NVLINK_USAGE_NOT_SUPPORTED)
class NvLinkUsageQueries(NvmlCore):
    @device_call
    def nvmlDeviceGetNvLinkUtilizationCounter(
        self, gpu: SimulatedGpu, link: Any, counter: Any, rx: Any, tx: Any
    ) -> int:
        check = _legacy_check(gpu, link, counter)
        if check == SUCCESS:
            state = gpu.links[as_int(link)]
            set_out(rx, int(state.rx_bytes) // KIB)
            set_out(tx, int(state.tx_bytes) // KIB)
        return check

    @device_call
    def nvmlDeviceGetNvLinkUtilizationControl(
        self, gpu: SimulatedGpu, link: Any, counter: Any, control: Any
    ) -> int:
        check = _legacy_check(gpu, link, counter)
        if check == SUCCESS:
            setting = deref(control)
            setting.units = pynvml.NVML_NVLINK_COUNTER_UNIT_BYTES
            setting.pktfilter = pynvml.NVML_NVLINK_COUNTER_PKTFILTER_ALL
        return check

    # --- NVSwitch fabric --------------------------------------------------------------

    @device_call
    def nvmlDeviceGetGpuFabricInfo(self, gpu: SimulatedGpu, info: Any) -> int:
        if not on_fabric(gpu):
            return ERROR_NOT_SUPPORTED
        _fill_fabric(deref(info))
        return SUCCESS

    @device_call
    def nvmlDeviceGetGpuFabricInfoV(self, gpu: SimulatedGpu, info: Any) -> int:
        fabric = deref(info)
        if fabric.version not in (pynvml.nvmlGpuFabricInfo_v2, pynvml.nvmlGpuFabricInfo_v3):
            return ERROR_ARGUMENT_VERSION_MISMATCH
        if not on_fabric(gpu):
            return ERROR_NOT_SUPPORTED
        _fill_fabric(fabric)
        fabric.healthMask = 0  # no degraded bandwidth, no route or configuration fault
        if hasattr(fabric, "healthSummary"):  # the v3 struct
            fabric.healthSummary = pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY
        return SUCCESS


def _fill_fabric(fabric: Any) -> None:
    """Registered with the in-box fabric manager: one clique, no multi-node cluster."""
    for i in range(len(fabric.clusterUuid)):
        fabric.clusterUuid[i] = 0
    fabric.status = SUCCESS
    fabric.cliqueId = 0
    fabric.state = pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
