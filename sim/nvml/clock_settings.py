"""Clock and performance settings: application clocks, boost, supported clocks, P-states,
clock offsets, dynamic P-state utilization, power-management modes.

Data-centre boards run at their application clocks (the maximum here: DGX systems ship
them so) with clock changes root-only; GeForce boards have no application clocks.
"""

from __future__ import annotations

from typing import Any

import pynvml

from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.nvml.abi import (
    ERROR_INSUFFICIENT_SIZE,
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_FOUND,
    ERROR_NOT_SUPPORTED,
    SUCCESS,
    as_int,
    deref,
    set_out,
)
from nvwatch.sim.nvml.core import NvmlCore, device_call
from nvwatch.sim.nvml.unsupported import answers_not_supported, because

_IDLE_PSTATE = 8
_GRAPHICS_STEP_MHZ = 15  # the driver's supported-clock table moves in ~15 MHz steps
# dynamic P-state domains (nvmlGpuDynamicPstatesInfo_t.utilization[]): GPU, FB, VID, BUS
_DOMAIN_THRESHOLDS = ((30, 60), (30, 60), (15, 30), (15, 30))  # (decrease, increase) %


def _clock_max(gpu: SimulatedGpu, clock_type: int) -> int | None:
    if clock_type in (pynvml.NVML_CLOCK_GRAPHICS, pynvml.NVML_CLOCK_SM):
        return gpu.model.max_sm_clock_mhz
    if clock_type == pynvml.NVML_CLOCK_MEM:
        return gpu.model.max_memory_clock_mhz
    if clock_type == pynvml.NVML_CLOCK_VIDEO:
        return gpu.max_video_clock_mhz
    return None


# usable PCIe bandwidth per lane and direction by generation, bytes/s (after encoding)
_PCIE_LANE_BYTES = {1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9}


def _pcie_share(gpu: SimulatedGpu) -> float:
    """How busy the PCIe link is: traffic over both directions' capacity."""
    per_lane = _PCIE_LANE_BYTES.get(gpu.pcie_generation_current, 0.985e9)
    capacity = 2 * per_lane * gpu.pcie_width_current
    return min(1.0, (gpu.pcie_tx_rate + gpu.pcie_rx_rate) / capacity)


def supported_graphics_clocks(gpu: SimulatedGpu) -> list[int]:
    """The graphics clocks the board can be set to, highest first."""
    top, low = gpu.model.max_sm_clock_mhz, gpu.model.idle_sm_clock_mhz
    return list(range(top, low - 1, -_GRAPHICS_STEP_MHZ))


def _write_list(values: list[int], count: Any, array: Any) -> int:
    if array is None or as_int(deref(count)) < len(values):
        set_out(count, len(values))
        return ERROR_INSUFFICIENT_SIZE if values else SUCCESS
    target = deref(array)
    for i, value in enumerate(values):
        target[i] = value
    set_out(count, len(values))
    return SUCCESS


CLOCK_SETTINGS_NOT_SUPPORTED = {
    **because("auto boost control ended with Kepler", "nvmlDeviceGetAutoBoostedClocksEnabled"),
    **because(
        "clock offsets and performance levels belong to the overclocking interface that "
        "data-centre boards lack and GeForce exposes only to X with Coolbits set",
        "nvmlDeviceGetGpcClkVfOffset",
        "nvmlDeviceGetMemClkVfOffset",
        "nvmlDeviceGetGpcClkMinMaxVfOffset",
        "nvmlDeviceGetMemClkMinMaxVfOffset",
        "nvmlDeviceGetClockOffsets",
        "nvmlDeviceGetPerformanceModes",
    ),
    **because(
        "clock monitors, current-frequency strings and PowerMizer are newer or mobile features",
        "nvmlDeviceGetCurrentClockFreqs",
        "nvmlDeviceGetClkMonStatus",
        "nvmlDeviceGetPowerMizerMode_v1",
    ),
}


@answers_not_supported(CLOCK_SETTINGS_NOT_SUPPORTED)
class ClockSettingQueries(NvmlCore):
    @device_call
    def nvmlDeviceGetApplicationsClock(self, gpu: SimulatedGpu, kind: Any, mhz: Any) -> int:
        return self._application_clock(gpu, kind, mhz)

    @device_call
    def nvmlDeviceGetDefaultApplicationsClock(self, gpu: SimulatedGpu, kind: Any, mhz: Any) -> int:
        return self._application_clock(gpu, kind, mhz)

    @device_call
    def nvmlDeviceGetMaxCustomerBoostClock(self, gpu: SimulatedGpu, kind: Any, mhz: Any) -> int:
        return self._application_clock(gpu, kind, mhz)

    def _application_clock(self, gpu: SimulatedGpu, kind: Any, mhz: Any) -> int:
        if gpu.model.fan:
            return ERROR_NOT_SUPPORTED
        value = _clock_max(gpu, as_int(kind))
        if value is None:
            return ERROR_INVALID_ARGUMENT
        set_out(mhz, value)
        return SUCCESS

    @device_call
    def nvmlDeviceGetSupportedMemoryClocks(self, gpu: SimulatedGpu, count: Any, clocks: Any) -> int:
        if gpu.model.fan:
            return ERROR_NOT_SUPPORTED
        return _write_list([gpu.model.max_memory_clock_mhz], count, clocks)

    @device_call
    def nvmlDeviceGetSupportedGraphicsClocks(
        self, gpu: SimulatedGpu, memory_mhz: Any, count: Any, clocks: Any
    ) -> int:
        if gpu.model.fan:
            return ERROR_NOT_SUPPORTED
        if as_int(memory_mhz) != gpu.model.max_memory_clock_mhz:
            return ERROR_NOT_FOUND  # not one of the supported memory clocks
        return _write_list(supported_graphics_clocks(gpu), count, clocks)

    @device_call
    def nvmlDeviceGetSupportedPerformanceStates(
        self, gpu: SimulatedGpu, pstates: Any, size: Any
    ) -> int:
        states = [0, _IDLE_PSTATE]
        slots = as_int(size) // 4  # bytes of nvmlPstates_t (an enum, 4 bytes)
        if slots < len(states):
            return ERROR_INSUFFICIENT_SIZE
        array = deref(pstates)
        for i in range(slots):
            array[i] = states[i] if i < len(states) else pynvml.NVML_PSTATE_UNKNOWN
        return SUCCESS

    @device_call
    def nvmlDeviceGetMinMaxClockOfPState(
        self, gpu: SimulatedGpu, kind: Any, pstate: Any, low: Any, high: Any
    ) -> int:
        state = as_int(pstate)
        top = _clock_max(gpu, as_int(kind))
        if top is None:
            return ERROR_INVALID_ARGUMENT
        if state not in (0, _IDLE_PSTATE):
            return ERROR_NOT_SUPPORTED
        model = gpu.model
        graphics = as_int(kind) in (pynvml.NVML_CLOCK_GRAPHICS, pynvml.NVML_CLOCK_SM)
        floor = model.idle_sm_clock_mhz if graphics else top
        set_out(low, floor)
        set_out(high, top if state == 0 else floor)
        return SUCCESS

    @device_call
    def nvmlDeviceGetPowerState(self, gpu: SimulatedGpu, pstate: Any) -> int:
        set_out(pstate, gpu.pstate)  # the deprecated name of GetPerformanceState
        return SUCCESS

    @device_call
    def nvmlDeviceGetPowerManagementMode(self, gpu: SimulatedGpu, mode: Any) -> int:
        set_out(mode, pynvml.NVML_FEATURE_ENABLED)  # every simulated board caps power
        return SUCCESS

    @device_call
    def nvmlDeviceGetAdaptiveClockInfoStatus(self, gpu: SimulatedGpu, status: Any) -> int:
        if gpu.model.architecture not in ("ampere", "hopper"):
            return ERROR_NOT_SUPPORTED
        set_out(status, pynvml.NVML_ADAPTIVE_CLOCKING_INFO_STATUS_ENABLED)
        return SUCCESS

    @device_call
    def nvmlDeviceGetDynamicPstatesInfo(self, gpu: SimulatedGpu, info: Any) -> int:
        pstates = deref(info)
        pstates.flags = 0
        busy = (gpu.utilization, gpu.memory_utilization, 0.0, _pcie_share(gpu))
        for slot, (share, (down, up)) in enumerate(zip(busy, _DOMAIN_THRESHOLDS, strict=True)):
            domain = pstates.utilization[slot]
            domain.bIsPresent = 1
            domain.percentage = round(100 * share)
            domain.incThreshold, domain.decThreshold = up, down
        for slot in range(len(busy), len(pstates.utilization)):
            pstates.utilization[slot].bIsPresent = 0
        return SUCCESS
