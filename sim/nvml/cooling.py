"""Fans and thermal sensors beyond the basic readings: fan RPM, targets, limits, policy,
cooler, the margin to slowdown, and the thermal sensor table.

Only boards with their own fans (the GeForce cards) have a fan to report; SXM modules and
the passive T4 are cooled by the chassis, and NVML says NotSupported for them.
"""

from __future__ import annotations

from typing import Any

import pynvml

from nvwatch.sim.gpu.model import SimulatedGpu
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

FAN_MAX_RPM = 3000  # ~ a GeForce axial fan at 100 %
FAN_MIN_PERCENT = 30  # the fan curve's floor (gpu.model.fan_percent)
_SENSOR_MIN_C = -40  # the on-die sensor's rated range (~)


def _fan_check(gpu: SimulatedGpu, fan: int) -> int:
    if not gpu.model.fan:
        return ERROR_NOT_SUPPORTED
    return SUCCESS if fan == 0 else ERROR_INVALID_ARGUMENT  # one fan (see GetNumFans)


class CoolingQueries(NvmlCore):
    @device_call
    def nvmlDeviceGetFanSpeedRPM(self, gpu: SimulatedGpu, info: Any) -> int:
        speed = deref(info)
        if speed.version != pynvml.nvmlFanSpeedInfo_v1:
            return ERROR_ARGUMENT_VERSION_MISMATCH
        check = _fan_check(gpu, int(speed.fan))
        if check == SUCCESS:
            speed.speed = FAN_MAX_RPM * gpu.fan_percent // 100
        return check

    @device_call
    def nvmlDeviceGetTargetFanSpeed(self, gpu: SimulatedGpu, fan: Any, speed: Any) -> int:
        check = _fan_check(gpu, as_int(fan))
        if check == SUCCESS:
            set_out(speed, gpu.fan_percent)  # the curve's target, which the fan holds
        return check

    @device_call
    def nvmlDeviceGetMinMaxFanSpeed(self, gpu: SimulatedGpu, low: Any, high: Any) -> int:
        if not gpu.model.fan:
            return ERROR_NOT_SUPPORTED
        set_out(low, FAN_MIN_PERCENT)
        set_out(high, 100)
        return SUCCESS

    @device_call
    def nvmlDeviceGetFanControlPolicy_v2(self, gpu: SimulatedGpu, fan: Any, policy: Any) -> int:
        check = _fan_check(gpu, as_int(fan))
        if check == SUCCESS:
            set_out(policy, pynvml.NVML_FAN_POLICY_TEMPERATURE_CONTINOUS_SW)
        return check

    @device_call
    def nvmlDeviceGetCoolerInfo(self, gpu: SimulatedGpu, info: Any) -> int:
        cooler = deref(info)
        if cooler.version != pynvml.nvmlCoolerInfo_v1:
            return ERROR_ARGUMENT_VERSION_MISMATCH
        check = _fan_check(gpu, int(cooler.index))
        if check == SUCCESS:
            cooler.coolerControlType = pynvml.NVML_THERMAL_COOLER_SIGNAL_VARIABLE
            cooler.coolerTarget = pynvml.NVML_THERMAL_COOLER_TARGET_GPU_RELATED
        return check

    @device_call
    def nvmlDeviceGetMarginTemperature(self, gpu: SimulatedGpu, info: Any) -> int:
        margin = deref(info)
        if margin.version != pynvml.nvmlMarginTemperature_v1:
            return ERROR_ARGUMENT_VERSION_MISMATCH
        # degrees left before the slowdown threshold (negative once past it)
        margin.marginTemperature = gpu.model.temp_slowdown_c - round(gpu.temperature_c)
        return SUCCESS

    @device_call
    def nvmlDeviceGetThermalSettings(self, gpu: SimulatedGpu, sensor: Any, settings: Any) -> int:
        which = as_int(sensor)
        if which not in (0, pynvml.NVML_THERMAL_TARGET_ALL):
            return ERROR_INVALID_ARGUMENT  # one sensor: the GPU die
        table = deref(settings)
        table.count = 1
        entry = table.sensor[0]
        entry.controller = pynvml.NVML_THERMAL_CONTROLLER_GPU_INTERNAL
        entry.defaultMinTemp = _SENSOR_MIN_C
        entry.defaultMaxTemp = gpu.model.temp_shutdown_c
        entry.currentTemp = round(gpu.temperature_c)
        entry.target = pynvml.NVML_THERMAL_TARGET_GPU
        return SUCCESS
