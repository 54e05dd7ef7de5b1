"""Power and energy, temperatures and fans, clocks, throttle reasons and violation time."""

from __future__ import annotations

from typing import Any

import pynvml

from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.gpu.state import REASON_SYNC_BOOST
from nvwatch.sim.nvml.abi import (
    ERROR_ARGUMENT_VERSION_MISMATCH,
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_SUPPORTED,
    SUCCESS,
    as_int,
    deref,
    set_out,
)
from nvwatch.sim.nvml.core import NvmlCore, device_call

_ALL_REASONS = 0x1FF  # GpuIdle .. DisplayClockSetting


def _temperature(gpu: SimulatedGpu, sensor: int) -> int | None:
    return round(gpu.temperature_c) if sensor == pynvml.NVML_TEMPERATURE_GPU else None


def _clock(gpu: SimulatedGpu, clock_type: int, maximum: bool) -> int | None:
    if clock_type in (pynvml.NVML_CLOCK_GRAPHICS, pynvml.NVML_CLOCK_SM):
        return gpu.model.max_sm_clock_mhz if maximum else gpu.sm_clock_mhz
    if clock_type == pynvml.NVML_CLOCK_MEM:
        return gpu.model.max_memory_clock_mhz if maximum else gpu.memory_clock_mhz
    if clock_type == pynvml.NVML_CLOCK_VIDEO:
        return gpu.max_video_clock_mhz if maximum else gpu.video_clock_mhz
    return None


def _supported_reasons(gpu: SimulatedGpu) -> int:
    # sync boost is a data-centre feature; consumer boards never report it
    return _ALL_REASONS & ~REASON_SYNC_BOOST if gpu.model.fan else _ALL_REASONS


class PowerQueries(NvmlCore):
    @device_call
    def nvmlDeviceGetPowerUsage(self, gpu: SimulatedGpu, power: Any) -> int:
        set_out(power, round(gpu.power_w * 1000))
        return SUCCESS

    @device_call
    def nvmlDeviceGetEnforcedPowerLimit(self, gpu: SimulatedGpu, limit: Any) -> int:
        set_out(limit, round(gpu.power_limit_w * 1000))
        return SUCCESS

    @device_call
    def nvmlDeviceGetPowerManagementLimit(self, gpu: SimulatedGpu, limit: Any) -> int:
        set_out(limit, round(gpu.power_limit_w * 1000))
        return SUCCESS

    @device_call
    def nvmlDeviceGetPowerManagementDefaultLimit(self, gpu: SimulatedGpu, limit: Any) -> int:
        set_out(limit, round(gpu.model.tdp_watts * 1000))
        return SUCCESS

    @device_call
    def nvmlDeviceGetPowerManagementLimitConstraints(
        self, gpu: SimulatedGpu, low: Any, high: Any
    ) -> int:
        set_out(low, round(gpu.model.min_power_limit_watts * 1000))
        set_out(high, round(gpu.model.max_power_limit_watts * 1000))
        return SUCCESS

    @device_call
    def nvmlDeviceGetTotalEnergyConsumption(self, gpu: SimulatedGpu, energy: Any) -> int:
        if not gpu.model.energy_counter:
            return ERROR_NOT_SUPPORTED
        set_out(energy, int(gpu.energy_mj))
        return SUCCESS

    @device_call
    def nvmlDeviceGetPerformanceState(self, gpu: SimulatedGpu, pstate: Any) -> int:
        set_out(pstate, gpu.pstate)
        return SUCCESS

    @device_call
    def nvmlDeviceGetViolationStatus(self, gpu: SimulatedGpu, policy: Any, violation: Any) -> int:
        if not gpu.model.violation_counters:
            return ERROR_NOT_SUPPORTED
        which = as_int(policy)
        if which >= pynvml.NVML_PERF_POLICY_COUNT:
            return ERROR_INVALID_ARGUMENT
        nanoseconds = {
            pynvml.NVML_PERF_POLICY_POWER: gpu.power_violation_ns,
            pynvml.NVML_PERF_POLICY_THERMAL: gpu.thermal_violation_ns,
            pynvml.NVML_PERF_POLICY_LOW_UTILIZATION: gpu.low_util_violation_ns,
        }.get(which, 0.0)
        info = deref(violation)
        info.referenceTime = self._timestamp_us()
        info.violationTime = int(nanoseconds)
        return SUCCESS


class ThermalQueries(NvmlCore):
    @device_call
    def nvmlDeviceGetTemperature(self, gpu: SimulatedGpu, sensor: Any, temp: Any) -> int:
        value = _temperature(gpu, as_int(sensor))
        if value is None:
            return ERROR_INVALID_ARGUMENT
        set_out(temp, value)
        return SUCCESS

    @device_call
    def nvmlDeviceGetTemperatureV(self, gpu: SimulatedGpu, temperature: Any) -> int:
        info = deref(temperature)
        if info.version != pynvml.nvmlTemperature_v1:
            return ERROR_ARGUMENT_VERSION_MISMATCH
        value = _temperature(gpu, int(info.sensorType))
        if value is None:
            return ERROR_INVALID_ARGUMENT
        info.temperature = value
        return SUCCESS

    @device_call
    def nvmlDeviceGetTemperatureThreshold(self, gpu: SimulatedGpu, kind: Any, temp: Any) -> int:
        model = gpu.model
        thresholds: dict[int, int | None] = {
            pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: model.temp_shutdown_c,
            pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: model.temp_slowdown_c,
            pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX: model.temp_memory_max_c,
            pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: model.temp_gpu_max_c,
        }
        which = as_int(kind)
        if which >= pynvml.NVML_TEMPERATURE_THRESHOLD_COUNT:
            return ERROR_INVALID_ARGUMENT
        value = thresholds.get(which)
        if value is None:
            return ERROR_NOT_SUPPORTED
        set_out(temp, value)
        return SUCCESS

    @device_call
    def nvmlDeviceGetFanSpeed(self, gpu: SimulatedGpu, speed: Any) -> int:
        if not gpu.model.fan:
            return ERROR_NOT_SUPPORTED
        set_out(speed, gpu.fan_percent)
        return SUCCESS

    @device_call
    def nvmlDeviceGetFanSpeed_v2(self, gpu: SimulatedGpu, fan: Any, speed: Any) -> int:
        if not gpu.model.fan:
            return ERROR_NOT_SUPPORTED
        if as_int(fan) != 0:
            return ERROR_INVALID_ARGUMENT
        set_out(speed, gpu.fan_percent)
        return SUCCESS

    @device_call
    def nvmlDeviceGetNumFans(self, gpu: SimulatedGpu, count: Any) -> int:
        if not gpu.model.fan:
            return ERROR_NOT_SUPPORTED
        set_out(count, 1)  # multi-fan GeForce coolers are driven as one fan
        return SUCCESS


class ClockQueries(NvmlCore):
    @device_call
    def nvmlDeviceGetClockInfo(self, gpu: SimulatedGpu, clock_type: Any, mhz: Any) -> int:
        value = _clock(gpu, as_int(clock_type), maximum=False)
        if value is None:
            return ERROR_INVALID_ARGUMENT
        set_out(mhz, value)
        return SUCCESS

    @device_call
    def nvmlDeviceGetMaxClockInfo(self, gpu: SimulatedGpu, clock_type: Any, mhz: Any) -> int:
        value = _clock(gpu, as_int(clock_type), maximum=True)
        if value is None:
            return ERROR_INVALID_ARGUMENT
        set_out(mhz, value)
        return SUCCESS

    @device_call
    def nvmlDeviceGetClock(
        self, gpu: SimulatedGpu, clock_type: Any, clock_id: Any, mhz: Any
    ) -> int:
        which = as_int(clock_id)
        if which >= pynvml.NVML_CLOCK_ID_COUNT:
            return ERROR_INVALID_ARGUMENT
        # application-clock targets and the boost max all sit at the board maximum
        maximum = which != pynvml.NVML_CLOCK_ID_CURRENT
        value = _clock(gpu, as_int(clock_type), maximum=maximum)
        if value is None:
            return ERROR_INVALID_ARGUMENT
        set_out(mhz, value)
        return SUCCESS

    @device_call
    def nvmlDeviceGetCurrentClocksEventReasons(self, gpu: SimulatedGpu, reasons: Any) -> int:
        set_out(reasons, gpu.reasons)
        return SUCCESS

    @device_call
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, gpu: SimulatedGpu, reasons: Any) -> int:
        set_out(reasons, gpu.reasons)
        return SUCCESS

    @device_call
    def nvmlDeviceGetSupportedClocksEventReasons(self, gpu: SimulatedGpu, reasons: Any) -> int:
        set_out(reasons, _supported_reasons(gpu))
        return SUCCESS

    @device_call
    def nvmlDeviceGetSupportedClocksThrottleReasons(self, gpu: SimulatedGpu, reasons: Any) -> int:
        set_out(reasons, _supported_reasons(gpu))
        return SUCCESS
